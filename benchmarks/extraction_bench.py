"""Extraction quality and throughput of the parse backends on the real corpus.

Usage (2 shared cores: run it niced)::

    export NEUSYM_HOME=/tmp/bench-home HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    nice -n 10 .venv/bin/python benchmarks/extraction_bench.py \\
        [--pdf-dir ../shared/corpus/pdfs] [--backends pymupdf,layout] [--only GLOB] \\
        [--out benchmarks/results/extraction.json]

Per paper of ``--pdf-dir`` (default ``../shared/corpus/pdfs``; the benchmark exits cleanly with a
message when the folder is absent) and per backend:

- **printed captions** (ground truth, counted without the parser): distinct ``Table N`` /
  ``Figure N`` labels of raw PyMuPDF text lines (upright or rotated) that start with the label and
  a caption delimiter (``:`` ``.`` ``|``), where either text follows on the same line or the line
  opens its text block. This drops in-text mentions such as "... see Appendix\\nTable 6." (a
  sentence that ends with the label). The rule was checked by eye against the rendered papers
  (e.g. DarkBench prints Tables 1-5, its "Table 6." on page 14 is such a mention; RAG-vs-FT prints
  23 tables, as its MANIFEST entry says).
- **tables / figures found**: distinct labels of the parsed captions; recall = found ∩ printed /
  printed; ``with_bbox`` and ``with_html`` count rows that carry a region / HTML cells.
- **equations**: rows found (numbered / unnumbered) and, where counted by eye, the printed number.
- **references**: rows found, and the bibliography entries counted by eye where known
  (``REFERENCE_TRUTH``).
- **mineru** (``--backends ...,mineru --mineru-dir ~/.mineru/doclib/parsed``): the same measures
  (captions still come from PyMuPDF, so recall is the merged result; ``mineru_own_*`` is what
  MinerU labelled by itself) on MinerU's flash-tier output made beforehand by ``mineru parse PDF --tier flash --pages all``
  against a local MinerU 4.0.12 server (own virtualenv); ``--mineru-seconds`` adds the wall time
  of those MinerU runs as the stage ``mineru_flash_run``.
- **throughput**: seconds per parse stage (``neusym.ingest.parse.parse_pdf(timings=...)``) and pages/s
  per stage: document pages / stage seconds, and for the model stages also the pages the stage
  actually ran on.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

import pymupdf

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from neusym.ingest.parse import parse_pdf  # noqa: E402
from neusym.settings import Settings  # noqa: E402

CAPTION = re.compile(r"^\s*(Table|TABLE|Tab\.|Figure|FIGURE|Fig\.|FIG\.)\s*((?:[A-Z]\.?)?\d{1,3})\s*([:.|])(.*)$")
LABEL = re.compile(r"^\s*(?:Table|TABLE|Tab\.|Figure|FIGURE|Fig\.|FIG\.)\s*((?:[A-Z]\.?)?\d{1,3})")

# Bibliography entries counted by eye on the rendered reference pages (one number per paper).
REFERENCE_TRUTH = {
    "acl2020_2020.acl-main.207_SPECTER.pdf": 57,  # pages 9-11: 3 + 28 + 26
    "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf": 27,  # page 8: 14 + 13
    "arxiv2203.00274_TableFormer_acl2022.pdf": 21,  # page 9: 4; page 10: 9 left column + 8 right column
    "arxiv1912.10667_GetisOrdPooling_cvpr-style.pdf": 41,  # pages 9-10, numbered [1]..[41]
    "arxiv2005.11401_RAG_first3pages_NeuSymRAG-test_pdf.pdf": 0,  # 3-page excerpt, no bibliography
}
# Numbered display equations counted by eye (highest printed "(N)" with no gaps).
EQUATION_TRUTH = {
    "acl2020_2020.acl-main.207_SPECTER.pdf": 2,
    "acl2023_DecompX_acl-long.pdf": 16,
    "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf": 0,
}
MATH_HEAVY = {
    "arxiv1906.08632v2_SGD-two-layer-teacher-student.pdf",
    "acl2023_DecompX_acl-long.pdf",
    "arxiv2401.08417_CPO_icml-style.pdf",
    "arxiv2402.09353_DoRA_icml-style.pdf",
    "openreview_iclr-submission_Q-RAG.pdf",
    "aaai26_KnowledgeEnhancedHypergraphMedRec.pdf",
    "arxiv2203.00274_TableFormer_acl2022.pdf",
}


def _norm_label(num: str) -> str:
    return num.replace(".", "")


def printed_captions(pdf: Path) -> dict[str, set[str]]:
    """Distinct printed caption labels ``{"tables": {"1", "A1"...}, "figures": {...}}`` of a PDF,
    from raw PyMuPDF lines (see the module docstring); independent of :mod:`neusym.ingest.parse`."""
    out: dict[str, set[str]] = {"tables": set(), "figures": set()}
    with pymupdf.open(pdf) as doc:
        for page in doc:
            for block in page.get_text("dict", flags=0)["blocks"]:
                for i, line in enumerate(block.get("lines", [])):
                    text = "".join(s["text"] for s in line["spans"])
                    m = CAPTION.match(text)
                    if m and (m.group(4).strip() or i == 0):
                        kind = "tables" if m.group(1).lower().startswith("tab") else "figures"
                        out[kind].add(_norm_label(m.group(2)))
    return out


def _found(captions: list[str]) -> set[str]:
    labels = set()
    for c in captions:
        m = LABEL.match(c)
        if m:
            labels.add(_norm_label(m.group(1)))
    return labels


def bench_one(pdf: Path, backend: str, printed: dict[str, set[str]], mineru_dir: Path | None = None) -> dict:
    """Parse ``pdf`` with ``backend`` and compare with the printed captions; one result row."""
    timings: dict[str, float] = {}
    settings = Settings(parse_backend=backend, mineru_output_dir=mineru_dir)
    t0 = time.perf_counter()
    paper = parse_pdf(pdf, settings, timings=timings)
    total = time.perf_counter() - t0
    pages = len(paper.pages)
    tables = _found([t.table_caption for t in paper.tables])
    figures = _found([i.image_caption for i in paper.images])

    def recall(found: set[str], truth: set[str]) -> float | None:
        return round(len(found & truth) / len(truth), 3) if truth else None

    stages = {k: round(v, 3) for k, v in timings.items() if not k.startswith("pages_")}
    pages_per_s = {k: round(pages / v, 2) for k, v in stages.items() if v > 0}
    for stage, key in (("pymupdf4llm_tables", "pages_pymupdf4llm"), ("rapid_layout", "pages_rapid_layout")):
        if timings.get(stage):
            pages_per_s[stage + "_run_pages"] = round(timings[key] / timings[stage], 2)
    own: dict = {}
    if backend == "mineru":  # what MinerU found by itself (captions it labelled), before merging
        from neusym.ingest.parse.mineru import load_pages, mineru_elements, output_files

        m_floats, m_eqs = mineru_elements(load_pages(output_files(mineru_dir, paper.metadata.pdf_sha256, "flash")))
        m_tables = _found([f["label"] for f in m_floats if f["kind"] == "table" and f["label"]])
        m_figures = _found([f["label"] for f in m_floats if f["kind"] == "figure" and f["label"]])
        own = {
            "mineru_own_table_recall": recall(m_tables, printed["tables"]),
            "mineru_own_figure_recall": recall(m_figures, printed["figures"]),
            "mineru_own_tables_html": sum(1 for f in m_floats if f["kind"] == "table" and f["html"]),
            "mineru_own_equation_boxes": len(m_eqs),
        }
    row = {
        "paper": pdf.name,
        "backend": backend,
        "pages": pages,
        "tables_printed": len(printed["tables"]),
        "tables_found": len(tables & printed["tables"]),
        "tables_extra": sorted(tables - printed["tables"]),
        "tables_missed": sorted(printed["tables"] - tables),
        "table_recall": recall(tables, printed["tables"]),
        "tables_with_bbox": sum(1 for t in paper.tables if t.bounding_box),
        "tables_with_html": sum(1 for t in paper.tables if t.table_content),
        "figures_printed": len(printed["figures"]),
        "figures_found": len(figures & printed["figures"]),
        "figures_extra": sorted(figures - printed["figures"]),
        "figures_missed": sorted(printed["figures"] - figures),
        "figure_recall": recall(figures, printed["figures"]),
        "figures_with_bbox": sum(1 for i in paper.images if i.bounding_box),
        "equations_numbered": sum(1 for e in paper.equations if e.equation_number),
        "equations_unnumbered": sum(1 for e in paper.equations if not e.equation_number),
        "equations_truth": EQUATION_TRUTH.get(pdf.name),
        "math_heavy": pdf.name in MATH_HEAVY,
        "references_found": len(paper.reference),
        "references_truth": REFERENCE_TRUTH.get(pdf.name),
        "sections": len(paper.sections),
        "elements_with_section": {
            name: f"{sum(1 for r in rows if r.ref_section_id)}/{len(rows)}"
            for name, rows in (("tables", paper.tables), ("images", paper.images), ("equations", paper.equations),
                               ("reference", paper.reference), ("chunks", paper.chunks))
        },
        "seconds": round(total, 2),
        "stage_seconds": stages,
        "pages_per_s": pages_per_s,
        "stage_pages": {k: v for k, v in timings.items() if k.startswith("pages_")},
        **own,
    }
    return row


def summarize(rows: list[dict]) -> dict:
    """Corpus totals per backend: micro-averaged recalls, pages/s per stage."""
    out: dict[str, dict] = {}
    for backend in sorted({r["backend"] for r in rows}):
        rs = [r for r in rows if r["backend"] == backend]
        tp = sum(r["tables_printed"] for r in rs)
        fp = sum(r["figures_printed"] for r in rs)
        pages = sum(r["pages"] for r in rs)
        stage_total: dict[str, float] = {}
        for r in rs:
            for k, v in r["stage_seconds"].items():
                stage_total[k] = stage_total.get(k, 0.0) + v
        run_pages: dict[str, int] = {}
        for r in rs:
            for k, v in r["stage_pages"].items():
                run_pages[k] = run_pages.get(k, 0) + v
        seconds = sum(r["seconds"] for r in rs)
        out[backend] = {
            "papers": len(rs),
            "pages": pages,
            "table_recall": round(sum(r["tables_found"] for r in rs) / tp, 3) if tp else None,
            "figure_recall": round(sum(r["figures_found"] for r in rs) / fp, 3) if fp else None,
            "tables_printed": tp,
            "figures_printed": fp,
            "papers_table_recall_below_0.9": [r["paper"] for r in rs if (r["table_recall"] or 1) < 0.9],
            "papers_figure_recall_below_0.9": [r["paper"] for r in rs if (r["figure_recall"] or 1) < 0.9],
            "equations": sum(r["equations_numbered"] + r["equations_unnumbered"] for r in rs),
            "references": sum(r["references_found"] for r in rs),
            "seconds": round(seconds, 1),
            "pages_per_s": round(pages / seconds, 2) if seconds else None,
            "stage_seconds": {k: round(v, 1) for k, v in stage_total.items()},
            "stage_pages_per_s": {k: round(pages / v, 2) for k, v in stage_total.items() if v > 0},
            "stage_run_pages": run_pages,
        }
        if backend == "mineru":
            own_t = sum(round((r["mineru_own_table_recall"] or 0) * r["tables_printed"]) for r in rs)
            own_f = sum(round((r["mineru_own_figure_recall"] or 0) * r["figures_printed"]) for r in rs)
            out[backend]["mineru_own_table_recall"] = round(own_t / tp, 3) if tp else None
            out[backend]["mineru_own_figure_recall"] = round(own_f / fp, 3) if fp else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pdf-dir", type=Path, default=REPO.parent / "shared" / "corpus" / "pdfs")
    ap.add_argument("--backends", default="pymupdf,layout")
    ap.add_argument("--only", default="*", help="file-name glob of the papers to run")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "extraction.json")
    ap.add_argument("--mineru-dir", type=Path, default=None,
                    help="MinerU doclib folder (~/.mineru/doclib/parsed) for the mineru backend; papers without "
                    "output there are skipped for it")
    ap.add_argument("--mineru-seconds", type=Path, default=None,
                    help="optional log of MinerU wall seconds per PDF ('<file> rc=0 <seconds>' lines)")
    args = ap.parse_args(argv)
    if not args.pdf_dir.is_dir():
        print(f"skipped: corpus folder {args.pdf_dir} not found")
        return 0
    pdfs = sorted(p for p in args.pdf_dir.glob("*.pdf") if fnmatch.fnmatch(p.name, args.only))
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    mineru_seconds: dict[str, float] = {}
    if args.mineru_seconds and args.mineru_seconds.is_file():
        for line in args.mineru_seconds.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "rc=0":
                mineru_seconds[parts[0]] = round(float(parts[2]), 1)
    rows = []
    load_start = [round(x, 2) for x in os.getloadavg()]
    for pdf in pdfs:
        printed = printed_captions(pdf)
        for backend in backends:
            if backend == "mineru":
                from neusym.ingest.parse.mineru import output_files

                sha = hashlib.sha256(pdf.read_bytes()).hexdigest()
                if args.mineru_dir is None or not output_files(args.mineru_dir, sha, "flash"):
                    print(f"{pdf.name[:44]:44s} mineru   skipped: no MinerU output", flush=True)
                    continue
            row = bench_one(pdf, backend, printed, args.mineru_dir)
            if backend == "mineru" and pdf.name in mineru_seconds:
                row["stage_seconds"]["mineru_flash_run"] = mineru_seconds[pdf.name]
                row["pages_per_s"]["mineru_flash_run"] = round(row["pages"] / mineru_seconds[pdf.name], 2)
            rows.append(row)
            print(
                f"{pdf.name[:44]:44s} {backend:8s} pages {row['pages']:3d} "
                f"T {row['tables_found']}/{row['tables_printed']} F {row['figures_found']}/{row['figures_printed']} "
                f"eq {row['equations_numbered']}+{row['equations_unnumbered']} ref {row['references_found']}"
                f"{'/' + str(row['references_truth']) if row['references_truth'] is not None else ''} "
                f"{row['seconds']:.1f}s",
                flush=True,
            )
    result = {
        "command": "nice -n 10 .venv/bin/python benchmarks/extraction_bench.py " + " ".join(argv or sys.argv[1:]),
        "machine": "2 cores shared with other jobs, no GPU; timings scale with the load average",
        "load_average_1_5_15min": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "summary": summarize(rows),
        "papers": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
