"""Bibliographic metadata from the PDF itself: title, authors, abstract, venue and year.

Sources, in order of trust:

- **title**: the PDF's own metadata title when it is sane (not empty, not a URL or file name, and
  printed on page 1); otherwise the largest text near the top of page 1 (lines of about the same
  size run together), small capitals decoded.
- **authors**: the lines between the title and the Abstract heading set in the authors' style
  (bold in ACL/ICLR/NeurIPS/ICML templates), split at commas, "and", footnote/affiliation marks
  (``∗ † ‡ ♠ 1,2``) and wide gaps; e-mail, affiliation and "Anonymous" lines are skipped. Falls
  back to the PDF metadata author field when it names people printed on page 1.
- **abstract** (assembled by :func:`neusym.ingest.parse.parse_pdf`): the content of the "Abstract"
  section, else a page-1 paragraph starting "Abstract." / "Abstract—" (:func:`abstract_from_page`).
- **venue/year**: the venue footer/header printed on the first page (ACL Anthology "Proceedings
  of the 58th Annual Meeting of the Association for Computational Linguistics ... 2020", "Findings
  of ...", "Published as a conference paper at ICLR 2024", NeurIPS/ICML/AAAI notices). Nothing is
  guessed: unknown fields stay ``None`` (e.g. "Under review" copies).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pymupdf

from neusym.ingest.parse.pdf import Line, PageLayout, fix_accents, render_spans, strip_footnote_marks
from neusym.ingest.parse.text import decode_small_caps, join_wrapped, norm
from neusym.venues import FOOTER_EVENTS, FOOTER_VOLUMES

_AFFILIATION = re.compile(
    r"universit|institut|\bcollege\b|\bschool\b|department|\bdept\b|laborator|\blabs?\b|research|"
    r"\bgoogle\b|microsoft|\bmeta\b|facebook|deepmind|openai|amazon|nvidia|\bapple\b|\bibm\b|\binc\b|"
    r"\bcorp|\bltd\b|gmbh|academy|academia|\bcentre\b|\bcenter\b|foundation|hospital|\bai2\b|@|"
    r"https?://|www\.|\.com\b|\.edu\b|equal contribution|correspond|work done|\bemail\b|anonymous|"
    r"double-blind|\buc\s|\bmit\b|\bcmu\b|\bucla\b|\bepfl\b|\beth\b",
    re.I,
)
_NAME_PARTICLES = {"van", "von", "de", "der", "den", "da", "di", "du", "la", "le", "del", "della", "dos", "bin", "al", "el", "y", "ter", "zu"}
_MARK_ONLY = re.compile(r"^[\s\d,∗*†‡§¶♠♣♥♦♢♡⋆⋄•·αβγδεζηθικλμνξοπρστυφχψωτ]+$")


@dataclass
class PaperMetadata:
    """Metadata fields found in the PDF (``None``/empty when unknown)."""

    title: str | None = None
    authors: list[str] = field(default_factory=list)
    conference_full: str | None = None
    conference_abbreviation: str | None = None
    pub_year: int | None = None
    volume: str | None = None


# ---------------------------------------------------------------------------------------- title


def _sane_meta_title(title: str, page1_norm: str) -> bool:
    t = title.strip()
    if len(t) < 10 or len(t.split()) < 2:
        return False
    low = t.lower()
    if re.search(r"https?:|www\.|\.pdf$|\.tex$|\.dvi$|\.docx?$|^microsoft word|^untitled|^arxiv:", low):
        return False
    nt = norm(t)
    return len(nt) >= 8 and nt in page1_norm


def _letter_size(line: Line) -> float:
    return max((sp.size for sp in line.spans if any(c.isalpha() for c in sp.text)), default=line.size)


def title_lines(page: PageLayout, furniture: set[int], body: float) -> list[Line]:
    """The lines of the printed title on page 1.

    Runs of consecutive lines in the top 45% of the page with the same letter size; the title is
    the top-most run (at most 4 lines) whose type is at least 70% of the largest type there and
    clearly larger than body text (a big logo lower down does not win). Empty when nothing is set
    larger than the body text.
    """
    candidates = [
        ln
        for ln in page.lines
        if id(ln) not in furniture and ln.y0 < 0.45 * page.height and sum(c.isalpha() for c in ln.text) >= 2
    ]
    if not candidates:
        return []
    biggest = max(_letter_size(ln) for ln in candidates)
    threshold = max(0.7 * biggest, body + 1.5)
    starts = sorted((ln for ln in candidates if _letter_size(ln) >= threshold), key=lambda ln: ln.y0)
    if not starts:
        return []  # nothing set larger than body text: no recognisable printed title
    start = starts[0]
    size = _letter_size(start)
    lines = [start]
    for ln in sorted(candidates, key=lambda x: x.y0):
        if ln is start or ln.y0 <= start.y0:
            continue
        if len(lines) < 4 and abs(_letter_size(ln) - size) <= 0.6 and -4 <= ln.y0 - lines[-1].y1 < 1.2 * start.height:
            lines.append(ln)
        elif ln.y0 > lines[-1].y1 + 1:
            break
    return lines


def clean_line_text(line: Line) -> str:
    """Line text with small capitals decoded and footnote/affiliation marks removed
    (superscript-size spans without letters, and trailing ``∗ † ‡`` symbols)."""
    size = _letter_size(line)
    keep = [
        sp
        for sp in line.spans
        if not (sp.text.strip() and sp.size < 0.8 * size and not any(c.isalpha() for c in sp.text))
    ]
    if not keep:
        return ""
    sub = Line(text=line.text, bbox=line.bbox, spans=keep, page=line.page)
    sub.text = render_spans(keep)
    text = decode_small_caps(sub)
    end = len(text)
    while end and (text[end - 1].isspace() or text[end - 1] in _TITLE_MARKS):
        end -= 1
    return text[:end].strip()


_TITLE_MARKS = "∗†‡§¶♠♣♥♦♢♡⋆⋄"
"""Footnote marks a printed title may end with (dropped with the blanks around them)."""


def _printed_title(lines: list[Line], vocabulary: set[str]) -> str | None:
    if not lines:
        return None
    title = join_wrapped([clean_line_text(ln) for ln in lines], vocabulary)
    return title or None


# -------------------------------------------------------------------------------------- authors


def _is_marker(span_text: str, size: float, line_size: float) -> bool:
    t = span_text.strip()
    if not t:
        return False
    if size < 0.8 * line_size and len(t) <= 8:
        return True
    return bool(_MARK_ONLY.match(t)) and len(t) <= 6


def _split_names(line: Line) -> list[str]:
    segments: list[str] = []
    cur = ""
    prev_x1 = None
    for s in line.spans:
        if _is_marker(s.text, s.size, line.size):
            segments.append(cur)
            cur = ""
            prev_x1 = s.bbox[2]
            continue
        if prev_x1 is not None and s.bbox[0] - prev_x1 > 1.2 * s.size:
            segments.append(cur)
            cur = ""
        cur += s.text if not (s.space_before and cur and not cur.endswith(" ")) else " " + s.text
        prev_x1 = s.bbox[2]
    segments.append(cur)
    names: list[str] = []
    for seg in segments:
        for part in re.split(r",|;|\s+and\s+|\s+&\s+|^and\s+|\s{3,}", seg):
            name = strip_footnote_marks(re.sub(r"[\d∗*]+", "", part)).strip(" .,")
            name = fix_accents(re.sub(r"\s+", " ", name))
            if _looks_like_name(name):
                names.append(name)
    return names


def _looks_like_name(name: str) -> bool:
    words = name.split()
    if not (2 <= len(words) <= 6) or len(name) > 60:
        return False
    if _AFFILIATION.search(name):
        return False
    caps = sum(1 for w in words if w[0].isupper())
    particles = sum(1 for w in words if w.lower() in _NAME_PARTICLES)
    return caps + particles == len(words) and caps >= 2 and not any(c.isdigit() for c in name)


def _printed_authors(page: PageLayout, title: list[Line], front: list[Line]) -> list[str]:
    zone = [ln for ln in front if ln not in title and ln.y0 >= (title[-1].y0 if title else 0)]
    zone = _rows_left_to_right(zone)
    zone = [ln for ln in zone if not ("@" in ln.text or "http" in ln.text.lower())]
    if not zone:
        return []
    if any("anonymous" in ln.text.lower() for ln in zone[:3]):
        return []
    bold = [ln for ln in zone if ln.bold]
    groups: list[list[Line]] = []
    if bold:
        groups.append([ln for ln in bold if abs(ln.size - bold[0].size) < 1.0])
    plain = [ln for ln in zone if not ln.bold]
    if plain:
        groups.append([ln for ln in plain if abs(ln.size - plain[0].size) < 0.3][:4])
    for chosen in groups:
        names: list[str] = []
        for ln in chosen:
            for name in _split_names(ln):
                if name not in names:
                    names.append(name)
        if names:
            return names
    return []


def _rows_left_to_right(lines: list[Line]) -> list[Line]:
    """Lines sorted into visual rows (centres within 4pt), each row left to right."""
    rows: list[list[Line]] = []
    for ln in sorted(lines, key=lambda x: (x.y0 + x.y1) / 2):
        c = (ln.y0 + ln.y1) / 2
        if rows and abs(c - (rows[-1][0].y0 + rows[-1][0].y1) / 2) < 4:
            rows[-1].append(ln)
        else:
            rows.append([ln])
    return [ln for row in rows for ln in sorted(row, key=lambda x: x.x0)]


def _meta_authors(raw: str, page1_text: str) -> list[str]:
    if not raw or re.search(r"https?:|@", raw):
        return []
    parts = [p.strip() for p in re.split(r";|,|(?<!\s)\s+and\s+", raw) if p.strip()]
    low = page1_text.lower()
    names = [p for p in parts if _looks_like_name(p.title() if p.islower() else p)]
    if not names or any(n.split()[-1].lower() not in low for n in names):
        return []
    return [n.title() if n.islower() else n for n in names]


# ---------------------------------------------------------------------------------------- venue

_ACL_EVENTS = FOOTER_EVENTS
_VOLUMES = FOOTER_VOLUMES
_YEAR = re.compile(r"\b(19[89]\d|20[0-4]\d)\b")


def _venue(text: str) -> tuple[str | None, str | None, int | None, str | None]:
    """(conference_full, abbreviation, year, volume) from first-page banner text."""
    t = re.sub(r"\s+", " ", text)
    if re.search(r"under review|submitted to|preliminary work|anonymous", t, re.I):
        t = re.sub(r"(under review|submitted to|preliminary work)[^.]*\.?", " ", t, flags=re.I)
    m = re.search(r"Findings of the Association for Computational Linguistics:?\s*([A-Z]+)?[ -]*(\d{4})?", t)
    if m:
        abbr = m.group(1) or None
        full = None
        for pat, ab, name in _ACL_EVENTS:
            if abbr and ab == abbr:
                full = name
                break
        year = int(m.group(2)) if m.group(2) else _first_year(t[m.end():])
        return full, abbr, year, "findings"
    m = re.search(r"Proceedings of (the )?(.{0,240})", t)
    if m:
        chunk = m.group(2)
        head = chunk.split("pages")[0]  # the proceedings title, before "pages 2270–2282"
        dated = re.sub(r"pages\s+\d+\s*[–—-]\s*\d+", " ", chunk)  # page numbers are not years
        for pat, abbr, name in _ACL_EVENTS:
            if pat.search(head):
                year_m = _YEAR.search(head) or _YEAR.search(dated)
                volume = next((v for p, v in _VOLUMES if p.search(head)), None)
                return name, abbr, int(year_m.group(1)) if year_m else None, volume
        if re.search(r"International Conference on Machine Learning", head, re.I):
            y = _YEAR.search(dated)
            return "International Conference on Machine Learning", "ICML", int(y.group(1)) if y else None, None
    m = re.search(r"Published as a conference paper at (ICLR|COLM|TMLR)\s*(\d{4})", t)
    if m:
        names = {"ICLR": "International Conference on Learning Representations", "COLM": "Conference on Language Modeling",
                 "TMLR": "Transactions on Machine Learning Research"}
        return names[m.group(1)], m.group(1), int(m.group(2)), None
    m = re.search(r"Conference on Neural Information Processing Systems \((NeurIPS|NIPS) (\d{4})\)([^.]*)", t)
    if m:
        volume = "datasets and benchmarks" if re.search(r"Datasets and Benchmarks", m.group(3), re.I) else None
        return "Conference on Neural Information Processing Systems", "NeurIPS", int(m.group(2)), volume
    m = re.search(r"Association for the Advancement of Artificial Intelligence", t)
    if m:
        y = re.search(r"Copyright\s*©?\s*(\d{4})", t) or _YEAR.search(t)
        return "AAAI Conference on Artificial Intelligence", "AAAI", int(y.group(1)) if y else None, None
    m = re.search(r"This (CVPR|ICCV|WACV|ECCV)\s*(\d{4})?\s*(paper|workshop paper) is the Open Access version", t)
    if m:
        names = {"CVPR": "IEEE/CVF Conference on Computer Vision and Pattern Recognition",
                 "ICCV": "IEEE/CVF International Conference on Computer Vision",
                 "WACV": "IEEE/CVF Winter Conference on Applications of Computer Vision",
                 "ECCV": "European Conference on Computer Vision"}
        return names[m.group(1)], m.group(1), int(m.group(2)) if m.group(2) else None, None
    return None, None, None, None


def _first_year(text: str) -> int | None:
    m = _YEAR.search(text)
    return int(m.group(1)) if m else None


def _banner_text(pages: list[PageLayout], furniture: set[int]) -> str:
    """Text likely to carry the venue: page-1 header/footer zones and furniture of pages 1-2."""
    parts: list[str] = []
    for page in pages[:2]:
        for ln in page.lines:
            in_zone = ln.y1 <= 0.1 * page.height or ln.y0 >= 0.85 * page.height
            if id(ln) in furniture or (page.number == 1 and in_zone):
                parts.append(ln.text)
    return " ".join(parts)


# ------------------------------------------------------------------------------------ abstract


def abstract_from_page(pages: list[PageLayout]) -> str | None:
    """A paragraph starting "Abstract." / "Abstract—" / "Abstract:" on the first two pages."""
    for page in pages[:2]:
        for block in page.blocks:
            m = re.match(r"^\s*(abstract)\s*[\.:—–-]\s*", block.text, re.I)
            if m:
                rest = block.text[m.end():].strip()
                if len(rest) > 100:
                    return rest
    return None


def extract_metadata(
    doc: pymupdf.Document,
    pages: list[PageLayout],
    furniture: set[int],
    front: set[int],
    body: float,
    vocabulary: set[str],
) -> PaperMetadata:
    """Title, authors and venue from page 1 and the PDF metadata (see module docstring).

    ``front`` holds the ``id()`` of the lines before the Abstract heading (empty when there is
    none; then the top 40% of page 1 is used); ``body`` is the body font size (points) and
    ``vocabulary`` the document's lower-case words (for de-hyphenating wrapped titles). The
    abstract is filled in by the caller from the sections.
    """
    meta = PaperMetadata()
    page1 = pages[0]
    page1_text = "\n".join(ln.text for ln in page1.lines)
    page1_norm = norm(page1_text)
    info = doc.metadata or {}
    tlines = title_lines(page1, furniture, body)
    raw_title = (info.get("title") or "").strip()
    if raw_title and _sane_meta_title(raw_title, page1_norm):
        meta.title = re.sub(r"\s+", " ", raw_title)
    else:
        meta.title = _printed_title(tlines, vocabulary)
    front_lines = [ln for ln in page1.lines if id(ln) in front and id(ln) not in furniture]
    if not front_lines:
        front_lines = [ln for ln in page1.lines if id(ln) not in furniture and ln.y0 < 0.4 * page1.height]
    meta.authors = _printed_authors(page1, tlines, front_lines)
    if not meta.authors:
        meta.authors = _meta_authors(info.get("author") or "", page1_text)
    full, abbr, year, volume = _venue(_banner_text(pages, furniture))
    meta.conference_full, meta.conference_abbreviation, meta.pub_year, meta.volume = full, abbr, year, volume
    return meta
