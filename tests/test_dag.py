"""A full run of the corpus_refresh DAG (airflow dags test, no scheduler) on the sample corpus."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from neusym.settings import Settings
from neusym.store.versions import current_db, open_version

from .conftest import REPO, SAMPLES
from .openai_loopback import LoopbackOpenAI, completion
from .test_pipeline import db_fingerprint

pytestmark = pytest.mark.slow


def point_ids(settings: Settings) -> dict[str, set[str]]:
    """Point ids of the current version's cell collection and paper index."""
    with open_version(settings) as version:
        return {name: {r.id for r in version.backend(name).scroll(payload=False)} for name in ("cells", "papers")}


def test_dag_run_builds_the_same_corpus_as_the_cli(tmp_path, ingested):
    cli_settings, _ = ingested
    home = tmp_path / "dag-home"
    airflow = Path(sys.executable).parent / "airflow"
    env = dict(
        os.environ,
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        NEUSYM_HOME=str(home),
        NEUSYM_PDF_DIRS=json.dumps([str(SAMPLES)]),
    )
    subprocess.run([str(airflow), "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    run = subprocess.run([str(airflow), "dags", "test", "corpus_refresh"], env=env, capture_output=True,
                         text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # one mapped parse and one mapped encode task per PDF ran, then the single writers, and the run succeeded
    log = run.stdout + run.stderr
    ended = re.findall(r"end task task_id=(\w+) map_index=(-?\d+)", log)
    assert sorted(ended) == sorted(
        [("discover", "-1"), ("sources", "-1"), ("load_metadata", "-1"), ("collect", "-1"),
         ("materialize", "-1"), ("publish", "-1")]
        + [(t, str(i)) for t in ("parse", "encode") for i in range(5)]
    )
    assert re.search(r"DagRun Finished: dag_id=corpus_refresh.*state=success", log)
    dag_settings = Settings(home=home)
    assert db_fingerprint(dag_settings.db_path) == db_fingerprint(cli_settings.db_path)
    assert point_ids(dag_settings) == point_ids(cli_settings)
    # the publish task recorded the run's seconds per stage, pulled from the mapped tasks' results, and logged them
    with open_version(dag_settings) as version:
        stages = version.info.manifest["stages"]
    assert {"parse", "encode", "materialize", "table_cells", "citations", "cells", "paper_index", "publish"} <= set(stages)
    assert stages["parse"] > 1.0 and stages["encode"] > 0 and "fetch" not in stages
    assert re.search(r"published version \d+; stages: [^\n]*parse \d+\.\d s, encode \d+\.\d s", log)
    assert len(re.findall(r"parse: \d+\.\d s, parsed, \d+ pages", log)) == 5
    # a second DAG run over unchanged PDFs changes nothing
    run2 = subprocess.run([str(airflow), "dags", "test", "corpus_refresh"], env=env, capture_output=True,
                          text=True, timeout=1200)
    assert run2.returncode == 0, run2.stdout[-3000:] + run2.stderr[-3000:]
    assert db_fingerprint(dag_settings.db_path) == db_fingerprint(cli_settings.db_path)
    assert point_ids(dag_settings) == point_ids(cli_settings)


def test_dag_crawls_a_collection_without_pdfs_and_publishes_it(tmp_path):
    """The crawl branch: mapped crawl task -> load_metadata -> (no PDFs) -> materialize -> publish (a corpus
    version whose paper index already holds the crawled papers); publish updates the neusym://corpus asset,
    which queues corpus_enrich, whose run adds tldr/tags and publishes again."""
    import sqlite3

    import duckdb

    from neusym.store.paper_index import close_paper_indexes
    from neusym.query.paper_search import search_papers

    home = tmp_path / "home"
    env = dict(
        os.environ,
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        NEUSYM_HOME=str(home),
        NEUSYM_PDF_DIRS="[]",
        NEUSYM_CRAWL_DOWNLOAD="false",
    )
    airflow = Path(sys.executable).parent / "airflow"
    subprocess.run([str(airflow), "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    # what the scheduler's DAG processor does: serialize both DAGs; the consumer is switched on
    subprocess.run([str(airflow), "dags", "reserialize"], env=env, check=True, capture_output=True, timeout=300)
    for consumer in ("corpus_enrich", "corpus_watches"):
        subprocess.run([str(airflow), "dags", "unpause", consumer], env=env, check=True, capture_output=True,
                       timeout=120)
    from neusym.store.watches import WatchStore, check_watch

    with WatchStore(Settings(home=home)) as store:  # saved before the first refresh: evaluated by corpus_watches
        store.add(check_watch("hallucination", "reference-free hallucination detection for German"))
    conf = {"sources": [{"source": "acl", "paths": [str(REPO / "tests/fixtures/acl/2024.acl.xml")], "volumes": ["srw"]}]}
    run = subprocess.run([str(airflow), "dags", "test", "corpus_refresh", "-c", json.dumps(conf)], env=env,
                         capture_output=True, text=True, timeout=900)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-3000:]
    assert re.search(r"DagRun Finished: dag_id=corpus_refresh.*state=success", log)
    ended = {t for t, _ in re.findall(r"end task task_id=(\w+) map_index=(-?\d+)", log)}
    assert {"crawl", "load_metadata", "materialize", "publish"} <= ended
    with open_version(Settings(home=home)) as version:  # the metadata-only refresh's stages: no PDF work
        stages = version.info.manifest["stages"]
    assert {"fetch", "load_metadata", "materialize", "paper_index", "publish"} <= set(stages)
    assert "parse" not in stages and "download" not in stages
    # searchable right after the refresh: the version holds the crawled papers' paper index and cells
    with open_version(Settings(home=home)) as version:
        assert version.papers.count() == 46 and version.cells.count() >= 46 * 2  # titles + abstracts at least

    con = duckdb.connect(str(current_db(Settings(home=home))), read_only=True)
    try:
        # the fixture's 2024.acl "srw" volume lists 46 papers (counted in the XML)
        assert con.execute("SELECT count(*), count(num_pages) FROM metadata").fetchone() == (46, 0)
        assert con.execute("SELECT last_error FROM crawl_state").fetchall() == [(None,)]
    finally:
        con.close()

    # data-triggered downstream: the asset event of publish queued a corpus_enrich run
    meta = sqlite3.connect(tmp_path / "airflow" / "airflow.db")
    try:
        events = meta.execute("SELECT a.name, e.source_dag_id, e.source_task_id FROM asset_event e "
                              "JOIN asset a ON a.id = e.asset_id").fetchall()
        queued = meta.execute("SELECT target_dag_id FROM asset_dag_run_queue").fetchall()
    finally:
        meta.close()
    assert events == [("neusym://corpus", "corpus_refresh", "publish")]
    assert sorted(queued) == [("corpus_enrich",), ("corpus_watches",)]

    # corpus_watches: the saved search evaluated against the new version (its first papers recorded)
    watched = subprocess.run([str(airflow), "dags", "test", "corpus_watches"], env=env, capture_output=True, text=True,
                             timeout=600)
    log = watched.stdout + watched.stderr
    assert watched.returncode == 0, log[-3000:]
    assert re.search(r"DagRun Finished: dag_id=corpus_watches.*state=success", log)
    with WatchStore(Settings(home=home), readonly=True) as store:
        assert store.get("hallucination").evaluated_version == 1
        found = [m.title for m in store.matches("hallucination")]
    assert "ANHALTEN: Cross-Lingual Transfer for German Token-Level Reference-Free Hallucination Detection" in found

    # corpus_enrich with an OpenAI-compatible endpoint on loopback (canned tldr/tags replies) and a
    # budget that covers a few papers: one mapped summarize task per paper, then the single writer
    canned = json.dumps({"tldr": "A canned summary.", "tags": ["Canned tag"]})
    with LoopbackOpenAI(lambda body: (200, completion(canned, "canned", prompt_tokens=100, completion_tokens=20))) as llm:
        enrich_env = dict(env, NEUSYM_LLM_BASE_URL=llm.base_url, NEUSYM_LLM_MODEL="canned",
                          NEUSYM_ENRICH_BUDGET_TOKENS="2000", NEUSYM_ENRICH_KINDS='["paper_tldr_tags"]')
        enrich = subprocess.run([str(airflow), "dags", "test", "corpus_enrich"], env=enrich_env,
                                capture_output=True, text=True, timeout=900)
    log = enrich.stdout + enrich.stderr
    assert enrich.returncode == 0, log[-3000:]
    assert re.search(r"DagRun Finished: dag_id=corpus_enrich.*state=success", log)
    mapped = re.findall(r"end task task_id=summarize map_index=(\d+)", log)
    con = duckdb.connect(str(current_db(Settings(home=home))), read_only=True)
    try:
        tldrs = con.execute("SELECT count(*) FROM metadata WHERE tldr = 'A canned summary.' "
                            "AND tags = ['canned tag']").fetchone()[0]
    finally:
        con.close()
    assert len(mapped) >= 2 and tldrs == len(mapped)  # one paper per unit, each one summarized
    # the paper index now answers a question about one of the crawled (metadata-only) papers
    settings = Settings(home=home)
    try:
        # (a paraphrase of the abstract of 2024.acl-srw.18, "ANHALTEN: Cross-Lingual Transfer for German ...")
        hits = search_papers("Is there a German dataset for detecting hallucinated tokens without a reference, "
                             "built by extending an English one?", settings=settings, limit=5)
        assert [h.title for h in hits].count(
            "ANHALTEN: Cross-Lingual Transfer for German Token-Level Reference-Free Hallucination Detection") == 1
        assert all(h.year == 2024 for h in hits)
    finally:
        close_paper_indexes()

    # retriever_refresh (weekly or by hand): trains on the crawled papers within the budget given as a
    # param, checks the encoder on held-out papers and publishes it only when it is at least as good
    with open_version(settings) as version:
        before = version.number
    run = subprocess.run([str(airflow), "dags", "test", "retriever_refresh", "-c", json.dumps({"minutes": 0.3})],
                         env=env, capture_output=True, text=True, timeout=900)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-3000:]
    assert re.search(r"DagRun Finished: dag_id=retriever_refresh.*state=success", log)
    meta = sqlite3.connect(tmp_path / "airflow" / "airflow.db")
    try:
        (value,) = meta.execute("SELECT value FROM xcom WHERE dag_id = 'retriever_refresh' "
                                "AND task_id = 'train_and_publish' AND key = 'return_value'").fetchone()
    finally:
        meta.close()
    report = json.loads(value) if isinstance(value, (str, bytes)) else value
    assert report["training"]["steps"] >= 1 and report["training"]["papers"] >= 36  # 46 papers minus the held-out
    assert report["validation"]["queries"] >= 5
    with open_version(settings) as version:
        if report["published"]:  # the encoder serves the paper index of a new version
            assert version.number == report["version"] == before + 1
            assert json.loads((version.retriever_dir / "retriever.json").read_text())["id"] == report["retriever_id"]
        else:  # not better on the held-out papers: nothing changed
            assert "not published" in report["reason"] and version.number == before and version.retriever_dir is None
