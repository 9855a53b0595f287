"""Enrichment (summaries, tldr/tags, figure OCR) on a real ingested paper, with a scripted LLM.

The scripted LLM answers from the prompt it receives (it echoes the first words of the element text
it was given), so the tests can check that each summary landed on the row it was computed from.
"""

from __future__ import annotations

import json
import re
import shutil

import duckdb
import pytest

from neusym.llm.chat import LLMError, LLMReply
from neusym.encode import BM25_COLLECTION
from neusym.ingest.enrich import (
    ENRICHED_COLUMN_NAMES,
    apply_enrichment,
    enrich,
    plan_enrichment,
    results_dir,
    run_unit,
)
from neusym.ingest.pipeline import ingest
from neusym.settings import Settings
from neusym.store.cells import CellSearch
from neusym.store.versions import current_db, open_version

from .conftest import SAMPLES

PAPER = SAMPLES / "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"


class EchoLLM:
    """Summaries = "SUMMARY of <kind>: " + the first six words of the element text in the prompt."""

    def __init__(self, fail_kinds: tuple[str, ...] = ()):
        self.calls: list[str] = []
        self.fail_kinds = fail_kinds

    supports_images = False

    def chat(self, messages, *, json_schema=None, max_tokens=None) -> LLMReply:
        prompt = messages[-1]["content"]
        if isinstance(prompt, list):  # text + image parts (a vision LLM)
            self.images = getattr(self, "images", []) + [p["image_url"]["url"] for p in prompt if p["type"] == "image_url"]
            prompt = next(p["text"] for p in prompt if p["type"] == "text")
        kind = re.search(r"^\[(Page text|Section|Table|Figure|Paper)\]$", prompt, re.M).group(1)
        self.calls.append(kind)
        if kind in self.fail_kinds:
            raise LLMError(f"scripted failure for {kind}")
        body = prompt.split(f"[{kind}]\n", 1)[1]
        words = " ".join(body.split()[:6])
        if kind == "Paper":
            text = json.dumps({"tldr": f"TLDR: {words}", "tags": ["Literature Graph", "scholarly search"]})
        else:
            text = f"SUMMARY of {kind}: {words}"
        return LLMReply(text=text, prompt_tokens=len(prompt) // 4, completion_tokens=20, finish_reason="stop")


@pytest.fixture(scope="module")
def base_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("enrich-base")
    ingest([PAPER], Settings(home=home))
    return home


@pytest.fixture
def settings(base_home, tmp_path):
    """A private copy of the one-paper corpus (its relative version links point into the copy)."""
    home = tmp_path / "home"
    shutil.copytree(base_home, home, symlinks=True)
    link = home / "corpus-snapshot.duckdb"
    if link.is_symlink():
        target = link.readlink()
        if target.is_absolute():
            link.unlink()
            link.symlink_to(home / target.relative_to(base_home))
    return Settings(home=home, enrich_kinds=["paper_tldr_tags", "table_summary", "image_summary",
                                             "section_summary", "page_summary"])


def q(settings: Settings, sql: str, params=()):
    con = duckdb.connect(str(current_db(settings)), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def enriched_points(settings: Settings) -> dict[str, str]:
    """Point id -> text of the enriched columns' points in the current version's cell collection."""
    with open_version(settings) as version:
        return {r.id: r.payload["text"] for r in version.cells.scroll()
                if r.payload["column_name"] in ENRICHED_COLUMN_NAMES}


def test_summaries_fill_every_element_once_and_are_searchable(settings):
    llm = EchoLLM()
    counts = dict(pages=q(settings, "SELECT count(*) FROM pages")[0][0],
                  sections=q(settings, "SELECT count(*) FROM sections WHERE length(trim(section_content)) > 0")[0][0],
                  tables=q(settings, "SELECT count(*) FROM tables")[0][0],
                  images=q(settings, "SELECT count(*) FROM images")[0][0])
    assert counts["pages"] == 8 and counts["tables"] >= 4  # the paper prints Tables 1-4 on its 8 pages
    report = enrich(settings, stages=("summaries",), llm=llm, budget_tokens=10**9)
    n = sum(counts.values()) + 1  # + the paper's tldr/tags
    assert len(llm.calls) == n and report.applied[0].results_loaded == n and report.pending_after == 0
    # each summary sits on the row whose text it was computed from
    for content, summary in q(settings, "SELECT page_content, page_summary FROM pages"):
        assert summary == "SUMMARY of Page text: " + " ".join(content.split()[:6])
    for caption, summary in q(settings, "SELECT table_caption, table_summary FROM tables"):
        assert summary == "SUMMARY of Table: " + " ".join(caption.split()[:6])
    assert q(settings, "SELECT count(section_summary) FROM sections")[0][0] == counts["sections"]
    assert q(settings, "SELECT count(image_summary) FROM images")[0][0] == counts["images"]
    title, tldr, tags = q(settings, "SELECT title, tldr, tags FROM metadata")[0]
    assert tldr == "TLDR: " + " ".join((title + " ").split()[:6]) and tags == ["literature graph", "scholarly search"]
    # the filled cells are encoded: one point per cell (tldr included), published as a new version
    assert len(enriched_points(settings)) == n and report.applied[0].version is not None
    with open_version(settings) as version:
        caption = q(settings, "SELECT table_caption FROM tables ORDER BY page_number, ordinal")[0][0]
        hits = CellSearch(version.cells, settings).search(" ".join(caption.split()[:6]), BM25_COLLECTION,
                                                          "tables", "table_summary", limit=1)
    assert hits[0]["text"] == "SUMMARY of Table: " + " ".join(caption.split()[:6])
    # nothing is summarized twice
    again = enrich(settings, stages=("summaries",), llm=llm, budget_tokens=10**9)
    assert len(llm.calls) == n and again.summary_units == [] and again.applied[0].points_upserted == 0
    assert again.applied[0].version is None  # nothing loaded, nothing published


def test_budget_splits_the_work_across_runs_in_priority_order(settings):
    llm = EchoLLM()
    units = plan_enrichment(settings, "summaries", budget_tokens=3000)
    items = [i for u in units for i in u.items]
    assert 0 < sum(i.est_tokens for i in items) <= 3000
    assert items[0].kind == "paper_tldr_tags"  # the priority order of enrich_kinds
    first = enrich(settings, stages=("summaries",), llm=llm, budget_tokens=3000)
    assert first.pending_after > 0 and len(llm.calls) == len(items)
    total = len(llm.calls) + first.pending_after
    rest = enrich(settings, stages=("summaries",), llm=llm, budget_tokens=10**9)
    assert rest.pending_after == 0 and len(llm.calls) == total  # resumed where the first run stopped


def test_failures_are_recorded_retried_and_never_raise(settings):
    settings = settings.model_copy(update={"enrich_max_attempts": 2})
    failing = EchoLLM(fail_kinds=("Table",))
    report = enrich(settings, stages=("summaries",), llm=failing, budget_tokens=10**9)
    n_tables = q(settings, "SELECT count(*) FROM tables")[0][0]
    assert report.applied[0].failures_recorded == n_tables
    assert q(settings, "SELECT count(table_summary) FROM tables")[0][0] == 0
    assert q(settings, "SELECT count(page_summary) FROM pages")[0][0] == 8  # the others went through
    errors = q(settings, "SELECT attempts, error FROM enrichment_failures")
    assert len(errors) == n_tables and all(a == 1 and "scripted failure for Table" in e for a, e in errors)
    enrich(settings, stages=("summaries",), llm=failing, budget_tokens=10**9)  # retried once more
    assert {a for a, _ in q(settings, "SELECT attempts, error FROM enrichment_failures")} == {2}
    calls = len(failing.calls)
    enrich(settings, stages=("summaries",), llm=failing, budget_tokens=10**9)
    assert len(failing.calls) == calls  # max attempts reached: not planned again
    fixed = EchoLLM()
    enrich(settings.model_copy(update={"enrich_max_attempts": 3}), stages=("summaries",), llm=fixed, budget_tokens=10**9)
    assert fixed.calls == ["Table"] * n_tables
    assert q(settings, "SELECT count(table_summary) FROM tables")[0][0] == n_tables
    assert q(settings, "SELECT count(*) FROM enrichment_failures")[0][0] == 0


def test_an_interrupted_task_keeps_what_it_finished(settings):
    llm = EchoLLM()
    unit = plan_enrichment(settings, "summaries", budget_tokens=10**9)[0]
    # the task is killed after two items: its file holds two results and a cut third line
    partial = settings.model_copy(update={"enrich_task_seconds": -1.0})  # stops before starting any item
    assert run_unit(unit, partial, llm=llm).left_for_next_run == len(unit.items)
    res = run_unit(unit.model_copy(update={"items": unit.items[:2]}), settings, llm=llm)
    assert res.done == 2
    with open(res.results_file, "a", encoding="utf-8") as fh:
        fh.write('{"kind": "page_summ')
    applied = apply_enrichment(settings)
    assert applied.results_loaded == 2 and not list(results_dir(settings).glob("*.jsonl"))
    rest = plan_enrichment(settings, "summaries", budget_tokens=10**9)
    done = {(i.kind, i.element_id) for i in unit.items[:2]}
    assert not done & {(i.kind, i.element_id) for u in rest for i in u.items}


def test_reparse_and_republish_keep_summaries_and_their_points(settings):
    enrich(settings, stages=("summaries",), llm=EchoLLM(), budget_tokens=10**9)
    before = q(settings, "SELECT page_id, page_summary FROM pages ORDER BY page_id")
    points = enriched_points(settings)
    # force a re-parse and re-materialization of the same PDF, then re-publish its vectors
    shutil.rmtree(settings.staging_dir / "parsed")
    report = ingest([PAPER], settings)
    assert [r.status for r in report.parsed] == ["parsed"]
    assert q(settings, "SELECT page_id, page_summary FROM pages ORDER BY page_id") == before  # from the cache
    assert enriched_points(settings) == points  # the summaries came back from the cache, and their points


def test_a_vision_llm_gets_the_figure_region(settings):
    import base64

    import pymupdf

    vlm = EchoLLM()
    vlm.supports_images = True
    settings = settings.model_copy(update={"enrich_kinds": ["image_summary", "table_summary"]})
    enrich(settings, stages=("summaries",), llm=vlm, budget_tokens=10**9)
    (page, bbox), = q(settings, "SELECT page_number, bounding_box FROM images")
    assert len(vlm.images) == 1 and vlm.calls.count("Table") >= 4  # tables went text-only
    png = base64.b64decode(vlm.images[0].split(",", 1)[1])
    pix = pymupdf.Pixmap(png)
    # the crop is exactly the stored region at 144 dpi (2 px per PDF point)
    assert abs(pix.width - bbox[2] * 2) <= 2 and abs(pix.height - bbox[3] * 2) <= 2


def test_ocr_reads_text_inside_a_real_figure(settings):
    settings = settings.model_copy(update={"enrich_kinds": ["image_ocr_text"]})
    units = plan_enrichment(settings, "ocr")
    n_images = q(settings, "SELECT count(*) FROM images WHERE bounding_box IS NOT NULL")[0][0]
    assert n_images >= 1 and sum(len(u.items) for u in units) == n_images
    enrich(settings, stages=("ocr",))
    rows = q(settings, "SELECT image_caption, image_ocr_text FROM images WHERE bounding_box IS NOT NULL")
    assert all(text is not None for _, text in rows)
    # Figure 1 of the paper is the literature graph: nodes labelled "paper", "author", "entity" ...
    fig1 = next(text for cap, text in rows if cap.startswith("Figure 1"))
    assert re.search(r"(?i)author", fig1), fig1
    assert len(enriched_points(settings)) == sum(1 for _, t in rows if t.strip())


@pytest.mark.slow
def test_offline_model_summarizes_a_real_table_and_the_paper(settings):
    """The default offline model (Qwen2.5-Coder-1.5B GGUF, models under <repo>/.neusym like the demo)
    writes a table summary and a tldr + tags that the apply step accepts."""
    from neusym.llm.chat import LocalLlamaLLM

    from .conftest import REPO

    llm = LocalLlamaLLM(settings.model_copy(update={"home": REPO / ".neusym", "llm_context_tokens": 2048}))
    settings = settings.model_copy(update={"enrich_kinds": ["paper_tldr_tags", "table_summary"],
                                           "enrich_unit_size": 2})
    units = plan_enrichment(settings, "summaries", budget_tokens=10**9)
    res = run_unit(units[0], settings, llm=llm)  # the tldr/tags and the first table
    assert res.done == 2 and res.failed == 0, open(res.results_file).read()
    apply_enrichment(settings)
    tldr, tags = q(settings, "SELECT tldr, tags FROM metadata")[0]
    assert len(tldr.split()) >= 5 and 1 <= len(tags) <= 8
    assert q(settings, "SELECT count(table_summary) FROM tables")[0][0] == 1
