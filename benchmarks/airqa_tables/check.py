"""Check the table tuning set's drafts: the blind set's checks (``../airqa_blind/check_drafts.py``:
fields, evaluator, gold scores 1 and near miss 0, every quote verbatim on its page of the PDF in
``/work/shared/corpus/pdfs``) against this set's papers (``papers.json``: the dev set's papers).

Usage:
    .venv/bin/python benchmarks/airqa_tables/check.py benchmarks/airqa_tables/drafts/tables1.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "airqa_blind"))

import check_drafts  # noqa: E402

PAPERS = {p["pdf"]: p for p in json.loads((HERE / "papers.json").read_text())}

if __name__ == "__main__":
    sys.exit(check_drafts.main(sys.argv[1:], PAPERS))
