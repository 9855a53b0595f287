"""Mechanical checks of a paper-search question file (no search method is run, no model is loaded).

For every line of the file (default ``questions.jsonl`` next to this script):
- the fields ``qid``, ``question``, ``anthology_id``, ``title``, ``split`` are present and ``split``
  is ``dev`` or ``test``; every ``qid`` is unique;
- ``anthology_id`` is a paper of the 2.5k corpus (``2024.acl.xml`` + ``2024.findings.xml``, so it is
  in the 5k corpus too) and ``title`` equals that paper's title;
- the question shares no 4-word sequence with the paper's title + abstract (tokens: lowercase
  alphanumeric words, ``[a-z0-9]+``).
A gold paper used by two questions is reported as a note, not a failure.

``--set NAME`` checks only the lines whose ``set`` field is NAME (qid uniqueness is always checked
over the whole file). ``--draw`` prints the random draw the ``researcher-2026`` questions were written
from (see README.md) and checks that set's gold papers against it.

Exit status 1 if any check fails (each failure names its qid), else 0.

Usage: ``python benchmarks/paper_search/check_questions.py [FILE] [--set NAME] [--draw] [--corpus-dir DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from neusym.sources.acl_source import parse_acl_collection  # noqa: E402

CORPUS_2_5K = ["2024.acl.xml", "2024.findings.xml"]
FIELDS = ("qid", "question", "anthology_id", "title", "split")
NGRAM = 4

# The draw of the researcher-2026 set (README.md).
DRAW_SET = "researcher-2026"
DRAW_SEED = 20261124
DRAW_N = 70
DRAW_MIN_ABSTRACT = 300


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def ngrams(toks: list[str], n: int = NGRAM) -> set[tuple[str, ...]]:
    return {tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)}


def shared_ngrams(question: str, text: str, n: int = NGRAM) -> list[str]:
    """The n-word sequences of ``question`` that also occur in ``text``, in question order."""
    other = ngrams(tokens(text), n)
    q = tokens(question)
    out: list[str] = []
    for i in range(len(q) - n + 1):
        gram = tuple(q[i:i + n])
        if gram in other and " ".join(gram) not in out:
            out.append(" ".join(gram))
    return out


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_papers(corpus_dir: Path) -> dict:
    papers = {}
    for name in CORPUS_2_5K:
        for p in parse_acl_collection(corpus_dir / name):
            papers[p.anthology_id] = p
    return papers


def draw(papers: dict, questions: list[dict]) -> list[str]:
    """Anthology ids drawn for the researcher-2026 set: papers of the 2.5k corpus in file order with an
    abstract longer than 300 characters, not tutorials, not gold of an earlier question (questions.jsonl
    outside this set, questions_detailed.jsonl); ``random.Random(20261124).sample(pool, 70)``."""
    gold = {q["anthology_id"] for q in questions if q.get("set") != DRAW_SET}
    detailed = HERE / "questions_detailed.jsonl"
    if detailed.exists():
        gold |= {q["anthology_id"] for q in load_jsonl(detailed)}
    pool = [p for p in papers.values()
            if p.abstract and len(p.abstract) > DRAW_MIN_ABSTRACT and p.volume != "tutorials"
            and p.anthology_id not in gold]
    return [p.anthology_id for p in random.Random(DRAW_SEED).sample(pool, DRAW_N)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", nargs="?", type=Path, default=HERE / "questions.jsonl")
    ap.add_argument("--set", dest="only_set", help="check only lines whose 'set' field equals this")
    ap.add_argument("--draw", action="store_true", help=f"print the {DRAW_SET} draw and compare it with the file")
    ap.add_argument("--corpus-dir", type=Path,
                    default=Path(os.environ.get("NEUSYM_ACL_CORPUS", "/work/shared/corpus/acl")))
    args = ap.parse_args(argv)

    questions = load_jsonl(args.path)
    papers = load_papers(args.corpus_dir)
    failures: list[str] = []
    notes: list[str] = []

    counts = Counter(q.get("qid") for q in questions)
    for qid, n in counts.items():
        if n > 1:
            failures.append(f"{qid}: qid used {n} times")

    checked = [q for q in questions if args.only_set is None or q.get("set") == args.only_set]
    golds = Counter(q.get("anthology_id") for q in checked)
    for q in checked:
        qid = q.get("qid", "<no qid>")
        missing = [f for f in FIELDS if not q.get(f)]
        if missing:
            failures.append(f"{qid}: missing field(s) {', '.join(missing)}")
            continue
        if q["split"] not in ("dev", "test"):
            failures.append(f"{qid}: split {q['split']!r} is not dev/test")
        paper = papers.get(q["anthology_id"])
        if paper is None:
            failures.append(f"{qid}: anthology_id {q['anthology_id']} not in the 2.5k corpus ({', '.join(CORPUS_2_5K)})")
            continue
        if paper.title != q["title"]:
            failures.append(f"{qid}: title {q['title']!r} differs from the corpus title {paper.title!r}")
        shared = shared_ngrams(q["question"], f"{paper.title}\n{paper.abstract or ''}")
        if shared:
            failures.append(f"{qid}: question shares {len(shared)} 4-word sequence(s) with title/abstract: "
                            + "; ".join(repr(s) for s in shared))
        if golds[q["anthology_id"]] > 1:
            notes.append(f"{qid}: gold {q['anthology_id']} is shared by {golds[q['anthology_id']]} questions")

    if args.draw:
        drawn = draw(papers, questions)
        print(f"{DRAW_SET} draw (seed {DRAW_SEED}, {DRAW_N} of the eligible papers):")
        for aid in drawn:
            print(f"  {aid}  {papers[aid].title}")
        in_file = [q["anthology_id"] for q in questions if q.get("set") == DRAW_SET]
        if in_file and sorted(in_file) != sorted(drawn):
            failures.append(f"{DRAW_SET}: gold papers in the file differ from the draw "
                            f"({len(set(in_file) - set(drawn))} not drawn, {len(set(drawn) - set(in_file))} drawn but missing)")

    scope = f"set {args.only_set!r}" if args.only_set else "all sets"
    splits = Counter(q.get("split") for q in checked)
    print(f"{args.path.name}: {len(questions)} questions, {len(checked)} checked ({scope}; "
          + ", ".join(f"{k} {v}" for k, v in sorted(splits.items(), key=lambda kv: str(kv[0]))) + ")")
    for n in notes:
        print(f"note: {n}")
    for f in failures:
        print(f"FAIL {f}")
    print(f"{len(failures)} failure(s)" if failures else "OK: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
