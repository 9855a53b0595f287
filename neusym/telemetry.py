"""What a run reports about itself: its log lines and where its seconds go.

**Log lines** on the terminal: neusym's own and the libraries' it loads, one level for both.

The level comes from ``--verbose`` (INFO), or ``NEUSYM_LOG_LEVEL`` (``DEBUG``, ``INFO``, ``WARNING``
— the default — or ``ERROR``). Below INFO, third-party libraries that attach their own handlers when a
model loads (rapid-table's and rapid-layout's coloured "File exists and is valid: ..." lines, onnxruntime's
hints) stay quiet; ``--verbose`` brings them back. The level is also put in the environment so the
parse worker processes (spawned, not forked) log at the same level.

**Seconds per phase**: where one answer's seconds go, wall time per phase of a request, each second counted once.

:func:`measure` starts a :class:`Clock` for the code it wraps (in this thread or task: a context
variable); :func:`phase` charges the time spent inside it to a name, and a phase inside another
takes its time out of the outer one, so the phases add up to the wall time (``other`` is what no
phase claimed). :func:`llm_call` marks an LLM request as ``generation``, unless an enclosing phase
owns its LLM calls (``owns_llm``: the route decision, a table query, a repair), which then keeps
their time. Without a running clock every function here does nothing.

Phases of :func:`neusym.query.ask.ask` (``AgentResult.timings``): ``route`` (question facts and the
route decision, its LLM call included), ``retrieval`` (evidence: vector and BM25 search, SQL lookups,
paper search), ``generation`` (the answer's LLM calls), ``table_query`` (SQL over a table's cells, its
LLM call included), ``verification``, ``repair`` (the second answer after a failed check, its LLM call
included), ``action`` (the agent loop's CalculateExpr and ViewImage) and ``other``. Seconds, rounded to milliseconds.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator



LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
ENV = "NEUSYM_LOG_LEVEL"


def level_name(level: str | None = None) -> str:
    """The level in force: ``level``, else ``$NEUSYM_LOG_LEVEL``, else ``WARNING``. Raises ValueError
    naming the setting for anything else than :data:`LEVELS` (case-insensitive)."""
    name = (level or os.environ.get(ENV) or "WARNING").strip().upper()
    if name not in LEVELS:
        raise ValueError(f"{ENV}={name!r}: not a log level (use one of {', '.join(LEVELS)})")
    return name


def configure(level: str | None = None) -> str:
    """Send log records at ``level`` (:func:`level_name`) and above to stderr as ``LEVEL name: message``,
    once per process (a handler already on the root logger is kept), and export the level in
    ``$NEUSYM_LOG_LEVEL`` for child processes. Returns the level's name."""
    name = level_name(level)
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(name)
    os.environ[ENV] = name
    return name


def verbose() -> bool:
    """True when INFO lines are wanted (``--verbose`` or ``NEUSYM_LOG_LEVEL`` INFO/DEBUG)."""
    try:
        return LEVELS.index(level_name()) <= LEVELS.index("INFO")
    except ValueError:
        return False


# ----------------------------------------------------------------------------- phases
_CLOCK: ContextVar["Clock | None"] = ContextVar("neusym_phase_clock", default=None)


class Clock:
    """Exclusive wall seconds per phase name, from its creation."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = defaultdict(float)
        self._stack: list[tuple[str, bool]] = []
        self._mark = time.perf_counter()

    def _charge(self) -> None:
        now = time.perf_counter()
        self._seconds[self._stack[-1][0] if self._stack else "other"] += now - self._mark
        self._mark = now

    def enter(self, name: str, owns_llm: bool = False) -> None:
        """Start charging ``name`` (the phase in force pauses)."""
        self._charge()
        self._stack.append((name, owns_llm))

    def leave(self) -> None:
        """Stop charging the innermost phase (the one around it resumes)."""
        self._charge()
        self._stack.pop()

    def owns_llm(self) -> bool:
        """True inside a phase that keeps the time of its LLM calls."""
        return any(owns for _, owns in self._stack)

    def totals(self) -> dict[str, float]:
        """Seconds per phase so far (milliseconds), every phase entered (0.0 for one that took under 0.5 ms)."""
        self._charge()
        return {k: round(v, 3) for k, v in self._seconds.items()}


@contextmanager
def measure() -> Iterator[Clock]:
    """Run the wrapped code under a new :class:`Clock` (nested measures each get their own)."""
    clock = Clock()
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


@contextmanager
def phase(name: str, *, owns_llm: bool = False) -> Iterator[None]:
    """Charge the time inside to ``name``; ``owns_llm``: LLM calls inside stay in this phase."""
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    clock.enter(name, owns_llm)
    try:
        yield
    finally:
        clock.leave()


@contextmanager
def llm_call() -> Iterator[None]:
    """An LLM request: ``generation``, or the enclosing phase's when that owns its LLM calls."""
    clock = _CLOCK.get()
    if clock is None or clock.owns_llm():
        yield
        return
    with phase("generation"):
        yield


def llm_request(method):
    """Decorator of an LLM's ``chat`` method: each call runs under :func:`llm_call`."""

    @functools.wraps(method)
    def timed(*args, **kwargs):
        with llm_call():
            return method(*args, **kwargs)

    return timed


__all__ = ["ENV", "LEVELS", "Clock", "configure", "level_name", "llm_call", "llm_request", "measure", "phase", "verbose"]
