"""The RAG methods of the paper's Table 3 as restrictions of one agent and one environment.

Every method runs :func:`neusym.query.agent.react.run_loop` (``auto``: the router of
:mod:`neusym.query.answer.focused`; both through :func:`neusym.query.ask.ask`) over the same
:class:`~neusym.query.agent.actions.Environment` and the same five actions; a :class:`Method` only says

- which action types the LLM may choose on its non-final turns (``actions``; the final turn always
  allows only ``GenerateAnswer``),
- how many LLM calls it gets (``max_turns``: 1 for the one-shot methods, 2 for the two-stage ones,
  ``None`` = ``settings.agent_max_turns`` for the iterative ones),
- which action parameters are fixed (``fixed_parameters``, e.g. Iterative Classic RAG always searches
  ``chunks.text_content`` in the all-MiniLM-L6-v2 collection),
- which retrieval is done *for* the LLM before its first turn (``context``: the question's top-k
  chunks, title + abstract, or the full text up to a token budget). These injected actions are
  ordinary actions executed by :func:`~neusym.query.agent.actions.execute_action`; they appear in the
  trajectory with ``fixed=True`` and cost no LLM call,
- which prompt parts the model sees (system text, hints, examples, database and/or vectorstore schema).

Methods (paper §3.2 and App. C, F.2.1):

========================= ================================================================= ======
name                      restriction                                                       calls
========================= ================================================================= ======
``auto``                  routes each question: SQL templates, paper search, focused reading 0-2 (+1)
                          (one LLM call) or ``neusym``; verifies and cites (:mod:`.auto`)
``neusym``                all five actions, multi-turn (NeuSym-RAG)                          ≤ 20
``question-only``         no retrieval: the question alone                                   1
``title-abstract``        no retrieval action: title + abstract of the question's papers     1
``full-text``             no retrieval action: the papers' page texts, cut at a token budget 1
``classic-rag``           fixed RetrieveFromVectorstore(question, MiniLM, chunks.text_content, 1
                          top-k, filter = question's papers), then GenerateAnswer
``iterative-classic-rag`` only RetrieveFromVectorstore over chunks.text_content (MiniLM),     ≤ 20
                          the LLM chooses query, filter and limit; multi-turn
``two-stage-neu``         turn 1: one RetrieveFromVectorstore; turn 2: GenerateAnswer        2
``iterative-neu``         RetrieveFromVectorstore, CalculateExpr, ViewImage; multi-turn      ≤ 20
``two-stage-sym``         turn 1: one RetrieveFromDatabase; turn 2: GenerateAnswer           2
``iterative-sym``         RetrieveFromDatabase, CalculateExpr, ViewImage; multi-turn         ≤ 20
``two-stage-hybrid``      turn 1: one RetrieveFromVectorstore or RetrieveFromDatabase;       2
                          turn 2: GenerateAnswer (the paper's Hybrid-RAG)
========================= ================================================================= ======

The injected context's token budget is ``settings.eval_context_max_tokens`` (the paper's 5k cutoff),
split evenly over the question's papers for ``full-text``; ``classic-rag`` retrieves
``settings.eval_classic_rag_top_k`` chunks (paper: 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from neusym.query.agent.actions import ACTION_TYPES, Action
from neusym.encode import DENSE_COLLECTION  # all-MiniLM-L6-v2, the paper's embedding model of Classic RAG
from neusym.errors import NeusymError

CONTEXT_KINDS = ("chunks", "title-abstract", "full-text")


class MethodError(NeusymError):
    """An unknown method name, or a method that cannot run in this environment (e.g. no vectorstore)."""


@dataclass(frozen=True)
class Method:
    """One RAG method as a restriction of the NeuSym-RAG agent (see the module docstring).

    ``actions``: action types the LLM may choose on non-final turns (GenerateAnswer included for
    the iterative methods, left out for the two-stage ones so turn 1 must retrieve); an empty tuple
    means one-shot (the only LLM call is the final GenerateAnswer turn). ``max_turns``: LLM calls,
    ``None`` = ``settings.agent_max_turns``. ``fixed_parameters``: {action type: {parameter: value}}
    the LLM cannot change (the JSON schema pins them; other values are refused). ``context``: one of
    :data:`CONTEXT_KINDS` or None. ``system`` / ``hints``: prompt files under ``neusym/prompts``
    (``hints`` None = no hints). ``framework``: include the multi-turn interaction section.
    ``examples``: include the few-shot examples whose actions are all allowed. ``paper_ids_in_prompt``:
    name the question's papers in the task prompt (False only for question-only).
    """

    name: str
    summary: str
    actions: tuple[str, ...]
    max_turns: int | None = None
    fixed_parameters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    context: str | None = None
    system: str = "agent_system.md"
    hints: str | None = "agent_hints.md"
    framework: bool = True
    examples: bool = True
    paper_ids_in_prompt: bool = True

    def __post_init__(self) -> None:
        unknown = [a for a in self.actions if a not in ACTION_TYPES]
        if unknown:
            raise ValueError(f"method {self.name}: unknown action types {unknown}")
        if self.context is not None and self.context not in CONTEXT_KINDS:
            raise ValueError(f"method {self.name}: context must be one of {CONTEXT_KINDS}, got {self.context!r}")

    @property
    def one_shot(self) -> bool:
        """True when the LLM only answers (no retrieval action of its own)."""
        return not self.actions

    @property
    def uses_database(self) -> bool:
        """The LLM may query the database (its prompt shows the [Database Schema])."""
        return "RetrieveFromDatabase" in self.actions

    @property
    def uses_vectorstore(self) -> bool:
        """The LLM may search the vectorstore (its prompt shows the [Vectorstore Schema])."""
        return "RetrieveFromVectorstore" in self.actions

    @property
    def needs_vectorstore(self) -> bool:
        """The method cannot run without the vectorstore (its own searches or injected chunks)."""
        return self.uses_vectorstore or self.context == "chunks"

    def answer_types(self, *, vectorstore: bool = True) -> tuple[str, ...]:
        """Action types allowed on non-final turns, in :data:`ACTION_TYPES` order; the
        vectorstore action is dropped when ``vectorstore`` is False."""
        return tuple(a for a in ACTION_TYPES if a in self.actions and (vectorstore or a != "RetrieveFromVectorstore"))

    def prompt_types(self) -> tuple[str, ...]:
        """Action types described in the prompt: the method's actions plus GenerateAnswer."""
        return tuple(a for a in ACTION_TYPES if a in self.actions or a == "GenerateAnswer")

    def check_fixed(self, action: Action) -> str | None:
        """Why ``action`` violates the fixed parameters of this method, or None when it does not."""
        fixed = self.fixed_parameters.get(action.action_type, {})
        for name, value in fixed.items():
            if action.parameters.get(name) != value:
                return (
                    f"{action.action_type}: method {self.name} fixes {name} to {value!r}, "
                    f"got {action.parameters.get(name)!r}"
                )
        return None


_ITERATIVE_NEU = ("RetrieveFromVectorstore", "CalculateExpr", "ViewImage", "GenerateAnswer")
_ITERATIVE_SYM = ("RetrieveFromDatabase", "CalculateExpr", "ViewImage", "GenerateAnswer")
_ONE_SHOT = dict(max_turns=1, system="method_context.md", hints=None, framework=False, examples=False)
_TWO_STAGE = dict(max_turns=2, system="method_two_stage.md", framework=False)

METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("neusym", "NeuSym-RAG: all five actions over the database and the vectorstore, multi-turn", ACTION_TYPES),
        Method("auto", "router: SQL templates, paper search, focused reading (one LLM call) or the NeuSym-RAG loop, "
               "with verification and citations (neusym/query/answer/focused.py)", ACTION_TYPES),
        Method(
            "question-only",
            "no retrieval: the LLM answers from the question alone",
            (),
            **{**_ONE_SHOT, "system": "method_question_only.md"},
            paper_ids_in_prompt=False,
        ),
        Method("title-abstract", "title and abstract of the question's papers as context, one answer turn", (),
               context="title-abstract", **_ONE_SHOT),
        Method("full-text", "page texts of the question's papers cut at settings.eval_context_max_tokens, one answer turn",
               (), context="full-text", **_ONE_SHOT),
        Method("classic-rag", "top-k MiniLM chunks retrieved with the question as query, one answer turn", (),
               context="chunks", **_ONE_SHOT),
        Method(
            "iterative-classic-rag",
            "RetrieveFromVectorstore over chunks.text_content (MiniLM) only, multi-turn",
            ("RetrieveFromVectorstore", "GenerateAnswer"),
            fixed_parameters={
                "RetrieveFromVectorstore": {
                    "collection_name": DENSE_COLLECTION,
                    "table_name": "chunks",
                    "column_name": "text_content",
                }
            },
            system="method_neu.md",
            hints="method_hints_classic.md",
        ),
        Method("two-stage-neu", "one RetrieveFromVectorstore, then GenerateAnswer", ("RetrieveFromVectorstore",),
               hints="method_hints_neu.md", **_TWO_STAGE),
        Method("iterative-neu", "RetrieveFromVectorstore, CalculateExpr, ViewImage, multi-turn (no database)",
               _ITERATIVE_NEU, system="method_neu.md", hints="method_hints_neu.md"),
        Method("two-stage-sym", "one RetrieveFromDatabase (SQL), then GenerateAnswer", ("RetrieveFromDatabase",),
               hints="method_hints_sym.md", **_TWO_STAGE),
        Method("iterative-sym", "RetrieveFromDatabase, CalculateExpr, ViewImage, multi-turn (no vectorstore)",
               _ITERATIVE_SYM, system="method_sym.md", hints="method_hints_sym.md"),
        Method("two-stage-hybrid", "one RetrieveFromVectorstore or RetrieveFromDatabase, then GenerateAnswer",
               ("RetrieveFromDatabase", "RetrieveFromVectorstore"), **_TWO_STAGE),
    )
}
"""Every method by name; :data:`DEFAULT_METHOD` is the default."""

DEFAULT_METHOD = "auto"
"""The method of every entry point when none is named (``neusym ask``, ``neusym eval run``, ``POST
/ask``): the router with verification and citations. The one place this default is set."""


def get_method(method: "Method | str | None") -> Method:
    """The :class:`Method` for a name (``None`` = :data:`DEFAULT_METHOD`, ``auto``) or the object itself.

    Raises :class:`MethodError` for an unknown name, listing the valid ones.
    """
    if method is None:
        return METHODS[DEFAULT_METHOD]
    if isinstance(method, Method):
        return method
    found = METHODS.get(str(method).strip().lower())
    if found is None:
        raise MethodError(f"unknown method {method!r}; valid methods: {', '.join(METHODS)}")
    return found


def _quoted_ids(paper_ids: list[str]) -> str:
    return ", ".join(f"'{pid}'" for pid in paper_ids)


def context_actions(
    method: Method, question: str, paper_ids: list[str] | None, *, top_k: int, max_tokens: int
) -> list[tuple[Action, int]]:
    """The retrievals ``method`` performs for the LLM before its first turn, with the observation
    budget (tokens) of each.

    ``paper_ids``: the question's papers as ``metadata.paper_id`` UUID strings (already resolved);
    ``top_k``: chunks for ``classic-rag``; ``max_tokens``: total context budget (``full-text``
    splits it evenly over the papers). Returns ``[]`` for methods without context, and for
    ``title-abstract`` / ``full-text`` when the question names no paper (paper-retrieval questions:
    there is nothing to inline, so these degrade to question-only).
    """
    ids = list(dict.fromkeys(paper_ids or []))
    if method.context == "chunks":
        flt = ""
        if len(ids) == 1:
            flt = f"paper_id == '{ids[0]}'"
        elif ids:
            flt = f"paper_id in [{_quoted_ids(ids)}]"
        params = {
            "query": question.strip(),
            "collection_name": DENSE_COLLECTION,
            "table_name": "chunks",
            "column_name": "text_content",
            "filter": flt,
            "limit": int(top_k),
        }
        return [(Action("RetrieveFromVectorstore", params), int(max_tokens))]
    if method.context == "title-abstract" and ids:
        sql = f"SELECT paper_id, title, abstract FROM metadata WHERE paper_id IN ({_quoted_ids(ids)}) ORDER BY title"
        return [(Action("RetrieveFromDatabase", {"sql": sql}), int(max_tokens))]
    if method.context == "full-text" and ids:
        budget = max(int(max_tokens) // len(ids), 200)
        return [
            (
                Action(
                    "RetrieveFromDatabase",
                    {"sql": f"SELECT page_number, page_content FROM pages WHERE ref_paper_id = '{pid}' ORDER BY page_number"},
                ),
                budget,
            )
            for pid in ids
        ]
    return []


__all__ = [
    "CONTEXT_KINDS",
    "DEFAULT_METHOD",
    "DENSE_COLLECTION",
    "METHODS",
    "Method",
    "MethodError",
    "context_actions",
    "get_method",
]
