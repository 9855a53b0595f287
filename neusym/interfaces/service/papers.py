"""One paper as the service shows it (metadata, section tree, tables, figures, equations,
references) and its pages rendered as PNG with a highlighted box (what a citation points at).

Reads only the served corpus version (a DuckDB cursor of :class:`~neusym.interfaces.service.corpus.ServedVersion`)
and the stored PDF named by ``metadata.pdf_path`` (:mod:`neusym.store.pdfs`). Table HTML comes from the PDF parser and is sanitised
with ``nh3`` (Ammonia) down to table markup before it is sent: nothing from a PDF can inject markup
or script into the page.
"""

from __future__ import annotations

import hashlib
import math
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neusym.query.agent.actions import MAX_COORDINATE

TABLE_TAGS = {"table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "br", "sub", "sup", "b", "i", "em",
              "strong"}
TABLE_ATTRIBUTES = {"td": {"colspan", "rowspan"}, "th": {"colspan", "rowspan"}}

ZOOM_DEFAULT = 1.5
"""Page rendering scale: 1.5 = 108 dpi (PDF points are 1/72 inch)."""
ZOOM_RANGE = (0.5, 4.0)
MAX_PIXELS = 16_000_000
"""Pixel budget of one rendered image (4000 x 4000): a larger page or zoom is rendered at the largest
zoom that fits (the response's ``X-Neusym-Zoom`` says which)."""
CROP_MARGIN = 6.0
"""Points kept around a cropped box."""
HIGHLIGHT_STROKE = (0.91, 0.33, 0.0)
HIGHLIGHT_FILL = (1.0, 0.78, 0.0)


class NotFound(LookupError):
    """An unknown paper, page, or a paper without a PDF on this server (HTTP 404); the message says which."""


class BadRequest(ValueError):
    """A malformed argument (HTTP 400); the message names it and the reason."""


def parse_paper_id(raw: str) -> str:
    """The canonical UUID string of a paper id. Raises :class:`NotFound` naming it when it is not a UUID
    (no paper can have such an id)."""
    try:
        return str(uuid.UUID(str(raw).strip()))
    except (ValueError, AttributeError):
        raise NotFound(f"no paper with id {str(raw)[:80]!r}: paper ids are UUIDs "
                       "(e.g. from /search or metadata.paper_id)") from None


def sanitize_table_html(html: str | None) -> str | None:
    """``tables.table_content`` reduced to table markup (table/tr/th/td ... with colspan/rowspan);
    everything else is dropped and text is escaped. None stays None."""
    if html is None:
        return None
    import nh3

    return nh3.clean(html, tags=TABLE_TAGS, attributes=TABLE_ATTRIBUTES, strip_comments=True, link_rel=None)


def _box(value: Any) -> list[float] | None:
    if value is None:
        return None
    try:
        box = [float(v) for v in value]
    except (TypeError, ValueError):
        return None
    return [round(v, 2) for v in box] if len(box) == 4 and all(math.isfinite(v) for v in box) else None


def _rows(cur: Any, sql: str, params: list) -> list[dict]:
    cur.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def _tables_of(cur: Any) -> set[str]:
    cur.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'")
    return {r[0] for r in cur.fetchall()}


def paper_detail(cur: Any, paper_id: str, settings: Any = None) -> dict:
    """Everything the paper view shows about one paper, JSON-ready.

    ``cur``: a DuckDB cursor on a corpus version; ``paper_id``: a UUID string. Returns
    ``{"paper_id", "title", "abstract", "authors", "venue", "conference_full", "year", "volume",
    "num_pages", "download_url", "tldr", "tags", "airqa_paper_id", "has_pdf", "pages": [{"page_number",
    "width", "height"}], "sections": [tree: {"section_id", "title", "level", "ordinal", "page_numbers",
    "content", "summary", "children": [...]}], "tables": [{"table_id", "caption", "content_html",
    "summary", "page_number", "bounding_box"}], "figures": [{"image_id", "caption", "summary",
    "ocr_text", "page_number", "bounding_box"}], "equations": [{"equation_id", "content", "number",
    "page_number", "bounding_box"}], "references": [{"reference_id", "content", "ordinal",
    "page_number", "cited_paper_id", "cited_title"}], "cited_by": [{"paper_id", "title", "venue", "year"}],
    "counts": {...}}``; ``cited_paper_id``/``cited_title`` name the corpus paper a reference names (None
    when it names none, or the version predates the citation graph), ``cited_by`` the corpus papers
    whose references name this one (``citation_links``); bounding boxes are ``[x0, y0, width, height]`` in PDF points
    from the top-left corner. ``has_pdf``: the paper's PDF is readable on this host (needs
    ``settings``: :func:`neusym.store.pdfs.pdf_file`; False without them). Raises :class:`NotFound`
    for an unknown or malformed id.
    """
    from neusym.store.pdfs import pdf_file

    pid = parse_paper_id(paper_id)
    meta = _rows(cur, "SELECT * FROM metadata WHERE paper_id = ?", [pid])
    if not meta:
        raise NotFound(f"no paper with id {pid} in this corpus version")
    m = meta[0]
    present = _tables_of(cur)

    def rows(table: str, sql: str) -> list[dict]:
        return _rows(cur, sql, [pid]) if table in present else []

    pages = rows("pages", "SELECT page_number, page_width, page_height FROM pages WHERE ref_paper_id = ? "
                          "ORDER BY page_number")
    sections = rows("sections", "SELECT section_id::VARCHAR AS section_id, section_title, section_content, "
                                "section_summary, ordinal, level, parent_section_id::VARCHAR AS parent_section_id, "
                                "page_numbers FROM sections WHERE ref_paper_id = ? ORDER BY ordinal")
    tables = rows("tables", "SELECT table_id::VARCHAR AS table_id, table_caption, table_content, table_summary, "
                            "page_number, bounding_box FROM tables WHERE ref_paper_id = ? ORDER BY page_number, ordinal")
    images = rows("images", "SELECT image_id::VARCHAR AS image_id, image_caption, image_summary, image_ocr_text, "
                            "page_number, bounding_box FROM images WHERE ref_paper_id = ? ORDER BY page_number, ordinal")
    equations = rows("equations", "SELECT equation_id::VARCHAR AS equation_id, equation_content, equation_number, "
                                  "page_number, bounding_box FROM equations WHERE ref_paper_id = ? "
                                  "ORDER BY page_number, ordinal")
    if "citation_links" in present:  # the in-corpus citation graph (versions published since it exists)
        references = rows("reference", "SELECT r.reference_id::VARCHAR AS reference_id, r.reference_content, r.ordinal, "
                                       "r.page_number, l.cited_paper_id::VARCHAR AS cited_paper_id, "
                                       "c.title AS cited_title FROM reference r "
                                       "LEFT JOIN citation_links l ON l.reference_id = r.reference_id "
                                       "LEFT JOIN metadata c ON c.paper_id = l.cited_paper_id "
                                       "WHERE r.ref_paper_id = ? ORDER BY r.ordinal")
        cited_by = rows("citation_links", "SELECT DISTINCT m.paper_id::VARCHAR AS paper_id, m.title, "
                                          "m.conference_abbreviation AS venue, m.pub_year AS year FROM citation_links l "
                                          "JOIN metadata m ON m.paper_id = l.citing_paper_id WHERE l.cited_paper_id = ? "
                                          "ORDER BY m.pub_year DESC NULLS LAST, m.title")
    else:
        references = rows("reference", "SELECT reference_id::VARCHAR AS reference_id, reference_content, ordinal, "
                                       "page_number FROM reference WHERE ref_paper_id = ? ORDER BY ordinal")
        cited_by = []
    nodes: dict[str, dict] = {}
    roots: list[dict] = []
    for s in sections:
        nodes[s["section_id"]] = {
            "section_id": s["section_id"], "title": s["section_title"], "level": s["level"],
            "ordinal": s["ordinal"], "page_numbers": list(s["page_numbers"] or []),
            "content": s["section_content"], "summary": s["section_summary"], "children": [],
        }
    for s in sections:
        parent = nodes.get(s["parent_section_id"] or "")
        (parent["children"] if parent is not None else roots).append(nodes[s["section_id"]])
    pdf_path = m.get("pdf_path")
    return {
        "paper_id": pid,
        "title": m.get("title"),
        "abstract": m.get("abstract"),
        "authors": list(m.get("authors") or []),
        "venue": m.get("conference_abbreviation"),
        "conference_full": m.get("conference_full"),
        "year": m.get("pub_year"),
        "volume": m.get("volume"),
        "num_pages": m.get("num_pages"),
        "download_url": m.get("download_url"),
        "tldr": m.get("tldr"),
        "tags": list(m.get("tags") or []),
        "airqa_paper_id": str(m["airqa_paper_id"]) if m.get("airqa_paper_id") else None,
        "has_pdf": bool(pdf_path) and settings is not None and pdf_file(settings, pdf_path) is not None,
        "pages": [{"page_number": p["page_number"], "width": p["page_width"], "height": p["page_height"]}
                  for p in pages],
        "sections": roots,
        "tables": [{"table_id": t["table_id"], "caption": t["table_caption"],
                    "content_html": sanitize_table_html(t["table_content"]), "summary": t["table_summary"],
                    "page_number": t["page_number"], "bounding_box": _box(t["bounding_box"])} for t in tables],
        "figures": [{"image_id": i["image_id"], "caption": i["image_caption"], "summary": i["image_summary"],
                     "ocr_text": i["image_ocr_text"], "page_number": i["page_number"],
                     "bounding_box": _box(i["bounding_box"])} for i in images],
        "equations": [{"equation_id": e["equation_id"], "content": e["equation_content"],
                       "number": e["equation_number"], "page_number": e["page_number"],
                       "bounding_box": _box(e["bounding_box"])} for e in equations],
        "references": [{"reference_id": r["reference_id"], "content": r["reference_content"],
                        "ordinal": r["ordinal"], "page_number": r["page_number"],
                        "cited_paper_id": r.get("cited_paper_id"), "cited_title": r.get("cited_title")}
                       for r in references],
        "cited_by": cited_by,
        "counts": {"pages": len(pages), "sections": len(sections), "tables": len(tables), "figures": len(images),
                   "equations": len(equations), "references": len(references),
                   "references_in_corpus": sum(1 for r in references if r.get("cited_paper_id")),
                   "cited_by": len(cited_by)},
    }


def paper_titles(cur: Any, paper_ids: list[str]) -> dict[str, str]:
    """``{paper_id: title}`` of the ids (UUID strings) that exist in the version."""
    if not paper_ids:
        return {}
    cur.execute("SELECT paper_id::VARCHAR, title FROM metadata WHERE paper_id::VARCHAR IN "
                f"({', '.join('?' for _ in paper_ids)})", list(paper_ids))
    return {pid: title for pid, title in cur.fetchall()}


# ------------------------------------------------------------------------------- page images
def parse_bbox(raw: str | None) -> tuple[float, float, float, float] | None:
    """``"x0,y0,w,h"`` (PDF points from the top-left corner) -> a tuple; None for no box.
    Raises :class:`BadRequest` unless it is four finite numbers within ±:data:`MAX_COORDINATE` with
    positive width and height."""
    if raw is None or not str(raw).strip():
        return None
    parts = [p.strip() for p in str(raw).split(",")]
    if len(parts) != 4:
        raise BadRequest(f"bbox must be four numbers x0,y0,width,height (PDF points from the top-left corner), "
                         f"got {str(raw)[:80]!r}")
    try:
        x0, y0, w, h = (float(p) for p in parts)
    except ValueError:
        raise BadRequest(f"bbox must be four numbers x0,y0,width,height, got {str(raw)[:80]!r}") from None
    if not all(math.isfinite(v) for v in (x0, y0, w, h)):
        raise BadRequest("bbox values must be finite numbers")
    if not all(abs(v) <= MAX_COORDINATE for v in (x0, y0, w, h)):
        raise BadRequest(f"bbox values must lie within ±{MAX_COORDINATE:g} PDF points, got {str(raw)[:80]!r}")
    if w <= 0 or h <= 0:
        raise BadRequest(f"bbox width and height must be positive, got width {w:g} and height {h:g}")
    return (x0, y0, w, h)


@dataclass(frozen=True)
class PageImage:
    """A rendered page: ``png`` bytes, pixel ``width``/``height``, an ``etag`` (same input, same tag)
    and the ``zoom`` it was rendered at (lower than asked when the pixel budget required it)."""

    png: bytes
    width: int
    height: int
    etag: str
    zoom: float = ZOOM_DEFAULT


def pdf_of(cur: Any, paper_id: str, settings: Any) -> tuple[Path, str | None]:
    """The PDF file of a paper and its sha256: the stored bytes named by ``metadata.pdf_path``
    (:func:`neusym.store.pdfs.pdf_file`, pulled from the shared storage when needed). Raises
    :class:`NotFound` for an unknown paper or one without a PDF file on this server (metadata-only
    papers)."""
    from neusym.store.pdfs import pdf_file

    pid = parse_paper_id(paper_id)
    cur.execute("SELECT pdf_path, pdf_sha256 FROM metadata WHERE paper_id = ?", [pid])
    row = cur.fetchone()
    if row is None:
        raise NotFound(f"no paper with id {pid} in this corpus version")
    path, sha = row
    if not path:
        raise NotFound(f"paper {pid} has no PDF in this corpus (only its metadata is known)")
    local = pdf_file(settings, path)
    if local is None:
        raise NotFound(f"the PDF of paper {pid} is not on this server any more ({Path(path).name})")
    return local, sha


class PageRenderer:
    """Renders PDF pages to PNG with PyMuPDF, keeping the last ``cache_size`` images in memory."""

    def __init__(self, cache_size: int = 64):
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple, PageImage] = OrderedDict()
        self._lock = threading.Lock()

    def render(self, pdf: Path, page_number: int, *, bbox: tuple[float, float, float, float] | None = None,
               zoom: float = ZOOM_DEFAULT, crop: bool = False, key: str | None = None) -> PageImage:
        """Page ``page_number`` (from 1) of ``pdf`` as PNG at ``zoom`` (1 = 72 dpi), with ``bbox``
        (x0, y0, width, height in PDF points from the top-left corner) outlined and shaded (the part
        of it on the page); with ``crop`` only the box and a small margin are rendered. At most
        :data:`MAX_PIXELS` pixels are rendered: a larger page or region is rendered at the largest
        zoom that fits (``PageImage.zoom``). ``key`` identifies the PDF content (its sha256) for the
        cache and the ETag. Raises :class:`NotFound` for a page the PDF does not have,
        :class:`BadRequest` for a zoom outside 0.5-4, a box outside the page, or ``crop`` without a
        box."""
        import pymupdf

        if not (ZOOM_RANGE[0] <= zoom <= ZOOM_RANGE[1]) or not math.isfinite(zoom):
            raise BadRequest(f"zoom must be between {ZOOM_RANGE[0]:g} and {ZOOM_RANGE[1]:g}, got {zoom:g}")
        if crop and bbox is None:
            raise BadRequest("crop=true needs a bbox")
        ident = key or f"{pdf}:{pdf.stat().st_mtime_ns}"
        cache_key = (ident, page_number, bbox, round(zoom, 3), crop)
        with self._lock:
            hit = self._cache.get(cache_key)
            if hit is not None:
                self._cache.move_to_end(cache_key)
                return hit
        with pymupdf.open(str(pdf)) as doc:
            if not 1 <= page_number <= doc.page_count:
                raise NotFound(f"page {page_number} does not exist: this paper has pages 1-{doc.page_count}")
            page = doc[page_number - 1]
            clip = None
            if bbox is not None:
                x0, y0, w, h = bbox
                rect = pymupdf.Rect(x0, y0, x0 + w, y0 + h)
                if not rect.intersects(page.rect):
                    raise BadRequest(f"bbox {list(bbox)} lies outside page {page_number} "
                                     f"(0,0,{page.rect.width:g},{page.rect.height:g})")
                rect = rect & page.rect
                if crop:
                    clip = (rect + (-CROP_MARGIN, -CROP_MARGIN, CROP_MARGIN, CROP_MARGIN)) & page.rect
                else:
                    shape = page.new_shape()
                    shape.draw_rect(rect)
                    shape.finish(color=HIGHLIGHT_STROKE, fill=HIGHLIGHT_FILL, fill_opacity=0.22, width=2.0)
                    shape.commit()
            area = (clip or page.rect).width * (clip or page.rect).height
            scale = min(zoom, math.sqrt(MAX_PIXELS / area)) if area > 0 else zoom
            pix = page.get_pixmap(matrix=pymupdf.Matrix(scale, scale), clip=clip, alpha=False)
            png = pix.tobytes("png")
        etag = hashlib.sha256(repr(cache_key).encode()).hexdigest()[:32]
        image = PageImage(png=png, width=pix.width, height=pix.height, etag=etag, zoom=round(scale, 4))
        with self._lock:
            self._cache[cache_key] = image
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return image


def public_base_url(scope: dict, public_url: str | None) -> str:
    """The base of the absolute links a response carries (ends with ``/``): ``public_url``
    (``NEUSYM_PUBLIC_URL``) when set, else the scheme and the local address of the socket the request
    arrived on (the ASGI scope's ``server``) plus the app's ``root_path``. Never the request's ``Host``
    header, which a client chooses (a feed or citation link must not point where a request said)."""
    if public_url:
        return public_url if public_url.endswith("/") else public_url + "/"
    host, port = (scope.get("server") or ("127.0.0.1", None))[:2]
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    if ":" in str(host):
        host = f"[{host}]"
    default = {"http": 80, "https": 443}[scheme]
    netloc = f"{host}:{port}" if port and port != default else str(host)
    root = (scope.get("root_path") or "").rstrip("/")
    return f"{scheme}://{netloc}{root}/"
