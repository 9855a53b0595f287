"""Evidence first: is the gold evidence in the reader's context? Measured per item, per category and
per retrieval stage, without the LLM (issue M, item 3).

Usage (the corpus of the question set must be published in $NEUSYM_HOME, as for eval_dev.py):
    NEUSYM_HOME=/tmp/evalrun-home python benchmarks/evidence_recall.py \\
        [--set benchmarks/airqa_dev] [--out benchmarks/results/evidence_recall.json]

For every single- and several-paper item with gold quotes (``evidence.jsonl``), the papers are given
as in ``neusym eval run`` (the item's ``anchor_pdf``), the router's facts are computed, and the focused
route's context is built exactly as it is for an answer (:func:`neusym.query.answer.focused.focused_context`:
every retrieval list of ``FOCUS_VIEWS``, their reciprocal-rank fusion, the table slot, the author
block, table and figure contexts). A gold quote counts as found in a text when at least 90% of its
word tokens and every one of its numbers occur in that text (lower-cased; ligatures, hyphens and
whitespace normalised) — a table row reads differently in the parsed table than in the PDF's text
layer, so an exact substring test would miss rows that are there. An item's evidence is in context
when every quote is (all quotes are needed for its answer). Stages, for each quote:

- ``in_paper``: the quote is in the text of the item's papers (pages table): an upper bound that
  shows whether the parse kept it at all;
- ``bm25`` / ``dense``: in some hit of a BM25 / MiniLM list;
- ``fused``: in the cells the fusion keeps (before the author block and element contexts);
- ``context``: in the text the reader is shown;
- ``table`` (items whose every quote is in one stored table of their papers, None otherwise): that
  stored table is itself among the reader's evidence — what the SQL path over ``table_cells`` and
  the table operations need; a chunk holding the table's text flattened from the page is not enough.

Each row also has the route the router takes (no tie-break LLM: an open question counts as
``agent``); ``routed focused`` groups the items whose answer is read from this context (the symbolic
route answers metadata items from SQL, whatever the context holds).

The test split is only reported: nothing is tuned on it.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import unicodedata
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGES = ("in_paper", "bm25", "dense", "fused", "context")


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text or "").replace("\u00ad", "")
    text = re.sub(r"[-\u2010\u2011]\s*\n\s*", "", text)
    return " ".join(text.lower().split())


_TOKEN = re.compile(r"[a-z]+|\d+(?:\.\d+)?")


def found_in(quote: str, text: str) -> bool:
    """Whether ``quote`` is in ``text``: >= 90% of its word tokens and all of its numbers occur there."""
    q = _TOKEN.findall(_norm(quote))
    if not q:
        return False
    have = set(_TOKEN.findall(_norm(text)))
    numbers = [t for t in q if t[0].isdigit()]
    words = [t for t in q if not t[0].isdigit()]
    covered = sum(1 for t in words if t in have) / max(1, len(words))
    return covered >= 0.9 and all(n in have for n in numbers)


def measure(set_dir: Path, settings=None, focused=None) -> list[dict]:
    """One row per item of ``set_dir`` with gold quotes (single and several papers): its split,
    task, category, route, whether every quote is found at each of :data:`STAGES`, how many quotes
    are in the context, and ``context_sha`` (the first 12 hex digits of the context's SHA-256, to
    tell which items two retrieval settings give a different context). ``focused``: a
    :class:`neusym.query.answer.config.FocusedConfig` to build the contexts with (default the shipped
    one)."""
    from neusym.query.answer.config import using

    with using(focused):
        return _measure(set_dir, settings)


def _measure(set_dir: Path, settings=None) -> list[dict]:
    import hashlib

    from neusym.encode import BM25_COLLECTION, DENSE_COLLECTION
    from neusym.evaluation.runner import PaperResolver, load_questions
    from neusym.query.agent.actions import Environment
    from neusym.query.answer.focused import focused_context
    from neusym.query.answer.router import question_facts, route_question
    from neusym.settings import Settings

    settings = settings or Settings()
    questions = load_questions(set_dir / "questions.jsonl")
    evidence = {json.loads(line)["uuid"]: json.loads(line)
                for line in (set_dir / "evidence.jsonl").read_text().splitlines() if line.strip()}
    splits_file = set_dir / "splits.json"
    splits = json.loads(splits_file.read_text()) if splits_file.is_file() else {}
    rows = []
    with Environment(settings) as env:
        resolver = PaperResolver(env)
        for q in questions:
            ev = evidence.get(q.uuid) or {}
            quotes = [e["quote"] for e in ev.get("evidence", []) if e.get("quote")]
            kind = next((t for t in q.tags if t in ("single", "multiple", "retrieval")), "")
            if not quotes or kind == "retrieval":
                continue
            paper_ids = resolver.resolve(q)
            facts = question_facts(q.question, paper_ids=paper_ids or None, answer_format=q.answer_format, env=env)
            route = route_question(q.question, paper_ids=paper_ids or None, answer_format=q.answer_format, env=env,
                                   facts=facts).route
            trace: list = []
            cells, context = focused_context(q.question, facts.papers, facts.features, env, trace=trace)
            pages = "\n".join(t for pid in paper_ids for (t,) in env.query(
                "SELECT page_content FROM pages WHERE ref_paper_id = ?::UUID ORDER BY page_number", [pid]))
            texts = {
                "in_paper": pages,
                "bm25": "\n".join(h["text"] for t in trace if t["collection"] == BM25_COLLECTION for h in t["hits"]),
                "dense": "\n".join(h["text"] for t in trace if t["collection"] == DENSE_COLLECTION for h in t["hits"]),
                "fused": "\n".join(c.get("text", "") for c in cells),
                "context": context,
            }
            found = {stage: [found_in(quote, texts[stage]) for quote in quotes] for stage in STAGES}
            stored = env.query(
                "SELECT table_id::VARCHAR, table_content FROM tables WHERE ref_paper_id::VARCHAR IN "
                f"({', '.join('?' for _ in paper_ids)}) ORDER BY page_number", list(paper_ids)) if paper_ids else []
            gold_tables = [tid for tid, content in stored if all(found_in(quote, content or "") for quote in quotes)]
            in_evidence = {str(c.get("primary_key")) for c in cells if c.get("table_name") == "tables"}
            table = (any(t in in_evidence for t in gold_tables) if gold_tables else None)
            category = next((t for t in q.tags if t in ("text", "table", "image", "formula", "metadata")), "?")
            rows.append({"uuid": q.uuid, "split": splits.get(q.uuid, "all"), "task": kind, "category": category,
                         "route": route,
                         "quotes": len(quotes), **{stage: all(v) for stage, v in found.items()},
                         "quotes_in_context": sum(found["context"]), "table": table,
                         "context_sha": hashlib.sha256(context.encode()).hexdigest()[:12]})
    return rows


def _table_stage(rows: list[dict]) -> dict:
    """``table_items``: items whose quotes lie in one stored table; ``table``: the share of them whose
    table is among the reader's evidence."""
    held = [r["table"] for r in rows if r.get("table") is not None]
    return {"table_items": len(held), "table": round(sum(held) / len(held), 3) if held else None}


def summarize(rows: list[dict]) -> dict:
    """Share of items whose every quote is found, per stage, per split and group (all, each category,
    several papers, routed focused)."""
    summary: dict = {}
    for split in sorted({r["split"] for r in rows}):
        groups: dict[str, list] = defaultdict(list)
        for r in rows:
            if r["split"] == split:
                groups["all"].append(r)
                groups[r["category"]].append(r)
                if r["task"] == "multiple":
                    groups["several papers"].append(r)
                if r["route"] == "focused":
                    groups["routed focused"].append(r)
        summary[split] = {g: {"n": len(rs), **{s: round(sum(r[s] for r in rs) / len(rs), 3) for s in STAGES},
                              **_table_stage(rs)}
                          for g, rs in sorted(groups.items())}
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", type=Path, default=REPO / "benchmarks" / "airqa_dev",
                    help="a question set folder: questions.jsonl, evidence.jsonl, splits.json (optional)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "evidence_recall.json")
    args = ap.parse_args()

    from neusym.settings import Settings

    settings = Settings()
    started = time.perf_counter()
    rows = measure(args.set, settings)
    summary = summarize(rows)
    out = {"benchmark": "evidence_recall", "command": f"python benchmarks/evidence_recall.py --set {args.set.name}",
           "set": str(args.set.relative_to(REPO)) if args.set.is_relative_to(REPO) else str(args.set),
           "corpus": str(settings.home), "items": len(rows), "seconds": round(time.perf_counter() - started, 1),
           "summary": summary, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for split, groups in summary.items():
        for g, v in groups.items():
            print(f"{split:<5} {g:<15} n={v['n']:<3} " + " ".join(f"{s} {v[s]:.2f}" for s in STAGES)
                  + (f" table {v['table']:.2f} of {v['table_items']}" if v["table_items"] else ""))


if __name__ == "__main__":
    main()
