"""Citation export (:mod:`neusym.query.citation_export`): a search's hits or one paper as BibTeX or
RIS, ``GET /search.bib|.ris`` and ``GET /papers/{paper_id}.bib|.ris``.

The app includes this router before :mod:`.papers`: ``/papers/{paper_id}``'s path parameter would
otherwise take "ID.bib"."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi import Path as PathParam
from fastapi.responses import Response

from neusym.interfaces.service.corpus import ServedVersion
from neusym.interfaces.service.papers import BadRequest, NotFound, parse_paper_id
from neusym.interfaces.service.routes.deps import Author, Limit, QueryText, Venue, Year, service_state
from neusym.interfaces.service.routes.search import FACET_POOL
from neusym.interfaces.service.state import ServiceState

router = APIRouter()
"""``GET /search.bib``, ``/search.ris``, ``/papers/{paper_id}.bib``, ``/papers/{paper_id}.ris``."""


def export_query(
    q: QueryText,
    venue: Venue = None,
    year: Year = None,
    author: Author = None,
    limit: Limit = 10,
) -> dict:
    """The parameters of /search (default mode) shared by /search.bib and /search.ris."""
    if not q.strip():
        raise BadRequest("q must not be blank")
    return {"q": q, "venue": venue or None, "year": year, "author": author or None, "limit": limit}


async def search_records(state: ServiceState, params: dict) -> list[dict]:
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


async def paper_record(state: ServiceState, paper_id: str) -> list[dict]:
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
    """``records`` as BibTeX (``kind`` "bib") or RIS ("ris"), an attachment ``filename.kind``."""
    from neusym.query.citation_export import BIBTEX_MEDIA_TYPE, RIS_MEDIA_TYPE, to_bibtex, to_ris

    text, media = (to_bibtex(records), BIBTEX_MEDIA_TYPE) if kind == "bib" else (to_ris(records), RIS_MEDIA_TYPE)
    return Response(text, media_type=media,
                    headers={"Content-Disposition": f'attachment; filename="{filename}.{kind}"'})


_BIB = {200: {"content": {"application/x-bibtex": {}}, "description": "BibTeX entries, one per paper."}}
_RIS = {200: {"content": {"application/x-research-info-systems": {}}, "description": "RIS records, one per paper."}}


@router.get("/search.bib", tags=["search"], response_class=Response, responses=_BIB)
async def search_bibtex(params: dict = Depends(export_query),
                        state: ServiceState = Depends(service_state)) -> Response:
    """The hits of ``/search`` (default mode, same parameters) as BibTeX, best first: a crawled paper's
    stored entry (e.g. the ACL Anthology's, with its citation key and DOI), else one generated from
    its metadata (:mod:`neusym.query.citation_export`). An attachment ``neusym-search.bib``."""
    return export_response(await search_records(state, params), "bib", "neusym-search")


@router.get("/search.ris", tags=["search"], response_class=Response, responses=_RIS)
async def search_ris(params: dict = Depends(export_query), state: ServiceState = Depends(service_state)) -> Response:
    """The hits of ``/search`` (default mode, same parameters) as RIS records (TY CONF or GEN, TI, AU,
    PY, T2, UR, AB, DO, ID), best first. An attachment ``neusym-search.ris``."""
    return export_response(await search_records(state, params), "ris", "neusym-search")


@router.get("/papers/{paper_id}.bib", tags=["papers"], response_class=Response, responses=_BIB)
async def paper_bibtex(paper_id: str = PathParam(..., description="metadata.paper_id (UUID)"),
                       state: ServiceState = Depends(service_state)) -> Response:
    """One paper's BibTeX entry (as in ``/search.bib``). 404 for an unknown or malformed id."""
    return export_response(await paper_record(state, paper_id), "bib", f"neusym-{parse_paper_id(paper_id)}")


@router.get("/papers/{paper_id}.ris", tags=["papers"], response_class=Response, responses=_RIS)
async def paper_ris(paper_id: str = PathParam(..., description="metadata.paper_id (UUID)"),
                    state: ServiceState = Depends(service_state)) -> Response:
    """One paper's RIS record (as in ``/search.ris``). 404 for an unknown or malformed id."""
    return export_response(await paper_record(state, paper_id), "ris", f"neusym-{parse_paper_id(paper_id)}")
