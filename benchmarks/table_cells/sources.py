#!/usr/bin/env python
"""Cell extraction per grid source, scored against the hand-checked truth without a full ingest.

For every truth table this finds the table as the parse does (caption, region, the word grid of
:func:`neusym.ingest.parse.elements.table_html`, pymupdf4llm's tables of that page matched to it as
:func:`neusym.ingest.parse.layout.refine_with_layout` does, SLANet-1M on the table's box) and reads
each source's grid with :func:`neusym.ingest.parse.cells.table_cells`, scored as ``score.py`` scores the
stored ``table_cells`` (value, header path, row header, full cell). pymupdf4llm's output is cached
per PDF page (``--cache``), as it is the slow part (~0.3 s per page); the rest reruns in a minute.

Sources: ``words`` (the word grid / ruled-line finder), ``pymupdf4llm`` (its HTML when matched,
else words), ``shipped`` (the rule shipped before the structure model: pymupdf4llm unless the word
grid has 1.25x its cells), ``slanet`` (the model's grid on the shipped box) and ``combined``
(:func:`neusym.ingest.parse.tables.combine`, what the parse stores now).

Usage::

    python benchmarks/table_cells/sources.py --truth benchmarks/table_cells/truth_dev.jsonl ... \\
        [--sources words shipped slanet combined] [--out results.json] [--per-table]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

from score import count_cells, norm  # noqa: E402

SOURCES = ("words", "pymupdf4llm", "shipped", "slanet", "combined")


def table_floats(path: Path) -> tuple:
    """``(opened, [FloatDraft of every table])`` of one PDF as the parse finds them (regions, word grid)."""
    from neusym.ingest.parse import FloatDraft
    from neusym.ingest.parse.elements import find_captions, locate_floats, table_html
    from neusym.ingest.parse.pdf import body_font_size, find_furniture, open_pdf
    from neusym.ingest.parse.sections import detect_headings, toc_headings

    opened = open_pdf(path)
    pages = opened.pages
    body = body_font_size(pages)
    furniture = find_furniture(pages)
    headings = toc_headings(opened.doc, pages, body, furniture) or detect_headings(pages, body, furniture)
    captions = find_captions(pages, body, furniture)
    stops = {id(ln) for h in headings for ln in h.lines} | {id(ln) for c in captions for ln in c.lines}
    regions = locate_floats(captions, body, furniture, stops)
    floats = [FloatDraft(kind=c.kind, label=c.label, page=c.page.number, caption="", bbox=r,
                         html=table_html(c.page, r) if r and not c.rotated else None, anchor=c.lines[0])
              for c, r in zip(captions, regions) if c.kind == "table"]
    return opened, floats


def p4l_tables(path: Path, pages: list[int], cache: Path) -> dict[int, list]:
    from neusym.ingest.parse.layout import html_tables

    file = cache / f"{path.stem}.json"
    known = json.loads(file.read_text()) if file.exists() else {}
    todo = [p for p in pages if str(p) not in known]
    if todo:
        found = html_tables(path.read_bytes(), todo)
        for p in todo:
            known[str(p)] = [[list(b), h] for b, h in found.get(p, [])]
        cache.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(known))
    return {int(p): [(tuple(b), h) for b, h in v] for p, v in known.items()}


def candidates(truth: list[dict], pdf_dir: Path, cache: Path, sources: list[str]) -> dict:
    """``{(pdf, page, label): {source: html}}`` for every truth table (sources the parse found)."""
    from neusym.ingest.parse.layout import html_cell_count, match_box

    out: dict = {}
    timing = {s: 0.0 for s in sources}
    by_pdf: dict[str, list[dict]] = {}
    for t in truth:
        by_pdf.setdefault(t["pdf"], []).append(t)
    for pdf, tables in by_pdf.items():
        opened, floats = table_floats(pdf_dir / pdf)
        try:
            found = p4l_tables(pdf_dir / pdf, sorted({f.page for f in floats}), cache)
            chosen: dict[int, tuple] = {}  # id(float) -> (box, html) of the matched pymupdf4llm table
            for number in sorted({f.page for f in floats}):
                cands = found.get(number, [])
                used: set[int] = set()
                for f in (f for f in floats if f.page == number):
                    cap = f.anchor.bbox if f.anchor is not None else None
                    i = match_box(f.bbox, cap, [b for b, _ in cands], used)
                    if i is not None:
                        used.add(i)
                        chosen[id(f)] = cands[i]
            for t in tables:
                f = next((f for f in floats if f.page == t["page"] and f.label.lower() == t["label"].lower()), None)
                htmls: dict[str, str | None] = {}
                if f is None:
                    out[(pdf, t["page"], t["label"])] = htmls
                    continue
                page = opened.pages[f.page - 1]
                p4l = chosen.get(id(f))
                shipped_box, shipped = f.bbox, f.html
                if p4l is not None and (f.html is None or html_cell_count(p4l[1]) * 1.25 >= html_cell_count(f.html)):
                    shipped_box, shipped = p4l
                for s in sources:
                    tick = time.perf_counter()
                    if s == "words":
                        htmls[s] = f.html
                    elif s == "pymupdf4llm":
                        htmls[s] = p4l[1] if p4l is not None else f.html
                    elif s == "shipped":
                        htmls[s] = shipped
                    elif s == "slanet":
                        from neusym.ingest.parse.structure import grid_html, model_grid, structure_model, words_in

                        model = structure_model()
                        cells = model.predict(page._page, shipped_box) if model and shipped_box else None
                        htmls[s] = grid_html(model_grid(words_in(page.words(), shipped_box), cells)) if cells else None
                    elif s == "combined":
                        from neusym.ingest.parse.tables import combine

                        htmls[s] = combine(page, f.bbox, f.html, p4l).html
                    timing[s] += time.perf_counter() - tick
                out[(pdf, t["page"], t["label"])] = htmls
        finally:
            opened.doc.close()
    out["_seconds"] = timing
    return out


def score_html(html: str | None, t: dict) -> dict:
    from neusym.ingest.parse.cells import table_cells

    got = [(norm(c.row_header), norm(c.column_header_path), c.number) for c in table_cells(html) if c.number is not None
           and not c.is_header]
    counts, misses = count_cells(got, t["cells"])
    counts["misses"] = misses
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--truth", required=True, type=Path, nargs="+")
    ap.add_argument("--pdf-dir", default=Path("/work/shared/corpus/pdfs"), type=Path)
    ap.add_argument("--cache", default=Path("/tmp/neusym-table-sources"), type=Path)
    ap.add_argument("--sources", nargs="+", default=list(SOURCES), choices=SOURCES)
    ap.add_argument("--per-table", action="store_true", help="print every table's scores")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    truth = [json.loads(line) for p in args.truth for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    htmls = candidates(truth, args.pdf_dir, args.cache, args.sources)
    seconds = htmls.pop("_seconds")
    result: dict = {"truth": [str(p) for p in args.truth], "tables": len(truth),
                    "papers": len({t["pdf"] for t in truth}), "numeric_cells": sum(len(t["cells"]) for t in truth),
                    "sources": {}}
    per_table = []
    for s in args.sources:
        total = {"cells": 0, "value": 0, "value_column": 0, "value_row": 0, "cell": 0}
        for t in truth:
            c = score_html(htmls.get((t["pdf"], t["page"], t["label"]), {}).get(s), t)
            for k in total:
                total[k] += c[k]
            per_table.append({"source": s, "pdf": t["pdf"], "page": t["page"], "label": t["label"],
                              "layouts": t.get("layouts"), **c})
        n = max(total["cells"], 1)
        result["sources"][s] = {f"{k}_accuracy": round(total[k] / n, 4) for k in ("value", "value_column",
                                                                                   "value_row", "cell")}
        result["sources"][s]["seconds_per_table"] = round(seconds.get(s, 0.0) / max(len(truth), 1), 4)
    print(json.dumps(result, indent=1))
    if args.per_table:
        for r in per_table:
            if r["cell"] < r["cells"]:
                print(f"{r['source']:9s} {r['cell']:4d}/{r['cells']:<4d} {r['pdf'][:38]:38s} p{r['page']} {r['label']:9s} "
                      f"{r['misses'][:1]}")
    if args.out:
        result["per_table"] = per_table
        args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
