"""Section structure: headings from a trustworthy PDF outline, else from fonts and numbering.

A heading is one visual line (plus wrapped continuation lines of the same style) that starts a
text block. Two sources:

- the PDF outline (``doc.get_toc()``), used only when it is trustworthy: every entry points at an
  existing page, targets never go backwards, and at least 70% of the titles are found printed at
  the start of a line on the target page (or the next one, hyperref anchors sometimes sit just
  before a page break). Outline titles often lack the printed number ("Introduction" for
  "1 INTRODUCTION"); the printed line is used as the title.
- otherwise font/numbering detection: numbered headings ("3", "3.2", "3.2.1", "A", "A.1",
  "IV.") in bold, larger or small-caps type; the usual unnumbered headings (Abstract, References,
  Acknowledgments, Limitations, ...) in such type; and other short bold lines clearly larger than
  body text (AAAI-style unnumbered headings) after the first real heading. Section numbers must
  move forward (a "2" after "5" is a table cell, not a heading).

The content of a section is the text between its heading and the next heading, without page
furniture (running headers, page numbers, venue footers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pymupdf

from neusym.ingest.parse.pdf import Line, PageLayout
from neusym.ingest.parse.text import decode_small_caps, join_lines, norm

_NUMBERED = re.compile(
    r"^(?P<num>(?:\d{1,2}|[A-Z])(?:\.\d{1,2}){0,3})(?P<dot>\.?)\s+(?P<title>\S.*)$"
)
_ROMAN = re.compile(r"^(?P<num>(?=[IVX])X?(?:IX|IV|V?I{0,3}))\.\s+(?P<title>[A-Z].*)$")
SPECIAL_HEADINGS = {
    "abstract",
    "references",
    "bibliography",
    "reference",
    "acknowledgments",
    "acknowledgements",
    "acknowledgment",
    "acknowledgement",
    "limitations",
    "limitation",
    "ethics statement",
    "ethical statement",
    "ethical considerations",
    "ethics",
    "broader impact",
    "broader impacts",
    "broader impact statement",
    "impact statement",
    "reproducibility statement",
    "author contributions",
    "appendix",
    "appendices",
    "supplementary material",
    "introduction",
    "related work",
    "conclusion",
    "conclusions",
}
REFERENCE_HEADINGS = {"references", "bibliography", "reference", "literature cited"}


@dataclass
class Heading:
    """A detected heading: printed ``title``, ``level`` (1..3), the line(s) it occupies."""

    title: str
    level: int
    lines: list[Line]
    number: str | None = None

    @property
    def page(self) -> int:
        """1-based page number of the heading's first line."""
        return self.lines[0].page


@dataclass
class SectionDraft:
    """A section before ids are assigned: heading plus content lines in reading order."""

    heading: Heading
    content: list[Line] = field(default_factory=list)
    parent: int | None = None  # index of the parent draft

    @property
    def text(self) -> str:
        """Content text: lines joined by newlines, blocks by blank lines."""
        return join_lines(self.content)

    @property
    def pages(self) -> list[int]:
        """Sorted page numbers spanned by the heading and its content."""
        return sorted({self.heading.page, *(ln.page for ln in self.content)})


def _styled(line: Line, body: float) -> bool:
    """Bold, clearly larger than body text, or set in (small) capitals."""
    if line.bold:
        return True
    if line.max_size >= body + 0.8:
        return True
    letters = [c for c in line.text if c.isalpha()]
    return len(letters) >= 4 and sum(c.isupper() for c in letters) >= 0.9 * len(letters)


def _heading_text(line: Line) -> str:
    return decode_small_caps(line).strip()


def _continuations(line: Line, block_lines: list[Line], body: float) -> list[Line]:
    """Following lines of the same block with the same style (a heading wrapped over lines)."""
    out: list[Line] = []
    idx = block_lines.index(line)
    prev = line
    for nxt in block_lines[idx + 1 :]:
        same = (
            abs(nxt.size - line.size) < 0.3
            and nxt.bold == line.bold
            and nxt.y0 - prev.y1 < line.height
            and _styled(nxt, body)
        )
        if not same or len(out) >= 2:
            break
        out.append(nxt)
        prev = nxt
    # a wrapped heading never continues with a whole paragraph of the same style
    if out and len(out) == len(block_lines) - idx - 1 and len(block_lines) - idx > 3:
        return []
    return out


def _num_key(num: str) -> tuple[str, list[int]]:
    parts = num.split(".")
    head = parts[0]
    rest = [int(p) for p in parts[1:]]
    return head, rest


class _Numbering:
    """Keeps headings' numbers moving forward: 1, 1.1, 1.2, 2, ..., A, A.1, B ..."""

    def __init__(self) -> None:
        self.top: int | None = None  # last numeric top-level number
        self.letter: str | None = None  # last appendix letter
        self.sub: list[int] = []
        self.appendix_ok = False

    def accept(self, num: str) -> bool:
        """Whether ``num`` ("3", "3.2", "A.1") continues the numbering; records it when it does."""
        head, rest = _num_key(num)
        if head.isdigit():
            n = int(head)
            if self.letter is not None:
                return False
            if not rest:
                ok = (self.top is None and n <= 2) or (self.top is not None and self.top < n <= self.top + 2)
                if ok:
                    self.top, self.sub = n, []
                return ok
            if self.top is None and n <= 2:
                self.top = n
            if n != self.top:
                return False
            if rest <= self.sub and self.sub:
                return False
            self.sub = rest
            return True
        # appendix letter
        if not self.appendix_ok and not (self.top is not None and self.top >= 2):
            return False
        if not rest:
            first = self.letter is None and head in "AB"
            nxt = self.letter is not None and 0 < ord(head) - ord(self.letter) <= 2
            if first or nxt:
                self.letter, self.sub = head, []
                return True
            return False
        if self.letter is None and head == "A":
            self.letter = "A"
        if head != self.letter:
            return False
        if rest <= self.sub and self.sub:
            return False
        self.sub = rest
        return True


def detect_headings(pages: list[PageLayout], body: float, furniture: set[int]) -> list[Heading]:
    """Headings found by font and numbering rules, in reading order (see module docstring)."""
    numbering = _Numbering()
    headings: list[Heading] = []
    unnumbered_sizes: list[float] = []
    pending_unnumbered: list[Heading] = []
    seen_real = False
    front = front_matter(pages)
    for page in pages:
        for block in page.blocks:
            line = block.lines[0]
            if id(line) in furniture or id(line) in front:
                continue
            if line.max_size < body - 1.5:  # figure labels, footnotes
                continue
            text = _heading_text(line)
            if not text or len(text) > 120 or not _styled(line, body):
                continue
            plain = norm(text.rstrip(".:"))
            if plain in SPECIAL_HEADINGS and len(text) < 40:
                if plain in REFERENCE_HEADINGS or plain in {"appendix", "appendices"}:
                    numbering.appendix_ok = True
                headings.append(Heading(title=text.rstrip(":"), level=1, lines=[line]))
                seen_real = True
                continue
            m = _NUMBERED.match(text) or _ROMAN.match(text)
            if m:
                title = m.group("title")
                num = m.group("num")
                if not _plausible_title(title, lenient=line.bold and len(block.lines) <= 2):
                    continue
                first = next(sp for sp in line.spans if sp.text.strip())
                if first.size < 0.85 * line.size:  # superscript affiliation mark, not a number
                    continue
                if _ROMAN.match(text) and not title.isupper():
                    continue
                if num[0].isalpha() and not _ROMAN.match(text) and len(num) == 1 and not (line.bold or line.max_size > body + 0.5):
                    continue
                if not _ROMAN.match(text) and not numbering.accept(num):
                    continue
                cont = _continuations(line, block.lines, body)
                full = " ".join([text] + [_heading_text(c) for c in cont])
                if len(full) > 160:
                    continue
                level = min(3, num.count(".") + 1)
                if _ROMAN.match(text):
                    level = 1
                headings.append(Heading(title=full, level=level, lines=[line, *cont], number=num))
                seen_real = True
                continue
            # unnumbered heading: bold, clearly larger than body text, short, no sentence punctuation
            if (
                seen_real
                and line.bold
                and line.size >= body + 0.8
                and len(text) <= 80
                and text[0].isupper()
                and not text.endswith((".", ",", ";"))
                and len(block.lines) <= 2
                and not re.search(r"(?<!\d)\d+\.\d+", text)
            ):
                cont = _continuations(line, block.lines, body)
                full = " ".join([text] + [_heading_text(c) for c in cont])
                h = Heading(title=full, level=1, lines=[line, *cont])
                pending_unnumbered.append(h)
                unnumbered_sizes.append(line.size)
                headings.append(h)
    if pending_unnumbered:
        top = max(unnumbered_sizes)
        for h in pending_unnumbered:
            h.level = 1 if h.lines[0].size >= top - 0.3 else 2
    return headings


def front_matter(pages: list[PageLayout]) -> set[int]:
    """``id()`` of the lines before the Abstract heading (or an inline "Abstract." paragraph) on
    the first two pages: title, authors, affiliations. Empty when no abstract marker is found."""
    before: list[Line] = []
    for page in pages[:2]:
        for line in page.lines:
            if norm(line.text) == "abstract" or re.match(r"^\s*abstract\s*[.:\u2014\u2013-]", line.text, re.I):
                return {id(x) for x in before}
            before.append(line)
    return set()


def _plausible_title(title: str, lenient: bool = False) -> bool:
    if len(title) < 2 or len(title) > 110:
        return False
    starts_ok = title[0].isupper() or (lenient and title[0].islower())
    if not (starts_ok or title[0].isdigit() and not title[:3].replace(".", "").isdigit()):
        return False
    digits = sum(c.isdigit() for c in title)
    if digits > 0.3 * len(title):
        return False
    if title.endswith((",", ";")):
        return False
    return True


def toc_headings(
    doc: pymupdf.Document, pages: list[PageLayout], body: float, furniture: set[int]
) -> list[Heading] | None:
    """Headings taken from the PDF outline, or ``None`` when the outline is absent or untrustworthy.

    Trust rules: all targets within ``1..page_count``; targets non-decreasing in outline order;
    at least 70% of the entries found as printed lines on their target page (or the next one).
    Unmatched entries are dropped. Standard unnumbered headings the outline lacks (Abstract,
    References, Acknowledgments...) are added from font detection.
    """
    try:
        toc = doc.get_toc(simple=True)
    except Exception:
        return None
    if not toc:
        return None
    n = len(pages)
    last = 0
    for level, title, page in toc:
        if not (1 <= page <= n) or page < last or not str(title).strip():
            return None
        last = page
    found: list[Heading] = []
    used: set[int] = set()
    for level, title, page in toc:
        hit = _find_printed(str(title), pages, page, used, furniture, body)
        if hit is None:
            continue
        lines, printed = hit
        used.update(id(x) for x in lines)
        found.append(Heading(title=printed, level=min(3, max(1, int(level))), lines=lines))
    if len(found) < 0.7 * len(toc):
        return None
    # add standard unnumbered headings the outline lacks (e.g. Abstract, References)
    for h in detect_headings(pages, body, furniture):
        if h.number is None and norm(h.title) in SPECIAL_HEADINGS and id(h.lines[0]) not in used:
            found.append(h)
    order = {id(line): i for i, line in enumerate(ln for p in pages for ln in p.lines)}
    found.sort(key=lambda h: order[id(h.lines[0])])
    return found


def _find_printed(
    title: str, pages: list[PageLayout], page: int, used: set[int], furniture: set[int], body: float
) -> tuple[list[Line], str] | None:
    """The line(s) printing an outline title on its target page or the next.

    First choice: a heading-styled line (bold, larger, capitals) whose text, number stripped,
    equals the title, or starts it and continues on the next lines of its block (a wrapped
    heading). Second choice: any line at the start of a block equal to the title (some
    templates set subsection headings in plain body type).
    """
    target = norm(title)
    target_bare = norm(_strip_number(title, letters=True))
    if not target_bare:
        return None
    for styled_only in (True, False):
        for pno in (page, page + 1):
            if pno > len(pages):
                break
            for block in pages[pno - 1].blocks:
                for i, line in enumerate(block.lines):
                    if id(line) in used or id(line) in furniture:
                        continue
                    if styled_only and not _styled(line, body):
                        continue
                    if not styled_only and i > 0:
                        continue
                    text = _heading_text(line)
                    bare = norm(_strip_number(text, letters=True))
                    if not bare:
                        continue
                    if bare == target_bare or norm(text) == target:
                        return [line], text
                    # wrapped heading: the outline title continues on the next line(s) of the block
                    if styled_only and target_bare.startswith(bare) and len(bare) >= 8:
                        lines = [line]
                        acc = text
                        for nxt in block.lines[i + 1 : i + 3]:
                            acc = acc + " " + _heading_text(nxt)
                            lines.append(nxt)
                            if norm(_strip_number(acc, letters=True)) == target_bare:
                                return lines, acc
    return None


def _strip_number(text: str, letters: bool = False) -> str:
    """``"3.2 Training"`` -> ``"Training"``; a bare appendix letter ("A Code") only with ``letters``."""
    m = _NUMBERED.match(text.strip())
    if m and (letters or m.group("num")[0].isdigit() or "." in m.group("num") or m.group("dot")):
        return m.group("title")
    m = _ROMAN.match(text.strip())
    if m and m.group("num"):
        return m.group("title")
    return text


def build_sections(
    pages: list[PageLayout], headings: list[Heading], furniture: set[int]
) -> list[SectionDraft]:
    """Cut the document's reading-order lines at the headings; parents from levels."""
    heading_lines = {id(ln): h for h in headings for ln in h.lines}
    starts = {id(h.lines[0]): h for h in headings}
    drafts: list[SectionDraft] = []
    current: SectionDraft | None = None
    for page in pages:
        for line in page.lines:
            key = id(line)
            if key in starts:
                current = SectionDraft(heading=starts[key])
                drafts.append(current)
                continue
            if key in heading_lines or key in furniture or current is None:
                continue
            current.content.append(line)
    stack: list[int] = []
    for i, d in enumerate(drafts):
        while stack and drafts[stack[-1]].heading.level >= d.heading.level:
            stack.pop()
        d.parent = stack[-1] if stack else None
        stack.append(i)
    return drafts
