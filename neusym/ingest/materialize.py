"""Load staged papers into the writer's database (through :func:`neusym.store.db.writer`).

It binds the staged Parquet/JSON files of one run as temporary views (``staged_<table>``,
``staged_quarantine``) and runs the files of ``sql/materialize/`` in one transaction: a failure
rolls everything back, so the database holds either the previous state or the complete new one.
Readers see the result once :func:`neusym.ingest.publish.publish` has made it a corpus version.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from neusym.ingest.admission import admit
from neusym.records import TABLE_RECORDS
from neusym.settings import Settings
from neusym.store.sqlfiles import materialize_files, read_sql
from neusym.ingest.staging import arrow_schema, read_manifest, source_name
from neusym.store.db import writer
from neusym.store.views import create_views

PAPER_TABLES = tuple(TABLE_RECORDS)


@dataclass
class MaterializeReport:
    """What one materialize run loaded, and the table sizes after it."""

    papers_loaded: int = 0
    quarantined: int = 0
    row_counts: dict[str, int] = field(default_factory=dict)
    held: list[dict] = field(default_factory=list)
    """Staged PDFs not loaded (:mod:`neusym.ingest.admission`): ``{pdf_path, pdf_sha256, paper_id, reason}``."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time: ``materialize`` (the whole load) and ``table_cells`` (of which: reading the tables' grids)."""


def create_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Run ``sql/schema.sql`` (idempotent: CREATE IF NOT EXISTS + COMMENT ON)."""
    con.execute(read_sql("schema.sql"))


def _sql_list(paths: list[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def _empty_view(con: duckdb.DuckDBPyConnection, table: str) -> None:
    cols = ", ".join(f"NULL::{_duck_type(t)} AS {name}" for name, t in _fields(table))
    con.execute(f"CREATE OR REPLACE TEMP VIEW staged_{table} AS SELECT {cols} WHERE false")


def _fields(table: str):
    schema = arrow_schema(TABLE_RECORDS[table])
    return [(f.name, f.type) for f in schema]


def _duck_type(arrow_type) -> str:
    import pyarrow as pa

    if pa.types.is_list(arrow_type):
        return _duck_type(arrow_type.value_type) + "[]"
    return {"string": "VARCHAR", "int64": "BIGINT", "double": "DOUBLE", "bool": "BOOLEAN"}[str(arrow_type)]


def materialize(
    settings: Settings,
    parsed_dirs: list[Path],
    quarantine_files: list[Path],
    downloads: list[dict] | None = None,
    *,
    force: bool = False,
    new_versions: set[str] | frozenset[str] = frozenset(),
) -> MaterializeReport:
    """Load staged papers and quarantine records into ``settings.db_path`` in one transaction.

    ``parsed_dirs``: staging directories written by :func:`neusym.ingest.staging.stage_parsed`;
    ``quarantine_files``: JSON records written by :func:`neusym.ingest.staging.stage_quarantine`;
    ``downloads``: rows of the ``downloads`` table (download_url, ref_paper_id, pdf_sha256,
    pdf_path, bytes, fetched_at) for crawled PDFs parsed in this run. Papers not listed are left
    untouched. Before loading, :func:`neusym.ingest.admission.admit` holds back staged parses that would
    replace a stored paper with a copy that lost content (unless ``force``) or add a second paper
    for the same work; they get a ``quarantine`` row with the reason and are listed in
    ``report.held``; ``new_versions`` (sha256 of PDFs downloaded as a paper's new version) are exempt
    from the quality comparison. Raises duckdb.Error (after rolling back) on failure,
    :class:`neusym.errors.StagingError` naming a staged file that cannot be read, and
    :class:`neusym.store.db.WriterBusyError` when another writer holds the home.
    """
    start = time.perf_counter()
    with writer(settings) as con:
        admission = admit(con, parsed_dirs, force=force, new_versions=new_versions)
        dirs = admission.load
        for table in PAPER_TABLES:
            files = [d / f"{table}.parquet" for d in dirs]
            if files:
                con.execute(
                    f"CREATE OR REPLACE TEMP VIEW staged_{table} AS "
                    f"SELECT * FROM read_parquet({_sql_list(files)}, union_by_name = true)"
                )
            else:
                _empty_view(con, table)
        records = [json.loads(Path(p).read_text(encoding="utf-8")) for p in quarantine_files]
        now = datetime.now(timezone.utc).replace(tzinfo=None).isoformat()
        records += [{"pdf_sha256": h.pdf_sha256, "pdf_path": h.pdf_path, "reason": h.reason, "quarantined_at": now}
                    for h in admission.held]
        con.execute(
            "CREATE OR REPLACE TEMP TABLE staged_quarantine "
            "(pdf_sha256 VARCHAR, pdf_path VARCHAR, reason VARCHAR, quarantined_at VARCHAR)"
        )
        if records:
            con.executemany(
                "INSERT INTO staged_quarantine VALUES (?, ?, ?, ?)",
                [[r["pdf_sha256"], r["pdf_path"], r["reason"], r["quarantined_at"]] for r in records],
            )
        con.execute("CREATE OR REPLACE TEMP TABLE staged_sources (pdf_sha256 VARCHAR, source_name VARCHAR)")
        sources = [(m.get("pdf_sha256"), source_name(m)) for m in map(read_manifest, dirs) if m]
        if sources:
            con.executemany("INSERT INTO staged_sources VALUES (?, ?)", [list(r) for r in sources])
        con.execute(
            "CREATE OR REPLACE TEMP TABLE staged_downloads (download_url VARCHAR, ref_paper_id VARCHAR, "
            "pdf_sha256 VARCHAR, pdf_path VARCHAR, bytes BIGINT, fetched_at VARCHAR)"
        )
        if downloads:
            con.executemany(
                "INSERT INTO staged_downloads VALUES (?, ?, ?, ?, ?, ?)",
                [[d["download_url"], d["ref_paper_id"], d["pdf_sha256"], d["pdf_path"], d["bytes"], d["fetched_at"]]
                 for d in downloads],
            )
        t = time.perf_counter()
        stage_table_cells(con)
        cells_seconds = time.perf_counter() - t
        con.execute("BEGIN TRANSACTION")
        try:
            for path in materialize_files():
                con.execute(path.read_text(encoding="utf-8"))
            if admission.fingerprints:
                con.executemany(
                    "INSERT OR REPLACE INTO paper_fingerprints VALUES (?::UUID, ?, ?, ?)",
                    [[pid, sha, n, values] for pid, (sha, n, values) in admission.fingerprints.items()])
            con.execute("DELETE FROM paper_fingerprints WHERE paper_id NOT IN (SELECT paper_id FROM metadata)")
            create_views(con)
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        report = MaterializeReport(papers_loaded=len(dirs), quarantined=len(records), row_counts=row_counts(con),
                                   held=[vars(h) for h in admission.held])
    report.seconds = {"materialize": round(time.perf_counter() - start, 3), "table_cells": round(cells_seconds, 3)}
    return report


_CELL_COLUMNS = ("ref_table_id VARCHAR, row_index INTEGER, column_index INTEGER, row_header VARCHAR, "
                 "column_header_path VARCHAR, cell_text VARCHAR, number DOUBLE, plus_minus DOUBLE, unit VARCHAR, "
                 "marks VARCHAR, is_header BOOLEAN, ref_paper_id VARCHAR")


def stage_table_cells(con: duckdb.DuckDBPyConnection) -> int:
    """Create the temporary table ``staged_table_cells`` (what ``sql/materialize/15_table_cells.sql``
    loads): the cells (:func:`neusym.ingest.parse.cells.table_cells`) of every table in
    ``staged_tables`` and of every stored table with content but no cells yet that belongs to a paper
    not staged in this run (a database from before ``table_cells`` gets its cells on the next load).
    Needs the ``staged_tables`` / ``staged_metadata`` views. Returns the number of cells staged."""
    import pyarrow as pa

    from neusym.ingest.parse.cells import table_cells

    sources = con.execute(
        "SELECT table_id::VARCHAR, table_content, ref_paper_id::VARCHAR FROM staged_tables "
        "WHERE table_content IS NOT NULL "
        "UNION ALL "
        "SELECT t.table_id::VARCHAR, t.table_content, t.ref_paper_id::VARCHAR FROM tables t "
        "WHERE t.table_content IS NOT NULL "
        "  AND t.ref_paper_id NOT IN (SELECT paper_id::UUID FROM staged_metadata) "
        "  AND NOT EXISTS (SELECT 1 FROM table_cells c WHERE c.ref_table_id = t.table_id)"
    ).fetchall()
    rows = [(table_id, c.row_index, c.column_index, c.row_header, c.column_header_path, c.text, c.number,
             c.plus_minus, c.unit, c.marks, c.is_header, paper_id)
            for table_id, html, paper_id in sources for c in table_cells(html)]
    con.execute(f"CREATE OR REPLACE TEMP TABLE staged_table_cells ({_CELL_COLUMNS})")
    if rows:
        names = [column.split()[0] for column in _CELL_COLUMNS.split(", ")]
        staged = pa.table(dict(zip(names, map(list, zip(*rows)))))  # noqa: F841 - read by the INSERT below
        con.execute("INSERT INTO staged_table_cells SELECT * FROM staged")
    return len(rows)


def row_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rows per table: the eight NeuSym tables plus quarantine, provenance, crawl_state and downloads."""
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in (*PAPER_TABLES, "quarantine", "provenance", "crawl_state", "downloads")}
