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

from build import assemble  # noqa: E402  (the blind set's assembly: same formats, same hash)

NAMESPACE = uuid.UUID("3c1e54a4-0b8f-4d52-8a61-2f4f0f6b7d21")
PAPERS = {p["pdf"]: p for p in json.loads((HERE / "papers.json").read_text())}

if __name__ == "__main__":
    assemble(sys.argv[1:], HERE, NAMESPACE, PAPERS)
