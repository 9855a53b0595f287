"""Shared storage by URL: what workers on different hosts hand each other (store layer).

One setting, ``NEUSYM_STORAGE_URL`` (an fsspec URL: ``file:///mnt/nfs/neusym``, ``s3://bucket/neusym``,
``gs://…``, ``memory://…`` in tests), addresses everything a task on one host writes for a task on
another host:

- ``staging/`` — per-PDF parse and vector results, crawl results, enrichment results;
- ``quarantine/`` — records of PDFs that could not be parsed;
- ``pdfs/sha256/<sha256>.pdf`` — the content-addressed PDF store;
- ``versions/vNNNNNN.tar.gz`` + ``versions/vNNNNNN.json`` + ``versions/current.json`` — the published
  corpus versions (see :mod:`neusym.store.versions`).

A key in the storage is the same path relative to ``NEUSYM_HOME`` as the local file, so every stage
keeps working on local files and the storage is a mirror: a producer writes locally as before and
then :meth:`Storage.push`es the file or directory; a consumer on another host :meth:`Storage.pull_dir`s
it into its own home (its local cache). Scratch (partial downloads, build directories, archives
being packed) never leaves the host. Unset = one machine: every push and pull is a no-op and the
home is the only copy.

Atomicity: a directory is pushed data files first and its ``manifest.json`` last, so a reader that
finds the manifest finds the files it names; a pull re-reads the manifest after downloading and
starts again if it changed meanwhile, and installs the local copy with one rename. A single object
is written atomically (object stores: one PUT; a local/NFS path: a temporary name + rename).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from neusym.errors import NeusymError
from neusym.settings import Settings

MARKER = "manifest.json"
"""The file written last when a directory is pushed (its presence means the directory is complete)."""


class StorageError(NeusymError):
    """The shared storage cannot be reached or holds something unusable (the message names the URL)."""


def is_url(text: str | os.PathLike) -> bool:
    """Whether ``text`` is a URL (``scheme://…``) rather than a local path."""
    return "://" in str(text)


class Storage:
    """The shared storage of one ``NEUSYM_HOME`` (see the module docstring).

    ``shared``: whether ``settings.storage_url`` is set; when not, pushes and pulls do nothing and
    pulls report whether the local copy exists. Keys are POSIX paths relative to the home.
    Raises :class:`StorageError` for an unknown URL scheme (e.g. ``s3://`` without ``s3fs``).
    """

    def __init__(self, settings: Settings):
        self.home = Path(settings.home).absolute()
        self.url = (settings.storage_url or "").rstrip("/") or None
        self.shared = self.url is not None
        self.fs: Any = None
        self.root = ""
        if self.shared:
            import fsspec

            try:
                self.fs, root = fsspec.core.url_to_fs(self.url)
            except (ImportError, ValueError) as exc:
                raise StorageError(f"NEUSYM_STORAGE_URL={self.url}: cannot open this storage: {exc}") from None
            self.root = str(root).rstrip("/")
        self._local_fs = self.shared and "file" in _protocols(self.fs)

    # -- keys and URLs
    def key_of(self, local: str | os.PathLike) -> str:
        """The storage key of a path inside the home (``staging/parsed/<sha>``). Raises ValueError
        for a path outside ``NEUSYM_HOME``."""
        path = Path(local).absolute()
        try:
            return path.relative_to(self.home).as_posix()
        except ValueError:
            raise ValueError(f"{path} is not inside NEUSYM_HOME {self.home}") from None

    def local_path(self, key: str) -> Path:
        """Where ``key`` lives in this host's home."""
        return self.home / key

    def _remote(self, key: str) -> str:
        return f"{self.root}/{key.strip('/')}" if key else self.root

    def url_of(self, key: str) -> str:
        """The full URL of ``key`` (``file:///…``, ``s3://…``); the local path when not shared."""
        if not self.shared:
            return str(self.local_path(key))
        return self.fs.unstrip_protocol(self._remote(key))

    def key_of_url(self, url: str) -> str | None:
        """The key of a URL inside this storage, or None when it points elsewhere."""
        if not self.shared or not is_url(url):
            return None
        prefix = self.url_of("").rstrip("/") + "/"
        return url[len(prefix):] if url.startswith(prefix) else None

    # -- single objects
    def exists(self, key: str) -> bool:
        """Whether ``key`` exists in the storage (False when not shared)."""
        return bool(self.shared) and self._call("exists", self._remote(key))

    def read_bytes(self, key: str) -> bytes | None:
        """The object ``key``, or None when it does not exist (or the storage is not shared)."""
        if not self.shared:
            return None
        try:
            return self.fs.cat_file(self._remote(key))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"{self.url_of(key)}: cannot read: {exc}") from None

    def read_json(self, key: str) -> Any:
        """The JSON object ``key``, or None when missing or not valid JSON."""
        data = self.read_bytes(key)
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return None

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write the object ``key`` atomically (no-op when not shared)."""
        if not self.shared:
            return
        fd, tmp = tempfile.mkstemp(dir=self._scratch(), prefix="put-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            self.put_file(Path(tmp), key)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def write_json(self, key: str, data: Any) -> None:
        """Write ``data`` as the JSON object ``key`` atomically."""
        self.write_bytes(key, json.dumps(data, indent=1, sort_keys=True, default=str).encode("utf-8"))

    def put_file(self, local: Path, key: str) -> None:
        """Upload the local file ``local`` as ``key`` (atomically). Raises :class:`StorageError`."""
        remote = self._remote(key)
        parent = remote.rsplit("/", 1)[0]
        try:
            if self._local_fs:
                self.fs.makedirs(parent, exist_ok=True)
                tmp = f"{parent}/.{remote.rsplit('/', 1)[1]}.{uuid.uuid4().hex}.tmp"
                self.fs.put_file(str(local), tmp)
                os.replace(tmp, remote)  # one rename on the shared file system (NFS included)
            else:
                self.fs.put_file(str(local), remote)
        except OSError as exc:
            raise StorageError(f"{self.url_of(key)}: cannot write: {exc}") from None

    def get_file(self, key: str, local: Path) -> bool:
        """Download ``key`` to the local file ``local`` (temporary name + rename); False when the
        object does not exist. Raises :class:`StorageError` for other failures."""
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex}.part")
        try:
            self.fs.get_file(self._remote(key), str(tmp))
            os.replace(tmp, local)
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"{self.url_of(key)}: cannot download: {exc}") from None
        finally:
            tmp.unlink(missing_ok=True)

    def list_keys(self, prefix: str) -> list[str]:
        """Keys of every object under ``prefix`` (recursively), sorted; empty when absent."""
        if not self.shared:
            return []
        base = self._remote(prefix)
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return []
        root = self._remote("")
        return sorted(str(p)[len(root):].lstrip("/") for p in found
                      if not str(p).rsplit("/", 1)[-1].startswith("."))

    def delete(self, key: str) -> None:
        """Delete the object or directory ``key`` (missing is fine; no-op when not shared)."""
        if not self.shared:
            return
        try:
            self.fs.rm(self._remote(key), recursive=True)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"{self.url_of(key)}: cannot delete: {exc}") from None

    # -- files and directories of the home
    def push(self, local: str | os.PathLike) -> None:
        """Mirror a file or directory of the home to the storage (no-op when not shared).

        A directory goes data files first and its ``manifest.json`` last; dot-files (locks,
        temporaries) stay local. Raises :class:`StorageError`.
        """
        if not self.shared:
            return
        path = Path(local)
        key = self.key_of(path)
        if path.is_file():
            self.put_file(path, key)
            return
        files = sorted(p for p in path.rglob("*") if p.is_file() and not any(
            part.startswith(".") for part in p.relative_to(path).parts))
        for p in sorted(files, key=lambda p: p.name == MARKER):
            self.put_file(p, f"{key}/{p.relative_to(path).as_posix()}")

    def pull_file(self, local: str | os.PathLike) -> bool:
        """Make sure the home file ``local`` exists, downloading it from the storage when missing.
        Returns whether it exists now. For immutable files (content-addressed PDFs, quarantine
        records); use :meth:`refresh_file` for files that change."""
        path = Path(local)
        if path.is_file():
            return True
        return bool(self.shared) and self.get_file(self.key_of(path), path)

    def refresh_file(self, local: str | os.PathLike) -> bool:
        """Replace the home file ``local`` with the storage's copy when there is one (files that
        change, e.g. enrichment results). Returns whether the local file exists now."""
        path = Path(local)
        if self.shared:
            self.get_file(self.key_of(path), path)
        return path.is_file()

    def pull_dir(self, local: str | os.PathLike) -> bool:
        """Make the home directory ``local`` a complete copy of the storage's (see the module
        docstring); returns whether a complete directory (one with ``manifest.json``) is local now.
        Unchanged (same manifest) directories are not downloaded again."""
        path = Path(local)
        if not self.shared:
            return (path / MARKER).is_file()
        key = self.key_of(path)
        for _ in range(3):
            marker = self.read_bytes(f"{key}/{MARKER}")
            if marker is None:
                return (path / MARKER).is_file()
            try:
                if (path / MARKER).read_bytes() == marker:
                    return True
            except OSError:
                pass
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.pull-"))
            try:
                for k in self.list_keys(key):
                    rel = k[len(key):].lstrip("/")
                    if rel != MARKER:
                        self.get_file(k, tmp / rel)
                if self.read_bytes(f"{key}/{MARKER}") != marker:
                    continue  # re-staged while we were downloading: start again
                (tmp / MARKER).write_bytes(marker)
                replace_dir(tmp, path)
                return True
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        raise StorageError(f"{self.url_of(key)}: keeps changing while it is downloaded")

    def manifest(self, local: str | os.PathLike) -> dict | None:
        """The ``manifest.json`` of a home directory: the local copy's, else the storage's (without
        downloading the directory); None when neither exists."""
        path = Path(local)
        try:
            return json.loads((path / MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
        return self.read_json(f"{self.key_of(path)}/{MARKER}") if self.shared else None

    def fetch_url(self, url: str) -> Path:
        """A local file holding the object at ``url`` (an input PDF given by URL, or a file of this
        storage): the home copy for keys of this storage, else a cache under
        ``$NEUSYM_HOME/cache/inputs`` keyed by the URL and the object's version. Raises
        :class:`StorageError` (unreachable, missing)."""
        key = self.key_of_url(url)
        if key is not None:
            path = self.local_path(key)
            if self.pull_file(path):
                return path
            raise StorageError(f"{url}: no such object in the shared storage")
        if url.startswith("file://"):
            return Path(url[len("file://"):])
        import hashlib

        import fsspec

        try:
            fs, remote = fsspec.core.url_to_fs(url)
            version = fs.ukey(remote)
        except FileNotFoundError:
            raise StorageError(f"{url}: no such object") from None
        except (ImportError, ValueError, OSError) as exc:
            raise StorageError(f"{url}: cannot open: {exc}") from None
        digest = hashlib.sha256(f"{url}\n{version}".encode()).hexdigest()[:32]
        path = self.home / "cache" / "inputs" / digest / Path(remote).name
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
            try:
                fs.get_file(remote, str(tmp))
                os.replace(tmp, path)
            except OSError as exc:
                raise StorageError(f"{url}: cannot download: {exc}") from None
            finally:
                tmp.unlink(missing_ok=True)
        return path

    # -- helpers
    def _scratch(self) -> Path:
        path = self.home / ".scratch"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.fs, name)(*args)
        except OSError as exc:
            raise StorageError(f"{self.url}: {name} failed: {exc}") from None


def _protocols(fs: Any) -> set[str]:
    proto = fs.protocol
    return {proto} if isinstance(proto, str) else set(proto)


def replace_dir(tmp: Path, final: Path) -> None:
    """Install the complete directory ``tmp`` as ``final`` (replacing an older copy) by renames: a
    reader sees the old or the new directory, never a half-written one."""
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}-{time.monotonic_ns()}")
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


_CACHE: dict[tuple[str, str | None], Storage] = {}
_CACHE_LOCK = threading.Lock()


def storage(settings: Settings) -> Storage:
    """The :class:`Storage` of ``settings`` (one per home and URL in a process)."""
    key = (str(Path(settings.home).absolute()), settings.storage_url)
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = Storage(settings)
        return _CACHE[key]


def local_input(path_text: str, settings: Settings, source: str | None = None) -> Path:
    """A local file for an input PDF: ``path_text`` itself when it is a readable local path, the
    downloaded copy when it is a URL, else the copy of ``source`` (the PDF's URL in the shared
    store, put there by the host that found it). A missing file is returned as the plain path (the
    caller reports it). Raises :class:`StorageError` when a URL cannot be fetched."""
    if is_url(path_text):
        return storage(settings).fetch_url(path_text)
    path = Path(path_text)
    if path.is_file() or not source:
        return path
    return storage(settings).fetch_url(source)


__all__ = ["MARKER", "Storage", "StorageError", "is_url", "local_input", "storage"]
