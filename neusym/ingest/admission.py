"""Which staged parses the materialize stage may load: never a worse copy over a better one, never a
second paper for the same work.

The single writer (:func:`neusym.ingest.materialize.materialize`) calls :func:`admit` with the staged
directories of a run before it loads anything. Each staged paper is, in order of its content
(most text first):

- **loaded** when it is new, the same file as stored (a re-parse), or a different file of a stored
  paper that keeps its content;
- **held as lower quality** when it is a different file of a stored paper (same ``paper_id``) and
  loses a large share of the stored content (:func:`quality_losses`) or only repeats its text
  (:data:`SAME_TEXT`), or when a better file of the same paper is in the same run; ``force=True``
  loads it anyway (a stored paper is replaced by a worse copy only on an explicit ``--force``);
- **held as a duplicate** when its ``paper_id`` is new but its text is the same work as a stored
  paper or another paper of the run (MinHash Jaccard of word 5-shingles ≥ :data:`SAME_WORK`): a
  copy whose title was lost, a renamed file, an arXiv version with the same text. The stored paper
  stays as it is.

Held PDFs get a ``quarantine`` row with the reason (named paper, the losses in figures) and are
evaluated again on the next run, with the same outcome for the same inputs. Text fingerprints of
loaded papers live in the ``paper_fingerprints`` table (computed from the stored chunks for papers
loaded before it existed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
from datasketch import MinHash, MinHashLSH

from neusym.ingest.staging import load_parsed_table, read_manifest, source_name

NUM_PERM = 128
"""MinHash permutations per fingerprint (Jaccard estimates within about ±0.05)."""
SHINGLE_WORDS = 5
SCHEME = "affine32"
"""datasketch permutation scheme of the stored MinHash values (part of their meaning)."""
SAME_WORK = 0.5
"""Estimated Jaccard similarity of word 5-shingles at or above which two PDFs are the same work.
Different papers, even by the same authors, share well under 0.1 (references, boilerplate)."""
SAME_TEXT = 0.98
"""A different file of a stored paper at or above this similarity, with no more text, is the same
text again (a re-saved or slightly damaged copy): the stored file is kept."""

_WORD = re.compile(r"\w+")


@dataclass
class Content:
    """How much a parse of a paper holds: row counts and characters of chunk text."""

    pages: int = 0
    chunks: int = 0
    sections: int = 0
    tables: int = 0
    chars: int = 0

    def describe(self) -> str:
        return (f"{self.pages} pages, {self.chunks} chunks, {self.sections} sections, {self.tables} tables, "
                f"{self.chars:,} characters")


@dataclass
class Held:
    """A staged PDF that is not loaded, and why."""

    pdf_sha256: str
    pdf_path: str
    paper_id: str
    reason: str


@dataclass
class Admission:
    """Outcome of :func:`admit`: the staged directories to load, the PDFs held, and the fingerprints
    (``paper_id -> (pdf_sha256, shingles, minhash values)``) to store for the loaded ones."""

    load: list[Path] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)
    fingerprints: dict[str, tuple[str, int, list[int]]] = field(default_factory=dict)


def fingerprint(text: str) -> tuple[int, MinHash]:
    """(number of distinct word 5-shingles, MinHash of them) of a paper's text (lower-cased words)."""
    words = _WORD.findall(text.lower())
    shingles = {" ".join(words[i:i + SHINGLE_WORDS]).encode() for i in range(max(1, len(words) - SHINGLE_WORDS + 1))}
    m = MinHash(num_perm=NUM_PERM, seed=1, scheme=SCHEME)
    m.update_batch(list(shingles))
    return len(shingles), m


def _minhash(values: list[int]) -> MinHash:
    return MinHash(num_perm=NUM_PERM, seed=1, scheme=SCHEME, hashvalues=np.asarray(values, dtype=np.uint64))


def quality_losses(new: Content, old: Content) -> list[str]:
    """What ``new`` loses against ``old`` (empty when it keeps the content), e.g. ``["chunks 40 → 19"]``.

    A loss: fewer pages; under 90% of the characters; under 85% of the chunks; under 75% of the
    sections (when there were 4+); tables down by 2+ or to none.
    """
    out = []
    if new.pages < old.pages:
        out.append(f"pages {old.pages} → {new.pages}")
    if old.chars and new.chars < 0.9 * old.chars:
        out.append(f"text {old.chars:,} → {new.chars:,} characters")
    if old.chunks and new.chunks < 0.85 * old.chunks:
        out.append(f"chunks {old.chunks} → {new.chunks}")
    if old.sections >= 4 and new.sections < 0.75 * old.sections:
        out.append(f"sections {old.sections} → {new.sections}")
    if old.tables and new.tables < old.tables and (old.tables - new.tables >= 2 or new.tables == 0):
        out.append(f"tables {old.tables} → {new.tables}")
    return out


def _staged_text(d: Path) -> str:
    t = load_parsed_table(d, "chunks")
    t.sort(key=lambda r: (r["page_number"] or 0, r["ordinal"] or 0))
    return "\n".join(r["text_content"] or "" for r in t)


def _stored(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, tuple[str | None, str, Content]], dict]:
    """Stored parsed papers ``paper_id -> (pdf_sha256, title, Content)`` and their fingerprints."""
    rows = con.execute("""
        WITH pg AS (SELECT ref_paper_id, count(*) AS n FROM pages GROUP BY ALL),
             ch AS (SELECT ref_paper_id, count(*) AS n, sum(length(text_content)) AS chars FROM chunks GROUP BY ALL),
             se AS (SELECT ref_paper_id, count(*) AS n FROM sections GROUP BY ALL),
             tb AS (SELECT ref_paper_id, count(*) AS n FROM tables GROUP BY ALL)
        SELECT m.paper_id::VARCHAR, m.pdf_sha256, m.title, coalesce(pg.n, 0), coalesce(ch.n, 0),
               coalesce(se.n, 0), coalesce(tb.n, 0), coalesce(ch.chars, 0)
        FROM metadata m
        LEFT JOIN pg ON pg.ref_paper_id = m.paper_id LEFT JOIN ch ON ch.ref_paper_id = m.paper_id
        LEFT JOIN se ON se.ref_paper_id = m.paper_id LEFT JOIN tb ON tb.ref_paper_id = m.paper_id
        WHERE m.pdf_sha256 IS NOT NULL""").fetchall()
    stored = {r[0]: (r[1], r[2] or "", Content(r[3], r[4], r[5], r[6], int(r[7]))) for r in rows}
    fps = {r[0]: (r[1], r[2], r[3]) for r in con.execute(
        "SELECT paper_id::VARCHAR, pdf_sha256, shingles, minhash FROM paper_fingerprints").fetchall()}
    missing = [pid for pid, (sha, _, c) in stored.items() if c.chunks and (pid not in fps or fps[pid][0] != sha)]
    for pid in missing:  # papers loaded before fingerprints existed (or by an older version)
        text = "\n".join(t for (t,) in con.execute(
            "SELECT text_content FROM chunks WHERE ref_paper_id = ?::UUID ORDER BY page_number, ordinal",
            [pid]).fetchall())
        n, m = fingerprint(text)
        fps[pid] = (stored[pid][0], n, [int(v) for v in m.hashvalues])
    return stored, fps


def admit(con: duckdb.DuckDBPyConnection, parsed_dirs: list[Path], *, force: bool = False,
          new_versions: set[str] | frozenset[str] = frozenset()) -> Admission:
    """Decide which staged parses to load (see the module docstring); reads the stored papers through
    ``con`` (the writer's connection, schema created). ``parsed_dirs``: staging directories of this
    run (:func:`neusym.ingest.staging.stage_parsed`); unreadable ones are skipped. ``force``: load a staged
    parse even when it loses content against the stored copy of its paper (duplicates of another
    paper are still held). ``new_versions``: sha256 of PDFs the crawl downloaded as a new version of
    a known paper (provenance decides those: a v2 may be shorter than v1), loaded like ``force``.
    Returns an :class:`Admission`; writes nothing. Raises
    :class:`neusym.errors.StagingError` naming a staged chunks file that cannot be read.
    """
    stored, fps = _stored(con)
    staged = []
    for d in parsed_dirs:
        m = read_manifest(d)
        if m is None:
            continue
        counts = m.get("counts", {})
        text = _staged_text(d)
        n, mh = fingerprint(text)
        content = Content(counts.get("pages", 0), counts.get("chunks", 0), counts.get("sections", 0),
                          counts.get("tables", 0), len(text) - text.count("\n"))
        staged.append((d, m, content, n, mh))
    # most content first, then stable by path: the best file of a paper is decided first
    staged.sort(key=lambda s: (-s[2].chars, -s[2].pages, str(s[1].get("source_path") or s[1].get("pdf_path")),
                               str(s[0])))
    lsh = MinHashLSH(threshold=SAME_WORK, num_perm=NUM_PERM)
    minhashes: dict[str, MinHash] = {}
    for pid, (_, _, values) in fps.items():
        if pid in stored:
            minhashes[pid] = _minhash(values)
            lsh.insert(pid, minhashes[pid])
    out = Admission()
    taken: dict[str, tuple[dict, Content]] = {}
    for d, m, content, n, mh in staged:
        pid, sha, path = m["paper_id"], m.get("pdf_sha256"), source_name(m)

        def hold(reason: str) -> None:
            out.held.append(Held(pdf_sha256=sha, pdf_path=path, paper_id=pid, reason=reason))

        if pid in taken:
            other, other_content = taken[pid]
            if other.get("pdf_sha256") == sha:
                continue  # the same bytes staged twice
            hold(f"lower quality than {source_name(other)} of the same paper in this run, which is loaded "
                 f"(this file: {content.describe()}; that file: {other_content.describe()})")
            continue
        if pid in stored and not force and sha not in new_versions:
            stored_sha, title, old = stored[pid]
            losses = quality_losses(content, old)
            if stored_sha != sha and losses:
                hold(f"lower quality than the stored version of paper {pid} ({title[:60]!r}): "
                     f"{', '.join(losses)}; the stored version is kept (--force replaces it)")
                continue
            sim = mh.jaccard(minhashes[pid]) if pid in minhashes else 0.0
            if stored_sha != sha and sim >= SAME_TEXT and content.chars <= old.chars:
                hold(f"same text as the stored version of paper {pid} ({title[:60]!r}; text similarity "
                     f"{sim:.2f}, nothing gained); the stored file is kept (--force replaces it)")
                continue
        elif pid not in stored:
            match = None
            for other_id in lsh.query(mh):
                if other_id == pid:
                    continue
                sim = mh.jaccard(minhashes[other_id])
                if sim >= SAME_WORK and (match is None or sim > match[1]):
                    match = (other_id, sim)
            if match is not None:
                other_id, sim = match
                where = (f"stored paper {other_id} ({stored[other_id][1][:60]!r})" if other_id in stored
                         else f"{source_name(taken[other_id][0])} (paper {other_id}) in this run")
                hold(f"same work as {where}: text similarity {sim:.2f}; attached to that paper, "
                     f"not added as a second one")
                continue
        taken[pid] = (m, content)
        out.load.append(d)
        out.fingerprints[pid] = (sha, n, [int(v) for v in mh.hashvalues])
        if pid not in minhashes:
            minhashes[pid] = mh
            lsh.insert(pid, mh)
    # stored papers without a stored fingerprint yet (computed above): store them too
    for pid, fp in fps.items():
        if pid in stored and pid not in out.fingerprints:
            out.fingerprints.setdefault(pid, fp)
    out.load.sort()
    return out
