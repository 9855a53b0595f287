"""The service's errors: JSON ``{"detail": "..."}`` with a 4xx status (503 when nothing is
published yet or a bounded resource is full, with ``Retry-After``), never a traceback."""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from neusym.errors import BusyError
from neusym.interfaces.service.papers import BadRequest, NotFound
from neusym.interfaces.service.state import AskTimeout
from neusym.store.versions import NoCorpusVersion


def register(app: FastAPI) -> None:
    """Install the exception handlers on ``app``: no corpus version (503, ``Retry-After: 60``),
    :class:`NotFound` (404), :class:`BusyError` (503, ``Retry-After``), :class:`AskTimeout` (503),
    :class:`BadRequest` (400), invalid parameters or body fields (422, naming them) and the
    framework's own HTTP errors (unknown endpoint, method not allowed)."""
    app.add_exception_handler(NoCorpusVersion, _no_version)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(BusyError, _busy)
    app.add_exception_handler(AskTimeout, _ask_timeout)
    app.add_exception_handler(BadRequest, _bad_request)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)


async def _no_version(request: Request, exc: NoCorpusVersion) -> JSONResponse:
    return JSONResponse({"detail": f"no corpus to serve yet: {exc}"}, status_code=503,
                        headers={"Retry-After": "60"})


async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


async def _busy(request: Request, exc: BusyError) -> JSONResponse:
    return JSONResponse({"detail": str(exc), "error": "busy"}, status_code=503,
                        headers={"Retry-After": str(exc.retry_after_s)})


async def _ask_timeout(request: Request, exc: AskTimeout) -> JSONResponse:
    return JSONResponse({"detail": str(exc), "error": "time_limit"}, status_code=503)


async def _bad_request(request: Request, exc: BadRequest) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=400)


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    return JSONResponse({"detail": _validation_message(exc)}, status_code=422)


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no such endpoint: {request.method} {request.url.path} (see /docs)"
    elif exc.status_code == 405:
        detail = f"method {request.method} is not allowed on {request.url.path}"
    return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))


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
