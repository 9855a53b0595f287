"""ACL Anthology XML ingestion benchmark: papers/s of ``parse_acl_collection`` over whole collection files.

Usage:  .venv/bin/python benchmarks/acl_xml_bench.py [COLLECTION.xml ...] [--repeat 5] [--out FILE.json]
Default input: /work/shared/corpus/acl/2024.acl.xml when present, else the bundled fixture
tests/fixtures/acl/2024.acl.xml (the same real file, 1,031 papers). Each file is parsed ``--repeat``
times in this process (the first run included); the report gives the median and best wall time per
file, papers/s at the median, and how much of it is XML parsing alone (lxml) versus mapping to
SourcePaper records (markup rendering, BibTeX, pydantic validation).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lxml import etree  # noqa: E402

from neusym.ingest.sources.acl_source import parse_acl_collection  # noqa: E402

SHARED = Path("/work/shared/corpus/acl/2024.acl.xml")
FIXTURE = REPO / "tests" / "fixtures" / "acl" / "2024.acl.xml"


def bench(path: Path, repeat: int) -> dict:
    """Time ``repeat`` full parses of one collection file; returns a result dict (seconds, papers/s)."""
    full, raw = [], []
    papers = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        etree.parse(str(path))
        raw.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        papers = parse_acl_collection(path)
        full.append(time.perf_counter() - t0)
    median = statistics.median(full)
    return {
        "file": str(path),
        "bytes": path.stat().st_size,
        "papers": len(papers),
        "repeat": repeat,
        "median_s": round(median, 4),
        "best_s": round(min(full), 4),
        "papers_per_s_median": round(len(papers) / median, 1),
        "papers_per_s_best": round(len(papers) / min(full), 1),
        "lxml_parse_only_median_s": round(statistics.median(raw), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    args = ap.parse_args()
    files = args.files or [SHARED if SHARED.exists() else FIXTURE]
    results = [bench(f, args.repeat) for f in files]
    report = {"python": platform.python_version(), "machine": platform.machine(), "results": results}
    for r in results:
        print(f"{r['file']}: {r['papers']} papers, median {r['median_s']:.3f}s -> {r['papers_per_s_median']:.0f} papers/s "
              f"(best {r['papers_per_s_best']:.0f}/s; lxml parse alone {r['lxml_parse_only_median_s']:.3f}s)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
