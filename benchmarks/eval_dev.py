"""Reproduce the dev-set table: `neusym eval run` per method, then `neusym eval score`, one summary JSON.

Usage (after `neusym ingest samples/pdfs` into $NEUSYM_HOME)::

    NEUSYM_HOME=/tmp/evalrun-home HF_HUB_OFFLINE=1 NEUSYM_AGENT_MAX_TURNS=10 nice -n 10 \
        python benchmarks/eval_dev.py --methods neusym classic-rag iterative-neu iterative-sym --stride 4

``--stride N`` keeps every N-th question of the file (lines 1, 1+N, ...), a fixed subset that still
spans every paper, category and task type; it is written to ``<out-dir>/questions.stride<N>.jsonl``
and used for the runs. ``--limit K`` instead keeps the first K questions.

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
    parser.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results" / "airqa_dev")
    parser.add_argument("--summary", type=Path, default=REPO / "benchmarks" / "results" / "airqa_dev.json")
    parser.add_argument("--score-only", action="store_true", help="Do not run; score the existing predictions.")
    args = parser.parse_args(argv)

    from neusym.evaluation.runner import load_questions
    from neusym.evaluation.scoring import make_judge, score_predictions
    from neusym.settings import Settings

    settings = Settings()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.stride is not None:
        if args.stride < 1:
            parser.error("--stride must be at least 1")
        lines = [ln for ln in args.questions.read_text(encoding="utf-8").splitlines() if ln.strip()]
        subset = args.out_dir / f"questions.stride{args.stride}.jsonl"
        subset.write_text("".join(ln + "\n" for ln in lines[:: args.stride]), encoding="utf-8")
        args.questions = subset
    questions = load_questions(args.questions)
    if args.limit is not None:
        questions = questions[: args.limit]
    if not args.score_only:
        for method in args.methods:
            pred = args.out_dir / f"{method}.pred.jsonl"
            command = [sys.executable, "-m", "neusym.cli", "eval", "run", str(args.questions), "--method", method,
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


if __name__ == "__main__":
    sys.exit(main())
