"""The common shape of a paper record from any metadata source, and how records of one work merge.

- :class:`SourcePaper` is what every source client returns (arXiv, OpenReview, ACL Anthology).
- :class:`SourceError` is raised for a bad response or record, naming source, record and reason.
- Watermarks: every ``fetch_*`` function takes ``since`` (a UTC datetime or None) and returns
  ``(papers, new_watermark)``; ``new_watermark`` is the largest submitted/updated datetime seen (or
  ``since`` when nothing newer came back). The caller persists it only after its database commit, so
  a failed run re-fetches the same window and loses nothing.
- Bad records: given an ``errors`` list, every ``fetch_*`` function skips a record it cannot map
  (missing title, malformed field), appends a :class:`SourceError` with ``record_id`` set, and goes
  on with the rest. The watermark then never passes a skipped record (:func:`watermark_before_skipped`),
  so the next run asks for it again.
- Dedup: :func:`dedup_keys` lists a record's identity keys (DOI, arXiv id, Anthology id, OpenReview
  forum id, normalized title + first-author surname); :func:`merge_sources` groups records of the same
  work; :func:`merged_metadata` turns one group into ``metadata`` column values, the venue record
  (ACL, accepted OpenReview) winning for venue fields over arXiv.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime, timezone
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from neusym.errors import NeusymError
from neusym.ids import normalize_title

SourceName = str
"""A source's name: a key of :data:`neusym.ingest.sources.registry.SOURCES` (arxiv, openreview, acl)."""
#: A watermark is the UTC datetime of the newest record already committed (None = never fetched).
Watermark = datetime | None

ANTHOLOGY_DOI_PREFIX = "10.18653/v1/"
ARXIV_DOI_PREFIX = "10.48550/arxiv."


class SourceError(NeusymError):
    """A bad response or record from a metadata source.

    Attributes: ``source`` ("arxiv" | "openreview" | "acl"), ``record`` (the query, id, file or URL
    concerned), ``reason`` (what went wrong), ``partial`` (papers already fetched before the failure:
    safe to upsert, but the watermark must NOT be advanced from them), ``record_id`` (set only for
    one bad record among good ones: its source id, e.g. ``2024.acl-long.5``, or where it sits when it
    has no id; None for a failure of a whole file, query or venue), ``updated`` (the bad record's
    watermark date when it could still be read, else None).
    """

    def __init__(self, source: str, record: str, reason: str, partial: list[SourcePaper] | None = None, *,
                 record_id: str | None = None, updated: datetime | None = None):
        self.source = source
        self.record = record
        self.reason = reason
        self.partial: list[SourcePaper] = list(partial or [])
        self.record_id = record_id
        self.updated = updated
        super().__init__(f"{source} {record}: {reason}")


class SourcePaper(BaseModel):
    """One paper record as one source describes it (one arXiv id, one OpenReview forum, one Anthology id).

    ``external_id`` is the source's own id without version (arXiv ``2305.14314``, OpenReview forum
    ``odjMSBSWRt``, Anthology ``2024.acl-long.1``); ``version`` is the arXiv version (``v2``) else None.
    Datetimes are timezone-aware UTC. ``volume`` uses the ``metadata.volume`` vocabulary (long, short,
    main, findings, demo, srw, tutorials, industry; oral/spotlight/poster for OpenReview).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    source: SourceName
    external_id: str = Field(min_length=1)
    version: str | None = None
    title: str = Field(min_length=1)
    authors: list[str] = Field(default_factory=list)
    abstract: str | None = None
    pub_year: int | None = None
    published: datetime | None = None
    updated: datetime | None = None
    conference_full: str | None = None
    conference_abbreviation: str | None = None
    volume: str | None = None
    booktitle: str | None = None
    pages: str | None = None
    doi: str | None = None
    bibkey: str | None = None
    bibtex: str | None = None
    pdf_url: str | None = None
    arxiv_id: str | None = None
    openreview_id: str | None = None
    anthology_id: str | None = None
    decision: str | None = None
    categories: list[str] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)

    @field_validator("title")
    @classmethod
    def _clean_title(cls, value: str) -> str:
        value = " ".join(value.split())
        if not value:
            raise ValueError("empty title")
        return value

    @field_validator("published", "updated")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)

    @field_validator("doi")
    @classmethod
    def _clean_doi(cls, value: str | None) -> str | None:
        return normalize_doi(value)

    @property
    def label(self) -> str:
        """``source:external_id[version]``, e.g. ``arxiv:2305.14314v2`` (for logs and errors)."""
        return f"{self.source}:{self.external_id}{self.version or ''}"

    @property
    def is_venue_record(self) -> bool:
        """True for a record of a published venue: an ACL Anthology paper or an accepted OpenReview paper."""
        return self.source == "acl" or (self.source == "openreview" and self.conference_abbreviation is not None)

    def provenance(self) -> dict[str, Any]:
        """One provenance row: which source knows this paper under which external ids.

        Keys: source, external_id, version, arxiv_id, openreview_id, anthology_id, doi, pdf_url, updated.
        """
        return {
            "source": self.source,
            "external_id": self.external_id,
            "version": self.version,
            "arxiv_id": self.arxiv_id,
            "openreview_id": self.openreview_id,
            "anthology_id": self.anthology_id,
            "doi": self.doi,
            "pdf_url": self.pdf_url,
            "updated": self.updated,
        }


# -- watermarks ------------------------------------------------------------------------------------


def advance_watermark(current: Watermark, candidate: datetime | None) -> Watermark:
    """The later of two watermarks (None counts as "never"); both UTC-aware datetimes or None."""
    if candidate is None:
        return current
    if candidate.tzinfo is None:
        candidate = candidate.replace(tzinfo=timezone.utc)
    if current is None or candidate > current:
        return candidate
    return current


def watermark_before_skipped(since: Watermark, loaded: Iterable[datetime | None],
                             skipped: Iterable[datetime | None]) -> Watermark:
    """The new watermark of a fetch that loaded records dated ``loaded`` and skipped bad records dated ``skipped``.

    Rule: the watermark never passes a skipped record, so the next run (which asks only for records
    newer than the watermark) fetches it again, e.g. once the source has fixed it:

    - skipped records dated at or before ``since`` are outside this run's window and do not count;
    - if a counted skipped record has no readable date, the watermark stays at ``since``;
    - otherwise it is the latest loaded date strictly before the earliest counted skipped date
      (``since`` when there is none). Loaded records at or after that date are fetched again next
      time, which is harmless: loading is an idempotent upsert.

    Without skipped records this is simply the latest of ``since`` and ``loaded``. Dates are UTC.
    """
    def utc(value: datetime) -> datetime:
        return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)

    since = utc(since) if since is not None else None
    counted = [d if d is None else utc(d) for d in skipped]
    counted = [d for d in counted if d is None or since is None or d > since]
    if any(d is None for d in counted):
        return since
    cap = min(counted) if counted else None
    watermark = since
    for date in loaded:
        if date is not None and (cap is None or utc(date) < cap):
            watermark = advance_watermark(watermark, date)
    return watermark


def watermark_key(source: str, scope: str) -> str:
    """The storage key of one watermark, e.g. ``arxiv:cat:cs.CL OR cat:cs.LG`` or ``openreview:ICLR.cc/2025/Conference``."""
    return f"{source}:{scope}"


# -- identity keys ---------------------------------------------------------------------------------


def normalize_doi(doi: str | None) -> str | None:
    """A DOI without resolver prefix (``https://doi.org/``, ``doi:``) and surrounding blanks; None if empty."""
    if doi is None:
        return None
    doi = doi.strip()
    doi = re.sub(r"^(?:https?://(?:dx\.)?doi\.org/|doi:\s*)", "", doi, flags=re.I)
    return doi or None


_MATH = re.compile(r"\$([^$]*)\$")
_TEX_SYMBOLS = {
    "infty": "∞", "times": "×", "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε",
    "varepsilon": "ε", "theta": "θ", "lambda": "λ", "mu": "μ", "pi": "π", "sigma": "σ", "tau": "τ",
    "phi": "φ", "varphi": "φ", "chi": "χ", "psi": "ψ", "omega": "ω", "rho": "ρ", "eta": "η", "kappa": "κ",
    "Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Pi": "Π", "Sigma": "Σ", "Phi": "Φ", "Psi": "Ψ",
    "Omega": "Ω", "pm": "±", "cdot": "·", "leq": "≤", "geq": "≥", "le": "≤", "ge": "≥", "neq": "≠",
    "approx": "≈", "sim": "~", "rightarrow": "→", "to": "→", "leftarrow": "←", "mathbb": "", "mathcal": "",
    "mathbf": "", "mathrm": "", "text": "", "textbf": "", "textit": "", "emph": "", "boldsymbol": "",
}


def _math_to_text(title: str) -> str:
    """``$\\infty$Bench`` -> ``∞Bench``: LaTeX math spans rendered as plain characters for comparison."""

    def repl(match: re.Match[str]) -> str:
        tex = match.group(1)
        tex = re.sub(r"\\([A-Za-z]+)", lambda m: _TEX_SYMBOLS.get(m.group(1), m.group(1)), tex)
        return re.sub(r"[{}^_\\]", "", tex)

    return _MATH.sub(repl, title)


def title_key(title: str) -> str:
    """Comparison form of a title: LaTeX math rendered to text, then :func:`neusym.ids.normalize_title`.

    ``$\\infty$Bench: ...`` (arXiv style) and ``∞Bench: ...`` give the same key.
    """
    return normalize_title(_math_to_text(title))


def first_author_surname(authors: list[str]) -> str | None:
    """Lower-case, accent-free last word of the first author's name ("Xinrong Zhang" -> "zhang"); None if no author."""
    for name in authors:
        words = normalize_title(name).split()
        if words:
            return words[-1]
    return None


def _anthology_id_from_doi(doi: str | None) -> str | None:
    if doi and doi.lower().startswith(ANTHOLOGY_DOI_PREFIX):
        return doi[len(ANTHOLOGY_DOI_PREFIX):]
    return None


def _arxiv_id_from_doi(doi: str | None) -> str | None:
    if doi and doi.lower().startswith(ARXIV_DOI_PREFIX):
        return re.sub(r"v\d+$", "", doi[len(ARXIV_DOI_PREFIX):])
    return None


def id_keys(paper: SourcePaper) -> list[str]:
    """The exact-identifier keys of a record: ``doi:``, ``arxiv:``, ``acl:``, ``openreview:`` (strongest first).

    DOIs are compared case-insensitively; an ACL DOI (``10.18653/v1/<id>``) also yields the Anthology
    key and an arXiv DOI (``10.48550/arXiv.<id>``) the arXiv key, so an arXiv record that carries the
    ACL DOI meets the ACL record.
    """
    keys: list[str] = []
    if paper.doi:
        keys.append("doi:" + paper.doi.lower())
    arxiv_id = paper.arxiv_id or (paper.external_id if paper.source == "arxiv" else None) or _arxiv_id_from_doi(paper.doi)
    if arxiv_id:
        keys.append("arxiv:" + arxiv_id.lower())
    anthology_id = paper.anthology_id or (paper.external_id if paper.source == "acl" else None) or _anthology_id_from_doi(paper.doi)
    if anthology_id:
        keys.append("acl:" + anthology_id.lower())
    forum = paper.openreview_id or (paper.external_id if paper.source == "openreview" else None)
    if forum:
        keys.append("openreview:" + forum)
    return list(dict.fromkeys(keys))


def title_author_key(paper: SourcePaper) -> str | None:
    """``title:<title_key>|<first-author surname>``; None when the record lists no author."""
    surname = first_author_surname(paper.authors)
    if surname is None:
        return None
    return f"title:{title_key(paper.title)}|{surname}"


def dedup_keys(paper: SourcePaper) -> list[str]:
    """All identity keys of a record: :func:`id_keys` then the title + first-author key (when authors are known)."""
    keys = id_keys(paper)
    ta = title_author_key(paper)
    if ta:
        keys.append(ta)
    return keys


def dedup_key(paper: SourcePaper) -> str:
    """The single strongest identity key of a record (DOI > arXiv id > Anthology id > forum id > title+author)."""
    keys = dedup_keys(paper)
    return keys[0] if keys else f"title:{title_key(paper.title)}"


# -- merging ---------------------------------------------------------------------------------------

#: A title-only match (one side has no authors) needs at least this many normalized words.
MIN_TITLE_ONLY_WORDS = 4


def merge_sources(papers: Iterable[SourcePaper]) -> list[list[SourcePaper]]:
    """Group records that describe the same work.

    1. Records sharing any :func:`id_keys` key are the same work (DOI, arXiv id, Anthology id, forum id).
    2. Records with the same :func:`title_author_key` join, unless that would put two different
       external ids of the same source in one group (two Anthology papers with one title stay apart).
    3. A record without authors (e.g. an anonymous OpenReview submission) joins the single group with
       the same :func:`title_key` when the title has at least :data:`MIN_TITLE_ONLY_WORDS` words.

    Input: records from any sources, in any order. Output: the groups in order of first appearance,
    each in input order. Nothing is dropped: a record without a match is a group of one.
    """
    items = list(papers)
    parent = list(range(len(items)))
    members: dict[int, set[tuple[str, str]]] = {i: {(p.source, p.external_id)} for i, p in enumerate(items)}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def conflicts(a: int, b: int) -> bool:
        ours = {}
        for source, ext in members[a]:
            ours.setdefault(source, set()).add(ext)
        return any(source in ours and ext not in ours[source] for source, ext in members[b])

    def union(a: int, b: int, check: bool) -> None:
        ra, rb = find(a), find(b)
        if ra == rb or (check and conflicts(ra, rb)):
            return
        parent[rb] = ra
        members[ra] |= members.pop(rb)

    first_with: dict[str, int] = {}
    for i, paper in enumerate(items):
        for key in id_keys(paper):
            if key in first_with:
                union(first_with[key], i, check=False)
            else:
                first_with[key] = i
    for i, paper in enumerate(items):
        key = title_author_key(paper)
        if key is None:
            continue
        if key in first_with:
            union(first_with[key], i, check=True)
        else:
            first_with[key] = i
    by_title: dict[str, set[int]] = {}
    for i, paper in enumerate(items):
        if paper.authors:
            by_title.setdefault(title_key(paper.title), set()).add(i)
    for i, paper in enumerate(items):
        if paper.authors:
            continue
        tkey = title_key(paper.title)
        if len(tkey.split()) < MIN_TITLE_ONLY_WORDS:
            continue
        roots = {find(j) for j in by_title.get(tkey, ())} - {find(i)}
        if len(roots) == 1:
            union(roots.pop(), i, check=True)

    groups: dict[int, list[SourcePaper]] = {}
    for i, paper in enumerate(items):
        groups.setdefault(find(i), []).append(paper)
    return list(groups.values())


def _rank(paper: SourcePaper) -> tuple[int, float]:
    """Sort key: ACL first, then accepted OpenReview, then arXiv, then other OpenReview; newest first."""
    if paper.source == "acl":
        tier = 0
    elif paper.is_venue_record:
        tier = 1
    elif paper.source == "arxiv":
        tier = 2
    else:
        tier = 3
    stamp = paper.updated.timestamp() if paper.updated else 0.0
    return tier, -stamp


def _version_number(paper: SourcePaper) -> int:
    match = re.fullmatch(r"v(\d+)", paper.version or "")
    return int(match.group(1)) if match else 0


def merged_metadata(group: list[SourcePaper]) -> dict[str, Any]:
    """``metadata`` column values for one group from :func:`merge_sources`.

    Keys: title, abstract, authors, conference_full, conference_abbreviation, pub_year, volume,
    download_url, bibtex. Venue fields (conference_*, pub_year, volume, bibtex) come from the best
    venue record (ACL, else accepted OpenReview); title/abstract/authors/download_url from the best
    record that has them (venue records first, then arXiv, newest version first). An arXiv-only work
    gets no conference and the year of its first submission.
    Errors: ValueError for an empty group.
    """
    if not group:
        raise ValueError("merged_metadata needs at least one record")
    ordered = sorted(group, key=lambda p: (_rank(p), -_version_number(p)))
    venue = next((p for p in ordered if p.is_venue_record), None)

    def first(attr: str) -> Any:
        for paper in ordered:
            value = getattr(paper, attr)
            if value:
                return value
        return None

    if venue is not None:
        pub_year = venue.pub_year
    else:
        arxiv = next((p for p in ordered if p.source == "arxiv"), None)
        pub_year = arxiv.pub_year if arxiv else None
    return {
        "title": ordered[0].title,
        "abstract": first("abstract"),
        "authors": list(first("authors") or []),
        "conference_full": venue.conference_full if venue else None,
        "conference_abbreviation": venue.conference_abbreviation if venue else None,
        "pub_year": pub_year,
        "volume": venue.volume if venue else None,
        "download_url": first("pdf_url"),
        "bibtex": (venue.bibtex if venue else None) or first("bibtex"),
    }


def provenance_rows(group: list[SourcePaper]) -> list[dict[str, Any]]:
    """One :meth:`SourcePaper.provenance` row per distinct (source, external_id) of a group, newest version kept."""
    best: dict[tuple[str, str], SourcePaper] = {}
    for paper in group:
        key = (paper.source, paper.external_id)
        old = best.get(key)
        if old is None or _version_number(paper) > _version_number(old):
            best[key] = paper
    return [p.provenance() for p in best.values()]


# -- BibTeX ----------------------------------------------------------------------------------------


def bibtex_key(authors: list[str], year: int | None, title: str) -> str:
    """A BibTeX key ``<surname><year><first title word>`` in ASCII lower case, e.g. ``zhang2024bench``."""
    surname = first_author_surname(authors) or "anon"
    words = [w for w in title_key(title).split() if w not in {"a", "an", "the", "on", "of"}]
    return re.sub(r"[^a-z0-9]", "", f"{surname}{year or ''}{words[0] if words else ''}")


def _bib_value(value: str) -> str:
    value = unicodedata.normalize("NFC", " ".join(str(value).split()))
    return value.replace('"', "''")


def format_bibtex(entry_type: str, key: str, fields: dict[str, Any]) -> str:
    """A BibTeX entry ``@entry_type{key, field = "value", ...}``; None/empty values are left out.

    Values are quoted with double quotes (as the ACL Anthology does); a list value is joined with
    `` and `` (authors, editors).
    """
    lines = [f"@{entry_type}{{{key},"]
    for name, value in fields.items():
        if value is None or value == "" or value == []:
            continue
        if isinstance(value, (list, tuple)):
            value = " and ".join(value)
        lines.append(f'    {name} = "{_bib_value(value)}",')
    lines.append("}")
    return "\n".join(lines)
