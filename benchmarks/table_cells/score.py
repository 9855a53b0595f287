"""Cell extraction against hand-checked tables: how many printed numbers the ``table_cells`` relation
holds with the right value, row header and header path.

The ground truth (``truth_dev.jsonl``: tables of papers the project develops on; ``truth_test.jsonl``:
tables of other papers, only reported) was written by hand from rendered pages before the extractor
was scored on it, and checked against the page text by ``check_truth.py``. Each line is one table:
``{"pdf", "page", "label", "cells": [{"row", "column", "value", "text"}]}``.

A truth cell is matched within its stored table (``tables`` row of the paper whose PDF has that
sha256, on that page, caption starting with the label): names are compared after NFKD, lower case
and dropping everything but letters and digits ("Do˘gan" = "Doğan", "Acc. (↑)" = "acc"); values
within 1e-6 relative. Reported, over the truth cells:

- ``value``: some extracted cell of the table holds the value;
- ``value_column``: ... under the right header path; ``value_row``: ... with the right row header;
- ``cell``: one extracted cell has the value, the row header and the header path (the target);
- ``tables_found``: truth tables that have a stored table with cells.

Run (a home where the truth PDFs are ingested)::

    NEUSYM_HOME=... python benchmarks/table_cells/score.py \
        --truth benchmarks/table_cells/truth_dev.jsonl benchmarks/table_cells/truth_dev2.jsonl \
        --pdf-dir /work/shared/corpus/pdfs --out benchmarks/results/table_cells_dev.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import unicodedata
from pathlib import Path

import duckdb


def norm(text: str | None) -> str:
    """Letters and digits of ``text``, lower case, accents and marks dropped."""
    t = unicodedata.normalize("NFKD", text or "").lower()
    return "".join(ch for ch in t if ch.isalnum() and ch.isascii())


def same(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) <= 1e-6 * max(1.0, abs(b))


def count_cells(got: list[tuple[str, str, float | None]], truth_cells: list[dict]) -> tuple[dict, list[dict]]:
    """``(counts, misses)`` of one table: ``got`` are the extracted numeric cells as normalised (row
    header, header path, number); counts of ``cells``, ``value``, ``value_column``, ``value_row`` and
    ``cell`` (all three right) over ``truth_cells``; ``misses``: the first three truth cells not fully
    right, each with what was extracted for its value."""
    counts = {"cells": 0, "value": 0, "value_column": 0, "value_row": 0, "cell": 0}
    misses: list[dict] = []
    for cell in truth_cells:
        row, col, value = norm(cell["row"]), norm(cell["column"]), float(cell["value"])
        hits = [g for g in got if same(g[2], value)]
        counts["cells"] += 1
        counts["value"] += bool(hits)
        counts["value_column"] += any(g[1] == col for g in hits)
        counts["value_row"] += any(g[0] == row for g in hits)
        ok = any(g[0] == row and g[1] == col for g in hits)
        counts["cell"] += ok
        if not ok and len(misses) < 3:
            misses.append({"truth": [cell["row"], cell["column"], cell["value"]],
                           "got": [[r, c] for r, c, n in got if same(n, value)][:2]})
    return counts, misses


def stored_table(con: duckdb.DuckDBPyConnection, sha: str, page: int, label: str) -> str | None:
    m = re.match(r"table\s*(\w+)", label, re.I)
    rows = con.execute(
        "SELECT t.table_id::VARCHAR, t.table_caption FROM tables t JOIN metadata m ON m.paper_id = t.ref_paper_id "
        "WHERE m.pdf_sha256 = ? AND t.page_number = ? ORDER BY t.ordinal", [sha, page]).fetchall()
    for table_id, caption in rows:
        c = re.match(r"\s*table\s*(\w+)", caption or "", re.I)
        if c and m and c.group(1).lower() == m.group(1).lower():
            return table_id
    return None


def score(con: duckdb.DuckDBPyConnection, truth: list[dict], pdf_dir: Path) -> dict:
    totals = {"cells": 0, "value": 0, "value_column": 0, "value_row": 0, "cell": 0}
    tables_found = 0
    per_table = []
    for t in truth:
        sha = hashlib.sha256((pdf_dir / t["pdf"]).read_bytes()).hexdigest()
        table_id = stored_table(con, sha, t["page"], t["label"])
        cells = con.execute(
            "SELECT row_header, column_header_path, number FROM table_cells WHERE ref_table_id = ?::UUID "
            "AND number IS NOT NULL", [table_id]).fetchall() if table_id else []
        tables_found += bool(cells)
        counts, _ = count_cells([(norm(r), norm(c), n) for r, c, n in cells], t["cells"])
        for k in totals:
            totals[k] += counts[k]
        per_table.append({"pdf": t["pdf"], "page": t["page"], "label": t["label"], "stored": table_id is not None,
                          **counts})
    n = max(totals["cells"], 1)
    return {
        "tables": len(truth), "tables_found": tables_found, "papers": len({t["pdf"] for t in truth}),
        "numeric_cells": totals["cells"],
        **{f"{k}_accuracy": round(totals[k] / n, 4) for k in ("value", "value_column", "value_row", "cell")},
        "per_table": per_table,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--truth", required=True, type=Path, nargs="+", help="truth files, scored as one set")
    ap.add_argument("--pdf-dir", default=Path("/work/shared/corpus/pdfs"), type=Path)
    ap.add_argument("--db", type=Path, help="corpus database (default: the current version of $NEUSYM_HOME)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    truth = [json.loads(line) for path in args.truth for line in path.read_text(encoding="utf-8").splitlines()
             if line.strip()]
    if args.db:
        db = args.db
    else:
        from neusym.settings import get_settings
        from neusym.store.versions import current_db

        db = current_db(get_settings())
    con = duckdb.connect(str(db), read_only=True)
    result = {"truth": [str(p) for p in args.truth], **score(con, truth, args.pdf_dir)}
    summary = {k: v for k, v in result.items() if k != "per_table"}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
