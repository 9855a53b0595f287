"""The database schema as text, from the comments DuckDB stores (which come from ``sql/schema.sql``).

This is what the agent sees as [Database Schema] (the paper's code representation: CREATE TABLE
statements with a ``--`` comment per column) and what ``neusym schema`` prints for analysts.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

AGENT_TABLES = ("metadata", "pages", "sections", "chunks", "tables", "images", "equations", "reference")
DATABASE_COMMENT = (
    "database neusym: parsed AI research papers. Each PDF is represented via several views: pages, "
    "sections, fixed-size chunks, tables, figures (images), equations and references."
)


def describe(con: duckdb.DuckDBPyConnection, tables: tuple[str, ...] = AGENT_TABLES) -> list[dict]:
    """Tables with their comment, columns (name, type, comment) and primary key, in ``tables`` order."""
    out = []
    for table in tables:
        row = con.execute(
            "SELECT comment FROM duckdb_tables() WHERE table_name = ? AND schema_name = 'main'", [table]
        ).fetchone()
        if row is None:
            continue
        cols = con.execute(
            "SELECT column_name, data_type, comment FROM duckdb_columns() "
            "WHERE table_name = ? AND schema_name = 'main' ORDER BY column_index",
            [table],
        ).fetchall()
        pk = con.execute(
            "SELECT constraint_column_names FROM duckdb_constraints() "
            "WHERE table_name = ? AND constraint_type = 'PRIMARY KEY'",
            [table],
        ).fetchone()
        out.append({"table": table, "comment": row[0], "columns": cols, "primary_key": list(pk[0]) if pk else []})
    return out


def database_schema_prompt(db_path: Path) -> str:
    """The schema of ``db_path`` as commented CREATE TABLE statements (the agent's [Database Schema]).

    Opens the database read-only. Raises :class:`neusym.store.db.DatabaseUnavailableError` when the
    file is missing or cannot be opened, duckdb.Error when it is not a corpus database.
    """
    from neusym.store.db import connect_plain_readonly

    con = connect_plain_readonly(db_path)
    try:
        return schema_text(describe(con))
    finally:
        con.close()


def schema_text(tables: list[dict]) -> str:
    """Render :func:`describe` output as commented CREATE TABLE statements."""
    parts = [f"/* {DATABASE_COMMENT} */"]
    for t in tables:
        lines = [f"/* table {t['table']}: {t['comment']} */", f"CREATE TABLE {t['table']} ("]
        body = [f"    {name} {dtype}, -- {comment or ''}".rstrip() for name, dtype, comment in t["columns"]]
        if t["primary_key"]:
            body.append(f"    PRIMARY KEY ({', '.join(t['primary_key'])})")
        lines += body
        lines.append(");")
        parts.append("\n".join(lines))
    return "\n".join(parts)
