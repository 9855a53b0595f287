"""Every wording rule (neusym/query/agent/cues.py) with how many questions of the dev and the test
split and of the blind set (benchmarks/airqa_blind) it fires on: what M's measurements start from
(which rules a set of questions depends on, and which fire on the dev items only).

Usage:
    .venv/bin/python benchmarks/cue_hits.py [--out benchmarks/results/cue_hits.json]

A cue "fires" on a question when its pattern is found in the text it reads (the question, or the
answer format). Static: no model, no corpus; the counts say how often a rule could act, not whether
it helped. The test split and the blind set are only counted, never used to write or tune a rule.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUESTIONS = REPO / "benchmarks" / "airqa_dev" / "questions.jsonl"
SPLITS = REPO / "benchmarks" / "airqa_dev" / "splits.json"
BLIND = REPO / "benchmarks" / "airqa_blind" / "questions.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "cue_hits.json")
    args = ap.parse_args()
    from neusym.query.answer.cues import CUES, families

    splits = json.loads(SPLITS.read_text())
    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    by_split: dict[str, list[dict]] = {}
    for q in questions:
        by_split.setdefault(splits.get(q["uuid"], "none"), []).append(q)
    by_split["blind"] = [json.loads(line) for line in BLIND.read_text().splitlines() if line.strip()]
    rows = []
    for name, c in CUES.items():
        hits = {split: sum(1 for q in qs if c.regex.search(q.get(c.reads) or "")) for split, qs in by_split.items()}
        rows.append({"name": name, "family": c.family, "reads": c.reads, "rationale": c.rationale,
                     "hits": {s: hits.get(s, 0) for s in ("dev", "test", "blind")}})
    per_family = Counter()
    for r in rows:
        per_family[r["family"]] += 1
    out = {
        "benchmark": "cue_hits",
        "command": "python benchmarks/cue_hits.py",
        "questions": {s: len(qs) for s, qs in by_split.items()},
        "cues": len(rows),
        "families": {f: per_family[f] for f in families()},
        "never_fire_on_dev": [r["name"] for r in rows if r["hits"]["dev"] == 0],
        "fire_on_dev_only": [r["name"] for r in rows if r["hits"]["dev"] and not r["hits"]["test"]
                             and not r["hits"]["blind"]],
        "note": ("A cue that is applied to a part of the question (and_element to the text after a first count, "
                 "element_number_before to the text before a number) fires there, not on the whole question: "
                 "its whole-question count can be 0 while it acts."),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  {r['family']:<22} dev {r['hits']['dev']:>3}  test {r['hits']['test']:>3}  "
              f"blind {r['hits']['blind']:>3}")
    print(f"{len(rows)} cues in {len(per_family)} families; questions {out['questions']}")


if __name__ == "__main__":
    main()
