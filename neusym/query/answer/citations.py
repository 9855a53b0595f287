"""Citations: the evidence an answer used, pointing at real cells a reader can check.

A :class:`Citation` names the paper (``paper_id``, ``title``), where the evidence sits
(``page_number``, ``bounding_box`` ``[x0, y0, width, height]`` in PDF points from the top-left, when
the element has one: tables, figures, equations), the cell (``table_name``, ``column_name``,
``primary_key``) and a ``quote``: the sentence of the cell's text that best supports the answer,
copied verbatim from the cell.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from neusym.encode import PRIMARY_KEYS

_BOX_TABLES = {"tables", "images", "equations"}
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass
class Citation:
    """One piece of evidence behind an answer (see the module docstring)."""

    paper_id: str
    title: str | None
    page_number: int | None
    bounding_box: list[float] | None
    table_name: str
    column_name: str
    primary_key: str
    quote: str

    def to_dict(self) -> dict:
        """JSON-ready dict with the fields of the class."""
        return asdict(self)


def word_tokens(text: str) -> set[str]:
    """The lower-cased words and numbers of ``text`` ("f1", "85.5"; one-letter words dropped)."""
    return {t for t in re.findall(r"[a-z0-9]+(?:\.[0-9]+)?", (text or "").lower()) if len(t) > 1 or t.isdigit()}


def best_quote(text: str, answer: Any, *, max_chars: int = 300) -> str:
    """The sentence of ``text`` sharing the most words and numbers with ``answer``, verbatim (line
    breaks included), cut to ``max_chars``; the beginning of ``text`` when nothing overlaps."""
    text = text or ""
    want = word_tokens(answer if isinstance(answer, str) else str(answer))
    pieces = [p.strip() for p in _SENTENCE.split(text) if p.strip()]  # line breaks stay inside a sentence
    if not pieces:
        return text[:max_chars]
    best = max(pieces, key=lambda p: (len(word_tokens(p) & want), -abs(len(p) - 160)))
    if not (word_tokens(best) & want):
        best = pieces[0]
    return best[:max_chars]


def cell_rows(env: Any, cells: list[dict]) -> dict[tuple[str, str], dict]:
    """Page number, bounding box and paper title of cells ``{"table_name", "primary_key", ...}``,
    read from the environment's corpus version: ``{(table, primary_key): {...}}``."""
    out: dict[tuple[str, str], dict] = {}
    by_table: dict[str, list[str]] = {}
    for c in cells:
        by_table.setdefault(c["table_name"], []).append(str(c["primary_key"]))
    for table, keys in by_table.items():
        pk = PRIMARY_KEYS.get(table)
        if pk is None:
            continue
        box = "bounding_box" if table in _BOX_TABLES else "NULL"
        paper = "paper_id" if table == "metadata" else "ref_paper_id"
        page = {"metadata": "NULL", "sections": "page_numbers[1]"}.get(table, "page_number")
        rows = env.query(
            f"SELECT t.{pk}::VARCHAR, t.{paper}::VARCHAR, {page}, {box}, m.title FROM {table} t "
            f"JOIN metadata m ON m.paper_id = t.{paper} WHERE t.{pk}::VARCHAR IN ({', '.join('?' for _ in keys)})",
            keys)
        for key, paper_id, page_number, bbox, title in rows:
            out[(table, key)] = {"paper_id": paper_id, "page_number": page_number,
                                 "bounding_box": [round(float(x), 1) for x in bbox] if bbox else None, "title": title}
    return out


def citations_for(env: Any, cells: list[dict], answer: Any, *, limit: int = 4) -> list[Citation]:
    """Citations for evidence ``cells`` (vector-search hits or equivalent dicts with ``table_name``,
    ``column_name``, ``primary_key``, ``text``), in the given order, at most ``limit``; each quote
    is the cell sentence closest to ``answer``. Cells no longer in the database are skipped."""
    cells = [c for c in cells if c.get("primary_key") and c.get("text")][:limit]
    rows = cell_rows(env, cells)
    out = []
    for c in cells:
        row = rows.get((c["table_name"], str(c["primary_key"])))
        if row is None:
            continue
        out.append(Citation(paper_id=row["paper_id"], title=row["title"], page_number=row["page_number"],
                            bounding_box=row["bounding_box"], table_name=c["table_name"],
                            column_name=c["column_name"], primary_key=str(c["primary_key"]),
                            quote=best_quote(c["text"], answer)))
    return out


__all__ = ["Citation", "best_quote", "cell_rows", "citations_for", "word_tokens"]
