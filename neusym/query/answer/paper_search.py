"""The ``paper_search`` route: "which paper / find the work that ..." answered by the paper index with
venue/year/author filters parsed from the question (or the AirQA ``conference`` scope); no LLM. The
top hit's title is the answer, checked to be a corpus title; the hits are the ``candidates``."""

from __future__ import annotations

import re
from typing import Any, Callable

from neusym.query.answer.citations import citations_for
from neusym.query.answer.cues import VENUE_IN_QUESTION as _VENUE_RX
from neusym.query.answer.results import Step
from neusym.query.answer.verify import Verification, normalised_titles, verify
from neusym.telemetry import phase

_CONF = re.compile(r"^([a-z]+)(\d{4})$")

def search_filters(question: str, conferences: list[str] | None) -> dict:
    """venue / year filters for paper search: the AirQA ``conference`` scope (``["acl2023"]``) when
    it names one conference, else a venue (and year) named in the question ("at ACL 2023")."""
    if conferences and len(conferences) == 1:
        m = _CONF.match(conferences[0].strip().lower())
        if m:
            return {"venue": m.group(1), "year": int(m.group(2))}
    m = _VENUE_RX.search(question or "")
    if m:
        out: dict = {"venue": m.group(1).lower().replace("nips", "neurips")}
        if m.group(2):
            out["year"] = int(m.group(2))
        return out
    return {}



def answer_paper_search(question: str, conferences: list[str] | None, env: Any, settings: Any, result: Any,
                        add_step: Callable) -> Any:
    """The ``paper_search`` route: the paper index searched with the question (filters from
    :func:`search_filters`; without them when they leave nothing); the top hit's title is the
    answer, verified to be a corpus title, the hits are the ``candidates``."""
    from neusym.store.paper_index import PaperIndex

    with phase("retrieval"):
        filters = search_filters(question, conferences)
        index = PaperIndex.of_version(env.version, settings)
        hits = index.search(question, limit=5, **filters)
        if not hits and filters:
            hits = index.search(question, limit=5)
            filters = {}
    text = "\n".join(f"{i}. {h.title} ({h.venue or '-'} {h.year or ''}) score {h.score}" for i, h in enumerate(hits, 1))
    add_step(Step(thought=f"paper search with filters {filters or 'none'}", action="SearchPapers",
                  arguments={"query": question, **filters}, observation=text or "no paper found", fixed=True))
    if not hits:
        result.verification = Verification("unverifiable", basis="search").to_dict()
        return result
    top = hits[0]
    result.answer = top.title
    result.verification = verify(top.title, [], titles=normalised_titles(env)).to_dict()
    cells = [{"table_name": "metadata", "column_name": "abstract", "primary_key": top.paper_id,
              "text": top.snippet or top.title}]
    result.citations = [c.to_dict() for c in citations_for(env, cells, question)]
    result.candidates = [h.to_dict() for h in hits]
    return result


__all__ = ["answer_paper_search", "search_filters"]
