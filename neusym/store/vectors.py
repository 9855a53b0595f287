"""The only code that opens a vector store: embedded qdrant-edge shards, or a Qdrant server by URL.

Both engines sit behind one small interface, :class:`VectorBackend` (create, upsert, delete, query,
retrieve, count, scroll, flush, close), with engine-neutral points (:class:`Point`), filters
(:class:`Filter`, :class:`Match`, :class:`Range`) and schemas (:class:`VectorSchema`):

- :class:`EdgeBackend` — a Qdrant Edge shard directory (``qdrant-edge-py``, Qdrant's in-process
  engine). Shards are created without a write-ahead log, so several processes can load the same
  shard at once: a published corpus version is never written again, and its shards are opened
  ``read_only`` by every reader (see :mod:`neusym.store.versions`). A shard is written by one
  process only, while it is being built.
- :class:`ClientBackend` — a collection reached with ``qdrant-client`` (a Qdrant server at
  ``NEUSYM_QDRANT_URL``; tests point the same code at qdrant-client's local mode because no server
  binary is available on the development machines).

Scores are Qdrant's in both engines: cosine for dense vectors, dot product with the IDF modifier
for sparse BM25 vectors, MaxSim for multivectors.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from neusym.errors import NeusymError


class VectorStoreError(NeusymError):
    """A vector store that cannot be opened or used (missing shard, busy shard, unreachable server)."""


# -------------------------------------------------------------------------------- neutral model
@dataclass(frozen=True)
class Match:
    """Payload condition: ``key`` equals ``value``, or is one of ``any``."""

    key: str
    value: Any = None
    any: tuple | None = None


@dataclass(frozen=True)
class Range:
    """Numeric payload condition on ``key`` (bounds that are None are open)."""

    key: str
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None


@dataclass(frozen=True)
class Filter:
    """Boolean combination: all of ``must``, at least one of ``should`` (when given), none of ``must_not``."""

    must: tuple = ()
    should: tuple = ()
    must_not: tuple = ()

    @staticmethod
    def all(*conditions: Any) -> "Filter":
        """A filter requiring every given condition (Nones are skipped)."""
        return Filter(must=tuple(c for c in conditions if c is not None))


@dataclass(frozen=True)
class HnswSpec:
    """HNSW graph of the dense vectors: edges per node ``m``, build candidates ``ef_construct``;
    segments below ``indexing_threshold_kb`` of vectors are scanned exactly instead."""

    m: int = 16
    ef_construct: int = 100
    full_scan_threshold_kb: int = 10_000
    indexing_threshold_kb: int = 20_000


@dataclass(frozen=True)
class VectorSchema:
    """What a collection stores.

    ``dense``: name -> dimension (cosine); ``multi``: name -> dimension (multivectors, MaxSim);
    ``sparse``: names of sparse vectors (IDF modifier); ``keyword`` / ``integer``: payload fields
    with an index; ``hnsw``: build HNSW graphs of the dense vectors (None = always exact scans);
    ``int8``: keep an int8 scalar-quantized copy of the dense vectors in memory (searches use it
    and rescore with the originals); ``vectors_on_disk``: leave the original dense vectors on disk
    (memory-mapped, read on demand).
    """

    dense: dict[str, int] = field(default_factory=dict)
    multi: dict[str, int] = field(default_factory=dict)
    sparse: tuple[str, ...] = ()
    keyword: tuple[str, ...] = ()
    integer: tuple[str, ...] = ()
    hnsw: HnswSpec | None = None
    int8: bool = False
    vectors_on_disk: bool = False
    indexes_on_disk: bool = False
    """Keep the HNSW graph, the int8 vectors, the sparse index, the payload indexes and the id tracker
    memory-mapped (read on demand) instead of reading them into RAM at open: reopen in a fraction of
    the time, lower RSS, slower first queries (qdrant-edge only; ``benchmarks/results/scale.json``)."""


@dataclass
class Point:
    """One point: ``id`` (UUID string), ``vectors`` {name: dense list | (indices, values) | list of
    dense lists}, ``payload``."""

    id: str
    vectors: dict[str, Any]
    payload: dict


@dataclass
class QuerySpec:
    """One nearest-neighbour request: the named vector ``using``, the query ``vector`` (dense list,
    ``(indices, values)`` for sparse, list of dense lists for multivectors), ``filter``, ``limit``,
    ``with_payload`` (True, False or a list of fields)."""

    using: str
    vector: Any
    filter: Filter | None = None
    limit: int = 10
    with_payload: bool | list[str] = True


@dataclass
class Hit:
    """A search result: point id, score (higher is better) and the requested payload."""

    id: str
    score: float
    payload: dict


@dataclass
class Record:
    """A point read back: id, payload (requested fields) and vectors (requested names)."""

    id: str
    payload: dict
    vectors: dict


class VectorBackend(ABC):
    """Interface of one collection in one engine (see the module docstring); an engine implements
    every abstract method."""

    engine = "abstract"
    read_only = False

    @abstractmethod
    def exists(self) -> bool:
        """See the module docstring."""

    @abstractmethod
    def create(self, schema: VectorSchema) -> None:
        """See the module docstring."""

    @abstractmethod
    def upsert(self, points: Sequence[Point]) -> None:
        """See the module docstring."""

    @abstractmethod
    def delete(self, ids: Sequence[str]) -> None:
        """See the module docstring."""

    @abstractmethod
    def query(self, requests: Sequence[QuerySpec]) -> list[list[Hit]]:
        """See the module docstring."""

    @abstractmethod
    def retrieve(self, ids: Sequence[str], *, payload: bool | list[str] = True,
                 vectors: bool | list[str] = False) -> list[Record]:
        """See the module docstring."""

    @abstractmethod
    def count(self, flt: Filter | None = None) -> int:
        """See the module docstring."""

    @abstractmethod
    def scroll(self, flt: Filter | None = None, *, payload: bool | list[str] = True,
               vectors: bool | list[str] = False, batch: int = 1024) -> Iterator[Record]:
        """See the module docstring."""

    def flush(self) -> None:
        """Make every write durable."""

    def optimize(self) -> None:
        """Build indexes / merge segments now (a no-op where the engine does it by itself)."""

    def close(self) -> None:
        """Release the collection (files, connections)."""

    def _check_writable(self) -> None:
        if self.read_only:
            raise VectorStoreError(f"{self.engine} collection opened read-only: a published version is never written")

    def __enter__(self) -> "VectorBackend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---------------------------------------------------------------------------------------- edge
def _load_edge(E: Any, path: Path, wait_s: float) -> Any:
    deadline = time.monotonic() + max(wait_s, 0.0)
    while True:
        try:
            return E.EdgeShard.load(str(path))
        except Exception as exc:  # qdrant-edge raises a plain Exception("... WouldBlock ...")
            if "WouldBlock" not in str(exc):
                raise VectorStoreError(f"cannot open the vector shard {path}: {str(exc).splitlines()[0]}") from None
            if time.monotonic() >= deadline:
                raise VectorStoreError(
                    f"the vector shard {path} is being written by another process (it has a write-ahead log "
                    f"lock); waited {wait_s:.0f} s") from None
            time.sleep(0.2)


class EdgeBackend(VectorBackend):
    """A Qdrant Edge shard in directory ``path`` (see the module docstring).

    ``read_only``: refuse every write (what readers of a published version use; the shard itself
    has no write-ahead log, so any number of processes may load it). Opening an existing shard
    costs well under a second (``benchmarks/results/scale.json``). ``wait_s``: how long to wait
    when the directory holds an old shard with a write-ahead log that another process has open.
    Raises :class:`VectorStoreError` when an existing shard cannot be loaded.
    """

    engine = "qdrant-edge"

    def __init__(self, path: str | Path, *, read_only: bool = False, wait_s: float = 0.0):
        import qdrant_edge as E

        self.E = E
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.Lock()
        self.shard = None
        if self.path.is_dir() and (self.path / "edge_config.json").is_file():
            self.shard = _load_edge(E, self.path, wait_s)

    def exists(self) -> bool:
        return self.shard is not None

    def _need(self) -> Any:
        if self.shard is None:
            raise VectorStoreError(f"no vector shard at {self.path}")
        return self.shard

    def create(self, schema: VectorSchema) -> None:
        self._check_writable()
        if self.shard is not None:
            return
        E = self.E
        cold = E.Memory.Cold if schema.indexes_on_disk else None
        quant = (E.ScalarQuantizationConfig(E.ScalarType.Int8, quantile=0.99, memory=cold or E.Memory.Cached)
                 if schema.int8 else None)
        hnsw = None
        if schema.hnsw is not None:
            hnsw = E.HnswIndexConfig(m=schema.hnsw.m, ef_construct=schema.hnsw.ef_construct,
                                     full_scan_threshold=schema.hnsw.full_scan_threshold_kb, memory=cold)
        memory = E.Memory.Cold if schema.vectors_on_disk else None
        vectors = {name: E.EdgeVectorParams(size=dim, distance=E.Distance.Cosine, quantization_config=quant,
                                            hnsw_config=hnsw, memory=memory)
                   for name, dim in schema.dense.items()}
        multi = E.MultiVectorConfig(E.MultiVectorComparator.MaxSim)
        vectors.update({name: E.EdgeVectorParams(size=dim, distance=E.Distance.Cosine, multivector_config=multi)
                        for name, dim in schema.multi.items()})
        threshold = schema.hnsw.indexing_threshold_kb if schema.hnsw is not None else 2_000_000_000
        cfg = E.EdgeConfig(
            vectors=vectors,
            sparse_vectors={name: E.EdgeSparseVectorParams(modifier=E.Modifier.Idf, memory=cold) for name in schema.sparse},
            optimizers=E.EdgeOptimizersConfig(indexing_threshold=threshold),
            wal_enabled=False,
            id_tracker_memory=cold,
        )
        self.path.mkdir(parents=True, exist_ok=True)
        self.shard = E.EdgeShard.create(str(self.path), cfg)
        for name in schema.keyword:
            params = E.KeywordIndexParams(memory=cold) if cold else E.PayloadSchemaType.Keyword
            self.shard.update(E.UpdateOperation.create_field_index(name, params))
        for name in schema.integer:
            params = (E.IntegerIndexParams(lookup=True, range=True, memory=cold) if cold
                      else E.PayloadSchemaType.Integer)
            self.shard.update(E.UpdateOperation.create_field_index(name, params))

    # -- conversions
    def _condition(self, c: Any) -> Any:
        E = self.E
        if isinstance(c, Filter):
            return self._filter(c)
        if isinstance(c, Match):
            if c.any is not None:
                return E.FieldCondition(key=c.key, match=E.MatchAny(list(c.any)))
            return E.FieldCondition(key=c.key, match=E.MatchValue(c.value))
        if isinstance(c, Range):
            return E.FieldCondition(key=c.key, range=E.RangeFloat(gte=c.gte, gt=c.gt, lte=c.lte, lt=c.lt))
        raise TypeError(f"unknown filter condition {c!r}")

    def _filter(self, f: Filter | None) -> Any:
        if f is None:
            return None
        E = self.E
        return E.Filter(must=[self._condition(c) for c in f.must] or None,
                        should=[self._condition(c) for c in f.should] or None,
                        must_not=[self._condition(c) for c in f.must_not] or None)

    def _vector(self, value: Any) -> Any:
        if isinstance(value, tuple):
            return self.E.SparseVector(list(value[0]), list(value[1]))
        return value

    @staticmethod
    def _selector(E: Any, payload: bool | list[str]) -> Any:
        return E.PayloadSelector.Include(list(payload)) if isinstance(payload, list) else payload

    def upsert(self, points: Sequence[Point]) -> None:
        self._check_writable()
        if not points:
            return
        E = self.E
        pts = [E.Point(p.id, {k: self._vector(v) for k, v in p.vectors.items()
                              if v is not None and not (isinstance(v, tuple) and not v[0])}, p.payload)
               for p in points]
        with self._lock:
            self._need().update(E.UpdateOperation.upsert_points(pts))

    def delete(self, ids: Sequence[str]) -> None:
        self._check_writable()
        if ids:
            with self._lock:
                self._need().update(self.E.UpdateOperation.delete_points(list(ids)))

    def query(self, requests: Sequence[QuerySpec]) -> list[list[Hit]]:
        if not requests:
            return []
        E = self.E
        reqs = [E.QueryRequest(limit=r.limit, query=E.Query.Nearest(self._vector(r.vector), using=r.using),
                               filter=self._filter(r.filter), with_payload=self._selector(E, r.with_payload))
                for r in requests]
        shard = self._need()
        res = shard.query_batch(E.QueryBatchRequest(reqs)) if len(reqs) > 1 else [shard.query(reqs[0])]
        return [[Hit(str(p.id), p.score, dict(p.payload) if p.payload else {}) for p in r] for r in res]

    def retrieve(self, ids: Sequence[str], *, payload: bool | list[str] = True,
                 vectors: bool | list[str] = False) -> list[Record]:
        if not ids:
            return []
        E = self.E
        recs = self._need().retrieve(list(ids), with_payload=self._selector(E, payload), with_vector=vectors)
        return [Record(str(r.id), dict(r.payload or {}), _edge_vectors(r.vector)) for r in recs]

    def count(self, flt: Filter | None = None) -> int:
        return int(self._need().count(self.E.CountRequest(exact=True, filter=self._filter(flt))))

    def scroll(self, flt: Filter | None = None, *, payload: bool | list[str] = True,
               vectors: bool | list[str] = False, batch: int = 1024) -> Iterator[Record]:
        E = self.E
        shard = self._need()
        offset = None
        while True:
            recs, offset = shard.scroll(E.ScrollRequest(offset=offset, limit=batch, filter=self._filter(flt),
                                                        with_payload=self._selector(E, payload), with_vector=vectors))
            for r in recs:
                yield Record(str(r.id), dict(r.payload or {}), _edge_vectors(r.vector))
            if offset is None or not recs:
                return

    def flush(self) -> None:
        if self.shard is not None and not self.read_only:
            self.shard.flush()

    def optimize(self) -> None:
        self._check_writable()
        if self.shard is not None:
            self.shard.optimize()

    def info(self) -> dict:
        """Segments, points and indexed vectors of the shard."""
        i = self._need().info()
        return {"segments": i.segments_count, "points": i.points_count, "indexed_vectors": i.indexed_vectors_count}

    def close(self) -> None:
        if self.shard is not None:
            if not self.read_only:
                self.shard.flush()
            self.shard.close()
            self.shard = None


def _edge_vectors(vector: Any) -> dict:
    if not isinstance(vector, dict):
        return {}
    return {name: (list(v.indices), list(v.values)) if hasattr(v, "indices") else v for name, v in vector.items()}


# --------------------------------------------------------------------------------------- client
class ClientBackend(VectorBackend):
    """A Qdrant collection through ``qdrant-client`` (a server; local mode in tests).

    ``client``: a ``QdrantClient``; ``collection``: its name; ``owns``: close the client on
    :meth:`close`; ``read_only``: refuse writes.
    """

    engine = "qdrant-client"

    def __init__(self, client: Any, collection: str, *, owns: bool = False, read_only: bool = False):
        from qdrant_client import models

        self.client = client
        self.models = models
        self.collection = collection
        self.owns = owns
        self.read_only = read_only

    @property
    def _local(self) -> bool:
        return getattr(self.client, "_client", None).__class__.__name__ == "QdrantLocal"

    def exists(self) -> bool:
        return bool(self.client.collection_exists(self.collection))

    def create(self, schema: VectorSchema) -> None:
        self._check_writable()
        if self.exists():
            return
        M = self.models
        quant = (M.ScalarQuantization(scalar=M.ScalarQuantizationConfig(type=M.ScalarType.INT8, quantile=0.99,
                                                                         always_ram=True))
                 if schema.int8 else None)
        hnsw = (M.HnswConfigDiff(m=schema.hnsw.m, ef_construct=schema.hnsw.ef_construct,
                                 full_scan_threshold=schema.hnsw.full_scan_threshold_kb)
                if schema.hnsw is not None else None)
        vectors = {name: M.VectorParams(size=dim, distance=M.Distance.COSINE, quantization_config=quant,
                                        hnsw_config=hnsw, on_disk=schema.vectors_on_disk or None)
                   for name, dim in schema.dense.items()}
        multi = M.MultiVectorConfig(comparator=M.MultiVectorComparator.MAX_SIM)
        vectors.update({name: M.VectorParams(size=dim, distance=M.Distance.COSINE, multivector_config=multi)
                        for name, dim in schema.multi.items()})
        self.client.create_collection(
            self.collection, vectors_config=vectors,
            sparse_vectors_config={name: M.SparseVectorParams(modifier=M.Modifier.IDF) for name in schema.sparse},
        )
        if not self._local:  # local mode has no payload indexes
            for name in schema.keyword:
                self.client.create_payload_index(self.collection, name, M.PayloadSchemaType.KEYWORD)
            for name in schema.integer:
                self.client.create_payload_index(self.collection, name, M.PayloadSchemaType.INTEGER)

    def _condition(self, c: Any) -> Any:
        M = self.models
        if isinstance(c, Filter):
            return self._filter(c)
        if isinstance(c, Match):
            if c.any is not None:
                return M.FieldCondition(key=c.key, match=M.MatchAny(any=list(c.any)))
            return M.FieldCondition(key=c.key, match=M.MatchValue(value=c.value))
        if isinstance(c, Range):
            return M.FieldCondition(key=c.key, range=M.Range(gt=c.gt, gte=c.gte, lt=c.lt, lte=c.lte))
        raise TypeError(f"unknown filter condition {c!r}")

    def _filter(self, f: Filter | None) -> Any:
        if f is None:
            return None
        M = self.models
        return M.Filter(must=[self._condition(c) for c in f.must] or None,
                        should=[self._condition(c) for c in f.should] or None,
                        must_not=[self._condition(c) for c in f.must_not] or None)

    def _vector(self, value: Any) -> Any:
        if isinstance(value, tuple):
            return self.models.SparseVector(indices=list(value[0]), values=list(value[1]))
        return value

    def upsert(self, points: Sequence[Point]) -> None:
        self._check_writable()
        if not points:
            return
        M = self.models
        pts = [M.PointStruct(id=p.id, payload=p.payload,
                             vector={k: self._vector(v) for k, v in p.vectors.items()
                                     if v is not None and not (isinstance(v, tuple) and not v[0])})
               for p in points]
        self.client.upsert(self.collection, points=pts, wait=True)

    def delete(self, ids: Sequence[str]) -> None:
        self._check_writable()
        if ids:
            self.client.delete(self.collection, points_selector=self.models.PointIdsList(points=list(ids)), wait=True)

    def query(self, requests: Sequence[QuerySpec]) -> list[list[Hit]]:
        if not requests:
            return []
        M = self.models
        reqs = [M.QueryRequest(query=self._vector(r.vector), using=r.using, filter=self._filter(r.filter),
                               limit=r.limit, with_payload=r.with_payload) for r in requests]
        res = self.client.query_batch_points(self.collection, requests=reqs)
        return [[Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in r.points] for r in res]

    def retrieve(self, ids: Sequence[str], *, payload: bool | list[str] = True,
                 vectors: bool | list[str] = False) -> list[Record]:
        if not ids:
            return []
        recs = self.client.retrieve(self.collection, ids=list(ids), with_payload=payload, with_vectors=vectors)
        return [Record(str(r.id), dict(r.payload or {}), _client_vectors(r.vector)) for r in recs]

    def count(self, flt: Filter | None = None) -> int:
        return int(self.client.count(self.collection, count_filter=self._filter(flt), exact=True).count)

    def scroll(self, flt: Filter | None = None, *, payload: bool | list[str] = True,
               vectors: bool | list[str] = False, batch: int = 1024) -> Iterator[Record]:
        offset = None
        while True:
            recs, offset = self.client.scroll(self.collection, scroll_filter=self._filter(flt), limit=batch,
                                              offset=offset, with_payload=payload, with_vectors=vectors)
            for r in recs:
                yield Record(str(r.id), dict(r.payload or {}), _client_vectors(r.vector))
            if offset is None or not recs:
                return

    def drop(self) -> None:
        """Delete the whole collection (server-mode versions that were pruned)."""
        self._check_writable()
        if self.exists():
            self.client.delete_collection(self.collection)

    def close(self) -> None:
        if self.owns:
            self.client.close()


def _client_vectors(vector: Any) -> dict:
    if not isinstance(vector, dict):
        return {}
    out = {}
    for name, v in vector.items():
        if hasattr(v, "indices"):
            out[name] = (list(v.indices), list(v.values))
        else:
            out[name] = v
    return out


def qdrant_client(url: str, api_key: str | None = None) -> Any:
    """A ``QdrantClient`` for a server URL (60 s timeout)."""
    from qdrant_client import QdrantClient

    return QdrantClient(url=url, api_key=api_key, timeout=60)


__all__ = [
    "ClientBackend",
    "EdgeBackend",
    "Filter",
    "Hit",
    "HnswSpec",
    "Match",
    "Point",
    "QuerySpec",
    "Range",
    "Record",
    "VectorBackend",
    "VectorSchema",
    "VectorStoreError",
    "qdrant_client",
]
