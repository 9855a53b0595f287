"""Validity of the AirQA-format dev set in benchmarks/airqa_dev (issue D).

The set is data, so these tests check the data against independent sources: the PDFs themselves
(every evidence quote must occur on the named page; titles and venues on page 1), the evaluation
registry (every evaluator spec is accepted, gold answers score 1, near misses score 0), the
NeuSym-RAG paper-id formula re-implemented here from its documentation, and the dev/test split in
splits.json (recomputed from its seeded recipe). No ingest needed.

PDFs are looked up in samples/pdfs/, then benchmarks/airqa_dev/pdfs/. Items marked
``"pdf_source": "shared"`` in evidence.jsonl also use PDFs of the read-only corpus in
/work/shared/corpus/pdfs/ that are not copied into the repository; their PDF checks are skipped
when that folder is absent.
"""

from __future__ import annotations

import json
import random
import re
import unicodedata
import uuid
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from neusym.evaluation import EVAL_FUNCTIONS, LLM_FUNCTIONS, evaluate, evaluate_item, needs_judge
from neusym.ids import airqa_paper_id

REPO = Path(__file__).resolve().parent.parent
DEV = REPO / "benchmarks" / "airqa_dev"
SAMPLES = REPO / "samples" / "pdfs"
DEV_PDFS = DEV / "pdfs"
LOCAL_PDF_DIRS = (SAMPLES, DEV_PDFS)
SHARED_PDFS = Path("/work/shared/corpus/pdfs")
N_ORIGINAL = 36  # the first 36 lines are the original set (all "dev"); the rest were added with a held-out split
SPLIT_SEED = 2025

FIELDS = {"uuid", "question", "answer_format", "tags", "anchor_pdf", "reference_pdf", "conference", "evaluator"}
TASK_TYPES = {"single", "multiple", "retrieval"}
CATEGORIES = {"text", "table", "image", "formula", "metadata"}
GENRES = {"objective", "subjective"}


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        assert line.strip(), f"{path.name}:{number} is blank"
        rows.append(json.loads(line))
    return rows


QUESTIONS = _read_jsonl(DEV / "questions.jsonl")
EVIDENCE = {row["uuid"]: row for row in _read_jsonl(DEV / "evidence.jsonl")}
SPLITS = json.loads((DEV / "splits.json").read_text(encoding="utf-8"))
IDS = [q["uuid"][:8] for q in QUESTIONS]


def _task_type(item: dict) -> str:
    return next(t for t in item["tags"] if t in TASK_TYPES)


def _genre(item: dict) -> str:
    return next(t for t in item["tags"] if t in GENRES)


def _normalize(text: str) -> str:
    """PDF-text normal form: NFKC (ligatures), no control characters, line-break hyphenation joined,
    remaining hyphens dropped (so "co-\\nviewed", "co-viewed" and "coviewed" agree), whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).replace("\u00ad", "")
    text = "".join(ch for ch in text if ch in "\n\t" or not unicodedata.category(ch).startswith("C"))
    text = re.sub(r"[-\u2010\u2011]\s*\n\s*", "", text)
    text = re.sub(r"[-\u2010\u2011]", "", text)
    return " ".join(text.split())


def _local_pdf(pdf: str) -> Path | None:
    """The PDF in the repository (samples/pdfs, then benchmarks/airqa_dev/pdfs), or None."""
    return next((folder / pdf for folder in LOCAL_PDF_DIRS if (folder / pdf).is_file()), None)


def _pdf_path(pdf: str) -> Path:
    """The PDF's path; a PDF not in the repository must be in the shared corpus, else the test skips."""
    local = _local_pdf(pdf)
    if local is not None:
        return local
    if not SHARED_PDFS.is_dir():
        pytest.skip(f"{pdf} is only in {SHARED_PDFS}, which is absent on this machine")
    path = SHARED_PDFS / pdf
    assert path.is_file(), f"{pdf} is in neither {[str(d) for d in LOCAL_PDF_DIRS]} nor {SHARED_PDFS}"
    return path


@lru_cache(maxsize=None)
def _page_text(pdf: str, page: int) -> str:
    import pymupdf

    with pymupdf.open(_pdf_path(pdf)) as doc:
        assert 1 <= page <= doc.page_count, f"{pdf} has {doc.page_count} pages, evidence cites page {page}"
        return _normalize(doc[page - 1].get_text())


def _row_papers(row: dict) -> list[dict]:
    return row["anchor_papers"] + ([row["target_paper"]] if "target_paper" in row else [])


def _reference_airqa_id(title: str, conference: str | None, year: int | None) -> str:
    """The AirQA-Real paper id, written from the NeuSym-RAG description (not from neusym.ids):
    uuid5(DNS, <title lower-cased, a-z0-9 only> + "-" + <conference+year lower-cased, or "uncategorized">)."""
    venue = f"{conference}{year}".lower() if conference and year else "uncategorized"
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, re.sub(r"[^a-z0-9]", "", title.lower()) + "-" + venue))


# -- format ------------------------------------------------------------------------------------


def test_set_size_and_uuids():
    assert len(QUESTIONS) >= 84
    uuids = [q["uuid"] for q in QUESTIONS]
    assert len(set(uuids)) == len(uuids), "duplicate uuids"
    for value in uuids:
        assert uuid.UUID(value).version == 4 and str(uuid.UUID(value)) == value
    assert list(EVIDENCE) == uuids, "evidence.jsonl must have one line per question, in the same order"


@pytest.mark.parametrize("item", QUESTIONS, ids=IDS)
def test_item_fields_and_types(item):
    assert set(item) == FIELDS
    for key in ("question", "answer_format"):
        assert isinstance(item[key], str) and len(item[key].strip()) > 15
    assert item["question"].rstrip().endswith(("?", "."))
    assert item["answer_format"].startswith("Your answer should be")
    for key in ("tags", "anchor_pdf", "reference_pdf", "conference"):
        assert isinstance(item[key], list) and all(isinstance(v, str) for v in item[key])
    assert item["reference_pdf"] == []
    for paper_id in item["anchor_pdf"]:
        uuid.UUID(paper_id)
    evaluator = item["evaluator"]
    assert set(evaluator) == {"eval_func", "eval_kwargs"} and isinstance(evaluator["eval_kwargs"], dict)


@pytest.mark.parametrize("item", QUESTIONS, ids=IDS)
def test_tags_vocabulary_and_structure(item):
    tags = item["tags"]
    assert len(tags) == len(set(tags))
    assert set(tags) <= TASK_TYPES | CATEGORIES | GENRES
    assert sum(t in TASK_TYPES for t in tags) == 1
    assert sum(t in GENRES for t in tags) == 1
    assert any(t in CATEGORIES for t in tags)
    kind, anchors = _task_type(item), item["anchor_pdf"]
    if kind == "single":
        assert len(anchors) == 1
    elif kind == "multiple":
        assert len(anchors) >= 2 and len(set(anchors)) == len(anchors)
    else:
        assert anchors == []
        assert item["evaluator"]["eval_func"] == "eval_paper_relevance_with_reference_answer"
    # the genre says whether scoring needs an LLM judge
    assert needs_judge(item["evaluator"]) == (_genre(item) == "subjective")


def test_mix_of_the_set():
    counts = Counter(tag for q in QUESTIONS for tag in q["tags"])
    # the original 36 items plus the minimum mix of the >= 48 added ones
    minimum = {"text": 19, "table": 13, "image": 11, "formula": 10, "metadata": 10, "single": 54, "multiple": 12,
               "retrieval": 12}
    for tag, least in minimum.items():
        assert counts[tag] >= least, f"{tag}: {counts[tag]} < {least}"
    assert 4 <= counts["subjective"] <= 11
    assert counts["single"] > counts["multiple"] + counts["retrieval"]
    funcs = Counter(q["evaluator"]["eval_func"] for q in QUESTIONS)
    for name in ("eval_reference_answer_with_llm", "eval_scoring_points_with_llm",
                 "eval_complex_math_formula_with_llm", "eval_conjunction"):
        assert funcs[name] >= 1, name


# -- evaluators --------------------------------------------------------------------------------


def _function_names(evaluator: dict) -> list[str]:
    kwargs = evaluator["eval_kwargs"]
    names = [evaluator["eval_func"]]
    for name, sub_kwargs in zip(kwargs.get("eval_func_list", []), kwargs.get("eval_kwargs_list", [])):
        names += _function_names({"eval_func": name, "eval_kwargs": sub_kwargs})
    return names


@pytest.mark.parametrize("item", QUESTIONS, ids=IDS)
def test_evaluator_spec_is_accepted(item):
    for name in _function_names(item["evaluator"]):
        assert name in EVAL_FUNCTIONS, name
    # an empty prediction validates the whole spec (kwargs names and types) without scoring it
    outcome = evaluate(None, item["evaluator"])
    assert outcome.error is None, outcome.error
    assert outcome.score == 0.0


OBJECTIVE = [q for q in QUESTIONS if _genre(q) == "objective"]


@pytest.mark.parametrize("item", OBJECTIVE, ids=[q["uuid"][:8] for q in OBJECTIVE])
def test_gold_answer_scores_one(item):
    answer = EVIDENCE[item["uuid"]]["answer"]
    outcome = evaluate_item(answer, item)
    assert outcome.passed, outcome
    # the same answer as an LLM would print it (JSON / Python literal text)
    text = answer if isinstance(answer, str) else json.dumps(answer)
    assert evaluate_item(text, item).passed


NEAR_MISSES = [q for q in QUESTIONS if "near_miss" in EVIDENCE[q["uuid"]]]


@pytest.mark.parametrize("item", NEAR_MISSES, ids=[q["uuid"][:8] for q in NEAR_MISSES])
def test_near_miss_scores_zero(item):
    outcome = evaluate_item(EVIDENCE[item["uuid"]]["near_miss"], item)
    assert outcome.error is None and outcome.score == 0.0, outcome


def test_every_objective_item_has_a_near_miss():
    assert {q["uuid"] for q in OBJECTIVE} <= {q["uuid"] for q in NEAR_MISSES}


SUBJECTIVE = [q for q in QUESTIONS if _genre(q) == "subjective"]


@pytest.mark.parametrize("item", SUBJECTIVE, ids=[q["uuid"][:8] for q in SUBJECTIVE])
def test_subjective_items(item):
    evaluator = item["evaluator"]
    assert evaluator["eval_func"] in LLM_FUNCTIONS
    answer = EVIDENCE[item["uuid"]]["answer"]
    assert isinstance(answer, str) and answer.strip()
    kwargs = evaluator["eval_kwargs"]
    if evaluator["eval_func"] == "eval_scoring_points_with_llm":
        assert 2 <= len(kwargs["scoring_points"]) <= 4
        # without a judge the item cannot be scored: an error, never a silent pass
        outcome = evaluate_item(answer, item)
        assert outcome.error and outcome.score == 0.0
    else:
        # the reference itself passes without a judge (identity short-circuit of the function)
        assert evaluate_item(answer, item).passed


# -- provenance --------------------------------------------------------------------------------


@pytest.mark.parametrize("item", QUESTIONS, ids=IDS)
def test_anchor_ids_follow_the_airqa_convention(item):
    papers = EVIDENCE[item["uuid"]]["anchor_papers"]
    assert len(papers) == len(item["anchor_pdf"])
    expected = [_reference_airqa_id(p["title"], p["conference"], p["year"]) for p in papers]
    assert item["anchor_pdf"] == expected
    assert item["anchor_pdf"] == [airqa_paper_id(p["title"], p["conference"], p["year"]) for p in papers]


def test_reference_id_formula_against_neusym_rag_example():
    # uuid5 of the documented key, computed by hand for a title with punctuation and a venue
    assert _reference_airqa_id("A b-C: d", "ACL", 2023) == str(uuid.uuid5(uuid.NAMESPACE_DNS, "abcd-acl2023"))
    assert _reference_airqa_id("A b-C: d", None, None) == str(uuid.uuid5(uuid.NAMESPACE_DNS, "abcd-uncategorized"))


PAPERS = {p["pdf"]: p for row in EVIDENCE.values() for p in _row_papers(row)}


def test_every_repository_paper_is_used_with_one_description():
    local = {p.name for folder in LOCAL_PDF_DIRS for p in folder.glob("*.pdf")}
    assert {p.name for p in SAMPLES.glob("*.pdf")} & {p.name for p in DEV_PDFS.glob("*.pdf")} == set()
    assert local <= set(PAPERS), f"PDFs in the repository that no item uses: {sorted(local - set(PAPERS))}"
    for row in EVIDENCE.values():
        for paper in _row_papers(row):
            assert paper == PAPERS[paper["pdf"]], "a paper is described differently in two evidence lines"


@pytest.mark.parametrize("item", QUESTIONS, ids=IDS)
def test_pdf_source_marks_exactly_the_items_using_unbundled_pdfs(item):
    # an item is "shared" iff one of its PDFs is not in the repository (so it can be skipped without /work/shared)
    row = EVIDENCE[item["uuid"]]
    pdfs = {p["pdf"] for p in _row_papers(row)} | {e["pdf"] for e in row["evidence"]}
    unbundled = {pdf for pdf in pdfs if _local_pdf(pdf) is None}
    assert row.get("pdf_source", "repository") in {"repository", "shared"}
    assert (row.get("pdf_source") == "shared") == bool(unbundled), unbundled


@pytest.mark.parametrize("pdf", sorted(PAPERS), ids=lambda name: name[:20])
def test_paper_title_and_venue_are_printed_on_page_one(pdf):
    paper = PAPERS[pdf]
    first_page = _page_text(pdf, 1)
    assert _normalize(paper["title"]).lower() in first_page.lower()
    if paper["conference"]:
        assert isinstance(paper["year"], int)
    if paper.get("venue_quote"):
        assert _normalize(paper["venue_quote"]) in first_page
        assert str(paper["year"]) in first_page
    else:
        assert paper.get("venue_note"), "a venue not printed on the PDF needs a note saying where it comes from"


@pytest.mark.parametrize("item", QUESTIONS, ids=IDS)
def test_evidence_quotes_occur_on_the_cited_pages(item):
    row = EVIDENCE[item["uuid"]]
    assert row["evidence"], "every item needs evidence"
    cited_pdfs = {e["pdf"] for e in row["evidence"]}
    expected_pdfs = {p["pdf"] for p in row["anchor_papers"]}
    if "target_paper" in row:
        expected_pdfs.add(row["target_paper"]["pdf"])
    assert cited_pdfs == expected_pdfs, "evidence must come from (all) the papers the item is about"
    for entry in row["evidence"]:
        assert isinstance(entry["page"], int)
        quote = _normalize(entry["quote"])
        assert len(quote) >= 10
        assert quote in _page_text(entry["pdf"], entry["page"]), f"not on {entry['pdf']} p.{entry['page']}: {quote}"
    if "image" in item["tags"]:
        assert any(e.get("figure_description") for e in row["evidence"]), "image items describe the figure"


@pytest.mark.parametrize("item", QUESTIONS, ids=IDS)
def test_conference_field(item):
    row = EVIDENCE[item["uuid"]]
    if _task_type(item) != "retrieval":
        assert item["conference"] == []
        return
    target = row["target_paper"]
    assert item["evaluator"]["eval_kwargs"]["reference_answer"] == target["title"]
    venue = [f"{target['conference']}{target['year']}".lower()] if target["conference"] else []
    assert item["conference"] == venue


# -- splits -----------------------------------------------------------------------------------


def _recomputed_split() -> dict[str, str]:
    """The recipe of splits.json: the original items are dev; the added items are grouped by task type
    (in file order), each group is shuffled with one shared random.Random(2025) (single, then multiple,
    then retrieval) and the first round(n/3) of each group go to test."""
    rng = random.Random(SPLIT_SEED)
    split = {q["uuid"]: "dev" for q in QUESTIONS[:N_ORIGINAL]}
    added = QUESTIONS[N_ORIGINAL:]
    for kind in ("single", "multiple", "retrieval"):
        group = [q["uuid"] for q in added if _task_type(q) == kind]
        rng.shuffle(group)
        cut = round(len(group) / 3)
        split.update({u: ("test" if i < cut else "dev") for i, u in enumerate(group)})
    return split


def test_splits_cover_every_item_with_dev_or_test():
    assert list(SPLITS) == [q["uuid"] for q in QUESTIONS], "splits.json must list every uuid once, in file order"
    assert set(SPLITS.values()) == {"dev", "test"}


def test_splits_follow_the_seeded_stratified_recipe():
    assert SPLITS == _recomputed_split()
    assert all(SPLITS[q["uuid"]] == "dev" for q in QUESTIONS[:N_ORIGINAL])
    test_items = [q for q in QUESTIONS if SPLITS[q["uuid"]] == "test"]
    assert {_task_type(q) for q in test_items} == TASK_TYPES, "every task type needs held-out test items"
    added = len(QUESTIONS) - N_ORIGINAL
    assert abs(len(test_items) - added / 3) <= 2


def test_normalization_is_not_vacuous():
    # a real quote matches, and the same quote with one number changed does not
    page = _page_text("acl2020_2020.acl-main.207_SPECTER.pdf", 5)
    assert _normalize("use 2 hard negatives (citations of citations) and 3 easy negatives") in page
    assert _normalize("use 3 hard negatives (citations of citations) and 3 easy negatives") not in page
