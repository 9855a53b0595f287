"""Text printed inside a figure, read by OCR: the source of ``images.image_ocr_text``.

Figures are mostly vector drawings or raster images whose labels (axes, legends, node names) are
often not in the PDF's text layer, or are scattered there as unordered fragments. RapidOCR
(PP-OCR detection + recognition models bundled in the ``rapidocr`` wheel, ONNX on the CPU, no
download) reads the figure region rendered at :data:`OCR_DPI`.

Not run inside :func:`neusym.parse.parse_pdf`: it costs ~1-3 s per figure on 2 cores, so the
pipeline runs it as a separate stage over the ``images`` rows (``bounding_box`` is exactly the
region given here).
"""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path

import pymupdf

from ..errors import UnparseablePDF

OCR_DPI = 200
"""Render resolution for OCR: 9pt figure labels come out ~25 px tall, which PP-OCR reads well;
higher costs time without better text."""

MIN_SCORE = 0.5
"""Recognised lines with a lower confidence are dropped."""

MAX_PIXELS = 4_000_000
"""Larger crops are rendered at a lower resolution to bound memory and time (a full page at
200 dpi is ~3.9 Mpx)."""

_lock = threading.Lock()


@lru_cache(maxsize=1)
def ocr_engine():
    """The RapidOCR engine (bundled PP-OCR models), loaded once per process (~1 s)."""
    import logging

    from rapidocr import RapidOCR

    engine = RapidOCR()
    logging.getLogger("RapidOCR").setLevel(logging.WARNING)
    return engine


def ocr_image_text(pdf_path: Path | str, page_number: int, bbox: list[float] | tuple[float, ...], *, dpi: int = OCR_DPI) -> str:
    """Text inside a region of a PDF page, read by OCR.

    ``pdf_path``: the PDF; ``page_number``: from 1; ``bbox``: ``[x0, y0, width, height]`` in PDF
    points from the top-left corner of the page (the convention of every ``bounding_box``
    column). The region (clipped to the page) is rendered at ``dpi`` (lowered for very large
    regions, see :data:`MAX_PIXELS`) and read with RapidOCR.

    Returns the recognised lines in reading order (top to bottom, then left to right, lines
    whose vertical centres are within half a line height count as one row; the pieces of a row
    joined by a space, rows by a newline); ``""`` when the region holds no readable text.
    Costs ~1-3 s per figure on 2 CPU cores.

    Raises :class:`~neusym.errors.UnparseablePDF` when the file cannot be opened, and
    :class:`ValueError` naming the file for a page number outside the document or a box with no
    area on the page.
    """
    path = Path(pdf_path)
    try:
        doc = pymupdf.open(path)
    except Exception as exc:  # pymupdf raises FileNotFoundError/FileDataError/RuntimeError
        raise UnparseablePDF(path, f"unreadable: {' '.join(str(exc).split())[:200]}") from exc
    with doc:
        if not 1 <= page_number <= doc.page_count:
            raise ValueError(f"{path}: page {page_number} out of range 1..{doc.page_count}")
        page = doc[page_number - 1]
        if len(bbox) != 4:
            raise ValueError(f"{path}: bbox must be [x0, y0, width, height], got {list(bbox)}")
        x0, y0, w, h = (float(v) for v in bbox)
        clip = pymupdf.Rect(x0, y0, x0 + w, y0 + h) & page.rect
        if clip.is_empty or clip.width < 1 or clip.height < 1:
            raise ValueError(f"{path}: bbox {list(bbox)} has no area on page {page_number} ({page.rect})")
        scale = dpi / 72.0
        pixels = clip.width * clip.height * scale * scale
        if pixels > MAX_PIXELS:
            scale *= (MAX_PIXELS / pixels) ** 0.5
        pix = page.get_pixmap(matrix=pymupdf.Matrix(scale, scale), clip=clip, colorspace=pymupdf.csRGB, alpha=False)
        png = pix.tobytes("png")
    with _lock:
        result = ocr_engine()(png)
    boxes = result.boxes if result.boxes is not None else []
    texts = result.txts or ()
    scores = result.scores or ()
    pieces = []
    for box, text, score in zip(boxes, texts, scores):
        if score < MIN_SCORE or not str(text).strip():
            continue
        ys = [float(p[1]) for p in box]
        xs = [float(p[0]) for p in box]
        pieces.append((min(ys), max(ys), min(xs), str(text).strip()))
    return _reading_order(pieces)


def _reading_order(pieces: list[tuple[float, float, float, str]]) -> str:
    """Join ``(y0, y1, x0, text)`` pieces into rows (top to bottom), each row left to right."""
    rows: list[list[tuple[float, float, float, str]]] = []
    for piece in sorted(pieces, key=lambda p: (p[0] + p[1]) / 2):
        centre = (piece[0] + piece[1]) / 2
        if rows:
            last = rows[-1]
            lc = sum((p[0] + p[1]) / 2 for p in last) / len(last)
            height = max(p[1] - p[0] for p in last)
            if abs(centre - lc) < 0.5 * max(height, piece[1] - piece[0]):
                last.append(piece)
                continue
        rows.append([piece])
    return "\n".join(" ".join(p[3] for p in sorted(row, key=lambda p: p[2])) for row in rows)


__all__ = ["OCR_DPI", "ocr_engine", "ocr_image_text"]
