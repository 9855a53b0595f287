"""Cost of the citation resolution (``neusym.ingest.citations.update_citation_links``) at conference scale.

Starts from a copy of a home's writer database holding crawled collections and parsed PDFs (e.g. the
benchmarks/citations home: 5,104 papers, 828 real references) and gives every crawled paper the real
references of a parsed one (``--per-paper`` of them, cycling through the 828), so the database holds a
conference's worth of references (5k papers x 40 = 200k). Measured:

1. the first resolution of everything (what a change of the rules costs);
2. a publish with nothing new (signatures compared only);
3. ``--arrive`` papers arriving: their metadata removed, resolved, then put back with their references —
   the nightly case, where the stored references are re-checked for the new titles.

    python benchmarks/citation_cost.py --db /tmp/citehome/corpus.duckdb --out benchmarks/results/citation_cost.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import duckdb  # noqa: E402

from neusym.ingest.citations import update_citation_links  # noqa: E402


def timed(con, **kw) -> dict:
    t = time.perf_counter()
    report = update_citation_links(con, **kw)
    return {**report.to_dict(), "wall_s": round(time.perf_counter() - t, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True, type=Path, help="a writer database (corpus.duckdb) to copy")
    ap.add_argument("--per-paper", type=int, default=40)
    ap.add_argument("--arrive", type=int, default=100)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corpus.duckdb"
        shutil.copy(args.db, path)
        con = duckdb.connect(str(path))
        real = con.execute("SELECT reference_content FROM reference ORDER BY ref_paper_id, ordinal").fetchall()
        crawled = [p for (p,) in con.execute(
            "SELECT paper_id::VARCHAR FROM metadata WHERE paper_id NOT IN (SELECT ref_paper_id FROM reference) "
            "ORDER BY paper_id").fetchall()]
        con.execute("CREATE TEMP TABLE fake (reference_id UUID, reference_content VARCHAR, ordinal INTEGER, "
                    "page_number INTEGER, ref_paper_id UUID)")
        rows = [(pid, i, real[(k * args.per_paper + i) % len(real)][0])
                for k, pid in enumerate(crawled) for i in range(args.per_paper)]
        import pyarrow as pa
        import uuid

        con.register("r", pa.table({"reference_id": [str(uuid.uuid5(uuid.NAMESPACE_URL, f"{p}:{i}")) for p, i, _ in rows],
                                    "reference_content": [t for _, _, t in rows], "ordinal": [i for _, i, _ in rows],
                                    "ref_paper_id": [p for p, _, _ in rows]}))
        con.execute("INSERT INTO reference (reference_id, reference_content, ordinal, page_number, ref_paper_id, "
                    "ref_page_id) SELECT reference_id::UUID, reference_content, ordinal, 1, ref_paper_id::UUID, "
                    "reference_id::UUID FROM r")
        con.unregister("r")
        papers = con.execute("SELECT count(*) FROM metadata").fetchone()[0]
        references = con.execute("SELECT count(*) FROM reference").fetchone()[0]
        full = timed(con, full=True)
        quiet = timed(con)
        arriving = crawled[: args.arrive]
        con.execute("CREATE TEMP TABLE kept_m AS SELECT * FROM metadata WHERE paper_id::VARCHAR IN (SELECT unnest(?))",
                    [arriving])
        con.execute("CREATE TEMP TABLE kept_r AS SELECT * FROM reference WHERE ref_paper_id::VARCHAR IN (SELECT unnest(?))",
                    [arriving])
        con.execute("DELETE FROM reference WHERE ref_paper_id::VARCHAR IN (SELECT unnest(?))", [arriving])
        con.execute("DELETE FROM metadata WHERE paper_id::VARCHAR IN (SELECT unnest(?))", [arriving])
        leave = timed(con)
        con.execute("INSERT INTO metadata SELECT * FROM kept_m")
        con.execute("INSERT INTO reference SELECT * FROM kept_r")
        arrive = timed(con)
        con.close()
    result = {"papers": papers, "references": references, "first_full_resolution": full,
              "publish_with_nothing_new": quiet, f"{args.arrive}_papers_leave": leave,
              f"{args.arrive}_papers_arrive": arrive,
              "note": "references of crawled papers are copies of the 828 real references of 17 parsed PDFs"}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
