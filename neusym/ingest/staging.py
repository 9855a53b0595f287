"""Per-paper staging: the hand-off between parallel tasks and the single DuckDB/Qdrant writers.

Parallel tasks (one per PDF) never touch ``corpus.duckdb`` or the vector store. They write here:

- ``$NEUSYM_HOME/staging/parsed/<pdf_sha256>/<table>.parquet`` for each of the eight tables plus
  ``manifest.json`` (paper_id, pdf path, parser version, row counts);
- ``$NEUSYM_HOME/staging/vectors/<pdf_sha256>/<collection>.parquet`` plus ``manifest.json``;
- ``$NEUSYM_HOME/quarantine/<pdf_sha256>.json`` for a PDF that could not be parsed.

Each directory is written to a temporary sibling and renamed into place, so a reader sees either the
complete previous result or the complete new one, never a half-written one.

With ``NEUSYM_STORAGE_URL`` (workers on several hosts) every result is also pushed to the shared
storage under the same relative key (:mod:`neusym.store.storage`), and a consumer on another host
gets it with :func:`fetch_parsed` / :func:`fetch_vectors` / :func:`fetch_quarantine`, which pull
it into its own ``$NEUSYM_HOME/staging`` first. Without it they just return the local path.
"""

from __future__ import annotations

import json
import os
import tempfile
import types
import typing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from neusym.errors import StagingError
from neusym.records import TABLE_RECORDS, ParsedPaper
from neusym.settings import Settings
from neusym.store.pdfs import display_name
from neusym.store.storage import replace_dir, storage


def _arrow_type(annotation: Any) -> pa.DataType:
    """Arrow type of a record field annotation (str, int, float, bool, list[...], Optional[...])."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _arrow_type(args[0])
    if origin is list:
        return pa.list_(_arrow_type(typing.get_args(annotation)[0]))
    return {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}[annotation]


def arrow_schema(record_type: type[BaseModel]) -> pa.Schema:
    """Arrow schema with one field per record field, in declaration order."""
    return pa.schema([(name, _arrow_type(f.annotation)) for name, f in record_type.model_fields.items()])


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` via a temporary file in the same directory and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False, indent=1, default=str)
    os.replace(tmp, path)


def replace_dir_atomic(tmp_dir: Path, final_dir: Path) -> None:
    """Move a fully written ``tmp_dir`` to ``final_dir``, replacing a previous version."""
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    replace_dir(tmp_dir, final_dir)


def parsed_dir(settings: Settings, pdf_sha256: str) -> Path:
    """Staging directory of the parse result of the PDF with this sha256."""
    return settings.staging_dir / "parsed" / pdf_sha256


def vectors_dir(settings: Settings, pdf_sha256: str) -> Path:
    """Staging directory of the encoded vectors of the PDF with this sha256."""
    return settings.staging_dir / "vectors" / pdf_sha256


def fetch_parsed(settings: Settings, pdf_sha256: str) -> Path | None:
    """The local staging directory of a staged parse (pulled from the shared storage when it was
    staged on another host), or None when it was never staged."""
    path = parsed_dir(settings, pdf_sha256)
    return path if storage(settings).pull_dir(path) else None


def fetch_vectors(settings: Settings, pdf_sha256: str) -> Path | None:
    """The local staging directory of a paper's staged vectors (pulled like :func:`fetch_parsed`),
    or None when none were staged."""
    path = vectors_dir(settings, pdf_sha256)
    return path if storage(settings).pull_dir(path) else None


def staged_manifest(settings: Settings, directory: Path) -> dict | None:
    """The manifest of a staging directory: the local copy's, else the shared storage's (whichever
    host staged it), without downloading the directory; None when it was never staged."""
    return storage(settings).manifest(directory)


def read_manifest(directory: Path) -> dict | None:
    """The ``manifest.json`` of a staging directory, or None when absent/unreadable."""
    try:
        return json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def stage_parsed(paper: ParsedPaper, settings: Settings, parser_version: str, *,
                 source_path: str | None = None) -> Path:
    """Write a parsed paper as one Parquet file per table; returns the staging directory.

    The manifest records paper_id, title, ``pdf_path`` (the PDF store key), ``source_path`` (where the
    PDF was found: a path or URL, default ``pdf_path``), sha256, parser version, row counts and the
    UTC time.
    """
    sha = paper.metadata.pdf_sha256
    final = parsed_dir(settings, sha)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{sha}."))
    counts = {}
    for table, rows in paper.rows().items():
        schema = arrow_schema(TABLE_RECORDS[table])
        data = pa.Table.from_pylist([r.model_dump() for r in rows], schema=schema)
        pq.write_table(data, tmp / f"{table}.parquet")
        counts[table] = len(rows)
    manifest = {
        "paper_id": paper.paper_id,
        "title": paper.metadata.title,
        "pdf_path": paper.metadata.pdf_path,
        "source_path": source_path or paper.metadata.pdf_path,
        "pdf_sha256": sha,
        "parser_version": parser_version,
        "counts": counts,
        "staged_at": datetime.now(timezone.utc).isoformat(),
    }
    write_json_atomic(tmp / "manifest.json", manifest)
    replace_dir_atomic(tmp, final)
    storage(settings).push(final)
    return final


def load_parsed_table(directory: Path, table: str) -> list[dict]:
    """Rows of one staged table as dicts (used by the encoder). Raises StagingError when missing."""
    path = directory / f"{table}.parquet"
    try:
        return pq.read_table(path).to_pylist()
    except (OSError, pa.ArrowInvalid) as exc:
        raise StagingError(f"{path}: cannot read staged table {table!r}: {exc}") from exc


def quarantine_path(settings: Settings, pdf_sha256: str) -> Path:
    """Where the quarantine record of the PDF with this sha256 lives."""
    return settings.quarantine_dir / f"{pdf_sha256}.json"


def source_name(manifest: dict) -> str:
    """The name of a staged PDF that SQL clients may see (``quarantine.pdf_path`` of a held file):
    :func:`neusym.store.pdfs.display_name` of its ``source_path`` (older manifests: ``pdf_path``)."""
    return display_name(manifest.get("source_path") or manifest.get("pdf_path") or "")


def stage_quarantine(settings: Settings, pdf_path: Path | str, pdf_sha256: str, reason: str) -> Path:
    """Record that a PDF could not be parsed; returns the record path. The record holds the sha256,
    ``pdf_path`` (the file name SQL clients see: :func:`neusym.store.pdfs.display_name`),
    ``source_path`` (the full path or URL, for the data engineer), the reason and the UTC time."""
    path = quarantine_path(settings, pdf_sha256)
    write_json_atomic(
        path,
        {
            "pdf_sha256": pdf_sha256,
            "pdf_path": display_name(pdf_path),
            "source_path": str(pdf_path),
            "reason": reason,
            "quarantined_at": datetime.now(timezone.utc).replace(tzinfo=None).isoformat(),
        },
    )
    storage(settings).push(path)
    return path


def fetch_quarantine(settings: Settings, pdf_sha256: str) -> Path | None:
    """The local quarantine record of a PDF (pulled from the shared storage when another host
    wrote it), or None when there is none."""
    path = quarantine_path(settings, pdf_sha256)
    return path if storage(settings).pull_file(path) else None


def drop_quarantine(settings: Settings, pdf_sha256: str) -> None:
    """Remove a PDF's quarantine record here and in the shared storage (it parsed now)."""
    path = quarantine_path(settings, pdf_sha256)
    path.unlink(missing_ok=True)
    st = storage(settings)
    if st.shared:
        st.delete(st.key_of(path))


# -- the hand-offs of the pipeline's stages (local home, or the shared storage on several hosts) -----------
def staged_parse_source(settings: Settings, pdf_sha256: str, staged_dir: str | None) -> tuple[Path, dict]:
    """Where the encode stage reads the staged parse of a PDF, and its manifest: this home's
    ``staged_dir``, or with a shared storage the storage's copy (its manifest read without
    downloading the tables). The manifest is ``{}`` when there is none."""
    if storage(settings).shared:
        src = parsed_dir(settings, pdf_sha256)
        return src, staged_manifest(settings, src) or {}
    src = Path(staged_dir) if staged_dir else parsed_dir(settings, pdf_sha256)
    return src, read_manifest(src) or {}


def pull_staged_parse(settings: Settings, pdf_sha256: str, src: Path, what: str) -> dict:
    """Make the staged parse at ``src`` readable on this host (with a shared storage: download it,
    it may have been staged on another host or re-staged since) and return its manifest. Raises
    :class:`StagingError` naming ``what`` (the PDF) when the storage does not have it."""
    st = storage(settings)
    if st.shared and fetch_parsed(settings, pdf_sha256) is None:
        raise StagingError(f"{st.url_of(st.key_of(src))}: the staged parse of {what} is not in the shared storage")
    return read_manifest(src) or {}


VECTOR_SCHEMA = pa.schema([
    ("point_id", pa.string()), ("table_name", pa.string()), ("column_name", pa.string()),
    ("primary_key", pa.string()), ("paper_id", pa.string()), ("page_number", pa.int64()),
    ("text_sha", pa.string()), ("encoder_version", pa.string()),
    ("dense", pa.list_(pa.float32())), ("indices", pa.list_(pa.uint32())), ("values", pa.list_(pa.float32())),
])
"""``staging/vectors/<sha256>/cells.parquet``: one row per encodable cell of a staged paper."""


def stage_vectors(settings: Settings, pdf_sha256: str, encoded: Any, *, paper_id: str | None, encoder_version: str,
                  parse_staged_at: str | None) -> tuple[Path, dict[str, int]]:
    """Write the vectors of one paper's cells (:class:`neusym.encode.EncodedCells`) to
    ``staging/vectors/<sha256>/`` atomically (``cells.parquet`` + ``manifest.json`` with the encoder
    version and the staged parse it was made from) and push it to the shared storage; returns the
    directory and the point counts ``{"cells", "dense"}``."""
    cells, dense, sparse = encoded.cells, encoded.dense, encoded.sparse
    out = vectors_dir(settings, pdf_sha256)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{pdf_sha256}."))
    table = pa.table({
        "point_id": [c.point_id for c in cells], "table_name": [c.table_name for c in cells],
        "column_name": [c.column_name for c in cells], "primary_key": [c.primary_key for c in cells],
        "paper_id": [c.paper_id for c in cells], "page_number": [c.page_number for c in cells],
        "text_sha": [c.text_sha for c in cells], "encoder_version": [encoder_version] * len(cells),
        "dense": dense, "indices": [i for i, _ in sparse], "values": [v for _, v in sparse],
    }, schema=VECTOR_SCHEMA)
    pq.write_table(table, tmp / "cells.parquet")
    points = {"cells": len(cells), "dense": sum(1 for d in dense if d is not None)}
    write_json_atomic(tmp / "manifest.json", {
        "paper_id": paper_id, "pdf_sha256": pdf_sha256, "encoder_version": encoder_version,
        "parse_staged_at": parse_staged_at, "points": points,
    })
    replace_dir_atomic(tmp, out)
    storage(settings).push(out)
    return out, points


def staged_for_materialize(settings: Settings, results: list[Any]) -> tuple[list[Path], list[Path]]:
    """The staged parse directories and quarantine records of a run's parse results (objects with
    ``pdf_path``, ``pdf_sha256``, ``staged_dir``, ``quarantine_file``), readable on this host: with a
    shared storage they are pulled first (staged by workers on other hosts). Raises
    :class:`StagingError` naming a PDF whose staged parse the storage does not have."""
    if not storage(settings).shared:
        dirs = [Path(r.staged_dir) for r in results if r.staged_dir]
        qfiles = [Path(r.quarantine_file) for r in results if r.quarantine_file and Path(r.quarantine_file).exists()]
        return dirs, qfiles
    dirs = []
    for r in results:
        if r.staged_dir:
            d = fetch_parsed(settings, r.pdf_sha256)
            if d is None:
                raise StagingError(f"{r.pdf_path}: its staged parse is not in the shared storage {settings.storage_url}")
            dirs.append(d)
    qfiles = [q for r in results if r.quarantine_file and (q := fetch_quarantine(settings, r.pdf_sha256))]
    return dirs, qfiles

