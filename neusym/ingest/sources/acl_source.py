"""ACL Anthology metadata from the Anthology's own collection XML (``data/xml/<collection>.xml``).

Parsing uses ``lxml`` directly rather than the ``acl-anthology`` package: that package builds an
``Anthology`` object over a full checkout of the data directory (``data/xml`` plus the YAML venue,
SIG and people files, schema check, optional git clone) and pulls in numpy, GitPython, citeproc-py
and more, while the nightly refresh only needs to read one or a few collection files, from a
directory or downloaded by URL. One collection file holds volumes (``<volume id="long">``) with a
``<meta>`` (booktitle, editors, publisher, address, month, year, venue(s), DOI prefix) and papers.

Mapping of a ``<paper>``: title/abstract with ``<fixed-case>`` markup removed (kept as ``{X}`` in the
BibTeX title) and ``<tex-math>`` rendered as ``$...$`` (plain text when it is only letters/digits),
authors "First Last", Anthology id from ``<url>`` (else computed from collection/volume/paper ids),
DOI, bibkey, pages, PDF ``https://aclanthology.org/<id>.pdf``; venue from ``<meta><venue>`` (a
findings volume gets the conference of its volume id, e.g. ``2024.findings-acl`` -> ACL, volume
"findings"); volume type from the volume id (long, short, main, demo, srw, tutorials, industry) or
its booktitle. ``updated`` is the latest ingest/revision/erratum date, the ACL watermark.
Frontmatter is skipped, as are papers marked ``<removed>``.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from lxml import etree
from pydantic import BaseModel, ConfigDict, Field

from neusym.ingest.sources import _http
from neusym.ingest.sources.base import SourceError, SourcePaper, format_bibtex, watermark_before_skipped
from neusym.venues import ACL_VENUES, VOLUME_TYPES  # one vocabulary with the PDF parser

log = logging.getLogger(__name__)

SOURCE = "acl"
ANTHOLOGY_URL = "https://aclanthology.org"


#: Booktitle phrase -> metadata.volume value (old-style volumes "1", "2", ...).
_BOOKTITLE_TYPES = [
    (re.compile(r"\bLong Papers\b", re.I), "long"),
    (re.compile(r"\bShort Papers\b", re.I), "short"),
    (re.compile(r"\bSystem Demonstrations?\b|\bDemo", re.I), "demo"),
    (re.compile(r"\bStudent Research Workshop\b", re.I), "srw"),
    (re.compile(r"\bTutorial", re.I), "tutorials"),
    (re.compile(r"\bIndustry Track\b", re.I), "industry"),
    (re.compile(r"^Findings of\b", re.I), "findings"),
]
_PLAIN_TEX = re.compile(r"[A-Za-z0-9]+(?: [A-Za-z0-9]+)*")


def _parser() -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, no_network=True, remove_comments=True, remove_pis=True, huge_tree=True)


# -- text rendering --------------------------------------------------------------------------------


def _tex(el: etree._Element) -> str:
    tex = " ".join("".join(el.itertext()).split())
    if _PLAIN_TEX.fullmatch(tex):
        return tex
    return f"${tex}$" if tex else ""


def render_markup(el: etree._Element | None, *, bibtex: bool = False) -> str:
    """Text of an Anthology markup element (title, abstract, booktitle), whitespace collapsed.

    ``<fixed-case>X</fixed-case>`` -> ``X`` (``{X}`` when ``bibtex``), ``<tex-math>\\infty</tex-math>``
    -> ``$\\infty$`` (``K`` stays ``K``), other inline markup (``<b>``, ``<i>``, ``<url>``) -> its text.
    None -> "".
    """
    if el is None:
        return ""
    return " ".join(_render(el, bibtex).split())


def _render(el: etree._Element, bibtex: bool) -> str:
    parts = [el.text or ""]
    for child in el:
        tag = child.tag
        if tag == "tex-math":
            parts.append(_tex(child))
        elif tag == "fixed-case":
            inner = _render(child, bibtex)
            parts.append("{" + inner + "}" if bibtex else inner)
        else:
            parts.append(_render(child, bibtex))
        parts.append(child.tail or "")
    return "".join(parts)


def _person(el: etree._Element) -> str:
    first = " ".join("".join(el.find("first").itertext()).split()) if el.find("first") is not None else ""
    last = " ".join("".join(el.find("last").itertext()).split()) if el.find("last") is not None else ""
    return " ".join(p for p in (first, last) if p)


def _date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(value.strip()[:10], "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


# -- volume-level information ----------------------------------------------------------------------


class _Volume:
    """What every paper of one ``<volume>`` shares."""

    def __init__(self, collection_id: str, vol: etree._Element):
        self.collection_id = collection_id
        self.id = vol.get("id") or ""
        self.full_id = f"{collection_id}-{self.id}"
        meta = vol.find("meta")
        self.booktitle_el = meta.find("booktitle") if meta is not None else None
        self.booktitle = render_markup(self.booktitle_el) or None
        self.booktitle_bib = render_markup(self.booktitle_el, bibtex=True) or None
        text = (lambda tag: (meta.findtext(tag) or "").strip() or None) if meta is not None else (lambda tag: None)
        self.publisher = text("publisher")
        self.address = text("address")
        self.month = text("month")
        year = text("year")
        self.year = int(year) if year and year.isdigit() else _year_from_id(collection_id)
        self.editors = [_person(e) for e in meta.findall("editor")] if meta is not None else []
        venues = [v.text.strip().lower() for v in meta.findall("venue") if v.text] if meta is not None else []
        self.venues = venues
        self.ingest = _date(vol.get("ingest-date"))
        self.type = _volume_type(self.id, self.booktitle, venues)
        self.conference_full, self.conference_abbreviation = _conference(self.id, self.booktitle, venues)

    def selected(self, selectors: set[str] | None) -> bool:
        """True when no selectors are given or one equals the full/collection/volume id or the volume type."""
        if not selectors:
            return True
        names = {self.full_id, self.collection_id, self.id, self.type or ""}
        return bool({s.lower() for s in selectors} & {n.lower() for n in names if n})


def _year_from_id(collection_id: str) -> int | None:
    match = re.match(r"^(\d{4})\.", collection_id)
    if match:
        return int(match.group(1))
    match = re.match(r"^[A-Z](\d\d)$", collection_id)  # old style: P19 -> 2019, J79 -> 1979
    if match:
        yy = int(match.group(1))
        return 1900 + yy if yy >= 60 else 2000 + yy
    return None


def _volume_type(volume_id: str, booktitle: str | None, venues: list[str]) -> str | None:
    if "findings" in venues:
        return "findings"
    if volume_id.lower() in VOLUME_TYPES:
        return VOLUME_TYPES[volume_id.lower()]
    for pattern, kind in _BOOKTITLE_TYPES:
        if booktitle and pattern.search(booktitle):
            return kind
    return None


def _conference(volume_id: str, booktitle: str | None, venues: list[str]) -> tuple[str | None, str | None]:
    """(conference_full, conference_abbreviation) of a volume; findings map to their main conference."""
    if "findings" in venues:
        key = volume_id.lower()
        if key in ACL_VENUES:
            return ACL_VENUES[key]
        match = re.search(r":\s*([A-Za-z*-]+)[\s-]*\d{4}", booktitle or "")
        if match and match.group(1).lower() in ACL_VENUES:
            return ACL_VENUES[match.group(1).lower()]
        return None, match.group(1) if match else None
    for venue in venues:
        if venue in ACL_VENUES:
            return ACL_VENUES[venue]
    real = [v for v in venues if v != "ws"]
    if real:
        return booktitle, real[0].upper()
    return booktitle, None


# -- papers ----------------------------------------------------------------------------------------


def _anthology_id(volume: _Volume, paper: etree._Element) -> str:
    url = (paper.findtext("url") or "").strip()
    if url and not re.match(r"^[a-z]+://", url):
        return url
    pid = paper.get("id") or ""
    if "." in volume.collection_id:  # 2024.acl + long + 1 -> 2024.acl-long.1
        return f"{volume.collection_id}-{volume.id}.{pid}"
    return f"{volume.collection_id}-{volume.id}{int(pid):03d}" if pid.isdigit() else f"{volume.collection_id}-{volume.id}{pid}"


def _updated(volume: _Volume, paper: etree._Element) -> datetime | None:
    """The latest ingest/revision/erratum date of a paper (its watermark date), None when it has none."""
    dates = [volume.ingest, _date(paper.get("ingest-date"))]
    dates += [_date(r.get("date")) for r in paper.iter("revision", "erratum")]
    known = [d for d in dates if d is not None]
    return max(known) if known else None


def _paper(volume: _Volume, paper: etree._Element, name: str) -> SourcePaper:
    anthology_id = _anthology_id(volume, paper)
    title_el = paper.find("title")
    title = render_markup(title_el)
    updated = _updated(volume, paper)
    if not title:
        raise SourceError(SOURCE, f"{name} paper {anthology_id} (line {paper.sourceline})", "record missing title",
                          record_id=anthology_id, updated=updated)
    authors = [_person(a) for a in paper.findall("author")]
    authors = [a for a in authors if a]
    doi = (paper.findtext("doi") or "").strip() or None
    bibkey = (paper.findtext("bibkey") or "").strip() or None
    pages = (paper.findtext("pages") or "").strip() or None
    url = f"{ANTHOLOGY_URL}/{anthology_id}"
    bibtex = format_bibtex(
        "inproceedings",
        bibkey or anthology_id,
        {
            "title": render_markup(title_el, bibtex=True),
            "author": authors,
            "editor": volume.editors,
            "booktitle": volume.booktitle_bib,
            "month": volume.month,
            "year": volume.year,
            "address": volume.address,
            "publisher": volume.publisher,
            "url": url + "/",
            "doi": doi,
            "pages": re.sub(r"(?<!\s)\s*[-–]+\s*", "--", pages) if pages else None,
        },
    )
    return SourcePaper(
        source=SOURCE,
        external_id=anthology_id,
        title=title,
        authors=authors,
        abstract=render_markup(paper.find("abstract")) or None,
        pub_year=volume.year,
        updated=updated,
        conference_full=volume.conference_full,
        conference_abbreviation=volume.conference_abbreviation,
        volume=volume.type,
        booktitle=volume.booktitle,
        pages=pages,
        doi=doi,
        bibkey=bibkey,
        bibtex=bibtex,
        pdf_url=f"{url}.pdf",
        anthology_id=anthology_id,
    )


def parse_acl_collection(
    path_or_bytes: str | Path | bytes,
    *,
    volumes: set[str] | None = None,
    since: datetime | None = None,
    name: str | None = None,
    errors: list[SourceError] | None = None,
) -> list[SourcePaper]:
    """Parse one Anthology collection XML file into SourcePapers (frontmatter and removed papers excluded).

    Inputs: a file path, or the file's bytes (then ``name``, e.g. its URL, names it in errors);
    ``volumes`` keeps only matching volumes, each selector being a full volume id (``2024.acl-long``,
    ``2024.findings-acl``), a collection id (``2024.acl``), a volume id (``long``) or a volume type
    (``findings``, ``demo``, ``short``...), case-insensitive; ``since`` keeps papers whose ``updated``
    (latest ingest/revision/erratum date) is after it (papers without any date are kept);
    ``errors``: if a list, a bad paper (no title, a malformed field) is appended there as a
    :class:`SourceError` with ``record_id`` (its Anthology id) and ``updated`` set, and skipped; else
    the first one raises.

    Output: papers in file order.
    Errors: :class:`SourceError` naming the file and line for unreadable, truncated or ill-formed XML,
    a root element other than ``<collection>``, or (without ``errors``) a bad paper.
    """
    return _parse_collection(path_or_bytes, volumes=volumes, since=since, name=name, errors=errors)[0]


def _parse_collection(
    path_or_bytes: str | Path | bytes,
    *,
    volumes: set[str] | None,
    since: datetime | None,
    name: str | None,
    errors: list[SourceError] | None,
) -> tuple[list[SourcePaper], int]:
    """:func:`parse_acl_collection`, also returning how many paper records the selected volumes hold
    (good or bad, before the ``since`` filter; frontmatter and removed papers not counted)."""
    if isinstance(path_or_bytes, (bytes, bytearray)):
        label = name or "<bytes>"
        try:
            root = etree.fromstring(bytes(path_or_bytes), parser=_parser())
        except etree.XMLSyntaxError as exc:
            raise SourceError(SOURCE, label, _syntax_reason(exc)) from None
    else:
        path = Path(path_or_bytes)
        label = name or str(path)
        try:
            root = etree.parse(str(path), parser=_parser()).getroot()
        except etree.XMLSyntaxError as exc:
            raise SourceError(SOURCE, label, _syntax_reason(exc)) from None
        except OSError as exc:
            raise SourceError(SOURCE, label, f"cannot read file: {exc}") from None
    if root is None or root.tag != "collection":
        raise SourceError(SOURCE, label, f"not an Anthology collection (root element {getattr(root, 'tag', None)!r})")
    collection_id = root.get("id") or (Path(label).stem if not isinstance(path_or_bytes, bytes) else "")
    if not collection_id:
        raise SourceError(SOURCE, label, "<collection> without id")

    papers: list[SourcePaper] = []
    records = 0
    for vol in root.iterchildren("volume"):
        volume = _Volume(collection_id, vol)
        if not volume.selected(volumes):
            continue
        for paper in vol.iterchildren("paper"):
            if paper.get("id") in (None, "0") or paper.find("removed") is not None:
                continue
            records += 1
            try:
                record = _paper(volume, paper, label)
            except (SourceError, ValueError) as exc:  # ValueError: pydantic validation of a malformed field
                if isinstance(exc, SourceError):
                    error = exc
                else:
                    anthology_id = _anthology_id(volume, paper)
                    reason = "bad record: " + " ".join(str(exc).split())
                    error = SourceError(SOURCE, f"{label} paper {anthology_id} (line {paper.sourceline})", reason,
                                        record_id=anthology_id, updated=_updated(volume, paper))
                if errors is None:
                    raise error from None
                log.warning("%s", error)
                errors.append(error)
                continue
            if since is not None and record.updated is not None and record.updated <= since:
                continue
            papers.append(record)
    return papers, records


def _syntax_reason(exc: etree.XMLSyntaxError) -> str:
    line, column = exc.position if exc.position else (exc.lineno, exc.offset)
    message = re.sub(r",? line \d+, column \d+$", "", (exc.msg or "").strip())
    return f"truncated or ill-formed XML at line {line}, column {column}: {message}"


def _expand(items: Iterable[str | Path], collections: set[str] | None) -> list[str | Path]:
    """Directories -> their ``*.xml`` files (sorted), filtered by collection id (file stem)."""
    out: list[str | Path] = []
    for item in items:
        text = str(item)
        if re.match(r"^https?://", text):
            stem = text.rstrip("/").rsplit("/", 1)[-1].removesuffix(".xml")
            if not collections or stem in collections:
                out.append(text)
            continue
        path = Path(item)
        files = sorted(path.glob("*.xml")) if path.is_dir() else [path]
        out.extend(f for f in files if not collections or f.name.removesuffix(".xml") in collections)
    return out


def fetch_acl(
    paths_or_urls: str | Path | Iterable[str | Path],
    *,
    volumes: set[str] | None = None,
    collections: set[str] | None = None,
    since: datetime | None = None,
    timeout: float = 60.0,
    num_retries: int = 3,
    backoff_seconds: float = 5.0,
    errors: list[SourceError] | None = None,
    cache_dir: Path | None = None,
) -> tuple[list[SourcePaper], datetime | None]:
    """Read Anthology collection XML files from paths, directories or http(s) URLs.

    Inputs: one or many of: a collection file, a directory of them (e.g. a checkout's ``data/xml``),
    or a URL of one file (downloaded with ``timeout`` seconds per request and ``num_retries`` retries
    of 429/5xx/transport failures, backoff ``backoff_seconds * 2**(n-1)``); ``collections`` keeps only
    these collection ids (file stems, e.g. ``{"2024.acl", "2024.findings"}``); ``volumes`` and
    ``since`` as in :func:`parse_acl_collection`; ``errors``: if a list, a failing file or bad paper
    is appended there and the rest is still read, else the first failure raises (a bad paper's error
    has ``record_id`` set, a failing file's has not); ``cache_dir``: keep downloaded files there and
    re-request them conditionally (ETag / Last-Modified), so an unchanged collection costs one
    ``304 Not Modified`` answer.

    Output: ``(papers, watermark)``: papers of all files in order; ``watermark`` the latest ``updated``
    seen, or ``since`` when nothing newer was found. With bad papers skipped, it is the latest date
    strictly before the earliest skipped paper's date
    (:func:`~neusym.ingest.sources.base.watermark_before_skipped`); as Anthology dates are days, papers
    sharing the bad paper's date (usually its whole volume) do not advance it either.
    Errors: :class:`SourceError` naming the file/URL (and line for XML errors); also, whatever
    ``errors`` is, when nothing was found: no collection file in the given paths (a folder without
    ``*.xml``, a ``collections`` filter matching no file) or, all files being readable, no paper in
    them (in the selected ``volumes``).
    """
    items: Iterable[str | Path] = [paths_or_urls] if isinstance(paths_or_urls, (str, Path)) else paths_or_urls
    items = list(items)
    shown = ", ".join(str(i) for i in items) or "(no paths given)"
    files = _expand(items, collections)
    if not files:
        only = f" for collections {', '.join(sorted(collections))}" if collections else ""
        raise SourceError(SOURCE, shown, f"nothing found: no collection XML files (*.xml){only}")
    papers: list[SourcePaper] = []
    records = 0
    file_failed = False
    record_errors: list[SourceError] = []
    for item in files:
        found_errors: list[SourceError] | None = None if errors is None else []
        try:
            if isinstance(item, str) and re.match(r"^https?://", item):
                body = _http.get_bytes(item, source=SOURCE, record=item, timeout=timeout,
                                       num_retries=num_retries, backoff_seconds=backoff_seconds,
                                       cache_dir=cache_dir)
                found, count = _parse_collection(body, volumes=volumes, since=since, name=item, errors=found_errors)
            else:
                found, count = _parse_collection(item, volumes=volumes, since=since, name=None, errors=found_errors)
        except SourceError as exc:
            if errors is None:
                raise
            log.warning("%s", exc)
            errors.append(exc)
            file_failed = True
            continue
        if found_errors:
            errors.extend(found_errors)  # type: ignore[union-attr]
            record_errors.extend(found_errors)
        records += count
        papers.extend(found)
    if records == 0 and not file_failed:
        where = f" in volumes {', '.join(sorted(volumes))}" if volumes else ""
        raise SourceError(SOURCE, ", ".join(str(f) for f in files),
                          f"nothing found: no papers{where} in {len(files)} collection file(s)")
    watermark = watermark_before_skipped(since, (p.updated for p in papers), (e.updated for e in record_errors))
    return papers, watermark


class AclOptions(BaseModel):
    """A crawl of ACL Anthology collection XML: ``paths`` (files, folders or URLs), optionally only
    some ``volumes`` (long, findings ...) and ``collections``."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(default_factory=list)
    volumes: list[str] = Field(default_factory=list)
    collections: list[str] = Field(default_factory=list)


class AclSource:
    """ACL Anthology collection XML (:func:`fetch_acl`); settings ``source_timeout_s``,
    ``source_retries``, ``source_backoff_s``; downloads cached under ``staging/http-cache``. A whole
    collection re-reads in well under a second: no watermark filtering, upserts are idempotent."""

    name = "acl"
    options = AclOptions

    def scope(self, options: AclOptions) -> str:
        sel = ",".join(sorted(options.collections)) or ",".join(sorted(Path(p).name for p in options.paths))
        return sel + (f" [{','.join(sorted(options.volumes))}]" if options.volumes else "")

    def fetch(self, options: AclOptions, settings: Any, since: datetime | None,
              errors: list[SourceError] | None) -> tuple[list[SourcePaper], datetime | None]:
        if not options.paths:
            raise SourceError("acl", "<config>", "paths (collection XML files, directories or URLs) are required")
        return fetch_acl(options.paths, volumes=set(options.volumes) or None,
                         collections=set(options.collections) or None, backoff_seconds=settings.source_backoff_s,
                         cache_dir=settings.staging_dir / "http-cache", timeout=settings.source_timeout_s,
                         num_retries=settings.source_retries, errors=errors)


CRAWL_SOURCE = AclSource()

