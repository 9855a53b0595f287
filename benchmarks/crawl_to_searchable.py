"""Crawl to searchable: time from `neusym crawl` of a conference's ACL Anthology XML (metadata only) until
`neusym search` and `neusym retrieve` answer over every crawled paper.

Usage:  .venv/bin/python benchmarks/crawl_to_searchable.py [--corpus-dir ../shared/corpus/acl]
        [--files 2023.emnlp.xml 2024.acl.xml 2024.findings.xml] [--volume main --volume long --volume findings]
        [--out benchmarks/results/crawl_to_searchable.json]

Everything runs as the commands a user types, each a fresh process in a fresh NEUSYM_HOME (so model
loads are included): `neusym crawl acl FILES --volume ... --no-download --json` (crawl, load, publish:
DuckDB snapshot, cell points of every title and abstract, paper index), then `neusym search` and
`neusym retrieve`. Checks: the paper index and the cell collection hold every crawled paper, and 30
papers drawn at random are found by their own title (search: rank 1; retrieve on metadata.title:
rank 1). The ONNX export of the encoder is machine-wide (``~/.cache/neusym``) and made before timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NEUSYM = str(Path(sys.executable).parent / "neusym")


def run(args: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run([NEUSYM, *args], env=env, capture_output=True, text=True, timeout=3600)
    return time.perf_counter() - t0, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus-dir", type=Path, default=REPO.parent / "shared" / "corpus" / "acl")
    ap.add_argument("--files", nargs="+", default=["2023.emnlp.xml", "2024.acl.xml", "2024.findings.xml"])
    ap.add_argument("--volume", action="append", default=None)
    ap.add_argument("--sample", type=int, default=30)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "crawl_to_searchable.json")
    args = ap.parse_args()
    volumes = args.volume or ["main", "long", "findings"]
    sys.path.insert(0, str(REPO))
    from neusym.encode import get_encoder
    from neusym.settings import Settings

    get_encoder(Settings()).warm_up()  # the machine-wide ONNX export exists before timing
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NEUSYM_HOME=str(Path(tmp) / "home"), HF_HUB_OFFLINE="1")
        crawl_args = ["crawl", "acl", *[str(args.corpus_dir / f) for f in args.files], "--no-download", "--json"]
        for v in volumes:
            crawl_args += ["--volume", v]
        load0 = os.getloadavg()[0]
        crawl_s, crawl = run(crawl_args, env)
        assert crawl.returncode == 0, crawl.stderr[-3000:]
        report = json.loads(crawl.stdout)
        pub = report["publish"]
        papers = pub["papers"]
        q = "Is there a paper that detects hallucinations of large language models without any reference text?"
        search_s, search = run(["search", q, "--json", "--limit", "5"], env)
        assert search.returncode == 0, search.stderr[-2000:]
        retrieve_s, retrieve = run(["retrieve", "hallucination detection without references", "--table", "metadata",
                                    "--column", "abstract", "--json"], env)
        assert retrieve.returncode == 0, retrieve.stderr[-2000:]
        # every paper is in both collections, and a random sample is found by its own title
        status = json.loads(run(["status", "--json"], env)[1].stdout)
        titles = [r["title"] for r in json.loads(run(["sql", "SELECT title FROM metadata ORDER BY paper_id", "--format",
                                                      "json"], dict(env, NEUSYM_SQL_MAX_ROWS="100000"))[1].stdout)]
        sample = random.Random(7).sample(titles, min(args.sample, len(titles)))
        sys.path.insert(0, str(REPO))
        from neusym.store.paper_index import close_paper_indexes
        from neusym.query.paper_search import search_papers
        from neusym.store.cells import CellSearch
        from neusym.store.versions import open_version

        settings = Settings(home=Path(tmp) / "home")
        found_search = found_retrieve = 0
        with open_version(settings) as version:
            cells = CellSearch(version.cells, settings)
            for t in sample:
                hit = search_papers(t, settings=settings, limit=1)
                found_search += bool(hit) and hit[0].title == t
                got = cells.search(t, "text_bm25_en", "metadata", "title", limit=1)
                found_retrieve += bool(got) and got[0]["text"] == t
        close_paper_indexes()
    result = {
        "inputs": {"files": args.files, "volumes": volumes},
        "papers": papers,
        "load_avg_at_start": round(load0, 2),
        "crawl_to_published_s": round(crawl_s, 1),
        "first_search_s": round(search_s, 1),
        "first_retrieve_s": round(retrieve_s, 1),
        "total_s": round(crawl_s + search_s, 1),
        "seconds_per_paper": round(crawl_s / max(papers, 1), 4),
        "publish": {k: pub[k] for k in ("version", "points", "vectors_encoded", "seconds")},
        "paper_index": {k: pub["paper_index"][k] for k in ("papers", "texts_encoded", "seconds")},
        "crawl_timings": report["seconds"],
        "stages": report.get("stages", {}),
        "status_points": status["points"],
        "all_in_paper_index": status["points"]["papers"] == papers,
        "sample_found_by_title": {"n": len(sample), "search_rank1": found_search, "retrieve_rank1": found_retrieve},
        "search_answer": [h["title"] for h in json.loads(search.stdout)][:3],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
