#!/usr/bin/env python
"""What each correction of the combined table reading is worth: the ``combined`` source of
``sources.py`` scored with one correction turned off at a time (the function replaced, in this process
only), against the same truth. Reported per correction: full cells right with it, without it, and the
difference (cells it fixes; negative when it costs cells).

Usage::

    python benchmarks/table_cells/ablation.py --truth benchmarks/table_cells/truth_test.jsonl [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

import sources  # noqa: E402


def corrections() -> dict:
    """name -> (module, attribute, replacement)."""
    from neusym.ingest.parse import cells, tables

    return {
        "merged body rows split at their text lines": (tables, "_split_merged_rows", lambda c: c),
        "group labels of the band between rules": (tables, "_band_labels", lambda page, box, c: c),
        "prose and other floats' captions trimmed from the region": (tables, "trim_prose", lambda page, box: box),
        "dividers prefix labels that repeat under them": (cells, "_divider_prefixes", lambda data, labels: labels),
        "short numbers or sizes beside repeated labels name rows": (cells, "_key_columns", lambda data, lead: lead),
        "spreads printed under their values joined": (cells, "_join_spread_rows", lambda data: data),
        "header blocks part-way down": (cells, "_header_block", lambda data, i, lead: None),
        "breve between numbers read as ±": (cells, "_BREVE_PLUS_MINUS", __import__("re").compile(r"(?!x)x")),
        "group labels printed centred on their rows": (tables, "centred_labels", lambda page, box, html: html),
    }


def full_cells(truth: list[dict], pdf_dir: Path, cache: Path) -> int:
    htmls = sources.candidates(truth, pdf_dir, cache, ["combined"])
    htmls.pop("_seconds")
    return sum(sources.score_html(htmls.get((t["pdf"], t["page"], t["label"]), {}).get("combined"), t)["cell"]
               for t in truth)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--truth", required=True, type=Path, nargs="+")
    ap.add_argument("--pdf-dir", default=Path("/work/shared/corpus/pdfs"), type=Path)
    ap.add_argument("--cache", default=Path("/tmp/neusym-table-sources"), type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    truth = [json.loads(line) for p in args.truth for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    total = sum(len(t["cells"]) for t in truth)
    base = full_cells(truth, args.pdf_dir, args.cache)
    out = {"truth": [str(p) for p in args.truth], "numeric_cells": total, "combined_full_cells": base,
           "corrections": {}}
    for name, (module, attr, off) in corrections().items():
        kept = getattr(module, attr)
        setattr(module, attr, off)
        try:
            without = full_cells(truth, args.pdf_dir, args.cache)
        finally:
            setattr(module, attr, kept)
        out["corrections"][name] = {"without": without, "cells_fixed": base - without}
        print(f"{base - without:+5d}  {name}", flush=True)
    print(json.dumps(out, indent=1))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
