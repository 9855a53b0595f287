"""The one way to ask a question: :func:`ask`, called by ``neusym ask``, ``POST /ask`` and
``/ask/json``, ``neusym eval run`` and the benchmarks.

It resolves the method (:data:`neusym.query.agent.methods.DEFAULT_METHOD`, ``auto``, when none is
named), opens the environment on a corpus version, makes the LLM (cancellable when the caller can
cancel), and hands the question to the router (:func:`neusym.query.answer.router.answer_auto`) or to the
ReAct loop of the named method (:func:`neusym.query.agent.react.run_loop`).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from neusym.llm.chat import LLM, CancellableLLM, make_llm
from neusym.telemetry import measure
from neusym.query.agent.actions import Environment
from neusym.query.answer.router import answer_auto
from neusym.query.answer.config import FocusedConfig, using
from neusym.query.answer.shapes import AnswerShape
from neusym.query.agent.methods import Method, get_method
from neusym.query.agent.react import run_loop
from neusym.query.answer.results import AgentResult, Step
from neusym.settings import Settings


def ask(
    question: str,
    *,
    settings: Settings,
    method: Method | str | None = None,
    paper_ids: list[str] | None = None,
    answer_format: str | None = None,
    llm: LLM | None = None,
    env: Environment | None = None,
    version: Any = None,
    on_step: Callable[[Step], None] | None = None,
    cancel: threading.Event | None = None,
    conferences: list[str] | None = None,
    focused: FocusedConfig | None = None,
    shape: AnswerShape | None = None,
) -> AgentResult:
    """Answer ``question`` over the corpus of ``settings``; returns an :class:`AgentResult` (answer,
    trajectory, tokens, seconds, ``timings`` (seconds per phase: :mod:`neusym.telemetry`) and, for the
    router, route, verification and citations).

    ``method``: a :class:`~neusym.query.agent.methods.Method` or its name (default ``auto``, the
    router); ``paper_ids``: papers the question is about (UUID strings); ``answer_format``: the
    required format of the answer; ``llm``: any chat model (default :func:`neusym.llm.chat.make_llm`);
    ``env``: an environment to reuse (not closed here), else one is opened on ``version`` (an opened
    :class:`neusym.store.versions.CorpusVersion`, not closed here) or on the current version, and
    closed on return; ``on_step``: called with each :class:`Step` as soon as it is complete;
    ``cancel``: when it is set, the LLM call in flight stops (:class:`neusym.llm.chat.CancellableLLM`),
    a running SQL query is killed and :class:`neusym.llm.chat.RunCancelled` is raised;
    ``conferences``: AirQA ``conference`` scope (``["acl2023"]``) for the router's paper search;
    ``focused``: the focused route's configuration
    (:class:`neusym.query.answer.config.FocusedConfig`; default the shipped one); ``shape``: the
    typed shape the answer must take (:class:`neusym.query.answer.shapes.AnswerShape`), the product's
    way to say what ``answer_format`` says in prose (AirQA question sets pass their sentence as it is).

    Raises :class:`neusym.query.agent.methods.MethodError` for an unknown method, TypeError when
    ``focused`` is not a FocusedConfig or ``shape`` not an AnswerShape, ValueError when both ``shape``
    and ``answer_format`` are given,
    :class:`neusym.llm.chat.LLMError` when the LLM backend fails,
    :class:`neusym.store.versions.NoCorpusVersion` when nothing is published.
    """
    chosen = get_method(method)
    if shape is not None:
        if not isinstance(shape, AnswerShape):
            raise TypeError(f"shape must be an AnswerShape, got {type(shape).__name__}")
        if answer_format is not None:
            raise ValueError("give the answer's shape or an answer-format sentence, not both")
        answer_format = shape.format_text()
    with using(focused):
        return _ask(question, settings=settings, chosen=chosen, paper_ids=paper_ids, answer_format=answer_format,
                    llm=llm, env=env, version=version, on_step=on_step, cancel=cancel, conferences=conferences)


def _ask(question: str, *, settings: Settings, chosen: Method, paper_ids: list[str] | None, answer_format: str | None,
         llm: LLM | None, env: Environment | None, version: Any, on_step: Callable[[Step], None] | None,
         cancel: threading.Event | None, conferences: list[str] | None) -> AgentResult:
    own_env = env is None
    env = env or Environment(settings, version=version)
    if cancel is not None:
        env.cancel = cancel
        llm = CancellableLLM(llm or make_llm(settings), cancel)
    try:
        with measure() as clock:
            if chosen.name == "auto":
                result = answer_auto(question, settings=settings, llm=llm, paper_ids=paper_ids, agent_loop=run_loop,
                                     answer_format=answer_format, env=env, on_step=on_step, conferences=conferences)
            else:
                result = run_loop(question, settings=settings, llm=llm, paper_ids=paper_ids, answer_format=answer_format,
                                  env=env, on_step=on_step, method=chosen, conferences=conferences)
            result.timings = clock.totals()
        return result
    finally:
        if own_env:
            env.close()


__all__ = ["AgentResult", "Step", "ask"]
