"""How far a verifier's ``pass`` can be trusted: accuracy of the answers per basis and status.

Usage (predictions of ``neusym eval run`` and their scores from ``neusym eval score --json``)::

    python benchmarks/verification.py --run NAME PRED.jsonl SCORE.json [--run ...] \\
        [--out benchmarks/results/verification.json]

For every run: the answers grouped by their verification's basis (``computed``: the result of an
SQL template; ``queried``: the rows of the query the model wrote over a table; ``search``: the top
paper-search hit; ``read``: written by the language model — see :mod:`neusym.query.answer.verify`) and status (``pass`` / ``fail`` / ``unverifiable``), with how
many of them the evaluator scores right. Predictions made before answers carried a basis get the one
their route implies: ``symbolic`` is ``computed``, ``paper_search`` is ``search``, a ``focused``
answer whose only check is the re-run of a table query (its rows were the answer) is ``queried``,
every other answer is ``read``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def basis_of(pred: dict) -> str:
    """The basis of one prediction (its verification's, else the one its route implies)."""
    v = pred.get("verification") or {}
    if v.get("basis"):
        return v["basis"]
    route = pred.get("route")
    if route in ("symbolic", "missing_paper"):  # missing_paper was named symbolic before 2026-12-02
        return "computed"
    if route == "paper_search":
        return "search"
    kinds = [c.get("kind") for c in v.get("checks") or []]
    if route == "focused" and kinds == ["sql"]:
        return "queried"
    return "read"


def tally(pred_file: Path, score_file: Path) -> dict:
    """``{"n", "right", "groups": {"<basis> <status>": {"n", "right", "accuracy"}}}`` of one run."""
    scores = {i["uuid"]: float(i.get("score") or 0.0) for i in json.loads(score_file.read_text())["items"]}
    groups: dict[str, list[float]] = defaultdict(list)
    for line in pred_file.read_text().splitlines():
        if not line.strip():
            continue
        pred = json.loads(line)
        if pred["uuid"] not in scores:
            continue
        status = (pred.get("verification") or {}).get("status") or "none"
        score = scores[pred["uuid"]]
        groups[f"{basis_of(pred)} {status}"].append(score)
        groups[f"{basis_of(pred)} (all)"].append(score)
        groups[f"(all) {status}"].append(score)
        groups["(all) (all)"].append(score)
    return {key: {"n": len(v), "right": sum(v), "accuracy": round(sum(v) / len(v), 3)}
            for key, v in sorted(groups.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", nargs=3, action="append", metavar=("NAME", "PRED", "SCORE"), required=True)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "verification.json")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    for name, pred, score in args.run:
        for path in (pred, score):
            if not Path(path).is_file():
                ap.error(f"run {name}: {path} is not a file")
    out = json.loads(args.out.read_text()) if args.out.exists() else {}
    out.update({"benchmark": "verification", "command": "python benchmarks/verification.py --run NAME PRED SCORE ..."})
    if args.note:
        out["note"] = args.note
    runs = out.setdefault("runs", {})
    for name, pred, score in args.run:
        runs[name] = {"predictions": pred, "groups": tally(Path(pred), Path(score))}
        print(name)
        for key, g in runs[name]["groups"].items():
            print(f"  {key:<28} {g['right']:>5.0f} / {g['n']:<4} {g['accuracy']:.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
