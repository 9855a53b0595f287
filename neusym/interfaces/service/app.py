"""The query layer as an HTTP service: one FastAPI app over the current corpus version.

Endpoints (OpenAPI at ``/openapi.json``, docs at ``/docs``):

========================================== ==========================================================
``GET /healthz``                           the corpus version being served (503 before the first publish)
``GET /search``                            paper search with snippets and venue/year facets
``POST /ask``                              the agent, streamed as server-sent events (start, step..., answer)
``POST /ask/json``                         the same, one JSON answer at the end
``POST /sql``                              read-only SQL, time-limited, row- and byte-capped, JSON or CSV
``GET /schema``                            tables and views with their comments, example queries
``GET /papers/{paper_id}``                 metadata, section tree, tables, figures, equations, references
``GET /papers/{paper_id}/pages/{n}.png``   a page as PNG, ``bbox=x0,y0,w,h`` highlighted (``crop=true``: just the box)
``GET /v1/models``                         the agent's methods as OpenAI models (``neusym-auto``, ...)
``POST /v1/chat/completions``              the agent as an OpenAI-compatible chat model (:mod:`.openai_compat`)
``POST /mcp``                               the MCP server: the corpus as tools for LLM clients (:mod:`.mcp`)
``GET /``                                  the web page (static files under ``/static``)
========================================== ==========================================================

Read-only by construction: the app never opens the writer's database; every query runs on the
served version's read-only DuckDB file (:mod:`neusym.query.sqlsafe` for user SQL) and its read-only
vector shards. Blocking work runs in thread pools sized for the machine (:class:`ServiceState`),
so the event loop keeps accepting requests while a search, a query, a page render or an agent run
is under way. Every request runs under a budget (docs/service.md, "Budgets"): SQL in worker
processes with memory and time limits, the LLM as a bounded resource (:class:`LLMSlots`), work
cancelled when its client goes away, request bodies of at most :data:`MAX_BODY_BYTES`. Errors are
JSON ``{"detail": "..."}`` with a 4xx status (503 when nothing is published yet or a bounded
resource is full, with ``Retry-After``); an unexpected exception is logged and answered with a 500
naming its type, never a traceback, on a connection that stays usable (:class:`UnexpectedErrors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections import Counter
from contextlib import asynccontextmanager, contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Literal

import anyio
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from neusym.errors import BusyError, NeusymError, SQLError, SQLResourceError, SQLTimeoutError, UnsafeSQLError
from neusym import package_version
from neusym.settings import Settings, usable_cores
from neusym.store.versions import NoCorpusVersion
from neusym.interfaces.service.auth import api_key_dependency, checked_keys, key_is_valid, presented_key
from neusym.interfaces.service.corpus import ServedVersion, VersionHolder
from neusym.interfaces.service.sql_examples import SQL_EXAMPLES
from neusym.interfaces.service.models import (
    AskRequest,
    ErrorResponse,
    Health,
    SchemaResponse,
    SearchResponse,
    SqlRequest,
    SqlResponse,
)
from neusym.interfaces.service.openai_compat import openai_router, use_openai_errors
from neusym.interfaces.service.papers import (BadRequest, NotFound, PageRenderer, paper_detail, paper_titles, parse_bbox,
                                              parse_paper_id, pdf_of, public_base_url)

logger = logging.getLogger("neusym.interfaces.service")

DISCONNECT_POLL_S = 0.25
"""How often a long request (``/sql``, ``/ask/json``) checks whether its client is still there."""
FACET_POOL = 100
"""Facets count the top this-many papers matching the query and the filters."""
SQL_MAX_BYTES = 1_000_000
"""Byte cap of one /sql response body when the settings have no ``sql_max_bytes``."""

_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Malformed or refused input."},
    401: {"model": ErrorResponse, "description": "API key (or Airflow login) missing or not valid."},
    404: {"model": ErrorResponse, "description": "Unknown paper or page."},
    422: {"model": ErrorResponse, "description": "Invalid parameter or body field."},
    503: {"model": ErrorResponse, "description": "No corpus version published yet."},
}


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
    """

    def __init__(self, settings: Settings, holder: VersionHolder | None = None):
        self.settings = settings
        self.holder = holder or VersionHolder(settings)
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


# ---------------------------------------------------------------------------------- helpers
def facet_counts(pool: list[Any]) -> dict:
    """``{"pool", "venue": [{"value", "count"}], "year": [...]}`` (:class:`~neusym.interfaces.service.models.Facets`) of
    the papers in ``pool`` (objects with ``venue`` and ``year``): venues most frequent first, years newest
    first, unknown (``None``) last."""
    venues = Counter(h.venue for h in pool)
    years = Counter(h.year for h in pool)
    return {
        "pool": len(pool),
        "venue": [{"value": v, "count": c}
                  for v, c in sorted(venues.items(), key=lambda kv: (kv[0] is None, -kv[1], str(kv[0])))],
        "year": [{"value": y, "count": c} for y, c in sorted(years.items(), key=lambda kv: (kv[0] is None, -(kv[0] or 0)))],
    }


def page_image_path(paper_id: str, page_number: int, bbox: Any = None) -> str:
    """The relative URL of a page image (what a citation links to): ``papers/ID/pages/N.png[?bbox=...]``."""
    url = f"papers/{paper_id}/pages/{int(page_number)}.png"
    if bbox:
        url += "?bbox=" + ",".join(f"{float(v):g}" for v in bbox)
    return url


def enrich_answer(result: dict, titles: dict[str, str] | None = None) -> dict:
    """Add ``page_image`` (relative URL of the cited page with the box) to each citation of an
    agent answer that names a paper (a UUID) and a page, and the paper title where the citation has none. Citations are
    optional (older agents have no ``citations`` key); the dict is changed in place and returned."""
    for c in result.get("citations") or []:
        if not isinstance(c, dict):
            continue
        pid, page = c.get("paper_id"), c.get("page_number")
        if pid and _is_uuid(str(pid)) and isinstance(page, int) and not isinstance(page, bool) and page >= 1:
            box = c.get("bounding_box")
            ok = isinstance(box, (list, tuple)) and len(box) == 4 and all(isinstance(v, (int, float)) for v in box)
            c["page_image"] = page_image_path(str(pid), page, box if ok else None)
        if titles and pid and not c.get("title"):
            c["title"] = titles.get(str(pid))
    return result


def _cap_json_rows(rows: list[list[Any]], max_bytes: int) -> tuple[list[list[Any]], bool]:
    """The longest prefix of ``rows`` whose JSON stays under ``max_bytes``; and whether rows were left out."""
    total = 0
    for i, row in enumerate(rows):
        total += len(json.dumps(row, ensure_ascii=False).encode("utf-8")) + 1
        if total > max_bytes:
            return rows[:i], True
    return rows, False


def _cap_text(text: str, max_bytes: int) -> tuple[str, bool]:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, False
    cut = data[:max_bytes].decode("utf-8", errors="ignore")
    return cut[: cut.rfind("\n") + 1], True


def _run_sql(settings: Settings, served: ServedVersion, sql: str, max_rows: int,
             cancel: threading.Event | None = None) -> Any:
    from neusym.query.sqlsafe import run_query

    return run_query(settings, served.version.db_path, sql, max_rows=max_rows, cancel=cancel)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = [str(x) for x in err.get("loc", ())]
        where = {"query": "query parameter", "body": "body field", "path": "path parameter",
                 "header": "header"}.get(loc[0], loc[0]) if loc else "input"
        name = ".".join(loc[1:]) or "(body)"
        msg = str(err.get("msg", "invalid"))
        if err.get("type") == "json_invalid":
            parts.append(f"the request body is not valid JSON: {msg}")
        else:
            parts.append(f"{where} '{name}': {msg}")
    return "; ".join(parts) or "invalid request"


MAX_BODY_BYTES = 1 << 20
"""Largest request body accepted (1 MiB; a /sql or /ask body is a few KB): larger ones are a 413."""


DRAIN_BYTES = 64 << 20
"""Most bytes of a refused body read and thrown away before the 413 is sent (64 MiB)."""

DRAIN_SECONDS = 10.0
"""Longest time spent reading and throwing away a refused body before the 413 is sent."""


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413 (by its Content-Length
    before the app sees it, or while a chunked body streams in) and never reaches a route.

    Before the 413 is sent, the rest of the body is read and thrown away (up to ``drain_bytes``
    and ``drain_seconds``; never buffered): the answer closes the connection, and closing a socket
    with unread bytes in it makes the kernel send a reset that can destroy the 413 before the
    client has read it (a client such as httpx sends its whole body before reading). A client
    that sent ``Expect: 100-continue`` has sent no body yet and gets the 413 at once; a body
    past the drain limits gets it at once too (it may then see a reset instead)."""

    def __init__(self, app: Any, max_bytes: int = MAX_BODY_BYTES, drain_bytes: int = DRAIN_BYTES,
                 drain_seconds: float = DRAIN_SECONDS):
        self.app = app
        self.max_bytes = int(max_bytes)
        self.drain_bytes = int(drain_bytes)
        self.drain_seconds = float(drain_seconds)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        expects_continue = any(n == b"expect" and v.lower() == b"100-continue" for n, v in headers)
        for name, value in headers:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    if not expects_continue and declared <= self.drain_bytes:
                        await self._drain(receive, 0)
                    await self._refuse(send, scope)
                    return
        seen = 0
        started = refused = False

        async def counting_receive() -> dict:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # a chunked body: answer now, the app sees a client that left
                    refused = True
                    if not started:
                        if message.get("more_body"):
                            await self._drain(receive, seen)
                        await self._refuse(send, scope)
                    return {"type": "http.disconnect"}
            return message

        async def tracking_send(message: dict) -> None:
            nonlocal started
            if refused:
                return  # the 413 has been sent
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except Exception:
            if not refused:
                raise

    async def _drain(self, receive: Callable, seen: int) -> None:
        """Read and drop the body's remaining messages until it ends, the client leaves, or the
        drain limits are reached (``seen`` bytes were read already)."""
        try:
            async with asyncio.timeout(self.drain_seconds):
                while seen <= self.drain_bytes:
                    message = await receive()
                    if message["type"] != "http.request":
                        return
                    seen += len(message.get("body", b""))
                    if not message.get("more_body"):
                        return
        except TimeoutError:
            return

    async def _refuse(self, send: Callable, scope: dict) -> None:
        message = f"request body larger than {self.max_bytes:,} bytes"
        path = scope.get("path") or ""
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root):]
        if path == "/v1" or path.startswith("/v1/"):  # OpenAI clients read {"error": {...}}
            body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                         "code": "request_too_large"}}).encode()
        else:
            body = json.dumps({"detail": message}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


class HeadAsGet:
    """ASGI middleware: a ``HEAD`` request is answered as its ``GET`` would be, with the same status and
    headers (``Content-Length`` included) and no body, as HTTP requires of every GET resource (feed readers
    and link checkers ask with HEAD); FastAPI routes declare GET only. Routes without GET answer 405 as
    before."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method") != "HEAD":
            await self.app(scope, receive, send)
            return
        ended = False

        async def headless_send(message: dict) -> None:
            nonlocal ended
            if message["type"] == "http.response.body":
                if ended:
                    return
                if message.get("more_body"):
                    return  # swallowed: the client asked for the headers only
                ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            await send(message)

        await self.app(dict(scope, method="GET"), receive, headless_send)


class RelativeRedirects:
    """ASGI middleware: a redirect whose ``Location`` the framework built from the request's ``Host``
    header (Starlette's trailing-slash redirects of routes and mounts: ``/static`` -> ``/static/``) is
    sent with the path and query only, so a client-chosen Host never comes back as a link."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for n, v in scope.get("headers") or [] if n == b"host"), "")

        async def relative_send(message: dict) -> None:
            if message["type"] == "http.response.start" and 300 <= message.get("status", 200) < 400:
                headers = []
                for name, value in message.get("headers") or []:
                    if name.lower() == b"location":
                        value = _relative_location(value.decode("latin-1"), host).encode("latin-1")
                    headers.append((name, value))
                message = dict(message, headers=headers)
            await send(message)

        await self.app(scope, receive, relative_send)


def _relative_location(location: str, host: str) -> str:
    """``location`` without scheme and host when it points at ``host`` (or has no host of ours at all)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(location)
    if parts.netloc and parts.netloc.lower() == host.lower():
        return urlunsplit(("", "", parts.path or "/", parts.query, parts.fragment))
    return location


class UnexpectedErrors:
    """ASGI middleware: an exception no handler turned into a response becomes a JSON 500
    (``{"detail": "internal error (TypeError); ..."}``) and is logged with its traceback; it is not
    re-raised to the server, so the client's keep-alive connection stays usable. (Starlette's own
    handler for ``Exception`` re-raises after answering, and uvicorn then drops the connection.)"""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # noqa: BLE001 - answered as a 500 without a traceback
            logger.exception("unexpected error in %s %s", scope.get("method"), scope.get("path"))
            if started:  # a streamed body was under way: nothing more can be sent on this response
                return
            body = json.dumps({"detail": f"internal error ({type(exc).__name__}); the server log has the details"})
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body.encode()})


# ------------------------------------------------------------------------------------- app
def create_app(settings: Settings | None = None, *, auth: Callable | None = None, protect_page: bool = False,
               holder: VersionHolder | None = None, warm_on_start: bool = True) -> FastAPI:
    """The FastAPI app of the service (see the module docstring).

    ``settings``: default ``Settings()`` from the environment (``NEUSYM_HOME`` etc.). ``auth``: a
    FastAPI dependency required by every endpoint but ``/healthz``, the page and its static files
    (default: the API keys of ``settings.api_keys``, open when there are none; the Airflow plugin
    passes Airflow's authentication). ``protect_page``: require ``auth`` for the page too.
    ``holder``: the version holder (default a new one on ``settings``). ``warm_on_start``: open
    the current version and warm the query encoder during startup, so the first request is fast
    (lifespan events do not run when the app is mounted inside another app, e.g. Airflow's
    api-server: there the first request opens it).
    """
    settings = settings or Settings()
    state = ServiceState(settings, holder)
    keys: list[str] | None = None  # the service's own keys; None: ``auth`` is the caller's (Airflow's login)
    if auth is None:
        keys = checked_keys(list(settings.api_keys or []))
        auth = api_key_dependency(keys)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if warm_on_start:
            try:
                await anyio.to_thread.run_sync(state.holder.acquire)
                served = state.holder.current()
                if served is not None:
                    state.holder.release(served)
            except NoCorpusVersion as exc:
                logger.warning("no corpus version yet (%s); /healthz answers 503 until one is published", exc)
            from neusym.query.sqlsafe import QueryBudget, start_workers

            await anyio.to_thread.run_sync(lambda: start_workers(QueryBudget.from_settings(settings)))
        state.holder.start_watcher()
        try:
            yield
        finally:
            await app.state.mcp.aclose()
            state.holder.close()

    neusym_version = package_version()

    app = FastAPI(
        title="neusym",
        version=str(neusym_version),
        summary="NeuSym-RAG query layer: paper search, the agent, read-only SQL and page images over the "
                "current corpus version.",
        lifespan=lifespan,
        responses=_RESPONSES,
        redoc_url=None,  # one documentation page: /docs (Swagger UI over /openapi.json)
    )
    app.state.neusym = state

    # -- errors: JSON {"detail"} with a 4xx, never a traceback --------------------------------
    @app.exception_handler(NoCorpusVersion)
    async def _no_version(request: Request, exc: NoCorpusVersion) -> JSONResponse:
        return JSONResponse({"detail": f"no corpus to serve yet: {exc}"}, status_code=503,
                            headers={"Retry-After": "60"})

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(BusyError)
    async def _busy(request: Request, exc: BusyError) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "error": "busy"}, status_code=503,
                            headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(AskTimeout)
    async def _ask_timeout(request: Request, exc: AskTimeout) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "error": "time_limit"}, status_code=503)

    @app.exception_handler(BadRequest)
    async def _bad_request(request: Request, exc: BadRequest) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_message(exc)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no such endpoint: {request.method} {request.url.path} (see /docs)"
        elif exc.status_code == 405:
            detail = f"method {request.method} is not allowed on {request.url.path}"
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    app.add_middleware(UnexpectedErrors)
    app.add_middleware(RelativeRedirects)
    app.add_middleware(HeadAsGet)
    app.add_middleware(BodyLimit)  # outermost: a too large body never reaches a route

    # -- public: health, page, static files ------------------------------------------------------
    @app.get("/healthz", response_model=Health, tags=["service"], responses={503: _RESPONSES[503]})
    async def healthz(request: Request) -> Health:
        """The corpus version being served (and that the process answers). 503 with a clear message
        while nothing has been published in ``NEUSYM_HOME``. Never needs an API key; ``process``
        (the answering server process) is only given to callers with a valid key, or to everyone when
        the service has no keys."""
        show_process = keys is not None and key_is_valid(presented_key(request.headers), keys)

        def work(served: ServedVersion) -> Health:
            return Health(version=served.number, papers=served.papers,
                          published_at=served.version.info.manifest.get("published_at")
                          or served.version.info.manifest.get("created_at"),
                          opened_at=served.opened_at, switches=state.holder.switches,
                          uptime_s=round(time.monotonic() - state.started, 3), neusym=str(neusym_version),
                          process=os.getpid() if show_process else None)

        served = state.holder.current()
        if served is not None:  # answered in the event loop: never queued behind busy pools
            return work(served)
        return await state.with_version("meta", work)  # the first open (blocking) runs in a thread

    static_dir = Path(str(resources.files("neusym.interfaces.service").joinpath("static")))
    page_deps = [Depends(auth)] if protect_page else []

    @app.get("/", include_in_schema=False, dependencies=page_deps)
    async def index(request: Request) -> Response:
        if not request.url.path.endswith("/"):  # relative links need the trailing slash
            # a relative Location (the last path segment plus "/"): never the Host header a client sent
            name = request.url.path.rstrip("/").rsplit("/", 1)[-1]
            return RedirectResponse(f"{name}/" + (f"?{request.url.query}" if request.url.query else ""))
        return FileResponse(static_dir / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=static_dir), name="static")

    # -- protected API -------------------------------------------------------------------------
    api = APIRouter(dependencies=[Depends(auth)])

    @api.get("/search", response_model=SearchResponse, tags=["search"])
    async def search(
        request: Request,
        q: str = Query(..., min_length=1, max_length=1000, description="A question or keywords."),
        venue: str | None = Query(None, max_length=64, description="Conference abbreviation (acl, emnlp, ...) "
                                  "or 'findings' (Findings volumes of any conference)."),
        year: int | None = Query(None, ge=1900, le=2100, description="Publication year."),
        author: str | None = Query(None, max_length=200, description="Author full name or last name."),
        limit: int = Query(10, ge=1, le=100, description="Papers returned."),
        sort: Literal["relevance", "cited_by"] = Query(
            "relevance", description="relevance: the ranking's order. cited_by: the first 100 papers of the ranking "
            "ordered by how many papers of this corpus cite them (in-corpus citation graph), then by relevance."),
        min_cited_by: int | None = Query(None, ge=0, le=1_000_000, description="Only papers cited by at least this many "
                                         "papers of this corpus (among the first 100 of the ranking)."),
        mode: Literal["default", "accurate"] = Query(
            "default", description="default: the hybrid search alone (tens of ms). accurate: the configured LLM "
            "first writes a hypothetical title and abstract of the paper asked for, whose words and vector join the "
            "query (HyDE): one LLM call per query (seconds; if it fails the default ranking is kept and hyde.note "
            "says why)."),
    ) -> Response:
        """Papers best matching ``q`` (hybrid BM25 + all-MiniLM-L6-v2 paper index, see
        :mod:`neusym.store.paper_index`), each with its score and the abstract sentence closest to the query,
        plus facet counts by venue and year over the top 100 papers matching the query and the
        filters (always those of the default ranking). Filters are applied inside the index, so every
        hit satisfies them. With ``mode=accurate`` the LLM's hypothetical abstract joins the query
        (:mod:`neusym.query.hyde`, run in the agent's pool, so it queues behind agent runs on the
        offline model); each hit then has ``default_rank`` and the response a ``hyde`` summary (the
        hypothetical title and abstract, whether they were used, the LLM's time)."""
        if not q.strip():
            raise BadRequest("q must not be blank")
        if mode == "accurate" and not settings.llm_base_url and not settings.search_accurate_offline:
            raise BadRequest("mode=accurate needs an LLM: set NEUSYM_LLM_BASE_URL to an OpenAI-compatible endpoint, "
                             "or NEUSYM_SEARCH_ACCURATE_OFFLINE=true to use the offline model in this process "
                             "(about 5 s per query on 2 cores, one query at a time)")
        from neusym.query.paper_search import check_search

        if mode == "accurate":
            state.llm.check_room()
        started = time.perf_counter()
        options = {"venue": venue or None, "year": year, "author": author or None, "limit": limit}
        try:
            check_search(q, limit=limit, sort=sort, min_cited_by=min_cited_by, mode=mode)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

        def work(served: ServedVersion) -> tuple:
            try:  # the facets always count the default ranking's pool; in the accurate mode its hits come next
                found, pool = served.search(q, **options, sort=sort, min_cited_by=min_cited_by, mode="default",
                                            pool=FACET_POOL)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            return served.number, found, pool

        number, found, pool = await state.with_version("search", work)
        payload = {"version": number, "query": q, "mode": mode,
                   "filters": {"venue": venue, "year": year, "author": author, "limit": limit, "sort": sort,
                               "min_cited_by": min_cited_by}}
        if mode == "accurate":
            from neusym.llm.chat import CancellableLLM, make_llm

            def expanded(cancel: threading.Event) -> Any:
                with state.llm.hold(cancel) as held:
                    if not held:
                        return None
                    with state.holder.use() as served:
                        outcome, _ = served.search(q, **options, mode="accurate", settings=state.settings,
                                                   llm=CancellableLLM(make_llm(state.settings), cancel))
                        return served.number, outcome

            result = await state.run_until_disconnect("ask", request, expanded)
            if result is None or isinstance(result, Response):  # the client went away
                return Response(status_code=499)
            payload["version"], found = result
            payload["hyde"] = found.hyde
        cited = found.cited_by
        payload.update({"hits": [{"rank": i + 1, **h.to_dict(),
                                  **({"cited_by": cited.get(h.paper_id, 0)} if cited is not None else {})}
                                 for i, h in enumerate(found.hits)],
                        "facets": facet_counts(pool), "seconds": round(time.perf_counter() - started, 4)})
        # serialised here (the shape is SearchResponse, as documented): no second validation pass
        return Response(json.dumps(payload, ensure_ascii=False), media_type="application/json")

    # -- citation export (neusym.query.citation_export): a search's hits or one paper as BibTeX / RIS ----------
    # Registered before /papers/{paper_id}, whose path parameter would otherwise take "ID.bib".
    def export_query(
        q: str = Query(..., min_length=1, max_length=1000, description="A question or keywords."),
        venue: str | None = Query(None, max_length=64, description="Conference abbreviation (acl, emnlp, ...) "
                                  "or 'findings' (Findings volumes of any conference)."),
        year: int | None = Query(None, ge=1900, le=2100, description="Publication year."),
        author: str | None = Query(None, max_length=200, description="Author full name or last name."),
        limit: int = Query(10, ge=1, le=100, description="Papers returned."),
    ) -> dict:
        """The parameters of /search (default mode) shared by /search.bib and /search.ris."""
        if not q.strip():
            raise BadRequest("q must not be blank")
        return {"q": q, "venue": venue or None, "year": year, "author": author or None, "limit": limit}

    async def search_records(params: dict) -> list[dict]:
        """metadata records (:func:`neusym.query.citation_export.paper_records`) of /search's hits, best first,
        hits and rows from one served version."""
        from neusym.query.citation_export import paper_records

        def work(served: ServedVersion) -> list[dict]:
            try:  # the ranking /search shows (same pool depth, so the same fused scores)
                found, _ = served.search(params["q"], venue=params["venue"], year=params["year"],
                                         author=params["author"], limit=params["limit"], pool=FACET_POOL,
                                         with_citations=False)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            cur = served.cursor()
            try:
                return paper_records(cur, [h.paper_id for h in found.hits])
            finally:
                cur.close()

        return await state.with_version("search", work)

    async def paper_record(paper_id: str) -> list[dict]:
        """[the metadata record of one paper]; :class:`NotFound` for a malformed or unknown id."""
        from neusym.query.citation_export import paper_records

        pid = parse_paper_id(paper_id)

        def work(served: ServedVersion) -> list[dict]:
            cur = served.cursor()
            try:
                return paper_records(cur, [pid])
            finally:
                cur.close()

        records = await state.with_version("meta", work)
        if not records:
            raise NotFound(f"no paper with id {pid} in this corpus version")
        return records

    def export_response(records: list[dict], kind: str, filename: str) -> Response:
        from neusym.query.citation_export import BIBTEX_MEDIA_TYPE, RIS_MEDIA_TYPE, to_bibtex, to_ris

        text, media = (to_bibtex(records), BIBTEX_MEDIA_TYPE) if kind == "bib" else (to_ris(records), RIS_MEDIA_TYPE)
        return Response(text, media_type=media,
                        headers={"Content-Disposition": f'attachment; filename="{filename}.{kind}"'})

    _BIB = {200: {"content": {"application/x-bibtex": {}}, "description": "BibTeX entries, one per paper."}}
    _RIS = {200: {"content": {"application/x-research-info-systems": {}}, "description": "RIS records, one per paper."}}

    @api.get("/search.bib", tags=["search"], response_class=Response, responses=_BIB)
    async def search_bibtex(params: dict = Depends(export_query)) -> Response:
        """The hits of ``/search`` (default mode, same parameters) as BibTeX, best first: a crawled paper's
        stored entry (e.g. the ACL Anthology's, with its citation key and DOI), else one generated from
        its metadata (:mod:`neusym.query.citation_export`). An attachment ``neusym-search.bib``."""
        return export_response(await search_records(params), "bib", "neusym-search")

    @api.get("/search.ris", tags=["search"], response_class=Response, responses=_RIS)
    async def search_ris(params: dict = Depends(export_query)) -> Response:
        """The hits of ``/search`` (default mode, same parameters) as RIS records (TY CONF or GEN, TI, AU,
        PY, T2, UR, AB, DO, ID), best first. An attachment ``neusym-search.ris``."""
        return export_response(await search_records(params), "ris", "neusym-search")

    @api.get("/papers/{paper_id}.bib", tags=["papers"], response_class=Response, responses=_BIB)
    async def paper_bibtex(paper_id: str = PathParam(..., description="metadata.paper_id (UUID)")) -> Response:
        """One paper's BibTeX entry (as in ``/search.bib``). 404 for an unknown or malformed id."""
        return export_response(await paper_record(paper_id), "bib", f"neusym-{parse_paper_id(paper_id)}")

    @api.get("/papers/{paper_id}.ris", tags=["papers"], response_class=Response, responses=_RIS)
    async def paper_ris(paper_id: str = PathParam(..., description="metadata.paper_id (UUID)")) -> Response:
        """One paper's RIS record (as in ``/search.ris``). 404 for an unknown or malformed id."""
        return export_response(await paper_record(paper_id), "ris", f"neusym-{parse_paper_id(paper_id)}")

    @api.post("/sql", tags=["sql"], response_model=SqlResponse,
              responses={200: {"content": {"text/csv": {}}, "description": "JSON (format json) or CSV (format csv)."}})
    async def sql(body: SqlRequest, request: Request) -> Response:
        """One read-only query on the served version's database (:mod:`neusym.query.sqlsafe`: one SELECT,
        no file/network access, ``NEUSYM_SQL_TIMEOUT_S`` time limit, at most ``NEUSYM_SQL_MAX_ROWS``
        rows and a byte cap on the response). Refused statements, SQL errors and timeouts are 400
        with the reason. ``format: csv`` answers ``text/csv`` with ``X-Neusym-Version``,
        ``X-Neusym-Row-Count`` and ``X-Neusym-Truncated`` headers."""
        from neusym.query.sqlsafe import format_result, to_jsonable

        max_rows = min(body.max_rows or settings.sql_max_rows, settings.sql_max_rows)
        max_bytes = int(getattr(settings, "sql_max_bytes", SQL_MAX_BYTES))

        def work(served: ServedVersion, cancel: threading.Event) -> Response:
            try:
                result = _run_sql(settings, served, body.sql, max_rows, cancel)
            except BusyError as exc:
                return JSONResponse({"detail": str(exc), "error": "busy"}, status_code=503,
                                    headers={"Retry-After": str(exc.retry_after_s)})
            except (UnsafeSQLError, SQLError, SQLTimeoutError) as exc:
                kind = {UnsafeSQLError: "refused", SQLTimeoutError: "timeout",
                        SQLResourceError: "resource"}.get(type(exc), "sql_error")
                return JSONResponse({"detail": str(exc), "error": kind}, status_code=400)
            by_bytes = bool(getattr(result, "bytes_capped", False))
            if body.format == "csv":
                text, cut = _cap_text(format_result(result, "csv"), max_bytes)
                rows = max(text.count("\n") - 1, 0) if cut else result.row_count
                truncated = result.truncated or cut
                return Response(text, media_type="text/csv; charset=utf-8", headers={
                    "X-Neusym-Version": str(served.number), "X-Neusym-Row-Count": str(rows),
                    "X-Neusym-Truncated": ("bytes" if (cut or by_bytes) else "rows") if truncated else "false"})
            rows = [[to_jsonable(v) for v in row] for row in result.rows]
            rows, cut = _cap_json_rows(rows, max_bytes)
            truncated = result.truncated or cut
            payload = SqlResponse(version=served.number, columns=result.columns, types=result.types, rows=rows,
                                  row_count=len(rows), truncated=truncated,
                                  truncated_by=("bytes" if (cut or by_bytes) else "rows") if truncated else None,
                                  cells_cut=int(getattr(result, "cells_cut", 0)),
                                  elapsed_s=round(result.elapsed_s, 4))
            return Response(payload.model_dump_json(), media_type="application/json")

        return await state.with_version_until_disconnect("sql", request, work)

    @api.get("/schema", tags=["sql"], response_model=SchemaResponse,
             responses={200: {"content": {"text/markdown": {}}}})
    async def schema(format: str = Query("json", pattern="^(json|markdown)$",
                                         description="json, or markdown (the text of docs/schema.md)")) -> Any:
        """Every table and view of the served version with its comments (what the agent sees as
        [Database Schema], docs/schema.md) and example queries over the documented views."""

        def work(served: ServedVersion) -> Any:
            if format == "markdown":
                return PlainTextResponse(served.schema_markdown, media_type="text/markdown; charset=utf-8")
            relations = [{"name": t["table"], "kind": t.get("kind", "table"), "comment": t.get("comment"),
                          "primary_key": list(t.get("primary_key") or []),
                          "columns": [{"name": n, "type": str(ty), "comment": c} for n, ty, c in t["columns"]]}
                         for t in served.schema]
            return SchemaResponse(version=served.number, relations=relations, examples=SQL_EXAMPLES)

        return await state.with_version("meta", work)

    @api.get("/papers/{paper_id}", tags=["papers"])
    async def paper(paper_id: str = PathParam(..., description="metadata.paper_id (UUID)")) -> JSONResponse:
        """One paper: metadata, the section tree (with texts), tables (sanitised HTML), figures,
        equations and references, each element with its page and bounding box
        (``[x0, y0, width, height]`` in PDF points from the top-left corner). 404 for an unknown id."""

        def work(served: ServedVersion) -> dict:
            cur = served.cursor()
            try:
                return {"version": served.number, **paper_detail(cur, paper_id, settings)}
            finally:
                cur.close()

        return JSONResponse(jsonable_encoder(await state.with_version("meta", work)))

    @api.get("/papers/{paper_id}/similar", tags=["papers"])
    async def similar(paper_id: str = PathParam(..., description="metadata.paper_id (UUID)"),
                      limit: int = Query(10, ge=1, le=50, description="Papers returned.")) -> JSONResponse:
        """The papers most similar to one paper, best first: nearest neighbours of its title-and-abstract
        vector in the paper index (:func:`neusym.query.paper_search.similar_papers`); ``score`` is the
        cosine similarity. 404 for an unknown id."""
        from neusym.query.paper_search import similar_papers

        def work(served: ServedVersion) -> dict:
            pid = parse_paper_id(paper_id)
            cur = served.cursor()
            try:
                if not paper_titles(cur, [pid]):
                    raise NotFound(f"no paper with id {pid} in this corpus version")
            finally:
                cur.close()
            hits = similar_papers(served.index, pid, limit=limit)
            return {"version": served.number, "paper_id": pid,
                    "hits": [{"rank": i + 1, **h.to_dict()} for i, h in enumerate(hits)]}

        return JSONResponse(jsonable_encoder(await state.with_version("search", work)))

    @api.get("/overview", tags=["papers"])
    async def overview() -> JSONResponse:
        """The corpus at a glance (the landing page): papers, parsed papers and pages; papers per venue and
        year (view ``papers_per_venue_year``); what the last refresh added (from the version's manifest);
        the size of the in-corpus citation graph (:func:`neusym.interfaces.service.feeds.corpus_overview`);
        ``stages``: seconds per stage of the refresh that published the version (:mod:`neusym.ingest.stages`)."""
        from neusym.ingest.stages import recorded
        from neusym.interfaces.service.feeds import corpus_overview

        def work(served: ServedVersion) -> dict:
            cur = served.cursor()
            try:
                out = corpus_overview(cur, served.version.info.manifest, served.number)
            finally:
                cur.close()
            out["stages"] = recorded(settings, served.version.info.manifest, served.number)
            return out

        return JSONResponse(jsonable_encoder(await state.with_version("meta", work)))

    @api.get("/watches", tags=["watches"])
    async def watches(recent: int = Query(5, ge=0, le=50, description="Newest matches listed per watch.")) -> JSONResponse:
        """The saved searches (``neusym watch add``) with the papers each found: ``matches``, ``new`` (papers
        of the newest corpus version that matched any, the first evaluation not counted), ``feed`` (the
        relative URL of its Atom feed) and its ``recent`` matches, newest first."""
        from neusym.interfaces.service.feeds import watches_payload
        from neusym.store.watches import WatchStore

        def work() -> list[dict]:
            with WatchStore(settings, readonly=True) as store:
                listed = store.list()
                return watches_payload(listed, store.counts(),
                                       {w.name: store.matches(w.name, limit=recent) for w in listed} if recent else {})

        return JSONResponse(jsonable_encoder({"watches": await state.run("meta", work)}))

    @api.get("/feeds/{name}.atom", tags=["watches"], response_class=Response,
             responses={200: {"content": {"application/atom+xml": {}}, "description": "An Atom 1.0 feed."}})
    async def feed(request: Request, name: str = PathParam(..., max_length=64, description="The watch's name.")) -> Response:
        """The Atom feed of one saved search: its newest matched papers (at most 50), each linking to the
        paper on this page. 404 for an unknown watch."""
        from neusym.interfaces.service.feeds import FEED_ENTRIES, atom_feed
        from neusym.store.watches import WatchError, WatchStore

        def work() -> bytes:
            with WatchStore(settings, readonly=True) as store:
                try:
                    watch = store.get(name)
                except WatchError as exc:
                    raise NotFound(str(exc)) from None
                return atom_feed(watch, store.matches(name, limit=FEED_ENTRIES),
                                 base_url=public_base_url(request.scope, settings.public_url))

        body = await state.run("meta", work)
        return Response(body, media_type="application/atom+xml; charset=utf-8")

    @api.get("/papers/{paper_id}/pages/{page}.png", tags=["papers"], response_class=Response,
             responses={200: {"content": {"image/png": {}}, "description": "The rendered page."}})
    async def page_image(
        paper_id: str = PathParam(..., description="metadata.paper_id (UUID)"),
        page: str = PathParam(..., description="Page number, from 1."),
        bbox: str | None = Query(None, description="x0,y0,width,height in PDF points from the top-left corner: "
                                 "the box to highlight (what a citation points at)."),
        zoom: float = Query(1.5, description="Scale: 1 = 72 dpi; 0.5-4. A page or box larger than the pixel "
                            "budget (16 million pixels) is rendered at the largest zoom that fits; the "
                            "X-Neusym-Zoom header says which."),
        crop: bool = Query(False, description="Render only the box (and a small margin)."),
    ) -> Response:
        """Page ``page`` of the paper's PDF as PNG, with ``bbox`` outlined and shaded (or cropped to
        it). 404 for an unknown paper or page or a paper without a PDF here; 400 for a malformed box
        or one outside the page."""
        try:
            number = int(page)
        except ValueError:
            raise NotFound(f"no page {page[:40]!r}: pages are numbered from 1") from None
        if number < 1:
            raise NotFound(f"no page {number}: pages are numbered from 1")
        box = parse_bbox(bbox)
        pid = parse_paper_id(paper_id)

        def work(served: ServedVersion) -> Any:
            cur = served.cursor()
            try:
                pdf, sha = pdf_of(cur, pid, settings)
            finally:
                cur.close()
            return state.renderer.render(pdf, number, bbox=box, zoom=zoom, crop=crop, key=sha)

        image = await state.with_version("pages", work)
        return Response(image.png, media_type="image/png",
                        headers={"Cache-Control": "private, max-age=3600", "ETag": f'"{image.etag}"',
                                 "X-Neusym-Zoom": f"{image.zoom:g}"})

    # -- the agent ---------------------------------------------------------------------------
    def check_ask(body: AskRequest) -> AskRequest:
        """Refuse a blank question, an unknown method or unknown paper ids before anything runs."""
        from neusym.query.agent.methods import MethodError, get_method

        if not body.question.strip():
            raise BadRequest("question must not be blank")
        if body.method is not None:
            try:
                get_method(body.method)
            except MethodError as exc:
                raise BadRequest(str(exc)) from None
        ids = []
        for raw in body.paper_ids:
            try:
                ids.append(parse_paper_id(raw))
            except NotFound:
                raise BadRequest(f"paper_ids: {str(raw)[:80]!r} is not a paper id (a UUID)") from None
        body.paper_ids = ids
        return body

    async def resolved_ask(body: AskRequest) -> AskRequest:
        body = check_ask(body)
        if body.paper_ids:
            def work(served: ServedVersion) -> dict[str, str]:
                cur = served.cursor()
                try:
                    return paper_titles(cur, body.paper_ids)
                finally:
                    cur.close()

            known = await state.with_version("meta", work)
            missing = [p for p in body.paper_ids if p not in known]
            if missing:
                raise NotFound(f"unknown paper id(s) in this corpus version: {', '.join(missing)}")
        state.llm.check_room()  # a full queue is a 503 before anything starts (or a stream opens)
        return body

    def run_agent(body: AskRequest, on_event: Callable[[str, dict], None], cancel: threading.Event) -> dict:
        """One agent run: waits for the LLM (:class:`LLMSlots`), then answers on the served version
        (held until it ends) and returns the enriched answer. ``cancel`` set (the client went away)
        stops it at its next token, SQL query or step and returns ``{}``; past
        ``NEUSYM_AGENT_MAX_SECONDS`` it stops with :class:`AskTimeout`."""
        from neusym.llm.chat import RunCancelled
        from neusym.query.agent.actions import Environment
        from neusym.query.agent.methods import DEFAULT_METHOD
        from neusym.query.ask import ask

        class _Stop(Exception):
            pass

        def on_step(step: Any) -> None:
            if cancel.is_set():
                raise _Stop()
            on_step.turn += 1
            on_event("step", {"index": on_step.turn, **step.to_dict()})

        on_step.turn = 0
        method = body.method or DEFAULT_METHOD
        with state.llm.hold(cancel, on_queued=lambda running, waiting: on_event(
                "queued", {"running": running, "waiting": waiting})) as held:
            if not held:
                return {}
            timed_out = threading.Event()

            def time_limit() -> None:
                timed_out.set()
                cancel.set()

            timer = threading.Timer(settings.agent_max_seconds, time_limit)
            timer.daemon = True
            timer.start()
            try:
                with state.holder.use() as served:
                    on_event("start", {"version": served.number, "question": body.question, "method": method,
                                       "paper_ids": body.paper_ids})
                    env = Environment(settings, version=served.version, db_schema=served.agent_schema)
                    try:
                        result = ask(body.question, settings=settings, method=method, paper_ids=body.paper_ids or None,
                                     answer_format=body.answer_format, env=env, on_step=on_step, cancel=cancel)
                    except (_Stop, RunCancelled):
                        if timed_out.is_set():
                            raise AskTimeout(f"the answer was stopped after {settings.agent_max_seconds:g} s "
                                             "(NEUSYM_AGENT_MAX_SECONDS); ask a narrower question or name the "
                                             "paper") from None
                        return {}
                    finally:
                        env.close()
                    out = {"version": served.number, **result.to_dict()}
                    pids = {str(c.get("paper_id")) for c in out.get("citations") or []
                            if isinstance(c, dict) and c.get("paper_id")}
                    titles: dict[str, str] = {}
                    if pids:
                        cur = served.cursor()
                        try:
                            titles = paper_titles(cur, [p for p in pids if _is_uuid(p)])
                        finally:
                            cur.close()
                    return enrich_answer(out, titles)
            finally:
                timer.cancel()

    @api.post("/ask", response_class=EventSourceResponse, tags=["ask"],
              responses={200: {"description": "Server-sent events: `queued` {running, waiting} while other runs hold "
                                              "the model, `start` {version, question, method, paper_ids}, one `step` "
                                              "per agent turn (thought, action, arguments, observation, ...), then "
                                              "`answer` (the JSON answer, as /ask/json) or `error` {detail}."},
                         503: {"model": ErrorResponse, "description": "The queue for the LLM is full (Retry-After)."}})
    async def ask(body: AskRequest = Depends(resolved_ask)) -> AsyncIterator[ServerSentEvent]:
        """Answer a question with the agent, streamed step by step as server-sent events (an answer
        can take a minute on the offline model; each step is sent as soon as it is done, and
        keep-alive comments flow meanwhile). Unknown methods and paper ids are refused (400/404)
        and a full queue for the LLM (``NEUSYM_ASK_QUEUE_MAX`` runs waiting) is a 503 with
        ``Retry-After``, before the stream starts. A client that disconnects cancels its run."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()

        def emit(kind: str, data: dict) -> None:
            loop.call_soon_threadsafe(events.put_nowait, (kind, data))

        def work() -> None:
            try:
                answer = run_agent(body, emit, cancel)
                if answer:
                    emit("answer", answer)
            except BusyError as exc:
                emit("error", {"detail": str(exc), "retry_after": exc.retry_after_s})
            except NeusymError as exc:
                emit("error", {"detail": str(exc)})
            except Exception as exc:  # noqa: BLE001 - reported to the client without a traceback
                logger.exception("agent run failed")
                emit("error", {"detail": f"internal error ({type(exc).__name__}); the server log has the details"})
            finally:
                emit("end", {})

        task = asyncio.ensure_future(anyio.to_thread.run_sync(work, limiter=state.limiter("ask")))
        try:
            while True:
                kind, data = await events.get()
                if kind == "end":
                    break
                yield ServerSentEvent(event=kind, data=data)
        finally:
            cancel.set()  # a client that went away stops the run at its next token, query or step
            if task.done() and not task.cancelled() and task.exception() is not None:
                logger.error("agent task: %s", task.exception())

    @api.get("/ask/methods", tags=["ask"])
    async def ask_methods() -> list[dict]:
        """The agent methods ``POST /ask`` accepts: ``[{"name", "description", "default"}]`` (neusym.query.agent.methods)."""
        from neusym.query.agent.methods import DEFAULT_METHOD, METHODS

        return [{"name": m.name, "description": getattr(m, "summary", ""), "default": m.name == DEFAULT_METHOD}
                for m in METHODS.values()]

    @api.post("/ask/json", tags=["ask"],
              responses={503: {"model": ErrorResponse, "description": "The queue for the LLM is full, or the wait "
                                                                      "for it ran out (Retry-After)."}})
    async def ask_json(request: Request, body: AskRequest = Depends(resolved_ask)) -> Response:
        """The same agent run as ``POST /ask``, answered once at the end as one JSON object:
        ``answer``, ``trajectory``, ``turns``, tokens, ``seconds``, ``stop_reason``, ``version`` and,
        when the agent gives them, ``route``, ``verification`` and ``citations`` (each with a
        ``page_image`` URL when it names a page). A failing LLM is a 502 with its message; a full
        queue or a run past ``NEUSYM_AGENT_MAX_SECONDS`` a 503. A client that disconnects cancels
        its run (checked every 0.25 s)."""
        from neusym.llm.chat import LLMError

        try:
            answer = await state.run_until_disconnect("ask", request,
                                                      lambda cancel: run_agent(body, lambda k, d: None, cancel))
        except LLMError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=502)
        except (NoCorpusVersion, BusyError, AskTimeout):
            raise
        except NeusymError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=400)
        if isinstance(answer, Response):  # the client went away (499)
            return answer
        return JSONResponse(jsonable_encoder(answer))

    # -- the MCP server (neusym.interfaces.service.mcp): the corpus as tools for LLM clients ----------
    from neusym.interfaces.service.mcp import McpEndpoint, build_server

    def mcp_ask(question: str, paper_ids: list[str], method: str | None, answer_format: str | None,
                cancel: threading.Event) -> dict:
        state.llm.check_room()
        body = AskRequest(question=question, paper_ids=paper_ids, method=method, answer_format=answer_format)
        return run_agent(body, lambda kind, data: None, cancel)

    mcp_endpoint = McpEndpoint(build_server(settings, state.holder, ask=mcp_ask, run_blocking=state.run))
    app.state.mcp = mcp_endpoint

    class _Asgi(Response):
        """Hands the request to an ASGI app once the route's dependencies (authentication) passed."""

        def __init__(self, asgi: Callable) -> None:
            self.asgi, self.background = asgi, None

        async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
            await self.asgi(scope, receive, send)

    @api.api_route("/mcp", methods=["GET", "POST", "DELETE"], include_in_schema=False)  # JSON-RPC: not OpenAPI
    async def mcp() -> Response:
        """The MCP server (Model Context Protocol, streamable HTTP, stateless, JSON responses): the
        five NeuSym-RAG actions, paper search, paper outlines and ask as tools for any MCP client
        (docs/mcp.md); behind the same API key as the other routes."""
        return _Asgi(mcp_endpoint)

    api.include_router(openai_router(state, run_agent, check_ask))  # /v1: behind the same API key
    app.include_router(api)
    use_openai_errors(app)  # errors on /v1 paths in OpenAI's shape
    return app


def _is_uuid(value: str) -> bool:
    try:
        parse_paper_id(value)
        return True
    except NotFound:
        return False
