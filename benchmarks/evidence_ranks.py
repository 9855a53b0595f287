"""Where the gold evidence ranks in the focused route's fused list, and how much of it a context of k
excerpts (plus a table / figure / formula slot) would hold — retrieval only, no LLM (issue M, item 3).

Usage (the corpus of the set published in $NEUSYM_HOME, as for evidence_recall.py):
    NEUSYM_HOME=/tmp/evalrun-home python benchmarks/evidence_ranks.py [--set benchmarks/airqa_dev] [--split dev]

For every single-paper item of the split with gold quotes, the papers' cells are ranked as
:func:`neusym.query.answer.focused.focused_evidence` ranks them, with 20 hits per retrieval list; an item
counts for a variant when every quote is in one of the chosen cells (``evidence_recall.found_in``).
Prints the share of items per variant and the mean characters the chosen cells take (chunks cut at
``FocusedConfig.evidence_chars``,
tables/figures at ``element_evidence_chars``, as the reader's context cuts them). The result of the table-slot
variant, with the answers it gave, is benchmarks/results/table_slot_dev.json. Report the test split;
never tune on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from evidence_recall import found_in  # noqa: E402

VARIANTS = [("top", 4, {}), ("top", 6, {}), ("top", 8, {}), ("slots", 3, {"tables": 1}), ("slots", 4, {"tables": 1}),
            ("slots", 4, {"tables": 1, "images": 1}), ("slots", 4, {"tables": 1, "images": 1, "equations": 1})]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", type=Path, default=REPO / "benchmarks" / "airqa_dev")
    ap.add_argument("--split", default="dev", help="dev / test of splits.json, or all (sets without splits)")
    args = ap.parse_args()

    from neusym.evaluation.runner import PaperResolver, load_questions
    from neusym.query.answer import focused as auto
    from neusym.query.answer.config import FocusedConfig, using
    from neusym.query.agent.actions import Environment
    from neusym.query.answer.router import question_facts
    from neusym.settings import Settings

    questions = load_questions(args.set / "questions.jsonl")
    evidence = {json.loads(line)["uuid"]: json.loads(line)
                for line in (args.set / "evidence.jsonl").read_text().splitlines() if line.strip()}
    splits_file = args.set / "splits.json"
    splits = json.loads(splits_file.read_text()) if splits_file.is_file() else {}
    config = FocusedConfig(list_hits=20)
    items = []
    with Environment(Settings()) as env, using(config):
        resolver = PaperResolver(env)
        for q in questions:
            quotes = [e["quote"] for e in (evidence.get(q.uuid) or {}).get("evidence", []) if e.get("quote")]
            kind = next((t for t in q.tags if t in ("single", "multiple", "retrieval")), "")
            if splits.get(q.uuid, "all") != args.split or not quotes or kind != "single":
                continue
            ids = resolver.resolve(q)
            facts = question_facts(q.question, paper_ids=ids or None, answer_format=q.answer_format, env=env)
            cells = auto.focused_evidence(q.question, facts.papers, env, modality=facts.features.get("modality") or [],
                                          k=60)
            items.append(([c["table_name"] for c in cells], [len(c.get("text") or "") for c in cells],
                          [[found_in(quote, c.get("text") or "") for c in cells] for quote in quotes]))
    print(f"{len(items)} single-paper items of {args.set.name} / {args.split}")
    for kind, k, per in VARIANTS:
        found = chars = 0
        for types, lengths, hits in items:
            chosen = list(range(min(k, len(types))))
            for table, n in per.items():
                chosen += [i for i, t in enumerate(types) if t == table and i not in chosen][:n]
            found += all(any(h[i] for i in chosen) for h in hits)
            chars += sum(min(lengths[i], config.evidence_chars if types[i] == "chunks" else config.element_evidence_chars)
                         for i in chosen)
        label = f"top {k}" + "".join(f" + {n} {t}" for t, n in per.items())
        print(f"{label:<40} evidence in context {found / len(items):.3f}   mean chars {chars // len(items)}")


if __name__ == "__main__":
    main()
