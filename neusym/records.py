"""Typed records of the eight NeuSym tables, as produced by parsing and loaded by materialization.

Field names are exactly the column names of the DuckDB schema in ``sql/schema.sql`` (the source of
truth, with a comment on every column). Conventions used everywhere:

- ids are UUID strings (see :mod:`neusym.ids`);
- page numbers start at 1;
- ``ref_section_id`` of an element is the section (:class:`Section`) whose span contains it (the
  section of its caption / first line), ``None`` before the first heading;
- a bounding box is ``[x0, y0, width, height]`` in PDF points (1/72 inch), origin at the top-left
  corner of the page, y growing downwards (PyMuPDF's page coordinates). ``ViewImage`` crops exactly
  that region.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

BBox = list[float]  # [x0, y0, width, height] in PDF points


class Metadata(BaseModel):
    paper_id: str
    title: str
    abstract: str | None = None
    num_pages: int | None = None
    conference_full: str | None = None
    conference_abbreviation: str | None = None
    pub_year: int | None = None
    volume: str | None = None
    download_url: str | None = None
    bibtex: str | None = None
    authors: list[str] = Field(default_factory=list)
    pdf_path: str | None = None
    pdf_sha256: str | None = None
    tldr: str | None = None
    tags: list[str] = Field(default_factory=list)
    airqa_paper_id: str | None = None


class Page(BaseModel):
    page_id: str
    page_number: int
    page_width: float
    page_height: float
    page_content: str
    page_summary: str | None = None
    ref_paper_id: str


class Section(BaseModel):
    section_id: str
    section_title: str
    section_content: str
    section_summary: str | None = None
    ordinal: int
    level: int = 1
    parent_section_id: str | None = None
    page_numbers: list[int]
    ref_paper_id: str


class Chunk(BaseModel):
    chunk_id: str
    text_content: str
    ordinal: int
    page_number: int
    ref_paper_id: str
    ref_page_id: str
    ref_section_id: str | None = None


class Table(BaseModel):
    table_id: str
    table_caption: str
    table_content: str | None = None
    table_source: str | None = None
    table_summary: str | None = None
    bounding_box: BBox | None = None
    ordinal: int
    page_number: int
    ref_paper_id: str
    ref_page_id: str
    ref_section_id: str | None = None


class Image(BaseModel):
    image_id: str
    image_caption: str
    image_summary: str | None = None
    image_ocr_text: str | None = None
    bounding_box: BBox | None = None
    ordinal: int
    page_number: int
    ref_paper_id: str
    ref_page_id: str
    ref_section_id: str | None = None


class Equation(BaseModel):
    equation_id: str
    equation_content: str
    equation_number: str | None = None
    bounding_box: BBox | None = None
    ordinal: int
    page_number: int
    ref_paper_id: str
    ref_page_id: str
    ref_section_id: str | None = None


class Reference(BaseModel):
    reference_id: str
    reference_content: str
    ordinal: int
    page_number: int
    ref_paper_id: str
    ref_page_id: str
    ref_section_id: str | None = None


class ParsedPaper(BaseModel):
    """Everything parsed from one PDF: one ``Metadata`` row plus the rows of the seven element tables."""

    metadata: Metadata
    pages: list[Page]
    sections: list[Section]
    chunks: list[Chunk]
    tables: list[Table]
    images: list[Image]
    equations: list[Equation]
    reference: list[Reference]

    @property
    def paper_id(self) -> str:
        return self.metadata.paper_id

    def rows(self) -> dict[str, list[BaseModel]]:
        """Rows per table name, in schema order (``metadata`` first)."""
        return {
            "metadata": [self.metadata],
            "pages": list(self.pages),
            "sections": list(self.sections),
            "chunks": list(self.chunks),
            "tables": list(self.tables),
            "images": list(self.images),
            "equations": list(self.equations),
            "reference": list(self.reference),
        }


TABLE_RECORDS: dict[str, type[BaseModel]] = {
    "metadata": Metadata,
    "pages": Page,
    "sections": Section,
    "chunks": Chunk,
    "tables": Table,
    "images": Image,
    "equations": Equation,
    "reference": Reference,
}
"""Record type of each of the eight tables, in load order."""
