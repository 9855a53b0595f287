"""One paper and the corpus: ``GET /papers/{paper_id}`` (metadata, section tree, tables, figures,
equations, references), ``GET /papers/{paper_id}/similar`` and ``GET /overview`` (the corpus at a
glance). A paper's citation export is :mod:`.export`, its page images :mod:`.pages`."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

from neusym.interfaces.service.corpus import ServedVersion
from neusym.interfaces.service.papers import NotFound, paper_detail, paper_titles, parse_paper_id
from neusym.interfaces.service.routes.deps import service_state
from neusym.interfaces.service.state import ServiceState

router = APIRouter()
"""``GET /papers/{paper_id}``, ``/papers/{paper_id}/similar``, ``/overview``."""


@router.get("/papers/{paper_id}", tags=["papers"])
async def paper(paper_id: str = PathParam(..., description="metadata.paper_id (UUID)"),
                state: ServiceState = Depends(service_state)) -> JSONResponse:
    """One paper: metadata, the section tree (with texts), tables (sanitised HTML), figures,
    equations and references, each element with its page and bounding box
    (``[x0, y0, width, height]`` in PDF points from the top-left corner). 404 for an unknown id."""

    def work(served: ServedVersion) -> dict:
        cur = served.cursor()
        try:
            return {"version": served.number, **paper_detail(cur, paper_id, state.settings)}
        finally:
            cur.close()

    return JSONResponse(jsonable_encoder(await state.with_version("meta", work)))


@router.get("/papers/{paper_id}/similar", tags=["papers"])
async def similar(paper_id: str = PathParam(..., description="metadata.paper_id (UUID)"),
                  limit: int = Query(10, ge=1, le=50, description="Papers returned."),
                  state: ServiceState = Depends(service_state)) -> JSONResponse:
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


@router.get("/overview", tags=["papers"])
async def overview(state: ServiceState = Depends(service_state)) -> JSONResponse:
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
        out["stages"] = recorded(state.settings, served.version.info.manifest, served.number)
        return out

    return JSONResponse(jsonable_encoder(await state.with_version("meta", work)))
