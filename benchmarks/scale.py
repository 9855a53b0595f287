"""Scale: the cell collection at 100k and 1M points, through the project's own store layer.

Usage:  .venv/bin/python benchmarks/scale.py [--sizes 100000,1000000] [--configs default,exact]
        [--out benchmarks/results/scale.json]

Points are built from real cells: every encodable cell of the 26 PDFs of ``../shared/corpus/pdfs``
(ingested once with ``NEUSYM_PARSE_BACKEND=pymupdf``) and the titles and abstracts of the four ACL
collections of ``../shared/corpus/acl`` (crawled once), with the vectors the project made for them.
They are cycled over synthetic papers of 250 cells each (point id, paper_id and primary_key are new;
the dense vector gets N(0, 0.02) noise and is renormalised, so copies are near-duplicates rather than
identical). The source corpus is cached in ``$NEUSYM_BENCH_CACHE`` (default /tmp/neusym_bench_cache).

For each size and configuration: upsert points/s (what publish pays per new point), HNSW/optimizer
time, disk, the cost of copying the shard (each publish copies the previous version's), then, in a
fresh process, reopen time, RSS after opening and after the queries, and p50/p95 engine time of
RetrieveFromVectorstore (dense and BM25; table/column filter only, + paper_id filter, a small column)
for 60 real questions, plus the end-to-end search time with query encoding. Query encoding p50/p95
is measured separately with two CPU-bound processes running.

Configurations: ``default`` = the project's CELL_SCHEMA (HNSW m=16/ef=100 on the dense vectors, an
int8 quantized copy; vectors, graph, sparse and payload indexes memory-mapped and read on demand);
``in-ram`` = the same with the indexes and the int8 copy read into RAM at open; ``exact`` = the
default without HNSW (exact scans).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CACHE = Path(os.environ.get("NEUSYM_BENCH_CACHE", "/tmp/neusym_bench_cache"))
SHARED = REPO.parent / "shared" / "corpus"
NS = uuid.UUID("5ca1ab1e-0000-5000-8000-000000000000")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def hwm_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# ------------------------------------------------------------------------------------ source cells
def source_cells() -> dict:
    """Real cells with their vectors: {"payloads": [...], "dense": (M,384), "sparse": [(idx, val)]}."""
    import numpy as np

    path = CACHE / "scale_source.npz"
    meta = CACHE / "scale_source.json"
    if path.exists() and meta.exists():
        z = np.load(path, allow_pickle=True)
        return {"payloads": json.loads(meta.read_text()), "dense": z["dense"], "indices": list(z["indices"]),
                "values": list(z["values"])}
    from neusym.ingest.pipeline import ingest
    from neusym.settings import Settings
    from neusym.store.versions import open_version

    CACHE.mkdir(parents=True, exist_ok=True)
    payloads, dense, indices, values = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(home=Path(tmp) / "home", parse_backend="pymupdf")
        files = sorted((SHARED / "acl").glob("*.xml"))
        crawl = [{"source": "acl", "paths": [str(f) for f in files]}]
        ingest([SHARED / "pdfs"], settings, crawl_specs=crawl, download=False)
        with open_version(settings) as v:
            for rec in v.cells.scroll(payload=True, vectors=True, batch=2048):
                if rec.vectors.get("minilm") is None:
                    continue
                payloads.append({k: rec.payload.get(k) for k in ("text", "table_name", "column_name", "page_number")})
                dense.append(rec.vectors["minilm"])
                sp = rec.vectors.get("bm25") or ([], [])
                indices.append(np.asarray(sp[0], dtype=np.uint32))
                values.append(np.asarray(sp[1], dtype=np.float32))
    arr_i = np.empty(len(indices), dtype=object)
    arr_i[:] = indices
    arr_v = np.empty(len(values), dtype=object)
    arr_v[:] = values
    np.savez(path, dense=np.asarray(dense, dtype=np.float32), indices=arr_i, values=arr_v)
    meta.write_text(json.dumps(payloads))
    return {"payloads": payloads, "dense": np.asarray(dense, dtype=np.float32), "indices": indices, "values": values}


def questions() -> list[str]:
    qs = [json.loads(line)["question"] for line in (REPO / "benchmarks/paper_search/questions.jsonl").open()][:40]
    qs += [json.loads(line)["question"] for line in (REPO / "benchmarks/airqa_dev/questions.jsonl").open()][:20]
    return qs


# ------------------------------------------------------------------------------------------ build
def build(path: Path, n: int, schema, src: dict) -> dict:
    import numpy as np

    from neusym.store.vectors import EdgeBackend, Point

    rng = np.random.default_rng(0)
    m = len(src["payloads"])
    backend = EdgeBackend(path)
    backend.create(schema)
    t0 = time.perf_counter()
    batch = 2048
    for start in range(0, n, batch):
        count = min(batch, n - start)
        picks = (np.arange(start, start + count) * 7919) % m  # cycle through the sources in a scattered order
        noise = rng.normal(0, 0.02, size=(count, 384)).astype(np.float32)
        vecs = src["dense"][picks] + noise
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        points = []
        for j, k in enumerate(picks):
            i = start + j
            p = src["payloads"][k]
            paper = str(uuid.uuid5(NS, f"paper:{i // 250}"))
            pk = str(uuid.uuid5(NS, f"pk:{i}"))
            payload = {"text": p["text"], "table_name": p["table_name"], "column_name": p["column_name"],
                       "primary_key": pk, "paper_id": paper, "page_number": p["page_number"],
                       "text_sha": "0" * 40, "encoder_version": "bench"}
            points.append(Point(str(uuid.uuid5(NS, f"point:{i}")),
                                {"minilm": vecs[j].tolist(),
                                 "bm25": (src["indices"][k].tolist(), src["values"][k].tolist())}, payload))
        backend.upsert(points)
    upsert_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    backend.flush()
    flush_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    backend.optimize()
    optimize_s = time.perf_counter() - t2
    info = backend.info()
    backend.close()
    return {"points": n, "upsert_s": round(upsert_s, 1), "upsert_points_per_s": round(n / upsert_s),
            "flush_s": round(flush_s, 1), "optimize_s": round(optimize_s, 1), "segments": info["segments"],
            "indexed_vectors": info["indexed_vectors"]}


_QUERY_SCRIPT = r"""
import json, sys, time, uuid
from pathlib import Path
sys.path.insert(0, sys.argv[3])
def rss():
    return {k: int(v.split()[0]) / 1024 for k, v in (l.split(":", 1) for l in open("/proc/self/status")) if k in ("VmRSS", "VmHWM")}
before = rss()
from neusym.store.vectors import EdgeBackend, Filter, Match, QuerySpec
from neusym.encode import bm25_query_vector, encode_query
from neusym.settings import Settings
path, n = Path(sys.argv[1]), int(sys.argv[2])
qs = json.loads(sys.argv[4])
settings = Settings()
encode_query("warm up", settings=settings)
after_import = rss()
t0 = time.perf_counter(); be = EdgeBackend(path, read_only=True); reopen = time.perf_counter() - t0
after_open = rss()
NS = uuid.UUID("5ca1ab1e-0000-5000-8000-000000000000")
dense = [encode_query(q, settings=settings) for q in qs]
sparse = [bm25_query_vector(q) for q in qs]
papers = [str(uuid.uuid5(NS, f"paper:{(i * 7) % max(n // 250, 1)}")) for i in range(len(qs))]
def tc(t, c, p=None):
    return Filter.all(Match("table_name", t), Match("column_name", c), Match("paper_id", p) if p else None)
cases = {
  "dense chunks": ("minilm", dense, lambda i: tc("chunks", "text_content")),
  "dense chunks + paper_id": ("minilm", dense, lambda i: tc("chunks", "text_content", papers[i])),
  "dense metadata.abstract": ("minilm", dense, lambda i: tc("metadata", "abstract")),
  "bm25 chunks": ("bm25", sparse, lambda i: tc("chunks", "text_content")),
  "bm25 chunks + paper_id": ("bm25", sparse, lambda i: tc("chunks", "text_content", papers[i])),
  "bm25 metadata.abstract": ("bm25", sparse, lambda i: tc("metadata", "abstract")),
}
out = {"reopen_s": round(reopen, 3)}
for name, (using, vecs, flt) in cases.items():
    lat = []
    for rep in range(2):
        for i, v in enumerate(vecs):
            t = time.perf_counter()
            be.query([QuerySpec(using, v, flt(i), 5, with_payload=["text", "paper_id", "page_number"])])
            lat.append((time.perf_counter() - t) * 1000)
    lat = sorted(lat[len(vecs):])  # second round: caches warm, like a long-lived reader
    out[name] = {"p50_ms": round(lat[len(lat) // 2], 2), "p95_ms": round(lat[int(len(lat) * 0.95)], 2)}
from neusym.store.cells import CellSearch
cs = CellSearch(be, settings)
lat = []
for q in qs:
    t = time.perf_counter(); cs.search(q, "text_sentence_transformers_all_minilm_l6_v2", "chunks", "text_content", limit=5)
    lat.append((time.perf_counter() - t) * 1000)
lat.sort()
out["end_to_end dense chunks (encode + search)"] = {"p50_ms": round(lat[len(lat) // 2], 1), "p95_ms": round(lat[int(len(lat) * 0.95)], 1)}
end = rss()
out["rss_mb"] = {"process_before_imports": round(before["VmRSS"]), "after_imports_and_model": round(after_import["VmRSS"]),
                 "after_open": round(after_open["VmRSS"]), "after_queries": round(end["VmRSS"]), "peak": round(end["VmHWM"]),
                 "store_after_queries": round(end["VmRSS"] - after_import["VmRSS"])}
print(json.dumps(out))
"""


def query_bench(path: Path, n: int) -> dict:
    done = subprocess.run([sys.executable, "-c", _QUERY_SCRIPT, str(path), str(n), str(REPO), json.dumps(questions())],
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def encode_under_load(n: int = 200) -> dict:
    from neusym.encode import encode_query
    from neusym.settings import Settings

    settings = Settings()
    qs = questions()
    encode_query("warm up", settings=settings)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(1)
        lat = []
        for i in range(n):
            t = time.perf_counter()
            encode_query(qs[i % len(qs)], settings=settings)
            lat.append((time.perf_counter() - t) * 1000)
    finally:
        for b in burners:
            b.kill()
    return {"queries": n, "other_work": "2 CPU-bound processes on the 2 cores", "p50_ms": round(pct(lat, 0.5), 1),
            "p95_ms": round(pct(lat, 0.95), 1), "backend": settings.dense_backend}


def main() -> None:
    from neusym.store.cells import CELL_SCHEMA
    from neusym.store.versions import copy_tree

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--configs", default="default,in-ram,exact")
    ap.add_argument("--exact-max", type=int, default=100_000, help="largest size for the exact configuration")
    ap.add_argument("--workdir", type=Path, default=None, help="where shards are built (default a temp dir)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "scale.json")
    args = ap.parse_args()
    src = source_cells()
    configs = {"default": CELL_SCHEMA, "in-ram": replace(CELL_SCHEMA, indexes_on_disk=False),
               "exact": replace(CELL_SCHEMA, hnsw=None)}
    result: dict = {"source_cells": len(src["payloads"]),
                    "source": "cells of 26 PDFs in ../shared/corpus/pdfs + titles/abstracts of 4 ACL collections",
                    "schema_default": {"hnsw": "m=16, ef_construct=100", "int8": True, "vectors_on_disk": True,
                                       "indexes_on_disk": True},
                    "load_avg_at_start": os.getloadavg()[0], "runs": {}}
    result["query_encoding_under_load"] = encode_under_load()
    print(json.dumps(result["query_encoding_under_load"]), flush=True)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="neusym-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        for n in [int(x) for x in args.sizes.split(",")]:
            for name in args.configs.split(","):
                if name == "exact" and n > args.exact_max:
                    continue
                path = work / f"{name}-{n}"
                shutil.rmtree(path, ignore_errors=True)
                entry = build(path, n, configs[name], src)
                entry["disk_mb"] = int(subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True)
                                       .stdout.split()[0])
                t0 = time.perf_counter()
                copy_tree(path, work / "copy")
                entry["version_copy_s"] = round(time.perf_counter() - t0, 1)
                shutil.rmtree(work / "copy")
                entry.update(query_bench(path, n))
                result["runs"][f"{name} {n}"] = entry
                print(json.dumps({f"{name} {n}": entry}), flush=True)
                shutil.rmtree(path, ignore_errors=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    result["load_avg_at_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
