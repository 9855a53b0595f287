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

from pathlib import Path

import pymupdf

from ..errors import UnparseablePDF
from ..ids import element_id, paper_id_for
from ..records import Chunk, Equation, Image, Metadata, Page, ParsedPaper, Reference, Section, Table
from ..settings import Settings, get_settings
from . import chunks as _chunks
from .elements import find_captions, find_equations, locate_floats, split_references, table_html
from .metadata import abstract_from_page, clean_line_text, extract_metadata
from .pdf import OpenedPDF, body_font_size, find_furniture, open_pdf, to_record_bbox
from .sections import REFERENCE_HEADINGS, build_sections, detect_headings, front_matter, toc_headings
from .text import join_wrapped, norm, unwrap, vocabulary_of

__all__ = ["PARSER_VERSION", "parse_pdf", "UnparseablePDF"]

PARSER_VERSION = "1"
"""Version of the parse output. Bump it whenever :func:`parse_pdf` can return different records
for the same PDF bytes, so that staged parses made by an older parser are redone."""


def parse_pdf(path: Path | str, settings: Settings | None = None, *, paper_id: str | None = None) -> ParsedPaper:
    """Parse the PDF at ``path`` into a :class:`~neusym.records.ParsedPaper`.

    ``settings`` defaults to :func:`neusym.settings.get_settings`; only ``chunk_tokens`` is used.
    ``paper_id``: the id of an already known (crawled) paper this PDF belongs to; by default the id
    is derived from the title printed in the PDF (:func:`neusym.ids.paper_id_for`).
    Raises :class:`~neusym.errors.UnparseablePDF` (``.reason`` is a short explanation) when the
    file is unreadable, corrupt or truncated, encrypted with a user password, has zero pages, or
    has no text layer. Parsing the same bytes twice yields identical records (ids included).
    """
    settings = settings or get_settings()
    path = Path(path)
    opened = open_pdf(path)
    try:
        return _build(opened, settings, paper_id)
    except (pymupdf.FileDataError, pymupdf.mupdf.FzErrorBase) as exc:  # damage found late (a page's content)
        raise UnparseablePDF(path, f"corrupt: {' '.join(str(exc).split())[:200]}") from exc
    finally:
        opened.doc.close()


def _build(opened: OpenedPDF, settings: Settings, known_paper_id: str | None = None) -> ParsedPaper:
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

    # -- pages and chunks ------------------------------------------------------------------
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
        for i, piece in enumerate(_chunks.split_page(content, settings.chunk_tokens)):
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

    # -- tables and figures ----------------------------------------------------------------
    heading_lines = {id(ln) for h in headings for ln in h.lines}
    captions = find_captions(pages, body, furniture)
    caption_lines = {id(ln) for c in captions for ln in c.lines}
    stops = heading_lines | caption_lines
    regions = dict(zip(map(id, captions), locate_floats(captions, body, furniture, stops)))
    table_rows: list[Table] = []
    image_rows: list[Image] = []
    for p in pages:
        on_page = [c for c in captions if c.page is p]
        t_ord = i_ord = 0
        for cap in on_page:
            region = regions[id(cap)]
            bbox = to_record_bbox(region) if region else None
            if cap.kind == "table":
                table_rows.append(
                    Table(
                        table_id=element_id(paper_id, "table", p.number, t_ord),
                        table_caption=join_wrapped([ln.text for ln in cap.lines], vocabulary),
                        table_content=table_html(p, region) if region else None,
                        bounding_box=bbox,
                        ordinal=t_ord,
                        page_number=p.number,
                        ref_paper_id=paper_id,
                        ref_page_id=page_ids[p.number],
                    )
                )
                t_ord += 1
            else:
                image_rows.append(
                    Image(
                        image_id=element_id(paper_id, "image", p.number, i_ord),
                        image_caption=join_wrapped([ln.text for ln in cap.lines], vocabulary),
                        bounding_box=bbox,
                        ordinal=i_ord,
                        page_number=p.number,
                        ref_paper_id=paper_id,
                        ref_page_id=page_ids[p.number],
                    )
                )
                i_ord += 1

    # -- equations -------------------------------------------------------------------------
    equation_rows: list[Equation] = []
    for p in pages:
        for i, eq in enumerate(find_equations(p, body, furniture, stops)):
            equation_rows.append(
                Equation(
                    equation_id=element_id(paper_id, "equation", p.number, i),
                    equation_content=eq.text,
                    equation_number=eq.number,
                    bounding_box=to_record_bbox(eq.bbox),
                    ordinal=i,
                    page_number=p.number,
                    ref_paper_id=paper_id,
                    ref_page_id=page_ids[p.number],
                )
            )

    # -- references ------------------------------------------------------------------------
    ref_lines = [ln for d in drafts if norm(d.heading.title) in REFERENCE_HEADINGS for ln in d.content]
    reference_rows = [
        Reference(
            reference_id=element_id(paper_id, "reference", i),
            reference_content=r.text,
            ordinal=i,
            page_number=r.page,
            ref_paper_id=paper_id,
            ref_page_id=page_ids[r.page],
        )
        for i, r in enumerate(split_references(ref_lines, pages, vocabulary))
    ]

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
