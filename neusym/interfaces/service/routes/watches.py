"""Saved searches (``neusym watch add``, :mod:`neusym.store.watches`): ``GET /watches`` and each
watch's Atom feed, ``GET /feeds/{name}.atom`` (:mod:`neusym.interfaces.service.feeds`)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response

from neusym.interfaces.service.papers import NotFound, public_base_url
from neusym.interfaces.service.routes.deps import service_state
from neusym.interfaces.service.state import ServiceState

router = APIRouter()
"""``GET /watches``, ``/feeds/{name}.atom``."""


@router.get("/watches", tags=["watches"])
async def watches(recent: int = Query(5, ge=0, le=50, description="Newest matches listed per watch."),
                  state: ServiceState = Depends(service_state)) -> JSONResponse:
    """The saved searches (``neusym watch add``) with the papers each found: ``matches``, ``new`` (papers
    of the newest corpus version that matched any, the first evaluation not counted), ``feed`` (the
    relative URL of its Atom feed) and its ``recent`` matches, newest first."""
    from neusym.interfaces.service.feeds import watches_payload
    from neusym.store.watches import WatchStore

    def work() -> list[dict]:
        with WatchStore(state.settings, readonly=True) as store:
            listed = store.list()
            return watches_payload(listed, store.counts(),
                                   {w.name: store.matches(w.name, limit=recent) for w in listed} if recent else {})

    return JSONResponse(jsonable_encoder({"watches": await state.run("meta", work)}))


@router.get("/feeds/{name}.atom", tags=["watches"], response_class=Response,
            responses={200: {"content": {"application/atom+xml": {}}, "description": "An Atom 1.0 feed."}})
async def feed(request: Request, name: str = PathParam(..., max_length=64, description="The watch's name."),
               state: ServiceState = Depends(service_state)) -> Response:
    """The Atom feed of one saved search: its newest matched papers (at most 50), each linking to the
    paper on this page. 404 for an unknown watch."""
    from neusym.interfaces.service.feeds import FEED_ENTRIES, atom_feed
    from neusym.store.watches import WatchError, WatchStore

    def work() -> bytes:
        with WatchStore(state.settings, readonly=True) as store:
            try:
                watch = store.get(name)
            except WatchError as exc:
                raise NotFound(str(exc)) from None
            return atom_feed(watch, store.matches(name, limit=FEED_ENTRIES),
                             base_url=public_base_url(request.scope, state.settings.public_url))

    body = await state.run("meta", work)
    return Response(body, media_type="application/atom+xml; charset=utf-8")
