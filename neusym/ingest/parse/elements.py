"""Tables, figures, equations and bibliography entries found on the page layouts (first form).

Captions
    A caption is a line starting with ``Table N`` / ``Figure N`` / ``Fig. N`` followed by the
    document's caption delimiter (``:`` in ACL/NeurIPS/ICLR, ``.`` in ICML/CVPR) and set like a
    caption: at the start of a text block, or with a bold label, or with an italic label in
    smaller type than the body. In-text mentions ("as shown in Table 2") fail these tests. The
    caption text runs to the end of its block and through blocks continuing right below it in the
    same type. Landscape floats (a table turned by 90 degrees on its page) have a rotated caption
    line: such a line counts when the label is not found upright anywhere in the document, and its
    float is the rotated text of its page.

Regions (``bounding_box``)
    The float is the run of non-paragraph objects (text blocks that are not body paragraphs,
    vector drawings and raster images from ``page.get_bboxlog()``, rotated axis labels)
    stacked next to the caption in its column, above or below it, without a gap larger than
    ~24pt and without crossing a body paragraph, heading or another caption. Figures prefer the
    region above their caption, tables whichever side is closer (ACL puts tables above their
    captions, ICLR/NeurIPS below).

Table cells (``table_content``)
    ``page.find_tables()`` is used for ruled tables (vertical and horizontal lines), with the
    layout model off: with ``pymupdf.layout`` installed the default call runs a GNN (~1 s/page),
    and its text strategy splits decimal numbers on these papers ("84.2" -> "842", ".").
    Booktabs tables (horizontal rules only) are rebuilt from PyMuPDF's words in the region:
    rows by baseline, columns at x positions no word crosses in the table body. Words closer
    than about a space form one cell, except two numbers ("36.9 80.0" set tight is two columns);
    a phrase that still runs over several columns with every word inside one column's span is
    split at the columns when it is the lowest header row ("CLS USR CITE REC") or what moves right
    is numbers ("... co-citation 82.9"); labels centred over their columns stay whole. ``None``
    when neither yields at least 2 rows x 2 columns.

Equations
    A numbered display equation is a line ending with "(N)" ("(3)", "(A.2)", "(S7)", "(4b)") at
    the right edge of its column
    whose remaining text (or the lines on the same row to its left) is math-like (math fonts or
    symbols, an "="). Lines of the same display directly above that are math-like join it.

References
    Entries of the References/Bibliography section: split at "[N]" / "N." labels for numbered
    styles, else at hanging indents (an entry's first line sits at the column's left margin,
    continuation lines are indented), else at text blocks.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from dataclasses import dataclass, field

import pymupdf

from neusym.ingest.parse.pdf import Block, Box, Line, PageLayout, Span, union
from neusym.ingest.parse.text import join_wrapped

_CAPTION = re.compile(
    r"^(?P<label>Table|TABLE|Tab\.|Figure|FIGURE|Fig\.|FIG\.)\s*(?P<num>(?:[A-Z]\.?)?\d{1,3})\s*(?P<delim>[:.|])(?=\s|$)"
)
_NUMBER_WORD = re.compile(r"^[\u2212-]?\d(?:[\d,]*\d)?(?:\.\d+)?%?[*\u2020\u2021]*$")
"""A word that is one printed number ("84.2", "−0.5", "62.1%", "1,284", "91.6*")."""
MAX_GAP = 24.0
"""Largest vertical gap (points) between a caption and its float, or between parts of a float."""


@dataclass
class Caption:
    """A printed table/figure caption: ``kind`` is "table" or "figure", ``label`` e.g. "Table 2"."""

    kind: str
    label: str
    page: PageLayout
    lines: list[Line]
    blocks: list[Block] = field(default_factory=list)
    rotated: bool = False  # a landscape float: the caption is rotated text

    @property
    def bbox(self) -> Box:
        """Box ``(x0, y0, x1, y1)`` of the caption's lines, in points."""
        return union([ln.bbox for ln in self.lines])

    @property
    def text(self) -> str:
        """The caption as one line of text, label included ("Table 2: Results on ...")."""
        return re.sub(r"\s+", " ", " ".join(ln.text for ln in self.lines)).strip()


# ------------------------------------------------------------------------------------- captions


def find_captions(pages: list[PageLayout], body: float, furniture: set[int]) -> list[Caption]:
    """All table and figure captions of the document, in page reading order."""
    raw: list[tuple[PageLayout, Block, int, re.Match[str]]] = []
    for page in pages:
        for block in page.blocks:
            for i, line in enumerate(block.lines):
                if id(line) in furniture:
                    continue
                m = _CAPTION.match(line.text)
                if m:
                    raw.append((page, block, i, m))
    if not raw:
        return []

    def strong(block: Block, i: int) -> bool:
        """Caption-like placement: first line of its block, or a bold label."""
        return i == 0 or _label_bold(block.lines[i])

    delims = Counter(m.group("delim") for page, block, i, m in raw if strong(block, i))
    main_delim = delims.most_common(1)[0][0] if delims else ":"
    captions: list[Caption] = []
    seen: set[tuple[int, str]] = set()
    for page, block, i, m in raw:
        line = block.lines[i]
        label_bold = _label_bold(line) or (_label_italic(line) and line.size < body - 0.3)
        delim = m.group("delim")
        if line.max_size < body - 3:  # text inside a figure (e.g. a screenshot of a paper)
            continue
        if delim != main_delim and not (delim in ":|" and (i == 0 or label_bold)):
            continue
        if not (i == 0 or label_bold):
            continue
        if delim == "." and not (label_bold or line.size < body - 0.3):
            continue  # "... see Table 4. On average ..." at the start of a block
        kind = "table" if m.group("label").lower().startswith("tab") else "figure"
        label = ("Table " if kind == "table" else "Figure ") + m.group("num")
        if (page.number, label) in seen:
            continue
        seen.add((page.number, label))
        lines = _caption_lines(block.lines[i:], [line])
        blocks = [block]
        # continuation blocks right below in the same type (only while the caption paragraph
        # has not ended: its last line still runs to the full caption width)
        idx = page.blocks.index(block)
        for nxt in page.blocks[idx + 1 : idx + 4]:
            if blocks == [block] and len(lines) < len(block.lines) - i:
                break  # the caption ended inside its block
            first = nxt.lines[0]
            if (
                abs(first.size - line.size) < 0.3
                and -1 <= first.y0 - lines[-1].y1 < 0.8 * line.height
                and abs(first.x0 - lines[0].x0) < 4
                and (len(lines) == 1 or lines[-1].x1 >= max(x.x1 for x in lines) - 15)
                and not _CAPTION.match(first.text)
            ):
                more = _caption_lines(nxt.lines, lines)
                added = more[len(lines):]
                if not added:
                    break
                lines.extend(added)
                blocks.append(nxt)
                if len(added) < len(nxt.lines):
                    break
            else:
                break
        captions.append(Caption(kind=kind, label=label, page=page, lines=lines, blocks=blocks))
    # landscape floats: rotated caption lines whose label is not printed upright
    upright = {c.label for c in captions}
    for page in pages:
        for line in page.rotated_lines:
            m = _CAPTION.match(line.text)
            if not m or not re.search(r"[A-Za-z]{2}", line.text[m.end():]):
                continue
            kind = "table" if m.group("label").lower().startswith("tab") else "figure"
            label = ("Table " if kind == "table" else "Figure ") + m.group("num")
            if label in upright or line.max_size < body - 3:
                continue
            upright.add(label)
            captions.append(Caption(kind=kind, label=label, page=page, lines=[line], rotated=True))
    order = {id(p): i for i, p in enumerate(pages)}
    captions.sort(key=lambda c: order[id(c.page)])  # stable: reading order within a page kept
    return captions


def _label_bold(line: Line) -> bool:
    """Whether the line's first visible span (the caption label) is bold."""
    first = next((sp for sp in line.spans if sp.text.strip()), None)
    return first is not None and first.bold


_ITALIC_FONT = re.compile(r"italic|oblique|slant|cmti|-it$|\.it$", re.I)


def _label_italic(line: Line) -> bool:
    """Whether the line's first visible span (the caption label) is set in an italic font."""
    first = next((sp for sp in line.spans if sp.text.strip()), None)
    return first is not None and bool(_ITALIC_FONT.search(first.font))


def _caption_lines(candidates: list[Line], start: list[Line]) -> list[Line]:
    """The caption's lines: ``start`` plus those of ``candidates`` (in order) that continue the
    caption paragraph. It ends after a short line (a paragraph's last line), at a larger vertical
    gap, at a line not aligned with the caption's left edge, or at another caption."""
    lines = list(start)
    first = lines[0]
    for ln in candidates:
        if ln is first or ln in lines:
            continue
        prev = lines[-1]
        width = max(x.x1 for x in lines)
        if len(lines) >= 2 and prev.x1 < width - 15:
            break
        if len(lines) == 1 and ln.x1 > prev.x1 + 15 and prev.x1 - prev.x0 < 0.5 * (ln.x1 - ln.x0):
            break  # a short one-line caption followed by a wider table row
        if ln.y0 - prev.y1 > 0.6 * prev.height or abs(ln.x0 - first.x0) > 4 or _CAPTION.match(ln.text):
            break
        lines.append(ln)
    return lines


# -------------------------------------------------------------------------------------- regions


@dataclass
class _Obj:
    bbox: Box
    kind: str  # "text", "graphic", "image"
    stop: bool = False  # a body paragraph, heading or caption: never part of a float
    block: Block | None = None


def _is_paragraph(block: Block, body: float, col_width: float) -> bool:
    """A block of running body text: body-size type, lines (but the last) spanning the column,
    and real words (table rows and figure labels are short or not body-size)."""
    lines = block.lines
    sizes_ok = sum(1 for ln in lines if abs(ln.size - body) <= 0.6) >= 0.6 * len(lines)
    if not sizes_ok:
        return False
    words = sum(len(re.findall(r"[a-z]{2,}", ln.text)) for ln in lines)
    if len(lines) >= 2:
        body_lines = lines[:-1]
        wide = sum(1 for ln in body_lines if (ln.x1 - ln.x0) >= 0.8 * col_width)
        return wide >= 0.7 * len(body_lines) and words >= 4 * len(lines)
    return (lines[0].x1 - lines[0].x0) >= 0.8 * col_width and words >= 8


def _page_objects(
    page: PageLayout, body: float, furniture: set[int], stops: set[int], caption_lines: set[int]
) -> list[_Obj]:
    """Candidate float parts of a page: text blocks (caption lines split off as their own stop
    objects), drawings/images and rotated labels."""
    objs: list[_Obj] = []
    text_lines = [ln for ln in page.lines if id(ln) not in furniture]
    left = min((ln.x0 for ln in text_lines), default=0.0)
    right = max((ln.x1 for ln in text_lines), default=page.width)
    for block in page.blocks:
        lines = [ln for ln in block.lines if id(ln) not in furniture]
        caption = [ln for ln in lines if id(ln) in caption_lines]
        if caption:
            objs.append(_Obj(bbox=union([ln.bbox for ln in caption]), kind="text", stop=True, block=block))
            lines = [ln for ln in lines if id(ln) not in caption_lines]
        if not lines:
            continue
        part = block if not caption else Block(bbox=union([ln.bbox for ln in lines]), lines=lines)
        bbox = part.bbox
        x0, x1 = page.column_of(bbox)
        x0, x1 = max(x0, left), min(x1, right)  # the text column, not the paper margin
        stop = any(id(ln) in stops for ln in lines) or _is_paragraph(part, body, x1 - x0)
        objs.append(_Obj(bbox=bbox, kind="text", stop=stop, block=part))
    for box in page.graphics_boxes():
        objs.append(_Obj(bbox=box, kind="graphic"))
    for box in page.rotated_boxes:
        objs.append(_Obj(bbox=box, kind="text"))
    return objs


@dataclass
class _Side:
    """A float region grown on one side of a caption: box, gap to the caption, drawing count."""

    region: Box | None = None
    gap: float = float("inf")
    graphics: int = 0

    @property
    def area(self) -> float:
        """Area of the region in square points (0 when there is none)."""
        if self.region is None:
            return 0.0
        return (self.region[2] - self.region[0]) * (self.region[3] - self.region[1])


def _grow(cap: Box, objs: list[_Obj], up: bool, xr: tuple[float, float]) -> _Side:
    """Grow a float region from the caption upwards or downwards through non-stop objects."""
    lo, hi = xr
    inside = [o for o in objs if o.bbox[0] >= lo - 6 and o.bbox[2] <= hi + 6 and (o.bbox[2] - o.bbox[0]) > 0]
    if up:
        cands = sorted((o for o in inside if o.bbox[3] <= cap[1] + 2), key=lambda o: -o.bbox[3])
    else:
        cands = sorted((o for o in inside if o.bbox[1] >= cap[3] - 2), key=lambda o: o.bbox[1])
    side = _Side()
    edge = cap[1] if up else cap[3]
    for o in cands:
        gap = (edge - o.bbox[3]) if up else (o.bbox[1] - edge)
        if gap > MAX_GAP:
            break
        if o.stop:
            if side.region is None or gap > -2:
                break
            continue
        if side.region is None:
            side.gap = max(0.0, gap)
        side.region = o.bbox if side.region is None else union([side.region, o.bbox])
        side.graphics += o.kind == "graphic"
        edge = min(edge, o.bbox[1]) if up else max(edge, o.bbox[3])
    if side.region is not None and side.region[3] - side.region[1] < 6:
        return _Side()  # a lone rule is not a float
    return side


def _choose(kind: str, up: _Side, down: _Side) -> Box | None:
    """Pick the caption's float: figures sit above their caption unless clearly not; tables go
    with the side that has rules/drawings, else the bigger region (a few lines of table notes
    under an ACL caption lose against the table above it)."""
    if up.region is None or down.region is None:
        return up.region if down.region is None else down.region
    if kind == "figure":
        return up.region if up.gap <= down.gap + 10 else down.region
    if (up.graphics > 0) != (down.graphics > 0):
        return up.region if up.graphics else down.region
    big, small = (up, down) if up.area >= down.area else (down, up)
    return big.region if big.gap <= small.gap + 16 else small.region


SIDE_BY_SIDE_GAP = 0.2
"""Two narrow captions side by side (disjoint x-ranges, each under 60% of the column) at most this
fraction of the page height apart vertically belong to floats set side by side (minipages of different
heights put their captions at different heights)."""


def _x_range(cap: Caption, captions_on_page: list[Caption]) -> tuple[float, float]:
    """The x-range a caption's float may take: its column, split halfway to a caption beside it (captions
    overlapping vertically, or two narrow ones near each other: :data:`SIDE_BY_SIDE_GAP`)."""
    page = cap.page
    lo, hi = page.column_of(cap.bbox)
    cb = cap.bbox
    narrow = 0.6 * (hi - lo)
    for other in captions_on_page:
        if other is cap:
            continue
        ob = other.bbox
        overlap = min(cb[3], ob[3]) - max(cb[1], ob[1])
        near = (overlap > -SIDE_BY_SIDE_GAP * page.height and cb[2] - cb[0] < narrow and ob[2] - ob[0] < narrow
                and page.column_of(ob) == (lo, hi))
        if (overlap > 0 or near) and (ob[0] >= cb[2] or ob[2] <= cb[0]):
            # side-by-side floats: split the range between the two captions
            mid = ((cb[0] + cb[2]) / 2 + (ob[0] + ob[2]) / 2) / 2
            if ob[0] >= cb[2]:
                hi = min(hi, mid)
            else:
                lo = max(lo, mid)
    return lo, hi


def locate_floats(captions: list[Caption], body: float, furniture: set[int], stops: set[int]) -> list[Box | None]:
    """The float region of each caption (same order), ``None`` when nothing sits next to it.

    ``stops`` holds the ``id()`` of heading lines (floats never cross them). Each caption gets a
    candidate region above and below it; where only one side has a float (or only one side has
    drawings), that side wins and votes for the document's convention per kind (ACL: tables
    above their caption; ICML/ICLR: below). Ambiguous captions follow the convention when it is
    clear, else :func:`_choose`.
    """
    sides: list[tuple[_Side, _Side]] = []
    by_page: dict[int, list[Caption]] = {}
    for cap in captions:
        by_page.setdefault(cap.page.number, []).append(cap)
    page_objs: dict[int, list[_Obj]] = {}
    for number, on_page in by_page.items():
        page = on_page[0].page
        caption_lines = {id(ln) for c in on_page for ln in c.lines}
        objs = _page_objects(page, body, furniture, stops, caption_lines)
        # drawings enclosing a caption are backgrounds or frames, not the float itself
        centres = [((c.bbox[0] + c.bbox[2]) / 2, (c.bbox[1] + c.bbox[3]) / 2) for c in on_page]
        objs = [
            o for o in objs
            if o.kind == "text" or not any(o.bbox[0] <= x <= o.bbox[2] and o.bbox[1] <= y <= o.bbox[3] for x, y in centres)
        ]
        # rules next to running headers/footers (e.g. the line under an ICML header) are furniture
        furn_boxes = [ln.bbox for ln in page.lines if id(ln) in furniture]
        page_objs[number] = [
            o for o in objs
            if not (o.kind == "graphic" and any(abs(o.bbox[1] - f[3]) < 8 or abs(o.bbox[3] - f[1]) < 8 for f in furn_boxes))
        ]
    votes: dict[str, Counter[str]] = {"table": Counter(), "figure": Counter()}
    for cap in captions:
        if cap.rotated:
            sides.append((_Side(), _Side()))
            continue
        objs = page_objs[cap.page.number]
        xr = _x_range(cap, by_page[cap.page.number])
        up, down = _grow(cap.bbox, objs, True, xr), _grow(cap.bbox, objs, False, xr)
        sides.append((up, down))
        if (up.region is None) != (down.region is None):
            votes[cap.kind]["up" if up.region is not None else "down"] += 1
        elif up.region is not None and (up.graphics > 0) != (down.graphics > 0):
            votes[cap.kind]["up" if up.graphics else "down"] += 1
    out: list[Box | None] = []
    for cap, (up, down) in zip(captions, sides):
        if cap.rotated:  # a landscape float: the rotated text of its page beside the caption
            others = [ln.bbox for ln in cap.page.rotated_lines if ln is not cap.lines[0]]
            out.append(union(others) if others else None)
            continue
        if up.region is None or down.region is None:
            out.append(up.region if down.region is None else down.region)
            continue
        v = votes[cap.kind]
        total = v["up"] + v["down"]
        if total >= 2 and max(v["up"], v["down"]) >= 0.75 * total:
            out.append(up.region if v["up"] > v["down"] else down.region)
        else:
            out.append(_choose(cap.kind, up, down))
    return out


# ------------------------------------------------------------------------------------ table HTML


def _has_vertical_rules(page: PageLayout, region: Box) -> bool:
    count = 0
    for x0, y0, x1, y1 in page.graphics_boxes():
        if x1 - x0 < 2 and y1 - y0 > 6 and x0 >= region[0] - 2 and x1 <= region[2] + 2 and y0 >= region[1] - 2 and y1 <= region[3] + 2:
            count += 1
    return count >= 2


def table_html(page: PageLayout, region: Box) -> str | None:
    """HTML ``<table>`` of the cells inside ``region`` (see module docstring), or ``None``."""
    if page._page is None:
        return None
    if _has_vertical_rules(page, region):
        try:
            found = page._page.find_tables(clip=pymupdf.Rect(region), use_layout=False)
            best = max(found.tables, key=lambda t: (t.bbox[2] - t.bbox[0]) * (t.bbox[3] - t.bbox[1]), default=None)
            if best is not None and best.row_count >= 2 and best.col_count >= 2:
                rows = best.extract()
                return _rows_to_html([[("" if c is None else str(c)) for c in row] for row in rows])
        except Exception:  # a PyMuPDF failure on one table must not fail the paper
            pass
    return _words_grid(page, region)


def _rows_to_html(rows: list[list[str]]) -> str | None:
    rows = [r for r in rows if any(c.strip() for c in r)]
    if len(rows) < 2 or max(len(r) for r in rows) < 2:
        return None
    out = ["<table>"]
    for r in rows:
        cells = "".join(f"<td>{html.escape(' '.join(c.split()))}</td>" for c in r)
        out.append(f"<tr>{cells}</tr>")
    out.append("</table>")
    return "".join(out)


def _words_grid(page: PageLayout, region: Box) -> str | None:
    """HTML ``<table>`` rebuilt from PyMuPDF's words inside ``region`` (points): rows by baseline,
    columns at x positions no word of the body rows crosses (module docstring); ``None`` when fewer
    than 2 rows x 2 columns come out."""
    words = page.words()
    x0, y0, x1, y1 = region
    words = [
        w for w in words
        if w[4].strip() and x0 - 1 <= (w[0] + w[2]) / 2 <= x1 + 1 and y0 - 1 <= (w[1] + w[3]) / 2 <= y1 + 1
    ]
    if len(words) < 4:
        return None
    # rows: words whose vertical centres are within 40% of the word height of each other
    words.sort(key=lambda w: ((w[1] + w[3]) / 2, w[0]))
    rows: list[list[tuple]] = []
    for w in words:
        c = (w[1] + w[3]) / 2
        if rows:
            last = rows[-1]
            lc = sum((x[1] + x[3]) / 2 for x in last) / len(last)
            if abs(c - lc) < 0.4 * (w[3] - w[1]):
                last.append(w)
                continue
        rows.append([w])
    if len(rows) < 2:
        return None
    # phrases: words of a row closer than ~1 space form one cell candidate; two numbers never do
    # ("36.9 80.0" set tight is two columns)
    row_phrases: list[list[list[tuple]]] = []
    for r in rows:
        r.sort(key=lambda w: w[0])
        phrases: list[list[tuple]] = []
        for w in r:
            h = w[3] - w[1]
            if (phrases and w[0] - phrases[-1][-1][2] < 0.45 * h
                    and not (_NUMBER_WORD.match(w[4]) and _NUMBER_WORD.match(phrases[-1][-1][4]))):
                phrases[-1].append(w)
            else:
                phrases.append([w])
        row_phrases.append(phrases)
    # columns: gaps not crossed by any phrase of the body rows (rows with the most phrases)
    counts = sorted(len(p) for p in row_phrases)
    typical = counts[len(counts) // 2]
    body_rows = [p for p in row_phrases if len(p) >= max(2, typical)] or row_phrases
    spans = sorted((p[0][0], p[-1][2]) for r in body_rows for p in r)
    merged: list[list[float]] = []
    for x0, x1 in spans:
        if merged and x0 <= merged[-1][1] + 1.0:
            merged[-1][1] = max(merged[-1][1], x1)
        else:
            merged.append([x0, x1])
    if len(merged) < 2:
        return None
    bounds = [(merged[i][1] + merged[i + 1][0]) / 2 for i in range(len(merged) - 1)]

    def column(x0: float, x1: float) -> int:
        return sum(1 for b in bounds if (x0 + x1) / 2 > b)

    def inside(w: tuple) -> bool:
        """Does word ``w`` lie (at least half of its width) inside the span of its column?"""
        lo, hi = merged[column(w[0], w[2])]
        return min(w[2], hi) - max(w[0], lo) >= 0.5 * (w[2] - w[0])

    numeric = [any(_NUMBER_WORD.match(w[4]) for p in phrases for w in p) for phrases in row_phrases]
    grid: list[list[str]] = []
    for i, phrases in enumerate(row_phrases):
        cells = [""] * (len(bounds) + 1)
        # the lowest header row (no number in it, numbers in the row below); upper header rows have
        # group labels spanning columns
        leaf = not numeric[i] and (i + 1 == len(row_phrases) or numeric[i + 1])
        for phrase in phrases:
            # a phrase set so tight it runs over several columns is split at the columns when every
            # word sits inside one column's span and, in a body row, what moves right is numbers
            # ("co-citation 82.9"; header "CLS USR CITE REC"); a label centred over its columns
            # ("Grobid Subset") crosses the gaps and stays one cell
            pieces = [(column(phrase[0][0], phrase[-1][2]), phrase)]
            cols = [column(w[0], w[2]) for w in phrase]
            if len(set(cols)) > 1 and all(inside(w) for w in phrase):
                moved = [w for w, c in zip(phrase, cols) if c != cols[0]]
                if leaf or (numeric[i] and all(_NUMBER_WORD.match(w[4]) for w in moved)):
                    pieces = [(col, [w for w, c in zip(phrase, cols) if c == col]) for col in sorted(set(cols))]
            for col, piece in pieces:
                cells[col] = (cells[col] + " " + " ".join(w[4] for w in piece)).strip()
        grid.append(cells)
    return _rows_to_html(grid)


# ------------------------------------------------------------------------------------ equations

_EQ_NUMBER = re.compile(r"\((?P<num>(?:[A-Z]\.?)?\d{1,3}[a-z]?)\)\s*$")


@dataclass(frozen=True)
class _EqNumber:
    """An equation number printed at the end of a line: ``body`` (the text before it, trailing blanks
    dropped) and ``num`` ("3", "A.1", "2b")."""

    body: str
    num: str

    def group(self, name: str) -> str:
        return getattr(self, name)


def _eq_number(text: str) -> _EqNumber | None:
    """The equation number ``(N)`` a line ends with, or None; found with a search for the trailing
    ``(N)`` (linear in the line's length: a lazy body before it would backtrack over long blank runs)."""
    m = _EQ_NUMBER.search(text)
    body = text[:m.start()].rstrip() if m is not None else ""
    if m is None or "\n" in body:
        return None
    return _EqNumber(body, m.group("num"))
_MATHY = re.compile(r"[=≤≥≈∝∑∏∫∈→←⇒∀∃∇∂≡≠<>]|\\[a-z]+")


@dataclass
class EquationDraft:
    """A display equation: its text (LaTeX when a backend gives it), printed number (``None`` when
    unnumbered) and region ``(x0, y0, x1, y1)`` in points on ``page``."""

    page: PageLayout
    text: str
    number: str | None
    bbox: Box


def _mathlike(text: str, lines: list[Line]) -> bool:
    if not text.strip():
        return False
    frac = max((ln.math_fraction() for ln in lines), default=0.0)
    return bool(_MATHY.search(text)) or frac >= 0.25


def find_equations(page: PageLayout, body: float, furniture: set[int], stops: set[int]) -> list[EquationDraft]:
    """Numbered display equations of one page, in reading order of their numbers.

    For each "(N)" at the right edge of a column, the display is grown from the lines on the
    number's row (left of it, same column) to math-like, non-sentence lines stacked directly
    above or below (gap < 0.9 line heights), never into another number's row.
    """
    lines = [ln for ln in page.lines if id(ln) not in furniture and id(ln) not in stops]
    right_edges: dict[tuple[float, float], float] = {}
    for ln in lines:
        col = page.column_of(ln.bbox)
        right_edges[col] = max(right_edges.get(col, 0.0), ln.x1)
    numbers: list[tuple[Line, _EqNumber, Span]] = []
    for ln in lines:
        m = _eq_number(ln.text)
        if not m:
            continue
        num = m.group("num")
        if num.isdigit() and int(num) > 300:
            continue
        if right_edges.get(page.column_of(ln.bbox), ln.x1) - ln.x1 > 12:
            continue
        span = next((sp for sp in reversed(ln.spans) if "(" in sp.text or num in sp.text), ln.spans[-1])
        numbers.append((ln, m, span))
    bands = [(sp.bbox[1], sp.bbox[3]) for _, _, sp in numbers]

    def in_other_band(o: Line, mine: tuple[float, float]) -> bool:
        """Does ``o`` sit on the row of another equation number than ``mine``?"""
        for band in bands:
            if band == mine:
                continue
            if min(o.y1, band[1]) - max(o.y0, band[0]) > 0.3 * min(o.height, band[1] - band[0]):
                return True
        return False

    out: list[EquationDraft] = []
    used: set[int] = set()
    for ln, m, span in numbers:
        col = page.column_of(ln.bbox)
        y0, y1 = span.bbox[1], span.bbox[3]
        h = max(1.0, y1 - y0)
        pool = [
            o for o in lines
            if o is not ln and id(o) not in used and page.column_of(o.bbox) == col and o.x1 <= span.bbox[0] + 1
            and not _looks_like_sentence(o.text) and _eq_number(o.text) is None
        ]
        row = [o for o in pool if min(o.y1, y1) - max(o.y0, y0) > 0.3 * min(o.height, h)]
        if not row and not m.group("body").strip():
            # the number sits between the rows of a split display: start from its neighbours
            row = [o for o in pool if max(y0 - o.y1, o.y0 - y1) < 0.9 * max(o.height, h) and _display_line(o)]
        members = ([ln] if m.group("body").strip() else []) + row
        if not members:
            continue
        # grow the display up and down through math-like lines
        grown = True
        while grown:
            grown = False
            top = min(o.y0 for o in members)
            bottom = max(o.y1 for o in members)
            for o in pool:
                if o in members or in_other_band(o, (y0, y1)):
                    continue
                gap = max(top - o.y1, o.y0 - bottom)
                if gap < 0.9 * max(o.height, h) and gap > -o.height and _display_line(o):
                    members.append(o)
                    grown = True
        members = _reading_rows(members)
        parts = [(m.group("body") if o is ln else o.text) for o in members]
        text = re.sub(r"\s+", " ", " ".join(parts)).strip()
        if not _mathlike(text, members) or _looks_like_sentence(text):
            continue
        for o in members:
            used.add(id(o))
        box_lines = [o for o in members if o is not ln] + ([ln] if ln in members else [])
        box = union([o.bbox for o in box_lines] + [span.bbox])
        out.append(EquationDraft(page=page, text=text, number=m.group("num"), bbox=box))
    return out


def _display_line(line: Line) -> bool:
    """A line that belongs to a display equation: mostly math, or math with at most 3 words."""
    words = len(re.findall(r"\b[a-z]{3,}\b", line.text))
    return line.math_fraction() >= 0.35 or (bool(_MATHY.search(line.text)) and words <= 3)


def _reading_rows(lines: list[Line]) -> list[Line]:
    """Lines grouped into rows by vertical overlap (top to bottom), each row left to right."""
    rows: list[tuple[float, float, list[Line]]] = []
    for o in sorted(lines, key=lambda o: (o.y0 + o.y1) / 2):
        for i, (a, b, members) in enumerate(rows):
            if min(o.y1, b) - max(o.y0, a) > 0.3 * min(o.height, b - a):
                members.append(o)
                rows[i] = (min(a, o.y0), max(b, o.y1), members)
                break
        else:
            rows.append((o.y0, o.y1, [o]))
    rows.sort(key=lambda r: (r[0] + r[1]) / 2)
    return [o for _, _, members in rows for o in sorted(members, key=lambda o: o.x0)]


def _layout_starts(lines: list[Line], pages: list[PageLayout]) -> list[bool]:
    """Entry starts from the layout, decided per page column.

    Hanging indent (at least 20% of the column's lines indented by more than 3pt): an entry
    starts at each line on the left margin. Otherwise extra vertical space: an entry starts after
    a gap clearly larger than the usual line pitch. Otherwise each text block is an entry.
    """
    columns: dict[tuple[int, tuple[float, float]], list[int]] = {}
    for i, ln in enumerate(lines):
        columns.setdefault((ln.page, pages[ln.page - 1].column_of(ln.bbox)), []).append(i)
    starts = [False] * len(lines)
    for idx in columns.values():
        col = [lines[i] for i in idx]
        margin = min(x.x0 for x in col)
        indented = sum(1 for x in col if x.x0 > margin + 3)
        if indented >= 0.2 * len(col):
            for i in idx:
                starts[i] = lines[i].x0 <= margin + 3
            continue
        pitches = [b.y0 - a.y0 for a, b in zip(col, col[1:]) if 0 < b.y0 - a.y0 < 3 * a.height]
        usual = sorted(pitches)[len(pitches) // 2] if pitches else 0.0
        gapped = usual and sum(1 for p in pitches if p > usual + 2.0) >= 2
        for k, i in enumerate(idx):
            ln = lines[i]
            if k == 0:
                prev = lines[i - 1].text.rstrip() if i > 0 else ""
                starts[i] = i == 0 or not (ln.text[:1].islower() or prev.endswith(("-", ",", ";", "and")))
                continue
            before = col[k - 1]
            if gapped:
                starts[i] = ln.y0 - before.y0 > usual + 2.0 or ln.y0 < before.y0
            else:
                starts[i] = (ln.page, ln.block) != (before.page, before.block)
    return starts


def looks_like_sentence(text: str) -> bool:
    """Prose rather than math: 6+ lower-case words of 3+ letters making 60% of the tokens."""
    return _looks_like_sentence(text)


def _looks_like_sentence(text: str) -> bool:
    words = re.findall(r"[A-Za-z]{3,}", text)
    lower = [w for w in words if w.islower()]
    return len(lower) >= 6 and len(lower) >= 0.6 * len(text.split())


# ----------------------------------------------------------------------------------- references

_NUMBERED_REF = re.compile(r"^\s*(\[\d{1,3}\]|\d{1,3}\.\s)")


@dataclass
class ReferenceDraft:
    """One bibliography entry: its text, the page where it starts and its first line."""

    text: str
    page: int
    line: Line | None = None


def split_references(lines: list[Line], pages: list[PageLayout], vocabulary: set[str]) -> list[ReferenceDraft]:
    """Split the reference section's lines (reading order, furniture removed) into entries.

    ``vocabulary`` (the document's lower-case words) decides which line-end hyphens to drop.
    """
    lines = [ln for ln in lines if ln.text.strip()]
    if not lines:
        return []
    numbered = sum(1 for ln in lines if _NUMBERED_REF.match(ln.text))
    if numbered >= 3 and numbered >= 0.15 * len(lines):
        starts = [bool(_NUMBERED_REF.match(ln.text)) for ln in lines]
    else:
        starts = _layout_starts(lines, pages)
    entries: list[list[Line]] = []
    for ln, start in zip(lines, starts):
        if start or not entries:
            entries.append([ln])
        else:
            entries[-1].append(ln)
    out: list[ReferenceDraft] = []
    for group in entries:
        text = join_wrapped([ln.text for ln in group], vocabulary)
        if len(text) < 15 and out:  # a stray fragment: part of the previous entry
            out[-1].text = (out[-1].text + " " + text).strip()
            continue
        out.append(ReferenceDraft(text=text, page=group[0].page, line=group[0]))
    return out


__all__ = [
    "Caption",
    "EquationDraft",
    "ReferenceDraft",
    "find_captions",
    "find_equations",
    "locate_floats",
    "split_references",
    "table_html",
]
