"""The in-corpus citation graph: each parsed bibliography entry (``reference`` row) linked to the corpus
paper it names, when the corpus holds that paper.

Resolution of one reference, in this order (the first that finds a paper wins):

1. ``title``: the reference text (:func:`neusym.ids.normalize_title`) contains a corpus paper's whole
   title in the crawl's comparison form (:func:`neusym.ingest.sources.base.title_key`: LaTeX math as
   text, accents folded, lower case, punctuation as spaces), at word boundaries; titles shorter than
   :data:`MIN_TITLE_WORDS` words or :data:`MIN_TITLE_CHARS` characters are not matched this way
   (too generic: "Attention", "BERT"). When several titles occur, the longest wins, and a longer
   title found by step 3 wins over a shorter one found whole (a line-end hyphen broke the longer one).
2. ``doi`` / ``arxiv`` / ``anthology``: an identifier printed in the reference (a DOI, an arXiv id
   ``2305.14314``, an ACL Anthology id ``2024.acl-long.1`` or ``N18-3011``) that a corpus paper has
   (from ``provenance``, ``metadata.download_url`` or its stored BibTeX).
3. ``fuzzy``: the best partial alignment of a corpus title inside the reference text
   (``rapidfuzz.fuzz.partial_ratio`` on normalised text, 0–100) at least :data:`FUZZY_THRESHOLD`,
   (the longest such title wins), among titles sharing at least :data:`FUZZY_MIN_SHARED` of their rare words with the reference
   (candidate generation by an inverted index of title words), and a publication year within one
   year of a year printed in the reference when both are known. The threshold was chosen by
   measurement on the hand-checked references of ``benchmarks/citations`` (see its README).

A paper never cites itself. Links go to ``citation_links`` (one row per resolved reference); the
views ``paper_citations`` and ``cited_by`` (``sql/views/60_citations.sql``) count and list them.

Incremental (:func:`update_citation_links`): ``citation_state`` keeps, per paper, a signature of its
references (as citing paper) and of its title and identifiers (as cited paper). A run re-resolves the
references of citing papers whose references changed, and — against the whole corpus — every other
reference in which a new or changed paper's title or identifier may occur, so a newly crawled
paper becomes the target of references stored long before it. Links of deleted papers go.
Runs inside the writer's connection (the publish step, :mod:`neusym.ingest.publish`), in one
transaction: re-running changes nothing.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from neusym.ids import normalize_title
from neusym.ingest.sources.base import normalize_doi, title_key

MIN_TITLE_WORDS = 3
MIN_TITLE_CHARS = 20
FUZZY_THRESHOLD = 85.0
"""Least ``partial_ratio`` (0–100) of a fuzzy title match, chosen on the hand-checked references of
benchmarks/citations: there the wrong fuzzy links scored at most 77.8 and the right ones at least 86.8
(``benchmarks/citations/results.json`` has the grid)."""
RESOLUTION_VERSION = 1
"""Part of every signature in ``citation_state``: bump it when these rules change, and the next publish
re-resolves every reference."""
FUZZY_MIN_SHARED = 0.75
"""Share of a title's rare words that must occur in the reference for the title to be a fuzzy candidate."""
RARE_DF = 200
"""A title word carried by more titles than this is not used to find fuzzy candidates (too common)."""
STOPWORDS = frozenset(
    "a an and are as at be by for from in into is it its of on or over the their this through to toward towards "
    "under using via vs we what when where which while with without".split())

_DOI = re.compile(r"\b(10\.\d{4,9}/[^\s,;]+)", re.I)
_ARXIV = re.compile(r"(?:arxiv[:,\s/]*(?:abs/|pdf/)?|arxiv\.org/(?:abs|pdf)/)\s*(\d{4}\.\d{4,5})", re.I)
_ANTHOLOGY = re.compile(r"\b(\d{4}\.[a-z]+-[a-z]+\.\d+|[A-Z]\d{2}-\d{4})\b")
_YEAR = re.compile(r"\b(19[5-9]\d|20\d\d)\b")
_URL_IDS = (
    ("arxiv", re.compile(r"arxiv\.org/(?:abs|pdf)/(\d{4}\.\d{4,5})", re.I)),
    ("anthology", re.compile(r"aclanthology\.org/([^/\s]+?)(?:\.pdf|/)?$", re.I)),
    ("doi", re.compile(r"doi\.org/(10\.\d{4,9}/\S+)", re.I)),
)
_BIB_DOI = re.compile(r"\bdoi\s*=\s*[{\"]\s*(10\.[^}\"]+?)\s*[}\"]", re.I)
_BIB_URL = re.compile(r"\burl\s*=\s*[{\"]\s*([^}\"]+?)\s*[}\"]", re.I)


def _clean_id(kind: str, value: str) -> str:
    if kind == "doi":
        value = (normalize_doi(value) or "").rstrip(").")
    return value.strip().rstrip(".").lower()


def reference_ids(text: str) -> list[tuple[str, str]]:
    """Identifiers printed in a reference: ``[(kind, id)]`` with kind ``doi``, ``arxiv`` or ``anthology``,
    ids lower case (Anthology ids keep their case-insensitive form lower-cased)."""
    out: list[tuple[str, str]] = []
    for kind, pattern in (("doi", _DOI), ("arxiv", _ARXIV), ("anthology", _ANTHOLOGY)):
        for m in pattern.finditer(text or ""):
            out.append((kind, _clean_id(kind, m.group(1))))
    return out


@dataclass
class Target:
    """A corpus paper as a possible cited paper."""

    paper_id: str
    title: str
    tokens: tuple[str, ...]
    year: int | None
    ids: set[tuple[str, str]] = field(default_factory=set)

    @property
    def title_matchable(self) -> bool:
        return len(self.tokens) >= MIN_TITLE_WORDS and len(" ".join(self.tokens)) >= MIN_TITLE_CHARS


@dataclass
class Link:
    """One resolved reference: ``reference_id`` of ``citing_paper_id`` names ``cited_paper_id``."""

    citing_paper_id: str
    cited_paper_id: str
    reference_id: str
    method: str
    score: float


class Resolver:
    """Resolves reference texts against a set of :class:`Target` papers (see the module docstring).

    Build once per run: an index of title word sequences (first two words → titles), of identifiers,
    and of rare title words for fuzzy candidates. ``resolve`` is pure: the same text and targets give
    the same link.
    """

    def __init__(self, targets: Iterable[Target], *, fuzzy_threshold: float = FUZZY_THRESHOLD):
        self.targets = {t.paper_id: t for t in targets}
        self.fuzzy_threshold = fuzzy_threshold
        self._by_bigram: dict[tuple[str, str], list[Target]] = defaultdict(list)
        self._by_id: dict[tuple[str, str], list[Target]] = defaultdict(list)
        df: dict[str, int] = defaultdict(int)
        for t in self.targets.values():
            if t.title_matchable:
                self._by_bigram[(t.tokens[0], t.tokens[1])].append(t)
            for key in t.ids:
                self._by_id[key].append(t)
            for w in set(t.tokens):
                if w not in STOPWORDS:
                    df[w] += 1
        self._rare: dict[str, list[Target]] = defaultdict(list)
        self._rare_count: dict[str, int] = {}
        for t in self.targets.values():
            rare = {w for w in t.tokens if w not in STOPWORDS and df[w] <= RARE_DF and len(w) > 1}
            self._rare_count[t.paper_id] = len(rare)
            for w in rare:
                self._rare[w].append(t)

    def resolve(self, text: str, citing_paper_id: str | None = None) -> tuple[str, str, float] | None:
        """``(cited_paper_id, method, score)`` for one reference text, or None. ``score`` is 100 for a
        title or identifier match, the ``partial_ratio`` for a fuzzy one."""
        norm = normalize_title(text or "")
        tokens = norm.split()
        best: Target | None = None
        for i in range(len(tokens) - 1):
            for t in self._by_bigram.get((tokens[i], tokens[i + 1]), ()):
                n = len(t.tokens)
                if (t.paper_id != citing_paper_id and tuple(tokens[i:i + n]) == t.tokens
                        and (best is None or n > len(best.tokens))):
                    best = t
        if best is not None:
            # a longer title broken by a line-end hyphen ("open-do main") can hide behind a shorter one it starts with
            longer = self._fuzzy(norm, set(tokens), citing_paper_id, text)
            if longer is not None and len(self.targets[longer[0]].tokens) > len(best.tokens):
                return longer
            return best.paper_id, "title", 100.0
        for kind, value in reference_ids(text):
            for t in self._by_id.get((kind, value), ()):
                if t.paper_id != citing_paper_id:
                    return t.paper_id, kind, 100.0
        return self._fuzzy(norm, set(tokens), citing_paper_id, text)

    def _fuzzy(self, norm: str, words: set[str], citing: str | None, text: str) -> tuple[str, str, float] | None:
        from rapidfuzz import fuzz

        shared: dict[str, int] = defaultdict(int)
        for w in words:
            for t in self._rare.get(w, ()):
                shared[t.paper_id] += 1
        years = {int(y) for y in _YEAR.findall(text)}
        best: tuple[float, int, str] | None = None
        for pid, n in shared.items():
            need = self._rare_count[pid]
            if pid == citing or need < 2 or n < FUZZY_MIN_SHARED * need:
                continue
            t = self.targets[pid]
            if len(t.tokens) < MIN_TITLE_WORDS:
                continue
            if years and t.year is not None and not any(abs(y - t.year) <= 1 for y in years):
                continue
            score = fuzz.partial_ratio(" ".join(t.tokens), norm)
            if score >= self.fuzzy_threshold and (best is None or (len(t.tokens), score) > best[:2]):
                best = (len(t.tokens), score, pid)  # the longest title aligned wins: the most specific
        if best is None:
            return None
        return best[2], "fuzzy", round(best[1], 2)


# ------------------------------------------------------------------------------------- the database side
_TARGETS_SQL = """
SELECT m.paper_id::VARCHAR, m.title, m.pub_year, m.download_url, m.bibtex,
       list(DISTINCT p.arxiv_id) FILTER (WHERE p.arxiv_id IS NOT NULL),
       list(DISTINCT p.anthology_id) FILTER (WHERE p.anthology_id IS NOT NULL),
       list(DISTINCT p.doi) FILTER (WHERE p.doi IS NOT NULL)
FROM metadata m LEFT JOIN provenance p ON p.ref_paper_id = m.paper_id
GROUP BY ALL
"""


def _target_of(row: tuple) -> tuple[Target, str]:
    pid, title, year, url, bibtex, arxiv, anthology, doi = row
    ids: set[tuple[str, str]] = set()
    ids.update(("arxiv", _clean_id("arxiv", a)) for a in arxiv or ())
    ids.update(("anthology", _clean_id("anthology", a)) for a in anthology or ())
    ids.update(("doi", _clean_id("doi", d)) for d in doi or ())
    urls = [url] if url else []
    if bibtex:
        ids.update(("doi", _clean_id("doi", d)) for d in _BIB_DOI.findall(bibtex))
        urls += _BIB_URL.findall(bibtex)
    for u in urls:
        for kind, pattern in _URL_IDS:
            m = pattern.search(u.strip())
            if m:
                ids.add((kind, _clean_id(kind, m.group(1))))
    tokens = tuple(title_key(title or "").split())
    signature = "|".join([f"v{RESOLUTION_VERSION}", " ".join(tokens), str(year or ""),
                          *sorted(f"{k}:{v}" for k, v in ids)])
    return Target(pid, title, tokens, int(year) if year else None, ids), signature


@dataclass
class CitationReport:
    """What one :func:`update_citation_links` run did."""

    references: int = 0
    citing_changed: int = 0
    targets_changed: int = 0
    rechecked: int = 0
    links_added: int = 0
    links_removed: int = 0
    links: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return dict(vars(self))


def _bulk(con: Any, sql: str, columns: dict[str, list]) -> None:
    """Run ``sql`` with ``{rows}`` bound to an Arrow table of ``columns`` (one statement, not one per row)."""
    import pyarrow as pa

    name = "_citation_rows"
    con.register(name, pa.table(columns))
    try:
        con.execute(sql.format(rows=name))
    finally:
        con.unregister(name)


def update_citation_links(con: Any, *, full: bool = False) -> CitationReport:
    """Bring ``citation_links`` up to date with the writer's ``metadata``, ``provenance`` and
    ``reference`` tables (``con``: the writer's DuckDB connection, schema already applied).

    ``full``: re-resolve every reference (after a change of this module's rules). Otherwise only what
    changed since the last run (see the module docstring). One transaction; raises duckdb.Error
    after rolling back. Returns a :class:`CitationReport`.
    """
    t0 = time.perf_counter()
    report = CitationReport()
    targets: dict[str, Target] = {}
    target_sig: dict[str, str] = {}
    for row in con.execute(_TARGETS_SQL).fetchall():
        t, sig = _target_of(row)
        targets[t.paper_id], target_sig[t.paper_id] = t, sig
    citing_sig = {pid: f"v{RESOLUTION_VERSION}:{sig}" for pid, sig in con.execute(
        "SELECT ref_paper_id::VARCHAR, md5(string_agg(reference_id::VARCHAR || ':' || reference_content, '|' "
        "ORDER BY reference_id)) FROM reference GROUP BY ref_paper_id").fetchall()}
    state = {pid: (ts, cs) for pid, ts, cs in con.execute(
        "SELECT paper_id::VARCHAR, target_signature, references_signature FROM citation_state").fetchall()}
    if full:
        state = {}
    gone = [pid for pid in state if pid not in targets]
    new_targets = [pid for pid, sig in target_sig.items() if state.get(pid, (None, None))[0] != sig]
    changed_citing = [pid for pid in targets if state.get(pid, (None, None))[1] != citing_sig.get(pid)]
    report.citing_changed, report.targets_changed = len(changed_citing), len(new_targets)
    resolver = Resolver(targets.values())
    links: list[Link] = []
    citing_set = set(changed_citing)
    if changed_citing:
        rows = con.execute(
            "SELECT reference_id::VARCHAR, ref_paper_id::VARCHAR, reference_content FROM reference "
            "WHERE ref_paper_id::VARCHAR IN (SELECT unnest(?))", [changed_citing]).fetchall()
        report.references += len(rows)
        for rid, citing, text in rows:
            hit = resolver.resolve(text, citing)
            if hit:
                links.append(Link(citing, hit[0], rid, hit[1], hit[2]))
    recheck: list[tuple[str, str, str]] = []
    moved = set(new_targets) | set(gone)
    if moved and citing_sig.keys() - citing_set:  # stored references may name a paper that arrived or left
        probe = Resolver([targets[p] for p in new_targets if p in targets])
        rows = con.execute(
            "SELECT r.reference_id::VARCHAR, r.ref_paper_id::VARCHAR, r.reference_content, l.cited_paper_id::VARCHAR "
            "FROM reference r LEFT JOIN citation_links l ON l.reference_id = r.reference_id "
            "WHERE r.ref_paper_id::VARCHAR NOT IN (SELECT unnest(?))", [changed_citing]).fetchall()
        for rid, citing, text, cited in rows:
            if (cited is not None and cited in moved) or (probe.targets and probe.resolve(text, citing)):
                recheck.append((rid, citing, text))
    report.rechecked = len(recheck)
    for rid, citing, text in recheck:
        hit = resolver.resolve(text, citing)
        if hit:
            links.append(Link(citing, hit[0], rid, hit[1], hit[2]))
    before = con.execute("SELECT count(*) FROM citation_links").fetchone()[0]
    con.execute("BEGIN TRANSACTION")
    try:
        touched = [rid for rid, _, _ in recheck]
        if full:
            con.execute("DELETE FROM citation_links")
        con.execute("DELETE FROM citation_links WHERE citing_paper_id::VARCHAR IN (SELECT unnest(?)) "
                    "OR reference_id::VARCHAR IN (SELECT unnest(?)) OR cited_paper_id::VARCHAR IN (SELECT unnest(?)) "
                    "OR citing_paper_id::VARCHAR IN (SELECT unnest(?))",
                    [changed_citing, touched, gone, gone])
        removed = before - con.execute("SELECT count(*) FROM citation_links").fetchone()[0]
        if links:
            _bulk(con, "INSERT OR REPLACE INTO citation_links SELECT citing::UUID, cited::UUID, reference::UUID, "
                       "method, score FROM {rows}",
                  {"citing": [lk.citing_paper_id for lk in links], "cited": [lk.cited_paper_id for lk in links],
                   "reference": [lk.reference_id for lk in links], "method": [lk.method for lk in links],
                   "score": [float(lk.score) for lk in links]})
        con.execute("DELETE FROM citation_state WHERE paper_id::VARCHAR NOT IN (SELECT paper_id::VARCHAR FROM metadata)")
        stale = [pid for pid in targets if full or state.get(pid) != (target_sig[pid], citing_sig.get(pid))]
        if stale:
            _bulk(con, "INSERT OR REPLACE INTO citation_state SELECT paper_id::UUID, target, refs FROM {rows}",
                  {"paper_id": stale, "target": [target_sig[p] for p in stale],
                   "refs": [citing_sig.get(p) for p in stale]})
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    after = con.execute("SELECT count(*) FROM citation_links").fetchone()[0]
    report.links_removed = removed
    report.links_added = after - (before - removed)
    report.links = after
    report.seconds = round(time.perf_counter() - t0, 3)
    return report
