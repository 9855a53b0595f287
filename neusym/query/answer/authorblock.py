"""Who is affiliated where, read from the author block on page 1.

A paper's first page prints its authors with footnote marks ("Ali Modarressi1,2⋆ Mohsen Fayyaz3⋆",
"Kyle Loα∗ Zejiang Shenα,τ∗"), then the affiliations, each after its mark ("3 University of Tehran,
Iran", "♢University of Washington"). The functions here take the page text (``pages.page_content`` of page 1)
and the author list (``metadata.authors``) and answer by matching marks, so "Which authors are
affiliated with the University of Tehran?" needs no model. Every function returns None when the
block cannot be read unambiguously (an author's name is not on the page, the organisation is not
printed after a mark, no author carries the mark): the caller then reads the paper another way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Characters used as author / affiliation marks: digits, footnote symbols, card suits, Greek letters.
MARK_CHARS = "0-9∗*⋆†‡§¶♢♠♡♣♥♦#‖⋄◇○•" + "α-ω"
_MARK_RUN = re.compile(rf"[{MARK_CHARS}](?:\s?,\s?[{MARK_CHARS}]|[{MARK_CHARS}])*")
_ENTRY_START = re.compile(rf"(?:(?<=^)|(?<=\s)|(?<=,))([{MARK_CHARS}]+)\s*(?=[A-Z])", re.M)
#: The abstract heading of page 1 ("Abstract", "A B S T R A C T"): the front matter ends there.
ABSTRACT_HEADING = re.compile(r"\n[^\S\n]*+(?:abstract|a\s*b\s*s\s*t\s*r\s*a\s*c\s*t)\b", re.I)
#: A line of page 1 that says where and when the paper was published or under which licence: the
#: proceedings footer of ACL-style papers, a conference or copyright note.
PUBLICATION_LINE = re.compile(r"\bproceedings\b|©|c⃝|\bcopyright\b", re.I)


@dataclass
class AuthorBlock:
    """The marks of each author (``marks``: author name -> set of marks, in ``metadata.authors``
    order) and the text after the last author name up to the abstract (``affiliations``)."""

    marks: dict[str, set[str]]
    affiliations: str


def _split_marks(run: str) -> set[str]:
    """"1,2⋆" -> {"1", "2", "⋆"}; digits group into numbers, every other mark is one character."""
    return set(re.findall(r"\d+|[^\d\s,]", run))


def _name_pattern(name: str) -> re.Pattern:
    words = [re.escape(w) for w in name.split()]
    return re.compile(r"(?<![A-Za-z])" + r"\s+".join(words) + r"(?![A-Za-z])")


def read_block(page_text: str, authors: list[str]) -> AuthorBlock | None:
    """The author block of ``page_text`` (page 1, before the abstract heading): each author's marks
    (the mark characters printed right after the name; an empty set when none) and the affiliation
    text after the last name. None when an author of ``authors`` is not printed there."""
    head = ABSTRACT_HEADING.split(page_text or "", maxsplit=1)[0]
    marks: dict[str, set[str]] = {}
    end = 0
    for name in authors:
        m = _name_pattern(name).search(head)
        if m is None:
            return None
        run = _MARK_RUN.match(head, m.end())
        marks[name] = _split_marks(run.group(0)) if run else set()
        end = max(end, run.end() if run else m.end())
    return AuthorBlock(marks, head[end:])


def _org_pattern(org: str) -> re.Pattern:
    words = re.findall(r"\w+", org)
    # not \b: a mark is glued to the name it precedes ("2Peking University", "ωUniversity of ...")
    return re.compile(r"(?<![A-Za-z])" + r"\W+".join(re.escape(w) for w in words) + r"(?![A-Za-z])", re.I)


def affiliated_authors(page_text: str, authors: list[str], org: str) -> tuple[list[str], str] | None:
    """The authors (in ``authors`` order) carrying the mark printed before ``org`` in the affiliation
    list, and that affiliation entry as printed (mark and text). None when the block cannot be read,
    ``org`` is not in an entry that starts with a mark, or no author carries that mark."""
    block = read_block(page_text, authors)
    if block is None or not re.findall(r"\w+", org):
        return None
    text = block.affiliations
    starts = list(_ENTRY_START.finditer(text))
    found = _org_pattern(org).search(text)
    if found is None:
        return None
    entry = None
    for i, start in enumerate(starts):
        stop = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        if start.start() <= found.start() and found.end() <= stop:
            entry = (start, stop)
    if entry is None:
        return None
    start, stop = entry
    wanted = _split_marks(start.group(1))
    chosen = [a for a in authors if block.marks[a] & wanted]
    if not chosen:
        return None
    entry_text = " ".join(text[start.start():stop].split())
    entry_text = re.split(r"\s(?=\S*@|\{)", entry_text, maxsplit=1)[0].rstrip(", ")  # the e-mail lines that follow
    return chosen, entry_text


__all__ = ["AuthorBlock", "MARK_CHARS", "affiliated_authors", "read_block"]
