"""Read-only SQL on the served version: ``POST /sql`` (:mod:`neusym.query.sqlsafe`: time-limited,
row- and byte-capped, JSON or CSV) and ``GET /schema`` (tables and views with their comments,
example queries)."""

from __future__ import annotations

import json
import threading
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from neusym.errors import BusyError, SQLError, SQLResourceError, SQLTimeoutError, UnsafeSQLError
from neusym.settings import Settings
from neusym.interfaces.service.corpus import ServedVersion
from neusym.interfaces.service.models import SchemaResponse, SqlRequest, SqlResponse
from neusym.interfaces.service.routes.deps import service_state
from neusym.interfaces.service.sql_examples import SQL_EXAMPLES
from neusym.interfaces.service.state import ServiceState

SQL_MAX_BYTES = 1_000_000
"""Byte cap of one /sql response body when the settings have no ``sql_max_bytes``."""

router = APIRouter()
"""``POST /sql``, ``GET /schema``."""


@router.post("/sql", tags=["sql"], response_model=SqlResponse,
             responses={200: {"content": {"text/csv": {}}, "description": "JSON (format json) or CSV (format csv)."}})
async def sql(body: SqlRequest, request: Request, state: ServiceState = Depends(service_state)) -> Response:
    """One read-only query on the served version's database (:mod:`neusym.query.sqlsafe`: one SELECT,
    no file/network access, ``NEUSYM_SQL_TIMEOUT_S`` time limit, at most ``NEUSYM_SQL_MAX_ROWS``
    rows and a byte cap on the response). Refused statements, SQL errors and timeouts are 400
    with the reason. ``format: csv`` answers ``text/csv`` with ``X-Neusym-Version``,
    ``X-Neusym-Row-Count`` and ``X-Neusym-Truncated`` headers."""
    from neusym.query.sqlsafe import format_result, to_jsonable

    settings = state.settings
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


@router.get("/schema", tags=["sql"], response_model=SchemaResponse,
            responses={200: {"content": {"text/markdown": {}}}})
async def schema(format: str = Query("json", pattern="^(json|markdown)$",
                                     description="json, or markdown (the text of docs/schema.md)"),
                 state: ServiceState = Depends(service_state)) -> Any:
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
