"""Conference-wide paper search (query side): :func:`search_papers` over the paper index of the
current corpus version (:mod:`neusym.store.paper_index`: its schema, build, sync and fused ranking),
in the default mode (the fused hybrid search alone) or the accurate mode (one LLM call writes a
hypothetical abstract that joins the query: :mod:`neusym.query.hyde`).
"""

from __future__ import annotations

from typing import Any

from neusym.settings import Settings
from neusym.store.paper_index import PaperHit, PaperIndex, SearchConfig, current_paper_index

SEARCH_MODES = ("default", "accurate")
"""``default``: the fused hybrid search alone (in-process, tens of ms, no LLM); ``accurate``: the
configured LLM writes a hypothetical title + abstract of the paper asked for, whose words and vector
join the query (:mod:`neusym.query.hyde`; seconds)."""


def search_papers(query: str, *, venue: str | None = None, year: int | str | None = None, author: str | None = None,
                  limit: int = 10, settings: Settings | None = None, index: PaperIndex | None = None,
                  config: SearchConfig | None = None, mode: str = "default", llm: Any = None) -> list[PaperHit]:
    """Find the papers best matching a natural-language question or keywords, best first.

    ``venue`` (e.g. "acl", case-insensitive conference abbreviation; "findings" selects Findings
    volumes of any conference), ``year`` (int) and ``author``
    (full name "Yang Liu" / "Liu, Yang" or last name "Liu", accent- and case-insensitive) are applied
    inside the vector store as payload filters, so every hit satisfies them. ``limit`` >= 1 hits are
    returned (fewer if fewer papers match). Each :class:`PaperHit` carries the fused score (a weighted
    sum of per-view z-scores; comparable within one query only) and the abstract sentence closest to
    the query. ``index``: search this index instead of the current corpus version's.

    ``mode="accurate"``: one call of the configured LLM (``llm`` or :func:`neusym.llm.chat.make_llm`
    of the settings) writes a hypothetical title and abstract of the paper asked for; its words and
    vector join the query (:func:`neusym.query.hyde.accurate_search`) and each hit carries
    ``default_rank``. An LLM failure or an unusable reply never fails the search: the default ranking
    is returned and a warning is logged (:func:`neusym.query.hyde.accurate_search` also returns the
    reason and the hypothesis). Costs one LLM call per query (seconds with the offline model).

    Raises ``ValueError`` for an empty query, a non-positive limit, a non-integer year or an unknown
    mode, and ``neusym.store.versions.NoCorpusVersion`` when nothing has been published.
    """
    if mode not in SEARCH_MODES:
        raise ValueError(f"mode must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
    idx = index or current_paper_index(settings)
    if mode == "default":
        return idx.search(query, venue=venue, year=year, author=author, limit=limit, config=config)
    from neusym.query.hyde import accurate_search

    return accurate_search(idx, query, venue=venue, year=year, author=author, limit=limit, config=config,
                           settings=settings or idx.settings, llm=llm).hits


def similar_papers(index: PaperIndex, paper_id: str, *, limit: int = 10) -> list[PaperHit]:
    """The papers nearest to ``paper_id`` in the paper index, best first, the paper itself left out.

    Nearest by the cosine similarity of the papers' title-and-abstract vectors (the index's ``minilm``
    view: all-MiniLM-L6-v2, or the version's corpus-adapted encoder); ``score`` is that similarity
    (-1..1) and ``snippet`` the start of the paper's abstract. Returns ``[]`` for a paper that is not in
    the index (e.g. a paper without a title). Raises ``ValueError`` for a non-positive limit.
    """
    from neusym.store.paper_index import point_id_for_paper
    from neusym.store.vectors import Filter, Match, QuerySpec

    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    own = point_id_for_paper(paper_id)
    records = index.backend.retrieve([own], payload=False, vectors=["minilm"]) if index.backend.exists() else []
    vector = (records[0].vectors or {}).get("minilm") if records else None
    if not vector:
        return []
    papers_only = Filter(must=(Match("kind", "paper"),))
    found = index.backend.query([QuerySpec("minilm", list(vector), papers_only, limit + 1, with_payload=True)])[0]
    hits = []
    for h in found:
        p = h.payload or {}
        if h.id == own or p.get("paper_id") == paper_id:
            continue
        abstract = " ".join(" ".join(p.get("sentences") or []).split())
        hits.append(PaperHit(paper_id=p.get("paper_id"), title=p.get("title"), venue=p.get("venue"),
                             year=p.get("year"), authors=list(p.get("authors") or []), score=round(float(h.score), 4),
                             snippet=abstract[:300], anthology_id=p.get("anthology_id"), volume=p.get("volume")))
    return hits[:limit]


CITATION_POOL = 100
"""How deep into a ranking :func:`order_by_citations` looks (the service's facet pool)."""


def has_citation_graph(cur: Any) -> bool:
    """Whether the corpus version of DuckDB cursor ``cur`` has the citation graph (view ``paper_citations``;
    versions published before it existed have not)."""
    cur.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'paper_citations' AND NOT internal")
    return bool(cur.fetchone()[0])


def cited_by_counts(cur: Any, paper_ids: list[str], *, graph: bool | None = None) -> dict[str, int] | None:
    """paper id -> how many papers of the corpus cite it (view ``paper_citations``), for ``paper_ids``;
    papers nobody cites get 0 (absent ids too). ``cur``: a DuckDB cursor on a corpus version. None when
    the version predates the citation graph; ``graph``: what :func:`has_citation_graph` said of this
    version, when the caller already knows (otherwise it is asked)."""
    if not (has_citation_graph(cur) if graph is None else graph):
        return None
    if not paper_ids:
        return {}
    cur.execute("SELECT paper_id::VARCHAR, cited_by_count FROM paper_citations WHERE paper_id::VARCHAR IN "
                f"({', '.join('?' for _ in paper_ids)})", list(paper_ids))
    return {pid: int(n) for pid, n in cur.fetchall()}


def order_by_citations(hits: list[PaperHit], counts: dict[str, int], *, sort: str = "relevance",
                       min_cited_by: int | None = None) -> list[PaperHit]:
    """``hits`` (best first) keeping those cited by at least ``min_cited_by`` corpus papers, ordered by
    ``counts`` (most cited first, relevance breaking ties) when ``sort == "cited_by"``. Raises ValueError
    for another sort."""
    if sort not in ("relevance", "cited_by"):
        raise ValueError(f"sort must be relevance or cited_by, got {sort!r}")
    if min_cited_by is not None:
        hits = [h for h in hits if counts.get(h.paper_id, 0) >= min_cited_by]
    if sort == "cited_by":
        hits = sorted(hits, key=lambda h: -counts.get(h.paper_id, 0))  # stable: relevance order among equals
    return hits


__all__ = ["CITATION_POOL", "SEARCH_MODES", "cited_by_counts", "has_citation_graph", "order_by_citations",
           "search_papers", "similar_papers"]
