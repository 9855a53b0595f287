"""Candidate feed entries for judging the saved-search relevance floor (benchmarks/watches/README.md).

Simulates the night the ACL 2024 Findings volumes arrive: on a home holding the four crawled ACL
collections (the benchmarks/citations home), every query of ``queries.json`` is ranked like a watch
that last looked before that night (:func:`neusym.query.watches.evaluate`: only the new papers, the
Findings ones, are ranked; the first 100 kept) and each is written with its cosine similarity to the
query, down to 0.20 (below the shipped floor, so the judgement can show what a lower floor would add).

    python benchmarks/watches/candidates.py --home /tmp/citehome --out benchmarks/watches/candidates.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

import duckdb  # noqa: E402

from neusym.query.watches import WATCH_POOL  # noqa: E402
from neusym.settings import Settings  # noqa: E402
from neusym.store.paper_index import PaperIndex  # noqa: E402
from neusym.store.versions import open_version  # noqa: E402

FLOOR = 0.20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--queries", type=Path, default=HERE / "queries.json")
    args = ap.parse_args()
    queries = json.loads(args.queries.read_text())["queries"]
    settings = Settings(home=args.home)
    with open_version(settings) as version:
        con = duckdb.connect(str(version.db_path), read_only=True)
        new = {pid for (pid,) in con.execute(
            "SELECT DISTINCT ref_paper_id::VARCHAR FROM provenance WHERE anthology_id LIKE '2024.findings-%'").fetchall()}
        abstracts = dict(con.execute("SELECT paper_id::VARCHAR, abstract FROM metadata").fetchall())
        con.close()
        index = PaperIndex.of_version(version, settings)
        rows = []
        for q in queries:
            ranking = index.rank(q, depth=WATCH_POOL, paper_ids=sorted(new))
            ranked = [(i + 1, pid, s) for i, (pid, s) in enumerate(ranking.scored)]
            recs = {r.id: r for r in index.backend.retrieve([p for _, p, _ in ranked], vectors=["minilm"])}
            qv = ranking.query_vector
            qn = math.sqrt(sum(x * x for x in qv))
            for rank, pid, score in ranked:
                rec = recs[pid]
                if rec.payload.get("paper_id") not in new:
                    continue
                v = rec.vectors["minilm"]
                sim = sum(a * b for a, b in zip(qv, v)) / (qn * math.sqrt(sum(x * x for x in v)))
                if sim >= FLOOR:
                    p = rec.payload
                    rows.append({"query": q, "paper_id": p["paper_id"], "rank": rank, "score": round(score, 4),
                                 "similarity": round(sim, 4), "title": p["title"],
                                 "abstract": (abstracts.get(p["paper_id"]) or "")[:1200]})
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(len(rows), "candidates for", len(queries), "queries;", len(new), "Findings papers")


if __name__ == "__main__":
    main()
