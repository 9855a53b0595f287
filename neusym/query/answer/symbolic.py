"""Symbolic fast paths: metadata and aggregate questions answered by SQL templates, no LLM.

BookRAG's global-aggregation idea over the section tree: "How many tables does the SPECTER paper
have?", "How many figures are in the Experiments section?", "Who is the last author?", "How many
pages?". :func:`parse_intent` recognises these questions (with the cues of
:mod:`neusym.query.answer.cues`), :func:`resolve_papers` finds the paper they are
about (given paper ids, or a title or short name — the part of a title before its colon — named in
the question), and :func:`answer_intent` runs parameterised SQL on the corpus version and returns the
typed answer, the SQL it ran and the cells it read (for citations).

Counting rules (stated in each answer's ``explanation``): tables and figures are the rows of
``tables`` / ``images`` (one per printed "Table N" / "Figure N" caption); equations are the
numbered ones when the paper numbers any, else all displayed ones; sections are the numbered
top-level sections ("1 Introduction" ...; unnumbered ones such as Abstract, References and
appendices are listed but not counted); "in section X" counts elements whose section is X or one of
its subsections.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any
from neusym.query.answer.cues import (
    AFFILIATED as _AFFILIATED,
    AND_ASKS as _AND_ASKS,
    AND_ELEMENT as _AND_ELEMENT,
    AUTHORS as _AUTHORS,
    AUTHORS_WORD as _AUTHORS_WORD,
    AUTHOR_POSITION as _AUTHOR_POS,
    COUNT as _COUNT,
    ELEMENT_WORDS,
    IN_SECTION as _IN_SECTION,
    NUMBER_OF as _NUMBER_OF,
    QUOTED_TITLE as _QUOTED_TITLE,
    UNCOVERED as _UNCOVERED,
)

_ORDINALS = {"first": 0, "second": 1, "third": 2, "fourth": 3, "fifth": 4, "last": -1}


@dataclass
class Intent:
    """A recognised symbolic question: ``kind`` (count, authors, author, authors_count,
    affiliated, missing_paper) and its parameters (``element``, ``section``, ``position``, ``org`` — the
    organisation an ``affiliated`` question names —, ``missing`` — the quoted title a ``missing_paper``
    question names); ``elements`` when one question counts several kinds ("how many figures and how
    many tables"), in the order asked."""

    kind: str
    element: str | None = None
    elements: list[str] = field(default_factory=list)
    section: str | None = None
    section_number: str | None = None
    position: int | None = None
    org: str | None = None
    missing: str | None = None


@dataclass
class SymbolicAnswer:
    """The typed ``answer``, its ``explanation`` (what was counted or read), the ``sql`` that ran and
    the ``cells`` it read (dicts with table_name, column_name, primary_key, text)."""

    answer: Any
    explanation: str
    sql: list[str]
    cells: list[dict]


def parse_intent(question: str) -> Intent | None:
    """The symbolic intent of ``question``, or None when it is not a metadata/aggregate question
    or also asks for something no template answers (see ``_UNCOVERED``)."""
    q = " ".join(question.split())
    affiliated = _AFFILIATED.search(q)
    if affiliated and _AUTHORS_WORD.search(q) and not _AND_ASKS.search(affiliated.group("org")):
        return Intent("affiliated", org=affiliated.group("org").strip().rstrip(".").strip())
    if _UNCOVERED.search(q):
        return None
    m = _COUNT.search(q) or _NUMBER_OF.search(q)
    if m:
        element = ELEMENT_WORDS[m.group(1).lower()]
        if element == "authors":
            return Intent("authors_count")
        elements = [element]
        for other in list(_COUNT.finditer(q))[1:]:  # "how many pages ..., and how many tables ..."
            elements.append(ELEMENT_WORDS[other.group(1).lower()])
        tail = q[m.end():]
        chained = _AND_ELEMENT.match(tail)  # "how many figures and (how many) tables"
        if chained:
            elements.insert(1, ELEMENT_WORDS[chained.group(1).lower()])
        elements = list(dict.fromkeys(elements))
        if "authors" in elements and len(elements) > 1:
            return None
        intent = Intent("count", element=element, elements=elements if len(elements) > 1 else [])
        sec = _IN_SECTION.search(q)
        if sec and element not in ("pages", "authors", "references"):
            intent.section_number = sec.group("num")
            name = sec.group("name") or sec.group("qname")
            if name and name.lower().strip() not in ("this", "that", "the paper", "paper", "each", "every"):
                intent.section = name.strip()
        return intent
    pos = _AUTHOR_POS.search(q)
    if pos and pos.group(1).lower() in _ORDINALS:
        return Intent("author", position=_ORDINALS[pos.group(1).lower()])
    if _AUTHORS.search(q):
        return Intent("authors")
    return None


# ---------------------------------------------------------------------------------- paper lookup
def _strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text or "") if not unicodedata.combining(c))


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", _strip_accents(text).lower()))


def paper_catalog(env: Any) -> list[tuple[str, str, str | None]]:
    """(paper_id, title, short name) of every paper of the environment's corpus version; the short
    name is a title's part before its colon when that is at most four words ("SPECTER", "DecompX")."""
    cache = getattr(env, "_paper_catalog", None)
    if cache is None:
        cache = []
        for pid, title in env.query("SELECT paper_id::VARCHAR, title FROM metadata WHERE title IS NOT NULL"):
            short = title.split(":", 1)[0].strip() if ":" in title else None
            if short and len(short.split()) > 4:
                short = None
            cache.append((pid, title, short))
        env._paper_catalog = cache
    return cache


def _names_short(question: str, short: str) -> bool:
    """Whether ``question`` names a paper by its short name: as a whole word with the title's own letter
    case ("SPECTER's", "PaperMage"); a conference holds papers called "FIRST", "SCALE" or "MATTER",
    and "which paper first ..." must not resolve to one of them."""
    name = " ".join(_strip_accents(short).split())
    if len(_norm(name)) < 3:
        return False
    pattern = r"(?<![A-Za-z0-9])" + r"\s+".join(re.escape(w) for w in name.split()) + r"(?![A-Za-z0-9])"
    return re.search(pattern, _strip_accents(question)) is not None


def _paper_names(env: Any) -> list[tuple[str, str, str | None, str, str, str]]:
    """:func:`paper_catalog` with the normalised forms the router matches, computed once per environment
    (corpus version): (paper_id, title, short name, title, short name, part before the colon when it has
    three words or more — "When Not to Trust Language Models" — else "") with the last three normalised."""
    catalog = paper_catalog(env)
    names = getattr(env, "_paper_names", None)
    if names is None or len(names) != len(catalog):
        names = []
        for pid, title, short in catalog:
            head = _norm(title.split(":", 1)[0]) if ":" in title else ""
            names.append((pid, title, short, _norm(title), _norm(short) if short else "",
                          head if len(head.split()) >= 3 and len(head) > 12 else ""))
        env._paper_names = names
    return names




def unknown_titles(question: str, env: Any) -> list[str]:
    """Quoted titles in ``question`` that name no paper of the corpus: a quoted span of three words or
    more, most of its longer words capitalised like a title ("the paper 'A Study of Things'"), that is
    not part of any title in ``metadata``. A quoted sentence ("asked 'Which nation won the most gold
    medals?'") is not a title."""
    out = []
    catalog = [full for _, _, _, full, _, _ in _paper_names(env)]
    for m in _QUOTED_TITLE.finditer(question or ""):
        text = " ".join(m.group(1).split())
        words = [w for w in re.findall(r"[A-Za-z][\w-]*", text) if len(w) > 3]
        if len(text.split()) < 3 or not words or sum(w[0].isupper() for w in words) < 0.6 * len(words):
            continue
        key = _norm(text)
        if key and not any(key in title for title in catalog):
            out.append(text)
    return out


def resolve_papers(question: str, paper_ids: list[str] | None, env: Any) -> list[tuple[str, str]]:
    """The papers a question is about: the given ``paper_ids`` (with their titles), else the papers
    whose full title or (three words or more) part before the colon the question names (whole words,
    case- and accent-insensitive), or whose short name it names with the title's letter case
    (:func:`_names_short`), in the order the question names them."""
    catalog = paper_catalog(env)
    by_id = {pid: title for pid, title, _ in catalog}
    if paper_ids:
        return [(pid, by_id[pid]) for pid in paper_ids if pid in by_id]
    q = f" {_norm(question)} "
    found = []
    for pid, title, short, full, short_key, head in _paper_names(env):
        at = []
        if len(full) > 12 and f" {full} " in q:
            at.append(q.find(f" {full} "))
        if short_key and f" {short_key} " in q and _names_short(question, short):  # the costly check last
            at.append(q.find(f" {short_key} "))
        if head and f" {head} " in q:
            at.append(q.find(f" {head} "))
        if at:
            found.append((min(at), pid, title))
    return [(pid, title) for _, pid, title in sorted(found, key=lambda f: f[0])]


# ---------------------------------------------------------------------------------------- answers
def _section_ids(env: Any, paper_id: str, intent: Intent) -> tuple[list[str], str | None]:
    """The section (and its subsections) named by ``intent``: (section ids, section title) or ([], None)."""
    rows = env.query("SELECT section_id::VARCHAR, section_title, parent_section_id::VARCHAR, level FROM sections "
                     "WHERE ref_paper_id = ? ORDER BY ordinal", [paper_id])
    target = None
    if intent.section_number:
        rx = re.compile(rf"^\s*{re.escape(intent.section_number)}\.?\s", re.I)
        target = next((r for r in rows if rx.match(r[1] or "")), None)
    if target is None and intent.section:
        want = _norm(intent.section)
        named = [r for r in rows if want and want in _norm(re.sub(r"^\s*[A-Z]?\d+(\.\d+)*\.?\s*", "", r[1] or ""))]
        target = min(named, key=lambda r: (r[3], len(r[1] or ""))) if named else None
    if target is None:
        return [], None
    ids = {target[0]}
    changed = True
    while changed:  # add the subsections, level by level
        changed = False
        for sid, _, parent, _ in rows:
            if parent in ids and sid not in ids:
                ids.add(sid)
                changed = True
    return sorted(ids), target[1]


def answer_intent(intent: Intent, paper: tuple[str, str], env: Any, answer_format: str | None = None) -> SymbolicAnswer | None:
    """Answer ``intent`` for ``paper`` (paper_id, title) with SQL on the environment's version.

    Returns None when the template cannot answer (e.g. the named section does not exist, an author
    position beyond the list), so the caller can fall back to another route.
    """
    pid, title = paper
    meta_cell = {"table_name": "metadata", "column_name": "title", "primary_key": pid, "text": title}
    if intent.kind == "count" and len(intent.elements) > 1:
        parts = [answer_intent(Intent("count", element=e, section=intent.section, section_number=intent.section_number),
                               paper, env, answer_format) for e in intent.elements]
        if any(p is None for p in parts):
            return None
        return SymbolicAnswer([p.answer for p in parts], " ".join(p.explanation for p in parts),
                              [q for p in parts for q in p.sql], [c for p in parts for c in p.cells])
    if intent.kind == "count":
        element = intent.element
        if element == "pages":
            sql = "SELECT coalesce(num_pages, (SELECT count(*) FROM pages WHERE ref_paper_id = ?)) FROM metadata WHERE paper_id = ?"
            n = env.query(sql, [pid, pid])[0][0]
            return SymbolicAnswer(int(n), f"{title} has {n} pages (metadata.num_pages).", [sql], [meta_cell])
        table = {"tables": "tables", "figures": "images", "equations": "equations", "references": "reference",
                 "sections": "sections", "subsections": "sections"}[element]
        caption = {"tables": "table_caption", "figures": "image_caption", "equations": "equation_content",
                   "references": "reference_content", "sections": "section_title", "subsections": "section_title"}[element]
        pk = {"tables": "table_id", "images": "image_id", "equations": "equation_id", "reference": "reference_id",
              "sections": "section_id"}[table]
        where, params, scope = "ref_paper_id = ?", [pid], ""
        if intent.section or intent.section_number:
            ids, sec_title = _section_ids(env, pid, intent)
            if not ids:
                return None
            if table == "sections":
                where += f" AND parent_section_id::VARCHAR IN ({', '.join('?' for _ in ids)})"
            else:
                where += f" AND ref_section_id::VARCHAR IN ({', '.join('?' for _ in ids)})"
            params += ids
            scope = f" in section '{sec_title}' (with its subsections)"
        rule = ""
        if element == "sections":
            where += " AND level = 1 AND regexp_matches(section_title, '^\\s*\\d+\\.?\\s')" if not scope else ""
            rule = " (numbered top-level sections)" if not scope else " (its subsections)"
        elif element == "subsections":
            where += " AND level > 1"
        elif element == "equations":
            numbered = env.query("SELECT count(*) FROM equations WHERE ref_paper_id = ? AND equation_number IS NOT NULL",
                                 [pid])[0][0]
            if numbered:
                where += " AND equation_number IS NOT NULL"
                rule = " (numbered equations)"
        sql = f"SELECT {pk}::VARCHAR, {caption} FROM {table} WHERE {where}"
        rows = env.query(sql, params)
        cells = [{"table_name": table, "column_name": caption, "primary_key": k, "text": t or ""} for k, t in rows[:6]]
        n = len(rows)
        return SymbolicAnswer(n, f"{n} {element}{rule}{scope} in {title}.", [sql], cells or [meta_cell])
    if intent.kind in ("authors", "author", "authors_count"):
        sql = "SELECT authors FROM metadata WHERE paper_id = ?"
        authors = list(env.query(sql, [pid])[0][0] or [])
        if not authors:
            return None
        cell = {"table_name": "metadata", "column_name": "title", "primary_key": pid, "text": title}
        if intent.kind == "authors_count":
            return SymbolicAnswer(len(authors), f"{title} lists {len(authors)} authors: {', '.join(authors)}.",
                                  [sql], [cell])
        if intent.kind == "author":
            if intent.position is not None and -len(authors) <= intent.position < len(authors):
                a = authors[intent.position]
                return SymbolicAnswer(a, f"The authors of {title} are {', '.join(authors)}.", [sql], [cell])
            return None
        return SymbolicAnswer(authors, f"The authors of {title} are {', '.join(authors)}.", [sql], [cell])
    if intent.kind == "affiliated":
        return _answer_author_marks(intent, paper, env, answer_format)
    return None


def _answer_author_marks(intent: Intent, paper: tuple[str, str], env: Any,
                         answer_format: str | None) -> SymbolicAnswer | None:
    """Authors affiliated with ``intent.org``, read from the marks of page 1's author block
    (:mod:`neusym.query.answer.authorblock`) for the names in ``metadata.authors``.
    An integer when the format asks for one (how many), one name when it asks for a string and one
    author qualifies, else the list. None when the block cannot be read unambiguously."""
    from neusym.query.answer.answer_format import shape_of
    from neusym.query.answer.authorblock import affiliated_authors

    pid, title = paper
    sql_authors = "SELECT authors FROM metadata WHERE paper_id = ?"
    sql_page = "SELECT page_id::VARCHAR, page_content FROM pages WHERE ref_paper_id = ? AND page_number = 1"
    authors = env.query(sql_authors, [pid])
    page = env.query(sql_page, [pid])
    if not authors or not authors[0][0] or not page:
        return None
    names, (page_id, text) = list(authors[0][0]), page[0]
    found = affiliated_authors(text or "", names, intent.org or "")
    if found is None:
        return None
    chosen, printed = found
    explanation = f"Page 1 of {title}: {', '.join(chosen)} (by the marks after their names) affiliated with '{printed}'."
    shape = shape_of(answer_format).kind
    answer: Any = chosen
    if shape == "int":
        answer = len(chosen)
    elif len(chosen) == 1 and shape in ("str", "free") and answer_format:
        answer = chosen[0]
    cells = [{"table_name": "pages", "column_name": "page_content", "primary_key": page_id, "page_number": 1,
              "text": printed},
             {"table_name": "metadata", "column_name": "authors", "primary_key": pid, "text": ", ".join(names)}]
    return SymbolicAnswer(answer, explanation, [sql_authors, sql_page], cells)


def render_answer(value: Any) -> str:
    """The text form of a symbolic answer (lists as Python lists, like the agent's answers)."""
    if isinstance(value, (list, tuple)):
        return repr([v for v in value])
    return str(value)


__all__ = ["Intent", "SymbolicAnswer", "answer_intent", "paper_catalog", "parse_intent",
           "render_answer", "resolve_papers", "unknown_titles"]
