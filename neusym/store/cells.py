"""The cell collection: one point per non-empty encodable database cell (NeuSym-RAG's vectorstore).

Each point carries two named vectors — ``bm25`` (sparse) and ``minilm`` (dense) — which the agent
sees as two *collections* (``text_bm25_en``, ``text_sentence_transformers_all_minilm_l6_v2``; see
:mod:`neusym.encode`). Payload: ``text, table_name, column_name, primary_key, paper_id,
page_number`` (what the agent sees) plus ``text_sha`` and ``encoder_version`` (what publishing
compares). Payload indexes on ``paper_id``, ``table_name``, ``column_name``, ``primary_key`` and
``page_number`` keep filtered searches cheap at a million points.

:class:`CellSearch` is RetrieveFromVectorstore over the cell collection of one corpus version:
:meth:`CellSearch.search` validates the request, translates the filter grammar
(:func:`parse_filter`) and queries the backend (:mod:`neusym.store.vectors`).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from ..encode import (
    BM25_COLLECTION,
    COLLECTION_VECTORS,
    DENSE_COLLECTION,
    DENSE_DIM,
    ENCODABLE_COLUMNS,
    bm25_query_vector,
    encode_query,
)
from ..errors import ActionError
from .vectors import Filter, HnswSpec, Match, QuerySpec, Range, VectorBackend, VectorSchema

CELLS_COLLECTION = "cells"
"""Name of the cell collection (a shard directory ``cells/`` in a version, or a server collection)."""

CELL_SCHEMA = VectorSchema(
    dense={"minilm": DENSE_DIM},
    sparse=("bm25",),
    keyword=("paper_id", "table_name", "column_name", "primary_key"),
    integer=("page_number",),
    hnsw=HnswSpec(),
    int8=True,
    vectors_on_disk=True,
    indexes_on_disk=True,
)
"""How cells are stored: HNSW graph and int8 copy of the dense vectors, everything memory-mapped and
read on demand, so opening a version costs little time and RAM at any size (the in-RAM variant
reads every index at open). Chosen by ``benchmarks/scale.py`` (``benchmarks/results/scale.json``)."""

COLLECTIONS = {
    BM25_COLLECTION: "BM25 sparse vectors of every encodable text cell (keyword match, metric: inner product with IDF).",
    DENSE_COLLECTION: "all-MiniLM-L6-v2 384-d embeddings of every encodable text cell (semantic match, metric: cosine).",
}
PAYLOAD_FIELDS = ("table_name", "column_name", "primary_key", "paper_id", "page_number")
_FILTER_FIELDS = {"paper_id": "paper_id", "pdf_id": "paper_id", "page_number": "page_number",
                  "primary_key": "primary_key", "table_name": "table_name", "column_name": "column_name"}
MAX_LIMIT = 50


class CellSearch:
    """RetrieveFromVectorstore over one cell collection (read-only).

    ``backend``: the cell collection of a corpus version; ``settings``: for the query encoder
    (:func:`neusym.encode.encode_query`). ``collection_names`` / ``encodable_columns`` describe the
    action space to the agent.
    """

    collection_names = tuple(COLLECTIONS)
    encodable_columns = tuple(ENCODABLE_COLUMNS)

    def __init__(self, backend: VectorBackend, settings: Any = None):
        self.backend = backend
        self.settings = settings

    def search(self, query: str, collection_name: str, table_name: str, column_name: str, filter: str = "",
               limit: int = 5) -> list[dict]:
        """Top-``limit`` cells of (table_name, column_name) most similar to ``query`` in a collection.

        Returns dicts ``score, text, table_name, column_name, primary_key, paper_id, page_number``,
        best first (at most 50). ``filter`` uses the grammar of :func:`parse_filter`. Raises
        :class:`ActionError` for an unknown collection, a non-encodable (table, column), a bad filter
        or limit, or an empty query.
        """
        if collection_name not in COLLECTIONS:
            raise ActionError(f"unknown collection {collection_name!r}; use one of {sorted(COLLECTIONS)}")
        if (table_name, column_name) not in ENCODABLE_COLUMNS:
            pairs = ", ".join(f"{t}.{c}" for t, c in ENCODABLE_COLUMNS)
            raise ActionError(f"{table_name}.{column_name} is not encodable; encodable columns: {pairs}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ActionError(f"limit must be a positive integer, got {limit!r}")
        if not isinstance(query, str) or not query.strip():
            raise ActionError("query must be a non-empty text")
        limit = min(limit, MAX_LIMIT)
        flt = Filter.all(Match("table_name", table_name), Match("column_name", column_name), parse_filter(filter))
        if not self.backend.exists():
            return []
        using = COLLECTION_VECTORS[collection_name]
        if using == "bm25":
            indices, values = bm25_query_vector(query)
            if not indices:
                return []
            vector: Any = (indices, values)
        else:
            vector = encode_query(query, settings=self.settings)
        hits = self.backend.query([QuerySpec(using, vector, flt, limit, with_payload=["text", *PAYLOAD_FIELDS])])[0]
        return [{"score": round(h.score, 4), "text": h.payload.get("text"),
                 **{k: h.payload.get(k) for k in PAYLOAD_FIELDS}} for h in hits]

    def collections_prompt(self) -> str:
        """The vectorstore schema shown to the agent: collections, fields, encodable pairs, filter grammar."""
        return collections_prompt()

    def close(self) -> None:
        """Nothing to release: the backend belongs to the corpus version."""


def collections_prompt() -> str:
    """The [Vectorstore Schema] text: collections, point fields, encodable pairs, filter grammar."""
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


# ----------------------------------------------------------------------------------- filter grammar
def _normalise_filter_text(text: str) -> str:
    text = re.sub(r"&&", " and ", text)
    text = re.sub(r"\|\|", " or ", text)
    # SQL-style single '=' -> '=='
    return re.sub(r"(?<![=!<>])=(?!=)", "==", text)


def parse_filter(text: str) -> Filter | None:
    """Translate a Milvus/Python-style filter expression into a :class:`Filter` (no code is evaluated).

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


def _page(value: Any, text: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ActionError(f"filter {text!r}: page_number needs an integer, got {value!r}") from None


def _condition(field: str, op: ast.cmpop, value: Any, text: str) -> Filter:
    key = _FILTER_FIELDS[field]
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(value, list):
            raise ActionError(f"filter {text!r}: 'in' needs a list")
        values = tuple(str(v) if key != "page_number" else _page(v, text) for v in value)
        cond = Match(key, any=values)
        return Filter(must_not=(cond,)) if isinstance(op, ast.NotIn) else Filter(must=(cond,))
    if isinstance(value, list):
        raise ActionError(f"filter {text!r}: a list needs 'in'")
    if isinstance(op, (ast.Eq, ast.NotEq)):
        cond = Match(key, _page(value, text) if key == "page_number" else str(value))
        return Filter(must_not=(cond,)) if isinstance(op, ast.NotEq) else Filter(must=(cond,))
    if key != "page_number" or not isinstance(value, (int, float)):
        raise ActionError(f"filter {text!r}: <, <=, >, >= only apply to page_number with a number")
    bound = {ast.Lt: "lt", ast.LtE: "lte", ast.Gt: "gt", ast.GtE: "gte"}[type(op)]
    return Filter(must=(Range(key, **{bound: value}),))


def _to_filter(node: ast.AST, text: str) -> Filter:
    if isinstance(node, ast.BoolOp):
        parts = tuple(_to_filter(v, text) for v in node.values)
        return Filter(must=parts) if isinstance(node.op, ast.And) else Filter(should=parts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return Filter(must_not=(_to_filter(node.operand, text),))
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
        return parts[0] if len(parts) == 1 else Filter(must=tuple(parts))
    raise ActionError(f"filter {text!r}: unsupported expression; use comparisons joined by and/or/not")


__all__ = [
    "CELLS_COLLECTION",
    "CELL_SCHEMA",
    "COLLECTIONS",
    "CellSearch",
    "PAYLOAD_FIELDS",
    "collections_prompt",
    "parse_filter",
]
