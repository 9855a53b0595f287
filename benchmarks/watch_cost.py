"""Cost of the saved-search task (``neusym.query.watches.run_watches``) per publish, and of the citation
resolution step of the publish, on a conference-scale home.

The home must be scratch (its ``watches.sqlite`` is replaced). Watches: ``--watches`` queries made of the
first six words of titles drawn (seeded) from the corpus. Measured: the first evaluation (every watch
records its initial papers), then ``--publishes`` times a publish with no change (``neusym publish``)
followed by the evaluation against the new version (what the ``corpus_watches`` DAG does each night), and
the citation step of each publish (from its report).

    python benchmarks/watch_cost.py --home /tmp/citehome --watches 100 --out benchmarks/results/watch_cost.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import duckdb  # noqa: E402

from neusym.ingest.publish import publish  # noqa: E402
from neusym.query.watches import run_watches  # noqa: E402
from neusym.settings import Settings  # noqa: E402
from neusym.store.paper_index import close_paper_indexes  # noqa: E402
from neusym.store.watches import WatchStore, check_watch, store_path  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", required=True, type=Path)
    ap.add_argument("--watches", type=int, default=100)
    ap.add_argument("--publishes", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    settings = Settings(home=args.home)
    for suffix in ("", "-wal", "-shm"):
        Path(str(store_path(settings)) + suffix).unlink(missing_ok=True)
    con = duckdb.connect(str(args.home / "corpus-snapshot.duckdb"), read_only=True)
    titles = [t for (t,) in con.execute("SELECT title FROM metadata ORDER BY paper_id").fetchall()]
    papers = len(titles)
    references = con.execute("SELECT count(*) FROM reference").fetchone()[0]
    con.close()
    rng = random.Random(7)
    with WatchStore(settings) as store:
        for i, title in enumerate(rng.sample(titles, args.watches)):
            store.add(check_watch(f"w{i:03d}", " ".join(title.split()[:6])))
    t = time.perf_counter()
    first = run_watches(settings)
    first_s = time.perf_counter() - t
    nightly, citations = [], []
    for _ in range(args.publishes):
        report = publish(settings)
        citations.append(report.citations["seconds"])
        t = time.perf_counter()
        run = run_watches(settings)
        nightly.append(time.perf_counter() - t)
        assert run.evaluated == args.watches
    close_paper_indexes()
    result = {
        "papers": papers, "references": references, "watches": args.watches,
        "first_evaluation_s": round(first_s, 3),
        "initial_matches": sum(n or 0 for n in first.new_matches.values()),
        "per_publish_s": [round(x, 3) for x in nightly], "per_publish_median_s": round(statistics.median(nightly), 3),
        "per_watch_ms": round(1000 * statistics.median(nightly) / args.watches, 2),
        "citation_step_per_publish_s": citations,
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
