"""Paper-retrieval questions through `neusym ask` (method auto) vs `neusym search`: recall@1 of the
answered title next to the search's R@1, on the paper-search question set.

Usage:  .venv/bin/python benchmarks/paper_search/ask_vs_search.py [--size 2.5k] [--out benchmarks/results/ask_vs_search.json]

The corpus (ACL 2024 + Findings 2024, metadata only) is crawled and published in a temporary home.
Each question goes through ``ask(method="auto")`` in this process — the same code as
``neusym ask --json`` — with the configured LLM (offline by default), which is only called when the
router's rules leave the route open (questions without a paper-search cue, e.g. "How can ..."), and
through ``search_papers``. A hit is the gold paper's exact title (ask) or Anthology id (search) at rank 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))


def main() -> None:
    import bench
    from neusym.query.agent.actions import Environment
    from neusym.llm.chat import make_llm
    from neusym.query.ask import ask
    from neusym.ingest.crawl import crawl_stage, load_crawl_stage
    from neusym.ingest.publish import publish
    from neusym.store.paper_index import close_paper_indexes
    from neusym.query.paper_search import search_papers
    from neusym.settings import Settings

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus-dir", type=Path, default=ROOT.parent / "shared" / "corpus" / "acl")
    ap.add_argument("--size", default="2.5k")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ask_vs_search.json")
    args = ap.parse_args()
    questions = bench.load_questions(bench.QUESTION_SETS["concise"])
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(home=Path(tmp) / "home")
        res = crawl_stage({"source": "acl", "paths": [str(args.corpus_dir / n) for n in bench.CORPORA[args.size]]},
                          settings)
        load_crawl_stage([res], settings, download=False)
        publish(settings)
        titles = {}
        with Environment(settings) as env:
            for aid, title in env.query("SELECT p.anthology_id, m.title FROM provenance p JOIN metadata m "
                                        "ON m.paper_id = p.ref_paper_id WHERE p.anthology_id IS NOT NULL"):
                titles[aid] = title
            llm = make_llm(settings)
            rows = []
            for q in questions:
                gold = titles.get(q["anthology_id"])
                t0 = time.perf_counter()
                hits = search_papers(q["question"], settings=settings, limit=1)
                s_secs = time.perf_counter() - t0
                t0 = time.perf_counter()
                result = ask(q["question"], settings=settings, llm=llm, env=env, method="auto")
                a_secs = time.perf_counter() - t0
                rows.append({"id": q["id"] if "id" in q else q["anthology_id"], "split": q["split"],
                             "search_hit": bool(hits) and hits[0].anthology_id == q["anthology_id"],
                             "ask_hit": result.answer == gold, "route": result.route,
                             "ask_seconds": round(a_secs, 2), "search_seconds": round(s_secs, 3),
                             "llm_calls": result.turns})
        close_paper_indexes()
    out: dict = {"corpus": args.size, "questions": len(rows), "load_avg": os.getloadavg()[0], "splits": {}}
    for split in ("dev", "test", "all"):
        sel = [r for r in rows if split == "all" or r["split"] == split]
        out["splits"][split] = {
            "n": len(sel),
            "search_R@1": round(sum(r["search_hit"] for r in sel) / len(sel), 3),
            "ask_R@1": round(sum(r["ask_hit"] for r in sel) / len(sel), 3),
            "routes": {k: sum(1 for r in sel if r["route"] == k) for k in sorted({r["route"] for r in sel})},
            "ask_median_seconds": round(statistics.median(r["ask_seconds"] for r in sel), 2),
        }
    out["rows"] = rows
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["splits"], indent=1))


if __name__ == "__main__":
    main()
