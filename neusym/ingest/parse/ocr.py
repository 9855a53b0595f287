"""Text printed inside a figure, read by OCR: the source of ``images.image_ocr_text``.

Figures are mostly vector drawings or raster images whose labels (axes, legends, node names) are
often not in the PDF's text layer, or are scattered there as unordered fragments. RapidOCR
(PP-OCR detection + recognition models bundled in the ``rapidocr`` wheel, ONNX on the CPU, no
download) reads the figure region rendered at :data:`OCR_DPI`.

Not run inside :func:`neusym.ingest.parse.parse_pdf`: it costs ~1-3 s per figure on 2 cores, so the
pipeline runs it as a separate stage over the ``images`` rows (``bounding_box`` is exactly the
region given here).
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from pathlib import Path

import pymupdf

from neusym.errors import UnparseablePDF

OCR_DPI = 200
"""Render resolution for OCR: 9pt figure labels come out ~25 px tall, which PP-OCR reads well;
higher costs time without better text."""

OCR_LAYOUT_VERSION = 2
"""Version of how recognised pieces are joined into text (2: values under labels paired, rotated
titles on rows of their own). Part of the OCR cache key (:func:`neusym.ingest.enrich.prompt_version`), so
a refresh re-reads figures read the older way."""

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
        pieces.append((min(ys), max(ys), min(xs), str(text).strip(), max(xs)))
    return _reading_order(pieces)


_VALUE = re.compile(r"^\(?\s*(?:[A-Za-z]{1,3}\s*[=:]\s*)?[-−+]?\d[\d.,]*\s*[%kKMB]?\s*\)?$")
"""An OCR piece that is a value printed under a label: "(n=1999)", "0.21", "54%", "12M"."""


def _values_under_labels(upper: list[tuple], lower: list[tuple]) -> list[str] | None:
    """"label value" pairs when row ``lower`` prints values under the labels of row ``upper`` (a bar
    chart's categories with their counts below: "director" over "(n=1999)"), else None. Every lower
    piece is a value (3 or more), no upper piece is one, the rows are less than a line apart, and
    each value's centre lies within the x-range of one label; a label over k values must have k
    words (OCR read "Aggregate occupation" as one piece over "(n=14267)" and "(n=532)")."""
    if len(lower) < 3 or not all(_VALUE.match(p[3]) for p in lower) or any(_VALUE.match(p[3]) for p in upper):
        return None
    height = max(p[1] - p[0] for p in upper)
    if min(p[0] for p in lower) - max(p[1] for p in upper) > height:
        return None
    under: list[list[str]] = [[] for _ in upper]
    for lo in lower:
        centre = (lo[2] + lo[4]) / 2
        owners = [i for i, u in enumerate(upper) if u[2] - 0.25 * height <= centre <= u[4] + 0.25 * height]
        if len(owners) != 1:
            return None
        under[owners[0]].append(lo[3])
    pairs: list[str] = []
    for u, values in zip(upper, under):
        words = u[3].split()
        if not values or (len(values) > 1 and len(words) != len(values)):
            return None
        labels = words if len(values) > 1 else [u[3]]
        pairs += [f"{label} {value}" for label, value in zip(labels, values)]
    return pairs


def _reading_order(pieces: list[tuple]) -> str:
    """Join ``(y0, y1, x0, text, x1)`` pieces into rows (top to bottom), each row left to right.
    Pieces more than 2.5 times as tall as the median piece (rotated axis titles) are rows of their
    own, so they do not pull the rows they span into one. A row of values printed under a row of
    labels (:func:`_values_under_labels`) is joined to it pair by pair, "occupation (n=532), author
    (n=1514), ...": read as two rows, the labels and their values end up a line apart and a small
    model pairs them wrongly."""
    if not pieces:
        return ""
    heights = sorted(p[1] - p[0] for p in pieces)
    tall = 2.5 * heights[len(heights) // 2]
    rows: list[list[tuple]] = []
    for piece in sorted((p for p in pieces if p[1] - p[0] <= tall), key=lambda p: (p[0] + p[1]) / 2):
        centre = (piece[0] + piece[1]) / 2
        if rows:
            last = rows[-1]
            lc = sum((p[0] + p[1]) / 2 for p in last) / len(last)
            height = max(p[1] - p[0] for p in last)
            if abs(centre - lc) < 0.5 * max(height, piece[1] - piece[0]):
                last.append(piece)
                continue
        rows.append([piece])
    rows += [[p] for p in pieces if p[1] - p[0] > tall]
    ordered = sorted((sorted(row, key=lambda p: p[2]) for row in rows), key=lambda row: min(p[0] for p in row))
    lines: list[str] = []
    i = 0
    while i < len(ordered):
        pairs = _values_under_labels(ordered[i], ordered[i + 1]) if i + 1 < len(ordered) else None
        if pairs:
            lines.append(", ".join(pairs))
            i += 2
            continue
        lines.append(" ".join(p[3] for p in ordered[i]))
        i += 1
    return "\n".join(lines)


__all__ = ["OCR_DPI", "OCR_LAYOUT_VERSION", "ocr_engine", "ocr_image_text"]
