"""corpus_refresh on the CeleryExecutor cluster: wall time with one worker vs two, and a backfill extrapolation.

Brings up the real cluster of ``neusym.interfaces.cluster`` (PostgreSQL, Redis, api-server, scheduler,
dag-processor, triggerer, two Celery workers of concurrency 1, shared storage by ``file://`` URL) in a
temporary directory, and for each corpus — the bundled samples (5 PDFs) and the N smallest PDFs of
``../shared/corpus/pdfs`` (default 20) — triggers ``corpus_refresh`` through the REST API, cold
(worker homes and the shared storage emptied first), once with worker2 stopped and once with both
workers. ``corpus_enrich`` is paused (it would compete for the same cores).

Reports per run: wall time from trigger to success, pages, pages/s, the summed task durations of the
fan-out stages (parse, encode) and of the single writer (load_metadata, materialize, publish), and
the load average around the run (the machine is shared). From the one-worker run of the larger corpus
it extrapolates a conference backfill (default 2,500 papers / 30,000 pages) to N worker hosts like
this one (2 cores, one task at a time):

    T(N) = pages x fan-out seconds per page / N  +  pages x writer seconds per page  +  fixed

Usage: python benchmarks/cluster_bench.py [--pdfs 20] [--out benchmarks/results/cluster.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHARED = REPO.parent / "shared" / "corpus" / "pdfs"
FANOUT = ("parse", "encode")
WRITER = ("load_metadata", "materialize", "publish")


def pages_of(paths: list[Path]) -> int:
    import pymupdf

    total = 0
    for p in paths:
        with pymupdf.open(str(p)) as doc:
            total += doc.page_count
    return total


def reset(node) -> None:
    """Cold start: empty every worker home and the shared storage (the cluster keeps running)."""
    for w in node.cluster.workers:
        home = Path(w.env["NEUSYM_HOME"])
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
    storage = Path(node.target.storage_url[len("file://"):])
    shutil.rmtree(storage, ignore_errors=True)
    storage.mkdir(parents=True)


def set_workers(node, n: int) -> None:
    log = node.logs / "worker2.log"
    if n == 1:
        node.stop("worker2", timeout_s=30)
        return
    if node.pid("worker2") is None:
        before = log.read_text(errors="replace").count(" ready.") if log.exists() else 0
        node.start("worker2")
        deadline = time.monotonic() + 180
        while log.read_text(errors="replace").count(" ready.") <= before:
            if time.monotonic() > deadline:
                raise RuntimeError("worker2 did not come back")
            time.sleep(1)


def run_once(node, api, corpus: str, inputs: Path, n_pdfs: int, pages: int, workers: int) -> dict:
    reset(node)
    set_workers(node, workers)
    load_before = os.getloadavg()
    t0 = time.monotonic()
    run_id = api.trigger("corpus_refresh", {"paths": [str(inputs)]})
    run = api.wait_run("corpus_refresh", run_id, timeout_s=7200, poll_s=3)
    wall = time.monotonic() - t0
    load_after = os.getloadavg()
    tis = api.task_instances("corpus_refresh", run_id)
    if run["state"] != "success":
        raise RuntimeError(f"{corpus}/{workers}: run {run['state']}: "
                           f"{[(t['task_id'], t['map_index'], t['state']) for t in tis if t['state'] != 'success']}")
    seconds: dict[str, float] = {}
    for t in tis:
        seconds[t["task_id"]] = round(seconds.get(t["task_id"], 0.0) + float(t.get("duration") or 0.0), 2)
    fanout = sum(seconds.get(k, 0.0) for k in FANOUT)
    writer = sum(seconds.get(k, 0.0) for k in WRITER)
    result = {
        "corpus": corpus, "pdfs": n_pdfs, "pages": pages, "workers": workers, "wall_s": round(wall, 1),
        "pages_per_s": round(pages / wall, 3), "task_seconds": seconds,
        "fanout_task_s": round(fanout, 1), "writer_task_s": round(writer, 1),
        "fanout_s_per_page": round(fanout / pages, 3), "writer_s_per_page": round(writer / pages, 3),
        "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
    }
    print(json.dumps({k: result[k] for k in ("corpus", "workers", "pages", "wall_s", "pages_per_s", "fanout_task_s",
                                             "writer_task_s", "loadavg_after")}), flush=True)
    return result


def extrapolate(base: dict, pages: int, papers: int, hosts: list[int]) -> dict:
    fixed = max(0.0, base["wall_s"] - base["fanout_task_s"] - base["writer_task_s"])
    minutes = {}
    for n in hosts:
        t = pages * base["fanout_s_per_page"] / n + pages * base["writer_s_per_page"] + fixed
        minutes[str(n)] = round(t / 60, 1)
    return {
        "papers": papers, "pages": pages, "basis": f"{base['corpus']}, 1 worker",
        "fanout_s_per_page": base["fanout_s_per_page"], "writer_s_per_page": base["writer_s_per_page"],
        "fixed_s": round(fixed, 1), "minutes_by_worker_hosts": minutes,
        "writer_floor_minutes": round(pages * base["writer_s_per_page"] / 60, 1),
        "assumptions": "each worker host like this one (2 cores) runs one task at a time; fan-out task time per page "
                       "as measured with one worker (includes each task's start-up: process, imports, model load); "
                       "the single writer (load_metadata, materialize, publish) is serial and scales with pages; "
                       "scheduler and shared-storage bandwidth are not the bottleneck; no enrichment.",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pdfs", type=int, default=20, help="the N smallest PDFs of ../shared/corpus/pdfs")
    ap.add_argument("--backfill-papers", type=int, default=2500)
    ap.add_argument("--backfill-pages", type=int, default=30000)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "cluster.json")
    args = ap.parse_args()

    from neusym.interfaces.cluster import Api, Node, free_port_base  # settings are read from the environment at Node()

    root = Path(tempfile.mkdtemp(prefix="neusym-cluster-bench-", dir="/tmp"))
    os.chmod(root, 0o755)
    os.environ.update({
        "NEUSYM_HOME": str(root / "home"), "NEUSYM_CLUSTER_PORT_BASE": str(free_port_base()),
        "NEUSYM_REFRESH_CRON": "", "NEUSYM_ENRICH_KINDS": "[]",
    })
    os.environ.pop("NEUSYM_STORAGE_URL", None)

    corpora = [("samples", REPO / "samples" / "pdfs")]
    if SHARED.is_dir():
        pdfs = sorted(SHARED.glob("*.pdf"), key=lambda p: (pages_of([p]), p.name))[: args.pdfs]
        shared_dir = root / "inputs" / f"shared{len(pdfs)}"
        shared_dir.mkdir(parents=True)
        for p in pdfs:
            shutil.copy(p, shared_dir / p.name)
        corpora.append((f"shared-corpus-{len(pdfs)}-smallest", shared_dir))
    else:
        print(f"{SHARED} not found: measuring the samples only", file=sys.stderr)

    node = Node()
    runs = []
    try:
        t0 = time.monotonic()
        node.up(echo=lambda *_: None)
        up_s = round(time.monotonic() - t0, 1)
        api = Api(node.api_url)
        api.wait_for_dag("corpus_refresh")
        api.wait_for_dag("corpus_enrich")
        api._req("PATCH", "/dags/corpus_enrich", json={"is_paused": True})
        for name, inputs in corpora:
            files = sorted(inputs.glob("*.pdf"))
            pages = pages_of(files)
            for workers in (1, 2):
                runs.append(run_once(node, api, name, inputs, len(files), pages, workers))
    finally:
        node.down(echo=lambda *_: None)
        shutil.rmtree(root, ignore_errors=True)

    scaling = {}
    for name, _ in corpora:
        one = next(r for r in runs if r["corpus"] == name and r["workers"] == 1)
        two = next(r for r in runs if r["corpus"] == name and r["workers"] == 2)
        scaling[name] = round(one["wall_s"] / two["wall_s"], 2)
    basis = next(r for r in reversed(runs) if r["workers"] == 1)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "cluster": {"executor": "CeleryExecutor", "workers": 2, "worker_concurrency": 1, "broker": "redis 7 (loopback)",
                    "metadata_db": "PostgreSQL 15 (loopback)", "storage": "file:// shared directory",
                    "parse_backend": os.environ.get("NEUSYM_PARSE_BACKEND", "layout"), "cluster_up_s": up_s},
        "runs": runs,
        "speedup_two_workers": scaling,
        "backfill": extrapolate(basis, args.backfill_pages, args.backfill_papers, [1, 2, 4, 8, 16, 32, 64]),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"speedup_two_workers": scaling, "backfill_minutes": result["backfill"]["minutes_by_worker_hosts"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
