"""The focused route's reader: how it answers from the context it is given (issue M).

Usage (homes as for evidence_recall.py: the dev home holds the papers of benchmarks/airqa_dev (and
so of benchmarks/airqa_tables), the blind home those of benchmarks/airqa_blind):
    python benchmarks/reader.py --splits dev[,test,tables,blind] [--readers direct[,VARIANT]] \\
        [--dev-home /tmp/cellhome] [--blind-home /tmp/blindhome] [--work /tmp/reader] \\
        [--items in-context|all] [--tags table] [--only UUIDS.json] [--out benchmarks/results/reader.json]

The questions of each split whose gold quotes all reach the focused route's context (``--items
in-context``, the default; ``all`` takes every question) are answered with method ``auto`` and the
offline model under each reader (runs resume from ``--work``) and scored with ``neusym eval score``.
Only the focused route has a reader, so the other routes' answers are the same under each. Whether
the gold evidence is in the context is ``evidence_recall.measure`` (no LLM): only on those items can
a wrong answer be blamed on the reader, so they are what a reader is measured on. A reader is named
by ``+``-joined parts of :data:`PARTS` (``direct``: the shipped reader, the answer in one call
constrained by the answer format). The first reader is the baseline; a variant is chosen on ``dev``
and goes in only if it also helps on ``test`` and ``blind``, which are reported, never tuned on.

Splits: ``dev`` / ``test`` (benchmarks/airqa_dev), ``tables`` (benchmarks/airqa_tables: 37 table
questions on the dev papers, a tuning set for table reading written before any run), ``blind``
(reported only). ``--tags table`` keeps one category; ``--only UUIDS.json`` keeps the items a
variant can change (the others get the same prompts, so the same answers). A part sets fields of the
focused route's configuration (:class:`neusym.query.answer.config.FocusedConfig`).

Measured and not adopted (their results stay; each ran at the commit named, the code is gone unless
said): ``k6`` — six fused cells for a one-paper question instead of four (part kept: it only sets
``evidence_items``; 85869fc, ``results/evidence_items_k6.json``: dev 17 -> 18 of 54, test 3 -> 3
of 14, blind 13 -> 11 of 54);
``quote`` — the reply first copies the sentence or table row that states the answer (3aa6ea6,
``results/reader_quote.json``: dev 26 -> 22 of 43); ``named`` — a list format that names its
elements ("[number of hard negatives, number of easy negatives]") asked for as a JSON object with
one key per name, and ``distinct`` — a list answer that gives one value twice is read again
(39fed9c, ``results/reader.json``: dev 26 -> 28 of 43, test 3 -> 3 of 10, blind 21 -> 20 of 69;
the re-reading fired once on dev and once on blind and changed no answer). On table questions
(``results/reader_tables.json``, tuning set ``tables``): ``records`` — each table written as one line
per row, "row: header path = value; ...", from ``table_cells`` (uncommitted, before 5c8be1f: 8 -> 8 of
37); ``quoted`` — a text excerpt that reads a stored table's body (>= 3 shared decimals) brings that
table into the evidence, and ``combined`` — the operation menu for questions with its cue, a query over
the cells for the other questions whose evidence holds a table (5c8be1f: tables 8 -> 13 of 37, but dev
11 -> 6 and blind 2 -> 3 of the 17 / 31 items it changes, median 13 -> 28 s on those: the quoted table
reached text questions and the menu's choice of table). Measured and adopted: ``chunks`` is the
reader before a chunk that reads a stored table's body gave its place to the table
(``table_from_text`` off; ``results/table_from_text.json``); ``cells`` is the table query over one
row per cell, before the wide form (one column per header path) replaced it
(``results/table_wide_form.json``: on the items whose answer went through a table query, tuning set
2 -> 4 of 10, dev 1 -> 2 of 7, test 0 -> 0 of 3, blind 0 -> 1 of 14; measured as part ``wide`` over
``direct`` at a94f837); ``chars650`` is the reader before text excerpts were cut at 900 characters
instead of 650 (measured as part ``chars900`` over ``direct`` at 5e00b0e, ``results/evidence_chars.json``:
on the items whose context changes dev 19 -> 20 of 59, test 3 -> 3 of 17, blind 25 -> 26 of 100).
Not adopted (parts kept, they only set ``table_query_gate``):
``anytable`` — a table query whenever a table is among the evidence, and ``anysoft`` — the same, its
rows evidence for the answer call rather than the answer (``results/table_query_gate.json``: tuning
set 11 -> 18 of 37 and 7 -> 11 of 22, test 1 -> 0 of 6 for both, blind 13 -> 10 and 13 -> 13 of 51). Not adopted: linking a name the SQL
compares with ``column_name`` to ``row_name`` when it is a row's name (and the reverse) — tuning set
12 -> 12 of 37, dev table items 3 -> 2 of 17 (``results/reader_tables.json``, ``swap_run``).
Not adopted: ``sketch`` — the query written as a JSON sketch whose every name is an enum of the
table's own names (select with aggregates, where, order, limit), compiled to SQL: every query ran,
but the tuning set's table-query items went 4 -> 1 of 10 (the model kept one named row whatever the
question asked; 862d5cc, ``results/table_sketch.json``).
Not adopted: ``pick`` — a single number the reader took from a stored table re-read by the row and
column the model names among that table's own names: tuning set 7 -> 9 of 19, no dev or test item
touched, blind 14 -> 14 of 53 with 6 answers changed (a computed number equal to a cell by chance;
f000d5a, ``results/table_cell_pick.json``).
Measured and adopted: ``nofront`` is the reader before a several-paper question read each paper's front
matter (page 1 up to the abstract, proceedings and copyright lines): on the 26 several-paper items
answers dev 2 -> 2 of 11, test 0 -> 0 of 3, blind 2 -> 2 of 12, while their gold quotes in context rose
(``results/front_matter.json``).
Not adopted: ``wholeq`` — the reader before each of several papers was searched with the clauses of
the question about it (the marker tokens of each paper's pages tell the clauses apart): dev contexts of
4 items changed, no quote or answer (0 -> 0 of 4); blind several-paper quotes in context 17 -> 14 of
30 (``results/paper_clauses.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from evidence_recall import measure  # noqa: E402

RUNNER = "from neusym.interfaces.cli import app; app()"
#: Reader parts: the fields of the focused route's configuration
#: (:class:`neusym.query.answer.config.FocusedConfig`) each sets, given to ``neusym eval run --focused``.
#: Parts joined by ``+`` merge their fields. A variant under measurement gets a field in the
#: configuration and a part here; one that does not go in leaves with both.
PARTS: dict[str, dict[str, object]] = {
    "direct": {},
    "chunks": {"table_from_text": False},
    "k6": {"evidence_items": 6},
    "chars650": {"evidence_chars": 650},
    "cells": {"table_form": "cells"},
    "anytable": {"table_query_gate": "any"},
    "anysoft": {"table_query_gate": "anysoft"},
    "nofront": {"front_matter": False},
}
CATEGORIES = ("text", "table", "image", "formula", "metadata")
#: split -> the question set holding it (a set without ``splits.json`` is one split of its own name).
#: ``tables`` is the table tuning set (``benchmarks/airqa_tables``: dev papers, so the dev home).
SETS = {"dev": "airqa_dev", "test": "airqa_dev", "tables": "airqa_tables", "blind": "airqa_blind"}


def answer_with(questions: list[dict], home: Path, work: Path, name: str,
                focused: dict[str, object]) -> dict[str, dict]:
    """Answer ``questions`` with method auto and the offline model in a ``neusym eval run`` process
    whose focused route is configured with the fields of ``focused`` (``--focused``; resuming a run of
    the same ``name`` in ``work``), and score them: uuid -> {"score", "answer", "seconds", "route",
    "completion_tokens"}."""
    from neusym.query.answer.config import FocusedConfig

    config = FocusedConfig(**focused).model_dump_json(exclude_defaults=True)  # a bad field fails here, not per item
    qfile, pred = work / f"{name}.questions.jsonl", work / f"{name}.pred.jsonl"
    qfile.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions))
    env = dict(os.environ, NEUSYM_HOME=str(home), HF_HUB_OFFLINE="1", NEUSYM_AGENT_MAX_TURNS="10")
    subprocess.run([sys.executable, "-c", RUNNER, "eval", "run", str(qfile), "--method", "auto",
                    "--out", str(pred), "--focused", config], env=env, check=True, stdout=subprocess.DEVNULL)
    done = subprocess.run([sys.executable, "-c", RUNNER, "eval", "score", str(qfile), str(pred), "--json"],
                          env=env, check=True, capture_output=True, text=True)
    (work / f"{name}.score.json").write_text(done.stdout)
    preds = {}
    for line in pred.read_text().splitlines():
        if line.strip():
            p = json.loads(line)
            preds[p["uuid"]] = {"answer": p.get("answer"), "seconds": p.get("seconds"), "route": p.get("route"),
                                "completion_tokens": p.get("completion_tokens")}
    return {i["uuid"]: {"score": float(i["score"] or 0.0), **preds.get(i["uuid"], {})}
            for i in json.loads(done.stdout)["items"]}


def tally(rows: list[dict], reader: str) -> dict:
    """Right answers of ``reader`` over ``rows``: overall, per category, by evidence in context."""
    def right(rs: list[dict]) -> dict:
        return {"n": len(rs), "right": round(sum(r["scores"][reader] for r in rs), 2)}

    seconds = [r["seconds"][reader] for r in rows if r["seconds"].get(reader) is not None]
    focused = [r["seconds"][reader] for r in rows if r["seconds"].get(reader) is not None and r["route"] == "focused"]
    return {"all": right(rows),
            **{c: right([r for r in rows if r["category"] == c]) for c in CATEGORIES},
            "several papers": right([r for r in rows if r["several"]]),
            "evidence in context": right([r for r in rows if r["in_context"] is True]),
            "evidence not in context": right([r for r in rows if r["in_context"] is False]),
            "no gold quote": right([r for r in rows if r["in_context"] is None]),
            "seconds_p50": round(statistics.median(seconds), 1) if seconds else None,
            "focused_seconds_p50": round(statistics.median(focused), 1) if focused else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--splits", default="dev", help="comma-separated: " + ", ".join(SETS))
    ap.add_argument("--readers", default="direct")
    ap.add_argument("--items", choices=("in-context", "all"), default="in-context")
    ap.add_argument("--tags", default="", help="comma-separated: keep only the questions carrying one of these tags")
    ap.add_argument("--only", type=Path, help="a JSON list of uuids: keep only these questions")
    ap.add_argument("--dev-home", type=Path, default=Path("/tmp/cellhome"))
    ap.add_argument("--blind-home", type=Path, default=Path("/tmp/blindhome"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/reader"))
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "reader.json")
    args = ap.parse_args()
    from neusym.settings import Settings

    readers = args.readers.split(",")
    unknown = {p for r in readers for p in r.split("+")} - set(PARTS)
    if unknown:
        ap.error(f"unknown reader part(s) {sorted(unknown)}: the parts are {sorted(PARTS)}")
    bad_splits = set(args.splits.split(",")) - set(SETS)
    if bad_splits:
        ap.error(f"unknown split(s) {sorted(bad_splits)}: the splits are {sorted(SETS)}")
    try:
        only = set(json.loads(args.only.read_text())) if args.only else None
    except (OSError, ValueError, TypeError) as exc:
        ap.error(f"--only {args.only}: not a readable JSON list of uuids ({exc})")
    args.work.mkdir(parents=True, exist_ok=True)
    out = json.loads(args.out.read_text()) if args.out.is_file() else {"benchmark": "reader", "splits": {}}
    out.update(command=" ".join(["python", "benchmarks/reader.py"] + sys.argv[1:]), baseline=readers[0])
    for split in args.splits.split(","):
        set_dir = REPO / "benchmarks" / SETS[split]
        home = args.blind_home if split == "blind" else args.dev_home
        splits_file = set_dir / "splits.json"
        splits = json.loads(splits_file.read_text()) if splits_file.is_file() else {}
        questions = [json.loads(line) for line in (set_dir / "questions.jsonl").read_text().splitlines()
                     if line.strip()]
        questions = [q for q in questions if splits.get(q["uuid"], split) == split
                     and "retrieval" not in q.get("tags", [])]
        if args.tags:
            questions = [q for q in questions if set(args.tags.split(",")) & set(q.get("tags", []))]
        if only is not None:
            questions = [q for q in questions if q["uuid"] in only]
        started = time.perf_counter()
        recall = {r["uuid"]: r for r in measure(set_dir, Settings(home=home))}
        if args.items == "in-context":
            questions = [q for q in questions if recall.get(q["uuid"], {}).get("context") is True]
        if not questions:  # nothing to answer (e.g. --only names no item of this split)
            print(f"{split}: no question to answer", file=sys.stderr)
            continue
        scores = {reader: answer_with(questions, home, args.work, f"{split}-{reader}",
                                      {k: v for part in reader.split("+") for k, v in PARTS[part].items()}) for reader in readers}
        rows = []
        for q in questions:
            tags = q.get("tags", [])
            rows.append({"uuid": q["uuid"], "category": next((t for t in tags if t in CATEGORIES), "?"),
                         "several": "multiple" in tags,
                         "in_context": recall[q["uuid"]]["context"] if q["uuid"] in recall else None,
                         "route": scores[readers[0]][q["uuid"]].get("route"),
                         "scores": {r: scores[r][q["uuid"]]["score"] for r in readers},
                         "answers": {r: scores[r][q["uuid"]].get("answer") for r in readers},
                         "seconds": {r: scores[r][q["uuid"]].get("seconds") for r in readers}})
        entry = {"command": out["command"], "home": str(home), "items": len(rows), "selection": args.items,
                 "tags": args.tags or None, "only": str(args.only) if args.only else None, "readers": {r: tally(rows, r) for r in readers},
                 "changed": [r for r in rows if len(set(r["scores"].values())) > 1],
                 "seconds": round(time.perf_counter() - started, 1)}
        out["splits"][split] = entry
        print(split, json.dumps(entry["readers"], indent=1), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
