"""The NeuSym-RAG ReAct loop (paper §2.4, prompts of App. F).

:func:`run_loop` builds the prompt, then for at most ``settings.agent_max_turns`` turns asks
the LLM for ``{"thought": ..., "action": {...}}`` (constrained by the JSON schema of
:func:`neusym.query.agent.actions.action_json_schema`), executes the action and appends the observation.
``GenerateAnswer`` ends the loop; on the last turn only ``GenerateAnswer`` is allowed.

Message layout (kept stable so llama.cpp's prompt cache reuses the prefix):

1. ``system``: system prompt, action space, interaction framework, hints, two few-shot examples,
   [Database Schema] and [Vectorstore Schema] — identical for every question on one corpus, so
   consecutive questions in one process reuse its KV cache;
2. ``user``: the task — [Question], [Answer Format], [Paper IDs];
3. then per turn an ``assistant`` message (the model's reply text, verbatim) and a ``user``
   message ``[Observation]: ...``. Each request extends the previous one, so only the new reply and
   observation are evaluated. Old observations are replaced by a short placeholder only when the
   conversation would overflow the context window.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from functools import lru_cache
from importlib import resources
from typing import Any, Callable

from neusym.query.agent.actions import (
    ACTION_TYPES,
    Environment,
    Observation,
    action_json_schema,
    parse_reply,
    validate_action,
)
from neusym.llm.chat import LLM, ContextOverflowError, LLMReply, make_llm
from neusym.query.answer.results import AgentResult, Step
from neusym.query.agent.methods import Method, MethodError, context_actions, get_method
from neusym.errors import ActionError, NeusymError
from neusym.settings import Settings

DEFAULT_ANSWER_FORMAT = (
    "A concise answer: a short text, a number, a boolean or a list of short strings, whichever fits the question."
)
PROMPT_FILES = ("agent_system.md", "agent_actions.md", "agent_framework.md", "agent_hints.md", "agent_examples.md")
_MIN_CHARS_PER_TOKEN = 2.0
_MESSAGE_OVERHEAD_TOKENS = 6
REPEAT_BAN_TURNS = 2
"""An action type that was repeated verbatim is removed from the JSON schema for this many turns."""
_REFILL = 0.5  # after an elision, the conversation may use half of the room behind the prefix
_OMITTED = "[Observation]: (omitted to save context; it was {n} characters)"


@lru_cache(maxsize=None)
def load_prompt(name: str) -> str:
    """Text of ``neusym/prompts/<name>`` (package data), without trailing whitespace."""
    return resources.files("neusym").joinpath("prompts", name).read_text(encoding="utf-8").rstrip()


def _fill(template: str, **values: str) -> str:
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


# --------------------------------------------------------------------------------------------
# Prompt
# --------------------------------------------------------------------------------------------


def system_prompt(db_schema: str, vs_schema: str, *, bm25_collection: str = "text_bm25_en") -> str:
    """The static part of the prompt: system, actions, framework, hints, examples and both schemas."""
    parts = [load_prompt(name) for name in PROMPT_FILES]
    text = "\n\n".join(parts)
    text = _fill(text, bm25_collection=bm25_collection)
    return f"{text}\n\n## [Database Schema]\n{db_schema.strip()}\n\n## [Vectorstore Schema]\n{vs_schema.strip()}"


_TWO_STAGE_RETRIEVAL = {
    ("RetrieveFromDatabase",): ("RetrieveFromDatabase: one SQL query on the database", "The [Database Schema] is"),
    ("RetrieveFromVectorstore",): (
        "RetrieveFromVectorstore: one similarity search in the vectorstore",
        "The [Vectorstore Schema] is",
    ),
    ("RetrieveFromDatabase", "RetrieveFromVectorstore"): (
        "either RetrieveFromDatabase: one SQL query on the database, or RetrieveFromVectorstore: one similarity "
        "search in the vectorstore",
        "The [Database Schema] and the [Vectorstore Schema] are",
    ),
}
_EXAMPLE_HEAD = re.compile(r"^Example \d+\s*$", re.M)
_EXAMPLE_ACTION = re.compile(r'"action_type":\s*"(\w+)"')


def _actions_section(types: tuple[str, ...], fixed: dict) -> str:
    """agent_actions.md restricted to the lines of ``types``, plus a line per fixed parameter set."""
    lines = []
    for line in load_prompt("agent_actions.md").splitlines():
        match = re.match(r"- (\w+)\(", line)
        if match is None or match.group(1) in types:
            lines.append(line)
    for action_type, params in fixed.items():
        if action_type in types and params:
            pinned = ", ".join(f'{k} = "{v}"' for k, v in params.items())
            lines.append(f"- In this task {action_type} always uses {pinned}.")
    return "\n".join(lines)


def _examples_section(types: tuple[str, ...]) -> str | None:
    """The few-shot examples of agent_examples.md whose actions are all in ``types`` (renumbered)."""
    text = load_prompt("agent_examples.md")
    heads = list(_EXAMPLE_HEAD.finditer(text))
    if not heads:
        return None
    header = text[: heads[0].start()].rstrip()
    kept = []
    for i, head in enumerate(heads):
        block = text[head.start() : heads[i + 1].start() if i + 1 < len(heads) else len(text)].strip()
        if all(a in types for a in _EXAMPLE_ACTION.findall(block)):
            kept.append(_EXAMPLE_HEAD.sub(f"Example {len(kept) + 1}", block, count=1))
    return header + "\n" + "\n\n".join(kept) if kept else None


def method_system_prompt(
    method: "Method | str | None",
    db_schema: str,
    vs_schema: str,
    *,
    bm25_collection: str = "text_bm25_en",
) -> str:
    """The static prompt of ``method`` (see :mod:`neusym.query.agent.methods`).

    ``neusym`` gets exactly :func:`system_prompt`. Other methods get their own system text, only
    the action lines they may use (GenerateAnswer always), the interaction section for iterative
    methods, their hints, the few-shot examples whose actions they allow, and only the schemas of
    the stores they may query ([Database Schema] with RetrieveFromDatabase, [Vectorstore Schema]
    with RetrieveFromVectorstore). Raises :class:`MethodError` for an unknown method name.
    """
    method = get_method(method)
    if method.name == "neusym":
        return system_prompt(db_schema, vs_schema, bm25_collection=bm25_collection)
    types = method.prompt_types()
    intro = load_prompt(method.system)
    retrieval = tuple(a for a in ("RetrieveFromDatabase", "RetrieveFromVectorstore") if a in method.actions)
    if retrieval in _TWO_STAGE_RETRIEVAL:
        what, schemas = _TWO_STAGE_RETRIEVAL[retrieval]
        intro = _fill(intro, retrieval=what, schemas=schemas)
    parts = [intro, _actions_section(types, dict(method.fixed_parameters))]
    if method.framework and not method.one_shot:
        parts.append(load_prompt("agent_framework.md"))
    if method.hints:
        parts.append(load_prompt(method.hints))
    if method.examples and not method.one_shot:
        examples = _examples_section(types)
        if examples:
            parts.append(examples)
    collection = method.fixed_parameters.get("RetrieveFromVectorstore", {}).get("collection_name", bm25_collection)
    text = _fill("\n\n".join(parts), bm25_collection=str(collection))
    if method.uses_database:
        text += f"\n\n## [Database Schema]\n{db_schema.strip()}"
    if method.uses_vectorstore:
        text += f"\n\n## [Vectorstore Schema]\n{vs_schema.strip()}"
    return text


def task_prompt(
    question: str,
    *,
    answer_format: str | None,
    max_turns: int,
    papers: list[tuple[str, str | None]] | None = None,
    actions: tuple[str, ...] | None = None,
    conferences: list[str] | None = None,
) -> str:
    """The per-question user message: question, answer format, focus papers (id, title or None).

    ``actions``: the action types of the method (default: all); the reminder to restrict searches
    to the papers names SQL only when RetrieveFromDatabase is among them and vector filters only
    with RetrieveFromVectorstore. ``conferences``: AirQA ``conference`` values (e.g. ``acl2023``),
    shown as the search scope of paper-retrieval questions.
    """
    actions = tuple(actions) if actions is not None else ACTION_TYPES
    paper_block = ""
    if conferences:
        paper_block += "[Conferences]: " + ", ".join(conferences) + " (the answer is a paper published there)\n"
    if papers:
        lines = []
        for pid, title in papers:
            lines.append(f"{pid} ({title})" if title else f"{pid} (not found in metadata)")
        paper_block += "[Paper IDs]: " + "; ".join(lines) + "\n"
        where = []
        if "RetrieveFromDatabase" in actions:
            where.append("every SQL query (ref_paper_id / paper_id)")
        if "RetrieveFromVectorstore" in actions:
            where.append("every vector search filter (paper_id == '...')")
        if where:
            paper_block += "Restrict " + " and ".join(where) + " to these papers.\n"
    return _fill(
        load_prompt("agent_task.md"),
        question=question.strip(),
        answer_format=(answer_format or DEFAULT_ANSWER_FORMAT).strip(),
        paper_ids=paper_block,
        max_turns=str(max_turns),
    )


def _paper_titles(env: Environment, paper_ids: list[str]) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for raw in paper_ids:
        pid = str(raw).strip()
        title = None
        try:
            canonical = str(uuid.UUID(pid))
            result = env.run_sql(f"SELECT title FROM metadata WHERE paper_id = '{canonical}'", max_rows=1)
            if result.rows:
                pid, title = canonical, str(result.rows[0][0])
        except (ValueError, NeusymError):
            pass
        out.append((pid, title))
    return out


def _verify_and_repair(result: AgentResult, env: Environment, hits: list[dict], llm: LLM, messages: list[dict],
                       ctx: "_Context", obs_idx: list[int], schema: dict, max_tokens: int,
                       on_step: Callable[[Step], None] | None, answer_format: str | None = None) -> None:
    """Verification and citations of an agent answer (method ``auto``'s agent route): the answer is
    put in the shape ``answer_format`` asks for where possible, and its shape, numbers, quotes and
    list items are checked against the run's observations; a failure gets one repair turn
    (GenerateAnswer only) with the failed claims named."""
    from neusym.query.answer.answer_format import conform
    from neusym.query.answer.citations import citations_for
    from neusym.query.answer.verify import verify

    evidence = [s.observation for s in result.trajectory if s.observation] + [h.get("text") or "" for h in hits]
    shaped = conform(result.answer, answer_format)
    check = verify(result.answer, evidence, question=result.question, conformed=shaped)
    if check.status == "fail":
        note = ("[Check]: " + "; ".join(f"'{c.claim}' {c.detail}" for c in check.failed)
                + ". Call GenerateAnswer again with an answer supported by the observations above.")
        messages.append({"role": "user", "content": note})
        try:
            reply = _chat(llm, messages, ctx, obs_idx, schema, max_tokens)
            result.turns += 1
            result.prompt_tokens += reply.prompt_tokens
            result.completion_tokens += reply.completion_tokens
            result.cached_tokens += reply.cached_tokens
            thought, raw_action = parse_reply(reply.text)
            action = validate_action(raw_action)
            if action.action_type == "GenerateAnswer":
                step = Step(thought=thought, action="GenerateAnswer", arguments=action.parameters, observation="",
                            raw=reply.text, prompt_tokens=reply.prompt_tokens,
                            completion_tokens=reply.completion_tokens, cached_tokens=reply.cached_tokens)
                result.trajectory.append(step)
                if on_step:
                    on_step(step)
                shaped2 = conform(action.parameters["answer"], answer_format)
                again = verify(action.parameters["answer"], evidence, question=result.question, conformed=shaped2)
                if again.status != "fail" or len(again.failed) < len(check.failed):
                    result.answer, check, shaped = action.parameters["answer"], again, shaped2
        except (ActionError, NeusymError):
            pass
        check.repaired = True
    if shaped.ok:
        result.answer = shaped.value
    result.verification = check.to_dict()
    text = result.answer if isinstance(result.answer, str) else json.dumps(result.answer, ensure_ascii=False)
    words = {w for w in re.findall(r"[a-z0-9]+(?:\.[0-9]+)?", text.lower()) if len(w) > 2 or w.isdigit()}
    support = sorted(hits, key=lambda h: -len(words & set(re.findall(r"[a-z0-9]+(?:\.[0-9]+)?",
                                                                       (h.get("text") or "").lower()))))
    result.citations = [c.to_dict() for c in citations_for(env, support, text)]


# --------------------------------------------------------------------------------------------
# Context management
# --------------------------------------------------------------------------------------------


def _content_chars(message: dict) -> int:
    content = message.get("content")
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(part.get("text", "")) for part in content if isinstance(part, dict))
    return 0


class _Context:
    """Fits the conversation into ``budget`` tokens by eliding old observations (oldest first)."""

    def __init__(self, budget: int):
        self.budget = budget
        self.chars_per_token = 3.0  # conservative start; calibrated from the backend's prompt_tokens

    def estimate(self, messages: list[dict]) -> int:
        chars = sum(_content_chars(m) for m in messages)
        return int(chars / self.chars_per_token) + _MESSAGE_OVERHEAD_TOKENS * len(messages)

    def calibrate(self, messages: list[dict], prompt_tokens: int) -> None:
        if prompt_tokens <= 0:
            return
        chars = sum(_content_chars(m) for m in messages)
        usable = prompt_tokens - _MESSAGE_OVERHEAD_TOKENS * len(messages)
        if usable > 0:
            self.chars_per_token = max(_MIN_CHARS_PER_TOKEN, min(chars / usable, 6.0))

    def fit(self, messages: list[dict], observation_indices: list[int]) -> None:
        """Elide observations in place (oldest first, never the most recent) when over budget.

        Once over budget it frees half of the room left after the fixed prefix (system + task), so
        the next turns fit again: each elision changes the prompt after the elided message and
        costs a re-evaluation of everything behind it, which should happen every few turns, not
        on every turn.
        """
        if self.estimate(messages) <= self.budget:
            return
        base = self.estimate(messages[:2])
        target = base + int(max(self.budget - base, 0) * _REFILL)
        for index in observation_indices[:-1]:
            if self.estimate(messages) <= target:
                return
            message = messages[index]
            if not message.get("_omitted"):
                n = _content_chars(message)
                messages[index] = {"role": "user", "content": _OMITTED.format(n=n), "_omitted": True}


def _wire(messages: list[dict]) -> list[dict]:
    """Messages without private bookkeeping keys."""
    return [{k: v for k, v in m.items() if not k.startswith("_")} for m in messages]


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


def _observation_message(obs_text: str, image: Observation | None, llm: Any, note: str = "") -> dict:
    text = f"[Observation]:\n{obs_text}" if obs_text else "[Observation]: (empty)"
    if note:
        text += f"\n{note}"
    if image is not None and image.image_png and getattr(llm, "supports_images", False):
        return {
            "role": "user",
            "content": [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image.image_base64}"}},
            ],
        }
    return {"role": "user", "content": text}


def _chat(llm: LLM, messages: list[dict], ctx: _Context, obs_idx: list[int], schema: dict, max_tokens: int) -> LLMReply:
    ctx.fit(messages, obs_idx)
    for attempt in range(3):
        wire = _wire(messages)
        try:
            reply = llm.chat(wire, json_schema=schema, max_tokens=max_tokens)
        except ContextOverflowError as exc:
            if attempt == 2:
                raise
            if exc.n_prompt_tokens:
                ctx.calibrate(messages, exc.n_prompt_tokens)
            ctx.budget = int(ctx.budget * 0.85)
            if exc.n_ctx:  # the backend's real window is smaller than settings.llm_context_tokens
                ctx.budget = min(ctx.budget, int(exc.n_ctx) - max_tokens - 64)
            ctx.fit(messages, obs_idx)
            continue
        ctx.calibrate(messages, reply.prompt_tokens)
        return reply
    raise AssertionError("unreachable")


def run_loop(
    question: str,
    *,
    settings: Settings,
    llm: LLM | None = None,
    paper_ids: list[str] | None = None,
    answer_format: str | None = None,
    env: Environment | None = None,
    on_step: Callable[[Step], None] | None = None,
    method: "Method | str | None" = None,
    conferences: list[str] | None = None,
    _record: bool = False,
) -> AgentResult:
    """Answer ``question`` over the corpus of ``settings`` with the NeuSym-RAG ReAct loop (callers
    outside the agent use :func:`neusym.query.ask.ask`, which also runs the router).

    ``llm``: any :class:`neusym.llm.chat.LLM` (default :func:`make_llm(settings)`); ``paper_ids``:
    papers to focus on (named in the task prompt with their titles, with a reminder to filter by
    them); ``answer_format``: the required format of the answer; ``env``: an
    :class:`Environment` (default: one over ``settings``, closed on return); ``on_step``: called
    with each :class:`Step` as soon as it is complete (for live tracing). ``method``: a
    :class:`neusym.query.agent.methods.Method` or its name (default ``neusym``: this loop with all
    five actions) restricting the action space, the turns, fixed parameters, injected context and
    the prompt (the paper's baselines); ``conferences``: AirQA ``conference`` scope shown in the
    task prompt.

    Runs at most ``settings.agent_max_turns`` turns (one-shot methods 1, two-stage methods 2);
    invalid replies, unknown or disallowed actions, fixed parameters changed by the model, failing
    actions and repeated identical actions produce an error observation and the loop continues;
    the last turn only allows GenerateAnswer. Raises :class:`neusym.llm.chat.LLMError` when the
    backend itself fails (unreachable endpoint, model cannot load, prompt larger than the context)
    and :class:`neusym.query.agent.methods.MethodError` for an unknown method, for ``auto`` (the
    router is not a loop: :func:`neusym.query.ask.ask`) or for a method that needs the vectorstore
    when it is unavailable.
    """
    if (method.name if isinstance(method, Method) else str(method or "")).strip().lower() == "auto":
        raise MethodError("method 'auto' is the router, not a loop: answer with neusym.query.ask.ask")
    method = method or "neusym"
    started = time.monotonic()
    method = get_method(method)
    own_env = env is None
    env = env or Environment(settings)
    llm = llm or make_llm(settings)
    max_turns = max(1, int(method.max_turns or settings.agent_max_turns))
    result = AgentResult(question=question, answer=None, method=method.name)
    try:
        vs_ok = env.vectorstore_available() if method.needs_vectorstore else False
        if method.needs_vectorstore and not vs_ok and not method.uses_database:
            raise MethodError(f"method {method.name} needs the vectorstore: {env.vectorstore_schema()}")
        collections, encodable = env.vectorstore_catalog() if vs_ok and method.uses_vectorstore else (None, None)
        fixed_vs = method.fixed_parameters.get("RetrieveFromVectorstore", {})
        if "collection_name" in fixed_vs:
            collections = [fixed_vs["collection_name"]]
        if "table_name" in fixed_vs and "column_name" in fixed_vs:
            encodable = [(fixed_vs["table_name"], fixed_vs["column_name"])]
        allowed = method.answer_types(vectorstore=vs_ok)
        bm25 = next((c for c in (collections or []) if "bm25" in c), (collections or ["text_bm25_en"])[0])
        db_schema = env.database_schema() if method.uses_database else ""
        vs_schema = env.vectorstore_schema() if method.uses_vectorstore else ""
        system = method_system_prompt(method, db_schema, vs_schema, bm25_collection=bm25)
        papers = _paper_titles(env, paper_ids) if paper_ids else None
        task = task_prompt(
            question,
            answer_format=answer_format,
            max_turns=max_turns,
            papers=papers if method.paper_ids_in_prompt else None,
            actions=allowed,
            conferences=conferences,
        )
        extended = bool(getattr(llm, "supports_max_length", True))  # maxLength / pattern keywords
        schemas: dict[tuple[str, ...], dict] = {}

        def schema_for(types: tuple[str, ...]) -> dict:
            if types not in schemas:
                schemas[types] = action_json_schema(
                    allowed=types,
                    collections=collections,
                    encodable=encodable,
                    max_thought_chars=400 if extended else None,
                    filter_pattern=extended,
                )
            return schemas[types]

        banned: dict[str, int] = {}  # action type repeated verbatim → last turn it stays disabled
        max_tokens = int(settings.llm_max_tokens)
        ctx = _Context(budget=int(settings.llm_context_tokens) - max_tokens - 64)
        last_note = "This is your last turn: call GenerateAnswer now with your best answer."
        messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": task}]
        result.prompt_chars = len(system) + len(task)
        obs_idx: list[int] = []
        # retrievals the method performs for the model (classic-rag chunks, title + abstract, full text)
        focus = [pid for pid, _ in papers] if papers else []
        for action, budget in context_actions(
            method, question, focus, top_k=settings.eval_classic_rag_top_k, max_tokens=settings.eval_context_max_tokens
        ):
            step_started = time.monotonic()
            obs = env.execute(action, max_tokens=budget)
            step = Step(
                thought=f"(retrieval fixed by the method {method.name})",
                action=action.action_type,
                arguments=dict(action.parameters),
                observation=obs.text,
                error=obs.error,
                fixed=True,
            )
            step.seconds = time.monotonic() - step_started
            result.trajectory.append(step)
            if on_step:
                on_step(step)
            reply_text = json.dumps(
                {"thought": step.thought, "action": {"action_type": action.action_type, "parameters": action.parameters}},
                ensure_ascii=False,
            )
            messages.append({"role": "assistant", "content": reply_text})
            messages.append(_observation_message(obs.text, None, llm))
            obs_idx.append(len(messages) - 1)
        if max_turns == 1:
            messages[-1]["content"] += "\n" + last_note
        seen: dict[str, int] = {}
        hits_log = env.record_hits() if _record and hasattr(env, "record_hits") else None
        limit = float(settings.agent_max_seconds)
        for turn in range(1, max_turns + 1):
            elapsed = time.monotonic() - started
            if elapsed >= limit:
                result.stop_reason = "time_limit"
                return result
            last = turn == max_turns or elapsed >= 0.8 * limit
            turn_started = time.monotonic()
            phase = ("GenerateAnswer",) if last or not allowed else allowed
            blocked = {a for a, until in banned.items() if until >= turn}
            offered = tuple(a for a in phase if a not in blocked) or phase
            reply = _chat(llm, messages, ctx, obs_idx, schema_for(offered), max_tokens)
            result.turns = turn
            result.prompt_tokens += reply.prompt_tokens
            result.completion_tokens += reply.completion_tokens
            result.cached_tokens += reply.cached_tokens
            step = Step(
                thought="",
                action="",
                arguments={},
                observation="",
                raw=reply.text,
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                cached_tokens=reply.cached_tokens,
            )
            obs: Observation | None = None
            try:
                thought, raw_action = parse_reply(reply.text)
                step.thought = thought
                step.action = str(raw_action.get("action_type", ""))
                step.arguments = raw_action.get("parameters") if isinstance(raw_action.get("parameters"), dict) else {}
                action = validate_action(raw_action)
                step.arguments = action.parameters
                if action.action_type not in phase:
                    if last:
                        raise ActionError("this was the last turn; only GenerateAnswer is allowed")
                    raise ActionError(
                        f"{action.action_type} is not available in this task (method {method.name}); "
                        f"use one of {', '.join(phase)}"
                    )
                problem = method.check_fixed(action)
                if problem:
                    raise ActionError(problem)
                key = action.key()
                if key in seen and action.action_type != "GenerateAnswer":
                    step.error = True
                    banned[action.action_type] = turn + REPEAT_BAN_TURNS
                    step.observation = (
                        f"[Warning]: you already took exactly this action in turn {seen[key]}; its observation is "
                        "above. Do not repeat it: change the SQL, the query, the table/column, the collection or "
                        "the filter, or call GenerateAnswer if you already know the answer. "
                        f"{action.action_type} is disabled for your next {REPEAT_BAN_TURNS} turns."
                    )
                else:
                    seen.setdefault(key, turn)
                    obs = env.execute(action)
                    step.observation = obs.text
                    step.error = obs.error
                    if obs.image_png:
                        step.image_png_base64 = obs.image_base64
                        step.image_size = obs.image_size
                    if obs.terminal:
                        result.answer = obs.answer
                        result.stop_reason = "answered"
                        step.seconds = time.monotonic() - turn_started
                        result.trajectory.append(step)
                        if on_step:
                            on_step(step)
                        if hits_log is not None:
                            messages.append({"role": "assistant", "content": reply.text})
                            _verify_and_repair(result, env, hits_log, llm, messages, ctx, obs_idx,
                                               schema_for(("GenerateAnswer",)), max_tokens, on_step,
                                               answer_format)
                        return result
            except ActionError as exc:
                cut = " Your reply was cut off at the token limit: keep the thought short." if reply.finish_reason == "length" else ""
                step.error = True
                step.observation = (
                    f"[Error]: invalid action: {exc}.{cut} Reply with one JSON object "
                    '{"thought": "...", "action": {"action_type": "<one of '
                    + ", ".join(offered)
                    + '>", "parameters": {...}}}.'
                )
            step.seconds = time.monotonic() - turn_started
            result.trajectory.append(step)
            if on_step:
                on_step(step)
            messages.append({"role": "assistant", "content": reply.text})
            note = last_note if turn + 1 == max_turns else ""
            messages.append(_observation_message(step.observation, obs, llm, note))
            obs_idx.append(len(messages) - 1)
        result.stop_reason = "max_turns"
        return result
    finally:
        result.seconds = time.monotonic() - started
        if own_env:
            env.close()


__all__ = [
    "AgentResult",
    "DEFAULT_ANSWER_FORMAT",
    "Step",
    "run_loop",
    "load_prompt",
    "method_system_prompt",
    "system_prompt",
    "task_prompt",
]

