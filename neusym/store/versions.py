"""Corpus versions: what readers open, and the atomic switch that makes a refresh visible.

A corpus version is one immutable directory ``$NEUSYM_HOME/versions/vNNNNNN/``::

    corpus.duckdb      read-only copy of the writer's database (tables, views, comments)
    cells/             the cell collection: a qdrant-edge shard (no write-ahead log)
    papers/            the paper-search index: a qdrant-edge shard (no write-ahead log)
    fingerprints.parquet   per paper: fingerprint of its encodable cells (what the next publish compares)
    retriever/         only with a corpus-adapted paper encoder (``neusym train-retriever``): its int8
                       ONNX graph, tokenizer and training record; the paper index was built with it and
                       its queries are encoded with it. Carried forward by every later publish.
    manifest.json      number, parent, time, engine, row and point counts, encoder versions, timings

``$NEUSYM_HOME/current`` is a relative symlink to the current version, replaced atomically
(``rename`` of a temporary symlink); ``$NEUSYM_HOME/corpus-snapshot.duckdb`` points at its
database for analysts and BI tools. With ``NEUSYM_QDRANT_URL`` the two collections are server
collections named ``neusym_cells_vNNNNNN`` / ``neusym_papers_vNNNNNN`` (aliases ``neusym_cells`` /
``neusym_papers`` follow the current version) and the directory holds the rest.

Readers (:func:`open_version`) resolve ``current`` once and keep that version until they reopen:
SQL rows and vector points they see always come from the same version. A reader holds a shared
``flock`` on the version's ``.readers`` file, and pruning never deletes a version that a reader
holds; several processes read the same shards at once (they have no write-ahead log, so loading
takes no lock).

The single writer (:class:`VersionBuilder`, used by :mod:`neusym.ingest.publish`) holds the home's writer
lock, builds ``versions/.building-NNNNNN/`` from the writer's database and a copy of the previous
version's shards, and only then renames it into place and switches ``current``. A crash at any
point leaves the previous version serving; the next publish removes the leftovers. Versions older
than the newest ``settings.versions_keep`` are deleted once no reader holds them.

Hosts that share a storage (``NEUSYM_STORAGE_URL``, :mod:`neusym.store.storage`): the writer
uploads each new version as one archive ``versions/vNNNNNN.tar.gz`` (GNU tar, sparse-aware: the
shards' preallocated holes stay holes) plus ``versions/vNNNNNN.json`` *before* it switches its own
``current``, and then replaces the small pointer object ``versions/current.json`` — the moment the
version becomes current for every host. A reader on another host (:func:`sync_current`, run by
:func:`current_version` at most every ``storage_poll_s`` seconds) downloads and checks the archive of
a newer pointer, unpacks it into its own ``versions/`` and switches its local ``current`` with the
same atomic rename, so its readers behave exactly as on the writer's host. The pointer only moves
forward; a writer that finds a pointer newer than its own current version refuses to publish
(another writer host is publishing to the same storage). Archives beyond ``versions_keep`` are
deleted from the storage by the writer. :func:`restore_writer_database` gives a new writer host the
current version's database as its ``corpus.duckdb``.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from neusym.errors import NeusymError
from neusym.settings import Settings
from neusym.store.db import holds_writer_lock, writer_lock
from neusym.store.storage import Storage, StorageError, storage
from neusym.store.vectors import ClientBackend, EdgeBackend, VectorBackend, VectorSchema, qdrant_client

logger = logging.getLogger(__name__)

CURRENT_LINK = "current"
SNAPSHOT_LINK = "corpus-snapshot.duckdb"
"""The pointer analysts open: ``$NEUSYM_HOME/corpus-snapshot.duckdb`` (the current version's database)."""
_DIR_RE = re.compile(r"^v(\d{6})$")
_BUILD_PREFIX = ".building-"
READERS_LOCK = ".readers"
RETRIEVER_DIR = "retriever"
"""A version's corpus-adapted paper encoder (see the module docstring and :mod:`neusym.ingest.retriever`)."""
SERVER_PREFIX = "neusym"
FORMAT = 1


class NoCorpusVersion(NeusymError):
    """Nothing has been published in this NEUSYM_HOME yet (or the current version is missing)."""


class PublishError(NeusymError):
    """A corpus version could not be built or failed its checks; the previous version keeps serving."""


# ------------------------------------------------------------------------------------ paths
def current_link(settings: Settings) -> Path:
    """``$NEUSYM_HOME/current`` (a symlink to the current version directory)."""
    return Path(settings.home) / CURRENT_LINK


def snapshot_link(settings: Settings) -> Path:
    """``$NEUSYM_HOME/corpus-snapshot.duckdb`` (a symlink to the current version's database)."""
    return Path(settings.home) / SNAPSHOT_LINK


@dataclass(frozen=True)
class VersionInfo:
    """A published version: its ``number``, directory ``path`` and ``manifest``."""

    number: int
    path: Path
    manifest: dict

    @property
    def db_path(self) -> Path:
        """The version's read-only DuckDB file."""
        return self.path / "corpus.duckdb"

    @property
    def engine(self) -> str:
        """``qdrant-edge`` (shards in the directory) or ``qdrant-client`` (server collections)."""
        return self.manifest.get("engine", "qdrant-edge")

    def collection(self, name: str) -> str:
        """The shard directory (edge) or server collection name of ``cells`` / ``papers``."""
        return self.manifest.get("collections", {}).get(name, name)


def _read_manifest(path: Path) -> dict | None:
    try:
        return json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def list_versions(settings: Settings) -> list[VersionInfo]:
    """Complete published versions, oldest first (unfinished builds are not listed)."""
    directory = settings.versions_dir
    if not directory.is_dir():
        return []
    out = []
    for p in directory.iterdir():
        m = _DIR_RE.match(p.name)
        if m and p.is_dir():
            manifest = _read_manifest(p)
            if manifest is not None:
                out.append(VersionInfo(int(m.group(1)), p, manifest))
    return sorted(out, key=lambda v: v.number)


def _legacy_hint(settings: Settings) -> str:
    home = Path(settings.home)
    if (home / "snapshots").is_dir() or settings.legacy_qdrant_path.is_dir() or (home / "corpus.duckdb").is_file():
        return ("; this home has a database but no published corpus version (an older neusym, or an interrupted "
                "first publish): run `neusym publish` once")
    return "; build the corpus first (`neusym ingest PATH`, `neusym crawl ...` or the corpus_refresh DAG)"


def current_version(settings: Settings) -> VersionInfo:
    """The current version (``current`` resolved once; with a shared storage, first brought up to
    date by :func:`sync_current`). Raises :class:`NoCorpusVersion`."""
    if settings.storage_url:
        sync_current(settings)
    return _local_current(settings)


def _local_current(settings: Settings) -> VersionInfo:
    link = current_link(settings)
    if not link.is_symlink() and not link.exists():
        raise NoCorpusVersion(f"no corpus version published in {settings.home}{_legacy_hint(settings)}")
    target = link.resolve(strict=False)
    m = _DIR_RE.match(target.name)
    manifest = _read_manifest(target) if m else None
    if manifest is None:
        raise NoCorpusVersion(f"the current corpus version {target} is missing or incomplete{_legacy_hint(settings)}")
    return VersionInfo(int(m.group(1)), target, manifest)


def current_db(settings: Settings) -> Path:
    """The current version's read-only DuckDB file (resolve once, open the returned path).
    Raises :class:`NoCorpusVersion`."""
    return current_version(settings).db_path


# ------------------------------------------------------------------------------ server clients
_CLIENTS: dict[str, Any] = {}


def server_client(settings: Settings) -> Any:
    """The process's ``QdrantClient`` for ``settings.qdrant_url`` (one per URL).

    ``local:PATH`` opens qdrant-client's local mode at PATH instead of a server: the same client
    code path, for tests on machines without a Qdrant server (local mode is one process only).
    """
    url = settings.qdrant_url
    if not url:
        raise ValueError("no NEUSYM_QDRANT_URL configured")
    if url not in _CLIENTS:
        if url.startswith("local:"):
            from qdrant_client import QdrantClient

            path = Path(url[len("local:"):])
            path.mkdir(parents=True, exist_ok=True)
            _CLIENTS[url] = QdrantClient(path=str(path))
        else:
            _CLIENTS[url] = qdrant_client(url, settings.qdrant_api_key)
    return _CLIENTS[url]


def _server_name(kind: str, number: int) -> str:
    return f"{SERVER_PREFIX}_{kind}_v{number:06d}"


# ------------------------------------------------------------------------------------ readers
class CorpusVersion:
    """One published version opened for reading (see the module docstring).

    ``db_path``: its DuckDB file; :attr:`cells` / :attr:`papers`: its collections, opened
    read-only on first use. Holds a shared lock on the version until :meth:`close`, so it is not
    pruned while in use. Thread-safe for reads.
    """

    def __init__(self, settings: Settings, info: VersionInfo, lock_fd: int | None):
        self.settings = settings
        self.info = info
        self._lock_fd = lock_fd
        self._backends: dict[str, VectorBackend] = {}

    @property
    def number(self) -> int:
        """The version number."""
        return self.info.number

    @property
    def db_path(self) -> Path:
        """The version's read-only DuckDB file."""
        return self.info.db_path

    def backend(self, name: str) -> VectorBackend:
        """The read-only collection ``cells`` or ``papers`` of this version."""
        if name not in self._backends:
            if self.info.engine == "qdrant-client":
                self._backends[name] = ClientBackend(server_client(self.settings), self.info.collection(name),
                                                     read_only=True)
            else:
                self._backends[name] = EdgeBackend(self.info.path / self.info.collection(name), read_only=True)
        return self._backends[name]

    @property
    def cells(self) -> VectorBackend:
        """The cell collection (RetrieveFromVectorstore)."""
        return self.backend("cells")

    @property
    def papers(self) -> VectorBackend:
        """The paper-search index."""
        return self.backend("papers")

    @property
    def retriever_dir(self) -> Path | None:
        """The version's corpus-adapted paper encoder directory, or None (the packaged encoder)."""
        return _retriever_in(self.info.path)

    def paper_encoder(self) -> Any:
        """The :class:`neusym.encode.DenseEncoder` its paper index was built with when that is a
        corpus-adapted one, else None (the settings' encoder; what :class:`PaperIndex` defaults to)."""
        return _paper_encoder(self.settings, self.info.path)

    def is_current(self) -> bool:
        """Whether this is still the current version (a long-lived reader reopens when it is not)."""
        try:
            return current_version(self.settings).number == self.number
        except NoCorpusVersion:
            return False

    def close(self) -> None:
        """Close the collections and release the version."""
        for b in self._backends.values():
            b.close()
        self._backends.clear()
        if self._lock_fd is not None:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> "CorpusVersion":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _retriever_in(version_path: Path) -> Path | None:
    path = version_path / RETRIEVER_DIR
    return path if path.is_dir() else None


def _paper_encoder(settings: Settings, version_path: Path) -> Any:
    from neusym.encode import get_encoder

    path = _retriever_in(version_path)
    return get_encoder(settings, retriever_dir=path) if path is not None else None


def _hold(info: VersionInfo) -> int | None:
    try:
        fd = os.open(info.path / READERS_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None  # a read-only mount: nothing can prune it either
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def open_version(settings: Settings, number: int | None = None) -> CorpusVersion:
    """Open the current version (or version ``number``) for reading.

    Raises :class:`NoCorpusVersion` when there is none (or ``number`` is not on disk).
    """
    for _ in range(5):
        if number is None:
            info = current_version(settings)
        else:
            found = [v for v in list_versions(settings) if v.number == number]
            if not found:
                raise NoCorpusVersion(f"corpus version {number} is not in {settings.versions_dir}")
            info = found[0]
        fd = _hold(info)
        if _read_manifest(info.path) is not None:
            return CorpusVersion(settings, info, fd)
        if fd is not None:  # pruned between resolving and locking: resolve again
            os.close(fd)
    raise NoCorpusVersion(f"the current corpus version of {settings.home} keeps disappearing")


# ------------------------------------------------------------------------------------- writer
def copy_tree(src: Path, dst: Path) -> None:
    """Copy a shard directory keeping runs of zeros as holes (qdrant preallocates its storage files
    in 32 MB chunks; ``cp --sparse=always`` stores a small shard in a few MB instead of hundreds).
    Falls back to :func:`shutil.copytree` where GNU ``cp`` is missing."""
    import subprocess

    cp = shutil.which("cp")
    if cp:
        done = subprocess.run([cp, "-a", "--sparse=always", str(src), str(dst)], capture_output=True, text=True)
        if done.returncode == 0:
            (dst / READERS_LOCK).unlink(missing_ok=True)
            return
        shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(READERS_LOCK))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _switch_link(link: Path, target: Path) -> None:
    """Atomically make ``link`` a relative symlink to ``target`` (temporary symlink + rename)."""
    if link.exists() and not link.is_symlink():
        if link.is_dir():
            shutil.rmtree(link)
        else:
            link.unlink()
    relative = os.path.relpath(target, link.parent)
    tmp_link = link.parent / f".{link.name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    os.symlink(relative, tmp_link)
    try:
        os.replace(tmp_link, link)
    except BaseException:
        tmp_link.unlink(missing_ok=True)
        raise
    _fsync_dir(link.parent)


def _catalog_state(con: duckdb.DuckDBPyConnection, db: str) -> dict:
    """What must survive the copy: rows per table, view names, and every non-empty comment."""
    tables = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' ORDER BY 1",
        [db]).fetchall()]
    rows = {t: con.execute(f'SELECT count(*) FROM "{db}".main."{t}"').fetchone()[0] for t in tables}
    views = sorted(r[0] for r in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE database_name = ? AND NOT internal AND schema_name = 'main'",
        [db]).fetchall())
    comments = sorted(con.execute(
        "SELECT table_name, column_name, comment FROM duckdb_columns() "
        "WHERE database_name = ? AND schema_name = 'main' AND comment IS NOT NULL "
        "UNION ALL SELECT table_name, NULL, comment FROM duckdb_tables() "
        "WHERE database_name = ? AND schema_name = 'main' AND comment IS NOT NULL "
        "UNION ALL SELECT view_name, NULL, comment FROM duckdb_views() "
        "WHERE database_name = ? AND schema_name = 'main' AND comment IS NOT NULL AND NOT internal",
        [db, db, db]).fetchall(), key=lambda r: (r[0], r[1] or "", r[2]))
    return {"rows": rows, "views": views, "comments": comments}


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def copy_database(source: Path, target: Path) -> dict[str, int]:
    """Write a complete, checkpointed copy of the DuckDB file ``source`` to the new file ``target``
    (``COPY FROM DATABASE``: tables, keys, views and comments) and check it (rows per table, views,
    comments). Returns rows per table. Raises :class:`PublishError` when the source cannot be opened
    read-only or the copy differs."""
    con = duckdb.connect(":memory:")
    try:
        try:
            con.execute(f"ATTACH {_quote(source)} AS neusym_src (READ_ONLY)")
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PublishError(f"cannot open {source} read-only to publish it: {first}") from None
        con.execute(f"ATTACH {_quote(target)} AS neusym_snap")
        con.execute("COPY FROM DATABASE neusym_src TO neusym_snap")
        expected, got = _catalog_state(con, "neusym_src"), _catalog_state(con, "neusym_snap")
        for key in ("rows", "views", "comments"):
            if expected[key] != got[key]:
                raise PublishError(f"the copy of {source} differs from it in its {key}; not published")
        con.execute("CHECKPOINT neusym_snap")
        con.execute("DETACH neusym_snap")
        con.execute("DETACH neusym_src")
    finally:
        con.close()
    if Path(str(target) + ".wal").exists():
        raise PublishError(f"the copy {target} left a write-ahead log; not published")
    return got["rows"]


class VersionBuilder:
    """Build and publish the next corpus version (the single writer; see the module docstring).

    Use as a context manager: on entry it takes the writer lock, removes leftovers of crashed
    builds and copies the writer's database (:attr:`db_path`); :meth:`open_collection` gives the
    writable ``cells`` / ``papers`` collections, starting from copies of the previous version's.
    :meth:`commit` publishes; leaving the block without committing (or with an exception) deletes
    the build and leaves the current version untouched. Raises :class:`PublishError` when there is
    no writer database, :class:`neusym.store.db.WriterBusyError` when another writer holds the home.
    """

    def __init__(self, settings: Settings, *, wait_s: float | None = None):
        self.settings = settings
        self.wait_s = wait_s
        self.previous: VersionInfo | None = None
        self.number = 0
        self.path = Path()
        self.rows: dict[str, int] = {}
        self.timings: dict[str, float] = {}
        self._collections: dict[str, VectorBackend] = {}
        self._fresh: set[str] = set()
        self._lock_cm: Any = None
        self._committed = False
        self.engine = "qdrant-client" if settings.qdrant_url else "qdrant-edge"

    # -- lifecycle
    def __enter__(self) -> "VersionBuilder":
        self._lock_cm = writer_lock(self.settings, wait_s=self.wait_s)
        self._lock_cm.__enter__()
        try:
            self._start()
        except BaseException:
            self._abort()
            self._lock_cm.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if not self._committed:
                self._abort()
        finally:
            self._lock_cm.__exit__(exc_type, exc, tb)

    def _start(self) -> None:
        t0 = time.perf_counter()
        source = Path(self.settings.db_path)
        if not source.is_file():
            raise PublishError(f"nothing to publish: no corpus database at {source}")
        directory = self.settings.versions_dir
        directory.mkdir(parents=True, exist_ok=True)
        for pattern in (f"{_BUILD_PREFIX}*", ".deleting-*"):
            for leftover in directory.glob(pattern):
                shutil.rmtree(leftover, ignore_errors=True)
        for leftover in Path(self.settings.home).glob(".*.tmp"):
            if leftover.is_symlink():
                leftover.unlink(missing_ok=True)
        try:
            self.previous = _local_current(self.settings)
        except NoCorpusVersion:
            self.previous = None
        pointer = remote_current(self.settings)
        if pointer is not None and int(pointer.get("version", 0)) > (self.previous.number if self.previous else 0):
            raise PublishError(
                f"the shared storage {self.settings.storage_url} is at version {pointer.get('version')}, this writer "
                f"({self.settings.home}) at {self.previous.number if self.previous else 'none'}: another writer host "
                "publishes to the same storage (exactly one worker may serve the writer queue), or this host is new "
                "and needs `python -m neusym.interfaces.cluster restore-writer` first")
        for orphan in list_versions(self.settings):  # renamed into place by a publish that died before the switch
            if self.previous is None or orphan.number > self.previous.number:
                _delete_version(self.settings, orphan)
        existing = [v.number for v in list_versions(self.settings)]
        self.number = 1 + max(existing + [self.previous.number if self.previous else 0])
        self.path = directory / f"{_BUILD_PREFIX}{self.number:06d}"
        self.path.mkdir()
        self.rows = copy_database(source, self.db_path)
        os.chmod(self.db_path, 0o444)
        carried = _retriever_in(self.previous.path) if self.previous is not None else None
        if carried is not None:
            copy_tree(carried, self.path / RETRIEVER_DIR)
        self.timings["copy_database"] = round(time.perf_counter() - t0, 3)

    @property
    def db_path(self) -> Path:
        """The new version's DuckDB file (a checked copy of the writer's database)."""
        return self.path / "corpus.duckdb"

    @property
    def retriever_dir(self) -> Path | None:
        """The new version's corpus-adapted paper encoder (copied from the previous version, or set
        with :meth:`set_retriever`), or None."""
        return _retriever_in(self.path)

    def set_retriever(self, source: Path | None) -> None:
        """Give the new version the corpus-adapted encoder in directory ``source`` (its files are
        copied), or none (``None``: back to the packaged encoder). The paper index must then be
        re-encoded with :meth:`paper_encoder` before :meth:`commit`."""
        target = self.path / RETRIEVER_DIR
        if target.exists():
            shutil.rmtree(target)
        if source is not None:
            copy_tree(Path(source), target)

    def paper_encoder(self) -> Any:
        """The new version's corpus-adapted paper encoder (:class:`neusym.encode.DenseEncoder`) or
        None for the settings' encoder."""
        return _paper_encoder(self.settings, self.path)

    def open_collection(self, name: str, schema: VectorSchema) -> VectorBackend:
        """The writable collection ``name`` of the new version: a copy of the previous version's
        when it has one made by the same engine, else a new empty one with ``schema``."""
        if name in self._collections:
            return self._collections[name]
        t0 = time.perf_counter()
        prev = self.previous if self.previous is not None and self.previous.engine == self.engine else None
        if self.engine == "qdrant-edge":
            target = self.path / name
            if prev is not None and (prev.path / prev.collection(name) / "edge_config.json").is_file():
                copy_tree(prev.path / prev.collection(name), target)
            else:
                self._fresh.add(name)
            backend: VectorBackend = EdgeBackend(target)
        else:
            client = server_client(self.settings)
            backend = ClientBackend(client, _server_name(name, self.number))
            backend.drop()  # a leftover of a crashed build with this number
            if prev is not None:
                old = ClientBackend(client, prev.collection(name), read_only=True)
                if old.exists():
                    _copy_collection(old, backend, schema)
        backend.create(schema)  # no-op when copied
        self._collections[name] = backend
        self.timings[f"copy_{name}"] = round(time.perf_counter() - t0, 3)
        return backend

    def commit(self, manifest: dict, files: dict[str, bytes] | None = None) -> VersionInfo:
        """Publish the build: close its collections, write ``files`` and ``manifest.json`` (plus
        number, parent, creation time, engine, collections, rows), rename the directory into
        place, switch ``current`` and ``corpus-snapshot.duckdb``, prune old versions. Returns the
        new :class:`VersionInfo`."""
        t0 = time.perf_counter()
        names = {}
        for name, backend in self._collections.items():
            backend.flush()
            backend.close()
            names[name] = backend.collection if isinstance(backend, ClientBackend) else name
            if name in self._fresh and isinstance(backend, EdgeBackend):  # a new shard: drop its preallocation
                sparse = self.path / f".{name}.sparse"
                copy_tree(self.path / name, sparse)
                shutil.rmtree(self.path / name)
                os.replace(sparse, self.path / name)
        for fname, data in (files or {}).items():
            (self.path / fname).write_bytes(data)
        full = {
            "format": FORMAT,
            "version": self.number,
            "parent": self.previous.number if self.previous else None,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "engine": self.engine,
            "collections": names,
            "rows": self.rows,
            **manifest,
        }
        full["timings"] = {**self.timings, **manifest.get("timings", {})}
        (self.path / "manifest.json").write_text(json.dumps(full, indent=1, sort_keys=True), encoding="utf-8")
        for p in self.path.rglob("*"):  # durable before the switch
            if p.is_file():
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        final = self.settings.versions_dir / f"v{self.number:06d}"
        os.replace(self.path, final)
        _fsync_dir(final.parent)
        self.path = final
        shared = storage(self.settings)
        pointer = None
        if shared.shared:  # upload before anyone can switch to it; on failure the previous version keeps serving
            try:
                pointer = _upload_version(shared, self.number, final, self.previous, full)
            except BaseException:
                shutil.rmtree(final, ignore_errors=True)
                raise
        _switch_link(current_link(self.settings), final)
        _switch_link(snapshot_link(self.settings), final / "corpus.duckdb")
        self._committed = True
        if pointer is not None:
            shared.write_json(REMOTE_CURRENT, pointer)  # now current on every host
            _prune_remote(shared, self.settings)
        if self.engine == "qdrant-client":
            _point_aliases(self.settings, names)
        full["timings"]["switch"] = round(time.perf_counter() - t0, 3)
        info = VersionInfo(self.number, final, full)
        _retire_legacy(self.settings)
        prune_versions(self.settings)
        return info

    def _abort(self) -> None:
        for backend in self._collections.values():
            try:
                backend.close()
            except Exception:  # noqa: BLE001 - cleaning up after a failure
                pass
            if isinstance(backend, ClientBackend):
                try:
                    backend.drop()
                except Exception:  # noqa: BLE001
                    pass
        self._collections.clear()
        if self.path and self.path.name.startswith(_BUILD_PREFIX) and self.path.exists():
            shutil.rmtree(self.path, ignore_errors=True)


def _copy_collection(src: ClientBackend, dst: ClientBackend, schema: VectorSchema, batch: int = 512) -> None:
    from neusym.store.vectors import Point

    dst.create(schema)
    buf: list[Point] = []
    for rec in src.scroll(payload=True, vectors=True, batch=batch):
        buf.append(Point(rec.id, rec.vectors, rec.payload))
        if len(buf) >= batch:
            dst.upsert(buf)
            buf = []
    dst.upsert(buf)


def _point_aliases(settings: Settings, names: dict[str, str]) -> None:
    from qdrant_client import models

    client = server_client(settings)
    ops = []
    for kind, collection in names.items():
        alias = f"{SERVER_PREFIX}_{kind}"
        ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
        ops.append(models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection,
                                                                             alias_name=alias)))
    try:
        client.update_collection_aliases(change_aliases_operations=ops)
    except Exception:  # noqa: BLE001 - the first publish has no alias to delete
        client.update_collection_aliases(change_aliases_operations=[o for o in ops if hasattr(o, "create_alias")])


def _retire_legacy(settings: Settings) -> None:
    """After the first versioned publish of a home built by an older neusym: its local-mode vector
    store and paper index are moved aside (everything in them was rebuilt from the database and
    staging), its old snapshots deleted (copies of the database)."""
    home = Path(settings.home)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for name in ("qdrant", "papers_edge"):
        old = home / name
        if old.is_dir():
            target = home / f"{name}.pre-versions-{stamp}"
            os.replace(old, target)
            logger.warning("moved the old vector store %s to %s (rebuilt inside the corpus version; delete it "
                           "when you no longer need it)", old, target)
    shutil.rmtree(home / "snapshots", ignore_errors=True)


def prune_versions(settings: Settings, keep: int | None = None) -> list[int]:
    """Delete versions older than the newest ``keep`` (default ``settings.versions_keep``, at least
    1) that no reader holds; never the current one. Returns the numbers deleted."""
    keep = max(1, int(settings.versions_keep if keep is None else keep))
    versions = list_versions(settings)
    try:
        current = _local_current(settings).number
    except NoCorpusVersion:
        current = None
    deleted = []
    for v in versions[:-keep]:
        if v.number != current and _delete_version(settings, v):
            deleted.append(v.number)
    return deleted


def _delete_version(settings: Settings, v: VersionInfo) -> bool:
    """Delete version ``v`` unless a reader holds it (then it stays until a later publish)."""
    try:
        fd = os.open(v.path / READERS_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("corpus version %d is still open in a reader; kept for now", v.number)
            return False
        if v.engine == "qdrant-client" and settings.qdrant_url:
            for name in ("cells", "papers"):
                try:
                    ClientBackend(server_client(settings), v.collection(name)).drop()
                except Exception:  # noqa: BLE001 - best effort
                    logger.warning("could not drop %s of version %d", v.collection(name), v.number)
        trash = v.path.with_name(f".deleting-{v.path.name}")
        os.replace(v.path, trash)
        shutil.rmtree(trash, ignore_errors=True)
        return True
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ shared storage
REMOTE_CURRENT = "versions/current.json"
"""The pointer object naming the current version in the shared storage (written last)."""
_last_sync: dict[tuple[str, str], float] = {}


def _archive_key(number: int) -> str:
    return f"versions/v{number:06d}.tar.gz"


def remote_current(settings: Settings) -> dict | None:
    """The shared storage's current-version pointer (``{"version", "archive", "sha256", "bytes",
    "published_at", "parent"}``), or None when nothing was published there (or no storage is set)."""
    st = storage(settings)
    return st.read_json(REMOTE_CURRENT) if st.shared else None


def _tar() -> str:
    tar = shutil.which("tar")
    if not tar:
        raise StorageError("GNU tar is needed to pack and unpack corpus versions for the shared storage")
    return tar


def _upload_version(st: Storage, number: int, path: Path, previous: VersionInfo | None, manifest: dict) -> dict:
    """Pack version ``path`` (sparse-aware gzip tar), upload it and its manifest; returns the
    pointer to write. Raises :class:`PublishError` when another writer got ahead of this one."""
    import hashlib
    import subprocess

    pointer = st.read_json(REMOTE_CURRENT)
    if pointer is not None and int(pointer.get("version", 0)) >= number:
        raise PublishError(f"{st.url_of(REMOTE_CURRENT)} already names version {pointer.get('version')} "
                           f"(this writer's would be {number}): another writer host publishes to the same storage; "
                           "exactly one worker may serve the writer queue")
    scratch = st.home / ".scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    archive = scratch / f"v{number:06d}.{os.getpid()}.tar.gz"
    try:
        done = subprocess.run([_tar(), "--sparse", "--exclude", READERS_LOCK, "-czf", str(archive),
                               "-C", str(path.parent), path.name], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PublishError(f"cannot pack {path} for the shared storage: {done.stderr.strip()[:300]}")
        digest = hashlib.sha256()
        with open(archive, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        size = archive.stat().st_size
        st.put_file(archive, _archive_key(number))
    finally:
        archive.unlink(missing_ok=True)
    st.write_json(f"versions/v{number:06d}.json", manifest)
    return {"version": number, "archive": _archive_key(number), "sha256": digest.hexdigest(), "bytes": size,
            "parent": previous.number if previous else None, "published_at": manifest.get("created_at")}


def _prune_remote(st: Storage, settings: Settings) -> None:
    """Delete archives older than the newest ``versions_keep`` from the storage (never the current)."""
    keep = max(1, int(settings.versions_keep))
    numbers = sorted({int(m.group(1)) for k in st.list_keys("versions")
                      if (m := re.match(r"^versions/v(\d{6})\.(tar\.gz|json)$", k))})
    for n in numbers[:-keep]:
        for key in (_archive_key(n), f"versions/v{n:06d}.json"):
            try:
                st.delete(key)
            except StorageError as exc:
                logger.warning("could not delete %s from the shared storage: %s", key, exc)


def sync_current(settings: Settings, *, force: bool = False) -> int | None:
    """Bring this home's ``current`` up to the shared storage's current version (no-op without a
    storage, or when checked less than ``storage_poll_s`` ago unless ``force``).

    Downloads the pointer's archive into scratch, checks its sha256, unpacks it into
    ``versions/.syncing-*`` and renames it to ``versions/vNNNNNN``, then switches ``current`` and
    ``corpus-snapshot.duckdb`` atomically and prunes old local versions (never one a reader holds).
    Only moves forward: a home whose current version is as new (the writer's) is left alone. One
    process of the host syncs at a time (``flock`` on ``$NEUSYM_HOME/.sync.lock``). Returns the
    version that is current here afterwards (None when none). Raises :class:`StorageError` when
    the storage cannot be read or an archive is damaged.
    """
    st = storage(settings)
    if not st.shared:
        return None
    key = (str(st.home), st.url or "")
    now = time.monotonic()
    if not force and now - _last_sync.get(key, -1e18) < float(settings.storage_poll_s):
        return None
    _last_sync[key] = now
    pointer = st.read_json(REMOTE_CURRENT)
    local = _local_number(settings)
    if pointer is None or (local is not None and local >= int(pointer["version"])):
        return local
    st.home.mkdir(parents=True, exist_ok=True)
    fd = os.open(st.home / ".sync.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for _ in range(3):  # the writer may prune the archive we are about to fetch: read the pointer again
            local = _local_number(settings)
            if local is not None and local >= int(pointer["version"]):
                return local
            try:
                _install(st, settings, pointer)
                break
            except FileNotFoundError:
                pointer = st.read_json(REMOTE_CURRENT) or pointer
        else:
            raise StorageError(f"{st.url_of(REMOTE_CURRENT)}: the current version's archive keeps disappearing")
        prune_versions(settings)
        return int(pointer["version"])
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _local_number(settings: Settings) -> int | None:
    try:
        return _local_current(settings).number
    except NoCorpusVersion:
        return None


def _install(st: Storage, settings: Settings, pointer: dict) -> None:
    """Download, check and unpack the version named by ``pointer``; switch ``current`` to it.
    Raises FileNotFoundError when the archive is gone from the storage."""
    import hashlib
    import subprocess

    number = int(pointer["version"])
    directory = settings.versions_dir
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"v{number:06d}"
    if _read_manifest(final) is None:
        scratch = st.home / ".scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        archive = scratch / f"v{number:06d}.{os.getpid()}.tar.gz"
        unpack = directory / f".syncing-{number:06d}-{os.getpid()}"
        try:
            if not st.get_file(pointer["archive"], archive):
                raise FileNotFoundError(pointer["archive"])
            digest = hashlib.sha256()
            with open(archive, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            if digest.hexdigest() != pointer.get("sha256"):
                raise StorageError(f"{st.url_of(pointer['archive'])}: checksum mismatch (damaged or replaced "
                                   "while downloading)")
            shutil.rmtree(unpack, ignore_errors=True)
            unpack.mkdir()
            done = subprocess.run([_tar(), "-xzf", str(archive), "-C", str(unpack)], capture_output=True, text=True,
                                  check=False)
            if done.returncode != 0 or _read_manifest(unpack / final.name) is None:
                why = done.stderr.strip()[:300] if done.returncode else f"it holds no {final.name}/manifest.json"
                raise StorageError(f"{st.url_of(pointer['archive'])}: cannot unpack version {number}: {why}")
            if final.exists():  # an incomplete leftover
                shutil.rmtree(final)
            os.replace(unpack / final.name, final)
            _fsync_dir(directory)
        finally:
            archive.unlink(missing_ok=True)
            shutil.rmtree(unpack, ignore_errors=True)
    _switch_link(current_link(settings), final)
    _switch_link(snapshot_link(settings), final / "corpus.duckdb")


def restore_writer_database(settings: Settings, *, force: bool = False) -> dict:
    """Give a new writer host the shared storage's current version: sync it, then copy its
    database to ``$NEUSYM_HOME/corpus.duckdb`` (checked, writable) so the next refresh goes on from
    there (every table, crawl watermarks and the enrichment cache included). Refuses to replace an
    existing writer database unless ``force``. Returns ``{"version", "db_path", "rows"}``. Raises
    :class:`NoCorpusVersion` (nothing published in the storage), :class:`PublishError`,
    ``ValueError`` (no storage configured, or a database exists).
    """
    if not settings.storage_url:
        raise ValueError("NEUSYM_STORAGE_URL is not set: there is no shared storage to restore from")
    target = Path(settings.db_path)
    if target.exists() and not force:
        raise ValueError(f"{target} exists; this host already has a writer database (use force to replace it)")
    if remote_current(settings) is None:
        raise NoCorpusVersion(f"nothing is published in the shared storage {settings.storage_url} yet: there is no "
                              "version to restore from")
    with writer_lock(settings):
        sync_current(settings, force=True)
        info = _local_current(settings)
        tmp = target.with_name(f".{target.name}.restore-{os.getpid()}")
        tmp.unlink(missing_ok=True)
        try:
            rows = copy_database(info.db_path, tmp)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
            Path(str(tmp) + ".wal").unlink(missing_ok=True)
    return {"version": info.number, "db_path": str(target), "rows": rows}


def writer_held(settings: Settings) -> bool:
    """Whether this process holds the writer lock of ``settings.home`` (publishing needs it)."""
    return holds_writer_lock(settings)


__all__ = [
    "CorpusVersion",
    "NoCorpusVersion",
    "PublishError",
    "VersionBuilder",
    "VersionInfo",
    "copy_database",
    "current_db",
    "current_link",
    "current_version",
    "list_versions",
    "open_version",
    "prune_versions",
    "remote_current",
    "restore_writer_database",
    "server_client",
    "snapshot_link",
    "sync_current",
]
