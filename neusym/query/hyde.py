"""The accurate mode of paper search: a hypothetical abstract written by the LLM joins the query (HyDE).

Researchers describe the paper they want in their own words ("Which paper first published a
real-world Chinese-English text image translation dataset?"); the paper's title and abstract use
other ones. :func:`accurate_search` asks the configured chat LLM (:func:`neusym.llm.chat.make_llm`:
an OpenAI-compatible endpoint when ``NEUSYM_LLM_BASE_URL`` is set, else the offline
Qwen2.5-Coder-1.5B-Instruct GGUF in-process) for the title and a three-sentence abstract of the paper
that would answer the request (``neusym/prompts/search_hyde.md``, JSON ``{"title", "abstract"}``
requested, a grammar on llama.cpp, at most :data:`MAX_TOKENS` completion tokens), then runs the
default fused search of :mod:`neusym.store.paper_index` with that text as the query's *expansion*:
its words join the BM25 queries and its vector is added to the question's in the dense views
(each view's own encoder, the sum normalised). The filters are those of the default search.

Never fails the search: when the LLM raises (endpoint down, HTTP error, model load failure,
cancellation) or its reply holds no usable text, the default ranking is returned, the result says
``applied=False`` with the reason in ``note``, and a warning is logged. Each hit carries
``default_rank``, its place in the default ranking, so a caller sees what the expansion moved.

Gain and cost per query, against the default mode and the listwise LLM rerank this mode replaced:
``benchmarks/paper_search/README.md`` (``hyde.py``, ``benchmarks/results/paper_search_hyde.json``).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

from neusym.llm.prompts import prompt_sections
from neusym.settings import Settings, get_settings
from neusym.store.paper_index import POOL, PaperHit, PaperIndex, SearchConfig, point_id_for_paper

logger = logging.getLogger(__name__)

PROMPT_FILE = "search_hyde.md"
MAX_TOKENS = 160
"""Completion-token cap of the call: a title and about three sentences (the measured setting)."""
MIN_WORDS = 4
"""A reply with fewer words than this (title + abstract) is not used."""
HYPOTHESIS_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "abstract": {"type": "string"}},
    "required": ["title", "abstract"],
    "additionalProperties": False,
}
"""Reply shape requested from the LLM (OpenAI ``response_format`` / llama.cpp grammar)."""

_PROMPT: list[tuple[str, str]] = []
_PROMPT_LOCK = threading.Lock()


@dataclass
class Hypothesis:
    """The LLM's hypothetical paper for one request: ``title`` and ``abstract`` (either may be empty,
    not both), ``seconds`` of wall time of the call, token ``prompt_tokens`` / ``completion_tokens``
    as the backend reported them."""

    title: str
    abstract: str
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def text(self) -> str:
        """``"title. abstract"``: the expansion passed to the search."""
        return ". ".join(p for p in (self.title.strip().rstrip("."), self.abstract.strip()) if p)


@dataclass
class AccurateResult:
    """What :func:`accurate_search` did.

    ``hits``: best first, each with ``default_rank`` set; ``applied``: the hypothesis joined the
    query (False: the default ranking was returned, ``note`` says why); ``hypothesis``: what the
    LLM wrote (None when the call failed); ``seconds``: wall time of the whole search.
    """

    hits: list[PaperHit]
    applied: bool
    note: str | None = None
    hypothesis: Hypothesis | None = None
    seconds: float = 0.0
    default_hits: list[PaperHit] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        """JSON-ready summary without the hits: ``applied``, ``note``, ``title`` and ``abstract`` of the
        hypothesis (None when there is none), ``llm_seconds``, ``prompt_tokens``, ``completion_tokens``."""
        h = self.hypothesis
        return {"applied": self.applied, "note": self.note, "title": h.title if h else None,
                "abstract": h.abstract if h else None, "llm_seconds": h.seconds if h else 0.0,
                "prompt_tokens": h.prompt_tokens if h else 0, "completion_tokens": h.completion_tokens if h else 0}


# ------------------------------------------------------------------------------------------ prompt
def load_prompt() -> tuple[str, str]:
    """(system, user) templates of ``neusym/prompts/search_hyde.md`` (package data, read once per
    process): the parts after the ``<!-- system -->`` and ``<!-- user -->`` marker lines; the user
    part has a ``{{question}}`` placeholder. Raises ``FileNotFoundError`` when the file is missing and
    ``ValueError`` when a marker is."""
    with _PROMPT_LOCK:
        if not _PROMPT:
            text = resources.files("neusym").joinpath("prompts", PROMPT_FILE).read_text(encoding="utf-8")
            parts = prompt_sections(text)
            if "system" not in parts or "user" not in parts:
                raise ValueError(f"prompt {PROMPT_FILE}: needs '<!-- system -->' and '<!-- user -->' sections")
            _PROMPT.append((parts["system"], parts["user"]))
        return _PROMPT[0]


def build_messages(question: str) -> list[dict]:
    """The chat messages (system + user) of one call for ``question`` (used as given)."""
    system, user = load_prompt()
    return [{"role": "system", "content": system},
            {"role": "user", "content": user.replace("{{question}}", question.strip())}]


# ------------------------------------------------------------------------------------------- reply
def _string_field(text: str, key: str) -> str | None:
    """The value of ``"key": "..."`` in possibly truncated JSON (an unterminated last string counts)."""
    m = re.search(r'"%s"\s*:\s*"((?:[^"\\]|\\.)*)' % key, text, re.DOTALL)
    if m is None:
        return None
    try:
        return json.loads(f'"{m.group(1)}"')
    except ValueError:
        return m.group(1).replace('\\"', '"')


def parse_hypothesis(text: str) -> tuple[str, str] | None:
    """``(title, abstract)`` from an LLM reply, or None when it holds fewer than :data:`MIN_WORDS` words.

    A JSON object with ``title`` / ``abstract`` strings (also inside a code fence, or cut short by
    the token cap: the unterminated last string is kept) is read first; a reply that is not JSON
    (a model ignoring the requested format) is taken whole as the abstract.
    """
    s = (text or "").strip()
    fence = re.search(r"```(?:json)?\s*(.*?)(?:```|$)", s, re.DOTALL)
    if fence:
        s = fence.group(1).strip()
    title = abstract = None
    if "{" in s:
        try:
            obj = json.loads(s[s.index("{"):s.rindex("}") + 1]) if "}" in s else None
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            title, abstract = obj.get("title"), obj.get("abstract")
        else:
            title, abstract = _string_field(s, "title"), _string_field(s, "abstract")
        title = " ".join(str(title or "").split())
        abstract = " ".join(str(abstract or "").split())
    else:
        title, abstract = "", " ".join(s.split())
    if len(f"{title} {abstract}".split()) < MIN_WORDS:
        return None
    return title, abstract


def write_hypothesis(question: str, *, settings: Settings | None = None, llm: Any = None) -> Hypothesis:
    """One LLM call: the hypothetical title + abstract of the paper ``question`` asks for.

    ``llm``: an object with the :class:`neusym.llm.chat.LLM` ``chat`` method (default
    :func:`neusym.llm.chat.make_llm` of ``settings``). Raises whatever the backend raises
    (``neusym.errors.LLMError`` and friends, a cancellation) and ``ValueError`` when the reply holds
    no usable text (:func:`parse_hypothesis`).
    """
    settings = settings or get_settings()
    if llm is None:
        from neusym.llm.chat import make_llm

        llm = make_llm(settings)
    started = time.monotonic()
    reply = llm.chat(build_messages(question), json_schema=HYPOTHESIS_SCHEMA, max_tokens=MAX_TOKENS)
    seconds = round(time.monotonic() - started, 3)
    parsed = parse_hypothesis(reply.text or "")
    if parsed is None:
        raise ValueError(f"the LLM reply has no usable title or abstract: {(reply.text or '')[:120]!r}")
    return Hypothesis(parsed[0], parsed[1], seconds, int(reply.prompt_tokens or 0),
                      int(reply.completion_tokens or 0))


# ------------------------------------------------------------------------------------------ search
def accurate_search(index: PaperIndex, query: str, *, venue: str | None = None, year: int | None = None,
                    author: str | None = None, limit: int = 10, config: SearchConfig | None = None,
                    settings: Settings | None = None, llm: Any = None) -> AccurateResult:
    """The accurate mode on ``index``: the default ranking, one LLM call, the expanded ranking.

    Arguments as :func:`neusym.query.paper_search.search_papers` (filters, ``limit`` >= 1);
    ``settings``/``llm`` as :func:`write_hypothesis`. Returns an :class:`AccurateResult` whose hits
    (at most ``limit``) carry ``default_rank`` (1-based, None below the default ranking's first
    :data:`~neusym.store.paper_index.POOL`). Raises ``ValueError`` for the search's bad arguments
    (before any LLM call); LLM failures are reported in the result, never raised.
    """
    started = time.monotonic()
    settings = settings or index.settings
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    default = index.rank(query, venue=venue, year=year, author=author, depth=max(limit, POOL), config=config)
    default_rank = {pid: r for r, (pid, _) in enumerate(default.scored, 1)}
    default_hits = index.hits(default, limit)
    hypothesis = None
    try:
        hypothesis = write_hypothesis(query, settings=settings, llm=llm)
    except Exception as exc:  # noqa: BLE001 - any backend failure keeps the default ranking
        kind = "LLM reply unusable" if isinstance(exc, ValueError) else f"LLM call failed: {type(exc).__name__}"
        note = f"{kind}, default ranking kept: {' '.join(str(exc).split())[:300]}"
        logger.warning("accurate paper search: %s", note)
        hits = [replace(h, default_rank=i) for i, h in enumerate(default_hits, 1)]
        return AccurateResult(hits, False, note, None, round(time.monotonic() - started, 3), default_hits)
    ranking = index.rank(query, venue=venue, year=year, author=author, depth=limit, config=config,
                         query_vector=default.query_vector, expansion=hypothesis.text)  # the question encoded once
    hits = [replace(h, default_rank=default_rank.get(point_id_for_paper(h.paper_id)))
            for h in index.hits(ranking, limit)]
    return AccurateResult(hits, True, None, hypothesis, round(time.monotonic() - started, 3), default_hits)


__all__ = [
    "AccurateResult",
    "HYPOTHESIS_SCHEMA",
    "Hypothesis",
    "MAX_TOKENS",
    "accurate_search",
    "build_messages",
    "load_prompt",
    "parse_hypothesis",
    "write_hypothesis",
]
