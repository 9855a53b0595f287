"""Opening a PDF safely and extracting its text layout (lines with font facts, in reading order).

Everything else in :mod:`neusym.ingest.parse` works on the :class:`PageLayout` objects built here, so the
PDF is read exactly once per page with ``page.get_text("dict")`` (PyMuPDF), plus the cheap
``page.get_bboxlog()`` call for the positions of drawings and images (only on pages that need
them).

Coordinates are PyMuPDF page coordinates: PDF points (1/72 inch) from the top-left corner of the
page, y growing downwards. ``bbox`` tuples are ``(x0, y0, x1, y1)``; the records convert them to
``[x0, y0, width, height]`` (:func:`to_record_bbox`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pymupdf

from neusym.errors import UnparseablePDF

MIN_TEXT_CHARS = 200
"""A PDF with fewer extractable (non-space) characters over all its pages has no usable text layer."""

TEXT_FLAGS = pymupdf.TEXT_PRESERVE_WHITESPACE | pymupdf.TEXT_MEDIABOX_CLIP
"""``get_text("dict")`` flags: no image payloads, ligatures expanded (``ﬁ`` -> ``fi``)."""

_BOLD_FONT = re.compile(r"bold|black|heavy|semibold|demi|medi|\.b$|-b$|cmbx|bx\d", re.I)
_MATH_FONT = re.compile(r"^(cm(mi|sy|ex|bsy|mib)|msbm|msam|eufm|rsfs|stix|.*math|.*symbol|txsy|txex|pxsy|esint|wasy)", re.I)
_MATH_CHARS = set("=+−-×·∑∏∫∂∇√≤≥≈≠∈∉⊂⊆∪∩∀∃→←↔⇒⟨⟩‖αβγδεζηθικλμνξπρστυφχψωΓΔΘΛΞΠΣΦΨΩ^_|{}[]()/<>∞∼~'")
_FOOTNOTE_SYMBOLS = "∗*†‡§¶♠♣♥♦♢♡⋆⋄"

Box = tuple[float, float, float, float]


@dataclass(slots=True)
class Span:
    """A run of text in one font: ``size`` in points, ``bold`` from the font flags or name."""

    text: str
    size: float
    bold: bool
    font: str
    bbox: Box
    space_before: bool = False  # a visible gap separates it from the previous span of the line

    @property
    def is_math(self) -> bool:
        """True when the span's font is a TeX/OpenType math font."""
        return bool(_MATH_FONT.match(self.font))


@dataclass(slots=True)
class Line:
    """One visual text line: PyMuPDF lines of a block that share a baseline, merged left to right.

    ``page`` is the 1-based page number, ``block`` the index of the block in the page's reading
    order, ``size`` the character-weighted dominant font size and ``bold`` whether most characters
    are bold.
    """

    text: str
    bbox: Box
    spans: list[Span]
    page: int
    block: int = 0
    size: float = 0.0
    bold: bool = False

    def __post_init__(self) -> None:
        weights: Counter[float] = Counter()
        bold_chars = 0
        total = 0
        for s in self.spans:
            n = len(s.text.strip())
            if not n:
                continue
            weights[round(s.size, 1)] += n
            total += n
            if s.bold:
                bold_chars += n
        self.size = weights.most_common(1)[0][0] if weights else 0.0
        self.bold = total > 0 and bold_chars >= 0.6 * total

    @property
    def max_size(self) -> float:
        """Largest font size (points) among the line's visible spans."""
        return max((s.size for s in self.spans if s.text.strip()), default=self.size)

    @property
    def x0(self) -> float:
        """Left edge (points)."""
        return self.bbox[0]

    @property
    def y0(self) -> float:
        """Top edge (points)."""
        return self.bbox[1]

    @property
    def x1(self) -> float:
        """Right edge (points)."""
        return self.bbox[2]

    @property
    def y1(self) -> float:
        """Bottom edge (points)."""
        return self.bbox[3]

    @property
    def height(self) -> float:
        """Height of the line box (points)."""
        return self.bbox[3] - self.bbox[1]

    def math_fraction(self) -> float:
        """Share of the line's non-space characters in math fonts or math symbols (0..1)."""
        total = 0
        math = 0
        for s in self.spans:
            for ch in s.text:
                if ch.isspace():
                    continue
                total += 1
                if s.is_math or ch in _MATH_CHARS:
                    math += 1
        return math / total if total else 0.0


@dataclass(slots=True)
class Block:
    """A PyMuPDF text block (a paragraph-like group of lines) with its merged visual lines."""

    bbox: Box
    lines: list[Line]

    @property
    def text(self) -> str:
        """The block's lines joined by newlines."""
        return "\n".join(line.text for line in self.lines)


@dataclass(slots=True)
class PageLayout:
    """The text layout of one page, blocks and lines in reading order (column-aware).

    ``number`` is 1-based; ``width``/``height`` in points; ``two_column`` tells whether the page
    was read as two columns split at ``column_split`` (x in points); ``rotated_boxes`` are the
    boxes of rotated text (axis labels, landscape tables), which is kept out of the lines;
    ``rotated_lines`` are the same text lines (one per PyMuPDF line, spans in writing order,
    ``bbox`` the axis-aligned box on the page), used to find the captions of landscape floats.
    Vector drawings and
    images are available lazily from :meth:`graphics_boxes`.
    """

    number: int
    width: float
    height: float
    blocks: list[Block]
    rotated_boxes: list[Box] = field(default_factory=list)
    rotated_lines: list[Line] = field(default_factory=list)
    two_column: bool = False
    column_split: float = 0.0
    _page: pymupdf.Page | None = None
    _textpage: pymupdf.TextPage | None = None
    _graphics: list[Box] | None = None
    _words: list[tuple] | None = None

    @property
    def lines(self) -> list[Line]:
        """All lines of the page in reading order."""
        return [line for block in self.blocks for line in block.lines]

    @property
    def text(self) -> str:
        """Page text in reading order: lines joined by newlines, blocks by blank lines."""
        return "\n\n".join(b.text for b in self.blocks if b.text.strip())

    def graphics_boxes(self) -> list[Box]:
        """Bounding boxes of vector paths and images drawn on the page (``page.get_bboxlog()``).

        Computed on first use and cached; page-sized background fills and hair-thin specks are
        dropped.
        """
        if self._graphics is None:
            boxes: list[Box] = []
            try:
                log = self._page.get_bboxlog() if self._page is not None else []
            except Exception:  # a damaged content stream: no drawings rather than no paper
                log = []
            if log:
                area = self.width * self.height
                for kind, rect in log:
                    if "text" in kind or "clip" in kind or "layer" in kind or "group" in kind:
                        continue
                    x0, y0, x1, y1 = rect
                    w, h = x1 - x0, y1 - y0
                    if w <= 0 and h <= 0:
                        continue
                    if w * h > 0.45 * area:  # page backgrounds, frames
                        continue
                    boxes.append((max(0.0, x0), max(0.0, y0), min(self.width, x1), min(self.height, y1)))
            self._graphics = boxes
        return self._graphics

    def words(self) -> list[tuple]:
        """PyMuPDF words of the page ``(x0, y0, x1, y1, text, block, line, word)``, cached."""
        if self._words is None:
            try:
                self._words = self._page.get_text("words", textpage=self._textpage) if self._page is not None else []
            except Exception:  # a damaged page: no words rather than no paper
                self._words = []
        return self._words

    def column_of(self, bbox: Box) -> tuple[float, float]:
        """The x-range ``(x0, x1)`` of the column holding ``bbox`` (the whole page when it spans)."""
        if self.two_column:
            if bbox[2] <= self.column_split + 2:
                return (0.0, self.column_split)
            if bbox[0] >= self.column_split - 2:
                return (self.column_split, self.width)
        return (0.0, self.width)


@dataclass(slots=True)
class OpenedPDF:
    """A validated open document with its sha256 (hex of the file bytes) and per-page layouts."""

    path: Path
    sha256: str
    doc: pymupdf.Document
    pages: list[PageLayout]


def to_record_bbox(bbox: Box) -> list[float]:
    """``(x0, y0, x1, y1)`` -> ``[x0, y0, width, height]`` rounded to 0.01 pt (the records' convention)."""
    x0, y0, x1, y1 = bbox
    return [round(x0, 2), round(y0, 2), round(x1 - x0, 2), round(y1 - y0, 2)]


def union(boxes: list[Box]) -> Box:
    """Smallest box containing all ``boxes`` (must be non-empty)."""
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


def _short_reason(exc: BaseException) -> str:
    msg = " ".join(str(exc).split()) or type(exc).__name__
    return msg[:200]


def open_pdf(path: Path) -> OpenedPDF:
    """Open and validate ``path``, extract the layout of every page.

    Raises :class:`UnparseablePDF` with a short reason when the file is missing/unreadable, empty,
    not a PDF (an HTML page, another format), corrupt or truncated, encrypted with a user password,
    has zero pages, has no text layer (fewer than :data:`MIN_TEXT_CHARS` non-space characters over
    all pages, e.g. a scan), or is damaged in a way that loses content (:func:`integrity_problems`:
    MuPDF could not read a page's content stream, a page lost its text after a repair, or the text
    is mostly unmapped glyphs). No raw PyMuPDF exception escapes for a bad file.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UnparseablePDF(path, f"unreadable: {exc.strerror or exc}") from exc
    sha256 = hashlib.sha256(data).hexdigest()
    not_pdf = _not_a_pdf(data)
    if not_pdf:
        raise UnparseablePDF(path, not_pdf)
    try:
        # MuPDF records repairs of damaged files in its warnings store; start from an empty one
        pymupdf.TOOLS.mupdf_warnings(reset=True)
        doc = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:  # pymupdf raises FileDataError/RuntimeError/ValueError for bad files
        raise UnparseablePDF(path, f"corrupt: {_short_reason(exc)}") from exc
    warnings = pymupdf.TOOLS.mupdf_warnings(reset=True)
    try:
        if doc.needs_pass:
            raise UnparseablePDF(path, "encrypted: needs a password")
        if _looks_truncated(data, warnings):
            raise UnparseablePDF(path, "corrupt: truncated file (no %%EOF, cannot find startxref)")
        if doc.page_count == 0:
            raise UnparseablePDF(path, "corrupt: zero pages (MuPDF found no page: the page tree or the header is damaged)")
        pages: list[PageLayout] = []
        page_warnings: list[str] = []
        for i in range(doc.page_count):
            pages.append(extract_page(doc[i], i + 1))
            page_warnings.append(pymupdf.TOOLS.mupdf_warnings(reset=True))
        chars = sum(len(re.sub(r"\s+", "", b.text)) for p in pages for b in p.blocks)
        if chars < MIN_TEXT_CHARS:
            plural = "s" if len(pages) != 1 else ""
            raise UnparseablePDF(path, f"no text layer: {chars} characters on {len(pages)} page{plural}")
        damage = integrity_problems(pages, page_warnings, repaired="repair" in warnings)
        if damage:
            raise UnparseablePDF(path, "damaged: " + damage)
    except UnparseablePDF:
        doc.close()
        raise
    except Exception as exc:
        doc.close()
        raise UnparseablePDF(path, f"corrupt: {_short_reason(exc)}") from exc
    return OpenedPDF(path=Path(path), sha256=sha256, doc=doc, pages=pages)


def _not_a_pdf(data: bytes) -> str | None:
    """Why ``data`` is not a PDF file at all (``None`` when it starts like one).

    A PDF starts with ``%PDF-`` (some writers put a few bytes of junk first, so the marker is
    accepted anywhere in the first KiB unless the file is plainly something else).
    """
    if not data:
        return "empty file (0 bytes)"
    head = data[:1024].lstrip()
    low = head[:64].lower()
    if low.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml", b"<!--")) or b"<html" in head.lower():
        kind = "an HTML page" if (b"html" in head.lower()) else "an XML/markup document"
        return f"not a PDF: {kind} (e.g. a login or error page saved instead of the paper)"
    if not head.startswith(b"%PDF") and b"%PDF-" not in data[:1024]:
        if not data.strip(b"\x00"):
            return f"empty file ({len(data)} zero bytes)"
        return f"not a PDF: no %PDF- header in its first KiB ({len(data):,} bytes)"  # never quote file bytes
    return None


_DAMAGE = re.compile(
    r"content stream|object is not a stream|zlib error|premature end of data|cannot load object|"
    r"corrupt object stream|unknown keyword|read error|non-page object in page tree|"
    r"syntax error in (?:array|dict)|cannot find \w+ resource|page may not be correct",
    re.I,
)
"""MuPDF warnings (emitted while a page is interpreted) that mean part of the page could not be read."""

_UNMAPPED = re.compile(r"[\ufffd\ue000-\uf8ff]")


def integrity_problems(pages: list[PageLayout], page_warnings: list[str], *, repaired: bool) -> str | None:
    """What is wrong with a PDF whose pages opened but may have lost content, or ``None`` if nothing.

    ``pages``: the extracted layouts; ``page_warnings``: MuPDF's warnings emitted while each page
    was extracted (same order); ``repaired``: MuPDF had to repair the file's cross-reference table
    when opening it. Signals, each naming the pages (at most 5 listed):

    - a page's content could not be read (:data:`_DAMAGE`: broken content or object streams,
      missing resources, a broken page tree);
    - a repaired file with a page that has no text while the paper's median page has 100+ words
      (objects lost in the damaged region);
    - more than 5% of all characters are unmapped glyphs (U+FFFD or private-use code points).

    A file MuPDF repaired without losing anything passes.
    """
    damaged = []
    for p, w in zip(pages, page_warnings):
        m = _DAMAGE.search(w or "")
        if m:
            line = next((ln for ln in w.splitlines() if _DAMAGE.search(ln)), m.group(0))
            damaged.append(f"page {p.number} ({' '.join(line.split())[:80]})")
    problems = []
    if damaged:
        more = f" and {len(damaged) - 5} more" if len(damaged) > 5 else ""
        problems.append("content MuPDF could not read on " + "; ".join(damaged[:5]) + more)
    words = [len(p.text.split()) for p in pages]
    median = sorted(words)[len(words) // 2] if words else 0
    if repaired and median >= 100:
        blank = [p.number for p, n in zip(pages, words) if n <= 3]
        if blank:
            problems.append(f"the repaired file has no text on page{'s' if len(blank) > 1 else ''} "
                            f"{', '.join(map(str, blank[:10]))} (median page: {median} words)")
    text = "".join(p.text for p in pages)
    chars = len(re.sub(r"\s+", "", text))
    unmapped = len(_UNMAPPED.findall(text))
    if chars and unmapped / chars > 0.05:
        problems.append(f"{unmapped / chars:.0%} of the text is unmapped glyphs (garbled font encoding)")
    return "; ".join(problems) or None


def _looks_truncated(data: bytes, warnings: str) -> bool:
    """True for a file cut short: no ``%%EOF`` near its end and MuPDF could not find ``startxref``.

    Such files are "repaired" by MuPDF into documents whose later objects (page contents, fonts)
    are silently missing, so they are rejected rather than half-parsed. Damaged files that still
    end properly are accepted when the repair recovers their text.
    """
    return b"%%EOF" not in data[-1024:] and "startxref" in warnings


def render_spans(spans: list[Span], texts: list[str] | None = None) -> str:
    """Join span texts into one line of text, adding a space where the PDF shows a gap.

    ``texts`` optionally replaces the spans' texts (same length), e.g. case-decoded small caps.
    """
    parts: list[str] = []
    for i, s in enumerate(spans):
        t = texts[i] if texts is not None else s.text
        if s.space_before and parts and not parts[-1].endswith(" ") and not t.startswith(" "):
            parts.append(" ")
        parts.append(t)
    text = "".join(parts).replace("\ufffd", "")  # glyphs without Unicode (big TeX delimiters)
    return fix_accents(re.sub(r"[ \t\u00a0]+", " ", text).strip())


def _compose(m: re.Match[str]) -> str:
    letter = "i" if m.group(2) == "\u0131" else m.group(2)  # dotless i takes the accent
    return unicodedata.normalize("NFC", letter + _ACCENTS[m.group(1)])


def fix_accents(text: str) -> str:
    """Compose TeX spacing accents with the following letter: ``"Zdeborov´a"`` -> ``"Zdeborová"``."""
    if _SPACING_ACCENT.search(text):
        text = _SPACING_ACCENT.sub(_compose, text)
    return text


_ACCENTS = {
    "\u00b4": "\u0301",  # acute
    "\u00a8": "\u0308",  # diaeresis
    "\u02c6": "\u0302",  # circumflex
    "\u02dc": "\u0303",  # tilde
    "\u00b8": "\u0327",  # cedilla
    "\u02c7": "\u030c",  # caron
    "\u02d8": "\u0306",  # breve
    "\u02da": "\u030a",  # ring
    "\u02dd": "\u030b",  # double acute
}
_SPACING_ACCENT = re.compile("([" + "".join(_ACCENTS) + "]) ?([A-Za-z\u0131])")
"""TeX-made accents extracted as a spacing accent before the letter (``Aliz´ee``)."""


def _is_bold(span: dict) -> bool:
    return bool(span["flags"] & 16) or _bold_font_name(span["font"])


@lru_cache(maxsize=4096)
def _bold_font_name(font: str) -> bool:
    return bool(_BOLD_FONT.search(font))


def _merge_rows(
    raw_lines: list[dict], page_no: int, rotated: list[Box] | None = None, rotated_lines: list[Line] | None = None
) -> list[Line]:
    """Merge PyMuPDF lines of one block that sit on the same baseline into visual lines.

    Rotated lines (axis labels, the arXiv side stamp) are left out of the text; their boxes are
    appended to ``rotated`` and the lines themselves to ``rotated_lines``.
    """
    rows: list[list[dict]] = []
    for ln in raw_lines:
        if ln.get("dir", (1, 0))[0] < 0.99:
            if rotated is not None and any(s["text"].strip() for s in ln["spans"]):
                rotated.append(tuple(ln["bbox"]))
                if rotated_lines is not None:
                    spans = [Span(s["text"], s["size"], _is_bold(s), s["font"], tuple(s["bbox"])) for s in ln["spans"] if s["text"]]
                    text = render_spans(spans)
                    if text:
                        rotated_lines.append(Line(text=text, bbox=tuple(ln["bbox"]), spans=spans, page=page_no))
            continue
        if not any(s["text"].strip() for s in ln["spans"]):
            continue
        placed = False
        if rows:
            last = rows[-1]
            ly0 = min(x["bbox"][1] for x in last)
            ly1 = max(x["bbox"][3] for x in last)
            y0, y1 = ln["bbox"][1], ln["bbox"][3]
            overlap = min(ly1, y1) - max(ly0, y0)
            if overlap > 0.5 * min(ly1 - ly0, y1 - y0):
                last.append(ln)
                placed = True
        if not placed:
            rows.append([ln])
    out: list[Line] = []
    for row in rows:
        row.sort(key=lambda x: x["bbox"][0])
        spans: list[Span] = []
        prev_x1 = None
        for ln in row:
            for s in ln["spans"]:
                text = s["text"]
                if not text:
                    continue
                gap = prev_x1 is not None and s["bbox"][0] - prev_x1 > 0.15 * s["size"]
                prev_x1 = s["bbox"][2]
                spans.append(Span(text, s["size"], _is_bold(s), s["font"], tuple(s["bbox"]), gap))
        text = render_spans(spans)
        if not text:
            continue
        box = union([tuple(ln["bbox"]) for ln in row])
        out.append(Line(text=text, bbox=box, spans=spans, page=page_no))
    return out


def extract_page(page: pymupdf.Page, page_no: int) -> PageLayout:
    """Layout of one page: text blocks with visual lines, ordered for reading.

    Reading order: blocks that fit in the left or right half are column blocks, the others span
    the page. On a two-column page (enough text in both halves) the page is cut into horizontal
    bands at the spanning blocks; each band is read left column then right column. Otherwise
    blocks are read top to bottom, left to right.
    """
    rect = page.rect
    width, height = rect.width, rect.height
    textpage = page.get_textpage(flags=TEXT_FLAGS)
    raw = page.get_text("dict", textpage=textpage)
    blocks: list[Block] = []
    rotated: list[Box] = []
    rotated_lines: list[Line] = []
    for b in raw["blocks"]:
        if b.get("type", 0) != 0:
            continue
        lines = _merge_rows(b["lines"], page_no, rotated, rotated_lines)
        if not lines:
            continue
        blocks.append(Block(bbox=union([ln.bbox for ln in lines]), lines=lines))
    blocks = _drop_line_numbers(blocks, width)
    if blocks:  # rotated text outside the text area (arXiv stamp) is not part of any figure
        left = min(b.bbox[0] for b in blocks) - 4
        right = max(b.bbox[2] for b in blocks) + 4
        rotated = [r for r in rotated if r[2] > left and r[0] < right]

    # rotated lines in the outer 6% of the page are stamps (arXiv id), not landscape floats
    rotated_lines = [ln for ln in rotated_lines if ln.x0 > 0.06 * width and ln.x1 < 0.94 * width]
    split, two_col = _detect_columns(blocks, width)
    ordered = _reading_order(blocks, split, two_col)
    for i, block in enumerate(ordered):
        for line in block.lines:
            line.block = i
    return PageLayout(
        number=page_no,
        width=width,
        height=height,
        blocks=ordered,
        rotated_boxes=rotated,
        rotated_lines=rotated_lines,
        two_column=two_col,
        column_split=split,
        _page=page,
        _textpage=textpage,
    )


_LINE_NUMBER = re.compile(r"^\d{1,3}$")


def _drop_line_numbers(blocks: list[Block], width: float) -> list[Block]:
    """Remove review-copy line numbers (``000``, ``001`` ... in the page margins).

    A page with at least 8 lines made only of 1-3 digits in the outer 18% of the page width on
    the same side has a line-number gutter; those lines are dropped.
    """
    left = [ln for b in blocks for ln in b.lines if _LINE_NUMBER.match(ln.text) and ln.x1 < 0.18 * width]
    right = [ln for b in blocks for ln in b.lines if _LINE_NUMBER.match(ln.text) and ln.x0 > 0.82 * width]
    drop = {id(ln) for group in (left, right) if len(group) >= 8 for ln in group}
    if not drop:
        return blocks
    out: list[Block] = []
    for b in blocks:
        kept = [ln for ln in b.lines if id(ln) not in drop]
        if kept:
            out.append(Block(bbox=union([ln.bbox for ln in kept]), lines=kept))
    return out


def _detect_columns(blocks: list[Block], width: float) -> tuple[float, bool]:
    """Find a vertical gutter near the page middle that separates two text columns.

    The gutter is the x position in the middle 30% of the page crossed by the fewest text lines
    (character-weighted). Returns ``(split_x, is_two_column)``; the page counts as two-column when
    at least 20% of its characters lie on each side of the gutter (lines crossing it, e.g. a title
    or a wide table, are allowed up to 50%), or when hardly any line crosses it (at most 10%) and
    both sides hold text (a last page whose right column is nearly empty). The test is made on
    all lines and again on the lines in the page's main type size (so that a figure full of
    small labels does not hide the columns); either may establish two columns.
    """
    lines = [ln for b in blocks for ln in b.lines]
    if not lines:
        return width / 2, False
    sizes: Counter[float] = Counter()
    for ln in lines:
        sizes[round(ln.size)] += len(ln.text)
    main = sizes.most_common(1)[0][0]
    main_lines = [ln for ln in lines if abs(ln.size - main) <= 1.0]
    for group in (lines, main_lines):
        split, two = _gutter(group, width)
        if two:
            return split, True
    return width / 2, False


def _gutter(lines: list[Line], width: float) -> tuple[float, bool]:
    total = sum(len(ln.text) for ln in lines)
    if not total:
        return width / 2, False
    lo, hi = int(width * 0.35), int(width * 0.65)
    cover = [0] * (hi - lo + 1)
    for ln in lines:
        a = max(lo, int(ln.x0) + 1)
        z = min(hi, int(ln.x1))
        n = len(ln.text)
        for x in range(a, z + 1):
            cover[x - lo] += n
    best = min(cover)
    runs: list[tuple[int, int]] = []
    start = None
    for i, c in enumerate(cover + [best + 1]):
        if c == best and start is None:
            start = i
        elif c != best and start is not None:
            runs.append((start, i - 1))
            start = None
    a, z = max(runs, key=lambda r: r[1] - r[0])
    split = lo + (a + z) / 2
    left = sum(len(ln.text) for ln in lines if ln.x1 <= split)
    right = sum(len(ln.text) for ln in lines if ln.x0 >= split)
    two = (best <= 0.5 * total and left >= 0.2 * total and right >= 0.2 * total) or (
        best <= 0.1 * total and left >= 0.1 * total and right >= 0.05 * total
    )
    return split, two


def _reading_order(blocks: list[Block], split: float, two_col: bool) -> list[Block]:
    if not two_col:
        return sorted(blocks, key=lambda b: (round(b.bbox[1], 0), b.bbox[0]))
    spanning: list[Block] = []
    columns: list[tuple[int, Block]] = []  # (0 left / 1 right, block)
    for b in blocks:
        if b.bbox[2] <= split + 2:
            columns.append((0, b))
        elif b.bbox[0] >= split - 2:
            columns.append((1, b))
        else:
            spanning.append(b)
    spanning.sort(key=lambda b: b.bbox[1])
    # band k holds the column blocks lying below spanning block k-1 and above spanning block k
    bands: list[list[tuple[int, Block]]] = [[] for _ in range(len(spanning) + 1)]
    for col, b in columns:
        yc = (b.bbox[1] + b.bbox[3]) / 2
        k = sum(1 for s in spanning if (s.bbox[1] + s.bbox[3]) / 2 < yc)
        bands[k].append((col, b))
    out: list[Block] = []
    for k, band in enumerate(bands):
        band.sort(key=lambda cb: (cb[0], cb[1].bbox[1], cb[1].bbox[0]))
        out.extend(b for _, b in band)
        if k < len(spanning):
            out.append(spanning[k])
    return out


def body_font_size(pages: list[PageLayout]) -> float:
    """The most common font size (points, character-weighted) over the document: the body text size."""
    weights: Counter[float] = Counter()
    for p in pages:
        for b in p.blocks:
            for ln in b.lines:
                for s in ln.spans:
                    weights[round(s.size, 1)] += len(s.text)
    return weights.most_common(1)[0][0] if weights else 10.0


def strip_footnote_marks(text: str) -> str:
    """Remove footnote/affiliation symbols (``∗ † ‡ ♠`` ...) from a string."""
    return "".join(ch for ch in text if ch not in _FOOTNOTE_SYMBOLS).strip()


_VENUE_FURNITURE = re.compile(
    r"^(proceedings of|findings of|published as|under review|preprint|accepted|copyright|"
    r"\d+(st|nd|rd|th) conference on|.*association for computational linguistics$|"
    r"arxiv:\d{4}\.\d{4,5})",
    re.I,
)
_PAGE_NUMBER = re.compile(r"^(page\s+)?(\d{1,4}|[ivxlc]{1,6})(\s+of\s+\d+)?$", re.I)


def find_furniture(pages: list[PageLayout]) -> set[int]:
    """``id()`` of the lines that are page furniture rather than content.

    A line is furniture when it is
    - a page number ("7", "vii", "Page 7 of 20") in the top 8% or bottom 10% of its page;
    - a venue/preprint banner on page 1 ("Proceedings of ...", "Published as a conference paper
      at ...", "Under review ...") in the top 10% or bottom 12%;
    - text repeated (digits ignored) on at least 30% of the pages (and 2+) in the top 15% or
      bottom 10% of the page: running headers such as the paper title or venue.
    """
    zone_lines: list[tuple[Line, str]] = []
    counts: Counter[str] = Counter()
    out: set[int] = set()
    for p in pages:
        h = p.height
        seen: set[str] = set()
        for ln in p.lines:
            text = ln.text.strip()
            if (ln.y1 <= 0.08 * h or ln.y0 >= 0.90 * h) and _PAGE_NUMBER.match(text):
                out.add(id(ln))
            if p.number == 1 and (ln.y1 <= 0.10 * h or ln.y0 >= 0.88 * h) and _VENUE_FURNITURE.match(text):
                out.add(id(ln))
            if ln.y1 <= 0.15 * h or ln.y0 >= 0.90 * h:
                key = ("T" if ln.y1 <= 0.15 * h else "B") + re.sub(r"\d+", "#", text.lower())
                zone_lines.append((ln, key))
                if key not in seen:
                    counts[key] += 1
                    seen.add(key)
    min_repeat = max(2, int(0.3 * len(pages) + 0.5))
    for ln, key in zone_lines:
        if counts[key] >= min_repeat and len(key) > 2:
            out.add(id(ln))
    return out
