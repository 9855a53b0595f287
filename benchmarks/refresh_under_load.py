"""Refresh under load: while `neusym ingest` refreshes and publishes a corpus, a second process keeps
calling `neusym retrieve`, `neusym sql` and `neusym status --paper` (each call a new process, as a user
or a script would). Every call must succeed, and every answer must come from one consistent version.

Usage:  .venv/bin/python benchmarks/refresh_under_load.py [--out benchmarks/results/refresh_under_load.json]

Setup: a NEUSYM_HOME with the bundled sample corpus minus one paper (version 1). Refresh: `neusym ingest`
of all sample PDFs (parses and encodes the missing paper, materializes, publishes version 2). The reader
loop runs from before the refresh until after it. Consistency: `status --paper P` returns the SQL cell count
and the point count of paper P read from one version — they must be equal in every answer; `sql` answers
(chunks of the corpus) and `retrieve` answers must each match one of the two versions' values.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NEUSYM = str(Path(sys.executable).parent / "neusym")
SAMPLES = REPO / "samples" / "pdfs"
LATE = "eacl2023_2023.eacl-main.121_LongEval.pdf"


def call(args: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run([NEUSYM, *args], env=env, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - t0, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "refresh_under_load.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inbox = Path(tmp) / "inbox"
        inbox.mkdir()
        for pdf in SAMPLES.glob("*.pdf"):
            if pdf.name != LATE:
                shutil.copy(pdf, inbox / pdf.name)
        env = dict(os.environ, NEUSYM_HOME=str(Path(tmp) / "home"), HF_HUB_OFFLINE="1")
        first = subprocess.run([NEUSYM, "ingest", str(inbox), "--json"], env=env, capture_output=True, text=True)
        assert first.returncode == 0, first.stderr[-3000:]
        paper = json.loads(call(["sql", "SELECT paper_id FROM metadata WHERE title ILIKE 'SPECTER%'", "--format",
                                 "json"], env)[1].stdout)[0]["paper_id"]
        calls: list[dict] = []
        stop = threading.Event()

        def reader() -> None:
            i = 0
            while not stop.is_set():
                kind = ("status", "sql", "retrieve")[i % 3]
                i += 1
                if kind == "status":
                    secs, done = call(["status", "--paper", paper, "--json"], env)
                elif kind == "sql":
                    secs, done = call(["sql", "SELECT count(*) AS n FROM chunks", "--format", "json"], env)
                else:
                    secs, done = call(["retrieve", "human evaluation of faithfulness in long summaries", "--json",
                                       "--limit", "3"], env)
                rec = {"kind": kind, "t": time.time(), "seconds": round(secs, 2), "rc": done.returncode}
                if done.returncode == 0:
                    out = json.loads(done.stdout)
                    if kind == "status":
                        rec.update(version=out["version"], cells=out["paper"]["cells"], points=out["paper"]["points"])
                    elif kind == "sql":
                        rec["chunks"] = out[0]["n"]
                    else:
                        rec.update(version=out["version"], top=[h["paper_id"] for h in out["hits"]])
                else:
                    rec["error"] = done.stderr[-500:]
                calls.append(rec)

        thread = threading.Thread(target=reader)
        thread.start()
        time.sleep(8)
        all_in = Path(tmp) / "all"
        shutil.copytree(inbox, all_in)
        shutil.copy(SAMPLES / LATE, all_in / LATE)
        t0 = time.time()
        refresh = subprocess.run([NEUSYM, "ingest", str(all_in), "--json"], env=env, capture_output=True, text=True)
        t1 = time.time()
        time.sleep(8)
        stop.set()
        thread.join()
        assert refresh.returncode == 0, refresh.stderr[-3000:]
        chunk_counts = {}
        for v in (1, 2):
            con_out = subprocess.run([sys.executable, "-c", (
                "import sys, duckdb; from pathlib import Path; "
                "con = duckdb.connect(sys.argv[1], read_only=True); print(con.execute('SELECT count(*) FROM chunks').fetchone()[0])"),
                str(Path(tmp) / "home" / "versions" / f"v{v:06d}" / "corpus.duckdb")], capture_output=True, text=True)
            chunk_counts[v] = int(con_out.stdout.strip())
    failed = [c for c in calls if c["rc"] != 0]
    status = [c for c in calls if c["kind"] == "status" and c["rc"] == 0]
    inconsistent = [c for c in status if c["cells"] != c["points"]]
    sql_bad = [c for c in calls if c["kind"] == "sql" and c["rc"] == 0 and c["chunks"] not in chunk_counts.values()]
    during = [c for c in calls if t0 <= c["t"] <= t1]
    result = {
        "refresh_seconds": round(t1 - t0, 1),
        "refresh_publish": {k: json.loads(refresh.stdout)["publish"][k] for k in ("version", "papers_changed", "upserted")},
        "calls": len(calls),
        "calls_during_refresh": len(during),
        "failed_calls": len(failed),
        "status_answers_inconsistent": len(inconsistent),
        "sql_answers_from_no_version": len(sql_bad),
        "versions_seen": sorted({c["version"] for c in calls if "version" in c}),
        "chunks_per_version": chunk_counts,
        "call_seconds_p50": {k: sorted(c["seconds"] for c in calls if c["kind"] == k)[len([c for c in calls if c["kind"] == k]) // 2]
                             for k in ("status", "sql", "retrieve")},
        "failures": failed[:5],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
