"""The table tuning set (benchmarks/airqa_tables, issue M): frozen with the README hash, on the dev
papers and none of the blind set's, asking what no dev item asks, every gold answer scored 1 by its
evaluator and every near miss 0, every quote on its PDF page (PDFs of /work/shared/corpus/pdfs,
skipped where that folder is absent)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parent.parent
TABLES = REPO / "benchmarks" / "airqa_tables"
SHARED = Path("/work/shared/corpus/pdfs")

sys.path.insert(0, str(REPO / "benchmarks" / "airqa_blind"))
from build import set_hash  # noqa: E402
from check_drafts import normalize, page_text  # noqa: E402  (the checks the drafts passed)

from .test_blind_set import assert_gold_one_near_miss_zero  # noqa: E402


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


QUESTIONS = _lines(TABLES / "questions.jsonl")
EVIDENCE = {e["uuid"]: e for e in _lines(TABLES / "evidence.jsonl")}
IDS = [q["uuid"][:8] for q in QUESTIONS]


def test_the_set_is_frozen_with_the_readme_hash():
    m = re.search(r"SHA-256 of `questions.jsonl` \+ `evidence.jsonl`: `([0-9a-f]{64})`", (TABLES / "README.md").read_text())
    assert m, "the README names no SHA-256"
    assert set_hash(TABLES / "questions.jsonl", TABLES / "evidence.jsonl") == m.group(1), "the set changed after it was frozen"


def test_the_set_is_on_dev_papers_and_asks_what_no_dev_item_asks():
    dev = _lines(REPO / "benchmarks" / "airqa_dev" / "questions.jsonl")
    blind = _lines(REPO / "benchmarks" / "airqa_blind" / "questions.jsonl")
    papers = {p for q in QUESTIONS for p in q["anchor_pdf"]}
    assert len(QUESTIONS) == 37 and len({q["uuid"] for q in QUESTIONS}) == 37 and len(papers) == 8
    assert papers <= {p for q in dev for p in q["anchor_pdf"] + q["reference_pdf"]}
    assert not papers & {p for q in blind for p in q["anchor_pdf"]}
    assert not {q["question"] for q in QUESTIONS} & {q["question"] for q in dev}
    assert all("table" in q["tags"] and "objective" in q["tags"] for q in QUESTIONS)


@pytest.mark.parametrize("item", QUESTIONS, ids=IDS)
def test_gold_scores_one_and_the_near_miss_zero(item):
    assert_gold_one_near_miss_zero(item, EVIDENCE[item["uuid"]])


@pytest.mark.parametrize("item", QUESTIONS, ids=IDS)
def test_evidence_quotes_occur_on_their_pages(item):
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent on this machine")
    for ev in EVIDENCE[item["uuid"]]["evidence"]:
        assert normalize(ev["quote"]) in page_text(ev["pdf"], int(ev["page"])), (ev["pdf"], ev["page"], ev["quote"][:80])
