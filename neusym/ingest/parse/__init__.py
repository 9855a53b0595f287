"""Parse one research-paper PDF into the typed records of the eight NeuSym tables.

Public API::

    parse_pdf(path, settings=None) -> ParsedPaper     # raises UnparseablePDF for a bad PDF

Only PyMuPDF text extraction is used (no OCR, no layout model), so a paper parses at hundreds of
pages per second apart from chunk tokenisation. Module map:

- :mod:`.pdf` — opening/validating the file, per-page layout (lines with fonts, column-aware
  reading order), page furniture (running headers, page numbers, venue footers);
- :mod:`.metadata` — title, authors, venue and year from page 1 and the PDF info;
- :mod:`.sections` — headings (trusted outline or font/numbering rules) and section contents;
- :mod:`.chunks` — per-page chunks of at most ``settings.chunk_tokens`` word pieces;
- :mod:`.elements` — table/figure captions and regions, numbered equations, references.

Every id is deterministic (:mod:`neusym.ids`): the paper id from the title (or the file's sha256
when no title is found), element ids from the paper id plus a kind and a stable key
(``page:<n>``, ``section:<ordinal>``, ``chunk:<page>:<ordinal>``, ``table:<page>:<ordinal>``,
``image:<page>:<ordinal>``, ``equation:<page>:<ordinal>``, ``reference:<ordinal>``).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pymupdf

from neusym.errors import UnparseablePDF
from neusym.ids import element_id, paper_id_for
from neusym.records import Chunk, Equation, Image, Metadata, Page, ParsedPaper, Reference, Section, Table
from neusym.settings import Settings, get_settings
from neusym.ingest.parse import chunks as _chunks
from neusym.ingest.parse.elements import EquationDraft, find_captions, find_equations, locate_floats, split_references, table_html
from neusym.ingest.parse.links import SectionIndex, chunk_offsets
from neusym.ingest.parse.metadata import abstract_from_page, clean_line_text, extract_metadata
from neusym.ingest.parse.pdf import Box, Line, OpenedPDF, body_font_size, find_furniture, open_pdf, to_record_bbox
from neusym.ingest.parse.sections import REFERENCE_HEADINGS, build_sections, detect_headings, front_matter, toc_headings
from neusym.ingest.parse.text import join_wrapped, norm, unwrap, vocabulary_of

__all__ = ["PARSER_VERSION", "BACKENDS", "FloatDraft", "parse_pdf", "parser_version", "UnparseablePDF"]

PARSER_VERSION = "8"
"""Version of the parse output. Bump it whenever :func:`parse_pdf` can return different records
for the same PDF bytes, so that staged parses made by an older parser are redone.
2: ``ref_section_id`` on every element, ``images.image_ocr_text``, landscape (rotated) captions,
italic caption labels, parse backends. 3: the word grid of a booktabs table keeps two numbers
apart and splits a tightly set phrase at its columns. 4: tables read by the table-structure model
as well (:mod:`.tables`), ``tables.table_source``. 5: scripts fused onto numbers marked in the
table text ("28.15^34", "87.0±3.0", "10^5"); narrow captions side by side at different heights split
the width between their floats. 6: group labels printed centred on their rows spread over them.
7: the grid sources are compared with the row headers, header rows and label columns of
:mod:`.cells` as they read now (column numbers as a header, narrow sub-tables, described columns).
8: the same, with narrow tables printed side by side read as one (:func:`.cells.side_by_side`)."""

BACKENDS = ("pymupdf", "layout", "mineru")
"""Values of ``settings.parse_backend`` (see :func:`parse_pdf`)."""


def parser_version(settings: Settings) -> str:
    """Version tag of the records :func:`parse_pdf` returns under ``settings``: the parser version
    and the backend (``"2+layout"``); the MinerU backend adds its tier, as its output decides the
    tables/figures/equations. Staged parses should be keyed by it so that switching the backend
    re-parses."""
    tag = f"{PARSER_VERSION}+{settings.parse_backend}"
    if settings.parse_backend == "mineru":
        tag += f"-{settings.mineru_tier}"
    return tag


@dataclass
class FloatDraft:
    """A table or figure before ids are assigned.

    ``kind`` "table" or "figure"; ``label`` e.g. "Table 2"; ``page`` from 1; ``caption`` the
    caption text; ``bbox`` the float's region ``(x0, y0, x1, y1)`` in points (top-left origin) or
    ``None``; ``html`` the table cells as HTML; ``source`` which reading built ``html``
    (:data:`neusym.ingest.parse.tables.SOURCES`, or ``"mineru"``); ``anchor`` the caption's first line
    (decides the section); ``section`` a section index that overrides the anchor.
    """

    kind: str
    label: str
    page: int
    caption: str
    bbox: Box | None = None
    html: str | None = None
    anchor: Line | None = None
    source: str | None = None
    section: int | None = None


def _add_time(timings: dict[str, float] | None, stage: str, since: float) -> None:
    """Add the seconds elapsed since ``since`` (``time.perf_counter()``) to ``timings[stage]``."""
    if timings is not None:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - since


def parse_pdf(
    path: Path | str,
    settings: Settings | None = None,
    *,
    paper_id: str | None = None,
    timings: dict[str, float] | None = None,
) -> ParsedPaper:
    """Parse the PDF at ``path`` into a :class:`~neusym.records.ParsedPaper`.

    ``settings`` defaults to :func:`neusym.settings.get_settings`; ``chunk_tokens`` sizes the
    chunks and ``parse_backend`` picks who finds table/figure regions, table cells and equations
    (text, sections, captions, chunks and references always come from PyMuPDF text):

    - ``"pymupdf"``: PyMuPDF text and drawings only (hundreds of pages/s);
    - ``"layout"``: as ``pymupdf``, plus pymupdf4llm (``pymupdf.layout``) tables as HTML on the
      pages that print a table caption, and rapid-layout figure/table/equation regions on the
      pages with a figure caption or an equation (:mod:`neusym.ingest.parse.layout`);
    - ``"mineru"``: as ``pymupdf``, with tables, figures and equations taken from MinerU's output
      for this PDF (:mod:`neusym.ingest.parse.mineru`).

    ``paper_id``: the id of an already known (crawled) paper this PDF belongs to; by default the id
    is derived from the title printed in the PDF (:func:`neusym.ids.paper_id_for`).
    ``timings``: when given, seconds spent per stage are added to it (keys ``open_text``,
    ``chunks``, ``floats_equations``, ``references`` and the backend's own stages).
    Raises :class:`~neusym.errors.UnparseablePDF` (``.reason`` is a short explanation) when the
    file is unreadable, corrupt or truncated, encrypted with a user password, has zero pages, or
    has no text layer; :class:`ValueError` for an unknown backend; the MinerU backend raises
    :class:`neusym.ingest.parse.mineru.MineruUnavailable` when it finds no MinerU output for the PDF.
    Parsing the same bytes twice yields identical records (ids included).
    """
    settings = settings or get_settings()
    path = Path(path)
    tick = time.perf_counter()
    opened = open_pdf(path)
    _add_time(timings, "open_text", tick)
    try:
        return _build(opened, settings, paper_id, timings)
    except (pymupdf.FileDataError, pymupdf.mupdf.FzErrorBase) as exc:  # damage found late (a page's content)
        raise UnparseablePDF(path, f"corrupt: {' '.join(str(exc).split())[:200]}") from exc
    finally:
        opened.doc.close()


def _build(
    opened: OpenedPDF, settings: Settings, known_paper_id: str | None = None, timings: dict[str, float] | None = None
) -> ParsedPaper:
    tick = time.perf_counter()
    doc, pages = opened.doc, opened.pages
    body = body_font_size(pages)
    furniture = find_furniture(pages)
    front = front_matter(pages)
    vocabulary = vocabulary_of([ln for p in pages for ln in p.lines]) | _chunks.known_words()

    # -- sections --------------------------------------------------------------------------
    headings = toc_headings(doc, pages, body, furniture)
    if headings is None:
        headings = detect_headings(pages, body, furniture)
    drafts = build_sections(pages, headings, furniture)

    # -- metadata --------------------------------------------------------------------------
    info = extract_metadata(doc, pages, furniture, front, body, vocabulary)
    abstract = None
    for d in drafts:
        if norm(d.heading.title) == "abstract" and d.text.strip():
            abstract = _paragraphs(d.content, vocabulary)
            break
    if abstract is None:
        inline = abstract_from_page(pages)
        abstract = unwrap(inline, vocabulary) if inline else None
    paper_id = known_paper_id or paper_id_for(info.title, opened.sha256)
    title = info.title or _fallback_title(opened)
    metadata = Metadata(
        paper_id=paper_id,
        title=title,
        abstract=abstract,
        num_pages=len(pages),
        conference_full=info.conference_full,
        conference_abbreviation=info.conference_abbreviation,
        pub_year=info.pub_year,
        volume=info.volume,
        authors=info.authors,
        pdf_path=str(opened.path),
        pdf_sha256=opened.sha256,
    )

    _add_time(timings, "open_text", tick)

    # -- pages and chunks ------------------------------------------------------------------
    tick = time.perf_counter()
    chunk_starts: dict[str, int] = {}
    page_ids = {p.number: element_id(paper_id, "page", p.number) for p in pages}
    page_rows: list[Page] = []
    chunk_rows: list[Chunk] = []
    for p in pages:
        content = p.text
        page_rows.append(
            Page(
                page_id=page_ids[p.number],
                page_number=p.number,
                page_width=round(p.width, 2),
                page_height=round(p.height, 2),
                page_content=content,
                ref_paper_id=paper_id,
            )
        )
        pieces = _chunks.split_page(content, settings.chunk_tokens)
        for i, (piece, start) in enumerate(zip(pieces, chunk_offsets(content, pieces))):
            chunk_starts[element_id(paper_id, "chunk", p.number, i)] = start
            chunk_rows.append(
                Chunk(
                    chunk_id=element_id(paper_id, "chunk", p.number, i),
                    text_content=piece,
                    ordinal=i,
                    page_number=p.number,
                    ref_paper_id=paper_id,
                    ref_page_id=page_ids[p.number],
                )
            )
    _add_time(timings, "chunks", tick)

    # -- section rows ----------------------------------------------------------------------
    section_ids = [element_id(paper_id, "section", i) for i in range(len(drafts))]
    section_rows = [
        Section(
            section_id=section_ids[i],
            section_title=d.heading.title,
            section_content=d.text,
            ordinal=i,
            level=d.heading.level,
            parent_section_id=section_ids[d.parent] if d.parent is not None else None,
            page_numbers=d.pages,
            ref_paper_id=paper_id,
        )
        for i, d in enumerate(drafts)
    ]
    index = SectionIndex(pages, drafts)

    def section_id_of(i: int | None) -> str | None:
        return section_ids[i] if i is not None else None

    for c in chunk_rows:  # the section where each chunk starts
        c.ref_section_id = section_id_of(index.of_page_offset(c.page_number, chunk_starts[c.chunk_id]))

    # -- tables and figures (captions first, then the backend's regions and cells) ------------
    tick = time.perf_counter()
    heading_lines = {id(ln) for h in headings for ln in h.lines}
    captions = find_captions(pages, body, furniture)
    caption_lines = {id(ln) for c in captions for ln in c.lines}
    stops = heading_lines | caption_lines
    regions = locate_floats(captions, body, furniture, stops)
    floats = [
        FloatDraft(
            kind=cap.kind,
            label=cap.label,
            page=cap.page.number,
            caption=join_wrapped([ln.text for ln in cap.lines], vocabulary),
            bbox=region,
            html=table_html(cap.page, region) if cap.kind == "table" and region and not cap.rotated else None,
            anchor=cap.lines[0],
        )
        for cap, region in zip(captions, regions)
    ]
    for f in floats:
        if f.html is not None:
            f.source = "words"
    equations = [eq for p in pages for eq in find_equations(p, body, furniture, stops)]
    _add_time(timings, "floats_equations", tick)
    backend = settings.parse_backend
    if backend == "layout":
        from neusym.ingest.parse.layout import refine_with_layout

        floats, equations = refine_with_layout(opened, floats, equations, timings=timings)
    elif backend == "mineru":
        from neusym.ingest.parse.mineru import refine_with_mineru

        floats, equations = refine_with_mineru(opened, floats, equations, settings, timings=timings)
    elif backend != "pymupdf":
        raise ValueError(f"unknown parse_backend {backend!r}: expected 'pymupdf', 'layout' or 'mineru'")

    table_rows: list[Table] = []
    image_rows: list[Image] = []
    ordinals: Counter[tuple[str, int]] = Counter()
    for f in sorted(floats, key=lambda f: f.page):  # stable: caption order within a page
        n = ordinals[(f.kind, f.page)]
        ordinals[(f.kind, f.page)] += 1
        bbox = to_record_bbox(f.bbox) if f.bbox else None
        section = f.section if f.section is not None else (
            index.of_line(f.anchor) if f.anchor is not None else index.of_region(f.page, f.bbox or (0, 0, 0, 0))
        )
        if f.kind == "table":
            table_rows.append(
                Table(
                    table_id=element_id(paper_id, "table", f.page, n),
                    table_caption=f.caption,
                    table_content=f.html,
                    table_source=f.source if f.html is not None else None,
                    bounding_box=bbox,
                    ordinal=n,
                    page_number=f.page,
                    ref_paper_id=paper_id,
                    ref_page_id=page_ids[f.page],
                    ref_section_id=section_id_of(section),
                )
            )
        else:
            image_rows.append(
                Image(
                    image_id=element_id(paper_id, "image", f.page, n),
                    image_caption=f.caption,
                    bounding_box=bbox,
                    ordinal=n,
                    page_number=f.page,
                    ref_paper_id=paper_id,
                    ref_page_id=page_ids[f.page],
                    ref_section_id=section_id_of(section),
                )
            )

    # -- equations -------------------------------------------------------------------------
    equation_rows: list[Equation] = []
    eq_ordinals: Counter[int] = Counter()
    for eq in sorted(equations, key=lambda e: (e.page.number, index.reading_position(e.page.number, e.bbox), e.bbox[1])):
        n = eq_ordinals[eq.page.number]
        eq_ordinals[eq.page.number] += 1
        equation_rows.append(
            Equation(
                equation_id=element_id(paper_id, "equation", eq.page.number, n),
                equation_content=eq.text,
                equation_number=eq.number,
                bounding_box=to_record_bbox(eq.bbox),
                ordinal=n,
                page_number=eq.page.number,
                ref_paper_id=paper_id,
                ref_page_id=page_ids[eq.page.number],
                ref_section_id=section_id_of(index.of_region(eq.page.number, eq.bbox)),
            )
        )

    # -- references ------------------------------------------------------------------------
    tick = time.perf_counter()
    ref_lines = [ln for d in drafts if norm(d.heading.title) in REFERENCE_HEADINGS for ln in d.content]
    reference_rows = [
        Reference(
            reference_id=element_id(paper_id, "reference", i),
            reference_content=r.text,
            ordinal=i,
            page_number=r.page,
            ref_paper_id=paper_id,
            ref_page_id=page_ids[r.page],
            ref_section_id=section_id_of(index.of_line(r.line)) if r.line is not None else None,
        )
        for i, r in enumerate(split_references(ref_lines, pages, vocabulary))
    ]
    _add_time(timings, "references", tick)

    return ParsedPaper(
        metadata=metadata,
        pages=page_rows,
        sections=section_rows,
        chunks=chunk_rows,
        tables=table_rows,
        images=image_rows,
        equations=equation_rows,
        reference=reference_rows,
    )


def _paragraphs(lines: list, vocabulary: set[str]) -> str:
    """Running text of lines: footnote marks dropped, wrapped lines joined, one paragraph per block."""
    blocks: list[list[str]] = []
    prev = None
    for ln in lines:
        key = (ln.page, ln.block)
        if key != prev:
            blocks.append([])
            prev = key
        blocks[-1].append(clean_line_text(ln))
    return "\n\n".join(t for t in (join_wrapped(b, vocabulary) for b in blocks) if t)


def _fallback_title(opened: OpenedPDF) -> str:
    """First substantial text line of page 1, else the file name (the title column is NOT NULL)."""
    for line in opened.pages[0].lines:
        if sum(c.isalpha() for c in line.text) >= 8:
            return line.text[:200]
    return opened.path.stem
