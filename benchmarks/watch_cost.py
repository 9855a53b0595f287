"""Cost of the saved-search task (``neusym.query.watches.run_watches``) per publish, and of the citation
resolution step of the publish, on a conference-scale home.

The home must be scratch (its ``watches.sqlite`` is replaced, papers leave and come back). Watches:
``--watches`` queries made of the first six words of titles drawn (seeded) from the corpus. Steps, all
through the real publish: ``--arrive`` crawled papers are taken out of the writer's database and a version
is published; the watches are added and evaluated (their first evaluation); the papers are put back and
a version is published — the night they arrive — and the watches evaluated (timed: what the
``corpus_watches`` DAG does); then a publish with nothing new and its evaluation.

    python benchmarks/watch_cost.py --home /tmp/citehome --watches 100 --out benchmarks/results/watch_cost.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import tempfile
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
    ap.add_argument("--arrive", type=int, default=100)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    settings = Settings(home=args.home)
    for suffix in ("", "-wal", "-shm"):
        Path(str(store_path(settings)) + suffix).unlink(missing_ok=True)
    con = duckdb.connect(str(args.home / "corpus-snapshot.duckdb"), read_only=True)
    titles = [t for (t,) in con.execute("SELECT title FROM metadata ORDER BY paper_id").fetchall()]
    crawled = [p for (p,) in con.execute("SELECT DISTINCT ref_paper_id::VARCHAR FROM provenance WHERE ref_paper_id "
                                         "IN (SELECT paper_id FROM metadata WHERE pdf_sha256 IS NULL) ORDER BY 1").fetchall()]
    papers = len(titles)
    references = con.execute("SELECT count(*) FROM reference").fetchone()[0]
    con.close()
    rng = random.Random(7)
    with WatchStore(settings) as store:
        for i, title in enumerate(rng.sample(titles, args.watches)):
            store.add(check_watch(f"w{i:03d}", " ".join(title.split()[:6])))
    from neusym.store.db import writer

    arriving = rng.sample(crawled, args.arrive)
    kept = Path(tempfile.mkdtemp()) / "arriving.parquet"
    with writer(settings) as w:
        w.execute(f"COPY (SELECT * FROM metadata WHERE paper_id::VARCHAR IN (SELECT unnest(?))) TO '{kept}' "
                  "(FORMAT parquet)", [arriving])
        w.execute("DELETE FROM metadata WHERE paper_id::VARCHAR IN (SELECT unnest(?))", [arriving])
    before = publish(settings)
    t = time.perf_counter()
    first = run_watches(settings)
    first_s = time.perf_counter() - t
    with writer(settings) as w:
        w.execute(f"INSERT INTO metadata SELECT * FROM read_parquet('{kept}')")
    arrived = publish(settings)
    t = time.perf_counter()
    night = run_watches(settings)
    night_s = time.perf_counter() - t
    assert night.evaluated == args.watches
    quiet_pub = publish(settings)
    t = time.perf_counter()
    quiet = run_watches(settings)
    quiet_s = time.perf_counter() - t
    close_paper_indexes()
    result = {
        "papers": papers, "references": references, "watches": args.watches, "arriving_papers": args.arrive,
        "first_evaluation_s": round(first_s, 3),
        "initial_matches": sum(n or 0 for n in first.new_matches.values()),
        "evaluation_after_arrival_s": round(night_s, 3),
        "per_watch_ms": round(1000 * night_s / args.watches, 2),
        "new_matches": sum(n or 0 for n in night.new_matches.values()),
        "watches_with_new_matches": sum(1 for n in night.new_matches.values() if n),
        "evaluation_after_quiet_publish_s": round(quiet_s, 3),
        "publish_s": {"papers_left": round(sum(before.seconds.values()), 3),
                      "papers_arrived": round(sum(arrived.seconds.values()), 3),
                      "nothing_new": round(sum(quiet_pub.seconds.values()), 3)},
        "citation_step_s": {"papers_left": before.citations["seconds"], "papers_arrived": arrived.citations["seconds"],
                            "nothing_new": quiet_pub.citations["seconds"]},
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
