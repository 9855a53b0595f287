"""Read-only SQL against the corpus database, for analysts (``neusym sql``) and the agent.

Defence in depth, three layers, all of which must agree:

0. Nesting: at most :data:`MAX_SQL_NESTING` levels of brackets (subqueries, parenthesised
   expressions, function calls, lists), counted on the text outside strings, quoted identifiers and
   comments; the checks below parse recursively, and a deeper query would end in a RecursionError
   instead of a message. A query nested more deeply in other ways (long NOT chains, nested CASE)
   that still exhausts the recursion limit is refused with the same kind of message.
1. DuckDB's own parser (:func:`duckdb.extract_statements`): exactly one statement, of type SELECT
   (``DESCRIBE``/``SHOW``/``SUMMARIZE`` are SELECTs to DuckDB and are allowed).
2. :mod:`sqlglot` (dialect ``duckdb``): the tree must be a query (SELECT, UNION/INTERSECT/EXCEPT,
   VALUES, DESCRIBE, SHOW, SUMMARIZE); no PRAGMA/SET/CALL/COPY/ATTACH/... node anywhere; no
   file, network or foreign-database function (``read_csv*``, ``read_parquet``, ``read_json*``,
   ``read_text``, ``read_blob``, ``glob``, ``http*``, ``sqlite_scan``, ``parquet_scan``, ``query``,
   ``getenv``...); no quoted file path or URL used as a table name (DuckDB replacement scans); no
   function or view that shows the server's configuration or paths (``duckdb_databases``,
   ``duckdb_settings``, ``current_setting``, ``pragma_*``...).
3. The connection itself: ``read_only=True`` with ``enable_external_access=false`` (no file or
   network access at all), no Python replacement scans, no extension auto-loading, and
   ``lock_configuration=true`` so the query cannot re-enable anything with ``SET``.

Budget: the query runs in a worker process (:class:`QueryBudget`): its address space is capped
(``RLIMIT_AS``; DuckDB's ``memory_limit`` is set below that cap), it spills to a temp folder outside
the published versions with a size cap, it runs on one DuckDB thread at lowered CPU priority, and at
most ``workers`` queries run at once. At the time limit the worker process is killed, so the query
really stops and its memory is returned before the caller gets :class:`SQLTimeoutError`. Rows are
streamed from DuckDB and at most ``max_rows`` rows and ``max_bytes`` of text are fetched.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import csv
import datetime as dt
import decimal
import io
import json
import math
import os
import pickle
import queue
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from neusym.errors import BusyError, NeusymError, SQLError, SQLResourceError, SQLTimeoutError, UnsafeSQLError
from neusym.textscan import bracket_depth
from neusym.store.db import READONLY_CONFIG, DatabaseUnavailableError, connect_readonly


# --------------------------------------------------------------------------------------------
# Static checks
# --------------------------------------------------------------------------------------------

_DENIED_FUNCTION_PREFIXES = (
    "read_",  # read_csv, read_csv_auto, read_parquet, read_json*, read_ndjson*, read_text, read_blob, read_xlsx
    "http",  # http_get, http_post, httpfs functions
    "glob",
    "sqlite_",
    "parquet_",  # parquet_scan, parquet_metadata, parquet_schema, parquet_file_metadata ...
    "postgres_",
    "mysql_",
    "iceberg_",
    "delta_",
    "json_execute",  # json_execute_serialized_sql runs SQL from a string
    "sniff_",
    "ducklake_",
    "st_read",
    "arrow_scan",
    "write_",
    "load_",
    "install_",
    "pg_read",
    "s3_",
    "azure_",
    "gcs_",
    "hf_",
)
_DENIED_FUNCTIONS = frozenset(
    {
        "getenv",
        "query",
        "query_table",
        "csv_scan",
        "json_scan",
        "duckdb_secrets",
        "which_secret",
        "checkpoint",
        "force_checkpoint",
        "read",
        "scan",
    }
)
_CONFIG_FUNCTIONS = frozenset(
    {
        "current_setting",
        "duckdb_settings",
        "duckdb_databases",
        "duckdb_extensions",
        "duckdb_temporary_files",
        "duckdb_external_file_cache",
        "duckdb_logs",
        "duckdb_log_contexts",
    }
)
"""Functions (and the views of the same name) that show the server's configuration or file paths
(``duckdb_databases`` has the database file's path, ``current_setting('temp_directory')`` a folder)."""
_CONFIG_PREFIXES = ("pragma_",)  # pragma_database_list (paths), pragma_storage_info, ...


def _config_function(name: str) -> bool:
    return name in _CONFIG_FUNCTIONS or name.startswith(_CONFIG_PREFIXES)


_ALLOWED_ROOTS = (exp.Select, exp.SetOperation, exp.Values, exp.Describe, exp.Show, exp.Summarize, exp.Subquery)
_DENIED_NODES: dict[type, str] = {
    exp.Pragma: "PRAGMA",
    exp.Set: "SET",
    exp.Command: "commands (CALL/LOAD/RESET/EXPLAIN...)",
    exp.Copy: "COPY",
    exp.Attach: "ATTACH",
    exp.Detach: "DETACH",
    exp.Install: "INSTALL",
    exp.Export: "EXPORT",
    exp.Create: "CREATE",
    exp.Insert: "INSERT",
    exp.Update: "UPDATE",
    exp.Delete: "DELETE",
    exp.Drop: "DROP",
    exp.Alter: "ALTER",
    exp.Merge: "MERGE",
    exp.Use: "USE",
    exp.Transaction: "transactions",
    exp.Commit: "transactions",
    exp.Rollback: "transactions",
    exp.LoadData: "LOAD",
    exp.Into: "SELECT INTO",
}
_FILE_LIKE = re.compile(r"[/\\:*?]|\.[A-Za-z0-9]{1,8}(\.gz|\.zst)?$")


MAX_SQL_NESTING = 32
"""Deepest bracket nesting (``(``, ``[``, ``{``) a query may have; real queries stay far below it."""


def sql_nesting_depth(text: str) -> tuple[int, int]:
    """(deepest bracket nesting, character offset where it is first reached) of SQL text.

    Brackets are ``(``, ``[`` and ``{``; those inside '...' strings (``''`` escapes, ``E'...'`` with
    backslash escapes), "..." identifiers, $tag$...$tag$ strings, ``--`` and ``/* */`` comments do
    not count. An unmatched closing bracket is ignored (the parsers report it). Linear time, no
    recursion.
    """
    parts: list[str] = []  # the text with strings and comments blanked (offsets kept)
    i, n, start = 0, len(text), 0

    def skip_to(end: int) -> int:
        nonlocal start
        parts.append(text[start:i])
        parts.append(" " * (end - i))
        start = end
        return end

    while i < n:
        c = text[i]
        if c == "-" and text.startswith("--", i):
            end = text.find("\n", i)
            i = skip_to(n if end < 0 else end + 1)
            continue
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = skip_to(n if end < 0 else end + 2)
            continue
        if c in "'\"":
            backslash = c == "'" and i > 0 and text[i - 1] in "eE" and (i < 2 or not (text[i - 2].isalnum() or text[i - 2] == "_"))
            j = i + 1
            while j < n:
                if backslash and text[j] == "\\":
                    j += 2
                    continue
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:  # doubled quote: an escaped quote
                        j += 2
                        continue
                    break
                j += 1
            i = skip_to(min(n, j + 1))
            continue
        if c == "$":
            match = _DOLLAR_TAG.match(text, i)
            if match:
                end = text.find(match.group(0), match.end())
                i = skip_to(n if end < 0 else end + len(match.group(0)))
                continue
        i += 1
    parts.append(text[start:])
    return bracket_depth("".join(parts))


_DOLLAR_TAG = re.compile(r"\$[A-Za-z_]*\$")


def _too_deep(detail: str) -> UnsafeSQLError:
    return UnsafeSQLError(f"refused: SQL nested too deeply ({detail}); flatten the query, e.g. with WITH "
                          "(common table expressions) or joins instead of nested subqueries")


def _function_names(node: exp.Func) -> set[str]:
    names: set[str] = set()
    if isinstance(node, exp.Anonymous):
        names.add(str(node.name).lower())
    elif isinstance(node, (exp.ReadCSV, exp.ReadParquet)):
        names.add(node.sql_name().lower())
    if isinstance(node.parent, exp.Table) and node.parent.this is node and not isinstance(node, exp.Anonymous):
        names.add(node.sql_name().lower())  # table function in FROM position
    return names


def _denied_function(name: str) -> bool:
    return name in _DENIED_FUNCTIONS or name.startswith(_DENIED_FUNCTION_PREFIXES)


def check_readonly_sql(sql: str) -> str:
    """Validate that ``sql`` is exactly one read-only query; return it without the trailing ``;``.

    Raises :class:`UnsafeSQLError` naming what was refused (statement type, node, function or file
    path, nesting deeper than :data:`MAX_SQL_NESTING` levels: "SQL nested too deeply (more than 32
    levels ...)") and :class:`SQLError` for text DuckDB cannot parse at all. Never opens the corpus:
    it parses on a private in-memory DuckDB connection without file access, then with sqlglot.
    """
    if not isinstance(sql, str) or not sql.strip():
        raise UnsafeSQLError("refused: the SQL text is empty; give one SELECT query")
    text = sql.strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    if not text:
        raise UnsafeSQLError("refused: the SQL text is empty; give one SELECT query")
    # Layer 0: nesting depth, before anything parses recursively
    deepest, where = sql_nesting_depth(text)
    if deepest > MAX_SQL_NESTING:
        raise _too_deep(f"more than {MAX_SQL_NESTING} levels of parentheses/subqueries: {deepest} levels, "
                        f"the deepest at character {where + 1}")
    try:
        return _check_parsed(text)
    except RecursionError:
        raise _too_deep("more than the checker can follow, e.g. long chains of NOT or nested CASE") from None


def _check_parsed(text: str) -> str:
    """Layers 1 and 2 of :func:`check_readonly_sql` on stripped, non-empty text (may raise RecursionError)."""
    # Layer 1: DuckDB's own parser decides what a statement is. Parsing IMPORT DATABASE reads files,
    # so parse on a private in-memory connection that has file access disabled.
    if _IMPORT_RE.match(_strip_leading_comments(text)):
        raise UnsafeSQLError("refused: IMPORT statements are not allowed; only one read-only SELECT query is")
    try:
        statements = _parser_connection().extract_statements(text)
    except duckdb.PermissionException as exc:
        raise UnsafeSQLError(f"refused: the statement needs file access: {_first_line(str(exc))}") from None
    except duckdb.Error as exc:
        raise SQLError(f"SQL syntax error: {_first_line(str(exc))}") from None
    if not statements:
        raise UnsafeSQLError("refused: the SQL text is empty (only comments); give one SELECT query")
    if len(statements) != 1:
        raise UnsafeSQLError(
            f"refused: {len(statements)} statements given; multiple statements are not allowed, send one query"
        )
    kind = str(statements[0].type).rsplit(".", 1)[-1]
    if kind != "SELECT":
        keyword = _first_keyword(statements[0].query) or kind
        label = keyword if keyword == kind else f"{keyword} ({kind})"
        raise UnsafeSQLError(f"refused: {label} statements are not allowed; only one read-only SELECT query is")
    # Layer 2: sqlglot's tree for nodes and functions.
    try:
        trees = [t for t in sqlglot.parse(text, read="duckdb") if t is not None]
    except sqlglot.errors.SqlglotError as exc:
        raise UnsafeSQLError(
            f"refused: the query could not be verified as read-only ({_first_line(str(exc))}); "
            "rewrite it with plain SELECT syntax"
        ) from None
    if len(trees) != 1:
        raise UnsafeSQLError(f"refused: {len(trees)} statements given; multiple statements are not allowed")
    tree = trees[0]
    for node in tree.walk():
        for denied_type, label in _DENIED_NODES.items():
            if isinstance(node, denied_type):
                raise UnsafeSQLError(f"refused: {label} is not allowed; only read-only SELECT queries are")
        if isinstance(node, exp.Func):
            for name in _function_names(node):
                if _denied_function(name):
                    raise UnsafeSQLError(
                        f"refused: function {name}() accesses files, the network or other databases "
                        "and is not allowed; query the corpus tables instead"
                    )
                if _config_function(name):
                    raise UnsafeSQLError(_config_refusal(name))
        if isinstance(node, exp.Table) and _config_function(str(node.name).lower()):
            raise UnsafeSQLError(_config_refusal(str(node.name).lower()))
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
            ident = node.this
            if ident.quoted and _FILE_LIKE.search(ident.name):
                raise UnsafeSQLError(
                    f"refused: {ident.name!r} looks like a file path or URL used as a table; "
                    "file access is not allowed"
                )
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Literal):
            raise UnsafeSQLError(f"refused: {node.this.name!r} as a table (file access) is not allowed")
    if not isinstance(tree, _ALLOWED_ROOTS):
        raise UnsafeSQLError(
            f"refused: {type(tree).__name__.upper()} statements are not allowed; only one read-only SELECT query is"
        )
    return text


def _config_refusal(name: str) -> str:
    return (f"refused: {name} shows the server's configuration or file paths and is not allowed; the tables, "
            "views and columns are described by DESCRIBE <table>, information_schema.columns and GET /schema")


_IMPORT_RE = re.compile(r"\s*+import\b", re.IGNORECASE)
_parser_local = threading.local()


def _strip_leading_comments(text: str) -> str:
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"^\s*(--[^\n]*(\n|$)|/\*.*?\*/)", "", text, flags=re.DOTALL)
    return text


def _first_keyword(query: str) -> str:
    match = re.match(r"\s*([A-Za-z_]+)", _strip_leading_comments(query or ""))
    return match.group(1).upper() if match else ""


def _parser_connection() -> duckdb.DuckDBPyConnection:
    """A per-thread in-memory DuckDB connection without file access, used only to parse."""
    con = getattr(_parser_local, "con", None)
    if con is None:
        con = duckdb.connect(":memory:", config={"enable_external_access": False, "lock_configuration": True})
        _parser_local.con = con
    return con


def _first_line(message: str) -> str:
    lines = [ln for ln in message.strip().splitlines() if ln.strip()]
    return lines[0] if lines else message


# --------------------------------------------------------------------------------------------
# Execution
# --------------------------------------------------------------------------------------------


@dataclass
class QueryResult:
    """Rows of one read-only query.

    ``columns``: output column names; ``types``: DuckDB type names (same length); ``rows``: at most
    ``max_rows`` tuples of Python values (UUID, str, int, float, Decimal, date, list, dict...);
    ``truncated``: True when the query had more rows than ``max_rows``; ``elapsed_s``: wall-clock
    seconds including opening the database.
    """

    columns: list[str]
    rows: list[tuple]
    truncated: bool
    elapsed_s: float
    types: list[str] = field(default_factory=list)
    bytes_capped: bool = False
    """True when rows were dropped because the result reached the byte cap (``truncated`` is then True)."""
    cells_cut: int = 0
    """Text cells shortened to the per-cell character cap."""

    @property
    def row_count(self) -> int:
        """Number of rows held (after the cap)."""
        return len(self.rows)


MAX_BYTES = 1_000_000
"""Default byte cap of one result (sum of the rows' text sizes), applied while fetching."""
MAX_CELL_CHARS = 20_000
"""Default cap of one text cell (characters); longer cells end with a note saying how much was cut."""
_FETCH_ROWS = 256


@dataclass(frozen=True)
class QueryBudget:
    """What one read-only query may use besides time, rows and bytes (see :func:`run_readonly_sql`).

    ``memory_mb``: address-space cap of the worker process that runs it (``RLIMIT_AS``, MiB); DuckDB's
    own ``memory_limit`` is 60% of it, so DuckDB usually stops first with its "Out of Memory" message
    and the rest covers the interpreter and turning rows into Python values. ``temp_dir``: where
    DuckDB may spill (one sub-folder per worker process, removed when the worker ends; never inside
    a published version); ``temp_max_mb``: DuckDB's ``max_temp_directory_size``. ``workers``: worker
    processes, i.e. queries running at once in this process; ``wait_s``: how long a query waits for a
    free worker before :class:`~neusym.errors.BusyError`.
    """

    memory_mb: int = 1024
    temp_dir: Path | None = None
    temp_max_mb: int = 2048
    workers: int = 2
    wait_s: float = 10.0

    @classmethod
    def from_settings(cls, settings: Any) -> "QueryBudget":
        """The budget of ``settings`` (``NEUSYM_SQL_MEMORY_MB``, ``NEUSYM_SQL_TEMP_MAX_MB``,
        ``NEUSYM_SQL_WORKERS``, ``NEUSYM_SQL_WAIT_S``; temp files under ``$NEUSYM_HOME/tmp/sql``)."""
        return cls(memory_mb=int(settings.sql_memory_mb), temp_dir=Path(settings.home).absolute() / "tmp" / "sql",
                   temp_max_mb=int(settings.sql_temp_max_mb), workers=int(settings.sql_workers),
                   wait_s=float(settings.sql_wait_s))

    def duckdb_config(self) -> dict[str, Any]:
        """The DuckDB configuration of a worker's connection: :data:`READONLY_CONFIG` plus the limits."""
        temp = self.temp_root() / f"w{os.getpid()}"
        config = {k: v for k, v in READONLY_CONFIG.items() if k != "lock_configuration"}
        config.update({"memory_limit": f"{max(32, int(self.memory_mb * 0.6))}MB", "threads": 1,
                       "temp_directory": str(temp), "max_temp_directory_size": f"{int(self.temp_max_mb)}MB"})
        return config

    def temp_root(self) -> Path:
        return Path(self.temp_dir) if self.temp_dir is not None else Path(tempfile.gettempdir()) / "neusym-sql"


def _cell_size(value: Any) -> int:
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, (list, tuple, dict)):
        return min(len(repr(value)), 10 * MAX_BYTES)
    return 16


def _cut(value: Any, max_chars: int) -> tuple[Any, bool]:
    if isinstance(value, str) and len(value) > max_chars:
        return value[:max_chars] + f" …[{len(value) - max_chars:,} more characters cut]", True
    if isinstance(value, bytes) and len(value) > max_chars:
        return value[:max_chars], True
    return value, False


def _execute_in_worker(db_path: str, text: str, max_rows: int, byte_cap: int, cell_cap: int,
                       budget: QueryBudget) -> tuple:  # runs in a worker process
    """Run checked query ``text`` on ``db_path``; ``("ok", columns, types, rows, capped, cut)`` or
    ``("error", kind, message)`` (plain values only: DuckDB's exceptions do not travel between processes)."""
    con = None
    try:
        config = budget.duckdb_config()
        _clean_spill_folders(budget.temp_root())
        Path(config["temp_directory"]).mkdir(parents=True, exist_ok=True)
        con = connect_readonly(db_path, config=config)
        con.execute("SET enable_progress_bar = false")
        con.execute("SET lock_configuration = true")  # last: the query cannot change anything with SET
        con.execute(text)
        description = con.description or []
        rows: list[tuple] = []
        size = cut = 0
        capped = False
        while description and len(rows) <= max_rows:
            batch = con.fetchmany(min(_FETCH_ROWS, max_rows + 1 - len(rows)))
            if not batch:
                break
            for raw in batch:
                row = []
                for v in raw:
                    v, was_cut = _cut(v, cell_cap)
                    cut += was_cut
                    size += _cell_size(v)
                    row.append(v)
                if size > byte_cap and rows:
                    capped = True
                    break
                rows.append(tuple(row))
            if capped:
                break
        return ("ok", [str(d[0]) for d in description], [str(d[1]) for d in description], rows, capped, cut)
    except DatabaseUnavailableError as exc:
        return ("error", "unavailable", str(exc))
    except MemoryError:
        return ("error", "memory", "")
    except duckdb.OutOfMemoryException as exc:
        return ("error", "memory", _first_line(str(exc)))
    except duckdb.InterruptException:
        return ("error", "timeout", "")
    except duckdb.PermissionException as exc:
        return ("error", "permission", _first_line(str(exc)))
    except duckdb.Error as exc:
        message = _clean_duckdb_message(str(exc))
        kind = "memory" if re.search(r"out of memory|temporary directory|max_temp_directory_size|"
                                     r"failed to allocate|allocation failure", message, re.I) else "sql"
        return ("error", kind, message)
    finally:
        if con is not None:
            try:
                con.close()
            except Exception:  # noqa: BLE001 - closing after a failure; the result is already decided
                pass


_CLEANED: set[str] = set()


def _clean_spill_folders(root: Path) -> None:  # runs in a worker process
    """Once per worker and spill root: remove the spill folders of workers that are gone (a killed
    worker cannot remove its own)."""
    import shutil

    if str(root) in _CLEANED:
        return
    _CLEANED.add(str(root))
    if root.is_dir():
        for sub in root.glob("w*"):
            pid = sub.name[1:]
            if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(sub, ignore_errors=True)


def _worker_main(memory_mb: int) -> None:  # pragma: no cover - runs in the worker process
    """``python -m neusym.query.sqlsafe --worker MB``: answer queries read from stdin, one at a time.

    The address space is capped at ``MB`` MiB, the CPU priority lowered (interactive requests of
    the server go first) and Ctrl-C ignored (the parent decides when a worker stops). Each request
    is a length-prefixed pickle of the :func:`_execute_in_worker` arguments; each answer the pickle
    of its outcome tuple."""
    import resource
    import signal
    import sys

    limit = int(memory_mb) * 1024 * 1024
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError):
        pass
    try:
        os.nice(10)
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = stdin.read(8)
        if len(header) < 8:
            return
        args = pickle.loads(stdin.read(int.from_bytes(header, "big")))
        try:
            outcome = _execute_in_worker(*args)
            data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
        except MemoryError:
            data = pickle.dumps(("error", "memory", ""))
        stdout.write(len(data).to_bytes(8, "big") + data)
        stdout.flush()


class _Worker:
    """One worker process (``python -m neusym.query.sqlsafe --worker MB``), started on first use."""

    def __init__(self, memory_mb: int):
        self.memory_mb = memory_mb
        self.proc: subprocess.Popen | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "neusym.query.sqlsafe", "--worker", str(self.memory_mb)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     close_fds=True)

    def stop(self) -> None:
        """Kill the process and reap it: whatever it held is back with the OS when this returns."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
            pass
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()

    def run(self, args: tuple, timeout_s: float, cancel: threading.Event | None) -> tuple:
        """Send one query and wait for its outcome; a timeout or a cancel kills the worker."""
        if not self.alive():
            self.start()
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        data = pickle.dumps(args, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(len(data).to_bytes(8, "big") + data)
            self.proc.stdin.flush()
        except OSError:
            self.stop()
            return ("error", "died", "the worker stopped before the query was sent")
        deadline = time.monotonic() + timeout_s
        out = self.proc.stdout
        while True:
            wait = min(0.1, max(0.0, deadline - time.monotonic()))
            ready, _, _ = select.select([out], [], [], wait)
            if ready:
                break
            if cancel is not None and cancel.is_set():
                self.stop()
                return ("error", "cancelled", "")
            if time.monotonic() >= deadline:
                self.stop()
                return ("error", "timeout", "")
        header = out.read(8)
        if len(header) < 8:
            code = self.proc.wait(10) if self.proc is not None else None
            self.stop()
            return ("error", "died", f"exit code {code}")
        payload = out.read(int.from_bytes(header, "big"))
        return pickle.loads(payload)


class _WorkerPool:
    """``workers`` worker processes that run read-only queries, each under an address-space cap of
    ``memory_mb``; a query takes a free worker (waiting for one at most ``wait_s``), and a query
    past its time limit is stopped by killing its worker, which returns every byte it held to the
    OS at once (a new worker starts with the next query)."""

    def __init__(self, memory_mb: int, workers: int):
        self.idle: queue.Queue[_Worker] = queue.Queue()
        self.all = [_Worker(memory_mb) for _ in range(max(1, workers))]
        for worker in self.all:
            self.idle.put(worker)

    def close(self) -> None:
        for worker in self.all:
            worker.stop()


_POOLS: dict[tuple, _WorkerPool] = {}
_POOLS_LOCK = threading.Lock()


def _pool_for(budget: QueryBudget) -> _WorkerPool:
    key = (budget.memory_mb, budget.workers)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            if not _POOLS:
                atexit.register(close_worker_pools)
            pool = _POOLS[key] = _WorkerPool(budget.memory_mb, budget.workers)
        return pool


def close_worker_pools() -> None:
    """Stop every SQL worker process of this process (a server's shutdown; tests). Idempotent."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()


def worker_pids(budget: QueryBudget) -> list[int]:
    """Process ids of the running SQL workers of ``budget`` in this process (none before the first query)."""
    return [w.proc.pid for w in _pool_for(budget).all if w.proc is not None and w.alive()]


def start_workers(budget: QueryBudget) -> None:
    """Start the idle worker processes of ``budget`` now (a server's start), so the first queries do
    not wait for them to start (about a third of a second each)."""
    pool = _pool_for(budget)
    taken = []
    try:
        while True:
            try:
                worker = pool.idle.get_nowait()
            except queue.Empty:
                break
            taken.append(worker)
            if not worker.alive():
                worker.start()
    finally:
        for worker in taken:
            pool.idle.put(worker)


def run_readonly_sql(db_path: Path, sql: str, *, timeout_s: float, max_rows: int, max_bytes: int | None = None,
                     max_cell_chars: int | None = None, budget: QueryBudget | None = None,
                     cancel: threading.Event | None = None) -> QueryResult:
    """Run one read-only query on the DuckDB file ``db_path`` under a time, row, byte and memory budget.

    The query runs in a worker process (:class:`QueryBudget`, default ``QueryBudget()``: 1 GiB
    address space per worker, 2 workers, 2 GiB of spill files): ``timeout_s``: seconds until the
    worker is killed and :class:`SQLTimeoutError` raised (its memory is back with the OS before
    this returns); ``max_rows``: at most this many rows are returned, ``truncated`` tells whether more
    existed; ``max_bytes`` (default :data:`MAX_BYTES`): rows are fetched in batches and fetching stops
    once their text adds up to this many bytes (``bytes_capped``); ``max_cell_chars`` (default
    :data:`MAX_CELL_CHARS`): longer text cells are cut (``cells_cut``). ``cancel``: when set while the
    query runs, the worker is killed and :class:`SQLTimeoutError` raised (a client that went away).

    Raises :class:`UnsafeSQLError` for anything but one read-only query (see
    :func:`check_readonly_sql`), :class:`DatabaseUnavailableError` for a missing or locked file,
    :class:`SQLResourceError` when the query needs more memory or spill space than the budget,
    :class:`BusyError` when no worker frees up within ``budget.wait_s`` and :class:`SQLError` with
    DuckDB's message when the query fails (unknown table, type error...).
    """
    if max_rows < 0:
        raise ValueError("max_rows must be >= 0")
    byte_cap = MAX_BYTES if max_bytes is None else int(max_bytes)
    cell_cap = MAX_CELL_CHARS if max_cell_chars is None else int(max_cell_chars)
    budget = budget or QueryBudget()
    text = check_readonly_sql(sql)
    path = Path(db_path)
    if not path.is_file():
        raise DatabaseUnavailableError(
            f"database file not found: {path} (build the corpus first, or point NEUSYM_HOME at an existing one)")
    started = time.monotonic()
    pool = _pool_for(budget)
    try:
        worker = pool.idle.get(timeout=max(0.0, budget.wait_s)) if budget.wait_s > 0 else pool.idle.get_nowait()
    except queue.Empty:
        raise BusyError(f"all {budget.workers} SQL workers stayed busy for {budget.wait_s:g} s (NEUSYM_SQL_WORKERS); "
                        "try again shortly", retry_after_s=max(1, int(timeout_s))) from None
    try:
        outcome = worker.run((str(path), text, max_rows, byte_cap, cell_cap, budget), timeout_s, cancel)
    finally:
        pool.idle.put(worker)
    if outcome[0] == "error":
        raise _query_error(outcome[1], outcome[2], timeout_s, budget)
    _, columns, types, rows, capped, cut = outcome
    truncated = len(rows) > max_rows or capped
    return QueryResult(columns=columns, rows=rows[:max_rows], truncated=truncated,
                       elapsed_s=time.monotonic() - started, types=types, bytes_capped=capped, cells_cut=cut)


def run_query(settings: Any, db_path: Path, sql: str, *, max_rows: int | None = None,
              cancel: threading.Event | None = None) -> QueryResult:
    """:func:`run_readonly_sql` with every limit from ``settings`` (``NEUSYM_SQL_TIMEOUT_S``,
    ``_MAX_ROWS``, ``_MAX_BYTES``, ``_MAX_CELL_CHARS`` and the :class:`QueryBudget`): what the CLI, the
    service and the agent run. ``max_rows`` replaces the settings' row cap (callers that know how
    many rows they need). Raises as :func:`run_readonly_sql`."""
    return run_readonly_sql(db_path, sql, timeout_s=float(settings.sql_timeout_s),
                            max_rows=int(settings.sql_max_rows) if max_rows is None else int(max_rows),
                            max_bytes=int(settings.sql_max_bytes), max_cell_chars=int(settings.sql_max_cell_chars),
                            budget=QueryBudget.from_settings(settings), cancel=cancel)


def _query_error(kind: str, message: str, timeout_s: float, budget: QueryBudget) -> NeusymError:
    if kind == "timeout":
        return SQLTimeoutError(f"query stopped after {timeout_s:g} s (time limit); add filters or a LIMIT, "
                               "avoid cross joins")
    if kind == "cancelled":
        return SQLTimeoutError("query stopped: the request was cancelled")
    if kind in ("memory", "died"):
        return SQLResourceError(
            f"query stopped: it needs more than its memory budget ({budget.memory_mb} MB per query, "
            f"{budget.temp_max_mb} MB of spill files; NEUSYM_SQL_MEMORY_MB); aggregate, filter or add a LIMIT, and "
            "avoid building huge lists or strings" + (f" ({message})" if message and kind == "memory" else ""))
    if kind == "unavailable":
        return DatabaseUnavailableError(message)
    if kind == "permission":
        return UnsafeSQLError(f"refused by the database: {message}")
    return SQLError(f"SQL error: {message}")


def _clean_duckdb_message(message: str) -> str:
    """DuckDB messages carry a caret diagram after the first lines; keep the informative part."""
    lines = [ln.rstrip() for ln in message.strip().splitlines() if ln.strip()]
    kept = [ln for ln in lines if not ln.lstrip().startswith(("^", "LINE "))]
    return " ".join(kept[:3])


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------


def to_jsonable(value: Any) -> Any:
    """A JSON-serialisable form of one DuckDB value.

    UUID, date, time, datetime → ISO strings; timedelta → seconds (float); Decimal → int when
    integral, else float; NaN/inf → None; bytes → base64 string; lists/tuples/sets → lists;
    dicts (STRUCT/MAP) → dicts with string keys; anything else → ``str(value)``.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    return str(value)


def cell_text(value: Any, *, max_chars: int | None = None) -> str:
    """One value as a single line of text for a table cell (NULL for None; lists as JSON).

    Newlines and runs of whitespace are collapsed to one space; ``max_chars`` cuts long values
    with a trailing ``…``.
    """
    if value is None:
        text = "NULL"
    else:
        plain = to_jsonable(value)
        if isinstance(plain, str):
            text = plain
        elif isinstance(plain, float):
            text = repr(plain)
        elif plain is None:
            text = "NaN" if isinstance(value, float) and math.isnan(value) else str(value)
        else:
            text = json.dumps(plain, ensure_ascii=False)
    text = " ".join(text.split())
    if max_chars is not None and len(text) > max_chars:
        text = text[: max(max_chars - 1, 0)] + "…"
    return text


def _unique_keys(columns: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    keys = []
    for col in columns:
        if col in seen:
            seen[col] += 1
            keys.append(f"{col}_{seen[col]}")
        else:
            seen[col] = 0
            keys.append(col)
    return keys


def render_table(
    columns: list[str],
    rows: list[tuple] | list[list],
    *,
    max_cell_chars: int | None = None,
    pad_limit: int = 40,
) -> str:
    """A bordered text table like the paper's observation format (App. F.2.3).

    Columns are padded to their widest cell but at most ``pad_limit`` characters, so one long text
    cell does not pad every other row (longer cells simply overflow their column).
    """
    cells = [[cell_text(v, max_chars=max_cell_chars) for v in row] for row in rows]
    header = [" ".join(str(c).split()) for c in columns]
    widths = []
    for i, name in enumerate(header):
        longest = max([len(name)] + [len(r[i]) for r in cells])
        widths.append(min(longest, pad_limit))
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(values: list[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"

    out = [rule, line(header), rule]
    out.extend(line(r) for r in cells)
    out.append(rule)
    return "\n".join(out)


def format_result(result: QueryResult, fmt: str = "table", *, max_cell_chars: int | None = None) -> str:
    """Serialise a :class:`QueryResult` as ``table``, ``json`` or ``csv`` text.

    - ``table``: bordered text table plus ``In total, N rows are displayed.`` and, when the row cap
      cut the result, a note saying so (this is also the agent's observation format);
    - ``json``: a JSON array of row objects keyed by column name (duplicate names get ``_1``,
      ``_2``...), values converted by :func:`to_jsonable`;
    - ``csv``: header line plus rows; NULL as empty field, lists/structs as JSON text.

    Raises ``ValueError`` for another ``fmt``.
    """
    fmt = fmt.lower()
    if fmt == "table":
        if not result.columns:
            return "The statement returned no result set."
        body = render_table(result.columns, result.rows, max_cell_chars=max_cell_chars)
        n = len(result.rows)
        footer = f"In total, {n} row{' is' if n == 1 else 's are'} displayed."
        if result.bytes_capped:
            footer += (f" The result was cut at {len(result.rows)} rows (size limit); select fewer or shorter columns, "
                       "or add LIMIT or filters.")
        elif result.truncated:
            footer += f" The result had more rows and was cut at {len(result.rows)} (row limit); add LIMIT or filters."
        if result.cells_cut:
            footer += f" {result.cells_cut} long text cell(s) were shortened."
        return f"{body}\n{footer}"
    if fmt == "json":
        keys = _unique_keys(result.columns)
        objects = [{k: to_jsonable(v) for k, v in zip(keys, row)} for row in result.rows]
        return json.dumps(objects, ensure_ascii=False, indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(result.columns)
        for row in result.rows:
            out = []
            for v in row:
                plain = to_jsonable(v)
                if plain is None:
                    out.append("")
                elif isinstance(plain, (list, dict)):
                    out.append(json.dumps(plain, ensure_ascii=False))
                else:
                    out.append(plain)
            writer.writerow(out)
        return buf.getvalue()
    raise ValueError(f"unknown format {fmt!r}; use table, json or csv")


__all__ = [
    "DatabaseUnavailableError",
    "QueryBudget",
    "QueryResult",
    "READONLY_CONFIG",
    "SQLError",
    "cell_text",
    "check_readonly_sql",
    "close_worker_pools",
    "connect_readonly",
    "format_result",
    "render_table",
    "run_query",
    "run_readonly_sql",
    "start_workers",
    "worker_pids",
    "to_jsonable",
]


if __name__ == "__main__":  # the SQL worker process of _WorkerPool
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker_main(int(sys.argv[2]))
