"""Table questions: the SQL path (the model writes one query over the table's cells), on the table
items of a question set, with the offline model. The operation menu it was compared with is gone
(its results at 35eecbd stay in ``results/table_answer_*.json`` under mode ``operations``; the
setting that chose it is gone).

For each mode (now only ``sql``, kept as the results' key) it runs ``neusym eval run --method auto`` on the objective items
tagged ``table`` (of the dev or test split of ``splits.json`` when the set has one) and scores them
with ``neusym eval score``; the summary holds, per mode, the accuracy, the items right, the median
and p95 seconds, the mean LLM calls, how many answers came straight from a query's rows and how many
queries failed. Runs resume (``eval run`` skips answered uuids), so an interrupted run can be repeated.

    NEUSYM_HOME=... python benchmarks/table_answer.py --questions benchmarks/airqa_dev/questions.jsonl \
        --split dev --out-dir /tmp/table-answer-dev --summary benchmarks/results/table_answer_dev.json

The corpus in ``$NEUSYM_HOME`` must hold the papers of the set (see ``benchmarks/eval_dev.py`` and
``benchmarks/airqa_blind/README.md``). The blind set (``benchmarks/airqa_blind``) is only reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

MODES = ("sql",)


def table_items(questions: Path, split: str) -> list[dict]:
    items = [json.loads(line) for line in questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    splits_file = questions.parent / "splits.json"
    if split != "all":
        splits = json.loads(splits_file.read_text(encoding="utf-8"))
        items = [q for q in items if splits.get(q["uuid"]) == split]
    return [q for q in items if "table" in q.get("tags", []) and "objective" in q.get("tags", [])]


def _percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p * (len(values) - 1))))] if values else 0.0


def summarize(preds: Path, scores: dict) -> dict:
    rows = [json.loads(line) for line in preds.read_text(encoding="utf-8").splitlines() if line.strip()]
    seconds = [r.get("seconds") or 0.0 for r in rows]
    sql_steps = [s for r in rows for s in r.get("trajectory") or [] if s.get("action") == "RetrieveFromDatabase"
                 and "table_id" in (s.get("arguments") or {})]
    direct = sum(1 for r in rows if (r.get("trajectory") or []) and (r["trajectory"][-1].get("action") ==
                 "RetrieveFromDatabase") and "table_id" in (r["trajectory"][-1].get("arguments") or {}))
    right = [i["uuid"] for i in scores.get("items", []) if i.get("score") == 1]
    return {
        "items": len(rows), "accuracy": scores.get("overall"), "right": len(right), "right_uuids": sorted(right),
        "median_s": round(statistics.median(seconds), 1) if seconds else None,
        "p95_s": round(_percentile(seconds, 0.95), 1), "mean_llm_calls": round(statistics.mean(
            [r.get("turns") or 0 for r in rows]), 2) if rows else None,
        "table_queries": len(sql_steps),
        "table_queries_failed": sum(1 for s in sql_steps if str(s.get("observation", "")).startswith("(query failed")),
        "answered_by_query_rows": direct,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--split", choices=("all", "dev", "test"), default="all")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--summary", type=Path)
    args = ap.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    items = table_items(args.questions, args.split)
    subset = args.out_dir / "questions.tables.jsonl"
    subset.write_text("".join(json.dumps(q) + "\n" for q in items), encoding="utf-8")
    cli = [sys.executable, "-m", "neusym.interfaces.cli"]
    summary = {"questions": str(args.questions), "split": args.split, "items": len(items), "modes": {}}
    for mode in args.modes:
        preds = args.out_dir / f"{mode}.pred.jsonl"
        env = dict(os.environ)
        subprocess.run([*cli, "eval", "run", str(subset), "--method", "auto", "--out", str(preds)], env=env, check=True)
        out = subprocess.run([*cli, "eval", "score", str(subset), str(preds), "--json"], env=env, check=True,
                             capture_output=True, text=True).stdout
        summary["modes"][mode] = summarize(preds, json.loads(out))
        print(mode, json.dumps({k: v for k, v in summary["modes"][mode].items() if k != "right_uuids"}))
    if args.summary:
        args.summary.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
