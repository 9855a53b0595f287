"""Read-only SQL: refusals (static checks and the locked connection), time limit, row cap, formats."""

from __future__ import annotations

import csv
import io
import json
import time
import uuid
from pathlib import Path

import duckdb
import pytest

from neusym.errors import BusyError, SQLResourceError, SQLTimeoutError, UnsafeSQLError
from neusym.query.sqlsafe import (
    DatabaseUnavailableError,
    QueryBudget,
    QueryResult,
    SQLError,
    check_readonly_sql,
    connect_readonly,
    format_result,
    run_readonly_sql,
    sql_nesting_depth,
    worker_pids,
)

REPO = Path(__file__).resolve().parent.parent
PAPER_ID = "6f1c7d0e-2b7a-5d55-9a0e-000000000001"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sqlsafe") / "corpus.duckdb"
    con = duckdb.connect(str(path))
    con.execute((REPO / "sql" / "schema.sql").read_text())
    con.execute(
        "INSERT INTO metadata (paper_id, title, num_pages, pdf_path, pdf_sha256, authors, pub_year) "
        "VALUES (?, 'Retrieval-Augmented Generation', 3, '/nonexistent.pdf', 'abc', ['Patrick Lewis', 'Ethan Perez'], 2020)",
        [PAPER_ID],
    )
    con.execute(
        "INSERT INTO quarantine VALUES ('deadbeef', '/x.pdf', 'encrypted', TIMESTAMP '2024-01-02 03:04:05')"
    )
    con.close()
    return path


def run(db: Path, sql: str, **kw) -> QueryResult:
    return run_readonly_sql(db, sql, timeout_s=kw.pop("timeout_s", 5.0), max_rows=kw.pop("max_rows", 100))


# --- refusals ---------------------------------------------------------------------------------

REFUSED = [
    # (sql, fragment expected in the message)
    ("INSERT INTO metadata (paper_id) VALUES (uuid())", "INSERT"),
    ("UPDATE metadata SET title = 'x'", "UPDATE"),
    ("DELETE FROM metadata", "DELETE"),
    ("DROP TABLE metadata", "DROP"),
    ("CREATE TABLE t (a INTEGER)", "CREATE"),
    ("CREATE VIEW v AS SELECT 1", "CREATE"),
    ("ALTER TABLE metadata ADD COLUMN x INTEGER", "ALTER"),
    ("ATTACH '/tmp/other.duckdb' AS other", "ATTACH"),
    ("DETACH other", "DETACH"),
    ("COPY metadata TO '/tmp/out.csv'", "COPY"),
    ("EXPORT DATABASE '/tmp/exported'", "EXPORT"),
    ("IMPORT DATABASE '/tmp/exported'", "IMPORT"),
    ("INSTALL httpfs", "INSTALL"),
    ("LOAD httpfs", "LOAD"),
    ("PRAGMA table_info('metadata')", "PRAGMA"),
    ("SET threads = 1", "SET"),
    ("RESET threads", "RESET"),
    ("CALL pragma_version()", "CALL"),
    ("CHECKPOINT", "CHECKPOINT"),
    ("EXPLAIN SELECT 1", "EXPLAIN"),
    ("BEGIN TRANSACTION", "TRANSACTION"),
    ("USE memory", "USE"),
    ("SELECT * FROM read_csv('/etc/passwd')", "read_csv()"),
    ("SELECT * FROM read_csv_auto('/etc/passwd')", "read_csv_auto()"),
    ("SELECT * FROM read_parquet('/tmp/x.parquet')", "read_parquet()"),
    ("SELECT * FROM read_json_auto('/tmp/x.json')", "read_json_auto()"),
    ("SELECT * FROM read_text('/etc/hostname')", "read_text()"),
    ("SELECT * FROM read_blob('/etc/hostname')", "read_blob()"),
    ("SELECT * FROM glob('/etc/*')", "glob()"),
    ("SELECT * FROM parquet_scan('/tmp/x.parquet')", "parquet_scan()"),
    ("SELECT * FROM sqlite_scan('/tmp/x.db', 't')", "sqlite_scan()"),
    ("SELECT * FROM http_get('https://example.org')", "http_get()"),
    ("SELECT * FROM query('SELECT 1')", "query()"),
    ("SELECT getenv('HOME')", "getenv()"),
    ("SELECT title FROM metadata WHERE paper_id IN (SELECT * FROM read_text('/etc/hostname'))", "read_text()"),
    ("SELECT * FROM '/etc/passwd'", "file path"),
    ("SELECT * FROM 'data.csv'", "file path"),
    ("SELECT * FROM 'https://example.org/x.parquet'", "file path"),
    ("SELECT 1; SELECT 2", "multiple statements"),
    ("SELECT * FROM metadata; DROP TABLE metadata", "multiple statements"),
    ("SELECT 1; -- trailing comment after a second statement marker\nDELETE FROM metadata", "multiple statements"),
    ("", "empty"),
    ("   ;  ", "empty"),
    # the server's configuration and file paths
    ("SELECT path FROM duckdb_databases()", "configuration or file paths"),
    ("SELECT * FROM duckdb_databases", "configuration or file paths"),
    ("SELECT * FROM system.main.duckdb_databases", "configuration or file paths"),
    ("SELECT * FROM duckdb_settings()", "configuration or file paths"),
    ("SELECT current_setting('temp_directory')", "configuration or file paths"),
    ("SELECT * FROM pragma_database_list", "configuration or file paths"),
    ("SELECT file FROM pragma_database_list()", "configuration or file paths"),
    ("SELECT * FROM duckdb_extensions()", "configuration or file paths"),
    ("SELECT * FROM duckdb_temporary_files()", "configuration or file paths"),
]


@pytest.mark.parametrize("sql,fragment", REFUSED, ids=[r[0][:40] for r in REFUSED])
def test_refused_with_clear_message(db: Path, sql: str, fragment: str) -> None:
    with pytest.raises(UnsafeSQLError) as info:
        run(db, sql)
    message = str(info.value)
    assert message.startswith("refused"), message
    assert fragment.lower() in message.lower(), message


def test_static_check_is_pure_and_returns_stripped_sql() -> None:
    assert check_readonly_sql("  SELECT 1 ;; ") == "SELECT 1"
    with pytest.raises(UnsafeSQLError):
        check_readonly_sql("DROP TABLE metadata")


def test_import_database_does_not_touch_files(tmp_path: Path) -> None:
    # DuckDB parses IMPORT DATABASE by reading <dir>/schema.sql; the check must refuse it before that.
    (tmp_path / "schema.sql").write_text("CREATE TABLE pwned (a INTEGER);")
    with pytest.raises(UnsafeSQLError, match="IMPORT"):
        check_readonly_sql(f"IMPORT DATABASE '{tmp_path}'")
    with pytest.raises(UnsafeSQLError, match="IMPORT"):
        check_readonly_sql(f"/* c */ import database '{tmp_path}'")


def test_connection_layer_blocks_files_settings_and_writes_on_its_own(db: Path) -> None:
    """Defence in depth: even without the static checks the connection cannot read files or write."""
    con = connect_readonly(db)
    try:
        with pytest.raises(duckdb.PermissionException):
            con.execute("SELECT * FROM read_csv('/etc/passwd')").fetchall()
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("CREATE TABLE t (a INTEGER)")
        settings = dict(con.execute("SELECT name, value FROM duckdb_settings()").fetchall())
        assert settings["enable_external_access"] == "false"
        assert settings["python_enable_replacements"] == "false"
    finally:
        con.close()


# --- allowed queries ----------------------------------------------------------------------------


def test_select_works(db: Path) -> None:
    result = run(db, "SELECT title, pub_year, authors FROM metadata WHERE title ILIKE '%augmented%'")
    assert result.columns == ["title", "pub_year", "authors"]
    assert result.rows == [("Retrieval-Augmented Generation", 2020, ["Patrick Lewis", "Ethan Perez"])]
    assert result.truncated is False
    assert result.elapsed_s > 0


@pytest.mark.parametrize(
    "sql",
    [
        "FROM metadata",
        "WITH t AS (SELECT title FROM metadata) SELECT * FROM t",
        "SELECT 1 UNION ALL SELECT 2",
        "DESCRIBE metadata",
        "SHOW TABLES",
        "SELECT * FROM duckdb_columns() WHERE table_name = 'pages'",
        "SELECT title FROM metadata WHERE title GLOB 'Retrieval*'",
        "SELECT unnest(authors) AS author FROM metadata",
        "SELECT 1;",
    ],
)
def test_read_only_variants_allowed(db: Path, sql: str) -> None:
    assert run(db, sql).columns


def test_sql_errors_are_reported_with_duckdb_message(db: Path) -> None:
    with pytest.raises(SQLError, match="nope"):
        run(db, "SELECT * FROM nope")
    with pytest.raises(SQLError, match="syntax"):
        run(db, "SELEC title FROM metadata")


def test_missing_database_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.duckdb"
    with pytest.raises(DatabaseUnavailableError, match="not found") as info:
        run_readonly_sql(missing, "SELECT 1", timeout_s=1, max_rows=1)
    assert str(missing) in str(info.value)
    assert not missing.exists()  # read-only access never creates the file


def test_timeout_interrupts_a_long_query(db: Path) -> None:
    started = time.monotonic()
    with pytest.raises(SQLTimeoutError, match="0.5 s"):
        run_readonly_sql(db, "SELECT count(*) FROM range(100000) a, range(100000) b", timeout_s=0.5, max_rows=1)
    assert time.monotonic() - started < 5.0
    # the database is usable again right after the interruption
    assert run(db, "SELECT count(*) FROM metadata").rows == [(1,)]


def test_row_cap_sets_truncated(db: Path) -> None:
    capped = run(db, "SELECT * FROM range(10) t(i)", max_rows=4)
    assert [r[0] for r in capped.rows] == [0, 1, 2, 3]
    assert capped.truncated is True
    exact = run(db, "SELECT * FROM range(4) t(i)", max_rows=4)
    assert len(exact.rows) == 4 and exact.truncated is False
    # the cap streams: a billion-row query returns at once
    started = time.monotonic()
    huge = run(db, "SELECT * FROM range(1000000000)", max_rows=3)
    assert huge.truncated and time.monotonic() - started < 3.0


# --- formats ------------------------------------------------------------------------------------

TYPED_SQL = (
    "SELECT paper_id, title, authors, 1.50::DECIMAL(5,2) AS dec, 3::DECIMAL(4,0) AS dec_int, "
    "DATE '2024-05-06' AS day, quarantined_at AS ts, NULL AS nothing, 1 AS dup, 2 AS dup "
    "FROM metadata, quarantine"
)


def test_json_format(db: Path) -> None:
    rows = json.loads(format_result(run(db, TYPED_SQL), "json"))
    assert rows == [
        {
            "paper_id": PAPER_ID,
            "title": "Retrieval-Augmented Generation",
            "authors": ["Patrick Lewis", "Ethan Perez"],
            "dec": 1.5,
            "dec_int": 3,
            "day": "2024-05-06",
            "ts": "2024-01-02T03:04:05",
            "nothing": None,
            "dup": 1,
            "dup_1": 2,
        }
    ]
    assert isinstance(uuid.UUID(rows[0]["paper_id"]), uuid.UUID)


def test_csv_format(db: Path) -> None:
    text = format_result(run(db, TYPED_SQL), "csv")
    parsed = list(csv.reader(io.StringIO(text)))
    assert parsed[0] == ["paper_id", "title", "authors", "dec", "dec_int", "day", "ts", "nothing", "dup", "dup"]
    assert parsed[1] == [
        PAPER_ID,
        "Retrieval-Augmented Generation",
        '["Patrick Lewis", "Ethan Perez"]',
        "1.5",
        "3",
        "2024-05-06",
        "2024-01-02T03:04:05",
        "",
        "1",
        "2",
    ]


def test_table_format(db: Path) -> None:
    text = format_result(run(db, "SELECT title, pub_year FROM metadata"), "table")
    lines = text.splitlines()
    assert lines[0].startswith("+-") and lines[0] == lines[2] == lines[4]
    assert lines[1].split("|")[1].strip() == "title"
    assert "| Retrieval-Augmented Generation | 2020     |" in text
    assert lines[-1] == "In total, 1 row is displayed."
    capped = format_result(run(db, "SELECT * FROM range(5)", max_rows=2), "table")
    assert "In total, 2 rows are displayed." in capped and "row limit" in capped
    with pytest.raises(ValueError, match="unknown format"):
        format_result(run(db, "SELECT 1"), "xml")


# --- nesting depth --------------------------------------------------------------------------------


def nested_subqueries(levels: int) -> str:
    """``SELECT * FROM (SELECT * FROM (... metadata) t) t``: ``levels`` parenthesised subqueries."""
    return "SELECT title FROM " + "(SELECT * FROM " * levels + "metadata" + ") t" * levels


def nested_parentheses(levels: int) -> str:
    return "SELECT title, " + "(" * levels + "pub_year + 1" + ")" * levels + " AS y FROM metadata"


@pytest.mark.parametrize("sql", [nested_subqueries(44), nested_parentheses(44), nested_subqueries(1000),
                                 "SELECT " + "abs(" * 60 + "1" + ")" * 60,
                                 "SELECT title FROM metadata WHERE pub_year IN " + "(SELECT 2020 WHERE 1 IN " * 50
                                 + "(1)" + ")" * 50],
                         ids=["44 subqueries", "44 parentheses", "1000 subqueries", "60 calls", "50 IN subqueries"])
def test_deeply_nested_sql_is_refused_in_one_line(db: Path, sql: str) -> None:
    with pytest.raises(UnsafeSQLError) as info:
        run(db, sql)
    message = str(info.value)
    assert message.startswith("refused: SQL nested too deeply (more than 32 levels of parentheses/subqueries: ")
    assert "\n" not in message and len(message) < 300, message


def test_nesting_without_brackets_is_refused_not_a_recursion_error(db: Path) -> None:
    # no parentheses at all, but each NOT is one level for the recursive parser behind the checks
    sql = "SELECT title FROM metadata WHERE " + "NOT " * 400 + "pub_year = 2020"
    with pytest.raises(UnsafeSQLError) as info:
        run(db, sql)
    assert str(info.value).startswith("refused: SQL nested too deeply (more than the checker can follow")


def test_nesting_up_to_the_limit_runs(db: Path) -> None:
    assert run(db, nested_subqueries(32)).rows == [("Retrieval-Augmented Generation",)]
    assert run(db, nested_parentheses(32)).rows == [("Retrieval-Augmented Generation", 2021)]
    assert run(db, "SELECT " + "abs(" * 32 + "-3" + ")" * 32 + " AS x").rows == [(3,)]
    # brackets inside strings, quoted identifiers and comments are not nesting
    text = "(" * 50
    result = run(db, f"SELECT '{text}' AS \"{text}\" -- {text}\n /* {text} */")
    assert result.rows == [(text,)] and result.columns == [text]
    probe = f"SELECT E'\\'{text}', $q${text}$q$, [1, [2]]"
    assert sql_nesting_depth(probe) == (2, probe.index("[2]"))


# --- memory, spill space, cancellation and concurrency (the query's worker process) ------------------

def _rss(pid: int | str) -> int:
    """Resident memory of a process in bytes, from /proc (0 when it is gone)."""
    import os

    try:
        return int(open(f"/proc/{pid}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _own_rss() -> int:
    return _rss("self")


class _PeakRSS:
    """Samples the RSS of this process and of the SQL workers of ``budget`` every 20 ms while the block runs."""

    def __init__(self, budget: QueryBudget):
        self.budget = budget

    def __enter__(self):
        import threading

        self.children = self.own = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.children = max(self.children, sum(_rss(pid) for pid in worker_pids(self.budget)))
            self.own = max(self.own, _own_rss())
            self._stop.wait(0.02)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


# queries that would each allocate several GB (B1 of the S issue)
MEMORY_HOGS = [
    "SELECT range(100000000)",
    "SELECT sum(x) FROM (SELECT unnest(range(100000000)) x)",
    "SELECT repeat('x', 1000000000)",
    "SELECT length(string_agg(repeat('y', 1000), ',')) FROM range(4000000)",
    "SELECT list(x) FROM range(600000000) t(x)",
]


@pytest.mark.parametrize("sql", MEMORY_HOGS)
def test_a_query_past_its_memory_budget_stops_with_a_clear_error(db: Path, tmp_path: Path, sql: str) -> None:
    budget = QueryBudget(memory_mb=512, temp_dir=tmp_path / "spill", temp_max_mb=64, workers=1)
    before = _own_rss()
    with _PeakRSS(budget) as peak:
        with pytest.raises((SQLResourceError, SQLTimeoutError)) as info:
            run_readonly_sql(db, sql, timeout_s=20, max_rows=10, budget=budget)
    if isinstance(info.value, SQLResourceError):
        assert "memory budget (512 MB per query" in str(info.value)
    assert peak.children < 600 * 2**20, f"worker RSS peaked at {peak.children / 2**20:.0f} MB"
    assert peak.own - before < 200 * 2**20, "the caller's own memory grew with the query"
    # the worker is usable at once
    assert run_readonly_sql(db, "SELECT count(*) FROM metadata", timeout_s=5, max_rows=1, budget=budget).rows == [(1,)]


def test_spill_files_go_to_the_budget_folder_and_are_capped(db: Path, tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    budget = QueryBudget(memory_mb=256, temp_dir=spill, temp_max_mb=16, workers=1)
    with pytest.raises((SQLResourceError, SQLTimeoutError)):
        run_readonly_sql(db, "SELECT x, random() AS r FROM range(30000000) t(x) ORDER BY r", timeout_s=30,
                         max_rows=3, budget=budget)
    assert spill.is_dir() and all(p.name.startswith("w") for p in spill.iterdir())
    assert not list(db.parent.glob("*.tmp")), "DuckDB's default temp folder beside the database was used"


def test_a_timeout_kills_the_worker_and_returns_its_memory(db: Path) -> None:
    budget = QueryBudget(memory_mb=1024, workers=1)
    run_readonly_sql(db, "SELECT 1", timeout_s=5, max_rows=1, budget=budget)  # the worker is up
    [worker] = worker_pids(budget)
    started = time.monotonic()
    with pytest.raises(SQLTimeoutError, match="1 s"):
        run_readonly_sql(db, "SELECT x, random() AS r FROM range(200000000) t(x) ORDER BY r", timeout_s=1,
                         max_rows=1, budget=budget)
    assert time.monotonic() - started < 3.0  # answered at the limit, not limit + 5 s
    assert not Path(f"/proc/{worker}").exists(), "the timed-out worker is still running (or not reaped)"
    assert worker not in worker_pids(budget)


def test_cancel_stops_a_running_query(db: Path) -> None:
    import threading

    budget = QueryBudget(memory_mb=512, workers=1)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(SQLTimeoutError, match="cancelled"):
        run_readonly_sql(db, "SELECT count(*) FROM range(100000) a, range(100000) b", timeout_s=30, max_rows=1,
                         budget=budget, cancel=cancel)
    assert time.monotonic() - started < 2.5


def test_queries_beyond_the_workers_wait_then_are_refused_as_busy(db: Path) -> None:
    import threading

    budget = QueryBudget(memory_mb=512, workers=1, wait_s=0.3)
    outcome: list = []

    def long_query() -> None:
        try:
            run_readonly_sql(db, "SELECT x, random() AS r FROM range(200000000) t(x) ORDER BY r", timeout_s=2,
                             max_rows=1, budget=budget)
        except Exception as exc:  # noqa: BLE001 - inspected below
            outcome.append(exc)

    long_one = threading.Thread(target=long_query)
    long_one.start()
    time.sleep(0.3)
    with pytest.raises(BusyError, match="SQL workers stayed busy") as info:
        run_readonly_sql(db, "SELECT 1", timeout_s=5, max_rows=1, budget=budget)
    assert info.value.retry_after_s >= 1
    long_one.join()
    assert len(outcome) == 1 and isinstance(outcome[0], (SQLTimeoutError, SQLResourceError))
    assert run_readonly_sql(db, "SELECT 1", timeout_s=5, max_rows=1, budget=budget).rows == [(1,)]
