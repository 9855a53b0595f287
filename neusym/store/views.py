"""Documented analyst views from ``sql/views/*.sql``, created by the materialize step.

Each file of ``sql/views/`` holds one ``CREATE OR REPLACE VIEW`` plus ``COMMENT ON VIEW`` and one
``COMMENT ON COLUMN`` per output column, so the views carry their documentation into the database
(``duckdb_views().comment``, ``duckdb_columns().comment``), into published snapshots and into
``neusym schema``. Files run in name order; running them again is a no-op apart from re-creating the
same views (idempotent).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from neusym.store.sqlfiles import sql_dir

VIEW_NAMES = ("papers_per_venue_year", "paper_overview", "author_paper", "element_search", "result_cells",
              "paper_citations", "cited_by")
"""The views defined by ``sql/views/``, in file order (the order used by the schema documentation)."""


def view_files() -> list[Path]:
    """The files of ``sql/views/`` in name order (the order :func:`create_views` runs them).

    Raises FileNotFoundError when the ``sql/`` directory cannot be located (see
    :func:`neusym.store.sqlfiles.sql_dir`); returns an empty list when ``sql/views/`` has no ``.sql`` file.
    """
    return sorted((sql_dir() / "views").glob("*.sql"))


def create_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Create or replace every view of ``sql/views/`` (with its comments) on the read-write ``con``.

    The views only reference the tables of ``sql/schema.sql``, so call it after
    :func:`neusym.ingest.materialize.create_schema`; it may run inside the caller's open transaction (DuckDB
    DDL is transactional, so a rollback also undoes it). Returns the names of the user views present
    afterwards (see :func:`list_views`). Raises duckdb.Error when a view file fails (e.g. a table is
    missing), leaving the caller's transaction to roll back.
    """
    for path in view_files():
        con.execute(path.read_text(encoding="utf-8"))
    return list_views(con)


def list_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Names of the user-defined views of the ``main`` schema: :data:`VIEW_NAMES` first, in that order,
    then any other view in name order (e.g. one an analyst added to ``sql/views/``)."""
    names = {
        r[0]
        for r in con.execute(
            "SELECT view_name FROM duckdb_views() "
            "WHERE NOT internal AND NOT temporary AND schema_name = 'main' AND database_name = current_database()"
        ).fetchall()
    }
    known = [v for v in VIEW_NAMES if v in names]
    return known + sorted(names - set(known))


__all__ = ["VIEW_NAMES", "create_views", "list_views", "view_files"]
