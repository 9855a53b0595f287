"""One grid per table, from the sources that read it: which source built it, and the grid it stores.

Sources (``tables.table_source``):

- ``slanet``: the table-structure model's cells (:mod:`neusym.ingest.parse.structure`) filled with the
  PDF's words, then corrected with the page's geometry (:func:`model_table`);
- ``pymupdf4llm``: pymupdf4llm's HTML table (``pymupdf.layout``);
- ``words``: the word grid or PyMuPDF's ruled-line finder (:func:`neusym.ingest.parse.elements.table_html`).

:func:`combine` takes the table's region (pymupdf4llm's box when it found the table, else the
caption's region), trims the prose lines and other floats' captions the region took in, runs the model
there and stores, of the model's grid, pymupdf4llm's and the word grid, the one that gives the most
numbers an address of their own (:func:`addressed`; a tie goes to the model). Without the model
(file missing, load or inference failing: logged) the rule from before it applies: pymupdf4llm's grid
unless the word grid has 1.25x its cells. The rules and their constants were chosen on the dev tables
of ``benchmarks/table_cells`` and are reported on its test tables (``benchmarks/table_cells/README.md``).

Corrections of the model's grid, each from the PDF rather than the picture:

- **merged body rows**: a predicted row whose cells hold numbers from two or more text lines (dense
  tables without rules, "Sentence / Char" sub-rows) is split at the lines; a label cell on one line
  spans the new rows (a group label), wrapped labels with numbers on one line stay one row;
- **group labels**: an empty cell of the first label column takes the one label printed in the same
  band between horizontal rules ("LLaMA" centred over its 7B-65B rows).

The stored grid, whichever source built it: **group labels printed centred** on their rows without
rules between the groups are spread over those rows from the label's and the rows' positions on the
page (:func:`centred_labels`), where carrying a label down would give the rows above it to the group
above.

Every candidate grid, before the choice: **scripts after numbers**, which the text layer fuses onto
the number they follow ("28.15" with superscript "34" reads "28.1534"), are marked from the spans' font
sizes and positions (:func:`script_fixes`): a superscript becomes marks ("28.15^34"; over a base of 10 an
exponent, "10^5"), a numeric subscript a spread ("87.0" with subscript "3.0" → "87.0±3.0").
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from neusym.ingest.parse.pdf import Box, PageLayout, union

log = logging.getLogger(__name__)

_NUMBER_WORD = re.compile(r"^[(\[]?[\u2212±+-]?\d(?:[\d,]*\d)?(?:\.\d+)?[%kKMB]?[)\]]?[*\u2217\u2020\u2021]*$|^[\u2212±+-]?\.\d+")
SOURCES = ("slanet", "pymupdf4llm", "words")
RENDER_PAD = 4.0
"""Points of page drawn around the table's region in the image the model sees (chosen on the dev tables:
0, 2, 4, 6, 8 and 12 tried; a tight crop hides the table's outer rules)."""


@dataclass
class TableGrid:
    """The grid a table is stored with: ``html`` (``tables.table_content``) and which source built it."""

    html: str | None
    source: str | None
    box: Box | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class _Cell:
    row0: int
    row1: int
    col0: int
    col1: int
    words: list[tuple]
    header: bool = False

    @property
    def text(self) -> str:
        return " ".join(str(w[4]) for w in self.words)


def is_number_word(text: str) -> bool:
    """A word that is one printed number ("84.2", "−0.5", "62.1%", "15.7k", "(.891)", "±0.3")."""
    return bool(_NUMBER_WORD.match(text))


# ------------------------------------------------------------------------------ text lines
def _lines(words: list[tuple]) -> list[list[tuple]]:
    """Words grouped into text lines: vertical centres within 40% of the word height (top first)."""
    out: list[list[tuple]] = []
    for w in sorted(words, key=lambda w: ((w[1] + w[3]) / 2, w[0])):
        c, h = (w[1] + w[3]) / 2, max(w[3] - w[1], 1.0)
        if out:
            last = out[-1]
            lc = sum((x[1] + x[3]) / 2 for x in last) / len(last)
            if abs(c - lc) < 0.4 * h:
                last.append(w)
                continue
        out.append([w])
    return out


def _prose_line(words: list[tuple]) -> bool:
    """A line of running text: 6+ lower-case words of 3+ letters making 60% of the words, no number words
    (the running text a region grew into above or below a table)."""
    texts = [str(w[4]) for w in words]
    lower = [t for t in texts if re.fullmatch(r"[a-z]{3,}[,.;:]?", t)]
    return len(lower) >= 6 and len(lower) >= 0.6 * len(texts) and not any(is_number_word(t) for t in texts)


_CAPTION_START = re.compile(r"^(?:Table|Figure|Fig\.)\s*[A-Z]?\d+[:.]?$")


def trim_prose(page: PageLayout, box: Box) -> Box:
    """``box`` without the lines of running text at its top and bottom (a region that took in the
    paragraphs next to a table) and without another float: a caption line inside the region ("Figure 4:
    ...") and everything on its side of the table go. The box of the remaining words, or ``box`` when
    nothing is trimmed."""
    from neusym.ingest.parse.structure import words_in

    lines = _lines(words_in(page.words(), box))
    start, end = 0, len(lines)
    captions = [i for i, ln in enumerate(lines) if _CAPTION_START.match(" ".join(str(w[4]) for w in ln[:2]))]
    for i in captions:
        if i < len(lines) / 2:
            start = max(start, i + 1)
        else:
            end = min(end, i)
    while start < end and _prose_line(lines[start]):
        start += 1
    while end > start and _prose_line(lines[end - 1]):
        end -= 1
    if (start, end) == (0, len(lines)) or start >= end:
        return box
    kept = [w for ln in lines[start:end] for w in ln]
    return (box[0], min(w[1] for w in kept) - 1.0, box[2], max(w[3] for w in kept) + 1.0)


# ------------------------------------------------------------------------------ scripts
_SCRIPT_BASE = re.compile(r"[\u2212±+-]?\d[\d,]*(?:\.\d+)?")
_SCRIPT_TEXT = re.compile(r"[\u2212+-]?\d+(?:[.,]\d+)*")
_TOKEN = re.compile(r"[^<>\s]+")
_TOKEN_HEAD = re.compile(r"[\d.,±\u2212+-]+")
SCRIPT_SIZE = 0.85
"""A span at most this fraction of the size of the number before it is a script (LaTeX's scripts: 0.7)."""
SCRIPT_SHIFT = 0.12
"""...when its vertical centre is at least this fraction of the number's height above (superscript) or
below (subscript) the number's centre."""


def script_fixes(page: PageLayout, box: Box) -> dict[str, str]:
    """Numbers in ``box`` with a numeric script the text layer fuses onto them, as ``{fused: marked}``:
    "28.1534" → "28.15^34" (superscript: marks), "105" → "10^5" (superscript over 10: an exponent),
    "87.03.0" → "87.0±3.0" (subscript: a spread). A script is a span of digits right after a number's
    span (no gap, no space) in a font at most :data:`SCRIPT_SIZE` of its size and shifted up or down
    (:data:`SCRIPT_SHIFT`). A fused spelling read two ways in one box is left alone."""
    out: dict[str, str] = {}
    clash: set[str] = set()
    for block in page.blocks:
        for ln in block.lines:
            if ln.x1 < box[0] or ln.x0 > box[2] or ln.y1 < box[1] or ln.y0 > box[3]:
                continue
            for a, c in zip(ln.spans, ln.spans[1:]):
                if (not a.size or c.size > SCRIPT_SIZE * a.size or c.space_before or c.bbox[0] - a.bbox[2] > 1.0
                        or not a.text or a.text[-1].isspace() or not c.text or c.text[0].isspace()):
                    continue
                base, script = a.text.split()[-1], c.text.split()[0]
                if not _SCRIPT_BASE.fullmatch(base) or not _SCRIPT_TEXT.fullmatch(script):
                    continue
                height = max(a.bbox[3] - a.bbox[1], 1.0)
                shift = ((c.bbox[1] + c.bbox[3]) - (a.bbox[1] + a.bbox[3])) / 2 / height
                if shift <= -SCRIPT_SHIFT:
                    marked = f"{base}^{script}"
                elif shift >= SCRIPT_SHIFT and script[0].isdigit():
                    marked = f"{base}±{script}"
                else:
                    continue
                fused = base + script
                if out.get(fused, marked) != marked:
                    clash.add(fused)
                out[fused] = marked
    for fused in clash:
        del out[fused]
    return out


def mark_scripts(html: str | None, fixes: dict[str, str]) -> str | None:
    """``html`` with every fused number of :func:`script_fixes` replaced by its marked spelling (a token
    that starts with one, e.g. "28.1534†", keeps the rest)."""
    if not html or not fixes:
        return html

    def fix(m: re.Match) -> str:
        token = m.group(0)
        head = _TOKEN_HEAD.match(token)
        if head is None:
            return token
        marked = fixes.get(head.group(0))
        return marked + token[head.end():] if marked else token

    return _TOKEN.sub(fix, html)


# ------------------------------------------------------------------------------ model grid
def model_table(page: PageLayout, box: Box) -> list[_Cell] | None:
    """The structure model's cells in ``box`` filled with the PDF's words and corrected (module
    docstring); None when the model is unavailable or finds no grid."""
    from neusym.ingest.parse.structure import assign_words, structure_model, words_in

    model = structure_model()
    if model is None or page._page is None:
        return None
    try:
        predicted = model.predict(page._page, box, RENDER_PAD)
        if not predicted:
            return None
        words = words_in(page.words(), box)
        assigned = assign_words(words, [c.box for c in predicted])
        cells = [_Cell(c.row0, c.row1, c.col0, c.col1, ws, c.header) for c, ws in zip(predicted, assigned)]
        cells = _split_merged_rows(cells)
        return _band_labels(page, box, cells)
    except Exception as exc:  # noqa: BLE001 - the model failing on one table keeps the other sources
        log.warning("table-structure model failed on page %d: %s; the table is read from its other sources",
                    page.number, exc)
        return None


def _split_merged_rows(cells: list[_Cell]) -> list[_Cell]:
    """Predicted body rows whose cells hold numbers from several text lines, split at the lines."""
    n_rows = max((c.row1 for c in cells), default=-1) + 1
    out: list[_Cell] = []
    offset = 0
    for r in range(n_rows):
        row = [c for c in cells if c.row0 == r]
        single = [c for c in row if c.row1 == r]
        lines = _lines([w for c in single for w in c.words])
        numeric_lines = [ln for ln in lines if any(is_number_word(str(w[4])) for w in ln)]
        multi = [c for c in single if len(_lines(c.words)) > 1 and any(is_number_word(str(w[4])) for w in c.words)]
        if any(c.header for c in row) or len(numeric_lines) < 2 or not multi or any(c.row1 > r for c in row):
            for c in row:
                out.append(_Cell(c.row0 + offset, c.row1 + offset, c.col0, c.col1, c.words, c.header))
            continue
        # the new rows are the lines with numbers; words of other lines (a label centred between
        # them, a wrapped label) join the nearest of those
        centres = [sum((w[1] + w[3]) / 2 for w in ln) / len(ln) for ln in numeric_lines]

        def line_of(w: tuple) -> int:
            y = (w[1] + w[3]) / 2
            return min(range(len(centres)), key=lambda i: abs(centres[i] - y))

        k = len(numeric_lines)
        for c in row:
            parts: dict[int, list[tuple]] = {}
            for w in c.words:
                parts.setdefault(line_of(w), []).append(w)
            if not any(is_number_word(str(w[4])) for w in c.words) and len(_lines(c.words)) == 1:
                out.append(_Cell(r + offset, r + offset + k - 1, c.col0, c.col1, c.words, False))  # a group label
                continue
            if not parts:
                out.append(_Cell(r + offset, r + offset + k - 1, c.col0, c.col1, [], False))
                continue
            for i in range(k):
                out.append(_Cell(r + offset + i, r + offset + i, c.col0, c.col1, sorted(parts.get(i, []),
                                 key=lambda w: w[0]), False))
        offset += k - 1
    return out


def _rules(page: PageLayout, box: Box) -> list[float]:
    """y positions of the horizontal rules drawn across at least half of ``box``'s width."""
    width = box[2] - box[0]
    ys = sorted((y0 + y1) / 2 for x0, y0, x1, y1 in page.graphics_boxes()
                if y1 - y0 < 2.5 and x1 - x0 >= 0.5 * width and box[1] - 8 <= (y0 + y1) / 2 <= box[3] + 8
                and min(x1, box[2]) - max(x0, box[0]) > 0.4 * width)
    out: list[float] = []
    for y in ys:  # a double rule is one rule
        if not out or y - out[-1] > 2.0:
            out.append(y)
    return out


def _band_labels(page: PageLayout, box: Box, cells: list[_Cell]) -> list[_Cell]:
    """Empty cells of the first column take the one label printed in the same band between rules, when
    the first column is an outer label column (its cells are empty on rows where the second column has
    a label) and the table has rules between its bands."""
    rules = _rules(page, box)
    if len(rules) < 2:
        return cells
    first = {c.row0: c for c in cells if c.col0 == 0 and c.col1 == 0 and not c.header}
    second = {c.row0: c for c in cells if c.col0 == 1 and not c.header}
    empty = [r for r, c in first.items() if not c.words and r in second and second[r].words]
    if not empty:
        return cells

    def row_y(r: int) -> float | None:
        ws = [w for c in cells if c.row0 == r for w in c.words]
        return sum((w[1] + w[3]) / 2 for w in ws) / len(ws) if ws else None

    def band(y: float) -> int:
        return sum(1 for ry in rules if ry < y)

    bands: dict[int, list[int]] = {}
    for r in first:
        y = row_y(r)
        if y is not None:
            bands.setdefault(band(y), []).append(r)
    out = list(cells)
    for rows in bands.values():
        labelled = [first[r] for r in rows if first[r].words]
        if len(labelled) != 1 or len(rows) < 2:
            continue
        label = labelled[0]
        for r in rows:
            if r != label.row0 and not first[r].words:
                i = out.index(first[r])
                out[i] = _Cell(first[r].row0, first[r].row1, 0, 0, list(label.words), False)
    return out


def cells_html(cells: list[_Cell]) -> str | None:
    """The corrected model cells as HTML with spans (:func:`neusym.ingest.parse.structure.grid_html`)."""
    from neusym.ingest.parse.structure import GridCell, grid_html

    return grid_html([GridCell(c.row0, c.row1, c.col0, c.col1, c.text, c.header) for c in cells])


# ------------------------------------------------------------------------------ centred group labels
CENTRED_OFFSET = 0.3
"""A first-column label whose vertical centre is more than this fraction of the row pitch away from its
row's centre sits between two rows: it is centred on an even number of rows."""


def _row_lines(rows: list[list[str]], lines: list[list[tuple]]) -> list[float | None]:
    """The vertical centre of each grid row: the first text line (in order, after the previous row's)
    holding at least half of the row's words right of its first cell; None for rows not found."""
    out: list[float | None] = []
    start = 0
    for row in rows:
        want = {t for c in row[1:] for t in c.split()}
        found = None
        if want:
            for k in range(start, len(lines)):
                hit = [w for w in lines[k] if str(w[4]) in want]
                if len({str(w[4]) for w in hit}) >= max(1, (len(want) + 1) // 2):
                    found = (k, sum((w[1] + w[3]) / 2 for w in hit) / len(hit))
                    break
        if found is None:
            out.append(None)
            continue
        start = found[0] + 1
        out.append(found[1])
    return out


def centred_labels(page: PageLayout, region: Box | None, html: str | None) -> str | None:
    """``html`` with the group labels of its first column spread over the rows they are printed centred
    on, from the page's geometry: a label whose centre lies between two rows (more than
    :data:`CENTRED_OFFSET` of the row pitch from its row's centre) covers the rows around it, as many
    above as below, as long as their first cells are empty ("LLaMA" between its 13B and 33B rows covers
    7B-65B); once a column shows one such label, a label level with its row and with empty first cells
    on both sides covers those too. The spread label is written as a ``rowspan`` over the block. Returns
    ``html`` unchanged when nothing applies (no region, fewer than two labels, rows not found)."""
    from neusym.ingest.parse.cells import html_grid
    from neusym.ingest.parse.structure import words_in

    if not html or region is None:
        return html
    rows, th_rows = html_grid(html)
    if len(rows) < 4 or min(len(r) for r in rows) < 3:
        return html
    body = list(range(th_rows, len(rows)))
    empty = {i for i in body if not rows[i][0].strip() and rows[i][1].strip()}
    labelled = [i for i in body if rows[i][0].strip() and any(c.strip() for c in rows[i][1:])]
    if not empty or len(labelled) < 2:
        return html
    words = words_in(page.words(), region)
    ys = _row_lines(rows, _lines(words))
    known = [y for i, y in enumerate(ys) if y is not None and i in body]
    if len(known) < 4:
        return html
    pitch = sorted(b - a for a, b in zip(known, known[1:]) if b > a)
    if not pitch:
        return html
    pitch_y = pitch[len(pitch) // 2]
    second_x = {}  # the left edge of each row's second cell, to find the label's words left of it
    for i in body:
        first_tokens = set(rows[i][1].split())
        xs = [w[0] for w in words if str(w[4]) in first_tokens and ys[i] is not None
              and abs((w[1] + w[3]) / 2 - ys[i]) < 0.5 * pitch_y]
        if xs:
            second_x[i] = min(xs)
    left = min(second_x.values()) if second_x else None
    if left is None:
        return html

    def label_y(i: int) -> float | None:
        toks = set(rows[i][0].split())
        if ys[i] is None:
            return None
        near = [w for w in words if str(w[4]) in toks and w[2] <= left + 1
                and abs((w[1] + w[3]) / 2 - ys[i]) < 1.5 * pitch_y]
        return sum((w[1] + w[3]) / 2 for w in near) / len(near) if near else None

    def block(i: int, y: float, between: bool) -> list[int]:
        above = sorted((r for r in body if ys[r] is not None and ys[r] < y - 0.01 and r != i),
                       key=lambda r: y - ys[r])
        below = sorted((r for r in body if ys[r] is not None and ys[r] > y + 0.01 and r != i),
                       key=lambda r: ys[r] - y)
        if between:  # the label's own row is the nearest on its side
            (above if ys[i] < y else below).insert(0, i)
        out = [] if between else [i]
        for a, b in zip(above, below):
            if all(r == i or r in empty for r in (a, b)):
                out += [a, b]
            else:
                break
        return sorted(set(out)) if len(out) >= 2 else []

    spans: dict[int, list[int]] = {}
    for i in labelled:
        y = label_y(i)
        if y is not None and abs(y - ys[i]) > CENTRED_OFFSET * pitch_y:
            spans[i] = block(i, y, True)
    if not any(spans.values()):
        return html
    for i in labelled:
        if i not in spans:
            y = label_y(i)
            if y is not None:
                spans[i] = block(i, y, False)
    cover: dict[int, tuple[int, int, int]] = {}  # row -> (label row, block's first row, block's last row)
    for i, rs in spans.items():
        rs = [r for r in rs if r == i or r not in cover]
        if len(rs) >= 2 and rs == list(range(rs[0], rs[-1] + 1)):
            for r in rs:
                cover[r] = (i, rs[0], rs[-1])
    if not cover:
        return html
    return _spanned_html(rows, th_rows, cover)


def _spanned_html(rows: list[list[str]], th_rows: int, cover: dict[int, tuple[int, int, int]]) -> str | None:
    """The expanded grid ``rows`` as HTML again (:func:`neusym.ingest.parse.structure.grid_html`; equal
    neighbours of a header row as one spanning cell, so it reads back the same), the first cells of the
    rows in ``cover`` (row -> (label row, block's first row, block's last row)) one label spanning its block."""
    from neusym.ingest.parse.structure import GridCell, grid_html

    cells: list[GridCell] = []
    for i, row in enumerate(rows):
        header = i < th_rows
        j = 0
        if i in cover:
            label_row, first, last = cover[i]
            if i == first:
                cells.append(GridCell(first, last, 0, 0, rows[label_row][0], header))
            j = 1
        while j < len(row):
            k = j + 1
            if header and row[j].strip():
                while k < len(row) and row[k] == row[j]:
                    k += 1
            cells.append(GridCell(i, i, j, k - 1, row[j], header))
            j = k
    return grid_html(cells)


# ------------------------------------------------------------------------------ the choice
def _filled_cells(html: str | None) -> int:
    from neusym.ingest.parse.cells import html_rows

    return sum(1 for row in html_rows(html) for c in row if c.strip())


def combine(page: PageLayout, box: Box | None, words_html: str | None, p4l: tuple[Box, str] | None) -> TableGrid:
    """The grid stored for one table (module docstring). ``box``: the caption's region; ``words_html``:
    the word grid of that region; ``p4l``: pymupdf4llm's (box, HTML) matched to this table, or None."""
    boxes = [b for b in (box, p4l[0] if p4l else None) if b is not None]
    fixes = script_fixes(page, union(boxes)) if boxes else {}
    words_html = mark_scripts(words_html, fixes)
    if p4l is not None:
        p4l = (p4l[0], mark_scripts(p4l[1], fixes))
    before, before_source, region = words_html, "words" if words_html else None, box
    if p4l is not None:
        region = p4l[0]  # its box follows the table's ink more closely than the caption's region
        if words_html is None or _filled_cells(p4l[1]) * 1.25 >= _filled_cells(words_html):
            before, before_source = p4l[1], "pymupdf4llm"
    if region is None:
        return TableGrid(before, before_source, region)
    region = trim_prose(page, region)
    cells = model_table(page, region)
    html = mark_scripts(cells_html(cells), fixes) if cells else None
    if html is None:
        return TableGrid(centred_labels(page, region, before), before_source, region)
    candidates = [("slanet", html)] + [(name, other) for name, other in
                                       (("pymupdf4llm", p4l[1] if p4l else None), ("words", words_html)) if other]
    scored = [(addressed(h), -i, name, h) for i, (name, h) in enumerate(candidates)]
    best = max(scored)
    notes = [f"{name}: {n} addressed numbers" for n, _, name, _ in scored]
    return TableGrid(centred_labels(page, region, best[3]), best[2], region, notes)


def addressed(html: str | None) -> int:
    """How many numbers of a grid get an address of their own: distinct (row header, header path) pairs,
    both non-empty, among its numeric cells (:func:`neusym.ingest.parse.cells.table_cells`). A grid that
    merged rows or columns, lost its header or shifted cells gives fewer numbers a unique address."""
    from neusym.ingest.parse.cells import table_cells

    return len({(c.row_header, c.column_header_path) for c in table_cells(html)
                if c.number is not None and not c.is_header and c.row_header and c.column_header_path})
