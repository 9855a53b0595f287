"""Dense encoding speed by batch size and thread count, on the cell texts of real papers.

Usage:  .venv/bin/python benchmarks/encode_batch.py [PDF ...] [--sizes 1,2,4,8,16,32] [--rounds 2]
        [--out benchmarks/results/encode_batch.json]

The PDFs (default: the eight papers of ``benchmarks/ingest_bench.py`` from ``../shared/corpus/pdfs``,
else ``samples/pdfs``) are parsed with default settings into a temporary home; the texts are every
encodable cell the encode stage runs through the model (chunks, captions, table contents, references,
titles, ...; not the page/section cells, whose vectors are means of their chunks). For each backend in
``--backends``, thread count (1, 2) and batch size, the texts are encoded ``--rounds`` times in this
process; reported: wall seconds, CPU seconds (``time.process_time``) and texts per second (best
round), the minimum cosine between each text's vector and its vector at the first size, and the
mean / minimum cosine to the same model in full precision (sentence-transformers on torch, batch 32).

``NEUSYM_DENSE_BATCH_SIZE`` 0 (the default) picks ``neusym.encode.BACKEND_BATCH_SIZE`` from this.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def cell_texts(pdfs: list[Path], home: Path) -> list[str]:
    """The texts the encode stage sends through the model for these PDFs (parsed into ``home``)."""
    from neusym.encode import DERIVED_DENSE, encodable_cells
    from neusym.ingest.pipeline import parse_stage
    from neusym.records import TABLE_RECORDS
    from neusym.settings import Settings
    from neusym.ingest.staging import load_parsed_table

    settings = Settings(home=home)
    texts: list[str] = []
    for pdf in pdfs:
        parsed = parse_stage(str(pdf), settings)
        if not parsed.staged_dir:
            raise SystemExit(f"{pdf}: not parsed ({parsed.status}: {parsed.reason})")
        rows = {t: load_parsed_table(Path(parsed.staged_dir), t) for t in TABLE_RECORDS}
        texts += [c.text for c in encodable_cells(rows) if (c.table_name, c.column_name) not in DERIVED_DENSE]
    return texts


def main() -> None:
    import numpy as np
    from ingest_bench import DEFAULT, SHARED_PDFS

    from neusym.encode import DenseEncoder

    ap = argparse.ArgumentParser()
    ap.add_argument("pdfs", nargs="*")
    ap.add_argument("--sizes", default="1,2,4,8,16,32")
    ap.add_argument("--backends", default="onnx-int8")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "encode_batch.json")
    args = ap.parse_args()
    if args.pdfs:
        pdfs = [Path(p) for p in args.pdfs]
    elif all((SHARED_PDFS / n).is_file() for n in DEFAULT):
        pdfs = [SHARED_PDFS / n for n in DEFAULT]
    else:
        pdfs = sorted((REPO / "samples" / "pdfs").glob("*.pdf"))
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="neusym-encode-batch-") as tmp:
        texts = cell_texts(pdfs, Path(tmp) / "home")
        models = Path(os.environ.get("NEUSYM_CACHE_DIR", Path.home() / ".cache" / "neusym")) / "models"
        torch_enc = DenseEncoder("torch", models)
        exact = torch_enc._encode_uncached(texts, 32)
        results = []
        for backend in args.backends.split(","):
            for threads in (1, 2):
                enc = DenseEncoder(backend, models, threads=threads)
                enc.encode(["warm up"], batch_size=1)
                reference = None
                for size in sizes:
                    best = None
                    for _ in range(args.rounds):
                        c0, t0 = time.process_time(), time.perf_counter()
                        vectors = enc._encode_uncached(texts, size)
                        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                        if best is None or wall < best[0]:
                            best = (wall, cpu)
                    if reference is None:
                        reference = vectors
                    cos = float(np.min(np.sum(reference * vectors, axis=1)))
                    to_torch = np.sum(exact * vectors, axis=1)
                    row = {"backend": backend, "threads": threads, "batch_size": size, "wall_s": round(best[0], 2),
                           "cpu_s": round(best[1], 2), "texts_per_s": round(len(texts) / best[0], 1),
                           "min_cos_to_first_size": round(cos, 4), "mean_cos_to_torch": round(float(to_torch.mean()), 4),
                           "min_cos_to_torch": round(float(to_torch.min()), 4)}
                    print(json.dumps(row), flush=True)
                    results.append(row)
    out = {"pdfs": [p.name for p in pdfs], "texts": len(texts), "rounds": args.rounds,
           "load_avg": list(os.getloadavg()), "results": results}
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
