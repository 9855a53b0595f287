"""Assemble the table tuning set from its checked drafts: ``questions.jsonl`` (AirQA-Real format, what
``neusym eval run`` reads) and ``evidence.jsonl`` (gold answers, near misses, verbatim quotes), then
print the set's SHA-256 (the hash its README records).

Usage:
    .venv/bin/python benchmarks/airqa_tables/drafts/tables1.py > benchmarks/airqa_tables/drafts/tables1.jsonl
    .venv/bin/python benchmarks/airqa_tables/check.py benchmarks/airqa_tables/drafts/tables1.jsonl
    .venv/bin/python benchmarks/airqa_tables/build.py benchmarks/airqa_tables/drafts/tables1.jsonl

uuids are uuid5 of the question text in this set's own namespace; ``anchor_pdf`` holds the AirQA
paper ids of ``papers.json`` (the ids the dev set's papers get at ingest).
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "airqa_blind"))

from build import set_hash  # noqa: E402  (the blind set's hash: the two files' bytes, questions first)

NAMESPACE = uuid.UUID("3c1e54a4-0b8f-4d52-8a61-2f4f0f6b7d21")
PAPERS = {p["pdf"]: p for p in json.loads((HERE / "papers.json").read_text())}


def main(paths: list[str]) -> None:
    questions, evidence = [], []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            uid = str(uuid.uuid5(NAMESPACE, d["question"]))
            questions.append({
                "uuid": uid, "question": d["question"], "answer_format": d["answer_format"], "tags": d["tags"],
                "anchor_pdf": [PAPERS[p]["airqa_paper_id"] for p in d["pdfs"]], "reference_pdf": [],
                "conference": [], "evaluator": d["evaluator"]})
            evidence.append({"uuid": uid, "answer": d["answer"], "near_miss": d["near_miss"], "pdfs": d["pdfs"],
                             "evidence": d["evidence"]})
    uids = [q["uuid"] for q in questions]
    assert len(uids) == len(set(uids)), "two drafts ask the same question"
    (HERE / "questions.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions))
    (HERE / "evidence.jsonl").write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in evidence))
    print(len(questions), "items; sha256", set_hash(HERE / "questions.jsonl", HERE / "evidence.jsonl"))


if __name__ == "__main__":
    main(sys.argv[1:])
