"""Saved searches evaluated against each new corpus version: what a research group's feeds hold.

:func:`run_watches` opens the current corpus version and, for every watch of
:class:`neusym.store.watches.WatchStore` not yet evaluated against it, ranks the papers that arrived in
the corpus after the version the watch last looked at (the store remembers the first version each
paper was seen in) with the watch's search (:meth:`neusym.store.paper_index.PaperIndex.rank`, default
mode, the watch's filters, restricted to those papers) and records as **new matches** those close
enough to the query (:func:`evaluate`). A watch's first evaluation ranks the whole corpus and records
its first :data:`INITIAL_MATCHES` papers instead, marked ``initial`` (what the corpus already held when
the watch was added), so a new feed is not empty.

Run after every publish: by the ``corpus_watches`` DAG (scheduled on the ``neusym://corpus`` asset),
by ``neusym ingest`` / ``neusym crawl`` after they publish, and by ``neusym watch run``. Idempotent:
a watch already evaluated against the current version is skipped, and a paper is recorded for a
watch at most once.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from neusym.settings import Settings
from neusym.store.paper_index import PaperIndex
from neusym.store.versions import open_version
from neusym.store.watches import Watch, WatchStore

WATCH_POOL = 100
"""How deep each watch looks into its ranking of the new papers (of the whole corpus, the first time)."""
INITIAL_MATCHES = 10
"""Papers recorded (as ``initial``) by a watch's first evaluation."""
MIN_SIMILARITY = 0.45
"""Least cosine similarity (all-MiniLM-L6-v2) between the query and a paper's title and abstract for a match;
with a fused score above the ranking's average (> 0). Both chosen on 10 of the 20 queries of
benchmarks/watches (blind relevance judgments), reported on the other 10 (its README)."""


@dataclass
class WatchRunReport:
    """One :func:`run_watches` call: the version evaluated, per watch the papers added (``None`` when the
    watch had already been evaluated against this version) and the wall time in seconds."""

    version: int
    watches: int = 0
    evaluated: int = 0
    new_matches: dict[str, int | None] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def evaluate(index: PaperIndex, watch: Watch, new_papers: list[str] | None) -> list[dict]:
    """The papers ``watch`` records now: hit dicts (paper_id, rank, score, similarity, title, authors, venue,
    year, snippet), best first.

    A later evaluation ranks only ``new_papers``, the ids of the papers that arrived after the version the
    watch last looked at (a payload filter inside the paper index), so a relevant new paper is found however
    many older papers outrank it; ``None`` for the first evaluation. The first evaluation ranks
    the whole corpus and keeps :data:`INITIAL_MATCHES`. Either way a paper is a match when it is among
    the first :data:`WATCH_POOL` of that ranking, its fused score is above the ranking's average (> 0: the
    scores are z-scores over the ranked papers) and the cosine similarity of its title-and-abstract vector
    to the query's is at least :data:`MIN_SIMILARITY`, so a quiet night or a small corpus does not feed
    every new paper. Raises ValueError for a watch whose filters the index refuses (e.g. a venue
    without letters)."""
    initial = new_papers is None
    if not initial and not new_papers:
        return []
    ranking = index.rank(watch.query, venue=watch.venue, year=watch.year, author=watch.author, depth=WATCH_POOL,
                         paper_ids=new_papers)
    ranked = [(i + 1, pid, score) for i, (pid, score) in enumerate(ranking.scored) if score > 0]
    if not ranked or ranking.query_vector is None:
        return []
    records = {r.id: r for r in index.backend.retrieve([pid for _, pid, _ in ranked], vectors=["minilm"])}
    q = ranking.query_vector
    qn = math.sqrt(sum(x * x for x in q)) or 1.0
    found: list[dict] = []
    for rank, pid, score in ranked:
        rec = records.get(pid)
        vec = (rec.vectors or {}).get("minilm") if rec is not None else None
        if not vec:
            continue
        sim = sum(a * b for a, b in zip(q, vec)) / (qn * (math.sqrt(sum(x * x for x in vec)) or 1.0))
        if sim < MIN_SIMILARITY:
            continue
        p = rec.payload
        found.append({"rank": rank, "paper_id": p.get("paper_id"), "score": round(float(score), 4),
                      "similarity": round(sim, 4), "title": p.get("title"), "authors": list(p.get("authors") or []),
                      "venue": p.get("venue"), "year": p.get("year"), "snippet": _abstract_head(p)})
    return found[:INITIAL_MATCHES] if initial else found


def _abstract_head(payload: dict, chars: int = 300) -> str | None:
    text = " ".join(payload.get("sentences") or []) or payload.get("abstract") or ""
    text = " ".join(text.split())
    return (text[:chars].rsplit(" ", 1)[0] + " …") if len(text) > chars else (text or None)


def run_watches(settings: Settings, *, names: list[str] | None = None) -> WatchRunReport:
    """Evaluate the watches (all, or ``names``) against the current corpus version; see the module
    docstring. Raises :class:`neusym.store.versions.NoCorpusVersion` when nothing is published,
    :class:`neusym.store.watches.WatchError` for an unknown name. A watch whose search fails (ValueError:
    a filter the index refuses) is recorded with no match and logged in ``new_matches`` as 0."""
    t0 = time.perf_counter()
    with WatchStore(settings) as store, open_version(settings) as version:
        watches = [store.get(n) for n in names] if names else store.list()
        report = WatchRunReport(version=version.number, watches=len(watches))
        todo = [w for w in watches if w.evaluated_version != version.number]
        for w in watches:
            report.new_matches[w.name] = None
        if todo:
            paper_ids = _paper_ids(version)
            store.record_papers(version.number, paper_ids)
            first_seen = store.first_versions(paper_ids)
            index = PaperIndex.of_version(version, settings)
            new_since: dict[int, list[str]] = {}  # watches that last looked at the same version share the list
            for w in todo:
                t = time.perf_counter()
                last = w.evaluated_version
                if last is not None and last not in new_since:
                    new_since[last] = [p for p, v in first_seen.items() if v > last]
                try:
                    found = evaluate(index, w, None if last is None else new_since[last])
                except ValueError:
                    found = []
                report.new_matches[w.name] = store.record_run(
                    w, version.number, found, WATCH_POOL, time.perf_counter() - t,
                    initial=w.evaluated_version is None)
                report.evaluated += 1
    report.seconds = round(time.perf_counter() - t0, 4)
    return report


def _paper_ids(version: Any) -> list[str]:
    from neusym.store.db import connect_plain_readonly

    con = connect_plain_readonly(version.db_path)
    try:
        return [r[0] for r in con.execute("SELECT paper_id::VARCHAR FROM metadata").fetchall()]
    finally:
        con.close()
