"""What the service's routes share: :class:`ServiceState` (settings, the served version, the page
renderer, the thread pools of each kind of blocking work) and :class:`LLMSlots` (the LLM as a
bounded resource). One instance per app, at ``app.state.neusym`` (:func:`neusym.interfaces.service.app.create_app`);
the routes reach it through :func:`neusym.interfaces.service.routes.deps.service_state`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import anyio
from fastapi import Request
from fastapi.responses import Response

from neusym import package_version
from neusym.errors import BusyError, NeusymError
from neusym.settings import Settings, usable_cores
from neusym.interfaces.service.corpus import ServedVersion, VersionHolder
from neusym.interfaces.service.papers import PageRenderer

logger = logging.getLogger("neusym.interfaces.service")

DISCONNECT_POLL_S = 0.25
"""How often a long request (``/sql``, ``/ask/json``) checks whether its client is still there."""


class AskTimeout(NeusymError):
    """An agent run stopped at ``NEUSYM_AGENT_MAX_SECONDS`` (HTTP 503)."""


class LLMSlots:
    """The LLM as a resource with an owner: ``size`` runs use it at once (1 for the offline model,
    which has one slot; 4 for an OpenAI-compatible endpoint), at most ``queue_max`` more wait for it,
    each at most ``wait_s`` seconds. A run is counted from the moment its thread enters :meth:`hold`
    until it leaves it, so a cancelled run keeps its slot until it has really stopped. Thread-safe."""

    def __init__(self, size: int, queue_max: int, wait_s: float):
        self.size = max(1, int(size))
        self.queue_max = max(0, int(queue_max))
        self.wait_s = float(wait_s)
        self.running = 0
        self.waiting = 0
        self._free = threading.Semaphore(self.size)
        self._lock = threading.Lock()

    def check_room(self) -> None:
        """Raise :class:`BusyError` when ``size`` runs hold the LLM and ``queue_max`` wait already (in
        the event loop, so a request is refused before it starts; :meth:`hold` checks again)."""
        with self._lock:
            self._check_room()

    def _check_room(self) -> None:
        if self.running + self.waiting >= self.size + self.queue_max:
            raise BusyError(f"the LLM is busy: {self.running} run(s) hold it and {self.waiting} wait "
                            f"(NEUSYM_ASK_QUEUE_MAX={self.queue_max}); try again later",
                            retry_after_s=self._retry_after())

    def _retry_after(self) -> int:
        return max(5, min(300, int(self.wait_s // 4) or 5))

    @contextmanager
    def hold(self, cancel: threading.Event,
             on_queued: Callable[[int, int], None] | None = None) -> Iterator[bool]:
        """Wait for the LLM (in a worker thread) and hold it for the block; yields False instead when
        ``cancel`` is set while waiting. ``on_queued(running, waiting)`` is called once when the run
        has to wait. Raises :class:`BusyError` at once when the queue is full, or after ``wait_s`` of
        waiting."""
        deadline = time.monotonic() + self.wait_s
        with self._lock:
            self._check_room()
            self.waiting += 1
        held = self._free.acquire(blocking=False)
        if not held and on_queued is not None:
            with self._lock:
                on_queued(self.running, self.waiting)
        while not held:
            if cancel.is_set():
                with self._lock:
                    self.waiting -= 1
                yield False
                return
            if time.monotonic() >= deadline:
                with self._lock:
                    self.waiting -= 1
                raise BusyError(f"waited {self.wait_s:g} s for the LLM (NEUSYM_ASK_WAIT_S); it is still busy, try "
                                "again later", retry_after_s=self._retry_after())
            held = self._free.acquire(timeout=0.25)
        with self._lock:
            self.waiting -= 1
            self.running += 1
        try:
            yield True
        finally:
            with self._lock:
                self.running -= 1
            self._free.release()


class ServiceState:
    """What the routes share: the settings, the :class:`VersionHolder`, the page renderer and the
    thread pools (capacity limiters) of each kind of blocking work.

    Pool sizes: ``search`` = CPU cores (query encoding and the shard scans are CPU-bound; more
    threads only add queueing inside the process), ``sql`` = threads that hand queries to the SQL
    worker processes and wait for them (4 per worker; the workers, ``NEUSYM_SQL_WORKERS``, bound how many
    run, and a query that finds none free within ``NEUSYM_SQL_WAIT_S`` is a 503), ``pages`` = 2 renders, ``meta`` = 2 (paper details, schema, id checks),
    ``ask`` = the runs that hold or wait for the LLM (:class:`LLMSlots`: ``NEUSYM_ASK_CONCURRENCY``
    runs at a time, by default 1 with the offline model, which has one slot, or 4 with an
    OpenAI-compatible endpoint, plus ``NEUSYM_ASK_QUEUE_MAX`` waiting), ``calc`` = the expression
    evaluator's worker processes (:data:`neusym.query.calc.WORKERS`; each call has a deadline of its
    own, waiting included), so CPU-heavy tool calls never occupy the pools pages and metadata use.

    ``keys``: the service's own API keys (``/healthz`` shows its ``process`` to a caller with one of
    them); ``None`` when the app's authentication is the caller's (Airflow's login). ``version``: the
    neusym version the app reports.
    """

    def __init__(self, settings: Settings, holder: VersionHolder | None = None, *, keys: list[str] | None = None):
        self.settings = settings
        self.holder = holder or VersionHolder(settings)
        self.keys = keys
        self.version = str(package_version())
        self.renderer = PageRenderer()
        self.started = time.monotonic()
        self.llm = LLMSlots(settings.ask_concurrency or (4 if settings.llm_base_url else 1), settings.ask_queue_max,
                            settings.ask_wait_s)
        from neusym.query.calc import WORKERS as CALC_WORKERS

        self.sizes = {"search": max(2, usable_cores()), "sql": 4 * settings.sql_workers, "pages": 2, "meta": 2,
                      "calc": CALC_WORKERS, "ask": self.llm.size + self.llm.queue_max}
        self._limiters: dict[str, anyio.CapacityLimiter] = {}
        self._lock = threading.Lock()

    def limiter(self, kind: str) -> anyio.CapacityLimiter:
        """The capacity limiter of one kind of work (created in the running event loop)."""
        with self._lock:
            if kind not in self._limiters:
                self._limiters[kind] = anyio.CapacityLimiter(self.sizes[kind])
            return self._limiters[kind]

    async def run(self, kind: str, fn: Callable[[], Any]) -> Any:
        """Run blocking ``fn`` in the ``kind`` pool."""
        return await anyio.to_thread.run_sync(fn, limiter=self.limiter(kind))

    async def with_version(self, kind: str, fn: Callable[[ServedVersion], Any]) -> Any:
        """Run blocking ``fn(served)`` in the ``kind`` pool on the served version (held meanwhile)."""

        def work() -> Any:
            with self.holder.use() as served:
                return fn(served)

        return await self.run(kind, work)

    async def paper_titles(self, paper_ids: list[str]) -> dict[str, str]:
        """paper id -> title of those of ``paper_ids`` the served version holds (the ``meta`` pool);
        ids it does not hold are absent."""
        from neusym.interfaces.service.papers import paper_titles

        def work(served: ServedVersion) -> dict[str, str]:
            cur = served.cursor()
            try:
                return paper_titles(cur, paper_ids)
            finally:
                cur.close()

        return await self.with_version("meta", work)

    async def with_version_until_disconnect(self, kind: str, request: Request,
                                            fn: Callable[[ServedVersion, threading.Event], Any]) -> Any:
        """:meth:`run_until_disconnect` of ``fn(served, cancel)`` on the served version (held meanwhile)."""

        def work(cancel: threading.Event) -> Any:
            with self.holder.use() as served:
                return fn(served, cancel)

        return await self.run_until_disconnect(kind, request, work)

    async def run_until_disconnect(self, kind: str, request: Request, fn: Callable[[threading.Event], Any]) -> Any:
        """Run blocking ``fn(cancel)`` in the ``kind`` pool; ``cancel`` is set as soon as the client of
        ``request`` goes away (checked every 0.25 s), so ``fn`` can stop its work (a SQL worker is
        killed, an LLM call stops at its next token). After a disconnect this waits for ``fn`` to
        end and returns an empty ``Response`` (status 499): nobody is there to read it."""
        cancel = threading.Event()
        task = asyncio.ensure_future(self.run(kind, lambda: fn(cancel)))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
                if done:
                    return task.result()
                if await request.is_disconnected():
                    cancel.set()
                    logger.info("client of %s %s went away; its work is cancelled", request.method, request.url.path)
                    with contextlib.suppress(Exception):
                        await task
                    return Response(status_code=499)
        finally:
            cancel.set()
