"""Which section holds an element: the ``ref_section_id`` of chunks, tables, figures, equations and
references.

A section's span is its heading plus the lines that follow it in reading order up to the next
heading (:func:`neusym.ingest.parse.sections.build_sections`), so every text line of the document belongs
to at most one section (none before the first heading, nor page furniture). An element belongs to
the section of the line that anchors it:

- a table or figure: the first line of its caption;
- an equation: the lines inside its region (the first in reading order);
- a reference: the first line of the entry;
- a chunk: the line where the chunk's text starts on its page.

An element known only by a region (a layout-model or MinerU box with no caption line) takes the
section of the first line inside the region, else of the last line above it in its column on the
same page, else of the last line of an earlier page.
"""

from __future__ import annotations

from neusym.ingest.parse.pdf import Box, Line, PageLayout
from neusym.ingest.parse.sections import SectionDraft


class SectionIndex:
    """Look-ups from lines, page regions and page-text offsets to section indexes (``None`` when
    the position lies before the first heading).

    ``drafts`` are the sections in reading order (their index is their ordinal); ``pages`` the
    page layouts the drafts were cut from.
    """

    def __init__(self, pages: list[PageLayout], drafts: list[SectionDraft]) -> None:
        self.pages = pages
        self._of_line: dict[int, int] = {}
        for i, d in enumerate(drafts):
            for ln in d.heading.lines:
                self._of_line[id(ln)] = i
            for ln in d.content:
                self._of_line[id(ln)] = i
        # reading-order position of every line, and the section in force at that position
        self._order: dict[int, int] = {}
        self._running: list[int | None] = []
        current: int | None = None
        for page in pages:
            for ln in page.lines:
                current = self._of_line.get(id(ln), current)
                self._order[id(ln)] = len(self._running)
                self._running.append(current)

    def of_line(self, line: Line) -> int | None:
        """Section index of a text line; furniture lines take the section in force at their position."""
        if id(line) in self._of_line:
            return self._of_line[id(line)]
        pos = self._order.get(id(line))
        return self._running[pos] if pos is not None else None

    def of_region(self, page_number: int, bbox: Box) -> int | None:
        """Section index of a region ``(x0, y0, x1, y1)`` (points) on page ``page_number`` (from 1)."""
        page = self.pages[page_number - 1]
        inside = [
            ln for ln in page.lines
            if bbox[0] - 1 <= (ln.x0 + ln.x1) / 2 <= bbox[2] + 1 and bbox[1] - 1 <= (ln.y0 + ln.y1) / 2 <= bbox[3] + 1
        ]
        if inside:
            return self.of_line(min(inside, key=lambda ln: self._order[id(ln)]))
        col = page.column_of(bbox)
        above = [ln for ln in page.lines if ln.y1 <= bbox[1] + 1 and page.column_of(ln.bbox) in (col, (0.0, page.width))]
        if above:
            return self.of_line(max(above, key=lambda ln: self._order[id(ln)]))
        for earlier in reversed(self.pages[: page_number - 1]):
            if earlier.lines:
                return self.of_line(earlier.lines[-1])
        return None

    def reading_position(self, page_number: int, bbox: Box) -> int:
        """Reading-order position of a region: that of the first line inside it, else just after
        the last line above it in its column, else the start of the page (for ordering elements)."""
        page = self.pages[page_number - 1]
        inside = [
            ln for ln in page.lines
            if bbox[0] - 1 <= (ln.x0 + ln.x1) / 2 <= bbox[2] + 1 and bbox[1] - 1 <= (ln.y0 + ln.y1) / 2 <= bbox[3] + 1
        ]
        if inside:
            return min(self._order[id(ln)] for ln in inside)
        col = page.column_of(bbox)
        above = [ln for ln in page.lines if ln.y1 <= bbox[1] + 1 and page.column_of(ln.bbox) in (col, (0.0, page.width))]
        if above:
            return max(self._order[id(ln)] for ln in above) + 1
        return self._order[id(page.lines[0])] if page.lines else 0

    def of_page_offset(self, page_number: int, offset: int) -> int | None:
        """Section index at character ``offset`` of the page's text (``PageLayout.text``)."""
        page = self.pages[page_number - 1]
        line = None
        for start, ln in page_line_offsets(page):
            if start > offset:
                break
            line = ln
        if line is None:
            return self.of_region(page_number, (0.0, 0.0, page.width, 0.0))
        return self.of_line(line)


def page_line_offsets(page: PageLayout) -> list[tuple[int, Line]]:
    """``(offset, line)`` for every line of ``page.text``, in order: where each line starts in the
    page text (blocks joined by a blank line, lines by a newline, as :attr:`PageLayout.text`)."""
    out: list[tuple[int, Line]] = []
    pos = 0
    first_block = True
    for block in page.blocks:
        if not block.text.strip():
            continue
        if not first_block:
            pos += 2
        first_block = False
        for j, ln in enumerate(block.lines):
            if j:
                pos += 1
            out.append((pos, ln))
            pos += len(ln.text)
    return out


def chunk_offsets(content: str, pieces: list[str]) -> list[int]:
    """Start offset of each chunk in its page text (chunks are consecutive, non-overlapping)."""
    out: list[int] = []
    cursor = 0
    for piece in pieces:
        at = content.find(piece, cursor)
        if at < 0:
            at = content.find(piece[:40], cursor)
        if at < 0:
            at = cursor
        out.append(at)
        cursor = at + max(1, len(piece) if content.startswith(piece, at) else 1)
    return out
