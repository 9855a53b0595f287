"""Check draft items of the blind set before they are merged (used while writing them).

Usage:
    .venv/bin/python benchmarks/airqa_blind/check_drafts.py DRAFT.jsonl [...]

A draft line is one JSON object:
    {"pdfs": ["<file name in /work/shared/corpus/pdfs>", ...],   # the paper(s) the question is about
     "question": "...", "answer_format": "Your answer should be ...",
     "tags": ["single"|"multiple", "text"|"table"|"image"|"formula"|"metadata", "objective"],
     "evaluator": {"eval_func": ..., "eval_kwargs": {...}},      # neusym.evaluation functions
     "answer": <gold, in the shape answer_format asks for>,
     "near_miss": <a plausible wrong answer that must score 0>,
     "evidence": [{"pdf": ..., "page": <1-based PDF page>, "quote": "<verbatim page text>"}, ...],
     "note": "<how the answer follows from the evidence (arithmetic, table reading, counting)>"}

Checked: fields and tags; every pdf is one of papers.json; the evaluator spec is accepted; the gold
answer scores 1 (as a value and as printed text) and the near miss 0; every quote occurs on its
page (whitespace, ligatures and hyphenation normalised as in tests/test_dev_set.py). Exit 1 when
any line fails.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = Path("/work/shared/corpus/pdfs")
PAPERS = {p["pdf"]: p for p in json.loads((HERE / "papers.json").read_text())}
CATEGORIES = {"text", "table", "image", "formula", "metadata"}


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).replace("\u00ad", "")
    text = "".join(ch for ch in text if ch in "\n\t" or not unicodedata.category(ch).startswith("C"))
    text = re.sub(r"[-\u2010\u2011]\s*\n\s*", "", text)
    text = re.sub(r"[-\u2010\u2011]", "", text)
    return " ".join(text.split())


@lru_cache(maxsize=None)
def page_text(pdf: str, page: int) -> str:
    import pymupdf

    with pymupdf.open(SHARED / pdf) as doc:
        if not 1 <= page <= doc.page_count:
            raise ValueError(f"{pdf} has {doc.page_count} pages, not {page}")
        return normalize(doc[page - 1].get_text())


def check(item: dict, papers: dict | None = None) -> list[str]:
    """The problems of one draft ``item`` (empty when it passes); ``papers``: pdf file name -> entry
    of the set's ``papers.json`` (default: the blind set's)."""
    from neusym.evaluation import evaluate

    problems = []
    need = {"pdfs", "question", "answer_format", "tags", "evaluator", "answer", "near_miss", "evidence"}
    missing = need - set(item)
    if missing:
        return [f"missing fields {sorted(missing)}"]
    if not item["answer_format"].startswith("Your answer should be"):
        problems.append("answer_format must start with 'Your answer should be'")
    if not item["question"].rstrip().endswith(("?", ".")):
        problems.append("question must end with ? or .")
    tags = item["tags"]
    kind = [t for t in tags if t in ("single", "multiple")]
    if len(kind) != 1 or "objective" not in tags or not (set(tags) & CATEGORIES) or set(tags) - CATEGORIES - {"single", "multiple", "objective"}:
        problems.append(f"tags {tags}: one of single/multiple, one or more of {sorted(CATEGORIES)}, and objective")
    for pdf in item["pdfs"]:
        if pdf not in (PAPERS if papers is None else papers):
            problems.append(f"{pdf} is not one of the set's papers (papers.json)")
    if kind == ["single"] and len(item["pdfs"]) != 1 or kind == ["multiple"] and len(set(item["pdfs"])) < 2:
        problems.append("single items name one pdf, multiple items two or more")
    empty = evaluate(None, item["evaluator"])
    if empty.error:
        problems.append(f"evaluator spec refused: {empty.error}")
        return problems
    gold = evaluate(item["answer"], item["evaluator"], question=item["question"])
    printed = item["answer"] if isinstance(item["answer"], str) else json.dumps(item["answer"])
    gold_text = evaluate(printed, item["evaluator"], question=item["question"])
    if not (gold.passed and gold_text.passed):
        problems.append(f"the gold answer does not score 1: {gold} / {gold_text}")
    miss = evaluate(item["near_miss"], item["evaluator"], question=item["question"])
    if miss.error or miss.score != 0.0:
        problems.append(f"the near miss does not score 0: {miss}")
    if not item["evidence"]:
        problems.append("no evidence")

    for ev in item["evidence"]:
        try:
            text = page_text(ev["pdf"], int(ev["page"]))
        except Exception as exc:  # noqa: BLE001 - reported
            problems.append(f"evidence {ev.get('pdf')} p.{ev.get('page')}: {exc}")
            continue
        quote = normalize(ev["quote"])
        if len(quote) < 12:
            problems.append(f"quote too short to identify a place: {ev['quote']!r}")
        if quote not in text:
            problems.append(f"quote not on {ev['pdf']} page {ev['page']}: {ev['quote'][:90]!r}")

    return problems


def main(paths: list[str], papers: dict | None = None) -> int:
    bad = 0
    total = 0
    for path in paths:
        for number, line in enumerate(Path(path).read_text().splitlines(), 1):
            if not line.strip():
                continue
            total += 1
            try:
                item = json.loads(line)
            except ValueError as exc:
                print(f"{path}:{number}: not JSON: {exc}")
                bad += 1
                continue
            problems = check(item, papers)
            if problems:
                bad += 1
                for p in problems:
                    print(f"{path}:{number}: {p}")
    print(f"{total - bad} of {total} draft items pass")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
