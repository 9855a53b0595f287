"""Fusion of the focused route's retrieval lists: the dense lists' weight against BM25 (issue M, item 3).

Usage (homes as for evidence_recall.py: the dev home holds the papers of benchmarks/airqa_dev, the
blind home those of benchmarks/airqa_blind):
    python benchmarks/evidence_fusion.py --dev-home /tmp/cellhome --blind-home /tmp/blindhome \\
        [--weights 1.0,0.5] [--answer] [--work /tmp/evidence-fusion] \\
        [--out benchmarks/results/evidence_fusion.json]

For each weight of the MiniLM lists (``FocusedConfig.dense_list_weight``, :mod:`neusym.query.answer.config`; the first is
the baseline), the evidence recall of every item with gold quotes (``evidence_recall.measure``: is
each quote in the reader's context, per stage) on dev, test and blind. With ``--answer``, the items
whose context differs between the baseline and a weight are answered with method ``auto`` and the
offline model under both (``neusym eval run --focused`` with that weight; ``neusym eval
score``): a retrieval change can only move the answers of those items. The weight was chosen on dev
from recall alone; test and blind are only reported.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from evidence_recall import STAGES, measure, summarize  # noqa: E402
from reader import answer_with  # noqa: E402


def recall(set_dir: Path, home: Path, weight: float) -> list[dict]:
    """``evidence_recall.measure`` of ``set_dir`` on ``home`` with the dense lists weighted ``weight``."""
    from neusym.query.answer.config import FocusedConfig
    from neusym.settings import Settings

    return measure(set_dir, Settings(home=home), FocusedConfig(dense_list_weight=weight))


def answer(questions: list[dict], home: Path, work: Path, name: str, weight: float) -> dict[str, float]:
    """Answer ``questions`` with method auto under ``weight`` (resuming a run of the same name), score
    them: uuid -> score."""
    done = answer_with(questions, home, work, name, {"dense_list_weight": weight})
    return {uuid: item["score"] for uuid, item in done.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dev-home", type=Path, required=True)
    ap.add_argument("--blind-home", type=Path, required=True)
    ap.add_argument("--weights", default="1.0,0.5")
    ap.add_argument("--answer", action="store_true", help="answer the items whose context changed (offline LLM)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/evidence-fusion"))
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "evidence_fusion.json")
    args = ap.parse_args()
    weights = [float(w) for w in args.weights.split(",")]
    args.work.mkdir(parents=True, exist_ok=True)
    sets = {"airqa_dev": (REPO / "benchmarks" / "airqa_dev", args.dev_home),
            "airqa_blind": (REPO / "benchmarks" / "airqa_blind", args.blind_home)}
    out: dict = {"benchmark": "evidence_fusion", "command": " ".join(["python", "benchmarks/evidence_fusion.py"]
                                                                      + sys.argv[1:]),
                 "baseline_weight": weights[0], "weights": weights, "stages": list(STAGES), "sets": {}}
    started = time.perf_counter()
    for set_name, (set_dir, home) in sets.items():
        questions = {json.loads(line)["uuid"]: json.loads(line)
                     for line in (set_dir / "questions.jsonl").read_text().splitlines() if line.strip()}
        runs = {w: recall(set_dir, home, w) for w in weights}
        entry: dict = {"home": str(home), "recall": {str(w): summarize(rows) for w, rows in runs.items()}}
        base = {r["uuid"]: r for r in runs[weights[0]]}
        for w in weights[1:]:
            changed = [r for r in runs[w] if r["context_sha"] != base[r["uuid"]]["context_sha"]]
            item: dict = {"changed_items": len(changed),
                          "changed_by_split": {s: sum(1 for r in changed if r["split"] == s)
                                               for s in sorted({r["split"] for r in changed})}}
            if args.answer and changed:
                qs = [questions[r["uuid"]] for r in changed]
                before = answer(qs, home, args.work, f"{set_name}-w{weights[0]}", weights[0])
                after = answer(qs, home, args.work, f"{set_name}-w{w}", w)
                per_split: dict = {}
                for r in changed:
                    d = per_split.setdefault(r["split"], {"n": 0, "right_before": 0.0, "right_after": 0.0,
                                                          "context_recall_before": 0, "context_recall_after": 0})
                    d["n"] += 1
                    d["right_before"] += before.get(r["uuid"], 0.0)
                    d["right_after"] += after.get(r["uuid"], 0.0)
                    d["context_recall_before"] += int(base[r["uuid"]]["context"])
                    d["context_recall_after"] += int(r["context"])
                item["answers_on_changed"] = per_split
                item["rows"] = [{"uuid": r["uuid"], "split": r["split"], "category": r["category"],
                                 "context_before": base[r["uuid"]]["context"], "context_after": r["context"],
                                 "score_before": before.get(r["uuid"]), "score_after": after.get(r["uuid"])}
                                for r in changed]
            entry[f"vs_{w}"] = item
        out["sets"][set_name] = entry
        print(json.dumps({k: v for k, v in entry.items() if k != "recall"}, indent=1)[:3000], flush=True)
    out["seconds"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
