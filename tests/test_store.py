"""The store layer (issue G): corpus versions, readers during a refresh, crash safety, migration, server mode.

Real sample PDFs and the real stages throughout; "server mode" runs the qdrant-client code path against
qdrant-client's local mode (``NEUSYM_QDRANT_URL=local:PATH``) because no Qdrant server binary exists on
these machines.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from neusym.interfaces.cli import app
from neusym.encode import ENCODABLE_COLUMNS
from neusym.ingest.pipeline import ingest, materialize_stage, parse_stage
from neusym.ingest.publish import publish
from neusym.settings import Settings
from neusym.store.cells import CellSearch
from neusym.store.db import WriterBusyError, writer, writer_lock
from neusym.store.vectors import Filter, Match
from neusym.store.versions import (
    NoCorpusVersion,
    PublishError,
    current_version,
    list_versions,
    open_version,
)

from .conftest import REPO, SAMPLES

SPECTER = SAMPLES / "acl2020_2020.acl-main.207_SPECTER.pdf"
SCHOLAR = SAMPLES / "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"
LONGEVAL = SAMPLES / "eacl2023_2023.eacl-main.121_LongEval.pdf"


def sql_cells(db: Path) -> dict[str, int]:
    """Non-empty encodable cells per table.column, counted with plain SQL (independent of neusym.ingest.publish)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {f"{t}.{c}": con.execute(f"SELECT count(*) FROM {t} WHERE {c} IS NOT NULL AND trim({c}) <> ''")
                .fetchone()[0] for t, c in ENCODABLE_COLUMNS}
    finally:
        con.close()


def point_counts(version) -> dict[str, int]:
    return {f"{t}.{c}": version.cells.count(Filter.all(Match("table_name", t), Match("column_name", c)))
            for t, c in ENCODABLE_COLUMNS}


def assert_consistent(settings: Settings) -> None:
    """The current version: one point per encodable cell, per column; paper index = papers; no leftovers."""
    with open_version(settings) as v:
        assert point_counts(v) == sql_cells(v.db_path)
        con = duckdb.connect(str(v.db_path), read_only=True)
        papers = con.execute("SELECT count(*) FROM metadata").fetchone()[0]
        con.close()
        assert v.papers.count() == papers
    leftovers = [p.name for p in settings.versions_dir.iterdir() if p.name.startswith(".")]
    assert leftovers == []


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """A home with three sample PDFs parsed and encoded into staging (nothing materialized): cheap copies."""
    home = tmp_path_factory.mktemp("staged") / "home"
    settings = Settings(home=home)
    ingest([SPECTER, SCHOLAR], settings)
    parse_stage(str(LONGEVAL), settings)
    return home


def copy_home(src: Path, dst: Path) -> Settings:
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(".readers"))
    return Settings(home=dst)


def add_paper(settings: Settings, pdf: Path):
    """The refresh of these tests: parse (reused from staging), encode, materialize one more paper."""
    from neusym.ingest.pipeline import encode_stage

    parsed = parse_stage(str(pdf), settings)
    encode_stage(parsed, settings)
    materialize_stage([parsed], settings)
    return parsed


# ------------------------------------------------------------------------------------------ versions
def test_ingest_publishes_a_consistent_version_with_the_paper_index(staged, tmp_path):
    settings = copy_home(staged, tmp_path / "home")
    v = current_version(settings)
    assert v.number == 1 and v.manifest["engine"] == "qdrant-edge"
    assert v.manifest["points"]["papers"] == 2 and v.manifest["papers"] == 2
    assert_consistent(settings)
    # `neusym ingest` ends with a searchable paper index (issue G: it did not sync it before)
    from neusym.store.paper_index import close_paper_indexes
    from neusym.query.paper_search import search_papers

    try:
        hits = search_papers("citation-informed document embeddings of scientific papers", settings=settings, limit=1)
        assert hits[0].title.startswith("SPECTER")
    finally:
        close_paper_indexes()


def test_open_reader_keeps_its_version_and_blocks_pruning(staged, tmp_path):
    settings = copy_home(staged, tmp_path / "home")
    old = open_version(settings)
    old_chunks = old.cells.count(Filter.all(Match("table_name", "chunks")))
    add_paper(settings, LONGEVAL)
    publish(settings)
    publish(settings)  # v3: v1 is now older than the two kept versions, but a reader holds it
    assert [v.number for v in list_versions(settings)] == [1, 2, 3]
    assert old.number == 1 and not old.is_current()
    assert old.cells.count(Filter.all(Match("table_name", "chunks"))) == old_chunks  # still answers from v1
    con = duckdb.connect(str(old.db_path), read_only=True)
    assert con.execute("SELECT count(*) FROM metadata").fetchone()[0] == 2
    con.close()
    old.close()
    publish(settings)  # released: pruned now
    assert [v.number for v in list_versions(settings)] == [3, 4]
    with open_version(settings) as new:
        assert new.cells.count(Filter.all(Match("table_name", "chunks"))) > old_chunks


def test_publish_diffs_papers_and_cells(staged, tmp_path):
    settings = copy_home(staged, tmp_path / "home")
    first = current_version(settings)
    again = publish(settings)
    assert (again.papers_changed, again.upserted, again.deleted, again.vectors_encoded) == (0, 0, 0, 0)
    add_paper(settings, LONGEVAL)
    added = publish(settings)
    assert added.papers_changed == 1 and added.deleted == 0
    assert added.vectors_staged > 0 and added.vectors_encoded == 0  # the encode stage's vectors were used
    assert added.points == sum(sql_cells(current_version(settings).db_path).values())
    # a paper leaves the corpus: its points go, nothing else is touched
    with writer(settings) as con:
        pid = con.execute("SELECT paper_id FROM metadata WHERE title ILIKE 'Construction of the Literature%'").fetchone()[0]
        with open_version(settings) as v:
            its_points = v.cells.count(Filter.all(Match("paper_id", str(pid))))
        for table in ("pages", "sections", "chunks", "tables", "images", "equations", "reference"):
            con.execute(f"DELETE FROM {table} WHERE ref_paper_id = ?", [pid])
        con.execute("DELETE FROM metadata WHERE paper_id = ?", [pid])
    removed = publish(settings)
    assert removed.papers_removed == 1 and removed.papers_changed == 0 and removed.upserted == 0
    assert removed.deleted == its_points > 100
    assert removed.paper_index["deleted"] == 1
    assert_consistent(settings)
    assert first.number == 1 and current_version(settings).number == 4


# --------------------------------------------------------------------------------- readers in parallel
_READER = r"""
import json, sys, time, os
from pathlib import Path
import duckdb
from neusym.settings import Settings
from neusym.store.vectors import Filter, Match
from neusym.store.versions import open_version

settings = Settings(home=Path(sys.argv[1]))
stop = Path(sys.argv[2])
seen, errors, calls = {}, [], 0
while not stop.exists():
    try:
        with open_version(settings) as v:   # a fresh reader each time, like one `neusym retrieve` call
            con = duckdb.connect(str(v.db_path), read_only=True)
            rows = con.execute("SELECT count(*) FROM chunks WHERE trim(text_content) <> ''").fetchone()[0]
            papers = con.execute("SELECT count(*) FROM metadata").fetchone()[0]
            con.close()
            points = v.cells.count(Filter.all(Match("table_name", "chunks"), Match("column_name", "text_content")))
            indexed = v.papers.count()
            seen.setdefault(v.number, set()).add((rows, points, papers, indexed))
            calls += 1
    except Exception as exc:
        errors.append(repr(exc))
    time.sleep(0.01)
print(json.dumps({"seen": {k: sorted(map(list, s)) for k, s in seen.items()}, "errors": errors, "calls": calls}))
"""


def test_readers_in_another_process_are_never_blocked_and_always_consistent(staged, tmp_path):
    settings = copy_home(staged, tmp_path / "home")
    stop = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-c", _READER, str(settings.home), str(stop)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        time.sleep(3)
        add_paper(settings, LONGEVAL)  # the refresh: materialize + publish while the reader loops
        publish(settings)
        time.sleep(1.5)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["errors"] == [] and result["calls"] > 10
    assert set(result["seen"]) == {"1", "2"}, result["seen"]
    for version, answers in result["seen"].items():
        assert len(answers) == 1, (version, answers)  # one version, one answer
        rows, points, papers, indexed = answers[0]
        assert rows == points and papers == indexed  # SQL rows and vector points of one version agree
    assert result["seen"]["1"][0][2] == 2 and result["seen"]["2"][0][2] == 3


def test_a_second_writer_waits_and_then_fails_clearly(staged, tmp_path):
    settings = copy_home(staged, tmp_path / "home")
    script = ("import sys, time; from pathlib import Path; from neusym.settings import Settings; "
              "from neusym.store.db import writer_lock\n"
              "with writer_lock(Settings(home=Path(sys.argv[1]))):\n"
              "    print('holding', flush=True); time.sleep(float(sys.argv[2]))")
    holder = subprocess.Popen([sys.executable, "-c", script, str(settings.home), "30"], stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "holding"
        t0 = time.monotonic()
        with pytest.raises(WriterBusyError, match="being written by another process"):
            publish(settings, wait_s=1.0)
        assert 0.9 <= time.monotonic() - t0 < 10
    finally:
        holder.kill()
        holder.wait()
    assert current_version(settings).number == 1
    # the lock died with its process: writing works again at once
    with writer_lock(settings, wait_s=0):
        pass


def test_publish_fails_cleanly_while_a_foreign_process_holds_the_database(staged, tmp_path):
    settings = copy_home(staged, tmp_path / "home")
    script = ("import sys, time, duckdb\ncon = duckdb.connect(sys.argv[1])\nprint('holding', flush=True)\n"
              "time.sleep(30)")
    holder = subprocess.Popen([sys.executable, "-c", script, str(settings.db_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(PublishError, match="cannot open"):
            publish(settings)
    finally:
        holder.kill()
        holder.wait()
    assert current_version(settings).number == 1 and [v.number for v in list_versions(settings)] == [1]
    assert [p.name for p in settings.versions_dir.iterdir() if p.name.startswith(".")] == []
    assert publish(settings).version == 2


# --------------------------------------------------------------------------------------- crash safety
CRASH_STEPS = ["copied-database", "cells-batch", "cells-done", "papers-done", "before-rename", "renamed", "switched"]

#: A publish in a child process that dies (``os._exit``: no cleanup, what a SIGKILL or power loss does)
#: at the named step: the real functions of that step are wrapped here, so the product carries no
#: fault injection of its own.
_PUBLISH = """
import os, sys
from pathlib import Path
from neusym.ingest import publish as pub
from neusym.store import paper_index, versions
from neusym.settings import Settings

step = sys.argv[2]

def die_after(owner, name, calls=1):
    real = getattr(owner, name)
    seen = [0]
    def wrapped(*args, **kwargs):
        out = real(*args, **kwargs)
        seen[0] += 1
        if seen[0] == calls:
            os._exit(86)
        return out
    setattr(owner, name, wrapped)

def rename_hook(before):
    real = versions.os.replace
    def replace(src, dst, *args, **kwargs):
        building = Path(src).name.startswith(".building-")
        if building and before:
            os._exit(86)
        real(src, dst, *args, **kwargs)
        if building:
            os._exit(86)
    versions.os.replace = replace

if step == "copied-database":
    die_after(versions, "copy_database")
elif step == "cells-batch":
    die_after(pub._CellSync, "sync_papers")
elif step == "cells-done":
    die_after(pub, "_check_cells")
elif step == "papers-done":
    die_after(paper_index, "sync_paper_index")
elif step in ("before-rename", "renamed"):
    rename_hook(step == "before-rename")
elif step == "switched":
    die_after(versions, "_switch_link", calls=2)  # the current link, then the snapshot link
pub.publish(Settings(home=Path(sys.argv[1])))
"""


@pytest.mark.parametrize("step", CRASH_STEPS)
def test_a_publish_killed_at_any_step_leaves_a_serving_version_and_reruns_cleanly(staged, tmp_path, step):
    settings = copy_home(staged, tmp_path / "home")
    add_paper(settings, LONGEVAL)
    before = current_version(settings)
    run = subprocess.run([sys.executable, "-c", _PUBLISH, str(settings.home), step],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert run.returncode == 86, run.stderr[-2000:]  # killed where asked
    served = current_version(settings)
    if step == "switched":  # killed after the switch: the new version is complete and serving
        assert served.number == before.number + 1
    else:
        assert served.number == before.number  # the previous version keeps serving
    with open_version(settings) as v:  # and it is consistent
        assert point_counts(v) == sql_cells(v.db_path)
    rerun = publish(settings)
    assert rerun.points == sum(sql_cells(current_version(settings).db_path).values())
    assert_consistent(settings)
    with open_version(settings) as v:
        con = duckdb.connect(str(v.db_path), read_only=True)
        assert con.execute("SELECT count(*) FROM metadata").fetchone()[0] == 3
        con.close()
        ids = [r.id for r in v.cells.scroll(payload=False)]
        assert len(ids) == len(set(ids)) == rerun.points  # no duplicates


# ------------------------------------------------------------------------------------------ migration
def test_a_home_built_by_the_local_mode_store_is_migrated_without_losing_data(staged, tmp_path):
    """Before corpus versions: corpus.duckdb + snapshots/ + a qdrant-client local-mode store in qdrant/."""
    from qdrant_client import QdrantClient, models

    home = tmp_path / "home"
    shutil.copytree(staged, home, symlinks=True, ignore=shutil.ignore_patterns("versions", "current",
                                                                               "corpus-snapshot.duckdb"))
    settings = Settings(home=home)
    (home / "snapshots").mkdir()
    old_snapshot = home / "snapshots" / "corpus-20261101T000000Z-000001.duckdb"
    shutil.copy(settings.db_path, old_snapshot)
    (home / "corpus-snapshot.duckdb").symlink_to("snapshots/" + old_snapshot.name)
    client = QdrantClient(path=str(home / "qdrant"))  # the old layout: two collections, one point per cell
    for name in ("text_bm25_en", "text_sentence_transformers_all_minilm_l6_v2"):
        client.create_collection(name, vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
        client.upsert(name, [models.PointStruct(id=1, vector=[1, 0, 0, 0], payload={"text": "old"})])
    client.close()
    rows_before = sql_cells(settings.db_path)

    runner = CliRunner(env={"NEUSYM_HOME": str(home)})
    hint = runner.invoke(app, ["sql", "SELECT 1"])
    assert hint.exit_code == 1 and "run `neusym publish` once" in hint.output
    migrated = runner.invoke(app, ["publish", "--json"])
    assert migrated.exit_code == 0, migrated.output
    report = json.loads(migrated.stdout)
    assert report["version"] == 1 and report["points"] == sum(rows_before.values())
    assert not (home / "qdrant").exists() and list(home.glob("qdrant.pre-versions-*"))  # kept aside, not deleted
    assert not (home / "snapshots").exists()
    assert sql_cells(settings.db_path) == rows_before  # the database is untouched
    assert_consistent(settings)
    out = runner.invoke(app, ["retrieve", "citation-informed transformers", "--json", "--limit", "2"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["hits"][0]["text"]


# ---------------------------------------------------------------------------------------- server mode
def test_server_mode_runs_the_same_code_path_with_versioned_collections(staged, tmp_path):
    """NEUSYM_QDRANT_URL -> qdrant-client collections per version (here local mode, no server available)."""
    from neusym.store import versions as versions_module

    edge = copy_home(staged, tmp_path / "edge")
    server = Settings(home=tmp_path / "server", qdrant_url=f"local:{tmp_path / 'qdrant-local'}")
    shutil.copytree(staged, server.home, symlinks=True,
                    ignore=shutil.ignore_patterns("versions", "current", "corpus-snapshot.duckdb"))
    try:
        first = publish(server)
        info = current_version(server)
        assert info.engine == "qdrant-client" and info.collection("cells") == "neusym_cells_v000001"
        assert first.points == sum(sql_cells(info.db_path).values())
        add_paper(server, LONGEVAL)
        second = publish(server)
        assert second.papers_changed == 1 and current_version(server).collection("cells") == "neusym_cells_v000002"
        publish(server)
        client = versions_module.server_client(server)
        names = {c.name for c in client.get_collections().collections}
        assert "neusym_cells_v000001" not in names and {"neusym_cells_v000002", "neusym_cells_v000003"} <= names
        add_paper(edge, LONGEVAL)
        publish(edge)
        query = ("How reliable are human evaluations of faithfulness in long-form summarization?",
                 "text_sentence_transformers_all_minilm_l6_v2", "chunks", "text_content")
        with open_version(server) as sv, open_version(edge) as ev:
            a = CellSearch(sv.cells, server).search(*query, limit=5)
            b = CellSearch(ev.cells, edge).search(*query, limit=5)
            assert point_counts(sv) == point_counts(ev)
        assert [h["primary_key"] for h in a] == [h["primary_key"] for h in b]
        assert [round(h["score"], 3) for h in a] == [round(h["score"], 3) for h in b]
    finally:
        for client in versions_module._CLIENTS.values():
            client.close()
        versions_module._CLIENTS.clear()


# -------------------------------------------------------------------------------------------- cli
def test_cli_retrieve_shows_what_the_agent_sees(staged, tmp_path):
    settings = copy_home(staged, tmp_path / "home")
    runner = CliRunner(env={"NEUSYM_HOME": str(settings.home)})
    with open_version(settings) as v:
        con = duckdb.connect(str(v.db_path), read_only=True)
        pid = con.execute("SELECT paper_id::VARCHAR FROM metadata WHERE title ILIKE 'SPECTER%'").fetchone()[0]
        con.close()
    out = runner.invoke(app, ["retrieve", "triplet loss over citations", "--table", "chunks", "--column",
                              "text_content", "--filter", f"paper_id == '{pid}' and page_number <= 3", "--json"])
    assert out.exit_code == 0, out.output
    body = json.loads(out.stdout)
    assert body["version"] == 1 and body["hits"]
    assert all(h["paper_id"] == pid and h["page_number"] <= 3 for h in body["hits"])
    text = runner.invoke(app, ["retrieve", "triplet loss", "--limit", "2"])
    assert text.exit_code == 0 and "Top 2 entries of chunks.text_content in text_bm25_en" in text.output
    bad = runner.invoke(app, ["retrieve", "x", "--table", "metadata", "--column", "num_pages"])
    assert bad.exit_code == 2 and "not encodable" in bad.output and "Traceback" not in bad.output
    empty = CliRunner(env={"NEUSYM_HOME": str(tmp_path / "nothing")}).invoke(app, ["retrieve", "x"])
    assert empty.exit_code == 2 and "no corpus version" in empty.output


def test_no_version_means_a_clear_error_for_every_reader(tmp_path):
    settings = Settings(home=tmp_path / "empty")
    with pytest.raises(NoCorpusVersion):
        open_version(settings)
    runner = CliRunner(env={"NEUSYM_HOME": str(settings.home)})
    for args in (["sql", "SELECT 1"], ["schema"], ["ask", "What?"], ["search", "x"]):
        result = runner.invoke(app, args)
        assert result.exit_code in (1, 2) and "no corpus version" in result.output, args
