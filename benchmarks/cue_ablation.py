"""Cue ablation: what each family of wording rules is worth on dev, test and blind questions (issue M, item 1).

Usage (the dev home holds the papers of benchmarks/airqa_dev, the blind home those of
benchmarks/airqa_blind, both with figure OCR, as for eval_dev.py):
    python benchmarks/cue_ablation.py --dev-home /tmp/evalrun-home --blind-home /tmp/blindhome \\
        [--families intent_count missing_title ...] [--work /tmp/cue-ablation] \\
        [--out benchmarks/results/cue_ablation.json]   # families of earlier runs in the file are kept

For each family, the questions it can act on are those where one of its gate cues matches the text
the cue reads (:data:`GATES`; by default every cue of the family) — a family cannot change an answer
on the other questions. Those questions are answered twice with method ``auto`` and the offline
model: as shipped (one baseline run per question, shared by the families) and with the family
turned off (``neusym eval run --cues-off``), then scored with ``neusym eval score``. The result per family and
set: questions touched, right as shipped, right without the family, and the difference. A family
whose difference is positive only on dev helps only the items it was written for. Dev is where
rules were written; test and blind are only reported here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NEUSYM = str(Path(sys.executable).parent / "neusym")
SMALL = ["search_scope", "intent_count", "intent_authors", "missing_title", "intent_affiliation"]
GATES = {"intent_affiliation": ["affiliated"]}
"""Cues that decide whether a family acts at all (``authors_word`` only matters with ``affiliated``)."""


def touched(family: str, questions: list[dict]) -> list[dict]:
    """The questions one of the family's gate cues matches."""
    from neusym.query.answer.cues import CUES

    cues = [CUES[n] for n in GATES.get(family, [])] or [c for c in CUES.values() if c.family == family]
    return [q for q in questions if any(c.regex.search(q.get(c.reads) or "") for c in cues)]


def run(questions: list[dict], home: Path, work: Path, name: str, cues_off: list[str]) -> dict[str, float]:
    """Answer ``questions`` (resuming an earlier run of the same name) and score them: uuid -> score."""
    qfile, pred, score = work / f"{name}.questions.jsonl", work / f"{name}.pred.jsonl", work / f"{name}.score.json"
    qfile.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions))
    env = dict(os.environ, NEUSYM_HOME=str(home), HF_HUB_OFFLINE="1", NEUSYM_AGENT_MAX_TURNS="10")
    subprocess.run([NEUSYM, "eval", "run", str(qfile), "--method", "auto", "--out", str(pred),
                    "--cues-off", json.dumps(cues_off)], env=env, check=True, stdout=subprocess.DEVNULL)
    done = subprocess.run([NEUSYM, "eval", "score", str(qfile), str(pred), "--json"], env=env, check=True,
                          capture_output=True, text=True)
    score.write_text(done.stdout)
    return {i["uuid"]: float(i["score"] or 0.0) for i in json.loads(done.stdout)["items"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dev-home", type=Path, required=True)
    ap.add_argument("--blind-home", type=Path, required=True)
    ap.add_argument("--families", nargs="+", default=SMALL)
    ap.add_argument("--work", type=Path, default=Path("/tmp/cue-ablation"))
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "cue_ablation.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    dev_questions = [json.loads(x) for x in (REPO / "benchmarks/airqa_dev/questions.jsonl").read_text().splitlines() if x.strip()]
    splits = json.loads((REPO / "benchmarks/airqa_dev/splits.json").read_text())
    sets = {
        "dev": ([q for q in dev_questions if splits.get(q["uuid"]) == "dev"], args.dev_home),
        "test": ([q for q in dev_questions if splits.get(q["uuid"]) == "test"], args.dev_home),
        "blind": ([json.loads(x) for x in (REPO / "benchmarks/airqa_blind/questions.jsonl").read_text().splitlines()
                   if x.strip()], args.blind_home),
    }
    started = time.perf_counter()
    results: dict = {}
    for set_name, (questions, home) in sets.items():
        per_family = {f: touched(f, questions) for f in args.families}
        union = {q["uuid"]: q for qs in per_family.values() for q in qs}
        if not union:
            continue
        base = run(list(union.values()), home, args.work, f"{set_name}.baseline", [])
        for family, qs in per_family.items():
            if not qs:
                results.setdefault(family, {})[set_name] = {"touched": 0}
                continue
            off = run(qs, home, args.work, f"{set_name}.off_{family}", [family])
            shipped = sum(base[q["uuid"]] for q in qs)
            without = sum(off[q["uuid"]] for q in qs)
            results.setdefault(family, {})[set_name] = {
                "touched": len(qs), "right_as_shipped": shipped, "right_without": without,
                "family_helps_by": shipped - without,
                "changed": [{"uuid": q["uuid"], "shipped": base[q["uuid"]], "without": off[q["uuid"]]}
                            for q in qs if base[q["uuid"]] != off[q["uuid"]]]}
            print(f"{family:<20} {set_name:<5} touched {len(qs):>3}  shipped {shipped:>4.1f}  without {without:>4.1f}",
                  flush=True)
    earlier = json.loads(args.out.read_text()) if args.out.is_file() else {}
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    runs = earlier.get("runs", []) + [{"command": " ".join(["python", "benchmarks/cue_ablation.py", *sys.argv[1:]]),
                                       "commit": head.stdout.strip() or None,  # None: run from a tree copy
                                       "families": args.families, "seconds": round(time.perf_counter() - started)}]
    out = {"benchmark": "cue_ablation",
           "model": "offline Qwen2.5-Coder-1.5B Q4_K_M, temperature 0, NEUSYM_AGENT_MAX_TURNS=10",
           "runs": runs, "families": {**earlier.get("families", {}), **results}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
