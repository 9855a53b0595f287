"""What answering a question returns: the :class:`AgentResult` and the :class:`Step` s of its
trajectory. Shared by every route (:mod:`neusym.query.answer.focused`, the ReAct loop of
:mod:`neusym.query.agent.react`) and every caller (:func:`neusym.query.ask.ask`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Step:
    """One turn: the model's ``thought``, the ``action`` name, its ``arguments`` and the
    ``observation`` text it produced (empty for GenerateAnswer). ``error`` marks invalid or failed
    actions; ``raw`` is the model's reply verbatim (empty for ``fixed`` steps); ``image_png_base64``
    holds the ViewImage PNG. ``fixed`` marks an action the method performed for the model before
    its first turn (e.g. Classic RAG's chunk retrieval): no LLM call, no tokens."""

    thought: str
    action: str
    arguments: dict
    observation: str
    error: bool = False
    raw: str = ""
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    image_png_base64: str | None = None
    image_size: tuple[int, int] | None = None
    fixed: bool = False

    def to_dict(self, *, include_images: bool = False) -> dict:
        """JSON-ready dict; the PNG is included only with ``include_images`` (it can be ~1 MB)."""
        out = {
            "thought": self.thought,
            "action": self.action,
            "arguments": self.arguments,
            "observation": self.observation,
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "fixed": self.fixed,
        }
        if self.image_size:
            out["image_size"] = list(self.image_size)
            if include_images:
                out["image_png_base64"] = self.image_png_base64
        return out


@dataclass
class AgentResult:
    """Outcome of one question (:func:`neusym.query.ask.ask`): the ``answer`` (None when the model never answered),
    the ``trajectory`` of steps, ``turns`` (LLM calls), token usage, wall-clock ``seconds``,
    ``stop_reason`` (``answered``, ``max_turns`` or ``time_limit``: ``settings.agent_max_seconds``
    ran out) and the ``method`` name. Method ``auto`` also sets ``route`` (missing_paper, paper_search,
    symbolic, focused, agent: :data:`neusym.query.answer.router.ROUTE_NAMES`) with the ``route_features`` behind it, ``verification`` (``{"status": pass / fail
    / unverifiable, "repaired", "checks"}``), ``citations`` (:class:`neusym.query.answer.citations.Citation`
    dicts) and, for paper search, the ranked ``candidates``."""

    question: str
    answer: Any
    trajectory: list[Step] = field(default_factory=list)
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    seconds: float = 0.0
    stop_reason: str = "answered"
    prompt_chars: int = 0
    method: str = "neusym"
    route: str | None = None
    route_features: dict = field(default_factory=dict)
    verification: dict | None = None
    citations: list[dict] = field(default_factory=list)
    candidates: list[dict] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    """Seconds per phase of the answer (:mod:`neusym.telemetry`: route, retrieval, generation, table_query,
    verification, repair, action, other), adding up to ``seconds``; set by :func:`neusym.query.ask.ask`."""

    def to_dict(self, *, include_images: bool = False) -> dict:
        """JSON-ready dict (for ``neusym ask --json``)."""
        return {
            "question": self.question,
            "method": self.method,
            "route": self.route,
            "answer": self.answer,
            "verification": self.verification,
            "citations": list(self.citations),
            "route_features": dict(self.route_features),
            "candidates": list(self.candidates),
            "stop_reason": self.stop_reason,
            "turns": self.turns,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "seconds": round(self.seconds, 3),
            "timings": dict(self.timings),
            "trajectory": [s.to_dict(include_images=include_images) for s in self.trajectory],
        }


__all__ = ["AgentResult", "Step"]
