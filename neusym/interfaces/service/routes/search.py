"""``GET /search``: paper search with snippets and venue/year facets (:func:`neusym.query.paper_search.search`)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from neusym.interfaces.service.corpus import ServedVersion
from neusym.interfaces.service.models import SearchResponse
from neusym.interfaces.service.papers import BadRequest
from neusym.interfaces.service.routes.deps import Author, Limit, QueryText, Venue, Year, service_state
from neusym.interfaces.service.state import ServiceState

FACET_POOL = 100
"""Facets count the top this-many papers matching the query and the filters."""

router = APIRouter()
"""``GET /search``."""


@router.get("/search", response_model=SearchResponse, tags=["search"])
async def search(
    request: Request,
    q: QueryText,
    venue: Venue = None,
    year: Year = None,
    author: Author = None,
    limit: Limit = 10,
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
    state: ServiceState = Depends(service_state),
) -> Response:
    """Papers best matching ``q`` (hybrid BM25 + all-MiniLM-L6-v2 paper index, see
    :mod:`neusym.store.paper_index`), each with its score and the abstract sentence closest to the query,
    plus facet counts by venue and year over the top 100 papers matching the query and the
    filters (always those of the default ranking). Filters are applied inside the index, so every
    hit satisfies them. With ``mode=accurate`` the LLM's hypothetical abstract joins the query
    (:mod:`neusym.query.hyde`, run in the agent's pool, so it queues behind agent runs on the
    offline model); each hit then has ``default_rank`` and the response a ``hyde`` summary (the
    hypothetical title and abstract, whether they were used, the LLM's time)."""
    settings = state.settings
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
