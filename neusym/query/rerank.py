"""LLM-assisted reranking of paper-search hits: the ``accurate`` mode of :func:`neusym.query.paper_search.search_papers`.

The fused hybrid search (:mod:`neusym.store.paper_index`) ranks the papers; the configured chat LLM
(:func:`neusym.llm.chat.make_llm`: an OpenAI-compatible endpoint when ``NEUSYM_LLM_BASE_URL`` is
set, else the offline Qwen2.5-Coder-1.5B-Instruct GGUF in-process) then reads the question and the
top N fused hits in ONE listwise prompt (``neusym/prompts/search_rerank.md``): numbered candidates,
each its title and abstract cut to a per-candidate budget that fits ``settings.llm_context_tokens``
(when the cut would drop the snippet, the sentence the search matched, the snippet is kept after the
start of the abstract). The reply names candidate numbers best first (JSON ``{"ranking": [...]}``
requested, constrained by a grammar on llama.cpp); :func:`parse_ranking` takes the valid numbers in
the order given, drops duplicates and out-of-range ones, and the candidates the LLM did not name
follow in their fused order, then the hits beyond N. Temperature is ``settings.llm_temperature``
(0 by default: deterministic).

Never fails the search: when the LLM raises (endpoint down, HTTP error, model load failure,
context overflow) or the reply has no usable number, the fused order is kept, every hit's
:class:`neusym.store.paper_index.RerankInfo` says ``applied=False`` with the reason in ``note``, and a warning
is logged. Cost: one LLM call per query, about ``N * search_rerank_candidate_tokens`` prompt tokens
and at most ``4 * N + 16`` completion tokens. Measured with the offline model (2.5k papers, N=10,
``benchmarks/results/paper_search_rerank.json``): ~1.2k prompt tokens, p50 18 s per query, and no
gain: the 1.5B model mostly echoes the fused order and R@1 fell from 0.875 to 0.800 on 40 dev and
40 test questions. The mode is meant for a capable OpenAI-compatible endpoint.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any, Mapping, Sequence

from neusym.store.paper_index import PaperHit, RerankInfo
from neusym.settings import Settings, get_settings
from neusym.llm.chat import CHARS_PER_TOKEN

logger = logging.getLogger(__name__)

PROMPT_FILE = "search_rerank.md"
CONTEXT_MARGIN = 0.85
"""Share of ``llm_context_tokens`` the rerank prompt + reply may fill (the estimate is approximate)."""
MIN_CANDIDATE_CHARS = 160
RANKING_SCHEMA = {
    "type": "object",
    "properties": {"ranking": {"type": "array", "items": {"type": "integer"}}},
    "required": ["ranking"],
    "additionalProperties": False,
}
"""Reply shape requested from the LLM (OpenAI ``response_format`` / llama.cpp grammar)."""

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_SECTION = re.compile(r"^<!--\s*(system|user)\s*-->\s*$", re.MULTILINE)
_PROMPT: dict[str, tuple[str, str]] = {}
_PROMPT_LOCK = threading.Lock()


@dataclass
class RerankResult:
    """What :func:`rerank_hits` did.

    ``hits``: all input hits, reordered (each with ``rerank`` set); ``applied``: the LLM's order was
    used; ``note``: why not (or None); ``order``: the 1-based candidate numbers taken from the reply,
    in its order; ``top_n``: candidates sent; ``reply``: the LLM's text (first 500 characters);
    ``seconds``: wall time of the LLM call; ``prompt_tokens`` / ``completion_tokens``: usage as the
    backend reported it (0 when it failed).
    """

    hits: list[PaperHit]
    applied: bool
    note: str | None = None
    order: list[int] = field(default_factory=list)
    top_n: int = 0
    reply: str = ""
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0


# ------------------------------------------------------------------------------------------ prompt
def load_prompt() -> tuple[str, str]:
    """(system, user) templates of ``neusym/prompts/search_rerank.md`` (package data, read once per
    process): the parts after the ``<!-- system -->`` and ``<!-- user -->`` marker lines, with
    ``{{question}}``, ``{{candidates}}`` and ``{{count}}`` placeholders. Raises ``FileNotFoundError``
    when the file is missing and ``ValueError`` when a marker is."""
    with _PROMPT_LOCK:
        cached = _PROMPT.get(PROMPT_FILE)
        if cached is None:
            text = resources.files("neusym").joinpath("prompts", PROMPT_FILE).read_text(encoding="utf-8")
            parts: dict[str, str] = {}
            markers = list(_SECTION.finditer(text))
            for i, m in enumerate(markers):
                end = markers[i + 1].start() if i + 1 < len(markers) else len(text)
                parts[m.group(1)] = text[m.end():end].strip()
            if "system" not in parts or "user" not in parts:
                raise ValueError(f"prompt {PROMPT_FILE}: needs '<!-- system -->' and '<!-- user -->' sections")
            cached = _PROMPT[PROMPT_FILE] = (parts["system"], parts["user"])
        return cached


def _fill(template: str, values: Mapping[str, str]) -> str:
    # one pass: a substituted value (a question, an abstract) is never scanned for placeholders again
    return _PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))), template)


def candidate_chars(settings: Settings, n: int, question: str) -> int:
    """Characters of title + abstract allowed per candidate for ``n`` candidates.

    ``settings.search_rerank_candidate_tokens`` (x 4 characters), lowered so that the fixed prompt,
    the question, ``n`` candidates and the reply fit ``CONTEXT_MARGIN`` of
    ``settings.llm_context_tokens``; never below ``MIN_CANDIDATE_CHARS`` (a context too small for
    that overflows, which the LLM reports and :func:`rerank_hits` turns into the fused order).
    """
    system, user = load_prompt()
    fixed_tokens = (len(system) + len(user) + len(question)) // CHARS_PER_TOKEN + 16 * max(n, 1)
    free = int(settings.llm_context_tokens * CONTEXT_MARGIN) - fixed_tokens - reply_tokens(n)
    per = min(settings.search_rerank_candidate_tokens, free // max(n, 1))
    return max(MIN_CANDIDATE_CHARS, per * CHARS_PER_TOKEN)


def reply_tokens(n: int) -> int:
    """Completion-token cap of the rerank call for ``n`` candidates (``{"ranking": [..]}`` of n numbers)."""
    return 4 * n + 16


def _cut(text: str, limit: int) -> str:
    text = " ".join((text or "").split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + " …"


def candidate_text(hit: PaperHit, abstract: str | None, limit: int) -> str:
    """One candidate's text in the prompt: ``Title: ...`` and ``Abstract: ...`` within ``limit`` characters
    in all. A cut abstract keeps its start; when the cut loses the hit's snippet (the sentence the
    search matched), the snippet follows the start after ``…``."""
    title = " ".join((hit.title or "").split())
    body = " ".join((abstract or hit.snippet or "").split())
    room = max(limit - len(title), 40)
    if len(body) > room:
        snippet = " ".join((hit.snippet or "").split())
        head = _cut(body, room)
        if snippet and snippet not in head and snippet != title and len(snippet) < room - 40:
            head = _cut(body, room - len(snippet) - 3) + " " + snippet
        body = head
    return f"Title: {title}\nAbstract: {body}" if body and body != title else f"Title: {title}"


def build_messages(question: str, candidates: Sequence[PaperHit], abstracts: Mapping[str, str] | None,
                   limit: int) -> list[dict]:
    """The chat messages (system + user) of one rerank call: the question and the candidates numbered
    ``[1]`` … ``[n]`` in their fused order, each cut to ``limit`` characters (:func:`candidate_text`).
    ``abstracts``: paper_id -> abstract (:meth:`neusym.store.paper_index.PaperIndex.abstracts`); a paper without
    one shows its snippet."""
    abstracts = abstracts or {}
    blocks = [f"[{i}] " + candidate_text(h, abstracts.get(h.paper_id), limit) for i, h in enumerate(candidates, 1)]
    system, user = load_prompt()
    values = {"question": " ".join(question.split()), "candidates": "\n\n".join(blocks), "count": str(len(candidates))}
    return [{"role": "system", "content": _fill(system, values)}, {"role": "user", "content": _fill(user, values)}]


# ------------------------------------------------------------------------------------------- reply
def _json_ranking(text: str) -> list | None:
    s = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", s, re.DOTALL)
    if fence:
        s = fence.group(1).strip()
    start, end = s.find("{"), s.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        obj = json.loads(s[start:end + 1])
    except ValueError:
        return None
    if isinstance(obj, dict):
        for key in ("ranking", "rank", "order", "candidates"):
            if isinstance(obj.get(key), list):
                return obj[key]
    return None


def parse_ranking(text: str, n: int) -> list[int]:
    """The candidate numbers (1..``n``) an LLM reply names, in the order given, each once.

    A JSON object with a ``ranking`` list (also inside a code fence) is read first; otherwise, e.g. a
    truncated or free-text reply ("3, 1, 2" or "Candidate [3] is best"), every integer of the text is
    taken in order. Numbers outside 1..``n`` and repeats are dropped. Returns ``[]`` when nothing
    usable is left (the caller keeps the fused order).
    """
    ranking = _json_ranking(text or "")
    if ranking is not None:
        tokens = [m for item in ranking for m in re.findall(r"\d+", str(item))[:1]]
    else:
        tokens = re.findall(r"(?<!\d)(?<!\d\.)\d+(?!\d)(?!\.\d)", text or "")  # integers, not decimals
    out: list[int] = []
    for tok in tokens:
        k = int(tok)
        if 1 <= k <= n and k not in out:
            out.append(k)
    return out


def reorder(hits: Sequence[PaperHit], order: Sequence[int], top_n: int, *, applied: bool,
            note: str | None = None) -> list[PaperHit]:
    """``hits`` with the first ``top_n`` rearranged: the candidates of ``order`` (1-based numbers) first in
    that order, then the other candidates and the hits beyond ``top_n`` in their fused order. Returns
    copies with :class:`~neusym.store.paper_index.RerankInfo` set (fused rank, LLM rank, ``applied``, ``note``)."""
    n = min(top_n, len(hits))
    llm_rank = {k - 1: r for r, k in enumerate(order, 1)}
    first = [k - 1 for k in order if 1 <= k <= n]
    rest = [i for i in range(len(hits)) if i not in llm_rank]
    out = []
    for i in first + rest:
        out.append(replace(hits[i], rerank=RerankInfo(applied=applied, fused_rank=i + 1, llm_rank=llm_rank.get(i),
                                                      top_n=n, note=note)))
    return out


# ------------------------------------------------------------------------------------------ rerank
def rerank_hits(question: str, hits: Sequence[PaperHit], *, abstracts: Mapping[str, str] | None = None,
                settings: Settings | None = None, llm: Any = None, top_n: int | None = None) -> RerankResult:
    """Rerank the top ``top_n`` of fused ``hits`` (best first, e.g. from :meth:`PaperIndex.search`) for
    ``question`` with one LLM call; see the module docstring.

    ``abstracts``: paper_id -> abstract of the candidates (:meth:`neusym.store.paper_index.PaperIndex.abstracts`;
    missing ones show their snippet); ``settings``: LLM configuration, ``search_rerank_top_n`` and
    the candidate budget (default: the process settings); ``llm``: an object with the
    :class:`neusym.llm.chat.LLM` ``chat`` method (default: ``make_llm(settings)``); ``top_n``: default
    ``settings.search_rerank_top_n``. Returns a :class:`RerankResult` holding every input hit once.
    Raises ``ValueError`` only for a ``top_n`` below 1; LLM failures are reported in the result.
    """
    settings = settings or get_settings()
    n_req = int(top_n if top_n is not None else settings.search_rerank_top_n)
    if n_req < 1:
        raise ValueError(f"top_n must be at least 1, got {top_n!r}")
    hits = list(hits)
    n = min(n_req, len(hits))
    if n < 2:
        note = "nothing to rerank (fewer than 2 hits)"
        return RerankResult(hits=reorder(hits, [], n, applied=False, note=note), applied=False, note=note, top_n=n)
    candidates = hits[:n]
    messages = build_messages(question, candidates, abstracts, candidate_chars(settings, n, question))
    started = time.monotonic()
    try:
        if llm is None:
            from neusym.llm.chat import make_llm

            llm = make_llm(settings)
        reply = llm.chat(messages, json_schema=RANKING_SCHEMA, max_tokens=reply_tokens(n))
    except Exception as exc:  # noqa: BLE001 - any backend failure keeps the fused order
        note = f"LLM call failed, fused order kept: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        logger.warning("paper search rerank: %s", note)
        return RerankResult(hits=reorder(hits, [], n, applied=False, note=note), applied=False, note=note, top_n=n,
                            seconds=round(time.monotonic() - started, 3))
    seconds = round(time.monotonic() - started, 3)
    text = reply.text or ""
    order = parse_ranking(text, n)
    usage = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens}
    if not order:
        note = f"LLM reply had no usable candidate number (1-{n}), fused order kept: {text[:120]!r}"
        logger.warning("paper search rerank: %s", note)
        return RerankResult(hits=reorder(hits, [], n, applied=False, note=note), applied=False, note=note, top_n=n,
                            reply=text[:500], seconds=seconds, **usage)
    return RerankResult(hits=reorder(hits, order, n, applied=True), applied=True, order=order, top_n=n,
                        reply=text[:500], seconds=seconds, **usage)


__all__ = [
    "RANKING_SCHEMA",
    "RerankResult",
    "build_messages",
    "candidate_chars",
    "candidate_text",
    "load_prompt",
    "parse_ranking",
    "reorder",
    "rerank_hits",
]
