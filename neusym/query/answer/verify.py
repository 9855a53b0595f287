"""The verifier: check an answer's checkable claims against the database before it is returned.

SR-RAG's verification of intermediate answers, with DuckDB as the symbolic engine. Checks
(:func:`verify`):

- ``sql``: answers computed by SQL templates (counts, authors, venue, year) are correct by
  construction; the check records the SQL (pass);
- ``title``: a paper title in the answer must be a title of the corpus (normalised, exact);
- ``number``: every number in the answer must occur in the evidence the answer cites (or in any
  retrieved evidence); a number that the question asks to compute (difference, ratio, percentage,
  average...) is ``unverifiable`` unless it occurs there;
- ``quote``: every quoted string in the answer must occur in the evidence;
- ``item``: short list items (names, datasets, metrics) must occur in the evidence; a short single
  answer (a name, a term) passes when it occurs there and is left undecided when it does not;
- ``format``: the answer has the shape its answer format asks for (a single integer, a Python list
  of two elements, ...), after :func:`neusym.query.answer.answer_format.conform` repaired what it could;
- ``calc``: a number the answer wrote as an arithmetic expression was computed by CalculateExpr;
  the numbers checked against the evidence are then the expression's operands;
- ``sql``: the answer rests on a query over a table's cells (:mod:`neusym.query.answer.table_query`);
  the query re-run gave the same rows (pass) or not (fail).

Status: ``pass`` when every check passed (and there was at least one), ``fail`` when one failed,
``unverifiable`` when nothing in the answer could be checked.

Basis (:data:`BASES`): what the answer is, which says how far a ``pass`` can be trusted. ``computed``:
the result of an SQL template or lookup the system wrote (counts, authors, venue, a title that is not
in the corpus) — right when the database is; ``queried``: the rows of the SQL query the language
model wrote over one table's cells (re-run by the verifier: whether it asks the right thing, and
whether the cells were parsed right, is not checked); ``search``: the top hit of the paper index,
checked only to be a title of the corpus; ``read``: written by the language model from the evidence —
its checks only show that its numbers, quotes and items occur there, not that they answer the
question. How often a ``pass`` of each basis is right on questions nobody tuned for:
``benchmarks/results/verification.json``.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any
from neusym.query.answer.cues import (
    ASKS_TO_COMPUTE as _COMPUTE,
)

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w.])|(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w])")
_QUOTED = re.compile(r"[\"“]([^\"“”]{3,120})[\"”]")


@dataclass
class Check:
    """One check: the ``claim`` it looked at, its ``kind``, ``ok`` (True / False / None = could not
    tell) and a ``detail``."""

    claim: str
    kind: str
    ok: bool | None
    detail: str = ""


#: What an answer can be (module docstring) -> how the CLI, the MCP ``ask`` tool and the web page
#: name it: every verification dict carries these words as ``basis_text``, which they show.
BASES = {
    "computed": "computed by a query the system wrote over the database",
    "queried": "the rows of a query the language model wrote over one table: the query is re-run, not judged",
    "search": "the top hit of the paper search",
    "read": "read by the language model: its values occur in the evidence, which does not prove they answer "
            "the question",
}


@dataclass
class Verification:
    """The verifier's verdict: ``status`` (pass / fail / unverifiable), the ``checks`` made,
    ``repaired`` (the answer came from the repair round) and ``basis`` (one of :data:`BASES`)."""

    status: str
    checks: list[Check] = field(default_factory=list)
    repaired: bool = False
    basis: str = "read"

    def to_dict(self) -> dict:
        """JSON-ready form: ``{"status", "basis", "basis_text", "repaired", "checks": [{claim, kind, ok,
        detail}]}`` (``basis_text``: the basis in words, :data:`BASES`)."""
        return {"status": self.status, "basis": self.basis, "basis_text": BASES.get(self.basis, ""),
                "repaired": self.repaired, "checks": [asdict(c) for c in self.checks]}

    @property
    def failed(self) -> list[Check]:
        """The checks that failed."""
        return [c for c in self.checks if c.ok is False]


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text or "").lower()
    text = re.sub(r"[-\u2010-\u2015]\s*\n\s*", "", text)
    return " ".join(re.sub(r"[^\w.%]+", " ", text).split())


def _numbers(text: str) -> list[str]:
    return [m.group(0).replace(",", "").lstrip("+") for m in _NUMBER.finditer(text or "")]


def _number_in(value: str, evidence: str) -> bool:
    try:
        target = float(value)
    except ValueError:
        return False
    for found in _numbers(evidence):
        try:
            if abs(float(found) - target) <= 1e-9 * max(1.0, abs(target)):
                return True
        except ValueError:
            continue
    return False


def _items(answer: Any) -> list[str]:
    value = answer
    if isinstance(answer, str):
        try:
            value = ast.literal_eval(answer.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return []
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str) and 1 < len(v) <= 80 and not _NUMBER.fullmatch(v.strip())]
    return []


def asks_to_compute(question: str) -> bool:
    """Whether ``question`` asks for a computed value (difference, ratio, total, average, given ...)."""
    return bool(_COMPUTE.search(question or ""))


def _short_answer(answer: Any) -> str | None:
    """A short single answer (a name, a term: at most 8 words, not a number or list), else None."""
    if not isinstance(answer, str):
        return None
    text = answer.strip().strip("'\"").strip()
    if not text or len(text) > 80 or len(text.split()) > 8 or _NUMBER.fullmatch(text) or text[:1] in "[{(":
        return None
    return text


def verify(answer: Any, evidence: list[str], *, question: str = "", titles: set[str] | None = None,
           symbolic_sql: list[str] | None = None, conformed: Any = None) -> Verification:
    """Check ``answer`` against ``evidence`` (the texts of the cells it cites or retrieved): its numbers
    must occur there or in ``question`` (an operand the question gives), unless the question asks to
    compute; quoted strings and list items must occur in the evidence.

    ``titles``: the corpus's normalised titles, when the answer is a paper title (paper search: basis
    ``search``); ``symbolic_sql``: the SQL that computed the answer (symbolic route: basis
    ``computed``; otherwise the basis is ``read``); ``conformed``: the
    :class:`neusym.query.answer.answer_format.Conformed` result for ``answer`` (adds the ``format`` and
    ``calc`` checks; ``answer`` should then be the text the model wrote). Never raises.
    """
    text = answer if isinstance(answer, str) else repr(answer)
    checks: list[Check] = []
    if conformed is not None and conformed.ok is not None:
        checks.append(Check(text, "format", bool(conformed.ok),
                            "has the shape the answer format asks for" if conformed.ok else conformed.detail))
        for expr, value in conformed.computed:
            checks.append(Check(expr, "calc", True, f"computed by CalculateExpr: {expr} = {value!r}"))
    if symbolic_sql:
        checks.append(Check(text, "sql", True, "computed by SQL: " + " ; ".join(symbolic_sql)))
        return Verification("pass", checks, basis="computed")
    if titles is not None:
        ok = _norm(text) in titles
        checks.append(Check(text, "title", ok, "a title of the corpus" if ok else "no paper of the corpus has this title"))
        return Verification("pass" if ok else "fail", checks, basis="search")
    joined = _norm("\n".join(evidence))
    compute = asks_to_compute(question)
    for value in dict.fromkeys(_numbers(text)):
        if _number_in(value, "\n".join(evidence)):
            checks.append(Check(value, "number", True, "occurs in the evidence"))
        elif question and _number_in(value, question):  # an operand the question gives ("distance 0.8")
            checks.append(Check(value, "number", True, "given in the question"))
        elif compute:
            checks.append(Check(value, "number", None, "computed from the evidence (not checked)"))
        else:
            checks.append(Check(value, "number", False, "does not occur in the cited evidence"))
    for quoted in _QUOTED.findall(text):
        ok = _norm(quoted) in joined
        checks.append(Check(quoted, "quote", ok, "occurs in the evidence" if ok else "not found in the evidence"))
    for item in _items(answer):
        if item in {c.claim for c in checks}:
            continue
        ok = _norm(item) in joined
        checks.append(Check(item, "item", ok, "occurs in the evidence" if ok else "not found in the evidence"))
    short = _short_answer(answer)
    if short and not checks:
        ok = _norm(short) in joined
        checks.append(Check(short, "item", True if ok else None,
                            "occurs in the evidence" if ok else "not found verbatim in the evidence (not decided)"))
    decided = [c for c in checks if c.ok is not None]
    if not decided:
        return Verification("unverifiable", checks)
    return Verification("fail" if any(c.ok is False for c in decided) else "pass", checks)


def normalised_titles(env: Any) -> set[str]:
    """The corpus's titles in the verifier's normal form (for the ``title`` check)."""
    from neusym.query.answer.symbolic import paper_catalog

    return {_norm(t) for _, t, _ in paper_catalog(env)}


__all__ = ["BASES", "Check", "Verification", "asks_to_compute", "normalised_titles", "verify"]
