"""The blind test set (benchmarks/airqa_blind, issue M): frozen, on papers no dev/test item uses, and
every gold answer verified against the PDF text.

Checks, without running the system on the set: the files hash to the SHA-256 the README freezes;
the mix (>= 120 objective items over >= 15 papers, every category and several-paper items); every
evaluator spec is accepted, every gold answer scores 1 (as a value and as printed text) and every
near miss 0; every evidence quote occurs on its page of the PDF (PDFs of /work/shared/corpus/pdfs,
skipped where that folder is absent); anchor ids follow the AirQA convention from papers.json; no
paper of the set is a paper of the dev set.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from neusym.evaluation import evaluate, evaluate_item

REPO = Path(__file__).resolve().parent.parent
BLIND = REPO / "benchmarks" / "airqa_blind"
SHARED = Path("/work/shared/corpus/pdfs")
CATEGORIES = {"text", "table", "image", "formula", "metadata"}

sys.path.insert(0, str(BLIND))
from build import set_hash  # noqa: E402
from check_drafts import normalize, page_text  # noqa: E402

QUESTIONS = [json.loads(line) for line in (BLIND / "questions.jsonl").read_text().splitlines() if line.strip()]
EVIDENCE = {e["uuid"]: e for e in (json.loads(line) for line in (BLIND / "evidence.jsonl").read_text().splitlines()
                                   if line.strip())}
PAPERS = json.loads((BLIND / "papers.json").read_text())
IDS = [q["uuid"][:8] for q in QUESTIONS]


def test_the_set_is_frozen_with_the_readme_hash():
    readme = (BLIND / "README.md").read_text()
    m = re.search(r"SHA-256 `([0-9a-f]{64})`", readme)
    assert m, "the README names no SHA-256"
    assert set_hash(BLIND / "questions.jsonl", BLIND / "evidence.jsonl") == m.group(1), (
        "the blind set changed after it was frozen")


def test_mix_of_the_set():
    assert len(QUESTIONS) >= 120 and len({q["uuid"] for q in QUESTIONS}) == len(QUESTIONS)
    papers = {p for q in QUESTIONS for p in q["anchor_pdf"]}
    assert len(papers) >= 15
    tags = Counter(t for q in QUESTIONS for t in q["tags"])
    assert tags["objective"] == len(QUESTIONS)
    for category, least in {"text": 25, "table": 20, "image": 10, "formula": 8, "metadata": 10}.items():
        assert tags[category] >= least, (category, tags[category])
    assert tags["multiple"] >= 10


def test_no_paper_of_the_set_is_a_dev_set_paper():
    dev = [json.loads(line) for line in (REPO / "benchmarks" / "airqa_dev" / "questions.jsonl").read_text().splitlines()
           if line.strip()]
    dev_papers = {p for q in dev for p in q["anchor_pdf"] + q["reference_pdf"]}
    assert not dev_papers & {p for q in QUESTIONS for p in q["anchor_pdf"]}


def _reference_airqa_id(title: str, conference: str | None, year: int | None) -> str:
    venue = f"{conference}{year}".lower() if conference and year else "uncategorized"
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, re.sub(r"[^a-z0-9]", "", title.lower()) + "-" + venue))


def test_anchor_ids_follow_the_airqa_convention():
    for p in PAPERS:
        assert p["airqa_paper_id"] == _reference_airqa_id(p["title"], p["conference"], p["year"]), p["pdf"]
    by_pdf = {p["pdf"]: p["airqa_paper_id"] for p in PAPERS}
    for q in QUESTIONS:
        assert q["anchor_pdf"] == [by_pdf[pdf] for pdf in EVIDENCE[q["uuid"]]["pdfs"]]


@pytest.mark.parametrize("item", QUESTIONS, ids=IDS)
def test_item_fields_evaluator_gold_and_near_miss(item):
    assert set(item) == {"uuid", "question", "answer_format", "tags", "anchor_pdf", "reference_pdf", "conference",
                         "evaluator"}
    assert item["answer_format"].startswith("Your answer should be") and item["question"].rstrip()[-1] in "?."
    kind = [t for t in item["tags"] if t in ("single", "multiple")]
    assert len(kind) == 1 and set(item["tags"]) & CATEGORIES
    assert (len(item["anchor_pdf"]) == 1) == (kind == ["single"])
    assert_gold_one_near_miss_zero(item, EVIDENCE[item["uuid"]])


def assert_gold_one_near_miss_zero(item: dict, ev: dict) -> None:
    """The item's evaluator is valid; its gold answer (as a value and as text) scores 1, its near miss 0."""
    assert evaluate(None, item["evaluator"]).error is None
    gold = ev["answer"]
    assert evaluate_item(gold, item).passed
    assert evaluate_item(gold if isinstance(gold, str) else json.dumps(gold), item).passed
    miss = evaluate_item(ev["near_miss"], item)
    assert miss.error is None and miss.score == 0.0


@pytest.mark.parametrize("item", QUESTIONS, ids=IDS)
def test_evidence_quotes_occur_on_their_pages(item):
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent on this machine")
    for ev in EVIDENCE[item["uuid"]]["evidence"]:
        assert normalize(ev["quote"]) in page_text(ev["pdf"], int(ev["page"])), (ev["pdf"], ev["page"], ev["quote"][:80])
