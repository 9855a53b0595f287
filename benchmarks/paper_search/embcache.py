"""A disk cache for all-MiniLM-L6-v2 vectors keyed by text (benchmarks only: encoding 5k papers'
abstracts and sentences costs minutes on 2 cores, and every benchmark configuration reuses them)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np

DEFAULT_DIR = Path(os.environ.get("NEUSYM_BENCH_CACHE", "/tmp/neusym_bench_cache"))


class EmbeddingCache:
    """``cache(texts) -> list[list[float]]``; misses are encoded with ``neusym.encode.dense_model`` and
    appended to ``<dir>/minilm.npz`` on :meth:`save`. ``encode_seconds``/``encoded`` count the misses."""

    def __init__(self, directory: Path = DEFAULT_DIR):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.file = self.dir / "minilm.npz"
        self.vecs: dict[str, np.ndarray] = {}
        if self.file.exists():
            z = np.load(self.file)
            for k, v in zip(z["keys"], z["vecs"]):
                self.vecs[str(k)] = v
        self.encode_seconds = 0.0
        self.encoded = 0
        self._dirty = False

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    def __call__(self, texts: list[str]) -> list[list[float]]:
        keys = [self.key(t) for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts) if k not in self.vecs}.items())
        if missing:
            from neusym.encode import dense_model

            t0 = time.perf_counter()
            emb = dense_model().encode([t for _, t in missing], batch_size=32, normalize_embeddings=True,
                                       convert_to_numpy=True).astype("float32")
            self.encode_seconds += time.perf_counter() - t0
            self.encoded += len(missing)
            for (k, _), v in zip(missing, emb):
                self.vecs[k] = v
            self._dirty = True
        return [self.vecs[k].tolist() for k in keys]

    def save(self) -> None:
        if not self._dirty:
            return
        keys = np.array(list(self.vecs))
        np.savez(self.file.with_suffix(".tmp.npz"), keys=keys, vecs=np.stack([self.vecs[k] for k in keys]))
        os.replace(self.file.with_suffix(".tmp.npz"), self.file)
        self._dirty = False
