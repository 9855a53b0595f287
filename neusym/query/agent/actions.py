"""The five NeuSym-RAG actions (paper §2.4.1, App. F.2.1), their JSON schema and their execution.

An action is ``{"action_type": NAME, "parameters": {...}}`` with NAME one of :data:`ACTION_TYPES`:

- ``RetrieveFromDatabase(sql)`` — one read-only DuckDB query (:mod:`neusym.query.sqlsafe`);
- ``RetrieveFromVectorstore(query, collection_name, table_name, column_name, filter="", limit=5)`` —
  similarity search in the cell collection (:class:`neusym.store.cells.CellSearch`);
- ``CalculateExpr(expr)`` — safe arithmetic (:func:`neusym.query.calc.calculate`);
- ``ViewImage(paper_id, page_number, bounding_box=[])`` — render a page or the region
  ``[x0, y0, width, height]`` (PDF points, origin top-left) at 144 dpi as PNG; a text-only model
  gets the image size and the PDF text inside the region, a VLM can get the PNG;
- ``GenerateAnswer(answer)`` — terminal.

Execution never raises for bad arguments or failing retrievals: the error message becomes the
observation (``Observation.error`` is True) so the agent loop continues. Observations are text
tables (paper App. F.2.3) cut to ``settings.observation_max_tokens`` (≈4 characters per token)
with a note saying how much was cut.
"""

from __future__ import annotations

import base64
import json
import math
import re
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neusym.telemetry import phase
from neusym.query.calc import calculate
from neusym.errors import ActionError, NeusymError
from neusym.settings import Settings
from neusym.query.sqlsafe import QueryResult, format_result, render_table, run_query
from neusym.llm.chat import CHARS_PER_TOKEN

ACTION_TYPES = (
    "RetrieveFromDatabase",
    "RetrieveFromVectorstore",
    "CalculateExpr",
    "ViewImage",
    "GenerateAnswer",
)
VIEW_DPI = 144
MAX_VECTOR_LIMIT = 20
_NOTE_RESERVE = 240  # characters kept free for the truncation note
EMPTY_SQL_HINT = (
    "No rows. Do not conclude that the information is missing yet: match text with wildcards "
    "(ILIKE '%word%'), loosen the WHERE clause, or search the vectorstore."
)
_FILTER_VALUE = r"('[^'\n]{0,80}'|-?[0-9]{1,6})"
_FILTER_COND = (
    r"((paper_id|page_number|primary_key) ?(==|!=|<=|>=|<|>) ?" + _FILTER_VALUE
    + r"|(paper_id|page_number|primary_key) (not )?in \[" + _FILTER_VALUE + r"(, ?" + _FILTER_VALUE + r"){0,20}\])"
)
FILTER_PATTERN = r"^(|" + _FILTER_COND + r"( (and|or) " + _FILTER_COND + r"){0,4})$"
"""Regex for the RetrieveFromVectorstore filter in constrained decoding: empty, or up to five
comparisons / ``in`` lists on paper_id, page_number, primary_key joined by and/or — a subset of the
vector store's filter grammar, so the small model cannot put SQL into the filter."""
FILTER_HINT = (
    "Filter grammar: conditions on paper_id, page_number or primary_key, e.g. \"paper_id == '<id>'\" or "
    "\"paper_id == '<id>' and page_number <= 3\"; no SQL, no LIKE: put search words in the query instead."
)
_PLACEHOLDER = re.compile(r"<\s*(paper_)?id\s*>|'\.\.\.'")
NULL_SQL_HINT = "All values are NULL: these columns are not filled for these rows; use other columns or the vectorstore."


# --------------------------------------------------------------------------------------------
# Actions and observations
# --------------------------------------------------------------------------------------------


@dataclass
class Action:
    """A validated action: ``action_type`` in :data:`ACTION_TYPES` and its ``parameters`` (defaults filled)."""

    action_type: str
    parameters: dict[str, Any]

    def key(self) -> str:
        """Canonical text of the action, used to detect repeated identical actions."""
        return json.dumps([self.action_type, self.parameters], sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class Observation:
    """Result of executing an action: ``text`` for the LLM (already truncated), ``error`` when the
    action failed, ``image_png`` (ViewImage only) with its pixel ``image_size``, and for
    GenerateAnswer ``terminal=True`` with the ``answer``. ``data``: what the text was made from, for
    callers other than the model (the MCP tools): the :class:`~neusym.query.sqlsafe.QueryResult` of
    RetrieveFromDatabase, the hit dicts of RetrieveFromVectorstore, the value of CalculateExpr."""

    text: str
    error: bool = False
    image_png: bytes | None = None
    image_size: tuple[int, int] | None = None
    terminal: bool = False
    answer: Any = None
    data: Any = None

    @property
    def image_base64(self) -> str | None:
        """The PNG as base64 text (for a data URI), or None."""
        return base64.b64encode(self.image_png).decode("ascii") if self.image_png else None


def truncate_observation(text: str, max_tokens: int) -> str:
    """Cut ``text`` to about ``max_tokens`` tokens (4 characters each), preferring a line boundary.

    When cut, a final line states how many characters were shown of how many, and how many tokens
    (approximately) were dropped, with a hint to narrow the query. Text within budget is returned
    unchanged.
    """
    limit = max(int(max_tokens) * CHARS_PER_TOKEN, 200)
    if len(text) <= limit:
        return text
    budget = max(limit - _NOTE_RESERVE, 100)
    cut = text.rfind("\n", 0, budget)
    if cut < budget // 2:
        cut = budget
    shown = text[:cut].rstrip()
    dropped = len(text) - len(shown)
    note = (
        f"\n... [observation truncated: showing {len(shown)} of {len(text)} characters; "
        f"~{math.ceil(dropped / CHARS_PER_TOKEN)} tokens cut. Select fewer rows or columns "
        "(LIMIT, WHERE, a smaller limit) to see the rest.]"
    )
    return shown + note


# --------------------------------------------------------------------------------------------
# Parsing and validating the model's reply
# --------------------------------------------------------------------------------------------

def _unfenced(text: str) -> str:
    """``text`` stripped of blanks and of a Markdown code fence around it (```` ```json ```` ... ```` ``` ````)."""
    out = text.strip()
    if out.startswith("```"):
        out = out[3:]
        if out[:4].lower() == "json":
            out = out[4:]
        out = out.lstrip()
    if out.endswith("```"):
        out = out[:-3].rstrip()
    return out


def _first_json_object(text: str) -> Any:
    """Decode the first JSON object in ``text`` (tolerates code fences and trailing chatter)."""
    stripped = _unfenced(text)
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    start = stripped.find("{")
    if start < 0:
        raise ActionError("the reply contains no JSON object")
    try:
        value, _ = json.JSONDecoder().raw_decode(stripped[start:])
    except json.JSONDecodeError as exc:
        raise ActionError(f"the reply is not valid JSON ({exc.msg} at character {exc.pos})") from None
    return value


def parse_reply(text: str) -> tuple[str, dict]:
    """Split a model reply into ``(thought, raw_action_dict)``.

    Accepts ``{"thought": ..., "action": {"action_type": ..., "parameters": {...}}}`` and, leniently,
    an action object at the top level. Raises :class:`ActionError` when no action can be found.
    """
    obj = _first_json_object(text)
    if not isinstance(obj, dict):
        raise ActionError(f"the reply must be a JSON object, got {type(obj).__name__}")
    thought = obj.get("thought")
    thought = thought if isinstance(thought, str) else ("" if thought is None else json.dumps(thought))
    action = obj.get("action", obj if "action_type" in obj else None)
    if isinstance(action, str) and "action_type" not in obj:
        action = {"action_type": action, "parameters": obj.get("parameters", {})}
    if not isinstance(action, dict):
        raise ActionError('the reply has no "action" object with "action_type" and "parameters"')
    return thought, action


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ActionError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise ActionError(f"{name} must be an integer, got {value!r}")


def _as_str(value: Any, name: str, *, required: bool = True) -> str:
    if value is None:
        if required:
            raise ActionError(f"parameter {name!r} is required")
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ActionError(f"{name} must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise ActionError(f"parameter {name!r} must not be empty")
    return value


MAX_COORDINATE = 100_000.0
"""Largest absolute value of a bounding-box number (PDF points; the largest page PDF allows is 14,400
points wide). Larger values are refused before they reach the renderer, whose rectangles overflow."""


def _as_bbox(value: Any) -> list[float]:
    if value is None or value == "" or value == []:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ActionError(f"bounding_box must be a list of 4 numbers, got {value!r}") from None
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        raise ActionError(f"bounding_box must be [] or [x0, y0, width, height] (4 numbers), got {value!r}")
    try:
        box = [float(v) for v in value]
    except (TypeError, ValueError):
        raise ActionError(f"bounding_box must contain numbers, got {value!r}") from None
    if not all(math.isfinite(v) for v in box):
        raise ActionError(f"bounding_box must contain finite numbers, got {value!r}")
    if not all(abs(v) <= MAX_COORDINATE for v in box):
        raise ActionError(f"bounding_box values must lie within ±{MAX_COORDINATE:g} PDF points, got {box}")
    if box[2] <= 0 or box[3] <= 0:
        raise ActionError(f"bounding_box width and height must be positive, got {box}")
    return box


_PARAMS: dict[str, tuple[str, ...]] = {
    "RetrieveFromDatabase": ("sql",),
    "RetrieveFromVectorstore": ("query", "collection_name", "table_name", "column_name", "filter", "limit"),
    "CalculateExpr": ("expr",),
    "ViewImage": ("paper_id", "page_number", "bounding_box"),
    "GenerateAnswer": ("answer",),
}


def validate_action(raw: dict) -> Action:
    """Check an action dict against the action space and return an :class:`Action` with defaults.

    Raises :class:`ActionError` naming the problem: unknown ``action_type`` (listing the valid
    ones), missing or ill-typed parameters, unexpected parameter names.
    """
    if not isinstance(raw, dict):
        raise ActionError("the action must be a JSON object")
    action_type = raw.get("action_type")
    if action_type not in ACTION_TYPES:
        raise ActionError(f"unknown action_type {action_type!r}; valid action types: {', '.join(ACTION_TYPES)}")
    params = raw.get("parameters", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ActionError(f"{action_type}: parameters must be a JSON object")
    unknown = sorted(set(params) - set(_PARAMS[action_type]))
    if unknown:
        raise ActionError(
            f"{action_type}: unexpected parameter(s) {', '.join(unknown)}; "
            f"its parameters are {', '.join(_PARAMS[action_type])}"
        )
    p = params
    if action_type == "RetrieveFromDatabase":
        out: dict[str, Any] = {"sql": _as_str(p.get("sql"), "sql")}
    elif action_type == "RetrieveFromVectorstore":
        out = {
            "query": _as_str(p.get("query"), "query"),
            "collection_name": _as_str(p.get("collection_name"), "collection_name"),
            "table_name": _as_str(p.get("table_name"), "table_name"),
            "column_name": _as_str(p.get("column_name"), "column_name"),
            "filter": _as_str(p.get("filter"), "filter", required=False),
            "limit": _as_int(p.get("limit", 5), "limit"),
        }
        if out["limit"] < 1:
            raise ActionError(f"RetrieveFromVectorstore: limit must be a positive integer, got {out['limit']}")
    elif action_type == "CalculateExpr":
        out = {"expr": _as_str(p.get("expr"), "expr")}
    elif action_type == "ViewImage":
        paper_id = _as_str(p.get("paper_id"), "paper_id").strip()
        try:
            paper_id = str(uuid.UUID(paper_id))
        except ValueError:
            raise ActionError(f"ViewImage: paper_id must be a paper UUID from metadata.paper_id, got {paper_id!r}") from None
        if "page_number" not in p:
            raise ActionError("ViewImage: parameter 'page_number' is required")
        page_number = _as_int(p.get("page_number"), "page_number")
        if page_number < 1:
            raise ActionError(f"ViewImage: page_number starts at 1, got {page_number}")
        out = {"paper_id": paper_id, "page_number": page_number, "bounding_box": _as_bbox(p.get("bounding_box"))}
    else:  # GenerateAnswer
        if "answer" not in p:
            raise ActionError("GenerateAnswer: parameter 'answer' is required")
        out = {"answer": p["answer"]}
    return Action(action_type, out)


# --------------------------------------------------------------------------------------------
# JSON schema for constrained decoding
# --------------------------------------------------------------------------------------------


def _variant(action_type: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "object",
        "properties": {
            "action_type": {"type": "string", "enum": [action_type]},
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
        "required": ["action_type", "parameters"],
        "additionalProperties": False,
    }


def action_json_schema(
    *,
    allowed: tuple[str, ...] | list[str] = ACTION_TYPES,
    collections: list[str] | None = None,
    encodable: list[tuple[str, str]] | None = None,
    max_thought_chars: int | None = 400,
    filter_pattern: bool = False,
) -> dict:
    """JSON schema of one agent reply ``{"thought": str, "action": anyOf(one variant per action)}``.

    Each variant pins ``action_type`` to one name and lists exactly that action's parameters (all
    required, no others), so a constrained decoder can only emit valid parameter sets.
    ``collections`` / ``encodable`` turn collection_name / table_name / column_name into enums;
    ``allowed`` restricts the action types (e.g. only GenerateAnswer on the last turn);
    ``max_thought_chars`` bounds the thought (generation time) — pass None for endpoints that
    reject ``maxLength`` in strict mode; ``filter_pattern`` adds :data:`FILTER_PATTERN` so the
    vector-search filter must start with a payload field (no SQL in the filter).
    """
    answer_schema = {
        "anyOf": [
            {"type": "string"},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}},
        ]
    }
    string = {"type": "string"}
    collection = {"type": "string", "enum": list(collections)} if collections else string
    tables = sorted({t for t, _ in encodable}) if encodable else None
    columns = sorted({c for _, c in encodable}) if encodable else None
    variants = {
        "RetrieveFromDatabase": _variant("RetrieveFromDatabase", {"sql": string}, ["sql"]),
        "RetrieveFromVectorstore": _variant(
            "RetrieveFromVectorstore",
            {
                "query": string,
                "collection_name": collection,
                "table_name": {"type": "string", "enum": tables} if tables else string,
                "column_name": {"type": "string", "enum": columns} if columns else string,
                "filter": {"type": "string", "pattern": FILTER_PATTERN} if filter_pattern else string,
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_VECTOR_LIMIT} if filter_pattern else {"type": "integer"},
            },
            ["query", "collection_name", "table_name", "column_name", "filter", "limit"],
        ),
        "CalculateExpr": _variant("CalculateExpr", {"expr": string}, ["expr"]),
        "ViewImage": _variant(
            "ViewImage",
            {"paper_id": string, "page_number": {"type": "integer"}, "bounding_box": {"type": "array", "items": {"type": "number"}}},
            ["paper_id", "page_number", "bounding_box"],
        ),
        "GenerateAnswer": _variant("GenerateAnswer", {"answer": answer_schema}, ["answer"]),
    }
    chosen = [variants[a] for a in ACTION_TYPES if a in allowed]
    if not chosen:
        raise ValueError(f"no valid action types in {allowed!r}")
    thought: dict[str, Any] = {"type": "string"}
    if max_thought_chars:
        thought["maxLength"] = max_thought_chars
    return {
        "type": "object",
        "properties": {"thought": thought, "action": chosen[0] if len(chosen) == 1 else {"anyOf": chosen}},
        "required": ["thought", "action"],
        "additionalProperties": False,
    }


# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------


class Environment:
    """What actions run against: settings, one corpus version (SQL + vectors) and the action runners.

    The environment opens the current corpus version (:func:`neusym.store.versions.open_version`)
    on first use and keeps it until :meth:`close`: every query of a run — SQL and vector search —
    answers from that one version, even if a refresh publishes a newer one meanwhile, and a refresh
    never blocks it. ``version``: use this opened version instead (not closed by the environment).
    ``vectorstore``: an object with ``search(query, collection_name, table_name, column_name,
    filter="", limit=5) -> list[dict]``, ``collections_prompt() -> str`` and ``close()`` (tests);
    default the version's cell collection. When the vector collection cannot be used, vector search
    is reported as unavailable and removed from the action space instead of failing the run.

    One environment may serve several agent threads (``neusym eval run --concurrency``): opening is
    serialized by a lock; SQL opens its own read-only connection per query.
    """

    def __init__(self, settings: Settings, *, vectorstore: Any = None, db_schema: str | None = None,
                 version: Any = None):
        self.settings = settings
        self._vectorstore = vectorstore
        self._owns_vectorstore = vectorstore is None
        self._vectorstore_error: str | None = None
        self._db_schema = db_schema
        self._version = version
        self._owns_version = version is None
        self._lock = threading.RLock()
        self._con: Any = None
        self._local = threading.local()
        self.cancel: threading.Event | None = None
        """Set by the caller when the run's client went away: a running query is then stopped."""

    @property
    def version(self) -> Any:
        """The corpus version this environment reads (opened on first use); raises
        :class:`neusym.store.versions.NoCorpusVersion` when nothing has been published."""
        with self._lock:
            if self._version is None:
                from neusym.store.versions import open_version

                self._version = open_version(self.settings)
            return self._version

    # -- SQL -----------------------------------------------------------------------------------
    @property
    def db_path(self) -> Path:
        """The read-only database of this environment's corpus version."""
        return self.version.db_path

    def run_sql(self, sql: str, *, max_rows: int | None = None) -> QueryResult:
        """Run one read-only query under the settings' time limit, row, byte, cell and memory budget
        (:func:`neusym.query.sqlsafe.run_query`; ``max_rows`` replaces the row cap); stopped when :attr:`cancel`
        is set."""
        return run_query(self.settings, self.db_path, sql, max_rows=max_rows, cancel=self.cancel)

    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        """The project's own read-only SQL (parameterised with ``?``) on this environment's corpus
        version, without the user-facing caps; rows as tuples. Raises duckdb.Error."""
        from neusym.store.db import connect_readonly

        with self._lock:
            if self._con is None:
                self._con = connect_readonly(self.db_path)
            return self._con.execute(sql, params or []).fetchall()

    def database_schema(self) -> str:
        """The [Database Schema] text (:func:`neusym.store.schema.database_schema_prompt`), cached."""
        if self._db_schema is None:
            from neusym.store.schema import database_schema_prompt

            self._db_schema = database_schema_prompt(self.db_path)
        return self._db_schema

    # -- vector store ----------------------------------------------------------------------------
    @property
    def vectorstore(self) -> Any:
        """The vector store, opened on first access; raises :class:`ActionError` when unavailable."""
        with self._lock:
            return self._open_vectorstore()

    def _open_vectorstore(self) -> Any:
        if self._vectorstore is None:
            if self._vectorstore_error is not None:
                raise ActionError(f"the vectorstore is unavailable: {self._vectorstore_error}")
            try:
                from neusym.store.cells import CellSearch

                cells = self.version.cells
                if not cells.exists():
                    raise ActionError(f"corpus version {self.version.number} has no cell collection")
                self._vectorstore = CellSearch(cells, self.settings)
            except Exception as exc:  # noqa: BLE001 - reported to the agent, which then uses SQL only
                self._vectorstore_error = f"{type(exc).__name__}: {exc}"
                raise ActionError(f"the vectorstore is unavailable: {self._vectorstore_error}") from exc
        return self._vectorstore

    def vectorstore_available(self) -> bool:
        """True when the vector store can be used (opens it if needed)."""
        try:
            self.vectorstore
        except ActionError:
            return False
        return True

    def vectorstore_schema(self) -> str:
        """The [Vectorstore Schema] text from ``collections_prompt()``, or why it is unavailable."""
        if not self.vectorstore_available():
            return f"(unavailable: {self._vectorstore_error}; use RetrieveFromDatabase)"
        return self.vectorstore.collections_prompt()

    def vectorstore_catalog(self) -> tuple[list[str] | None, list[tuple[str, str]] | None]:
        """(collection names, encodable (table, column) pairs) when known, for enums in the schema."""
        if not self.vectorstore_available():
            return None, None
        vs = self.vectorstore
        collections = getattr(vs, "collection_names", None)
        pairs = getattr(vs, "encodable_columns", None)
        if collections is None or pairs is None:
            module = __import__(type(vs).__module__, fromlist=["_"])
            collections = collections or getattr(module, "COLLECTIONS", None)
            pairs = pairs or getattr(module, "ENCODABLE_COLUMNS", None)
        return (list(collections) if collections else None, [tuple(p) for p in pairs] if pairs else None)

    def search(self, query: str, collection_name: str, table_name: str, column_name: str, filter: str = "",
               limit: int = 5) -> list[dict]:
        """One vector search (see :meth:`neusym.store.cells.CellSearch.search`); raises
        :class:`ActionError` when the collection is unavailable or rejects the input."""
        with self._lock:
            hits = self.vectorstore.search(query, collection_name, table_name, column_name, filter, limit)
        log = getattr(self._local, "hits", None)
        if log is not None:
            log.extend(hits)
        return hits

    def execute(self, action: "Action", *, max_tokens: int | None = None) -> "Observation":
        """Run one validated action on this environment (:func:`execute_action`): how the agent loop
        runs its actions. A subclass may run them elsewhere (e.g. through the MCP tools of
        :mod:`neusym.interfaces.service.mcp`, to show a client sees what the agent sees). Timed
        (:mod:`neusym.telemetry`) as ``retrieval`` for the two Retrieve actions, else ``action``."""
        with phase("retrieval" if action.action_type.startswith("Retrieve") else "action"):
            return execute_action(action, self, max_tokens=max_tokens)

    def record_hits(self) -> list[dict]:
        """Start collecting this thread's vector-search hits (evidence for citations) into the
        returned list, replacing an earlier collection; one agent run per thread at a time."""
        self._local.hits = []
        return self._local.hits

    def close(self) -> None:
        """Release the vector store and the corpus version if this environment opened them."""
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None
            if self._vectorstore is not None and self._owns_vectorstore:
                self._vectorstore.close()
                self._vectorstore = None
            if self._version is not None and self._owns_version:
                self._version.close()
                self._version = None

    def __enter__(self) -> "Environment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# Execution
# --------------------------------------------------------------------------------------------


def _error(message: str, max_tokens: int) -> Observation:
    return Observation(text=truncate_observation(f"[Error]: {message}", max_tokens), error=True)


def execute_action(action: Action, env: Environment, *, max_tokens: int | None = None) -> Observation:
    """Run one validated action in ``env`` and return its observation (never raises for bad input).

    Errors from the action (:class:`ActionError`, unsafe or failing SQL, SQL timeouts, vector store
    errors, missing PDF files) become an observation starting with ``[Error]:``. The observation is
    cut to ``max_tokens`` (default ``settings.observation_max_tokens``; methods that inline a
    paper's text pass their own context budget).
    """
    max_tokens = env.settings.observation_max_tokens if max_tokens is None else int(max_tokens)
    try:
        if action.action_type == "GenerateAnswer":
            return Observation(text="", terminal=True, answer=action.parameters["answer"])
        if action.action_type == "RetrieveFromDatabase":
            text, result = _database(action.parameters["sql"], env)
            return Observation(text=truncate_observation(text, max_tokens), data=result)
        if action.action_type == "RetrieveFromVectorstore":
            text, hits = _vector_search(action.parameters, env)
            return Observation(text=truncate_observation(text, max_tokens), data=hits)
        if action.action_type == "CalculateExpr":
            value = calculate(action.parameters["expr"])
            rendered = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
            return Observation(text=truncate_observation(f"Result: {rendered}", max_tokens), data=value)
        if action.action_type == "ViewImage":
            obs = view_image(env, **action.parameters)
            obs.text = truncate_observation(obs.text, max_tokens)
            return obs
        return _error(f"unknown action_type {action.action_type!r}", max_tokens)
    except NeusymError as exc:
        message = str(exc)
        if action.action_type == "RetrieveFromVectorstore" and "filter" in message.lower():
            message += ". " + FILTER_HINT
        return _error(message, max_tokens)
    except Exception as exc:  # noqa: BLE001 - the loop must survive any backend failure
        return _error(f"{action.action_type} failed: {type(exc).__name__}: {exc}", max_tokens)


def widen_like_patterns(sql: str) -> str | None:
    """``sql`` with every ``[I]LIKE 'text'`` that has no wildcard turned into ``[I]LIKE '%text%'``.

    Returns None when there is nothing to widen (or the SQL cannot be parsed or rewritten, e.g. it
    is nested too deeply for the parser). Patterns under NOT are left alone (widening them would
    remove rows). Used when a query returns no rows because the model matched a title fragment exactly.
    """
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
        changed = False
        for node in tree.find_all(exp.Like, exp.ILike):
            literal = node.expression
            if isinstance(node.parent, exp.Not) or not isinstance(literal, exp.Literal) or not literal.is_string:
                continue
            if "%" in literal.this or "_" in literal.this or not literal.this.strip():
                continue
            node.set("expression", exp.Literal.string(f"%{literal.this.strip()}%"))
            changed = True
        return tree.sql(dialect="duckdb") if changed else None
    except (sqlglot.errors.SqlglotError, RecursionError):
        return None


def _placeholder_error(text: str) -> str | None:
    match = _PLACEHOLDER.search(text)
    if match:
        return (
            f"{match.group(0)!r} is a placeholder from the instructions, not a value: use a real paper_id "
            "(from [Paper IDs] or metadata.paper_id) or leave the condition out"
        )
    return None


def _database(sql: str, env: Environment) -> tuple[str, QueryResult]:
    """Observation of RetrieveFromDatabase: the result table, with recovery hints for empty results,
    and the result it shows (the widened query's when that one answered)."""
    problem = _placeholder_error(sql)
    if problem:
        raise ActionError(f"RetrieveFromDatabase: {problem}")
    result = env.run_sql(sql)
    text = format_result(result, "table")
    if result.columns and not result.rows:
        widened = widen_like_patterns(sql)
        if widened:
            retry = env.run_sql(widened)
            if retry.rows:
                return (
                    f"No rows for the exact LIKE pattern. With wildcards ({widened}) the result is:\n"
                    + format_result(retry, "table")
                ), retry
        text += "\n" + EMPTY_SQL_HINT
    elif result.rows and all(v is None for row in result.rows for v in row):
        text += "\n" + NULL_SQL_HINT
    return text, result


def _vector_search(params: dict, env: Environment) -> tuple[str, list[dict]]:
    problem = _placeholder_error(params.get("filter", ""))
    if problem:
        raise ActionError(f"RetrieveFromVectorstore: {problem}")
    limit = params["limit"]
    note = ""
    if limit > MAX_VECTOR_LIMIT:
        note = f" (limit {limit} reduced to {MAX_VECTOR_LIMIT})"
        limit = MAX_VECTOR_LIMIT
    hits = env.search(
        params["query"],
        params["collection_name"],
        params["table_name"],
        params["column_name"],
        params.get("filter", ""),
        limit,
    )
    where = f"{params['table_name']}.{params['column_name']} in {params['collection_name']}"
    if params.get("filter"):
        where += f" with filter {params['filter']}"
    if not hits:
        return (
            f"No entries of {where} match{note}. Switch strategy: RetrieveFromDatabase with ILIKE on "
            f"{params['table_name']}.{params['column_name']}, or another column, collection or a looser filter."
        ), []
    return format_vector_hits(hits, where + note), hits


def format_vector_hits(hits: list[dict], where: str) -> str:
    """The observation text of RetrieveFromVectorstore hits: a table of score, paper_id, page_number,
    primary_key and text, introduced by ``where`` (e.g. "chunks.text_content in text_bm25_en")."""
    if not hits:
        return f"No entries of {where} match."
    columns = ["score", "paper_id", "page_number", "primary_key", "text"]
    rows = []
    for hit in hits:
        score = hit.get("score")
        rows.append(
            (
                round(float(score), 4) if isinstance(score, (int, float)) else score,
                hit.get("paper_id"),
                hit.get("page_number"),
                hit.get("primary_key"),
                hit.get("text"),
            )
        )
    n = len(rows)
    return (
        f"Top {n} entries of {where}:\n"
        + render_table(columns, rows)
        + f"\nIn total, {n} row{' is' if n == 1 else 's are'} displayed."
    )


def _resolve_pdf(path_text: str, settings: Settings) -> Path:
    """The local file of a ``metadata.pdf_path`` value (:func:`neusym.store.pdfs.pdf_file`); raises
    :class:`ActionError` when it is not on this host."""
    from neusym.store.pdfs import pdf_file

    path = pdf_file(settings, path_text)
    if path is None:
        raise ActionError(f"ViewImage: the PDF file of this paper is not available here ({Path(path_text).name})")
    return path


def view_image(env: Environment, paper_id: str, page_number: int, bounding_box: list[float] | None = None) -> Observation:
    """Render page ``page_number`` (from 1) of paper ``paper_id``, or its region ``bounding_box``.

    ``bounding_box`` is ``[x0, y0, width, height]`` in PDF points (1/72 inch) from the top-left
    corner of the page (the project-wide convention, as stored in tables/images/equations); ``[]``
    or None means the whole page. The PDF is found through ``metadata.pdf_path`` (read-only SQL).
    Returns an :class:`Observation` with the PNG (144 dpi) and, as text, the image size and the PDF
    text inside the region. Raises :class:`ActionError` for an unknown paper, a page out of range,
    a region outside the page or a missing PDF file.
    """
    import pymupdf

    pid = str(uuid.UUID(str(paper_id)))
    result = env.run_sql(f"SELECT pdf_path, num_pages FROM metadata WHERE paper_id = '{pid}'", max_rows=1)
    if not result.rows:
        raise ActionError(f"ViewImage: no paper with paper_id {pid} in metadata")
    pdf_path = _resolve_pdf(str(result.rows[0][0]), env.settings)
    try:
        doc = pymupdf.open(str(pdf_path))
    except Exception as exc:  # noqa: BLE001
        raise ActionError(f"ViewImage: cannot open the PDF {pdf_path}: {exc}") from exc
    try:
        if not 1 <= page_number <= doc.page_count:
            raise ActionError(f"ViewImage: page_number {page_number} is out of range; the paper has {doc.page_count} pages")
        page = doc[page_number - 1]
        page_rect = page.rect
        if bounding_box:
            x0, y0, w, h = bounding_box
            clip = pymupdf.Rect(x0, y0, x0 + w, y0 + h) & page_rect
            if clip.is_empty or clip.width < 1 or clip.height < 1:
                raise ActionError(
                    f"ViewImage: bounding_box {bounding_box} lies outside page {page_number} "
                    f"({page_rect.width:.0f} x {page_rect.height:.0f} pt)"
                )
        else:
            clip = page_rect
        pix = page.get_pixmap(dpi=VIEW_DPI, clip=clip)
        png = pix.tobytes("png")
        text = " ".join(page.get_text("text", clip=clip).split())
    finally:
        doc.close()
    region = (
        f"region [{clip.x0:.1f}, {clip.y0:.1f}, {clip.width:.1f}, {clip.height:.1f}]"
        if bounding_box
        else f"the whole page ({page_rect.width:.0f} x {page_rect.height:.0f} pt)"
    )
    lines = [
        f"[Image] Page {page_number} of paper {pid}, {region}: {pix.width} x {pix.height} px PNG at {VIEW_DPI} dpi.",
        "You cannot see the pixels; the PDF text inside this region is:" if text else "There is no PDF text inside this region (a picture only).",
    ]
    if text:
        lines.append(text)
    return Observation(text="\n".join(lines), image_png=png, image_size=(pix.width, pix.height))


__all__ = [
    "ACTION_TYPES",
    "Action",
    "Environment",
    "Observation",
    "action_json_schema",
    "execute_action",
    "parse_reply",
    "truncate_observation",
    "validate_action",
    "view_image",
]
