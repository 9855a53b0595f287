"""The vector store: Qdrant, embedded (local mode, no server) by default, a server when configured.

``VectorStore(settings)`` opens ``QdrantClient(path=$NEUSYM_HOME/qdrant)`` unless
``NEUSYM_QDRANT_URL`` is set, in which case the very same code talks to that server. Local mode
holds a file lock: one process at a time (the DAG's single publish task, or one ``neusym ask``).

Each point is one database cell (see :mod:`neusym.encode`); its payload is
``text, table_name, column_name, primary_key, paper_id, page_number`` plus ``pdf_sha256`` and
``encoder_version`` used to skip unchanged papers on re-runs.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Sequence

from qdrant_client import QdrantClient, models

from .encode import (
    BM25_COLLECTION,
    DENSE_COLLECTION,
    DENSE_DIM,
    ENCODABLE_COLUMNS,
    bm25_query_vector,
    dense_vectors,
)
from .errors import ActionError
from .settings import Settings

COLLECTIONS = {
    BM25_COLLECTION: "BM25 sparse vectors of every encodable text cell (keyword match, metric: inner product with IDF).",
    DENSE_COLLECTION: "all-MiniLM-L6-v2 384-d embeddings of every encodable text cell (semantic match, metric: cosine).",
}
PAYLOAD_FIELDS = ("table_name", "column_name", "primary_key", "paper_id", "page_number")
_FILTER_FIELDS = {"paper_id": "paper_id", "pdf_id": "paper_id", "page_number": "page_number",
                  "primary_key": "primary_key", "table_name": "table_name", "column_name": "column_name"}


@dataclass
class PointBatch:
    """Points of one collection ready to upsert: ids, payloads and either dense or sparse vectors."""

    collection: str
    ids: list[str]
    payloads: list[dict]
    dense: list[list[float]] | None = None
    sparse: list[tuple[list[int], list[float]]] | None = None


class VectorStore:
    """Qdrant access for publishing points and similarity search (local mode or server)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        if settings.qdrant_url:
            self.client = QdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key, timeout=60)
        else:
            settings.qdrant_path.mkdir(parents=True, exist_ok=True)
            self.client = QdrantClient(path=str(settings.qdrant_path))

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Release the client (and the local-mode file lock)."""
        self.client.close()

    def __enter__(self) -> "VectorStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def ensure_collections(self) -> None:
        """Create the two text collections (and payload indexes on a server) when missing."""
        if not self.client.collection_exists(BM25_COLLECTION):
            self.client.create_collection(
                BM25_COLLECTION,
                vectors_config={},
                sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)},
            )
            self._index_payload(BM25_COLLECTION)
        if not self.client.collection_exists(DENSE_COLLECTION):
            self.client.create_collection(
                DENSE_COLLECTION,
                vectors_config=models.VectorParams(size=DENSE_DIM, distance=models.Distance.COSINE),
            )
            self._index_payload(DENSE_COLLECTION)

    def _index_payload(self, collection: str) -> None:
        if not self.settings.qdrant_url:  # local mode has no payload indexes
            return
        for field in ("table_name", "column_name", "primary_key", "paper_id", "pdf_sha256"):
            self.client.create_payload_index(collection, field, models.PayloadSchemaType.KEYWORD)
        self.client.create_payload_index(collection, "page_number", models.PayloadSchemaType.INTEGER)

    # ------------------------------------------------------------------ publishing
    def paper_state(self, collection: str, paper_id: str,
                    exclude_columns: Sequence[str] = ()) -> tuple[set[str], set[tuple[str, str]]]:
        """Point ids of a paper in a collection, and the distinct (pdf_sha256, encoder_version) they carry.

        Points whose ``column_name`` is in ``exclude_columns`` are not counted (e.g. the enriched
        columns, whose points :mod:`neusym.enrich` owns).
        """
        ids: set[str] = set()
        versions: set[tuple[str, str]] = set()
        offset = None
        flt = models.Filter(
            must=[models.FieldCondition(key="paper_id", match=models.MatchValue(value=paper_id))],
            must_not=[models.FieldCondition(key="column_name", match=models.MatchAny(any=list(exclude_columns)))]
            if exclude_columns else None,
        )
        while True:
            points, offset = self.client.scroll(
                collection, scroll_filter=flt, limit=1024, offset=offset,
                with_payload=["pdf_sha256", "encoder_version"], with_vectors=False,
            )
            for p in points:
                ids.add(str(p.id))
                versions.add((p.payload.get("pdf_sha256"), p.payload.get("encoder_version")))
            if offset is None:
                return ids, versions

    def upsert_batch(self, batch: PointBatch) -> int:
        """Upsert the points of ``batch`` (in slices of ``settings.qdrant_upsert_batch``); returns the count."""
        step = self.settings.qdrant_upsert_batch
        for start in range(0, len(batch.ids), step):
            end = start + step
            if batch.sparse is not None:
                vectors: list = [{"bm25": models.SparseVector(indices=i, values=v)} for i, v in batch.sparse[start:end]]
            else:
                vectors = batch.dense[start:end]
            points = [models.PointStruct(id=i, vector=v, payload=p)
                      for i, v, p in zip(batch.ids[start:end], vectors, batch.payloads[start:end])]
            self.client.upsert(batch.collection, points=points, wait=True)
        return len(batch.ids)

    def replace_paper_points(self, batch: PointBatch, paper_id: str, exclude_columns: Sequence[str] = ()) -> dict:
        """Make the paper's points in ``batch.collection`` exactly ``batch``: upsert, then delete stale ids.

        Points of ``exclude_columns`` are neither compared nor deleted. Returns
        ``{"upserted": n, "deleted": n}``. Re-running with the same batch changes nothing.
        """
        existing, _ = self.paper_state(batch.collection, paper_id, exclude_columns)
        self.upsert_batch(batch)
        stale = sorted(existing - set(batch.ids))
        if stale:
            self.client.delete(batch.collection, points_selector=models.PointIdsList(points=stale), wait=True)
        return {"upserted": len(batch.ids), "deleted": len(stale)}

    def count(self, collection: str, **match: Any) -> int:
        """Number of points in a collection, optionally restricted by exact payload matches."""
        flt = _match_filter(match) if match else None
        return self.client.count(collection, count_filter=flt, exact=True).count

    # ------------------------------------------------------------------ search
    def search(
        self,
        query: str,
        collection_name: str,
        table_name: str,
        column_name: str,
        filter: str = "",
        limit: int = 5,
    ) -> list[dict]:
        """Top-``limit`` cells of (table_name, column_name) most similar to ``query`` in a collection.

        Returns dicts ``score, text, table_name, column_name, primary_key, paper_id, page_number``,
        best first. ``filter`` uses the grammar of :func:`parse_filter`. Raises :class:`ActionError`
        for an unknown collection, a non-encodable (table, column), a bad filter or limit.
        """
        if collection_name not in COLLECTIONS:
            raise ActionError(f"unknown collection {collection_name!r}; use one of {sorted(COLLECTIONS)}")
        if (table_name, column_name) not in ENCODABLE_COLUMNS:
            pairs = ", ".join(f"{t}.{c}" for t, c in ENCODABLE_COLUMNS)
            raise ActionError(f"{table_name}.{column_name} is not encodable; encodable columns: {pairs}")
        if not isinstance(limit, int) or limit < 1:
            raise ActionError(f"limit must be a positive integer, got {limit!r}")
        limit = min(limit, 50)
        flt = parse_filter(filter)
        must = [
            models.FieldCondition(key="table_name", match=models.MatchValue(value=table_name)),
            models.FieldCondition(key="column_name", match=models.MatchValue(value=column_name)),
        ]
        full = models.Filter(must=must + ([flt] if flt else []))
        if not self.client.collection_exists(collection_name):
            return []
        if collection_name == BM25_COLLECTION:
            indices, values = bm25_query_vector(query)
            if not indices:
                return []
            q: Any = models.SparseVector(indices=indices, values=values)
            using = "bm25"
        else:
            q = dense_vectors([query])[0]
            using = None
        res = self.client.query_points(
            collection_name, query=q, using=using, query_filter=full, limit=limit, with_payload=True
        )
        return [
            {"score": round(float(p.score), 4), "text": p.payload.get("text"),
             **{k: p.payload.get(k) for k in PAYLOAD_FIELDS}}
            for p in res.points
        ]

    def collections_prompt(self) -> str:
        """The vectorstore schema shown to the agent: collections, fields, encodable pairs, filter grammar."""
        lines = ["Collections (every point is one cell of the database):"]
        for name, desc in COLLECTIONS.items():
            lines.append(f"- {name}: {desc}")
        lines.append("Fields of every point: text (the cell value), table_name, column_name, primary_key "
                     "(primary key value of the row), paper_id, page_number (NULL for metadata).")
        lines.append("Encodable (table_name, column_name) pairs: "
                     + ", ".join(f"({t}, {c})" for t, c in ENCODABLE_COLUMNS))
        lines.append("Filter grammar: comparisons on paper_id, page_number, primary_key with ==, !=, <, <=, >, >=, "
                     "in [..], not in [..], combined with and / or / not and parentheses, e.g. "
                     "\"paper_id == '...' and page_number <= 3\".")
        return "\n".join(lines)


def _match_filter(match: dict) -> models.Filter:
    return models.Filter(must=[models.FieldCondition(key=k, match=models.MatchValue(value=v)) for k, v in match.items()])


def _normalise_filter_text(text: str) -> str:
    text = re.sub(r"&&", " and ", text)
    text = re.sub(r"\|\|", " or ", text)
    # SQL-style single '=' -> '=='
    return re.sub(r"(?<![=!<>])=(?!=)", "==", text)


def parse_filter(text: str) -> models.Filter | None:
    """Translate a Milvus/Python-style filter expression into a Qdrant filter (no code is evaluated).

    Grammar: ``FIELD OP VALUE`` with FIELD in paper_id (alias pdf_id), page_number, primary_key,
    table_name, column_name; OP in ``== != < <= > >=`` or ``in`` / ``not in`` with a list; combined by
    ``and``, ``or``, ``not`` and parentheses. ``=``, ``&&`` and ``||`` are accepted as aliases.
    Raises :class:`ActionError` on anything else. Empty text gives None.
    """
    if not text or not text.strip():
        return None
    try:
        tree = ast.parse(_normalise_filter_text(text.strip()), mode="eval").body
    except SyntaxError as exc:
        raise ActionError(f"filter {text!r} is not valid: {exc.msg}") from exc
    return _to_filter(tree, text)


def _literal(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e, text) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value
    raise ActionError(f"filter {text!r}: expected a string, number or list, got {ast.dump(node)[:60]}")


def _condition(field: str, op: ast.cmpop, value: Any, text: str) -> models.Filter:
    key = _FILTER_FIELDS[field]
    fc = models.FieldCondition
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(value, list):
            raise ActionError(f"filter {text!r}: 'in' needs a list")
        values = [str(v) if key != "page_number" else int(v) for v in value]
        cond = fc(key=key, match=models.MatchAny(any=values))
        return models.Filter(must_not=[cond]) if isinstance(op, ast.NotIn) else models.Filter(must=[cond])
    if isinstance(value, list):
        raise ActionError(f"filter {text!r}: a list needs 'in'")
    if isinstance(op, (ast.Eq, ast.NotEq)):
        v = int(value) if key == "page_number" else str(value)
        cond = fc(key=key, match=models.MatchValue(value=v))
        return models.Filter(must_not=[cond]) if isinstance(op, ast.NotEq) else models.Filter(must=[cond])
    if key != "page_number" or not isinstance(value, (int, float)):
        raise ActionError(f"filter {text!r}: <, <=, >, >= only apply to page_number with a number")
    bound = {ast.Lt: "lt", ast.LtE: "lte", ast.Gt: "gt", ast.GtE: "gte"}[type(op)]
    return models.Filter(must=[fc(key=key, range=models.Range(**{bound: value}))])


def _to_filter(node: ast.AST, text: str) -> models.Filter:
    if isinstance(node, ast.BoolOp):
        parts = [_to_filter(v, text) for v in node.values]
        return models.Filter(must=parts) if isinstance(node.op, ast.And) else models.Filter(should=parts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return models.Filter(must_not=[_to_filter(node.operand, text)])
    if isinstance(node, ast.Compare):
        parts = []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            if isinstance(left, ast.Name) and left.id in _FILTER_FIELDS:
                parts.append(_condition(left.id, op, _literal(right, text), text))
            elif isinstance(right, ast.Name) and right.id in _FILTER_FIELDS and not isinstance(op, (ast.In, ast.NotIn)):
                flipped = {ast.Lt: ast.Gt(), ast.LtE: ast.GtE(), ast.Gt: ast.Lt(), ast.GtE: ast.LtE()}.get(type(op), op)
                parts.append(_condition(right.id, flipped, _literal(left, text), text))
            else:
                raise ActionError(f"filter {text!r}: comparisons need one of the fields {sorted(_FILTER_FIELDS)}")
            left = right
        return parts[0] if len(parts) == 1 else models.Filter(must=parts)
    raise ActionError(f"filter {text!r}: unsupported expression; use comparisons joined by and/or/not")


def batches_from_rows(rows: Sequence[dict], collection: str) -> PointBatch:
    """A PointBatch from staged vector rows (``point_id``, payload fields, ``dense`` or ``indices``/``values``)."""
    ids = [r["point_id"] for r in rows]
    payloads = [{k: r[k] for k in ("text", *PAYLOAD_FIELDS, "pdf_sha256", "encoder_version")} for r in rows]
    if collection == BM25_COLLECTION:
        return PointBatch(collection, ids, payloads, sparse=[(list(r["indices"]), list(r["values"])) for r in rows])
    return PointBatch(collection, ids, payloads, dense=[list(r["dense"]) for r in rows])
