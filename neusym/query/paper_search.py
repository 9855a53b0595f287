"""Conference-wide paper search (query side). :func:`search` is the front door every interface uses
(``neusym search``, ``GET /search`` and its BibTeX/RIS exports, the MCP ``search_papers`` tool): the
filters, the two modes, ordering and filtering by in-corpus citations, and the facet pool, with one
set of rules and one error for bad input. :func:`search_papers` is the plain ranked list over the
paper index of the current corpus version (:mod:`neusym.store.paper_index`: its schema, build, sync
and fused ranking), in the default mode (the fused hybrid search alone) or the accurate mode (one LLM
call writes a hypothetical abstract that joins the query: :mod:`neusym.query.hyde`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

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
    check_search(query, limit=limit, mode=mode)
    idx = index or current_paper_index(settings)
    return search(query, index=idx, venue=venue, year=year, author=author, limit=limit, mode=mode, llm=llm,
                  settings=settings, config=config).hits


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


SORTS = ("relevance", "cited_by")
"""``relevance``: the fused ranking; ``cited_by``: the first :data:`CITATION_POOL` papers of the
ranking, most cited in the corpus first (relevance breaking ties)."""


@dataclass
class SearchOutcome:
    """What :func:`search` found: ``hits`` (best first, at most the limit), ``pool_points`` (the point
    ids of the first ``pool`` papers of the default ranking in the paper index, for facet counts; empty
    when no pool was asked for), ``cited_by`` (paper id -> in-corpus citing papers, for the hits; None without a cursor or on a
    version published before the citation graph) and ``hyde`` (the accurate mode's summary:
    :meth:`neusym.query.hyde.AccurateResult.to_dict`; None in the default mode)."""

    hits: list[PaperHit]
    pool_points: list[str] = field(default_factory=list)
    cited_by: dict[str, int] | None = None
    hyde: dict | None = None


def check_search(query: str, *, limit: int = 10, sort: str = "relevance", min_cited_by: int | None = None,
                 mode: str = "default") -> bool:
    """The rules of :func:`search` that need no index (callers that must refuse a request before
    queueing it, e.g. for the LLM, check it first): returns whether the search orders or filters by
    citations. Raises ``ValueError`` with a message for the user."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError("the query must not be blank")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    if sort not in SORTS:
        raise ValueError(f"sort must be relevance or cited_by, got {sort!r}")
    if mode not in SEARCH_MODES:
        raise ValueError(f"mode must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
    if min_cited_by is not None and (isinstance(min_cited_by, bool) or not isinstance(min_cited_by, int)
                                     or min_cited_by < 0):
        raise ValueError(f"min_cited_by must be an integer of 0 or more, got {min_cited_by!r}")
    by_citations = sort == "cited_by" or min_cited_by is not None
    if by_citations and mode == "accurate":
        raise ValueError("sorting or filtering by citations works in the default mode only")
    return by_citations


def search(query: str, *, index: PaperIndex, venue: str | None = None, year: int | None = None,
           author: str | None = None, limit: int = 10, sort: str = "relevance", min_cited_by: int | None = None,
           mode: str = "default", pool: int = 0, cursor: Callable[[], Any] | None = None,
           citation_graph: bool | None = None, query_vector: list[float] | None = None, llm: Any = None,
           settings: Settings | None = None, version: int | None = None,
           config: SearchConfig | None = None) -> SearchOutcome:
    """Search ``index`` (a :class:`~neusym.store.paper_index.PaperIndex` of one corpus version) for
    ``query`` under the filters ``venue`` / ``year`` / ``author`` (see :func:`search_papers`).

    ``limit``: hits returned (>= 1). ``sort`` (:data:`SORTS`) and ``min_cited_by`` (keep papers cited
    by at least that many corpus papers) look at the first :data:`CITATION_POOL` papers of the default
    ranking and need ``cursor``; they work in the default mode only. ``mode``: :data:`SEARCH_MODES`
    (``accurate`` makes one call of ``llm``, default the configured LLM of ``settings``; an LLM failure
    keeps the default ranking and says why in ``hyde``). ``pool``: also return the paper ids of the
    first ``pool`` papers of the default ranking (facets), from the same ranking as the hits in the
    default mode (their point ids: :data:`SearchOutcome.pool_points`). ``cursor``: a callable giving a DuckDB cursor on the same version (closed here), for the hits'
    ``cited_by`` counts; ``citation_graph``: whether that version has the graph, when the caller knows.
    ``query_vector``: the query's vector, when the caller has it cached. ``version``: the version's
    number, for messages. ``config``: how the index scores a query (weights, fusion; default the
    shipped one).

    Raises ``ValueError`` (with a message for the user) for a blank query, a limit below 1, an
    unknown sort or mode, citation ordering in the accurate mode or without a cursor, a version without
    the citation graph when ordering by it, and the index's own bad arguments (a non-integer year).
    """
    by_citations = check_search(query, limit=limit, sort=sort, min_cited_by=min_cited_by, mode=mode)
    if by_citations and cursor is None:
        raise ValueError("sorting or filtering by citations needs the corpus version's database")
    filters = {"venue": venue or None, "year": year, "author": author or None}
    cur = cursor() if cursor is not None else None
    try:
        outcome = SearchOutcome(hits=[])
        counts: dict[str, int] | None = None
        if mode == "default" or pool:
            depth = max(CITATION_POOL if by_citations else limit, pool)
            ranking = index.rank(query, **filters, depth=depth, query_vector=query_vector, config=config)
            outcome.pool_points = [point for point, _ in ranking.scored][:pool]
            if mode == "default":
                hits = index.hits(ranking, CITATION_POOL if by_citations else limit)
                if by_citations:
                    counts = cited_by_counts(cur, [h.paper_id for h in hits], graph=citation_graph)
                    if counts is None:
                        name = f"corpus version {version}" if version is not None else "this corpus version"
                        raise ValueError(f"{name} has no citation graph (published before it existed): publish again "
                                         "to sort or filter by citations")
                    hits = order_by_citations(hits, counts, sort=sort, min_cited_by=min_cited_by)
                outcome.hits = hits[:limit]
        if mode == "accurate":
            from neusym.query.hyde import accurate_search

            result = accurate_search(index, query, **filters, limit=limit, config=config,
                                     settings=settings or index.settings, llm=llm)
            outcome.hits, outcome.hyde = result.hits[:limit], result.to_dict()
        if counts is not None:
            outcome.cited_by = {h.paper_id: counts.get(h.paper_id, 0) for h in outcome.hits}
        elif cur is not None:
            outcome.cited_by = cited_by_counts(cur, [h.paper_id for h in outcome.hits], graph=citation_graph)
    finally:
        if cur is not None:
            cur.close()
    return outcome


__all__ = ["CITATION_POOL", "SEARCH_MODES", "SORTS", "SearchOutcome", "check_search", "cited_by_counts", "has_citation_graph",
           "order_by_citations", "search", "search_papers", "similar_papers"]
