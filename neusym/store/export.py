"""Export the corpus tables and views as Parquet files, for teams on other engines (Spark, pandas, BI).

``neusym export parquet DIR`` calls :func:`export_parquet` on the published snapshot (never on the
writer's file), so an export can run at any time, concurrently with the nightly refresh.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from neusym.store.schema import AGENT_TABLES
from neusym.store.db import connect_for_export
from neusym.store.views import list_views

EXPORT_TABLES = (*AGENT_TABLES, "quarantine")
"""The tables exported first, in this order (any other table of the ``main`` schema follows)."""


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def export_objects(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Names of the relations :func:`export_parquet` writes: the tables of :data:`EXPORT_TABLES` present,
    then other tables of the ``main`` schema (name order), then the views (see
    :func:`neusym.store.views.list_views`)."""
    tables = {
        r[0]
        for r in con.execute(
            "SELECT table_name FROM duckdb_tables() "
            "WHERE schema_name = 'main' AND NOT temporary AND database_name = current_database()"
        ).fetchall()
    }
    ordered = [t for t in EXPORT_TABLES if t in tables] + sorted(tables - set(EXPORT_TABLES))
    return ordered + list_views(con)


def export_parquet(db_path: Path | str, out_dir: Path | str, *, uuid_as_string: bool = True) -> dict[str, int]:
    """Write every table and view of ``db_path`` to ``<out_dir>/<name>.parquet``; return rows per name.

    ``db_path``: a DuckDB corpus file, normally the current version's
    (:func:`neusym.store.versions.current_db`); it is opened read-only. ``out_dir`` is created if
    needed. Each file is written by DuckDB (``COPY (SELECT ...) TO ... (FORMAT parquet)``, snappy
    compression) under a temporary name in ``out_dir`` and renamed over ``<name>.parquet``, so
    re-running overwrites atomically and a reader never sees a partial file. Column names and order
    are those of the database. ``uuid_as_string`` (default True) writes UUID columns as their
    36-character text form, because several engines (e.g. Spark) cannot read Parquet's UUID type;
    pass False to keep Parquet UUID (16-byte fixed binary). Lists stay Parquet lists.

    Returns ``{name: rows written}`` for the 8 NeuSym tables, ``quarantine`` and every view, in
    :func:`export_objects` order. Raises :class:`neusym.store.db.DatabaseUnavailableError` when
    ``db_path`` is missing or cannot be opened (e.g. a writer holds it), duckdb.Error or OSError when
    a file cannot be written (the temporary file is removed, earlier files stay written).
    """
    db_path = Path(db_path)
    out_dir = Path(out_dir)
    con = connect_for_export(db_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    try:
        for name in export_objects(con):
            columns = con.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' "
                "AND table_name = ? AND database_name = current_database() ORDER BY column_index",
                [name],
            ).fetchall()
            select = ", ".join(
                f"CAST({_ident(c)} AS VARCHAR) AS {_ident(c)}" if uuid_as_string and t == "UUID" else _ident(c)
                for c, t in columns
            )
            final = out_dir / f"{name}.parquet"
            tmp = out_dir / f".{name}.parquet.{os.getpid()}.tmp"
            try:
                row = con.execute(
                    f"COPY (SELECT {select} FROM main.{_ident(name)}) TO {_literal(tmp)} (FORMAT parquet)"
                ).fetchone()
                os.replace(tmp, final)
            except BaseException:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
                raise
            counts[name] = int(row[0])
    finally:
        con.close()
    return counts


__all__ = ["EXPORT_TABLES", "export_objects", "export_parquet"]
