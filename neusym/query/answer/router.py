"""Method ``auto``'s router: answer routes as objects in one ordered registry.

A question's facts are computed once (:func:`question_facts`: cheap SymRAG features, the papers it
is about, its symbolic intent, quoted titles that name no paper of the corpus). Each route in
:data:`ROUTES` says whether it takes the question (:meth:`Route.decide`, with the reason); the first
that does answers it (:meth:`Route.answer`). When none does, one constrained LLM call picks between
paper search and the agent loop (the router is given a way to get the LLM and asks for it only
then). A route that cannot answer after all (a symbolic template finds no such section) hands the
question to its :meth:`Route.fallback`.

Adding a route: one class with ``name``, ``decide``, ``answer`` and ``fallback``, placed in
:data:`ROUTES` where it should be asked.

The routes (:mod:`neusym.query.answer.focused` holds how focused reading and paper search answer):

============== ===================================================================================
``symbolic``   a quoted title that names no paper of the corpus; metadata and aggregate questions
               compiled to SQL templates (:mod:`neusym.query.answer.symbolic`); no LLM; a template
               answer without the shape the answer format asks for falls back to ``focused``
``paper_search`` "which paper / find the work that ...": the paper index; no LLM
``focused``    the text, tables, figures, formulas of one or several given or named papers; one LLM
               call on their best excerpts (+ a table choice, + a repair)
``agent``      questions that name no paper and do not ask for one: the NeuSym-RAG loop
============== ===================================================================================
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from neusym.errors import NeusymError
from neusym.llm.chat import make_llm
from neusym.query.answer.answer_format import conform
from neusym.query.answer.citations import citations_for
from neusym.query.answer.cues import (
    ENTITY as _ENTITY,
    MODALITY_FIGURE,
    MODALITY_FORMULA,
    MODALITY_TABLE,
    PAPER_SEARCH as _PAPER_CUE,
    TITLE_FORMAT as _TITLE_FORMAT,
)
from neusym.query.answer.focused import answer_focused
from neusym.query.answer.paper_search import answer_paper_search
from neusym.query.answer.results import AgentResult, Step
from neusym.query.answer.symbolic import (
    Intent,
    answer_intent,
    paper_catalog,
    parse_intent,
    render_answer,
    resolve_papers,
    unknown_titles,
)
from neusym.query.answer.verify import Check, Verification, verify
from neusym.telemetry import phase

logger = logging.getLogger(__name__)

_MODALITY = {"table": MODALITY_TABLE, "figure": MODALITY_FIGURE, "formula": MODALITY_FORMULA}



# ------------------------------------------------------------------------------------------ routing
_UNSET: Any = object()


def features(question: str, paper_ids: list[str] | None, answer_format: str | None, *, intent: Any = _UNSET) -> dict:
    """SymRAG-style cheap features of a question (no model): sizes, entity count and cue flags.
    ``intent``: the question's :func:`neusym.query.answer.symbolic.parse_intent` when the caller has it."""
    q = " ".join((question or "").split())
    if intent is _UNSET:
        intent = parse_intent(q)
    return {
        "tokens": len(q.split()),
        "entities": len(_ENTITY.findall(question or "")),
        "papers_given": len(paper_ids or []),
        "paper_search_cue": bool(_PAPER_CUE.search(q)),
        "title_format": bool(_TITLE_FORMAT.search(answer_format or "")),
        "modality": [m for m, rx in _MODALITY.items() if rx.search(q)],
        "symbolic_intent": intent.kind if intent else None,
    }


_ROUTE_SCHEMA = {
    "type": "object",
    "properties": {"route": {"type": "string", "enum": ["find_paper", "one_paper_detail", "several_papers_or_open"]}},
    "required": ["route"],
    "additionalProperties": False,
}


def llm_route(question: str, answer_format: str | None, llm: Any) -> str:
    prompt = ("Classify the question about AI research papers.\n"
              "find_paper: the answer is the title of a paper to be found.\n"
              "one_paper_detail: a detail of one specific paper.\n"
              "several_papers_or_open: anything else.\n"
              f"[Question]: {question}\n[Answer Format]: {answer_format or '-'}")
    try:
        reply = llm.chat([{"role": "user", "content": prompt}], json_schema=_ROUTE_SCHEMA, max_tokens=20)
        return json.loads(reply.text).get("route", "several_papers_or_open")
    except (NeusymError, ValueError, AttributeError):
        return "several_papers_or_open"


# ------------------------------------------------------------------------------------ facts
@dataclass
class Facts:
    """What the router knows about a question, computed once (:func:`question_facts`).

    ``features``: :func:`neusym.query.answer.focused.features` plus ``papers_resolved``; ``papers``:
    (paper_id, title) of the papers given or named; ``intent``: the symbolic intent
    (:func:`neusym.query.answer.symbolic.parse_intent`) or None; ``missing``: quoted titles that name
    no paper of the corpus (only looked for when no paper is given)."""

    question: str
    paper_ids: list[str] | None
    answer_format: str | None
    conferences: list[str] | None
    features: dict
    papers: list[tuple[str, str]]
    intent: Intent | None
    missing: list[str] = field(default_factory=list)


def question_facts(question: str, *, paper_ids: list[str] | None, answer_format: str | None, env: Any,
                   conferences: list[str] | None = None) -> Facts:
    """The :class:`Facts` of ``question`` read against ``env``'s corpus (no LLM). When no paper is
    given or named and the corpus holds one paper, the question is about that paper (a question on
    "the method this paper proposes" is a content question, never a paper search)."""
    intent = parse_intent(question)
    f = features(question, paper_ids, answer_format, intent=intent)
    papers = resolve_papers(question, paper_ids, env)
    if not papers and not paper_ids:
        catalog = paper_catalog(env)
        if len(catalog) == 1:  # the only paper in scope: "this paper" can only be that one
            papers = [(catalog[0][0], catalog[0][1])]
            f["only_paper_in_corpus"] = True
    f["papers_resolved"] = len(papers)
    return Facts(question, paper_ids, answer_format, conferences, f, papers, intent,
                 [] if paper_ids else unknown_titles(question, env))


@dataclass
class RouteDecision:
    """The chosen ``route`` (its name), the ``features`` behind it, the ``reason``, the papers the
    question is about and the symbolic ``intent`` (when there is one); ``llm_used`` when the
    tie-break LLM ran."""

    route: str
    features: dict
    reason: str
    papers: list[tuple[str, str]]
    intent: Intent | None = None
    llm_used: bool = False
    chosen: Any = field(default=None, repr=False, compare=False)
    """The :class:`Route` object that answers (the route of that name for an LLM decision)."""


@dataclass
class Run:
    """What a route answers with: the settings, the environment, the LLM (made on first use),
    the result being built and the step recorder (which also streams each step to ``on_step``)."""

    settings: Any
    env: Any
    get_llm: Callable[[], Any]
    result: AgentResult
    add_step: Callable[[Step], None]
    on_step: Callable[[Step], None] | None = None
    agent_loop: Callable[..., AgentResult] | None = None
    """The NeuSym-RAG loop the ``agent`` route runs (:func:`neusym.query.agent.react.run_loop`, given by
    :func:`neusym.query.ask.ask`: the agent package stands on this one, not the reverse)."""


# ------------------------------------------------------------------------------------ routes
class Route(Protocol):
    """One answer route."""

    name: str
    """What ``AgentResult.route`` reports."""

    def decide(self, facts: Facts) -> str | None:
        """The reason this route takes the question, or None."""

    def answer(self, facts: Facts, decision: RouteDecision, run: Run) -> AgentResult | None:
        """The answer, or None when the route cannot answer after all (then :meth:`fallback`)."""

    def fallback(self, facts: Facts) -> str:
        """The name of the route that answers when this one cannot."""


class MissingPaperRoute:
    """A quoted title that names no paper of the corpus: said so, without the LLM."""

    name = "missing_paper"

    def decide(self, facts: Facts) -> str | None:
        return f"names a paper that is not in the corpus: '{facts.missing[0]}'" if facts.missing else None

    def intent(self, facts: Facts) -> Intent:
        return Intent("missing_paper", missing=facts.missing[0])

    def answer(self, facts: Facts, decision: RouteDecision, run: Run) -> AgentResult:
        title = decision.intent.missing
        result = run.result
        result.answer = f"No paper titled '{title}' is in the corpus."
        run.add_step(Step(thought=result.answer, action="RetrieveFromDatabase",
                          arguments={"sql": "SELECT title FROM metadata"}, observation=result.answer, fixed=True))
        result.verification = Verification("pass", [Check(title, "title", True, "no title in metadata.title "
                                                                                "contains it")],
                                           basis="computed").to_dict()
        return result

    def fallback(self, facts: Facts) -> str:
        return "agent"


class PaperSearchRoute:
    """"Which paper / is there work on ...": the paper index with filters from the question."""

    name = "paper_search"

    def decide(self, facts: Facts) -> str | None:
        f = facts.features
        if not facts.paper_ids and (f["paper_search_cue"] or (facts.conferences and f["title_format"])):
            return "asks for a paper, none given"
        return None

    def answer(self, facts: Facts, decision: RouteDecision, run: Run) -> AgentResult:
        return answer_paper_search(facts.question, facts.conferences, run.env, run.settings, run.result, run.add_step)

    def fallback(self, facts: Facts) -> str:
        return "agent"


class SymbolicRoute:
    """Metadata and aggregate questions about the papers named: SQL templates, no LLM."""

    name = "symbolic"

    def decide(self, facts: Facts) -> str | None:
        intent, n = facts.intent, len(facts.papers)
        if intent is None:
            return None
        if n == 1:
            return f"metadata/aggregate intent '{intent.kind}' about one paper"
        return None

    def answer(self, facts: Facts, decision: RouteDecision, run: Run) -> AgentResult | None:
        intent, env, result = decision.intent, run.env, run.result
        with phase("retrieval"):
            sym = answer_intent(intent, decision.papers[0], env, facts.answer_format)
        if sym is None:
            return None
        shaped = conform(sym.answer, facts.answer_format)
        fits = shaped.ok is not False  # else the template answered part of the question, or another one
        thought = sym.explanation + ("" if fits else f" — the template's answer {render_answer(sym.answer)} "
                                     f"{shaped.detail}: it does not answer the whole question")
        run.add_step(Step(thought=thought, action="RetrieveFromDatabase",
                          arguments={"sql": " ; ".join(sym.sql)}, observation=sym.explanation, fixed=True))
        if not fits:  # read the paper(s) instead (fallback)
            return None
        result.answer = sym.answer
        with phase("verification"):
            result.verification = verify(render_answer(sym.answer), [], symbolic_sql=sym.sql).to_dict()
        result.citations = [c.to_dict() for c in citations_for(env, sym.cells, result.answer)]
        return result

    def fallback(self, facts: Facts) -> str:
        # the template had no answer, or one without the shape the answer format asks for: read the paper(s)
        return "focused" if facts.papers else "agent"


class FocusedRoute:
    """The content of one or several given or named papers: their best excerpts, one LLM call."""

    name = "focused"

    def decide(self, facts: Facts) -> str | None:
        if len(facts.papers) == 1:
            return "about one paper's content"
        if len(facts.papers) >= 2:
            return "about several papers: the best excerpts of each"
        return None

    def answer(self, facts: Facts, decision: RouteDecision, run: Run) -> AgentResult:
        return answer_focused(facts.question, facts.answer_format, decision.papers, decision.features, run.env,
                              run.get_llm(), run.result, run.add_step)

    def fallback(self, facts: Facts) -> str:
        return "agent"


class AgentRoute:
    """Open questions over the collection: the NeuSym-RAG loop with the five actions."""

    name = "agent"

    def decide(self, facts: Facts) -> str | None:
        return None  # the LLM tie-break of route_question or another route's fallback chooses it

    def answer(self, facts: Facts, decision: RouteDecision, run: Run) -> AgentResult:
        result = run.result
        if run.agent_loop is None:
            raise NeusymError("the agent route needs the agent loop: ask through neusym.query.ask.ask")
        sub = run.agent_loop(facts.question, settings=run.settings, llm=run.get_llm(), paper_ids=facts.paper_ids,
                             answer_format=facts.answer_format, env=run.env, on_step=run.on_step, method="neusym",
                             conferences=facts.conferences, _record=True)
        sub.method, sub.route, sub.route_features = "auto", "agent", result.route_features
        sub.turns += result.turns
        sub.trajectory = result.trajectory + sub.trajectory
        return sub

    def fallback(self, facts: Facts) -> str:
        raise AssertionError("the agent loop always answers")


ROUTES: list[Route] = [MissingPaperRoute(), PaperSearchRoute(), SymbolicRoute(), FocusedRoute(), AgentRoute()]
"""The routes in the order they are asked (the first that takes a question answers it)."""

ROUTE_NAMES = tuple(r.name for r in ROUTES)
"""Every route's name, unique (what ``AgentResult.route`` holds)."""
assert len(set(ROUTE_NAMES)) == len(ROUTE_NAMES), "route names must be unique"


def route_by_name(name: str) -> Route:
    """The route a name or a fallback names; raises KeyError for an unknown name."""
    for route in ROUTES:
        if route.name == name:
            return route
    raise KeyError(f"no route named {name!r}; the routes are {', '.join(ROUTE_NAMES)}")


# ------------------------------------------------------------------------------------ router
def route_question(question: str, *, paper_ids: list[str] | None, answer_format: str | None, env: Any,
                   llm: Any = None, conferences: list[str] | None = None,
                   facts: Facts | None = None) -> RouteDecision:
    """Choose the route of ``question``: the first route of :data:`ROUTES` that takes it; when none
    does, one LLM call (JSON-constrained to three classes) picks paper search or the agent loop.
    ``llm``: an LLM, or a callable returning one (asked only for that tie-break); without one the
    agent loop is chosen. ``facts``: the question's :class:`Facts` when the caller has them."""
    facts = facts or question_facts(question, paper_ids=paper_ids, answer_format=answer_format, env=env,
                                    conferences=conferences)
    for route in ROUTES:
        reason = route.decide(facts)
        if reason is not None:
            intent = route.intent(facts) if isinstance(route, MissingPaperRoute) else facts.intent
            return RouteDecision(route.name, facts.features, reason, facts.papers, intent, chosen=route)
    if llm is not None:
        choice = llm_route(question, answer_format, llm() if callable(llm) and not hasattr(llm, "chat") else llm)
        name = "paper_search" if choice == "find_paper" else "agent"
        reason = "LLM: asks for a paper" if name == "paper_search" else f"LLM: {choice}"
        return RouteDecision(name, facts.features, reason, facts.papers, facts.intent, llm_used=True,
                             chosen=route_by_name(name))
    return RouteDecision("agent", facts.features, "no paper given or named", facts.papers, facts.intent,
                         chosen=route_by_name("agent"))


def answer_auto(question: str, *, settings: Any, env: Any, llm: Any = None, paper_ids: list[str] | None = None,
                answer_format: str | None = None, on_step: Callable[[Any], None] | None = None,
                conferences: list[str] | None = None,
                agent_loop: Callable[..., AgentResult] | None = None) -> AgentResult:
    """Answer ``question`` with the router; returns an :class:`AgentResult` with ``route``,
    ``route_features``, ``verification`` and ``citations`` set, and the steps taken as its
    trajectory. ``env``: the agent's environment on one corpus version (not closed here);
    ``agent_loop``: what the ``agent`` route runs (:attr:`Run.agent_loop`); the other arguments as
    for :func:`neusym.query.ask.ask`. Raises :class:`neusym.llm.chat.LLMError` when an LLM call
    fails, NoCorpusVersion when nothing is published."""
    started = time.monotonic()
    result = AgentResult(question=question, answer=None, method="auto")
    lazy_llm: list[Any] = [llm]

    def get_llm() -> Any:
        if lazy_llm[0] is None:
            lazy_llm[0] = make_llm(settings)
        return lazy_llm[0]

    def add_step(step: Step) -> None:
        result.trajectory.append(step)
        if on_step:
            on_step(step)

    run = Run(settings, env, get_llm, result, add_step, on_step, agent_loop)
    try:
        with phase("route", owns_llm=True):
            facts = question_facts(question, paper_ids=paper_ids, answer_format=answer_format, env=env,
                                   conferences=conferences)
            decision = route_question(question, paper_ids=paper_ids, answer_format=answer_format, env=env,
                                      llm=get_llm, conferences=conferences, facts=facts)
        if decision.llm_used:
            result.turns += 1
        result.route = decision.route
        result.route_features = dict(decision.features, reason=decision.reason,
                                     papers=[pid for pid, _ in decision.papers], llm_used=decision.llm_used)
        logger.info("route %s (%s) for %r: %s", decision.route, decision.reason, question[:120], decision.features)
        route = decision.chosen
        while True:
            answered = route.answer(facts, decision, run)
            if answered is not None:
                return answered
            route = route_by_name(route.fallback(facts))
            result.route = route.name
            result.route_features["reason"] += f"; template had no answer in the format's shape, {route.name} instead"
    finally:
        result.seconds = time.monotonic() - started


__all__ = ["Facts", "ROUTES", "ROUTE_NAMES", "Route", "RouteDecision", "Run", "answer_auto", "question_facts",
           "route_by_name", "route_question"]
