"""Reproduce the dev-set table: `neusym eval run` per method, then `neusym eval score`, one summary JSON.

Usage (after `neusym ingest samples/pdfs` into $NEUSYM_HOME)::

    NEUSYM_HOME=/tmp/evalrun-home HF_HUB_OFFLINE=1 NEUSYM_AGENT_MAX_TURNS=10 nice -n 10 \
        python benchmarks/eval_dev.py --methods neusym classic-rag iterative-neu iterative-sym --stride 4

``--split dev|test|original`` keeps the dev or the held-out test split of ``splits.json`` (the test
split is only ever reported, never used to tune), or the 36 original items (lines 1-36, all dev).
``--stride N`` keeps every N-th question of that (lines 1, 1+N, ...). The subset is written to
``<out-dir>/questions.<name>.jsonl`` and used for the runs. ``--limit K`` keeps the first K questions.

The corpus must hold the PDFs the questions are about: ``samples/pdfs``, ``benchmarks/airqa_dev/pdfs``
and, for items marked ``pdf_source: shared``, TableFormer and PaSa from ``../shared/corpus/pdfs``.

Each method runs in its own `neusym eval run` process (so the offline model's prompt cache holds that
method's system prompt across questions) and writes ``<out-dir>/<method>.pred.jsonl``; runs resume, so
an interrupted invocation can simply be repeated. Scoring runs in this process with the configured
judge (the offline model by default, temperature 0, cached verdicts in ``$NEUSYM_HOME/judge_cache``).
The summary (``--summary``) holds, per method, the accuracy overall and per tag, the questions per
tag, mean turns / tokens / seconds per question and the error counts, plus the run settings.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=Path, default=REPO / "benchmarks" / "airqa_dev" / "questions.jsonl")
    parser.add_argument("--methods", nargs="+", default=["neusym", "classic-rag", "iterative-neu", "iterative-sym"])
    parser.add_argument("--limit", type=int, default=None, help="Only the first K questions (same K for every method).")
    parser.add_argument("--stride", type=int, default=None, help="Only every N-th question (lines 1, 1+N, ...).")
    parser.add_argument("--split", choices=("all", "dev", "test", "original"), default="all",
                        help="dev / test split of splits.json, or the 36 original items.")
    parser.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results" / "airqa_dev")
    parser.add_argument("--summary", type=Path, default=REPO / "benchmarks" / "results" / "airqa_dev.json")
    parser.add_argument("--score-only", action="store_true", help="Do not run; score the existing predictions.")
    args = parser.parse_args(argv)

    from neusym.evaluation.runner import load_questions
    from neusym.evaluation.scoring import make_judge, score_predictions
    from neusym.settings import Settings

    settings = Settings()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.stride is not None or args.split != "all":
        if args.stride is not None and args.stride < 1:
            parser.error("--stride must be at least 1")
        lines = [ln for ln in args.questions.read_text(encoding="utf-8").splitlines() if ln.strip()]
        if args.split == "original":
            lines = lines[:36]
        elif args.split in ("dev", "test"):
            splits = json.loads((args.questions.parent / "splits.json").read_text(encoding="utf-8"))
            lines = [ln for ln in lines if splits[json.loads(ln)["uuid"]] == args.split]
        name = args.split + (f".stride{args.stride}" if args.stride else "")
        subset = args.out_dir / f"questions.{name}.jsonl"
        subset.write_text("".join(ln + "\n" for ln in lines[:: args.stride or 1]), encoding="utf-8")
        args.questions = subset
    questions = load_questions(args.questions)
    if args.limit is not None:
        questions = questions[: args.limit]
    if not args.score_only:
        for method in args.methods:
            pred = args.out_dir / f"{method}.pred.jsonl"
            command = [sys.executable, "-m", "neusym.interfaces.cli", "eval", "run", str(args.questions), "--method", method,
                       "--out", str(pred)] + (["--limit", str(args.limit)] if args.limit is not None else [])
            print("$", " ".join(command[2:]), flush=True)
            subprocess.run(command, check=True)

    judge = None

    def judge_factory():
        nonlocal judge
        if judge is None:
            judge = make_judge(settings)
        return judge

    methods = {}
    for method in args.methods:
        pred = args.out_dir / f"{method}.pred.jsonl"
        report = score_predictions(questions, pred, judge=judge, judge_factory=judge_factory)
        methods[method] = report.summary() | {"predictions": str(pred.relative_to(REPO)) if pred.is_relative_to(REPO) else str(pred)}
        methods[method].update(_route_stats(pred, questions, report))
        print(f"{method:24s} overall {100 * report.overall:5.1f}%  turns {report.means['turns']}  "
              f"s/question {report.means['seconds']}", flush=True)
    summary = {
        "questions": str(args.questions.relative_to(REPO)) if args.questions.is_relative_to(REPO) else str(args.questions),
        "n_questions": len(questions),
        "limit": args.limit,
        "stride": args.stride,
        "llm": settings.llm_base_url or "offline Qwen2.5-Coder-1.5B-Instruct Q4_K_M (xllamacpp)",
        "judge": settings.llm_base_url or "offline Qwen2.5-Coder-1.5B-Instruct Q4_K_M, temperature 0",
        "agent_max_turns": settings.agent_max_turns,
        "observation_max_tokens": settings.observation_max_tokens,
        "eval_context_max_tokens": settings.eval_context_max_tokens,
        "llm_context_tokens": settings.llm_context_tokens,
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, llm_threads={settings.llm_threads}",
        "methods": methods,
    }
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"summary written to {args.summary}")
    return 0


def _route_stats(pred: Path, questions: list, report) -> dict:
    """Median seconds per question, and per route (method auto): share of questions, accuracy,
    median seconds, LLM calls; plus the verification statuses."""
    import statistics

    wanted = {q.uuid for q in questions}
    lines = {}
    for line in pred.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            if rec["uuid"] in wanted:
                lines[rec["uuid"]] = rec
    scores = {i.uuid: i.score for i in report.items}
    secs = [r["seconds"] for r in lines.values() if r.get("seconds") is not None]
    out: dict = {"median_seconds": round(statistics.median(secs), 1) if secs else None}
    routes: dict = {}
    for uid, rec in lines.items():
        route = rec.get("route")
        if route is None:
            continue
        routes.setdefault(route, []).append((scores.get(uid, 0.0), rec["seconds"], rec["turns"]))
    if routes:
        n = sum(len(v) for v in routes.values())
        out["routes"] = {r: {"share": round(len(v) / n, 3), "n": len(v), "accuracy": round(sum(x[0] for x in v) / len(v), 3),
                             "median_seconds": round(statistics.median(x[1] for x in v), 1),
                             "max_seconds": round(max(x[1] for x in v), 1),
                             "mean_llm_calls": round(sum(x[2] for x in v) / len(v), 2)} for r, v in sorted(routes.items())}
        status: dict = {}
        for rec in lines.values():
            st = (rec.get("verification") or {}).get("status", "-")
            status[st] = status.get(st, 0) + 1
        out["verification"] = status
    out["timings"] = phase_stats(lines.values())
    return out


def phase_stats(records) -> dict:
    """Where the answers' seconds went (``timings`` of each prediction, :mod:`neusym.telemetry`): per phase
    the median and mean seconds over all answers and its share of all answer seconds, overall and per
    route; answers recorded before timings existed are left out (``answers`` counts the rest)."""
    import statistics

    def block(recs: list[dict]) -> dict:
        phases = sorted({k for r in recs for k in r["timings"]})
        total = sum(sum(r["timings"].values()) for r in recs) or 1.0
        secs = [r.get("seconds") or 0.0 for r in recs]
        return {"answers": len(recs), "median_seconds": round(statistics.median(secs), 1),
                "p95_seconds": round(sorted(secs)[min(len(secs) - 1, int(round(0.95 * (len(secs) - 1))))], 1),
                "phases": {p: {"median_s": round(statistics.median(r["timings"].get(p, 0.0) for r in recs), 2),
                               "mean_s": round(sum(r["timings"].get(p, 0.0) for r in recs) / len(recs), 2),
                               "share": round(sum(r["timings"].get(p, 0.0) for r in recs) / total, 3)} for p in phases}}

    timed = [r for r in records if r.get("timings")]
    if not timed:
        return {}
    out = block(timed)
    by_route: dict[str, list[dict]] = {}
    for r in timed:
        by_route.setdefault(r.get("route") or "-", []).append(r)
    out["routes"] = {name: block(recs) for name, recs in sorted(by_route.items())}
    return out


if __name__ == "__main__":
    sys.exit(main())
