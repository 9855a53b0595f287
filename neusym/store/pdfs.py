"""The content-addressed PDF store: the bytes of every PDF the corpus was parsed from.

Every parsed PDF is kept under ``$NEUSYM_HOME/pdfs/sha256/<sha256>.pdf`` (the same key in the shared
storage, where crawled downloads and inputs found on other hosts already go), and
``metadata.pdf_path`` holds that key, relative to the home: ``pdfs/sha256/<sha256>.pdf``. So

- readers (page images, ViewImage, figure OCR) read the stored bytes, not the file a user once
  ingested: the original may move or vanish (a temporary folder) and its page images still render;
- a byte-identical copy ingested from elsewhere is the same key, so it never repoints a stored paper;
- no absolute server path is shown to SQL clients (``metadata``, ``downloads`` and ``quarantine``
  hold keys or file names; the folder a PDF was found in stays in the staging manifest and the
  ingest report, for the data engineer).

A local input is hard-linked into the store when it is on the same file system (no second copy on
disk), else copied; either way through a temporary name and one rename, so the store never holds a
partial file. Corpora built before the store hold absolute paths in ``metadata.pdf_path``;
:func:`pdf_file` still resolves those.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from neusym.settings import Settings
from neusym.store.storage import is_url, storage

STORE_DIR = "pdfs/sha256"
"""Folder of the store, relative to ``NEUSYM_HOME`` (and to the shared storage's root)."""


def pdf_key(sha256: str) -> str:
    """The store key of the PDF with this sha256 (``pdfs/sha256/<sha256>.pdf``). Raises ValueError
    for anything but 64 hex digits (a key is never built from untrusted text)."""
    text = str(sha256 or "").lower()
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise ValueError(f"not a sha256 hex digest: {sha256!r}")
    return f"{STORE_DIR}/{text}.pdf"


def store_dir(settings: Settings) -> Path:
    """The store's folder in this home (skipped when PDFs are discovered in the home's inbox)."""
    return Path(settings.home).absolute() / STORE_DIR


def store_pdf(settings: Settings, path: Path, sha256: str) -> str:
    """Keep the file ``path`` (whose bytes hash to ``sha256``) in the store; returns its key.

    Idempotent: an existing stored file of that key is kept as it is. The file is hard-linked when
    possible, else copied, under a temporary name renamed into place; with a shared storage it is
    also pushed there (uploaded once). Raises OSError when the file cannot be read or the home
    written, :class:`neusym.store.storage.StorageError` when the shared storage cannot be written.
    """
    key = pdf_key(sha256)
    final = Path(settings.home).absolute() / key
    if not final.is_file():
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=final.parent, prefix=f".{sha256[:16]}.", suffix=".part")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            tmp.unlink()
            try:
                os.link(path, tmp)
            except OSError:  # another file system, or links not allowed: a copy
                shutil.copyfile(path, tmp)
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
    st = storage(settings)
    if st.shared and not st.exists(key):
        st.put_file(final, key)
    return key


def share_pdf(settings: Settings, path: Path, sha256: str) -> str | None:
    """Put a found input PDF into the shared storage's PDF store (uploaded only when not there yet),
    so a parse task on any host can read it; returns its URL there, or None on one machine (no
    ``NEUSYM_STORAGE_URL``: the parse reads the file where it was found). Raises
    :class:`neusym.store.storage.StorageError` when the storage cannot be written."""
    st = storage(settings)
    if not st.shared:
        return None
    key = pdf_key(sha256)
    if not st.exists(key):
        st.put_file(Path(path), key)
    return st.url_of(key)


def pdf_file(settings: Settings, pdf_path: str | None) -> Path | None:
    """The local file of a ``metadata.pdf_path`` value, or None when it is not on this host.

    A store key (``pdfs/sha256/<sha>.pdf``) is looked up in the home and, with a shared storage,
    downloaded from it when missing; an absolute path (a corpus built before the store) is used as
    it is when the file exists. Never raises for a missing file; a key that leaves the home
    (``..``) resolves to None.
    """
    if not pdf_path or is_url(pdf_path):
        return None
    path = Path(pdf_path)
    if path.is_absolute():
        return path if path.is_file() else None
    home = Path(settings.home).absolute()
    local = (home / path).resolve()
    if not local.is_relative_to(home.resolve()):
        return None
    if local.is_file():
        return local
    try:
        return local if storage(settings).pull_file(home / path) else None
    except Exception:  # noqa: BLE001 - an unreachable storage means "not on this host"
        return None


def display_name(path_or_url: str | os.PathLike) -> str:
    """How a found PDF is named where SQL clients can read it (``quarantine.pdf_path``): the file
    name of a local path or ``file://`` URL (no server folders), a remote URL as it is."""
    text = str(path_or_url)
    if is_url(text) and not text.startswith("file://"):
        return text
    return Path(text.removeprefix("file://")).name or text


__all__ = ["STORE_DIR", "display_name", "pdf_file", "pdf_key", "share_pdf", "store_dir", "store_pdf"]
