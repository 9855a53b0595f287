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

This module builds the app (:func:`create_app`) and holds its middlewares; the endpoints are the
routers of :mod:`neusym.interfaces.service.routes`, one module per resource, which reach the app's
:class:`ServiceState` (:mod:`neusym.interfaces.service.state`) through a dependency.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import anyio
from fastapi import Depends, FastAPI

from neusym.settings import Settings
from neusym.store.versions import NoCorpusVersion
from neusym.interfaces.service.auth import api_key_dependency, checked_keys
from neusym.interfaces.service.corpus import VersionHolder
from neusym.interfaces.service.openai_compat import openai_router, use_openai_errors
from neusym.interfaces.service.routes import ask, errors, export, mcp, pages, papers, public, search, sql, watches
from neusym.interfaces.service.routes.ask import enrich_answer, page_image_path
from neusym.interfaces.service.routes.deps import ERROR_RESPONSES as _RESPONSES
from neusym.interfaces.service.routes.search import FACET_POOL, facet_counts
from neusym.interfaces.service.routes.sql import SQL_MAX_BYTES
from neusym.interfaces.service.state import DISCONNECT_POLL_S, AskTimeout, LLMSlots, ServiceState

logger = logging.getLogger("neusym.interfaces.service")

PROTECTED_ROUTERS = (search, export, sql, papers, watches, pages, ask, mcp)
"""The routers behind the app's authentication, in the order they are included: :mod:`.routes.export`
before :mod:`.routes.papers` (``/papers/{paper_id}`` would otherwise take ``ID.bib``)."""


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
    keys: list[str] | None = None  # the service's own keys; None: ``auth`` is the caller's (Airflow's login)
    if auth is None:
        keys = checked_keys(list(settings.api_keys or []))
        auth = api_key_dependency(keys)
    state = ServiceState(settings, holder, keys=keys)

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

    app = FastAPI(
        title="neusym",
        version=state.version,
        summary="NeuSym-RAG query layer: paper search, the agent, read-only SQL and page images over the "
                "current corpus version.",
        lifespan=lifespan,
        responses=_RESPONSES,
        redoc_url=None,  # one documentation page: /docs (Swagger UI over /openapi.json)
    )
    app.state.neusym = state  # what every route reaches (routes.deps.service_state)
    errors.register(app)  # JSON {"detail"} with a 4xx, never a traceback
    app.add_middleware(UnexpectedErrors)
    app.add_middleware(RelativeRedirects)
    app.add_middleware(HeadAsGet)
    app.add_middleware(BodyLimit)  # outermost: a too large body never reaches a route

    # -- public: health, page, static files ------------------------------------------------------
    app.include_router(public.router)
    app.include_router(public.page_router, dependencies=[Depends(auth)] if protect_page else [])
    public.mount_static(app)

    # -- protected API: the routers of neusym.interfaces.service.routes, then /v1 -----------------
    app.state.mcp = mcp.mcp_endpoint(state)  # the MCP server behind /mcp (stopped by the lifespan)
    for module in PROTECTED_ROUTERS:
        app.include_router(module.router, dependencies=[Depends(auth)])
    app.include_router(openai_router(state, functools.partial(ask.run_agent, state), ask.check_ask),
                       dependencies=[Depends(auth)])  # /v1: behind the same API key
    use_openai_errors(app)  # errors on /v1 paths in OpenAI's shape
    return app


__all__ = ["AskTimeout", "BodyLimit", "DISCONNECT_POLL_S", "DRAIN_BYTES", "DRAIN_SECONDS", "FACET_POOL", "HeadAsGet",
           "LLMSlots", "MAX_BODY_BYTES", "PROTECTED_ROUTERS", "RelativeRedirects", "SQL_MAX_BYTES", "ServiceState",
           "UnexpectedErrors", "create_app", "enrich_answer", "facet_counts", "page_image_path"]
