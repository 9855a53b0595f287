"""Enrichment throughput: figure OCR (figures/s) and LLM summaries (elements/min) on real sample papers.

Usage:  .venv/bin/python benchmarks/enrich_bench.py [PDF ...] [--budget-tokens 6000] [--out FILE.json]

Ingests the PDFs (default: the NAACL 2018 sample paper) into a fresh temporary NEUSYM_HOME, then
runs ``neusym.ingest.enrich.enrich`` twice: OCR of every figure, and summaries with the configured LLM
(default: the offline Qwen2.5-Coder-1.5B GGUF, files under <repo>/.neusym/models as for the demo)
within ``--budget-tokens``. Reports items done, seconds, figures/s, summaries/min, tokens/s, and
the summaries' kinds. The first summary includes loading the model (reported separately).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from neusym.llm.chat import LocalLlamaLLM, make_llm  # noqa: E402
from neusym.ingest.enrich import enrich  # noqa: E402
from neusym.ingest.pipeline import ingest  # noqa: E402
from neusym.settings import Settings  # noqa: E402

DEFAULT_PDF = REPO / "samples" / "pdfs" / "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pdfs", nargs="*", type=Path)
    ap.add_argument("--budget-tokens", type=int, default=6000)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    pdfs = args.pdfs or [DEFAULT_PDF]
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(home=Path(tmp))
        t0 = time.perf_counter()
        ingest(pdfs, settings)
        ingest_s = time.perf_counter() - t0
        ocr = enrich(settings, stages=("ocr",))
        ocr_items = sum(u.done for u in ocr.ocr_units)
        ocr_s = sum(u.seconds for u in ocr.ocr_units)
        if settings.llm_base_url:
            llm = make_llm(settings)
            load_s = 0.0
        else:
            llm = LocalLlamaLLM(settings.model_copy(update={"home": REPO / ".neusym"}))
            t0 = time.perf_counter()
            llm.load()
            load_s = time.perf_counter() - t0
        summ = enrich(settings, stages=("summaries",), llm=llm, budget_tokens=args.budget_tokens)
        done = sum(u.done for u in summ.summary_units)
        s = sum(u.seconds for u in summ.summary_units)
        prompt = sum(u.prompt_tokens for u in summ.summary_units)
        completion = sum(u.completion_tokens for u in summ.summary_units)
        import duckdb

        from neusym.store.versions import current_db

        con = duckdb.connect(str(current_db(settings)), read_only=True)
        kinds = dict(Counter(k for (k,) in con.execute("SELECT kind FROM enrichments").fetchall()))
        sample = con.execute("SELECT table_caption, table_summary FROM tables WHERE table_summary IS NOT NULL "
                             "LIMIT 1").fetchall()
        con.close()
    report = {
        "python": platform.python_version(), "pdfs": [p.name for p in pdfs], "ingest_s": round(ingest_s, 1),
        "ocr": {"figures": ocr_items, "seconds": round(ocr_s, 1),
                "figures_per_s": round(ocr_items / ocr_s, 2) if ocr_s else None},
        "summaries": {"model": settings.llm_base_url or "offline qwen2.5-coder-1.5b-instruct q4 (xllamacpp)",
                      "model_load_s": round(load_s, 1), "budget_tokens": args.budget_tokens, "done": done,
                      "failed": sum(u.failed for u in summ.summary_units), "seconds": round(s, 1),
                      "per_min": round(done / s * 60, 2) if s else None, "prompt_tokens": prompt,
                      "completion_tokens": completion, "pending_after": summ.pending_after},
        "enrichments_by_kind": kinds,
        "example_table_summary": sample[0] if sample else None,
    }
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
