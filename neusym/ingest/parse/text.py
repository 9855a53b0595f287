"""Small text helpers shared by the parse modules (normalising, small caps, joining lines)."""

from __future__ import annotations

import re

from neusym.ids import normalize_title
from neusym.ingest.parse.pdf import Line, render_spans


def norm(text: str) -> str:
    """Lower-case, accent-free, alphanumeric words separated by one space (for comparisons)."""
    return normalize_title(text)


def decode_small_caps(line: Line) -> str:
    """The line's text with small capitals turned back into lower case.

    LaTeX small caps (ICLR headings, titles, names like SPECTER) are drawn as capitals in a
    smaller size: ``L`` 17.2pt + ``ANGUAGE`` 13.8pt is "Language". A span of capitals at most 90%
    the size of the line's largest letters, on the same baseline, is lower-cased. Lines without
    such a mix are returned unchanged.
    """
    sized = [s for s in line.spans if any(c.isalpha() for c in s.text)]
    if len(sized) < 2:
        return line.text
    big = max(s.size for s in sized)
    if not any(s.size < 0.9 * big for s in sized):
        return line.text
    texts: list[str] = []
    changed = False
    for s in line.spans:
        letters = [c for c in s.text if c.isalpha()]
        on_baseline = abs(s.bbox[3] - line.bbox[3]) < 0.25 * big
        if letters and s.size < 0.9 * big and all(c.isupper() for c in letters) and on_baseline:
            texts.append(s.text.lower())
            changed = True
        else:
            texts.append(s.text)
    return render_spans(line.spans, texts) if changed else line.text


def join_lines(lines: list[Line]) -> str:
    """Text of consecutive lines: a newline between lines, a blank line between blocks/pages."""
    parts: list[str] = []
    prev: Line | None = None
    for line in lines:
        if prev is not None:
            parts.append("\n\n" if (line.page, line.block) != (prev.page, prev.block) else "\n")
        parts.append(line.text)
        prev = line
    return "".join(parts).strip()


def join_wrapped(parts: list[str], vocabulary: set[str]) -> str:
    """Join wrapped lines into running text.

    A line ending in a hyphen joins the next line without a space; the hyphen is dropped when the
    joined word occurs elsewhere in the document (``vocabulary``, lower case) and the next line
    starts in lower case (``"Lan-" + "guage"`` -> ``"Language"``), kept otherwise
    (``"Citation-" + "informed"`` -> ``"Citation-informed"``). Other lines join with a space.
    """
    out = ""
    for part in parts:
        part = part.strip()
        if not part:
            continue
        if not out:
            out = part
            continue
        m = re.search(r"(?<!\w)(\w+)-$", out)
        n = re.match(r"(\w+)", part)
        if m and n:
            joined = (m.group(1) + n.group(1)).lower()
            out = out[:-1] + part if joined in vocabulary and part[0].islower() else out + part
        elif out.endswith(("-", "/")):
            out = out + part
        else:
            out = out + " " + part
    return re.sub(r"[ \t]+", " ", out).strip()


def unwrap(text: str, vocabulary: set[str]) -> str:
    """Running text of a multi-line string: lines joined with :func:`join_wrapped`, paragraphs
    (blank-line separated) kept apart by a blank line."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    return "\n\n".join(join_wrapped(p.split("\n"), vocabulary) for p in paragraphs)


def vocabulary_of(lines: list[Line]) -> set[str]:
    """Lower-case words (letters only, 2+ characters) occurring in the given lines."""
    words: set[str] = set()
    for ln in lines:
        words.update(w.lower() for w in re.findall(r"[A-Za-z]{2,}", ln.text))
    return words
