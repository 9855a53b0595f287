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
import math
import re
from typing import Any

from neusym.encode import (
    BM25_COLLECTION,
    COLLECTION_VECTORS,
    DENSE_COLLECTION,
    DENSE_DIM,
    ENCODABLE_COLUMNS,
    bm25_query_vector,
    encode_query,
)
from neusym.errors import ActionError
from neusym.textscan import bracket_depth
from neusym.store.vectors import Filter, HnswSpec, Match, QuerySpec, Range, VectorBackend, VectorSchema

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
MAX_FILTER_NESTING = 16
"""Deepest bracket nesting a filter may have; its expression tree may be at most twice as deep
(e.g. a chain of ``not``)."""

_INT64 = 2**63
_FIELD_LIST = "paper_id, page_number, primary_key, table_name, column_name"
_OPERATORS = "==, !=, <, <=, >, >=, in [...], not in [...]"
_QUOTED = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""", re.S)
_BAD_OPERATOR = re.compile(
    r"(?i)(?<![\w.])(not\s+like|ilike|like|between|is\s+not|is|regexp|rlike|glob|similar\s+to|contains|match)(?![\w.])"
    r"|<>|=>|=<|!~|~=|~|===|!(?!=)|\^|%"
)
_AST_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.In: "in",
            ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
_SUPPORTED_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)


def _filter_error(text: str, problem: str) -> ActionError:
    """The error for a filter that does not follow the grammar: ``filter '<text>': <problem>`` (a long
    filter is shortened in the message)."""
    shown = " ".join(text.split())
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return ActionError(f"filter {shown!r}: {problem}")


def _outside_quotes(text: str, fn) -> str:
    """``text`` with ``fn`` applied to the parts outside quoted strings (quoted parts kept as they are)."""
    out, last = [], 0
    for match in _QUOTED.finditer(text):
        out.append(fn(text[last:match.start()]))
        out.append(match.group(0))
        last = match.end()
    out.append(fn(text[last:]))
    return "".join(out)


def _normalise_filter_text(text: str) -> str:
    def fix(part: str) -> str:
        part = part.replace("&&", " and ").replace("||", " or ")
        return re.sub(r"(?<![=!<>])=(?!=)", "==", part)  # SQL-style single '=' -> '=='

    return _outside_quotes(text, fix)


def _unquoted(text: str) -> str:
    """``text`` with every quoted string blanked to ``''`` (for scanning operators and brackets)."""
    return _QUOTED.sub("''", text)


def _syntax_problem(text: str, exc: SyntaxError) -> str:
    """What is wrong with a filter Python cannot parse, in the grammar's words."""
    bare = _unquoted(text)
    msg = exc.msg or "invalid syntax"
    if "unterminated string" in msg or "EOL while scanning" in msg or "unterminated triple-quoted" in msg:
        return "unbalanced quotes: a string is opened but never closed; put text values in matching '...'"
    if "never closed" in msg or "unmatched" in msg or "does not match" in msg:
        return f"unbalanced parentheses: {msg}"
    if "too many nested" in msg:
        return f"nested too deeply (more than {MAX_FILTER_NESTING} levels)"
    bad = _BAD_OPERATOR.search(bare)
    if bad:
        return f"unsupported operator {' '.join(bad.group(0).split())!r}; use {_OPERATORS}"
    where = f" at character {exc.offset}" if exc.offset else ""
    return (f"not a valid expression ({msg}{where}); write comparisons like paper_id == '...' or "
            "page_number <= 3, joined by and / or / not")


def _depth(node: ast.AST) -> int:
    """Nesting depth of an AST (iterative: a deep tree cannot exhaust the recursion limit)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        current, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in ast.iter_child_nodes(current))
    return deepest


def parse_filter(text: str) -> Filter | None:
    """Translate a Milvus/Python-style filter expression into a :class:`Filter` (no code is evaluated).

    Grammar: ``FIELD OP VALUE`` with FIELD in paper_id (alias pdf_id), page_number, primary_key,
    table_name, column_name; OP in ``== != < <= > >=`` or ``in`` / ``not in`` with a list; VALUE a
    quoted string, a number or a list of them (page_number: integers; ``<``... only on page_number);
    combined by ``and``, ``or``, ``not`` and parentheses, at most :data:`MAX_FILTER_NESTING` levels
    of brackets deep. ``=``, ``&&`` and ``||`` are accepted as aliases (outside quoted strings).
    Raises :class:`ActionError` on anything else, with a message ``filter '<text>': <what is wrong>``
    (unbalanced quotes or parentheses, unknown field, unsupported operator, a value of the wrong
    type, nesting too deep). Empty text gives None.
    """
    if not text or not text.strip():
        return None
    depth, _ = bracket_depth(_unquoted(text))
    if depth > MAX_FILTER_NESTING:
        raise _filter_error(text, f"nested too deeply (more than {MAX_FILTER_NESTING} levels of parentheses)")
    try:
        tree = ast.parse(_normalise_filter_text(text.strip()), mode="eval").body
    except SyntaxError as exc:
        raise _filter_error(text, _syntax_problem(text, exc)) from None
    except (RecursionError, MemoryError):
        raise _filter_error(text, f"nested too deeply (more than {MAX_FILTER_NESTING} levels)") from None
    if _depth(tree) > 2 * MAX_FILTER_NESTING:  # e.g. a long chain of 'not'
        raise _filter_error(text, f"nested too deeply (more than {MAX_FILTER_NESTING} levels)")
    return _to_filter(tree, text)


def _literal(node: ast.AST, field: str, text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e, field, text) for e in node.elts]
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool)):
        return -node.operand.value
    if isinstance(node, ast.Constant):
        return _bad_value(field, repr(node.value), text)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
        op = "&" if isinstance(node.op, ast.BitAnd) else "|"
        raise _filter_error(text, f"unsupported operator {op!r}; join conditions with and / or (or && / ||)")
    if isinstance(node, ast.Name):
        raise _filter_error(text, f"{field} expects a value, got the bare word {node.id!r}; "
                                 f"quote text values, e.g. {field} == '{node.id}'")
    return _bad_value(field, f"the expression {ast.unparse(node)[:60]!r} (only literal values are allowed)", text)


def _bad_value(field: str, got: str, text: str) -> Any:
    kind = "an integer" if field == "page_number" else "a quoted string"
    raise _filter_error(text, f"{field} expects {kind}, got {got}")


def _page(value: Any, text: str, *, bound: bool = False) -> int | float:
    """A page number (an integer; a range bound may also be a float), else a clear error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _filter_error(text, f"page_number expects an integer, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _filter_error(text, f"page_number expects a finite number, got {value!r}")
    if isinstance(value, float) and not bound and not value.is_integer():
        raise _filter_error(text, f"page_number expects an integer, got {value!r}")
    if abs(value) >= _INT64:
        raise _filter_error(text, f"page_number {value!r} is out of range")
    return int(value) if not bound or float(value).is_integer() else value


def _condition(field: str, op: ast.cmpop, value: Any, text: str) -> Filter:
    key = _FILTER_FIELDS[field]
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(value, list):
            raise _filter_error(text, f"'{_AST_OPS[type(op)]}' expects a list, e.g. {field} in [{value!r}]")
        values = tuple(str(v) if key != "page_number" else _page(v, text) for v in value)
        cond = Match(key, any=values)
        return Filter(must_not=(cond,)) if isinstance(op, ast.NotIn) else Filter(must=(cond,))
    if isinstance(value, list):
        raise _filter_error(text, f"a list needs 'in' or 'not in', e.g. {field} in {value!r}")
    if isinstance(op, (ast.Eq, ast.NotEq)):
        cond = Match(key, _page(value, text) if key == "page_number" else str(value))
        return Filter(must_not=(cond,)) if isinstance(op, ast.NotEq) else Filter(must=(cond,))
    if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
        if key != "page_number":
            raise _filter_error(text, f"{_AST_OPS[type(op)]} only applies to page_number; use == or in [...] "
                                     f"for {field}")
        bound = {ast.Lt: "lt", ast.LtE: "lte", ast.Gt: "gt", ast.GtE: "gte"}[type(op)]
        return Filter(must=(Range(key, **{bound: _page(value, text, bound=True)}),))
    raise _filter_error(text, f"unsupported operator {_AST_OPS.get(type(op), type(op).__name__)!r}; use {_OPERATORS}")


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
            if type(op) not in _SUPPORTED_OPS:
                raise _filter_error(text, f"unsupported operator {_AST_OPS.get(type(op), type(op).__name__)!r}; "
                                         f"use {_OPERATORS}")
            if isinstance(left, ast.Name) and left.id in _FILTER_FIELDS:
                parts.append(_condition(left.id, op, _literal(right, left.id, text), text))
            elif isinstance(right, ast.Name) and right.id in _FILTER_FIELDS and not isinstance(op, (ast.In, ast.NotIn)):
                flipped = {ast.Lt: ast.Gt(), ast.LtE: ast.GtE(), ast.Gt: ast.Lt(), ast.GtE: ast.LtE()}.get(type(op), op)
                parts.append(_condition(right.id, flipped, _literal(left, right.id, text), text))
            else:
                name = next((n.id for n in (left, right) if isinstance(n, ast.Name)), None)
                if name is not None and name not in _FILTER_FIELDS:
                    raise _filter_error(text, f"unknown field {name!r}; filter fields are {_FIELD_LIST}")
                raise _filter_error(text, "a comparison needs a field on one side, e.g. page_number <= 3; "
                                         f"fields: {_FIELD_LIST}")
            left = right
        return parts[0] if len(parts) == 1 else Filter(must=tuple(parts))
    if isinstance(node, ast.Name):
        problem = (f"{node.id!r} alone is not a condition; compare it, e.g. page_number <= 3"
                   if node.id in _FILTER_FIELDS else f"unknown field {node.id!r}; filter fields are {_FIELD_LIST}")
        raise _filter_error(text, problem)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
        op = "&" if isinstance(node.op, ast.BitAnd) else "|"
        raise _filter_error(text, f"unsupported operator {op!r}; join conditions with and / or")
    raise _filter_error(text, f"unsupported expression {ast.unparse(node)[:60]!r}; write comparisons "
                             f"({_OPERATORS}) joined by and / or / not")


__all__ = [
    "CELLS_COLLECTION",
    "CELL_SCHEMA",
    "COLLECTIONS",
    "CellSearch",
    "PAYLOAD_FIELDS",
    "collections_prompt",
    "parse_filter",
]
