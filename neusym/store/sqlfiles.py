"""Locate the SQL files of ``sql/`` (the source of truth for the schema and the loads)."""

from __future__ import annotations

import os
from pathlib import Path


def sql_dir() -> Path:
    """The ``sql/`` directory: ``$NEUSYM_SQL_DIR`` if set, else the one next to the ``neusym`` package.

    Raises FileNotFoundError when it has no ``schema.sql``.
    """
    env = os.environ.get("NEUSYM_SQL_DIR")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "sql"
    if not (path / "schema.sql").is_file():
        raise FileNotFoundError(f"{path}/schema.sql not found: set NEUSYM_SQL_DIR to the project's sql/ directory")
    return path


def read_sql(relative: str) -> str:
    """Text of ``sql/<relative>`` (e.g. ``"schema.sql"``, ``"materialize/10_upsert_papers.sql"``)."""
    return (sql_dir() / relative).read_text(encoding="utf-8")


def materialize_files() -> list[Path]:
    """The files of ``sql/materialize/`` in name order (they run in that order, in one transaction)."""
    return sorted((sql_dir() / "materialize").glob("*.sql"))
