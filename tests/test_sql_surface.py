"""The analysts' SQL surface: the read-only database of each corpus version, documented views, Parquet export,
schema docs.

Everything runs on copies of the session corpus (``ingested`` fixture): the copy is cheap, so each
test that publishes or re-materializes owns its NEUSYM_HOME and tests do not depend on their order.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from neusym.errors import UnsafeSQLError
from neusym.store.export import EXPORT_TABLES, export_objects, export_parquet
from neusym.ingest.materialize import materialize
from neusym.store.schema import describe
from neusym.store.schema_docs import DOC_TABLES, database_schema_markdown, describe_views, doc_tables, schema_markdown
from neusym.ingest.publish import publish
from neusym.settings import Settings
from neusym.query.sqlsafe import run_readonly_sql
from neusym.store.db import writer
from neusym.store.versions import NoCorpusVersion, PublishError, current_db, list_versions, snapshot_link
from neusym.ingest.staging import stage_quarantine
from neusym.store.views import VIEW_NAMES, create_views, list_views

ELEMENT_TABLES = {  # element_search.element_type -> table
    "section": "sections",
    "chunk": "chunks",
    "table": "tables",
    "image": "images",
    "equation": "equations",
    "reference": "reference",
}


def _copy_home(src: Path, dst: Path) -> Settings:
    """A private NEUSYM_HOME holding a copy of the session corpus (versions included), with the views created."""
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("models", ".readers"))
    settings = Settings(home=dst)
    with writer(settings) as con:
        create_views(con)  # idempotent: a no-op change when materialize already created them
    return settings


def _publish(settings: Settings) -> Path:
    """Publish a corpus version; its database path."""
    publish(settings)
    return current_db(settings)


@pytest.fixture(scope="module")
def surface(ingested, tmp_path_factory):
    """(settings, database path): a copied corpus with views and one freshly published version."""
    settings = _copy_home(ingested[0].home, tmp_path_factory.mktemp("sql-surface") / "home")
    return settings, _publish(settings)


def _ro(path: Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(path), read_only=True)


def _catalog(con: duckdb.DuckDBPyConnection) -> dict:
    return {
        "tables": con.execute(
            "SELECT table_name, comment FROM duckdb_tables() WHERE schema_name = 'main' "
            "AND database_name = current_database() ORDER BY 1"
        ).fetchall(),
        "views": con.execute(
            "SELECT view_name, comment FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' "
            "AND database_name = current_database() ORDER BY 1"
        ).fetchall(),
        "columns": con.execute(
            "SELECT table_name, column_name, data_type, comment FROM duckdb_columns() WHERE schema_name = 'main' "
            "AND NOT internal AND database_name = current_database() ORDER BY table_name, column_index"
        ).fetchall(),
        "rows": {
            t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
            for (t,) in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND database_name = current_database()"
            ).fetchall()
        },
    }


# --------------------------------------------------------------------------------------------
# Snapshots
# --------------------------------------------------------------------------------------------


def test_no_version_yet_is_a_clear_error(tmp_path):
    settings = Settings(home=tmp_path)
    with pytest.raises(NoCorpusVersion, match="no corpus version published"):
        current_db(settings)
    with pytest.raises(PublishError, match="nothing to publish"):
        publish(settings)


def test_version_database_is_a_complete_read_only_copy_with_comments_and_views(surface):
    settings, snap = surface
    link = snapshot_link(settings)
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))  # relative: the home can move
    assert link.resolve() == snap and current_db(settings) == snap
    assert snap.parent.parent == settings.home / "versions" and snap.parent.name.startswith("v")
    assert not Path(str(snap) + ".wal").exists()
    assert stat.S_IMODE(snap.stat().st_mode) == 0o444
    writer_con, copy = _ro(settings.db_path), _ro(snap)
    try:
        expected, got = _catalog(writer_con), _catalog(copy)
    finally:
        writer_con.close()
        copy.close()
    assert got == expected
    assert {v for v, _ in got["views"]} == set(VIEW_NAMES)
    assert all(comment for _, comment in got["tables"] + got["views"])
    assert all(comment for *_, comment in got["columns"]), "every table and view column keeps its comment"
    assert got["rows"]["chunks"] > 0 and got["rows"]["metadata"] == 5


def test_reader_keeps_working_while_a_refresh_materializes_and_publishes(ingested, tmp_path):
    """A reader holding the snapshot pointer open (an analyst's DuckDB/BI tool) is not disturbed by a refresh."""
    settings = _copy_home(ingested[0].home, tmp_path / "home")
    first = _publish(settings)
    published = [first]
    stop = tmp_path / "stop-reader"
    proc = subprocess.Popen(
        [sys.executable, "-c", _READER, str(snapshot_link(settings)), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line, f"reader failed to start: {proc.stderr.read()}"
        ready = json.loads(line)["ready"]
        # The refresh: the single writer re-loads every staged paper plus one new quarantine record.
        parsed = settings.staging_dir / "parsed"
        dirs = sorted(p for p in parsed.iterdir() if p.is_dir() and not p.name.startswith("."))
        record = stage_quarantine(settings, tmp_path / "broken.pdf", "0" * 64, "test: not a PDF")
        started = time.time()
        report = materialize(settings, dirs, [record])
        assert current_db(settings) == first  # materialized, not yet published: readers see the old version
        second = _publish(settings)
        published.append(second)
        switched = time.time()
        assert report.papers_loaded == 5 and report.row_counts["quarantine"] == ready[2] + 1
        assert current_db(settings) == second != first
        assert first.exists()  # superseded once: the previous version is still on disk
        # A new reader resolves the pointer to the new version and sees the refresh.
        fresh = _ro(snapshot_link(settings))
        try:
            assert fresh.execute("SELECT count(*) FROM quarantine").fetchone()[0] == ready[2] + 1
        finally:
            fresh.close()
        time.sleep(0.3)
        # Superseded twice: the first version is deleted while the reader still has its database open.
        published.append(_publish(settings))
        assert not first.exists()
        time.sleep(0.3)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["errors"] == []
    assert result["answers"] == [json.dumps(ready)], "the open reader saw only the version it opened"
    assert any(started <= t <= switched for t in result["times"]), "the reader queried during the refresh"
    assert any(t > switched + 0.3 for t in result["times"]), "the reader kept working after its file was deleted"
    assert [v.db_path for v in list_versions(settings)] == published[-2:]


_READER = r"""
import json, os, sys, time
import duckdb

path, stop = sys.argv[1], sys.argv[2]
con = duckdb.connect(path, read_only=True)
query = '''
SELECT (SELECT count(*) FROM metadata), (SELECT count(*) FROM chunks), (SELECT count(*) FROM quarantine),
       (SELECT sum(chunk_count) FROM paper_overview), (SELECT count(*) FROM author_paper),
       (SELECT count(*) FROM element_search WHERE text ILIKE '%citation%')
'''
first = list(con.execute(query).fetchone())
print(json.dumps({"ready": first}), flush=True)
answers, times, errors = {json.dumps(first)}, [], []
while not os.path.exists(stop):
    try:
        answers.add(json.dumps(list(con.execute(query).fetchone())))
        times.append(time.time())
    except Exception as exc:
        errors.append(repr(exc))
    time.sleep(0.02)
con.close()
print(json.dumps({"answers": sorted(answers), "times": times, "errors": errors}), flush=True)
"""


def test_neusym_sql_path_runs_on_the_snapshot_and_refuses_writes(surface):
    settings, _ = surface
    snap = current_db(settings)
    result = run_readonly_sql(snap, "SELECT sum(paper_count) FROM papers_per_venue_year", timeout_s=10, max_rows=10)
    assert result.rows == [(5,)]
    for sql in ("ATTACH 'x.duckdb' AS x", "COPY metadata TO 'x.csv'", "DROP VIEW paper_overview",
                "SELECT * FROM read_csv('x.csv')", "PRAGMA version"):
        with pytest.raises(UnsafeSQLError, match="refused"):
            run_readonly_sql(snap, sql, timeout_s=10, max_rows=10)


def test_neusym_sql_and_the_agent_stop_a_query_past_its_memory_budget(surface, repo_root):
    """`neusym sql` and the agent's RetrieveFromDatabase run under the same budget as the service: a
    query that would allocate gigabytes ends with one clear line (CLI exit 1) / an error observation."""
    from neusym.query.agent.actions import Action, Environment, execute_action

    settings, _ = surface
    env_vars = {**{k: v for k, v in os.environ.items() if not k.startswith("NEUSYM_")},
                "NEUSYM_HOME": str(settings.home), "NEUSYM_SQL_MEMORY_MB": "512"}
    proc = subprocess.run([sys.executable, "-m", "neusym.interfaces.cli", "sql", "SELECT range(100000000)"], env=env_vars,
                          capture_output=True, text=True, timeout=120, cwd=repo_root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "memory budget (512 MB per query" in proc.stderr and "Traceback" not in proc.stderr
    env = Environment(settings.model_copy(update={"sql_memory_mb": 512}))
    try:
        obs = execute_action(Action("RetrieveFromDatabase", {"sql": "SELECT repeat('x', 1000000000)"}), env)
    finally:
        env.close()
    assert "memory budget" in obs.text


# --------------------------------------------------------------------------------------------
# Views
# --------------------------------------------------------------------------------------------


def test_views_agree_with_direct_counts(surface):
    _, snap = surface
    con = _ro(snap)
    try:
        assert list_views(con) == list(VIEW_NAMES)
        papers = dict(con.execute("SELECT paper_id, num_pages FROM metadata").fetchall())
        assert len(papers) == 5
        overview = {
            r[0]: r[1:]
            for r in con.execute(
                "SELECT paper_id, page_count, section_count, chunk_count, table_count, image_count, "
                "equation_count, reference_count, author_count, num_pages FROM paper_overview"
            ).fetchall()
        }
        assert set(overview) == set(papers)
        for i, table in enumerate(("pages", "sections", "chunks", "tables", "images", "equations", "reference")):
            direct = dict(con.execute(f"SELECT ref_paper_id, count(*) FROM {table} GROUP BY ref_paper_id").fetchall())
            assert {p: row[i] for p, row in overview.items()} == {p: direct.get(p, 0) for p in papers}, table
        assert all(row[0] == row[8] for row in overview.values() if row[8] is not None), "one row per PDF page"
        assert sum(row[2] for row in overview.values()) > 0 and sum(row[6] for row in overview.values()) > 0

        authors = dict(con.execute("SELECT paper_id, authors FROM metadata").fetchall())
        rows = con.execute("SELECT paper_id, author, author_position, author_count FROM author_paper").fetchall()
        assert len(rows) == sum(len(a or []) for a in authors.values()) > 0
        for pid, author, pos, n in rows:
            assert authors[pid][pos - 1] == author and n == len(authors[pid])
        assert {p: row[7] for p, row in overview.items()} == {p: len(a or []) for p, a in authors.items()}

        per_venue = con.execute(
            "SELECT venue, pub_year, paper_count, parsed_count, page_count FROM papers_per_venue_year"
        ).fetchall()
        direct = con.execute(
            "SELECT conference_abbreviation, pub_year, count(*), count(pdf_sha256), coalesce(sum(num_pages), 0) "
            "FROM metadata GROUP BY ALL"
        ).fetchall()
        assert sorted(per_venue, key=str) == sorted(direct, key=str)
        assert sum(r[2] for r in per_venue) == 5

        by_type = dict(con.execute("SELECT element_type, count(*) FROM element_search GROUP BY 1").fetchall())
        for kind, table in ELEMENT_TABLES.items():
            assert by_type.get(kind, 0) == con.execute(f"SELECT count(*) FROM {table}").fetchone()[0], kind
        hits = con.execute(
            "SELECT DISTINCT paper_title FROM element_search WHERE element_type = 'section' AND text ILIKE '%SciDocs%'"
        ).fetchall()
        assert [t for (t,) in hits] == [
            "SPECTER: Document-level Representation Learning using Citation-informed Transformers"
        ]
        assert con.execute("SELECT count(*) FROM element_search WHERE paper_title IS NULL").fetchone()[0] == 0
    finally:
        con.close()


def test_create_views_is_idempotent(surface, tmp_path):
    settings, _ = surface
    db = tmp_path / "copy.duckdb"
    shutil.copyfile(settings.db_path, db)
    con = duckdb.connect(str(db))
    try:
        before = con.execute("SELECT count(*) FROM element_search").fetchone()[0]
        assert create_views(con) == list(VIEW_NAMES)
        con.execute("BEGIN TRANSACTION")  # the materialize step runs it inside its transaction
        assert create_views(con) == list(VIEW_NAMES)
        con.execute("COMMIT")
        assert con.execute("SELECT count(*) FROM element_search").fetchone()[0] == before
    finally:
        con.close()


# --------------------------------------------------------------------------------------------
# Export and schema documentation
# --------------------------------------------------------------------------------------------


def test_export_parquet_writes_every_table_and_view(surface, tmp_path):
    _, snap = surface
    out = tmp_path / "export"
    counts = export_parquet(snap, out)
    con = _ro(snap)
    try:
        names = export_objects(con)
        expected = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in names}
    finally:
        con.close()
    assert counts == expected
    assert names[: len(EXPORT_TABLES)] == list(EXPORT_TABLES) and names[-len(VIEW_NAMES) :] == list(VIEW_NAMES)
    assert counts["chunks"] > 0 and counts["element_search"] > counts["chunks"]
    for name, n in counts.items():
        assert pq.ParquetFile(out / f"{name}.parquet").metadata.num_rows == n, name
    assert pq.read_schema(out / "metadata.parquet").field("paper_id").type == pa.string()  # UUIDs as text
    assert export_parquet(snap, out) == counts  # idempotent: overwrites in place
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.parquet" for n in counts)


def test_docs_schema_md_is_current(surface, repo_root):
    settings, snap = surface
    con = _ro(snap)
    try:
        tables = doc_tables(con)
        generated = schema_markdown(describe(con, tables=tables) + describe_views(con))
    finally:
        con.close()
    assert tables[: len(DOC_TABLES)] == DOC_TABLES
    assert database_schema_markdown(snap) == generated == database_schema_markdown(settings.db_path)
    for name in (*tables, *VIEW_NAMES):
        assert f"\n### {name}\n" in generated
    committed = (repo_root / "docs" / "schema.md").read_text(encoding="utf-8")
    assert committed == generated, (
        "docs/schema.md is stale: regenerate it with `neusym schema --markdown > docs/schema.md` "
        "(see docs/sql.md)"
    )
