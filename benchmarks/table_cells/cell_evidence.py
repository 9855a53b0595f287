#!/usr/bin/env python
"""Model-free check of cell-level evidence for table questions: is the gold cell among the first k
cells of its paper retrieved for the question?

For every table item of a question set whose answer holds a number and whose evidence quotes the
table row (``evidence.jsonl``: pdf, page, quote), the gold cell is the ``table_cells`` cell of that
paper and page whose number is the answer's and whose row header's words are in the quoted row. The
paper's numeric cells are ranked by BM25 (the project's BM25 analyzer,
:func:`neusym.encode.bm25_tokens`, k1 1.2, b 0.75) of the question against "table label, row header,
header path"; reported: items with a gold cell found, and recall@1/5/10 of the gold cell. Run on an
ingested home holding the set's papers (``--db`` or ``$NEUSYM_HOME``), before and after a parser
change.

    python benchmarks/table_cells/cell_evidence.py --questions benchmarks/airqa_tables/questions.jsonl \\
        --evidence benchmarks/airqa_tables/evidence.jsonl --pdf-dir /work/shared/corpus/pdfs --db DB
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE))

from score import norm, same  # noqa: E402


def first_number(answer) -> float | None:
    if isinstance(answer, bool):
        return None
    if isinstance(answer, (int, float)):
        return float(answer)
    if isinstance(answer, list):
        for a in answer:
            n = first_number(a)
            if n is not None:
                return n
    return None


def bm25_rank(query: list[str], docs: list[list[str]], k1: float = 1.2, b: float = 0.75) -> list[int]:
    n = len(docs)
    avg = sum(len(d) for d in docs) / max(n, 1)
    df = Counter(t for d in docs for t in set(d))
    scores = []
    for i, d in enumerate(docs):
        tf = Counter(d)
        s = 0.0
        for t in set(query):
            if t in tf:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * len(d) / max(avg, 1e-9)))
        scores.append((s, -i))
    return [-i for _, i in sorted(scores, reverse=True)]


def main(argv: list[str] | None = None) -> int:
    from neusym.encode import bm25_tokens

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", required=True, type=Path, nargs="+")
    ap.add_argument("--evidence", required=True, type=Path, nargs="+")
    ap.add_argument("--pdf-dir", default=Path("/work/shared/corpus/pdfs"), type=Path)
    ap.add_argument("--db", required=True, type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    questions = {q["uuid"]: q for p in args.questions for q in map(json.loads, p.read_text().splitlines()) if q}
    evidence = {e["uuid"]: e for p in args.evidence for e in map(json.loads, p.read_text().splitlines()) if e}
    con = duckdb.connect(str(args.db), read_only=True)
    items = found = 0
    hits = {1: 0, 5: 0, 10: 0}
    per_item = []
    for uuid, q in questions.items():
        if "table" not in q.get("tags", []) or uuid not in evidence:
            continue
        e = evidence[uuid]
        value = first_number(e.get("answer"))
        quotes = [ev for ev in e.get("evidence", []) if ev.get("quote")]
        if value is None or not quotes:
            continue
        pdf = quotes[0]["pdf"]
        path = args.pdf_dir / pdf
        if not path.exists():
            continue
        items += 1
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        rows = con.execute(
            "SELECT c.row_header, c.column_header_path, c.number, t.page_number, t.table_caption FROM table_cells c "
            "JOIN tables t ON t.table_id = c.ref_table_id JOIN metadata m ON m.paper_id = t.ref_paper_id "
            "WHERE m.pdf_sha256 = ? AND c.number IS NOT NULL AND NOT c.is_header", [sha]).fetchall()
        quoted = {(ev["page"], norm(ev["quote"])) for ev in quotes}
        gold = {i for i, (rh, _, n, page, _) in enumerate(rows)
                if same(n, value) and rh and any(page == p and norm(rh) and norm(rh) in text for p, text in quoted)}
        label = lambda cap: (re.match(r"\s*(table\s*\w+)", cap or "", re.I) or [None, ""])[1]  # noqa: E731
        docs = [bm25_tokens(f"{label(cap)} {rh or ''} {ch or ''}") for rh, ch, _, _, cap in rows]
        rank = None
        if gold:
            found += 1
            order = bm25_rank(bm25_tokens(q["question"]), docs)
            rank = next(r for r, i in enumerate(order, start=1) if i in gold)
            for k in hits:
                hits[k] += rank <= k
        per_item.append({"uuid": uuid, "pdf": pdf, "gold_cells": len(gold), "rank": rank})
    out = {"db": str(args.db), "items": items, "gold_cell_found": found,
           **{f"recall@{k}": round(v / max(items, 1), 4) for k, v in hits.items()}, "per_item": per_item}
    print(json.dumps({k: v for k, v in out.items() if k != "per_item"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
