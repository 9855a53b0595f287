"""Read-only published snapshots of the corpus database, for analysts, BI tools and ``neusym sql``.

DuckDB allows one read-write process per file, and other processes cannot even open a file read-only
while a writer holds it. So readers never open ``$NEUSYM_HOME/corpus.duckdb`` (the nightly writer's
file). After each successful materialize the writer calls :func:`publish_snapshot`, which

1. copies the committed database into a new file under a temporary name with DuckDB itself
   (``ATTACH`` source ``READ_ONLY`` + ``ATTACH`` target + ``COPY FROM DATABASE``): tables, primary
   keys, views and every ``COMMENT ON`` survive; the copy is compact (no free blocks of the writer).
   ``method="file_copy"`` instead checkpoints the source under an exclusive open and copies its
   bytes (about 10x faster, needs exclusive access; see :func:`publish_snapshot`);
2. checks the copy (row count of every table, number of views and comments) and checkpoints it,
   so the file is complete without a ``.wal``;
3. fsyncs it, makes it read-only (mode 0444) and renames it to
   ``$NEUSYM_HOME/snapshots/corpus-<UTC timestamp>-<n>.duckdb`` (``n`` increases by one per publish);
4. atomically switches the pointer ``$NEUSYM_HOME/corpus-snapshot.duckdb``, a relative symlink
   replaced with ``os.replace`` of a temporary symlink (an atomic rename on POSIX): a reader
   resolves either the previous or the new snapshot, never a half-written one;
5. deletes snapshots older than the newest ``keep`` (default 2). The previous snapshot therefore
   stays on disk until it has been superseded twice, so a reader that resolved the pointer just
   before a switch can still open it. (On Linux a connection that already has a file open keeps
   working even after the file is deleted.)

Publishes are serialised with an exclusive ``flock`` on ``snapshots/.publish.lock``. Leftover
temporary files of a crashed publish are removed by the next publish.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import duckdb

from .errors import NeusymError
from .settings import Settings

SNAPSHOT_LINK_NAME = "corpus-snapshot.duckdb"
"""The pointer analysts open: ``$NEUSYM_HOME/corpus-snapshot.duckdb`` (a symlink)."""
SNAPSHOTS_DIR_NAME = "snapshots"
DEFAULT_KEEP = 2
_NAME_RE = re.compile(r"^corpus-(\d{8}T\d{6}Z)-(\d+)\.duckdb$")
_TMP_PREFIX = ".corpus-"
_LOCK_NAME = ".publish.lock"


class SnapshotError(NeusymError):
    """A snapshot could not be published or resolved (missing source database, locked file, failed check)."""


class NoSnapshotError(SnapshotError):
    """No snapshot has been published yet in this NEUSYM_HOME (or the pointer is dangling)."""


def snapshots_dir(settings: Settings) -> Path:
    """Directory holding the snapshot files, ``$NEUSYM_HOME/snapshots``."""
    return Path(settings.home) / SNAPSHOTS_DIR_NAME


def snapshot_link(settings: Settings) -> Path:
    """The stable pointer readers open, ``$NEUSYM_HOME/corpus-snapshot.duckdb`` (may not exist yet)."""
    return Path(settings.home) / SNAPSHOT_LINK_NAME


def list_snapshots(settings: Settings) -> list[Path]:
    """Complete snapshot files of ``settings.home`` in publish order (oldest first, by sequence ``n``).

    Temporary files of an unfinished publish are not listed. Returns ``[]`` when none exist.
    """
    directory = snapshots_dir(settings)
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        m = _NAME_RE.match(p.name)
        if m and p.is_file():
            found.append((int(m.group(2)), p.name, p))
    return [p for _, _, p in sorted(found)]


def current_snapshot(settings: Settings) -> Path:
    """The absolute path of the currently published snapshot (the pointer's target, resolved).

    Resolve once and open the returned path: the pointer may switch to a newer snapshot at any
    moment, while the returned file stays valid (it is kept until superseded twice). If the pointer
    is a regular file (e.g. a home directory copied without preserving symlinks) that file is
    returned. Raises :class:`NoSnapshotError` when nothing has been published yet or the pointer
    target is missing.
    """
    link = snapshot_link(settings)
    if link.is_symlink():
        target = link.resolve(strict=False)
        if not target.is_file():
            raise NoSnapshotError(
                f"snapshot pointer {link} points to missing file {target}; publish a new snapshot "
                "(run `neusym ingest` or the corpus_refresh DAG)"
            )
        return target
    if link.is_file():
        return link.resolve()
    raise NoSnapshotError(
        f"no snapshot published yet at {link}; build the corpus first (`neusym ingest PATH` or the "
        "corpus_refresh DAG), which publishes one after each successful materialize"
    )


def publish_snapshot(settings: Settings, *, keep: int | None = None, method: str = "copy_database") -> Path:
    """Publish a complete read-only copy of ``settings.db_path`` and point the snapshot link at it.

    Call it after a successful materialize, once the writer connection is closed (it opens the
    database ``READ_ONLY`` in a fresh in-memory DuckDB instance; a writer holding the file in another
    process makes it fail). ``keep``: number of newest snapshots to keep, at least 1; default
    ``settings.snapshot_keep`` when that setting exists, else 2. Returns the absolute path of the
    new snapshot file.

    ``method``: how the bytes are produced (both are checked the same way afterwards):

    - ``"copy_database"`` (default): DuckDB ``COPY FROM DATABASE`` from the source attached
      ``READ_ONLY``. Needs only a shared lock on the source and writes a compact file. Measured on
      2 shared cores: 0.16-0.25 s for the 5-paper sample corpus (5.5 MB), 2.6-3.2 s for a 178 MB
      database (the sample replicated 200x).
    - ``"file_copy"``: open the source read-write (exclusive: fails if any other process has it
      open), ``FORCE CHECKPOINT``, copy the file bytes while still holding it. About 10x faster
      (0.06-0.10 s and 0.21-0.31 s for the same two databases) but the copy keeps the writer's free
      blocks and the writer file must not be open anywhere else.

    Raises :class:`SnapshotError` when the database file is missing or cannot be opened, or when the
    copy does not match the source (row counts, views, comments); the pointer then still names the
    previous snapshot and the temporary file is removed. Raises ``ValueError`` for ``keep < 1`` or an
    unknown ``method``.
    """
    if method not in _METHODS:
        raise ValueError(f"unknown snapshot method {method!r}; use one of {', '.join(_METHODS)}")
    if keep is None:
        keep = int(getattr(settings, "snapshot_keep", DEFAULT_KEEP))
    if keep < 1:
        raise ValueError(f"keep must be >= 1, not {keep}")
    source = Path(settings.db_path).resolve()
    if not source.is_file():
        raise SnapshotError(f"no corpus database at {source}; run materialize before publishing a snapshot")
    directory = snapshots_dir(settings)
    directory.mkdir(parents=True, exist_ok=True)
    with _publish_lock(directory):
        _remove_stale_temporaries(directory)
        existing = list_snapshots(settings)
        seq = 1 + max((int(_NAME_RE.match(p.name).group(2)) for p in existing), default=0)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        final = directory / f"corpus-{stamp}-{seq:06d}.duckdb"
        tmp = directory / f"{_TMP_PREFIX}{stamp}-{seq:06d}.{os.getpid()}.tmp"
        try:
            _METHODS[method](source, tmp)
            _fsync_file(tmp)
            os.chmod(tmp, 0o444)
            os.replace(tmp, final)
            _fsync_dir(directory)
        except BaseException:
            _unlink_quietly(tmp)
            _unlink_quietly(Path(str(tmp) + ".wal"))
            raise
        _switch_link(snapshot_link(settings), final)
        _prune(settings, keep, current=final)
        return final


# --------------------------------------------------------------------------------------------
# Internals
# --------------------------------------------------------------------------------------------


@contextmanager
def _publish_lock(directory: Path) -> Iterator[None]:
    fd = os.open(directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _quote_path(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _catalog_state(con: duckdb.DuckDBPyConnection, db: str) -> dict:
    """What must survive the copy: rows per table, view names, and every non-empty comment."""
    tables = [
        r[0]
        for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' "
            "ORDER BY table_name",
            [db],
        ).fetchall()
    ]
    rows = {t: con.execute(f'SELECT count(*) FROM "{db}".main."{t}"').fetchone()[0] for t in tables}
    views = sorted(
        r[0]
        for r in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE database_name = ? AND NOT internal AND schema_name = 'main'",
            [db],
        ).fetchall()
    )
    comments = sorted(
        con.execute(
            "SELECT table_name, column_name, comment FROM duckdb_columns() "
            "WHERE database_name = ? AND schema_name = 'main' AND comment IS NOT NULL "
            "UNION ALL SELECT table_name, NULL, comment FROM duckdb_tables() "
            "WHERE database_name = ? AND schema_name = 'main' AND comment IS NOT NULL "
            "UNION ALL SELECT view_name, NULL, comment FROM duckdb_views() "
            "WHERE database_name = ? AND schema_name = 'main' AND comment IS NOT NULL AND NOT internal",
            [db, db, db],
        ).fetchall(),
        key=lambda r: (r[0], r[1] or "", r[2]),
    )
    return {"rows": rows, "views": views, "comments": comments}


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _verify_copy(con: duckdb.DuckDBPyConnection, source_db: str, copy_db: str, source: Path) -> None:
    expected = _catalog_state(con, source_db)
    got = _catalog_state(con, copy_db)
    for key in ("rows", "views", "comments"):
        if expected[key] != got[key]:
            raise SnapshotError(f"snapshot copy of {source} differs from the source in its {key}; not published")


def _copy_database(source: Path, target: Path) -> None:
    """Write a complete, checkpointed copy of ``source`` to the new file ``target`` with DuckDB."""
    con = duckdb.connect(":memory:")
    try:
        try:
            con.execute(f"ATTACH {_quote_path(source)} AS neusym_src (READ_ONLY)")
        except duckdb.Error as exc:
            raise SnapshotError(
                f"cannot open {source} read-only to publish a snapshot (is a writer still holding it?): "
                f"{_first_line(exc)}"
            ) from None
        con.execute(f"ATTACH {_quote_path(target)} AS neusym_snap")
        con.execute("COPY FROM DATABASE neusym_src TO neusym_snap")
        _verify_copy(con, "neusym_src", "neusym_snap", source)
        con.execute("CHECKPOINT neusym_snap")
        con.execute("DETACH neusym_snap")
        con.execute("DETACH neusym_src")
    finally:
        con.close()
    _check_no_wal(target)


def _file_copy(source: Path, target: Path) -> None:
    """Checkpoint ``source`` under an exclusive read-write open and copy its bytes to ``target``."""
    try:
        con = duckdb.connect(str(source))
    except duckdb.Error as exc:
        raise SnapshotError(
            f"cannot open {source} exclusively to publish a snapshot (another process has it open): "
            f"{_first_line(exc)}"
        ) from None
    try:
        con.execute("FORCE CHECKPOINT")
        wal = Path(str(source) + ".wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise SnapshotError(f"{wal} is not empty after a checkpoint; not published")
        shutil.copyfile(source, target)
        source_db = con.execute("SELECT current_database()").fetchone()[0]
        con.execute(f"ATTACH {_quote_path(target)} AS neusym_snap (READ_ONLY)")
        try:
            _verify_copy(con, source_db, "neusym_snap", source)
        finally:
            con.execute("DETACH neusym_snap")
    finally:
        con.close()
    _check_no_wal(target)


def _check_no_wal(target: Path) -> None:
    wal = Path(str(target) + ".wal")
    if wal.exists():  # a WAL left next to the copy would mean the file alone is incomplete
        raise SnapshotError(f"snapshot copy left a write-ahead log {wal}; not published")


_METHODS = {"copy_database": _copy_database, "file_copy": _file_copy}


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _switch_link(link: Path, target: Path) -> None:
    """Atomically make ``link`` a relative symlink to ``target`` (temp symlink + rename)."""
    relative = os.path.relpath(target, link.parent)
    tmp_link = link.parent / f".{link.name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    os.symlink(relative, tmp_link)
    try:
        os.replace(tmp_link, link)
    except BaseException:
        _unlink_quietly(tmp_link)
        raise
    _fsync_dir(link.parent)


def _prune(settings: Settings, keep: int, *, current: Path) -> list[Path]:
    """Delete snapshots older than the newest ``keep``; never the pointer's target. Returns deleted paths."""
    snapshots = list_snapshots(settings)
    try:
        target = current_snapshot(settings)
    except NoSnapshotError:
        target = current
    protected = {p.resolve() for p in snapshots[-keep:]} | {target.resolve(), current.resolve()}
    deleted = []
    for path in snapshots:
        if path.resolve() in protected:
            continue
        _unlink_quietly(path)
        _unlink_quietly(Path(str(path) + ".wal"))
        deleted.append(path)
    return deleted


def _remove_stale_temporaries(directory: Path) -> None:
    """Remove temporary files of a crashed publish (only called while holding the publish lock)."""
    for p in directory.glob(f"{_TMP_PREFIX}*"):
        _unlink_quietly(p)
    for p in directory.parent.glob(f".{SNAPSHOT_LINK_NAME}.*.tmp"):
        _unlink_quietly(p)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = [
    "DEFAULT_KEEP",
    "NoSnapshotError",
    "SNAPSHOT_LINK_NAME",
    "SnapshotError",
    "current_snapshot",
    "list_snapshots",
    "publish_snapshot",
    "snapshot_link",
    "snapshots_dir",
]
