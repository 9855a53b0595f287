"""Citation export: papers of a corpus version as BibTeX (``bibtexparser`` 2) or RIS (``rispy``).

What ``neusym search --format bibtex|ris``, ``GET /search.bib``/``.ris`` and ``GET /papers/{id}.bib``/``.ris``
print. Data comes from the ``metadata`` table of one corpus version (:func:`paper_records`, read through a
DuckDB cursor of its read-only database); nothing is fetched from the network.

BibTeX (:func:`to_bibtex`): a paper's stored entry (``metadata.bibtex``, written by the crawlers: the ACL
Anthology's own citation key, DOI, pages, editors, ...) when it parses as exactly one entry, re-serialised
through ``bibtexparser`` so every entry of the output has the same layout; otherwise an entry generated
from the metadata columns (``@inproceedings`` when the venue is known, else ``@misc``) whose values are
LaTeX-escaped (``& % $ # _ { } ~ ^ \\``) and whose words with inner capitals are braced (``{LongEval}:``)
so that styles keep their case. Parsing the output back with
``bibtexparser.middlewares.LatexDecodingMiddleware`` gives the metadata's title and author names.
Citation keys are unique within one output (a later duplicate gets ``a``, ``b``, ... appended).

RIS (:func:`to_ris`): one ``TY CONF`` (venue known) or ``TY GEN`` record per paper with TI, AU (one line
per author), PY, T2 (venue), UR, AB, DO (from the stored BibTeX, when it has one) and ID (the paper id).
"""

from __future__ import annotations

import re
import uuid
from typing import Any, Iterable

import bibtexparser
import rispy
from bibtexparser.model import Entry, Field

from neusym.ids import normalize_title

RECORD_COLUMNS = ("paper_id", "title", "abstract", "authors", "conference_full", "conference_abbreviation",
                  "pub_year", "volume", "download_url", "bibtex")
"""The keys of a record of :func:`paper_records` (columns of ``metadata``)."""

BIBTEX_MEDIA_TYPE = "application/x-bibtex; charset=utf-8"
RIS_MEDIA_TYPE = "application/x-research-info-systems; charset=utf-8"

_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "&": r"\&", "%": r"\%", "$": r"\$",
                  "#": r"\#", "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_KEY_STOPWORDS = frozenset({"a", "an", "the", "on", "of", "in", "for", "to", "and", "with", "from", "at", "by",
                            "is", "are", "do", "does", "how", "what", "when", "why", "via"})
_NAME_SUFFIXES = frozenset({"jr", "sr", "ii", "iii", "iv"})


# ------------------------------------------------------------------------------------------- records
def paper_records(cur: Any, paper_ids: Iterable[str]) -> list[dict]:
    """The ``metadata`` rows of ``paper_ids``, in the order given, as dicts with the keys of
    :data:`RECORD_COLUMNS` (``paper_id`` a canonical UUID string, ``authors`` a list, ``pub_year`` an
    int or None, the rest strings or None).

    ``cur``: a DuckDB cursor or connection on a corpus version's database (the service's
    ``served.cursor()``, or :func:`neusym.store.db.connect_readonly` of ``version.db_path``). Ids that
    are not UUIDs or not in that version are left out; a repeated id is returned once. Raises
    ``duckdb.Error`` when the database has no ``metadata`` table.
    """
    wanted: list[str] = []
    for raw in paper_ids:
        try:
            pid = str(uuid.UUID(str(raw).strip()))
        except (ValueError, AttributeError):
            continue
        if pid not in wanted:
            wanted.append(pid)
    if not wanted:
        return []
    columns = ", ".join("paper_id::VARCHAR" if c == "paper_id" else c for c in RECORD_COLUMNS)
    cur.execute(f"SELECT {columns} FROM metadata WHERE paper_id::VARCHAR IN ({', '.join('?' for _ in wanted)})",
                wanted)
    found = {row[0]: dict(zip(RECORD_COLUMNS, row)) for row in cur.fetchall()}
    records = []
    for pid in wanted:
        if pid in found:
            record = found[pid]
            record["authors"] = [a for a in (record["authors"] or []) if a and a.strip()]
            records.append(record)
    return records


def _venue(record: dict) -> str | None:
    return (record.get("conference_full") or record.get("conference_abbreviation") or "").strip() or None


# -------------------------------------------------------------------------------------------- BibTeX
def latex_escape(text: str) -> str:
    """``text`` with the characters LaTeX/BibTeX treat specially escaped (``&`` -> ``\\&``,
    ``{`` -> ``\\{``, ``\\`` -> ``\\textbackslash{}``, ...); other characters (UTF-8) are kept."""
    return "".join(_LATEX_SPECIAL.get(c, c) for c in text)


def _protect_case(word: str) -> str:
    """A word escaped, and braced when it has a capital letter after its first character (an acronym or
    a name such as ``PopQA``, ``LongEval``, ``BERT-based``), so BibTeX styles do not lower-case it."""
    escaped = latex_escape(word)
    return "{" + escaped + "}" if any(c.isupper() for c in word[1:]) else escaped


def bibtex_title(title: str) -> str:
    """The BibTeX value of a title: escaped, whitespace collapsed, case-protected words braced."""
    return " ".join(_protect_case(w) for w in title.split())


def bibtex_name(name: str) -> str:
    """One author as a BibTeX name: escaped, whitespace collapsed, and braced whole when BibTeX would
    otherwise read it as several names or as "et al." (a word ``and`` inside it, any case, or the name
    ``others``): ``Smith and Jones`` -> ``{Smith and Jones}``."""
    text = latex_escape(" ".join(name.split()))
    if re.search(r"(?i)(?:^|\s)and(?:\s|$)", text) or text.lower() == "others":
        return "{" + text + "}"
    return text


def _ascii_lower(text: str) -> str:
    """Lower-case ASCII letters and digits of ``text`` (accents folded), nothing else."""
    return normalize_title(text).replace(" ", "")


def _last_name(name: str) -> str:
    if "," in name:  # "Last, First"
        return name.split(",", 1)[0]
    words = [w for w in name.split() if _ascii_lower(w) not in _NAME_SUFFIXES] or name.split()
    return words[-1] if words else ""


def citation_key(authors: list[str], year: int | None, title: str) -> str:
    """``<first author's last name><year><first significant title word>``, lower-case ASCII (accents
    dropped after NFKD normalisation), e.g. ``cohan2020specter``; ``anon`` without authors,
    ``paper`` when nothing is left."""
    last = _ascii_lower(_last_name(authors[0])) if authors else ""
    words = [_ascii_lower(w) for w in re.split(r"[\s\-:/]+", title or "")]
    word = next((w for w in words if w and w not in _KEY_STOPWORDS), "")
    return f"{last or 'anon'}{year or ''}{word}" or "paper"


def _stored_entry(bibtex: str | None) -> Entry | None:
    """The one entry of a stored BibTeX text, or None when it is empty, fails to parse or holds
    another number of entries."""
    if not bibtex or not bibtex.strip().startswith("@") or not _balanced(bibtex):
        return None  # (checked first: the parser logs a warning for each broken block)
    try:
        library = bibtexparser.parse_string(bibtex)
    except Exception:  # noqa: BLE001 - any parser failure means: generate the entry instead
        return None
    if library.failed_blocks or len(library.entries) != 1:
        return None
    entry = library.entries[0]
    for f in entry.fields:  # one layout: values on one line (BibTeX collapses whitespace anyway)
        if isinstance(f.value, str) and f.enclosing != "no-enclosing":
            f.value = " ".join(f.value.split())
    return entry


def _balanced(text: str) -> bool:
    """Whether the unescaped braces of ``text`` are balanced."""
    depth = 0
    for m in re.finditer(r"(?<!\\)[{}]", text):
        depth += 1 if m.group() == "{" else -1
        if depth < 0:
            return False
    return depth == 0


def _generated_entry(record: dict, key: str) -> Entry:
    venue = _venue(record)
    fields = [Field("title", bibtex_title(record.get("title") or ""))]
    if record.get("authors"):
        fields.append(Field("author", " and ".join(bibtex_name(a) for a in record["authors"])))
    if venue:
        fields.append(Field("booktitle", latex_escape(" ".join(venue.split()))))
    if record.get("pub_year"):
        fields.append(Field("year", str(record["pub_year"])))
    if record.get("download_url"):
        fields.append(Field("url", _url_value(record["download_url"])))
    if record.get("abstract") and record["abstract"].strip():
        fields.append(Field("abstract", latex_escape(" ".join(record["abstract"].split()))))
    return Entry("inproceedings" if venue else "misc", key, fields)


def _url_value(url: str) -> str:
    """A URL as a BibTeX value: kept verbatim (the ``url`` field is read verbatim) except braces and
    whitespace, which are percent-encoded so the value stays balanced."""
    return re.sub(r"[{}\s]", lambda m: "%{:02X}".format(ord(m.group())), url.strip())


def _unique(key: str, used: set[str]) -> str:
    """``key``, or ``key`` + a, b, ..., z, aa, ab, ... : the first not in ``used`` (case-insensitive, as
    BibTeX compares keys); added to ``used``."""
    candidate, n = key, 0
    while candidate.lower() in used:
        n += 1
        suffix, m = "", n
        while m:
            m, r = divmod(m - 1, 26)
            suffix = chr(ord("a") + r) + suffix
        candidate = key + suffix
    used.add(candidate.lower())
    return candidate


def bibtex_entries(records: Iterable[dict]) -> list[Entry]:
    """One ``bibtexparser.model.Entry`` per record (see :func:`to_bibtex`), keys unique among them."""
    records = list(records)
    stored = [_stored_entry(r.get("bibtex")) for r in records]
    used: set[str] = set()
    entries = []
    for entry in stored:  # stored keys first, so generated ones avoid them
        if entry is not None:
            entry.key = _unique(entry.key, used)
    for record, entry in zip(records, stored):
        if entry is None:
            base = citation_key(record.get("authors") or [], record.get("pub_year"), record.get("title") or "")
            entry = _generated_entry(record, _unique(base, used))
        entries.append(entry)
    return entries


def to_bibtex(records: Iterable[dict]) -> str:
    """The records (dicts with the keys of :data:`RECORD_COLUMNS`, e.g. from :func:`paper_records`) as one
    BibTeX text, one entry per record in their order, separated by blank lines and ending with a newline
    ("" for no records).

    Each entry is the record's stored ``bibtex`` when that parses as exactly one entry (its citation key
    kept, unless an earlier entry of this output has it), else one generated from the metadata:
    ``@inproceedings`` with ``booktitle`` = ``conference_full`` (or the abbreviation) when a venue is
    known, otherwise ``@misc``; fields title, author (``A and B``), booktitle, year, url
    (``download_url``), abstract; key from :func:`citation_key`. Never raises for a record's content.
    """
    entries = bibtex_entries(records)
    if not entries:
        return ""
    fmt = bibtexparser.BibtexFormat()
    fmt.indent = "  "
    fmt.block_separator = "\n"
    text = bibtexparser.write_string(bibtexparser.Library(entries), bibtex_format=fmt)
    return text.strip() + "\n"


# ----------------------------------------------------------------------------------------------- RIS
class _RisWriter(rispy.RisWriter):
    """rispy's RIS writer without its ``1.``, ``2.``, ... line before each record."""

    def set_header(self, count: int) -> str:
        return ""


def _one_line(value: Any) -> str:
    """``value`` on one line: every run of whitespace (line breaks of any kind included) one space, so a
    value cannot start a field or a record of its own."""
    return " ".join(str(value).split())


def _ris_url(url: str) -> str:
    """A URL on one line: whitespace inside it (a line break in a crawled ``download_url``) percent-encoded."""
    return re.sub(r"\s", lambda m: "".join(f"%{b:02X}" for b in m.group().encode("utf-8")), url.strip())


def ris_records(records: Iterable[dict]) -> list[dict]:
    """The records as ``rispy`` dicts (``type_of_reference``, ``title``, ``authors``, ``year``,
    ``secondary_title``, ``urls``, ``abstract``, ``doi``, ``id``; empty values left out)."""
    out = []
    for record in records:
        venue = _venue(record)
        stored = _stored_entry(record.get("bibtex"))
        doi = stored.fields_dict.get("doi") if stored is not None else None
        ref: dict[str, Any] = {"type_of_reference": "CONF" if venue else "GEN",
                               "title": _one_line(record.get("title") or "")}
        if record.get("authors"):
            ref["authors"] = [_one_line(a) for a in record["authors"]]
        if record.get("pub_year"):
            ref["year"] = str(record["pub_year"])
        if venue:
            ref["secondary_title"] = _one_line(venue)
        if record.get("download_url"):
            ref["urls"] = [_ris_url(record["download_url"])]
        if record.get("abstract") and record["abstract"].strip():
            ref["abstract"] = _one_line(record["abstract"])
        if doi is not None and isinstance(doi.value, str) and doi.value.strip():
            ref["doi"] = _one_line(doi.value)
        ref["id"] = record["paper_id"]
        out.append(ref)
    return out


def to_ris(records: Iterable[dict]) -> str:
    """The records (dicts with the keys of :data:`RECORD_COLUMNS`) as one RIS text (``TY`` ... ``ER``
    per record, in their order; "" for no records): TY ``CONF`` when a venue is known (T2 = the
    conference's full name or abbreviation) else ``GEN``; TI, one AU per author, PY, UR
    (``download_url``), AB, DO (the DOI of the stored BibTeX, when any) and ID (the paper id). Values
    are put on one line (whitespace collapsed; in UR percent-encoded), so no value can open a field or
    record of its own. Never raises for a record's content."""
    refs = ris_records(records)
    if not refs:
        return ""
    return rispy.dumps(refs, implementation=_RisWriter).rstrip("\n") + "\n"


__all__ = ["BIBTEX_MEDIA_TYPE", "RECORD_COLUMNS", "RIS_MEDIA_TYPE", "bibtex_entries", "bibtex_name", "bibtex_title",
           "citation_key", "latex_escape", "paper_records", "ris_records", "to_bibtex", "to_ris"]
