"""Assemble the blind set from checked drafts: ``questions.jsonl`` (the AirQA-Real format that
``neusym eval run`` reads) and ``evidence.jsonl`` (gold answers, near misses, verbatim quotes), then
print the set's SHA-256 (the hash the README freezes).

Usage:
    .venv/bin/python benchmarks/airqa_blind/build.py drafts/group1.jsonl drafts/group2.jsonl ...

Every draft line must pass ``check_drafts.py`` first. uuids are uuid5 of the question text (stable);
``anchor_pdf`` holds the AirQA paper ids of ``papers.json`` (what ingest gives these PDFs).
"""

from __future__ import annotations

import hashlib
import json
import sys
import uuid
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
NAMESPACE = uuid.UUID("6d2f0c57-6f8c-4a52-9a2b-6a1b3f0f5e11")  # the blind set's own uuid5 namespace
PAPERS = {p["pdf"]: p for p in json.loads((HERE / "papers.json").read_text())}


def set_hash(questions: Path, evidence: Path) -> str:
    """SHA-256 over the two files' bytes (questions first): what the README freezes."""
    h = hashlib.sha256()
    for path in (questions, evidence):
        h.update(path.read_bytes())
    return h.hexdigest()


def assemble(paths: list[str], out_dir: Path, namespace: uuid.UUID, papers: dict,
             extra: Callable[[dict], dict] = lambda draft: {}) -> str:
    """Write ``out_dir``/questions.jsonl and evidence.jsonl from the draft files ``paths`` (uuid5 of
    each question in ``namespace``; ``papers``: pdf file name -> ``papers.json`` entry; ``extra``: the
    evidence fields a set adds per draft) and return the set's SHA-256 (:func:`set_hash`). Raises
    AssertionError when two drafts ask the same question."""
    questions, evidence = [], []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            uid = str(uuid.uuid5(namespace, d["question"]))
            questions.append({
                "uuid": uid, "question": d["question"], "answer_format": d["answer_format"], "tags": d["tags"],
                "anchor_pdf": [papers[p]["airqa_paper_id"] for p in d["pdfs"]], "reference_pdf": [],
                "conference": [], "evaluator": d["evaluator"]})
            evidence.append({"uuid": uid, "answer": d["answer"], "near_miss": d["near_miss"], "pdfs": d["pdfs"],
                             "evidence": d["evidence"], **extra(d)})
    uids = [q["uuid"] for q in questions]
    assert len(uids) == len(set(uids)), "two drafts ask the same question"
    (out_dir / "questions.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions))
    (out_dir / "evidence.jsonl").write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in evidence))
    digest = set_hash(out_dir / "questions.jsonl", out_dir / "evidence.jsonl")
    print(len(questions), "items; sha256", digest)
    return digest


def main(paths: list[str]) -> None:
    assemble(paths, HERE, NAMESPACE, PAPERS, lambda d: {"note": d.get("note", ""), "pdf_source": "shared"})


if __name__ == "__main__":
    main(sys.argv[1:])
