"""Saved searches and their Atom feeds over real publishes of the sample PDFs.

A home first holds SPECTER and LongEval; a watch on the scientific literature graph is added. Then
``neusym ingest`` (the real CLI, in a subprocess) adds the literature-graph paper (NAACL 2018) and
DecompX (explaining transformers): the watch records exactly the literature-graph paper as new, a second
evaluation adds nothing, and the feed served by uvicorn parses as Atom with feedparser (what feed
readers use). The same publish links SPECTER's stored reference to the new paper (citation graph).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import feedparser
import httpx
import pytest

from neusym.ingest.pipeline import ingest
from neusym.interfaces.service import create_app
from neusym.settings import Settings
from neusym.store.versions import current_version

from .conftest import SAMPLES
from .service_support import LiveServer

pytestmark = pytest.mark.slow

SPECTER_PDF = "acl2020_2020.acl-main.207_SPECTER.pdf"
LONGEVAL_PDF = "eacl2023_2023.eacl-main.121_LongEval.pdf"
LITGRAPH_PDF = "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"
DECOMPX_PDF = "acl2023_DecompX_acl-long.pdf"
LITGRAPH = "Construction of the Literature Graph in Semantic Scholar"
SPECTER = "SPECTER: Document-level Representation Learning using Citation-informed Transformers"
DECOMPX_PREFIX = "DecompX"
WATCH = "literature-graph"
QUERY = "scientific literature graph and paper embeddings"


def cli(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "NEUSYM_HOME": str(home)}
    run = subprocess.run([sys.executable, "-m", "neusym.interfaces.cli", *args], env=env, capture_output=True,
                         text=True, timeout=900)
    if check:
        assert run.returncode == 0, run.stderr[-3000:]
    return run


def stored_references(home: Path, title: str) -> set[str]:
    con = duckdb.connect(str(home / "corpus-snapshot.duckdb"), read_only=True)
    try:
        return {r for (r,) in con.execute("SELECT reference_id::VARCHAR FROM reference r JOIN metadata m "
                                          "ON m.paper_id = r.ref_paper_id WHERE m.title = ?", [title]).fetchall()}
    finally:
        con.close()


def titles(home: Path) -> dict[str, str]:
    con = duckdb.connect(str(home / "corpus-snapshot.duckdb"), read_only=True)
    try:
        return dict(con.execute("SELECT title, paper_id::VARCHAR FROM metadata").fetchall())
    finally:
        con.close()


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """(home, runs): a home that got two PDFs, a watch, then two more PDFs through ``neusym ingest``."""
    home = tmp_path_factory.mktemp("watch-home")
    first, second = home / "first", home / "second"
    for folder, names in ((first, (SPECTER_PDF, LONGEVAL_PDF)), (second, (LITGRAPH_PDF, DECOMPX_PDF))):
        folder.mkdir()
        for name in names:
            shutil.copy(SAMPLES / name, folder / name)
    settings = Settings(home=home / "home")
    ingest([first], settings)
    runs = {"before": titles(settings.home), "specter_references": stored_references(settings.home, SPECTER)}
    runs["add"] = cli(settings.home, "watch", "add", QUERY, "--name", WATCH)
    runs["add_json"] = json.loads(cli(settings.home, "watch", "list", "--json").stdout)
    runs["ingest"] = cli(settings.home, "ingest", str(second))
    runs["after"] = titles(settings.home)
    return settings, runs


def test_a_publish_adds_feed_entries_for_exactly_the_new_matching_papers(grown):
    settings, runs = grown
    before, after = runs["before"], runs["after"]
    assert set(before) == {SPECTER, next(t for t in after if t.startswith("LongEval"))}
    assert LITGRAPH in after and any(t.startswith(DECOMPX_PREFIX) for t in after)
    # the first evaluation recorded what the corpus already held (SPECTER among it), marked initial
    listed = runs["add_json"]
    assert [w["name"] for w in listed] == [WATCH] and listed[0]["evaluated_version"] == 1
    from neusym.store.watches import WatchStore

    with WatchStore(settings, readonly=True) as store:
        matches = store.matches(WATCH, limit=100)
        runs_of = store.runs(WATCH)
    initial = {m.paper_id for m in matches if m.initial}
    assert before[SPECTER] in initial and initial <= set(before.values())
    # `neusym ingest` published version 2 and evaluated the watch: the literature-graph paper only
    assert "watches: 1 of 1 evaluated against version 2, 1 new papers" in runs["ingest"].stderr
    new = [m for m in matches if not m.initial]
    assert [(m.paper_id, m.version) for m in new] == [(after[LITGRAPH], 2)]
    assert [r["version"] for r in runs_of] == [2, 1] and runs_of[0]["new_matches"] == 1
    # again: nothing new, for the same version and after a publish that adds no paper
    again = cli(settings.home, "watch", "run", "--json")
    assert json.loads(again.stdout)["new_matches"] == {WATCH: None}
    cli(settings.home, "publish")
    third = json.loads(cli(settings.home, "watch", "run", "--json").stdout)
    assert third["version"] == 3 and third["new_matches"] == {WATCH: 0}
    with WatchStore(settings, readonly=True) as store:
        assert len(store.matches(WATCH, limit=100)) == len(matches)


def test_the_feed_is_atom_a_feed_reader_parses(grown):
    settings, runs = grown
    after = runs["after"]
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url, timeout=60) as client:
        r = client.get(f"/feeds/{WATCH}.atom")
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/atom+xml")
        feed = feedparser.parse(r.content)
        listing = client.get("/watches").json()["watches"]
        missing = client.get("/feeds/no-such-watch.atom")
        too_long = client.get("/feeds/" + "x" * 65 + ".atom")
        overview = client.get("/overview").json()
    assert feed.bozo == 0, feed.get("bozo_exception")
    assert feed.version == "atom10"
    assert QUERY in feed.feed.title
    assert feed.feed.links[0].href.endswith(f"/feeds/{WATCH}.atom")
    first = feed.entries[0]  # newest first: the paper that arrived with version 2
    assert first.title == LITGRAPH
    assert first.link.endswith(f"/#/paper/{after[LITGRAPH]}")
    assert "new in corpus version 2" in first.summary
    assert {a.name for a in first.authors} >= {"Waleed Ammar", "Dirk Groeneveld"}
    ids = [e.id for e in feed.entries]
    assert len(ids) == len(set(ids)) and all(i.startswith("urn:uuid:") for i in ids)
    assert [w["name"] for w in listing] == [WATCH] and listing[0]["new"] == 1
    assert listing[0]["recent"][0]["paper_id"] == after[LITGRAPH] and listing[0]["feed"] == f"feeds/{WATCH}.atom"
    assert missing.status_code == 404 and "no watch named" in missing.json()["detail"]
    assert too_long.status_code in (400, 422)
    assert overview["version"] == current_version(settings).number and overview["papers"] == 4
    # the last publish (`neusym publish`, no new paper) added none; the overview says so
    assert overview["last_refresh"]["papers_added"] == 0


def test_the_publish_that_brought_the_paper_linked_old_references_to_it(grown):
    settings, runs = grown
    after = runs["after"]
    con = duckdb.connect(str(settings.home / "corpus-snapshot.duckdb"), read_only=True)
    try:
        links = con.execute("SELECT citing_paper_id::VARCHAR, reference_id::VARCHAR FROM citation_links "
                            "WHERE cited_paper_id = ?", [after[LITGRAPH]]).fetchall()
    finally:
        con.close()
    stored = runs["specter_references"]  # SPECTER's references as stored by the first ingest
    assert links and all(citing == after[SPECTER] and ref in stored for citing, ref in links)
    manifest = json.loads((current_version(settings).path / "manifest.json").read_text())
    assert manifest["changes"]["papers_added"] == 0


def test_watch_commands_refuse_bad_input_with_a_reason(tmp_path):
    home = tmp_path / "empty"
    bad = cli(home, "watch", "add", "graphs", "--name", "Bad Name", check=False)
    assert bad.returncode == 2 and "bad watch name 'Bad Name'" in bad.stderr
    blank = cli(home, "watch", "add", "   ", check=False)
    assert blank.returncode == 2 and "query is blank" in blank.stderr
    added = cli(home, "watch", "add", "graphs", "--name", "g")  # nothing published yet: saved, evaluated later
    assert "not evaluated yet" in added.stderr
    twice = cli(home, "watch", "add", "other", "--name", "g", check=False)
    assert twice.returncode == 2 and "a watch named 'g' exists" in twice.stderr
    unknown = cli(home, "watch", "remove", "nope", check=False)
    assert unknown.returncode == 2 and "no watch named 'nope'" in unknown.stderr
    nothing = cli(home, "watch", "run", check=False)
    assert nothing.returncode == 1 and "error" in nothing.stderr and "Traceback" not in nothing.stderr
    assert cli(home, "watch", "remove", "g").returncode == 0
    assert "no saved searches" in cli(home, "watch", "list").stdout


def test_search_orders_by_in_corpus_citations_and_similar_papers_leave_the_paper_out(grown):
    settings, runs = grown
    after = runs["after"]
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url, timeout=60) as client:
        plain = client.get("/search", params={"q": "semantic scholar papers", "limit": 4}).json()
        by_cites = client.get("/search", params={"q": "semantic scholar papers", "limit": 4, "sort": "cited_by"}).json()
        cited_only = client.get("/search", params={"q": "semantic scholar papers", "min_cited_by": 1}).json()
        bad_sort = client.get("/search", params={"q": "x", "sort": "newest"})
        similar = client.get(f"/papers/{after[SPECTER]}/similar", params={"limit": 2}).json()
        unknown = client.get("/papers/00000000-0000-0000-0000-000000000000/similar")
        malformed = client.get("/papers/not-a-paper/similar")
    # SPECTER's bibliography names the literature-graph paper, so it is the one corpus paper cited in the corpus
    assert {h["paper_id"]: h["cited_by"] for h in plain["hits"]}[after[LITGRAPH]] == 1
    assert by_cites["hits"][0]["paper_id"] == after[LITGRAPH]
    assert [h["paper_id"] for h in cited_only["hits"]] == [after[LITGRAPH]]
    assert sorted(h["paper_id"] for h in by_cites["hits"]) == sorted(h["paper_id"] for h in plain["hits"])
    assert bad_sort.status_code == 422
    assert len(similar["hits"]) == 2 and after[SPECTER] not in [h["paper_id"] for h in similar["hits"]]
    assert similar["hits"][0]["score"] >= similar["hits"][1]["score"]
    assert unknown.status_code == 404 and malformed.status_code == 404
    # the same from the command line
    cli_hits = json.loads(cli(settings.home, "search", "semantic scholar papers", "--sort", "cited_by", "--limit", "2",
                              "--json").stdout)
    assert [(h["paper_id"], h["cited_by"]) for h in cli_hits][0] == (after[LITGRAPH], 1) and len(cli_hits) == 2
    refused = cli(settings.home, "search", "x", "--sort", "newest", check=False)
    assert refused.returncode == 2 and "sort must be relevance or cited_by, got 'newest'" in refused.stderr


def test_racing_evaluations_record_each_paper_once_and_a_removed_watch_nothing(tmp_path):
    from neusym.store.watches import WatchStore, check_watch

    settings = Settings(home=tmp_path)
    hit = {"paper_id": "7c5c6b8e-9f2e-5a51-8b1f-0c2f3f6f1d11", "rank": 1, "score": 2.5, "title": LITGRAPH,
           "authors": ["Waleed Ammar"], "venue": "naacl", "year": 2018, "snippet": None}
    with WatchStore(settings) as a, WatchStore(settings) as b:  # two processes' connections
        watch = a.add(check_watch("g", "literature graph"))
        assert a.record_run(watch, 4, [hit], 100, 0.01, initial=False) == 1
        assert b.record_run(watch, 4, [hit], 100, 0.02, initial=False) == 0
        assert [(r["version"], r["new_matches"]) for r in a.runs("g")] == [(4, 1)]
        a.remove("g")
        assert b.record_run(watch, 5, [hit], 100, 0.01, initial=False) == 0
        assert b.matches("g") == [] and b.runs("g") == []
