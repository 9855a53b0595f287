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
``GET /``                                  the web page (static files under ``/static``)
========================================== ==========================================================

Read-only by construction: the app never opens the writer's database; every query runs on the
served version's read-only DuckDB file (:mod:`neusym.sqlsafe` for user SQL) and its read-only
vector shards. Blocking work runs in thread pools sized for the machine (:class:`ServiceState`),
so the event loop keeps accepting requests while a search, a query, a page render or an agent run
is under way. Errors are JSON ``{"detail": "..."}`` with a 4xx status (503 when nothing is
published yet); an unexpected exception is logged and answered with a 500 naming its type, never a
traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import Counter
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Literal

import anyio
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import NeusymError, SQLError, SQLTimeoutError, UnsafeSQLError
from ..settings import Settings, usable_cores
from ..store.versions import NoCorpusVersion
from .auth import api_key_dependency
from .corpus import ServedVersion, VersionHolder
from .models import (
    AskRequest,
    ErrorResponse,
    Health,
    SchemaResponse,
    SearchResponse,
    SqlRequest,
    SqlResponse,
)
from .papers import BadRequest, NotFound, PageRenderer, paper_detail, paper_titles, parse_bbox, parse_paper_id, pdf_of

logger = logging.getLogger("neusym.service")

FACET_POOL = 100
"""Facets count the top this-many papers matching the query and the filters."""
SQL_MAX_BYTES = 1_000_000
"""Byte cap of one /sql response body when the settings have no ``sql_max_bytes``."""

SQL_EXAMPLES: list[dict[str, str]] = [
    {"title": "Corpus coverage by venue and year",
     "sql": "SELECT venue, pub_year, paper_count, page_count FROM papers_per_venue_year ORDER BY paper_count DESC"},
    {"title": "Papers with the most tables",
     "sql": "SELECT title, table_count, image_count, equation_count FROM paper_overview\n"
            "ORDER BY table_count DESC LIMIT 10"},
    {"title": "Most prolific authors",
     "sql": "SELECT author, count(*) AS papers FROM author_paper\nGROUP BY author ORDER BY papers DESC, author LIMIT 10"},
    {"title": "Tables and figures that mention accuracy",
     "sql": "SELECT paper_title, element_type, page_number, label FROM element_search\n"
            "WHERE element_type IN ('table', 'image') AND text ILIKE '%accuracy%'\nORDER BY paper_title, page_number"},
    {"title": "Top-level sections of each paper",
     "sql": "SELECT m.title, s.ordinal, s.section_title, s.page_numbers\nFROM sections s JOIN metadata m "
            "ON m.paper_id = s.ref_paper_id\nWHERE s.level = 1 ORDER BY m.title, s.ordinal LIMIT 100"},
]
"""Example queries of the SQL console over the documented views (docs/sql.md)."""

_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Malformed or refused input."},
    401: {"model": ErrorResponse, "description": "API key (or Airflow login) missing or not valid."},
    404: {"model": ErrorResponse, "description": "Unknown paper or page."},
    422: {"model": ErrorResponse, "description": "Invalid parameter or body field."},
    503: {"model": ErrorResponse, "description": "No corpus version published yet."},
}


class ServiceState:
    """What the routes share: the settings, the :class:`VersionHolder`, the page renderer and the
    thread pools (capacity limiters) of each kind of blocking work.

    Pool sizes: ``search`` = CPU cores (query encoding and the shard scans are CPU-bound; more
    threads only add queueing inside the process), ``sql`` = 4 concurrent queries (each also runs
    DuckDB's own threads), ``pages`` = 2 renders, ``meta`` = 2 (paper details, schema, id checks),
    ``ask`` = 1 agent run at a time with the offline model (it has one slot) or 4 with an
    OpenAI-compatible endpoint.
    """

    def __init__(self, settings: Settings, holder: VersionHolder | None = None):
        self.settings = settings
        self.holder = holder or VersionHolder(settings)
        self.renderer = PageRenderer()
        self.started = time.monotonic()
        self.sizes = {"search": max(2, usable_cores()), "sql": 4, "pages": 2, "meta": 2,
                      "ask": 4 if settings.llm_base_url else 1}
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


# ---------------------------------------------------------------------------------- helpers
def facet_counts(pool: list[Any]) -> dict:
    """``{"pool", "venue": [{"value", "count"}], "year": [...]}`` (:class:`~neusym.service.models.Facets`) of
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


def _run_sql(settings: Settings, served: ServedVersion, sql: str, max_rows: int) -> Any:
    from ..sqlsafe import run_readonly_sql

    kwargs: dict[str, Any] = {}
    import inspect

    params = inspect.signature(run_readonly_sql).parameters
    if "max_bytes" in params:
        kwargs["max_bytes"] = getattr(settings, "sql_max_bytes", SQL_MAX_BYTES)
    if "max_cell_chars" in params and hasattr(settings, "sql_max_cell_chars"):
        kwargs["max_cell_chars"] = settings.sql_max_cell_chars
    return run_readonly_sql(served.version.db_path, sql, timeout_s=settings.sql_timeout_s, max_rows=max_rows,
                            **kwargs)


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
    if auth is None:
        auth = api_key_dependency(list(getattr(settings, "api_keys", []) or []))

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
        state.holder.start_watcher()
        try:
            yield
        finally:
            state.holder.close()

    neusym_version = _package_version()

    app = FastAPI(
        title="neusym",
        version=str(neusym_version),
        summary="NeuSym-RAG query layer: paper search, the agent, read-only SQL and page images over the "
                "current corpus version.",
        lifespan=lifespan,
        responses=_RESPONSES,
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

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error in %s %s", request.method, request.url.path)
        return JSONResponse({"detail": f"internal error ({type(exc).__name__}); the server log has the details"},
                            status_code=500)

    # -- public: health, page, static files ------------------------------------------------------
    @app.get("/healthz", response_model=Health, tags=["service"], responses={503: _RESPONSES[503]})
    async def healthz() -> Health:
        """The corpus version being served (and that the process answers). 503 with a clear message
        while nothing has been published in ``NEUSYM_HOME``. Never needs an API key."""

        def work(served: ServedVersion) -> Health:
            return Health(version=served.number, papers=served.papers,
                          published_at=served.version.info.manifest.get("published_at")
                          or served.version.info.manifest.get("created_at"),
                          opened_at=served.opened_at, switches=state.holder.switches,
                          uptime_s=round(time.monotonic() - state.started, 3), neusym=str(neusym_version),
                          process=os.getpid())

        served = state.holder.current()
        if served is not None:  # answered in the event loop: never queued behind busy pools
            return work(served)
        return await state.with_version("meta", work)  # the first open (blocking) runs in a thread

    static_dir = Path(str(resources.files("neusym.service").joinpath("static")))
    page_deps = [Depends(auth)] if protect_page else []

    @app.get("/", include_in_schema=False, dependencies=page_deps)
    async def index(request: Request) -> Response:
        if not request.url.path.endswith("/"):  # relative links need the trailing slash
            return RedirectResponse(str(request.url.replace(path=request.url.path + "/")))
        return FileResponse(static_dir / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=static_dir), name="static")

    # -- protected API -------------------------------------------------------------------------
    api = APIRouter(dependencies=[Depends(auth)])

    @api.get("/search", response_model=SearchResponse, tags=["search"])
    async def search(
        q: str = Query(..., min_length=1, max_length=1000, description="A question or keywords."),
        venue: str | None = Query(None, max_length=64, description="Conference abbreviation (acl, emnlp, ...) "
                                  "or 'findings' (Findings volumes of any conference)."),
        year: int | None = Query(None, ge=1900, le=2100, description="Publication year."),
        author: str | None = Query(None, max_length=200, description="Author full name or last name."),
        limit: int = Query(10, ge=1, le=100, description="Papers returned."),
        mode: Literal["default", "accurate"] = Query(
            "default", description="default: the hybrid search alone (tens of ms). accurate: then the configured "
            "LLM reranks the top NEUSYM_SEARCH_RERANK_TOP_N hits (default 10) from their titles and abstracts: one "
            "LLM call per query (seconds; if it fails the fused order is kept and rerank.note says why)."),
    ) -> Response:
        """Papers best matching ``q`` (hybrid BM25 + all-MiniLM-L6-v2 paper index, see
        :mod:`neusym.search`), each with its score and the abstract sentence closest to the query,
        plus facet counts by venue and year over the top 100 papers matching the query and the
        filters. Filters are applied inside the index, so every hit satisfies them. With
        ``mode=accurate`` the top hits are reordered by the LLM (:mod:`neusym.rerank`, run in the
        agent's pool, so it queues behind agent runs on the offline model); each hit then has
        ``rerank`` (fused rank, LLM rank) and the response a ``rerank`` summary."""
        if not q.strip():
            raise BadRequest("q must not be blank")
        started = time.perf_counter()
        top_n = state.settings.search_rerank_top_n if mode == "accurate" else 0

        def work(served: ServedVersion) -> tuple:
            filters = {"venue": venue or None, "year": year, "author": author or None}
            try:
                found, pool = served.search_with_pool(q, **filters, limit=max(limit, top_n), pool=FACET_POOL)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            abstracts = served.index.abstracts([h.paper_id for h in found[:top_n]]) if top_n else {}
            return served.number, found, pool, abstracts

        number, found, pool, abstracts = await state.with_version("search", work)
        payload = {"version": number, "query": q, "mode": mode,
                   "filters": {"venue": venue, "year": year, "author": author, "limit": limit}}
        if mode == "accurate":
            from ..rerank import rerank_hits

            result = await state.run("ask", lambda: rerank_hits(q, found, abstracts=abstracts, settings=state.settings,
                                                                top_n=top_n))
            found = result.hits
            payload["rerank"] = {"applied": result.applied, "note": result.note, "top_n": result.top_n,
                                 "llm_seconds": result.seconds}
        payload.update({"hits": [{"rank": i + 1, **h.to_dict()} for i, h in enumerate(found[:limit])],
                        "facets": facet_counts(pool), "seconds": round(time.perf_counter() - started, 4)})
        # serialised here (the shape is SearchResponse, as documented): no second validation pass
        return Response(json.dumps(payload, ensure_ascii=False), media_type="application/json")

    @api.post("/sql", tags=["sql"], response_model=SqlResponse,
              responses={200: {"content": {"text/csv": {}}, "description": "JSON (format json) or CSV (format csv)."}})
    async def sql(body: SqlRequest) -> Response:
        """One read-only query on the served version's database (:mod:`neusym.sqlsafe`: one SELECT,
        no file/network access, ``NEUSYM_SQL_TIMEOUT_S`` time limit, at most ``NEUSYM_SQL_MAX_ROWS``
        rows and a byte cap on the response). Refused statements, SQL errors and timeouts are 400
        with the reason. ``format: csv`` answers ``text/csv`` with ``X-Neusym-Version``,
        ``X-Neusym-Row-Count`` and ``X-Neusym-Truncated`` headers."""
        from ..sqlsafe import format_result, to_jsonable

        max_rows = min(body.max_rows or settings.sql_max_rows, settings.sql_max_rows)
        max_bytes = int(getattr(settings, "sql_max_bytes", SQL_MAX_BYTES))

        def work(served: ServedVersion) -> Response:
            try:
                result = _run_sql(settings, served, body.sql, max_rows)
            except (UnsafeSQLError, SQLError, SQLTimeoutError) as exc:
                kind = {UnsafeSQLError: "refused", SQLTimeoutError: "timeout"}.get(type(exc), "sql_error")
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

        return await state.with_version("sql", work)

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

    @api.get("/papers/{paper_id}/pages/{page}.png", tags=["papers"], response_class=Response,
             responses={200: {"content": {"image/png": {}}, "description": "The rendered page."}})
    async def page_image(
        paper_id: str = PathParam(..., description="metadata.paper_id (UUID)"),
        page: str = PathParam(..., description="Page number, from 1."),
        bbox: str | None = Query(None, description="x0,y0,width,height in PDF points from the top-left corner: "
                                 "the box to highlight (what a citation points at)."),
        zoom: float = Query(1.5, description="Scale: 1 = 72 dpi; 0.5-4."),
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
                        headers={"Cache-Control": "private, max-age=3600", "ETag": f'"{image.etag}"'})

    # -- the agent ---------------------------------------------------------------------------
    def check_ask(body: AskRequest) -> AskRequest:
        """Refuse a blank question, an unknown method or unknown paper ids before anything runs."""
        from ..agent.methods import MethodError, get_method

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
        return body

    def run_agent(body: AskRequest, on_event: Callable[[str, dict], None], cancelled: threading.Event) -> dict:
        """One agent run on the served version (held until it ends); returns the enriched answer."""
        from ..agent.actions import Environment
        from ..agent.react import answer_question

        class _Stop(Exception):
            pass

        def on_step(step: Any) -> None:
            if cancelled.is_set():
                raise _Stop()
            on_step.turn += 1
            on_event("step", {"index": on_step.turn, **step.to_dict()})

        on_step.turn = 0
        with state.holder.use() as served:
            on_event("start", {"version": served.number, "question": body.question, "method": body.method,
                               "paper_ids": body.paper_ids})
            env = Environment(settings, version=served.version, db_schema=served.agent_schema)
            try:
                result = answer_question(body.question, settings=settings, paper_ids=body.paper_ids or None,
                                         answer_format=body.answer_format, env=env, on_step=on_step,
                                         method=body.method)
            except _Stop:
                return {}
            finally:
                env.close()
            out = {"version": served.number, **result.to_dict()}
            pids = {str(c.get("paper_id")) for c in out.get("citations") or [] if isinstance(c, dict) and c.get("paper_id")}
            titles: dict[str, str] = {}
            if pids:
                cur = served.cursor()
                try:
                    titles = paper_titles(cur, [p for p in pids if _is_uuid(p)])
                finally:
                    cur.close()
            return enrich_answer(out, titles)

    @api.post("/ask", response_class=EventSourceResponse, tags=["ask"],
              responses={200: {"description": "Server-sent events: `start` {version, question, method, paper_ids}, "
                                              "`queued` {running, waiting} while other runs hold the model, one `step` per "
                                              "agent turn (thought, action, arguments, observation, ...), then "
                                              "`answer` (the JSON answer, as /ask/json) or `error` {detail}."}})
    async def ask(body: AskRequest = Depends(resolved_ask)) -> AsyncIterator[ServerSentEvent]:
        """Answer a question with the agent, streamed step by step as server-sent events (an answer
        can take a minute on the offline model; each step is sent as soon as it is done, and
        keep-alive comments flow meanwhile). Unknown methods and paper ids are refused (400/404)
        before the stream starts."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        cancelled = threading.Event()
        limiter = state.limiter("ask")

        def emit(kind: str, data: dict) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (kind, data))

        def work() -> None:
            try:
                answer = run_agent(body, emit, cancelled)
                if answer:
                    emit("answer", answer)
            except NeusymError as exc:
                emit("error", {"detail": str(exc)})
            except Exception as exc:  # noqa: BLE001 - reported to the client without a traceback
                logger.exception("agent run failed")
                emit("error", {"detail": f"internal error ({type(exc).__name__}); the server log has the details"})
            finally:
                emit("end", {})

        if limiter.borrowed_tokens >= limiter.total_tokens:
            yield ServerSentEvent(event="queued", data={"running": limiter.borrowed_tokens,
                                                        "waiting": limiter.statistics().tasks_waiting + 1})
        task = asyncio.ensure_future(anyio.to_thread.run_sync(work, limiter=limiter))
        try:
            while True:
                kind, data = await queue.get()
                if kind == "end":
                    break
                yield ServerSentEvent(event=kind, data=data)
        finally:
            cancelled.set()  # a client that went away stops the run at its next step
            if task.done() and not task.cancelled() and task.exception() is not None:
                logger.error("agent task: %s", task.exception())

    @api.get("/ask/methods", tags=["ask"])
    async def ask_methods() -> list[dict]:
        """The agent methods ``POST /ask`` accepts: ``[{"name", "description", "default"}]`` (neusym.agent.methods)."""
        from ..agent.methods import METHODS, get_method

        default = get_method(None).name
        return [{"name": m.name, "description": getattr(m, "summary", ""), "default": m.name == default}
                for m in METHODS.values()]

    @api.post("/ask/json", tags=["ask"])
    async def ask_json(body: AskRequest = Depends(resolved_ask)) -> JSONResponse:
        """The same agent run as ``POST /ask``, answered once at the end as one JSON object:
        ``answer``, ``trajectory``, ``turns``, tokens, ``seconds``, ``stop_reason``, ``version`` and,
        when the agent gives them, ``route``, ``verification`` and ``citations`` (each with a
        ``page_image`` URL when it names a page). A failing LLM is a 502 with its message."""
        from ..agent.llm import LLMError

        cancelled = threading.Event()
        try:
            answer = await anyio.to_thread.run_sync(lambda: run_agent(body, lambda k, d: None, cancelled),
                                                    limiter=state.limiter("ask"))
        except NoCorpusVersion:
            raise
        except LLMError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=502)
        except NeusymError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=400)
        return JSONResponse(jsonable_encoder(answer))

    app.include_router(api)
    return app


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("neusym")
    except PackageNotFoundError:
        return "unknown"


def _is_uuid(value: str) -> bool:
    try:
        parse_paper_id(value)
        return True
    except NotFound:
        return False
