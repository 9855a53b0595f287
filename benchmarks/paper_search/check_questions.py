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

``--hard`` adds the rule of the ``hard-2026`` set (``questions_hard.jsonl``, README.md) for every checked
line: content words are the lowercase alphanumeric tokens of two or more characters minus ``STOPWORDS``
and (for the question) ``SCAFFOLD``, each reduced by ``stem``; the question has 12-30 tokens, shares
at most ``HARD_MAX_SHARED`` (3) content words with the paper's title + abstract and none of the title's
distinctive content words (title content words not in ``GENERIC_TITLE``). It also prints the shared
words per question and their mean, and (with ``--draw``) checks the hard set against its own draw
(seed 424242, 80 papers; split by ``random.Random(11)`` over the sorted qids, first 40 test).

Exit status 1 if any check fails (each failure names its qid), else 0.

Usage: ``python benchmarks/paper_search/check_questions.py [FILE] [--set NAME] [--draw] [--hard] [--corpus-dir DIR]``
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

from neusym.ingest.sources.acl_source import parse_acl_collection  # noqa: E402

CORPUS_2_5K = ["2024.acl.xml", "2024.findings.xml"]
FIELDS = ("qid", "question", "anthology_id", "title", "split")
NGRAM = 4

# The draw of the researcher-2026 set (README.md).
DRAW_SET = "researcher-2026"
DRAW_SEED = 20261124
DRAW_N = 70
DRAW_MIN_ABSTRACT = 300

# The draw and rule of the hard-2026 set (README.md, questions_hard.jsonl).
HARD_SET = "hard-2026"
HARD_SEED = 424242
HARD_N = 80
HARD_SPLIT_SEED = 11
HARD_N_TEST = 40
HARD_MAX_SHARED = 3
HARD_MIN_WORDS, HARD_MAX_WORDS = 12, 30

def _words(text: str) -> list[str]:
    return text.split()


#: A standard English stopword list (NLTK's, plus a few clitic pieces and abbreviations).
STOPWORDS = frozenset(_words("""
a about above after again against ain all am an and any are aren arent as at be because been before
being below between both but by can cannot could couldn d did didn do does doesn doing don down during
each eg etc few for from further had hadn has hasn have haven having he her here hers herself him
himself his how i ie if in into is isn it its itself just ll m ma me might mightn more most must
mustn my myself needn no nor not now o of off on once only or other our ours ourselves out over own
re s same shall shan she should shouldn so some such t than that the their theirs them themselves
then there these they this those through to too under until up ve very vs was wasn we were weren
what when where which while who whom why will with won would wouldn y you your yours yourself
yourselves also may us
"""))

#: Words that phrase the request rather than its content ("Is there a paper that shows ...").
SCAFFOLD = frozenset(_words("""
paper papers work works study studies research article articles publication publications anyone
someone somebody looking look find found propose proposed proposes proposing show shows showed
shown showing introduce introduced introduces introducing present presented presents describe
described describes report reported reports publish published exist exists existing know known
aware recent recently first earlier prior way ways something anything whether
"""))

#: Title words too generic to identify a paper; every other title content word is "distinctive".
GENERIC_TITLE = frozenset(_words("""
language languages model models modeling modelling llm llms lm lms large learning neural text
texts benchmark benchmarks benchmarking dataset datasets data evaluation evaluating evaluate via
using use towards toward multilingual approach approaches method methods framework frameworks task
tasks based improving improve improved enhancing enhance enhanced analysis analyzing novel new deep
network networks pretrained pre trained training natural processing nlp understanding investigating
assessing beyond better simple
"""))


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


_EXCEPTIONS = frozenset(_words("bias alias atlas canvas news series species lens gas"))
#: (suffix, replacement), tried in order; a suffix is removed only if 3+ (second pass: 4+) characters remain.
_SUFFIXES = (
    ("izations", ""), ("isations", ""), ("ization", ""), ("isation", ""), ("ational", ""),
    ("ations", ""), ("ation", ""), ("ative", ""), ("ators", ""), ("ator", ""), ("ors", ""), ("or", ""),
    ("ingly", ""), ("edly", ""), ("ities", ""), ("ity", ""), ("ments", ""), ("ment", ""), ("ness", ""),
    ("ency", ""), ("ence", ""), ("ance", ""), ("ent", ""), ("ant", ""), ("ings", ""), ("ing", ""),
    ("ions", ""), ("ion", ""), ("ize", ""), ("ise", ""), ("ate", ""), ("ive", ""), ("ers", ""),
    ("er", ""), ("ied", "y"), ("ies", "y"), ("ed", ""), ("es", ""), ("ly", ""), ("al", ""),
    ("s", ""),
)


def stem(word: str) -> str:
    """A deliberately simple suffix stripper (at most two passes): "models"/"modeling"/"modelled" ->
    "model", "translation"/"translating"/"translate" -> "transl", "biases"/"bias" -> "bias",
    "Vietnamese" -> "vietnam". It over-merges rather than under-merges (more shared words, so the
    hard rule errs on the strict side)."""
    if len(word) <= 3 or word.isdigit():
        return word
    for keep in (3, 4):  # a second pass ("generations" -> "generation" -> "gener") keeps 4+ characters
        if word in _EXCEPTIONS:
            break
        before = word
        for suf, rep in _SUFFIXES:
            if word.endswith(suf) and len(word) - len(suf) >= keep:
                if suf == "s" and word.endswith(("ss", "us", "is")):
                    continue
                word = word[: -len(suf)] + rep
                break
        if word.endswith("at") and len(word) > 5:  # "translat(ing)" -> "transl", as "translation"
            word = word[:-2]
        if len(word) > 4 and word[-1] == word[-2] and word[-1] not in "aeiou":  # modell -> model
            word = word[:-1]
        if len(word) > 3 and word[-1] in "ey":
            word = word[:-1]
        if word == before:
            break
    return word


def content_words(text: str, *, question: bool = False) -> set[str]:
    """Stemmed content words: tokens of 2+ characters, minus stopwords (and, for a question, the
    request scaffolding)."""
    drop = STOPWORDS | SCAFFOLD if question else STOPWORDS
    return {stem(t) for t in tokens(text) if len(t) > 1 and t not in drop}


_GENERIC_STEMS = frozenset(stem(w) for w in GENERIC_TITLE)


def hard_overlap(question: str, title: str, abstract: str) -> tuple[set[str], set[str]]:
    """(content words the question shares with title + abstract, distinctive title words among them)."""
    q = content_words(question, question=True)
    shared = q & content_words(f"{title}\n{abstract}")
    distinctive = content_words(title) - _GENERIC_STEMS
    return shared, shared & distinctive


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


def hard_draw(papers: dict) -> list[str]:
    """Anthology ids drawn for the hard-2026 set: eligible as for :func:`draw`, minus every gold paper of
    questions.jsonl (all sets) and questions_detailed.jsonl; ``random.Random(424242).sample(pool, 80)``.
    Drawn when questions.jsonl held q000-q269 (190 lines; 2,263 eligible papers): adding gold papers
    there later changes the pool, so this check then reports a mismatch."""
    gold = set()
    for name in ("questions.jsonl", "questions_detailed.jsonl"):
        if (HERE / name).exists():
            gold |= {q["anthology_id"] for q in load_jsonl(HERE / name)}
    pool = [p for p in papers.values()
            if p.abstract and len(p.abstract) > DRAW_MIN_ABSTRACT and p.volume != "tutorials"
            and p.anthology_id not in gold]
    return [p.anthology_id for p in random.Random(HARD_SEED).sample(pool, HARD_N)]


def hard_split(qids: list[str]) -> dict[str, str]:
    """qid -> split of the hard set: ``random.Random(11)`` shuffles the sorted qids, first 40 test."""
    order = sorted(qids)
    random.Random(HARD_SPLIT_SEED).shuffle(order)
    return {qid: ("test" if i < HARD_N_TEST else "dev") for i, qid in enumerate(order)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", nargs="?", type=Path, default=HERE / "questions.jsonl")
    ap.add_argument("--set", dest="only_set", help="check only lines whose 'set' field equals this")
    ap.add_argument("--draw", action="store_true", help=f"print the {DRAW_SET} draw and compare it with the file")
    ap.add_argument("--hard", action="store_true",
                    help=f"also apply the {HARD_SET} rule (<= {HARD_MAX_SHARED} shared content words, no distinctive title word)")
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
    hard_shared: dict[str, set[str]] = {}
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
        if args.hard:
            n_words = len(tokens(q["question"]))
            if not HARD_MIN_WORDS <= n_words <= HARD_MAX_WORDS:
                failures.append(f"{qid}: {n_words} words, not {HARD_MIN_WORDS}-{HARD_MAX_WORDS}")
            shared, in_title = hard_overlap(q["question"], paper.title, paper.abstract or "")
            hard_shared[qid] = shared
            if len(shared) > HARD_MAX_SHARED:
                failures.append(f"{qid}: shares {len(shared)} content words with title/abstract "
                                f"(max {HARD_MAX_SHARED}): {', '.join(sorted(shared))}")
            if in_title:
                failures.append(f"{qid}: uses distinctive title word(s): {', '.join(sorted(in_title))}")
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

    if args.draw and any(q.get("set") == HARD_SET for q in questions):
        drawn = hard_draw(papers)
        in_file = [q["anthology_id"] for q in questions if q.get("set") == HARD_SET]
        print(f"{HARD_SET} draw (seed {HARD_SEED}, {HARD_N} of the eligible papers):")
        for aid in drawn:
            print(f"  {aid}  {papers[aid].title}")
        if sorted(in_file) != sorted(drawn):
            failures.append(f"{HARD_SET}: gold papers in the file differ from the draw "
                            f"({len(set(in_file) - set(drawn))} not drawn, {len(set(drawn) - set(in_file))} drawn but missing)")
        hard_qs = [q for q in questions if q.get("set") == HARD_SET]
        expected = hard_split([q["qid"] for q in hard_qs])
        wrong = [q["qid"] for q in hard_qs if q.get("split") != expected[q["qid"]]]
        if wrong:
            failures.append(f"{HARD_SET}: split differs from random.Random({HARD_SPLIT_SEED}) for {', '.join(wrong)}")

    if args.hard and hard_shared:
        print("shared content words (question vs title + abstract):")
        for qid, shared in hard_shared.items():
            print(f"  {qid}: {len(shared)}  {' '.join(sorted(shared))}")
        mean = sum(len(s) for s in hard_shared.values()) / len(hard_shared)
        print(f"mean shared content words per question: {mean:.2f} (max allowed {HARD_MAX_SHARED})")

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
