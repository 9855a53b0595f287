"""Conference-wide paper search (query side): :func:`search_papers` over the paper index of the
current corpus version (:mod:`neusym.store.paper_index`: its schema, build, sync and fused ranking),
in the default mode (the fused hybrid search alone) or the accurate mode (then one LLM call reranks
the top hits: :mod:`neusym.query.rerank`).
"""

from __future__ import annotations

from typing import Any

from neusym.query.rerank import RerankResult, rerank_hits
from neusym.settings import Settings
from neusym.store.paper_index import PaperHit, PaperIndex, SearchConfig, current_paper_index

SEARCH_MODES = ("default", "accurate")
"""``default``: the fused hybrid search alone (in-process, tens of ms); ``accurate``: the same, then the
configured LLM reranks the top ``settings.search_rerank_top_n`` hits (:mod:`neusym.query.rerank`)."""


def search_papers(query: str, *, venue: str | None = None, year: int | str | None = None, author: str | None = None,
                  limit: int = 10, settings: Settings | None = None, index: PaperIndex | None = None,
                  config: SearchConfig | None = None, mode: str = "default", rerank_top_n: int | None = None,
                  llm: Any = None) -> list[PaperHit]:
    """Find the papers best matching a natural-language question or keywords, best first.

    ``venue`` (e.g. "acl", case-insensitive conference abbreviation; "findings" selects Findings
    volumes of any conference), ``year`` (int) and ``author``
    (full name "Yang Liu" / "Liu, Yang" or last name "Liu", accent- and case-insensitive) are applied
    inside the vector store as payload filters, so every hit satisfies them. ``limit`` >= 1 hits are
    returned (fewer if fewer papers match). Each :class:`PaperHit` carries the fused score (a weighted
    sum of per-view z-scores; comparable within one query only) and the abstract sentence closest to
    the query. ``index``: search this index instead of the current corpus version's.

    ``mode="accurate"``: the fused search fetches the top ``max(limit, N)`` papers (N =
    ``rerank_top_n`` or ``settings.search_rerank_top_n``), then one call of the configured LLM
    (``llm`` or :func:`neusym.llm.chat.make_llm` of the settings) reorders the top N from their
    titles and abstracts (:func:`neusym.query.rerank.rerank_hits`); the first ``limit`` are returned, each
    with ``rerank`` set (fused rank, LLM rank). An LLM failure or an unusable reply never fails the
    search: the fused order is kept, ``rerank.applied`` is False with the reason in ``rerank.note``,
    and a warning is logged. Costs one LLM call per query (seconds with the offline model).

    Raises ``ValueError`` for an empty query, a non-positive limit, a non-integer year or an unknown
    mode, and ``neusym.store.versions.NoCorpusVersion`` when nothing has been published.
    """
    if mode not in SEARCH_MODES:
        raise ValueError(f"mode must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
    idx = index or current_paper_index(settings)
    if mode == "default":
        return idx.search(query, venue=venue, year=year, author=author, limit=limit, config=config)
    settings = settings or idx.settings
    top_n = int(rerank_top_n or settings.search_rerank_top_n)
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1:
        fetch = max(limit, top_n)
    else:
        fetch = limit  # let the search raise its ValueError
    hits = idx.search(query, venue=venue, year=year, author=author, limit=fetch, config=config)
    return rerank_with_index(query, hits, index=idx, settings=settings, llm=llm, top_n=top_n).hits[:limit]


def rerank_with_index(query: str, hits: list[PaperHit], *, index: PaperIndex, settings: Settings, llm: Any = None,
                      top_n: int | None = None) -> RerankResult:
    """The accurate mode's second step on fused ``hits`` (best first): the abstracts of the top
    ``top_n`` (default ``settings.search_rerank_top_n``) read from ``index``, then one LLM call
    (:func:`neusym.query.rerank.rerank_hits`; ``llm`` default :func:`neusym.llm.chat.make_llm`).
    Used by :func:`search_papers` and ``GET /search?mode=accurate``. Never raises for LLM failures
    (the fused order is kept and the result says why)."""
    n = int(top_n or settings.search_rerank_top_n)
    abstracts = index.abstracts([h.paper_id for h in hits[:n]])
    return rerank_hits(query, hits, abstracts=abstracts, settings=settings, llm=llm, top_n=n)


__all__ = ["SEARCH_MODES", "rerank_with_index", "search_papers"]
