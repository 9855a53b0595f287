"""The routes that need no API key: ``GET /healthz`` (:data:`router`), and the web page ``GET /``
(:data:`page_router`, behind the app's authentication when the app protects its page) with its
static files under ``/static`` (:func:`mount_static`)."""

from __future__ import annotations

import os
import time
from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from neusym.interfaces.service.auth import key_is_valid, presented_key
from neusym.interfaces.service.corpus import ServedVersion
from neusym.interfaces.service.models import Health
from neusym.interfaces.service.routes.deps import ERROR_RESPONSES, service_state
from neusym.interfaces.service.state import ServiceState

router = APIRouter()
"""``GET /healthz``: never behind the API key."""
page_router = APIRouter()
"""``GET /``: the page (the app adds its authentication when it protects the page)."""


@router.get("/healthz", response_model=Health, tags=["service"], responses={503: ERROR_RESPONSES[503]})
async def healthz(request: Request, state: ServiceState = Depends(service_state)) -> Health:
    """The corpus version being served (and that the process answers). 503 with a clear message
    while nothing has been published in ``NEUSYM_HOME``. Never needs an API key; ``process``
    (the answering server process) is only given to callers with a valid key, or to everyone when
    the service has no keys."""
    keys = state.keys
    show_process = keys is not None and key_is_valid(presented_key(request.headers), keys)

    def work(served: ServedVersion) -> Health:
        return Health(version=served.number, papers=served.papers,
                      published_at=served.version.info.manifest.get("published_at")
                      or served.version.info.manifest.get("created_at"),
                      opened_at=served.opened_at, switches=state.holder.switches,
                      uptime_s=round(time.monotonic() - state.started, 3), neusym=state.version,
                      process=os.getpid() if show_process else None)

    served = state.holder.current()
    if served is not None:  # answered in the event loop: never queued behind busy pools
        return work(served)
    return await state.with_version("meta", work)  # the first open (blocking) runs in a thread


@page_router.get("/", include_in_schema=False)
async def index(request: Request) -> Response:
    """The web page (``index.html`` of :func:`static_dir`, never cached); the page's path without its
    trailing slash (e.g. a mounted app's prefix) is redirected to the path with it."""
    if not request.url.path.endswith("/"):  # relative links need the trailing slash
        # a relative Location (the last path segment plus "/"): never the Host header a client sent
        name = request.url.path.rstrip("/").rsplit("/", 1)[-1]
        return RedirectResponse(f"{name}/" + (f"?{request.url.query}" if request.url.query else ""))
    return FileResponse(request.app.state.static_dir / "index.html", headers={"Cache-Control": "no-cache"})


def static_dir() -> Path:
    """The directory of the page's files (``neusym/interfaces/service/static``)."""
    return Path(str(resources.files("neusym.interfaces.service").joinpath("static")))


def mount_static(app: FastAPI) -> None:
    """Serve :func:`static_dir` at ``/static`` (no API key) and keep it as ``app.state.static_dir``
    for the page."""
    app.state.static_dir = static_dir()
    app.mount("/static", StaticFiles(directory=app.state.static_dir), name="static")
