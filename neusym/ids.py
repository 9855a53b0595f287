"""Deterministic identifiers (uuid5), so re-ingesting the same PDF reproduces every id.

Scheme
------
- ``paper_id = uuid5(PAPER_NS, "title:" + normalize_title(title))`` when the PDF yields a title,
  else ``uuid5(PAPER_NS, "sha256:" + pdf_sha256)``.
- every element id is ``uuid5(paper_id, "<kind>:<key>")`` (e.g. ``page:3``, ``chunk:3:0``).
- every Qdrant point id is ``uuid5(POINT_NS, "<table>.<column>:<primary_key>")``: one point per
  database cell and collection.
"""

from __future__ import annotations

import re
import unicodedata
import uuid

PAPER_NS = uuid.UUID("6f1c7d0e-2b7a-5d55-9a0e-6e65757379d1")
POINT_NS = uuid.UUID("0b3c2f4a-97f1-5b55-8c9e-6e65757379d2")


def normalize_title(title: str) -> str:
    """Lower-case, accent-free, alphanumeric-only form of a title, words separated by one space."""
    text = unicodedata.normalize("NFKD", title)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    return " ".join(re.findall(r"[a-z0-9]+", text))


def paper_id_for(title: str | None, pdf_sha256: str) -> str:
    """The paper id (str UUID) for a title (preferred) or, without a title, for the PDF bytes' sha256."""
    norm = normalize_title(title or "")
    key = f"title:{norm}" if len(norm) >= 8 else f"sha256:{pdf_sha256}"
    return str(uuid.uuid5(PAPER_NS, key))


def airqa_paper_id(title: str, conference_abbreviation: str | None, pub_year: int | None) -> str:
    """The paper id of the NeuSym-RAG/AirQA-Real datasets, so external files keyed that way can be joined.

    ``uuid5(NAMESPACE_DNS, <title lower-cased, only a-z0-9 kept> + "-" + <conference+year lower-cased,
    e.g. "acl2024">)``; papers without a known venue use ``"uncategorized"``.
    """
    venue = re.sub(r"[^a-z0-9]", "", f"{conference_abbreviation or ''}{pub_year or ''}".lower())
    if not conference_abbreviation or not pub_year or not venue:
        venue = "uncategorized"
    name = re.sub(r"[^a-z0-9]", "", title.lower()) + "-" + venue
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


def element_id(paper_id: str, kind: str, *key: object) -> str:
    """Id of an element of a paper, e.g. ``element_id(pid, "chunk", 3, 0)``."""
    return str(uuid.uuid5(uuid.UUID(paper_id), ":".join([kind, *map(str, key)])))


def point_id(table_name: str, column_name: str, primary_key: str) -> str:
    """Qdrant point id of one database cell."""
    return str(uuid.uuid5(POINT_NS, f"{table_name}.{column_name}:{primary_key}"))
