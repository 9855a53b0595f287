"""Ingest benchmark: pages/s per stage, rows per table, points per view, vector search latency.

Usage:  .venv/bin/python benchmarks/ingest_bench.py [PDF_OR_DIR ...] [--out benchmarks/results/ingest.json]
Default input: the bundled sample corpus (samples/pdfs). Runs in a fresh temporary NEUSYM_HOME
(cold: parse + encode + load + publish), then a second run over the same PDFs (warm: must be ~0 work),
then 50 searches per (collection, filter) on the embedded Qdrant.
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from neusym.encode import BM25_COLLECTION, DENSE_COLLECTION, dense_model  # noqa: E402
from neusym.pipeline import ingest  # noqa: E402
from neusym.settings import Settings  # noqa: E402
from neusym.vectorstore import VectorStore  # noqa: E402

QUERIES = [
    "How is the document embedding trained with citations?",
    "Which datasets are used for evaluation?",
    "popularity of entities in question answering",
    "human evaluation of faithfulness in long summaries",
    "decomposition of token representations in transformers",
    "knowledge graph of scientific literature entities",
    "What is the learning rate?",
    "limitations of the approach",
    "retrieval-augmented language models",
    "inter-annotator agreement",
]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="*", default=[str(REPO / "samples" / "pdfs")])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "ingest.json"))
    args = ap.parse_args()
    t = time.perf_counter()
    dense_model()
    model_load = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home))
        cold = ingest(args.paths, settings)
        warm = ingest(args.paths, settings)
        latencies: dict[str, dict[str, float]] = {}
        with VectorStore(settings) as store:
            paper = cold.parsed[0].paper_id
            for coll in (BM25_COLLECTION, DENSE_COLLECTION):
                for label, flt in (("no filter", ""), ("paper filter", f"paper_id == '{paper}'")):
                    times = []
                    for _ in range(5):
                        for q in QUERIES:
                            s = time.perf_counter()
                            store.search(q, coll, "chunks", "text_content", filter=flt, limit=5)
                            times.append((time.perf_counter() - s) * 1000)
                    latencies[f"{coll} / {label}"] = {"p50_ms": round(pct(times, 0.5), 1),
                                                      "p95_ms": round(pct(times, 0.95), 1)}
    cold_total = sum(cold.seconds.values())
    result = {
        "papers": len(cold.parsed),
        "pages": cold.pages,
        "dense_model_load_s": round(model_load, 2),
        "cold_seconds": {k: round(v, 2) for k, v in cold.seconds.items()},
        "cold_pages_per_s": round(cold.pages / cold_total, 2),
        "cold_pages_per_s_by_stage": {k: round(cold.pages / v, 1) for k, v in cold.seconds.items() if v > 0},
        "warm_seconds": {k: round(v, 2) for k, v in warm.seconds.items()},
        "warm_statuses": sorted({r.status for r in warm.parsed} | {e.status for e in warm.encoded}),
        "rows": cold.row_counts,
        "points": cold.publish.point_counts,
        "search_latency": latencies,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
