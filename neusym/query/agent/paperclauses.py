"""Which part of a question about several papers is about which paper (issue M, several papers).

A question that compares or joins papers usually asks one thing of each: "What overall recall@1 does
Contriever reach in PopQA's analysis ..., and what recall@3 does DPR reach ... in LongEval?". The
focused route searches each paper on its own (:func:`neusym.query.agent.auto.focused_evidence`);
searched with the whole question, a paper's excerpts are also ranked by the words of the clause about
the *other* paper. :func:`paper_queries` gives each paper the clauses about it instead.

- Clauses: the question split at sentence ends, semicolons and a comma before "and", "while",
  "whereas" or "but" (:func:`clauses`).
- A token (the cell BM25 analyzer's stemmed tokens, :func:`neusym.encode.bm25_tokens`) *marks* a
  paper when it occurs at least :data:`MARKER_MIN_COUNT` times in that paper's pages and, per token
  of text, at least :data:`MARKER_RATIO` times as often as in each other paper's pages: a paper's own
  names ("popqa", "longev") and the vocabulary only it uses.
- A clause is about the paper whose markers it holds most, a marker in the paper's title counting
  :data:`TITLE_MARKER_WEIGHT` times (a tie: about no paper).
- A paper's query: the clauses about it and the clauses about no paper, in the question's order. A
  paper no clause is about keeps the whole question, and so does every paper when no clause is about
  exactly one paper — nothing is dropped from a question whose parts cannot be told apart.

No LLM and no word list of questions: the papers' own text decides. Data: the ``pages`` table of the
corpus version the environment reads.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from neusym.encode import bm25_tokens

#: A token marks a paper when it is at least this many times as frequent there (per token of text)
#: as in every other paper of the question.
MARKER_RATIO = 4.0
#: ... and occurs at least this many times in that paper's pages.
MARKER_MIN_COUNT = 3
#: A marker that is also a token of its paper's title (the paper's name: "pasa", "s2orc") counts this
#: many times in a clause's vote.
TITLE_MARKER_WEIGHT = 3

_SPLIT = re.compile(r"(?<=[.?!;])\s+(?=\S)|,\s+(?=(?:and|while|whereas|but)\s)", re.I)


def clauses(question: str) -> list[str]:
    """``question`` split into clauses (see the module docstring), each stripped, none empty:
    "A did x, and what does B do?" -> ["A did x", "and what does B do?"]."""
    return [part.strip() for part in _SPLIT.split(question or "") if part and part.strip()]


def paper_token_counts(paper_ids: list[str], env: Any) -> dict[str, Counter]:
    """paper id -> Counter of the BM25 tokens of its pages (``pages.page_content``); a paper
    without parsed pages maps to an empty Counter. Raises what ``env.query`` raises (duckdb.Error)."""
    counts: dict[str, Counter] = {pid: Counter() for pid in paper_ids}
    if not paper_ids:
        return counts
    rows = env.query(
        "SELECT ref_paper_id::VARCHAR, page_content FROM pages WHERE ref_paper_id::VARCHAR IN "
        f"({', '.join('?' for _ in paper_ids)})", list(paper_ids))
    for pid, text in rows:
        counts[pid].update(bm25_tokens(text or ""))
    return counts


def markers(counts: dict[str, Counter]) -> dict[str, str]:
    """token -> the paper id it marks (module docstring), from :func:`paper_token_counts`."""
    sizes = {pid: max(1, sum(c.values())) for pid, c in counts.items()}
    out: dict[str, str] = {}
    for pid, c in counts.items():
        others = [q for q in counts if q != pid]
        for token, n in c.items():
            if n < MARKER_MIN_COUNT:
                continue
            rate = n / sizes[pid]
            if all(rate >= MARKER_RATIO * counts[q].get(token, 0) / sizes[q] for q in others):
                out[token] = pid
    return out


def paper_queries(question: str, papers: list[tuple[str, str]], env: Any) -> dict[str, str]:
    """paper id -> the text to search that paper with, for a question about ``papers`` ((paper id,
    title) pairs, two or more; the corpus's pages tell them apart, see the module docstring). Every
    paper is present; a paper gets ``question`` itself when its part cannot be told apart. Raises what
    ``env.query`` raises (duckdb.Error)."""
    paper_ids = [pid for pid, _ in papers]
    whole = {pid: question for pid in paper_ids}
    parts = clauses(question)
    if len(paper_ids) < 2 or len(parts) < 2:
        return whole
    marked = markers(paper_token_counts(paper_ids, env))
    titled = {pid: set(bm25_tokens(title or "")) for pid, title in papers}
    about: list[str | None] = []
    for part in parts:
        votes: Counter = Counter()
        for token in set(bm25_tokens(part)):
            if token in marked:
                pid = marked[token]
                votes[pid] += TITLE_MARKER_WEIGHT if token in titled[pid] else 1
        ranked = votes.most_common(2)
        if ranked and (len(ranked) == 1 or ranked[0][1] > ranked[1][1]):
            about.append(ranked[0][0])
        else:
            about.append(None)
    if not any(a is not None for a in about):
        return whole
    out = {}
    for pid in paper_ids:
        mine = [part for part, a in zip(parts, about) if a in (pid, None)]
        out[pid] = question if pid not in about or len(mine) == len(parts) else " ".join(mine)
    return out
