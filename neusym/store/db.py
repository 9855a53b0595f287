"""The only code that opens DuckDB files: the single writer of ``corpus.duckdb`` and read-only readers.

Writer: ``with writer(settings) as con:`` opens ``$NEUSYM_HOME/corpus.duckdb`` read-write after
taking the home's writer lock (an exclusive ``flock`` on ``$NEUSYM_HOME/.writer.lock``), creates
the schema when missing and closes the connection at the end. A second writer — another ``neusym
ingest``, the DAG's ``materialize`` while ``neusym enrich`` applies — waits for the lock up to
``settings.writer_wait_s`` and then fails with :class:`WriterBusyError` naming the home; it never
gets DuckDB's "Conflicting lock" error. The lock is re-entrant within one process, so a writer may
publish a corpus version (which reads the writer's file) while holding it.

Readers never open the writer's file: they open the DuckDB snapshot of a published corpus version
(:mod:`neusym.store.versions`) with :func:`connect_readonly`, so a running refresh never blocks
them and they never block it.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import duckdb

from neusym.errors import NeusymError, SQLError
from neusym.settings import Settings


class WriterBusyError(NeusymError):
    """Another process has been writing this NEUSYM_HOME for longer than the writer wait."""


class DatabaseUnavailableError(SQLError):
    """A DuckDB file that does not exist or cannot be opened read-only."""


READONLY_CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "python_enable_replacements": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
    "lock_configuration": True,  # last: nothing can be changed with SET afterwards
}
"""DuckDB configuration of every connection that runs SQL from an agent or a user."""

LOCK_NAME = ".writer.lock"

_held: dict[str, tuple[int, int]] = {}  # lock path -> (fd, depth) held by this process
_held_lock = threading.RLock()


def _first_line(message: str) -> str:
    lines = [ln for ln in str(message).strip().splitlines() if ln.strip()]
    return lines[0] if lines else str(message)


@contextmanager
def writer_lock(settings: Settings, *, wait_s: float | None = None) -> Iterator[None]:
    """Hold the home's writer lock (exclusive ``flock``, re-entrant within this process).

    ``wait_s``: seconds to wait for another process (default ``settings.writer_wait_s``). Raises
    :class:`WriterBusyError` when it is still held after that.
    """
    home = Path(settings.home)
    home.mkdir(parents=True, exist_ok=True)
    path = str((home / LOCK_NAME).resolve())
    wait = settings.writer_wait_s if wait_s is None else wait_s
    with _held_lock:
        if path in _held:
            fd, depth = _held[path]
            _held[path] = (fd, depth + 1)
            reentered = True
        else:
            reentered = False
    if not reentered:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise WriterBusyError(
                        f"{home} is being written by another process (an ingest, crawl, enrich or DAG writer task); "
                        f"waited {wait:.0f} s for it (NEUSYM_WRITER_WAIT_S)") from None
                time.sleep(0.1)
        with _held_lock:
            _held[path] = (fd, 1)
    try:
        yield
    finally:
        with _held_lock:
            fd, depth = _held[path]
            if depth > 1:
                _held[path] = (fd, depth - 1)
            else:
                del _held[path]
                try:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                finally:
                    os.close(fd)


def holds_writer_lock(settings: Settings) -> bool:
    """Whether this process currently holds the home's writer lock."""
    path = str((Path(settings.home) / LOCK_NAME).resolve())
    with _held_lock:
        return path in _held


@contextmanager
def writer(settings: Settings, *, wait_s: float | None = None, schema: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
    """The single read-write connection to ``$NEUSYM_HOME/corpus.duckdb`` (see the module docstring).

    ``schema``: run ``sql/schema.sql`` first (idempotent). The caller runs its own transaction;
    the connection is closed on exit. Raises :class:`WriterBusyError` (another writer), duckdb.Error.
    """
    with writer_lock(settings, wait_s=wait_s):
        con = duckdb.connect(str(settings.db_path))
        try:
            if schema:
                from neusym.store.sqlfiles import read_sql

                con.execute(read_sql("schema.sql"))
            yield con
        finally:
            con.close()


def connect_readonly(db_path: Path | str, *, config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB file read-only (default configuration :data:`READONLY_CONFIG`).

    Raises :class:`DatabaseUnavailableError` when the file does not exist or cannot be opened (for
    example while another process holds it open for writing). DuckDB refuses to open a file twice
    in one process with different configurations, so close other connections to it first.
    """
    path = Path(db_path)
    if not path.is_file():
        raise DatabaseUnavailableError(
            f"database file not found: {path} (build the corpus first, or point NEUSYM_HOME at an existing one)"
        )
    try:
        return duckdb.connect(str(path), read_only=True, config=dict(READONLY_CONFIG if config is None else config))
    except duckdb.Error as exc:
        raise DatabaseUnavailableError(f"cannot open database {path} read-only: {_first_line(str(exc))}") from None


def connect_plain_readonly(db_path: Path | str) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB file read-only for the project's own code. Same configuration as
    :func:`connect_readonly` (DuckDB allows one configuration per file and process, and a reader
    such as ``neusym serve`` runs both kinds of query). Raises :class:`DatabaseUnavailableError`."""
    return connect_readonly(db_path)


def connect_for_export(db_path: Path | str) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB file read-only with file access allowed (``COPY ... TO`` Parquet). It cannot
    coexist in one process with the connections of :func:`connect_readonly` to the same file.
    Raises :class:`DatabaseUnavailableError`."""
    return connect_readonly(db_path, config={})


__all__ = [
    "DatabaseUnavailableError",
    "READONLY_CONFIG",
    "WriterBusyError",
    "connect_for_export",
    "connect_plain_readonly",
    "connect_readonly",
    "holds_writer_lock",
    "writer",
    "writer_lock",
]
