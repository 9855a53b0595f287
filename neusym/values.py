"""Reading an agent's final answer: noise removal, safe literal parsing, type coercion, normalisation.

Predictions reach the evaluation functions either already typed (``42``, ``["a", "b"]``) or as the
text of the agent's final answer (``"42"``, ``"['a', 'b']"``, ``"The answer is 42."``). Text is
parsed with :func:`ast.literal_eval` / :func:`json.loads` only — never ``eval`` — after removing the
usual LLM noise (code fences, an "Answer:" prefix, surrounding quotes or emphasis, a trailing period).

Nothing in this module raises on bad input: the ``coerce_*`` helpers return ``None`` when a value
cannot be read as the requested type, and the caller scores that as a wrong answer.
"""

from __future__ import annotations

import ast
import json
import math
import re
import unicodedata
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

#: Texts longer than this are never literal-parsed (``ast.literal_eval`` is recursive and unbounded).
MAX_PARSE_CHARS = 100_000


class _Unparsed:
    """Sentinel: the text is not a Python/JSON literal."""

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return "UNPARSED"


UNPARSED: Any = _Unparsed()

_FENCE_RE = re.compile(r"^```[\w+.-]*[ \t]*\n?(.*?)\n?[ \t]*```$", re.S)
_PREFIX_RE = re.compile(
    r"^(?:(?:so|thus|therefore|hence),?\s+)?(?:(?:the|my|our)\s+)?(?:final\s+|short\s+|correct\s+)?"
    r"answer\s*(?:is\s*:?|:|=)\s*",
    re.I,
)
_TYPOGRAPHIC = str.maketrans(
    {
        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'",
        "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"',
        "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
        "\u00a0": " ", "\u202f": " ", "\u2009": " ",
    }
)
_QUOTE_PAIRS = (('"', '"'), ("'", "'"), ("`", "`"), ("\u201c", "\u201d"), ("\u2018", "\u2019"))
_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?")
_NUMBER_IN_TEXT_RE = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])|(?<![\w.])[-+]?\.\d+(?![\w])")
_TRUE_WORDS = {"true", "yes", "y", "t", "correct"}
_FALSE_WORDS = {"false", "no", "n", "f", "incorrect"}
_TITLE_PREFIX_RE = re.compile(r"^\s*(?:paper\s+)?title\s*[:\-]\s*", re.I)


def clean_text(text: str) -> str:
    """``text`` without the noise LLMs wrap answers in.

    Removes (repeatedly, outermost first): surrounding whitespace, a Markdown code fence
    (```` ```python ... ``` ````), an "The answer is" / "Answer:" / "Final answer:" prefix, Markdown
    bold or inline-code wrapping of the whole text, and one trailing period (not an ellipsis).
    Surrounding quotes are left in place (they are handled by literal parsing and string
    normalisation). Returns the cleaned text, possibly empty.
    """
    s = text.strip()
    for _ in range(4):
        before = s
        fence = _FENCE_RE.match(s)
        if fence:
            s = fence.group(1).strip()
        s = _PREFIX_RE.sub("", s, count=1).strip()
        for wrap in ("**", "`"):
            if len(s) > 2 * len(wrap) and s.startswith(wrap) and s.endswith(wrap):
                s = s[len(wrap) : -len(wrap)].strip()
        if len(s) > 1 and s.endswith(".") and not s.endswith(".."):
            s = s[:-1].rstrip()
        if s == before:
            break
    return s


def _plain(value: Any) -> Any:
    """Tuples → lists and sets → sorted lists, recursively (so parsed values compare like JSON)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _try_literal(s: str) -> Any:
    try:
        return _plain(ast.literal_eval(s))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        return _plain(json.loads(s))
    except (ValueError, RecursionError):
        return UNPARSED


def parse_literal(text: str) -> Any:
    """The Python/JSON literal ``text`` denotes, or :data:`UNPARSED`.

    ``text`` is cleaned with :func:`clean_text`, then tried with ``ast.literal_eval`` (Python
    literals: ``['a', 'b']``, ``True``, ``None``, ``'x'``) and ``json.loads`` (``true``, ``null``,
    JSON strings). If both fail and the text contains one bracketed list or dict with prose around
    it (``"The lists are ['a', 'b'] in total"``), that span is tried. Tuples and sets come back as
    lists. Never evaluates code.
    """
    s = clean_text(text)
    if not s or len(s) > MAX_PARSE_CHARS:
        return UNPARSED
    value = _try_literal(s)
    if value is not UNPARSED:
        return value
    for opening, closing in (("[", "]"), ("{", "}")):
        start, end = s.find(opening), s.rfind(closing)
        if 0 <= start < end and (start, end) != (0, len(s) - 1):
            value = _try_literal(s[start : end + 1])
            if value is not UNPARSED and isinstance(value, (list, dict)):
                return value
    return UNPARSED


def as_structure(value: Any) -> Any:
    """``value`` as a Python object: strings are literal-parsed when they denote a list or dict,
    otherwise returned as their cleaned text; tuples/sets become lists."""
    if isinstance(value, str):
        parsed = parse_literal(value)
        if isinstance(parsed, (list, dict)):
            return parsed
        if isinstance(parsed, str):
            return parsed
        return clean_text(value) if parsed is UNPARSED else parsed
    return _plain(value)


def _unwrap_single(value: Any) -> Any:
    while isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    return value


def coerce_bool(value: Any) -> bool | None:
    """``value`` read as a boolean, or ``None``.

    Accepts ``bool`` values, one-element lists of one, and texts ``true/false``, ``yes/no``
    (any case, Python or JSON spelling, with the usual noise) — also a leading ``"Yes, ..."`` /
    ``"No."`` followed by an explanation. Numbers are *not* booleans.
    """
    value = _unwrap_single(value)
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        return None
    parsed = parse_literal(value)
    parsed = _unwrap_single(parsed)
    if isinstance(parsed, bool):
        return parsed
    s = normalize_string(value if not isinstance(parsed, str) else parsed, lowercase=True)
    if s in _TRUE_WORDS:
        return True
    if s in _FALSE_WORDS:
        return False
    first = re.match(r"^(yes|no|true|false)\s*[,.;:!]", s)
    if first:
        return first.group(1) in _TRUE_WORDS
    return None


def _number_from_text(s: str) -> int | float | None:
    s = s.strip().replace(" ", "")
    if s.endswith("%"):
        s = s[:-1]
    if s.startswith("$"):
        s = s[1:]
    if not s or not _NUMBER_RE.fullmatch(s) or not any(ch.isdigit() for ch in s):
        return None
    plain = s.replace(",", "")
    try:
        if re.fullmatch(r"[-+]?\d+", plain):
            return int(plain)
        return float(plain)
    except ValueError:
        return None


def coerce_number(value: Any, *, extract: bool = True) -> int | float | None:
    """``value`` read as a number (``int`` kept exact, else ``float``), or ``None``.

    Accepts ints/floats (not bools), one-element lists of one, and texts such as ``"42"``,
    ``"42.0"``, ``"1,024"``, ``"85.3%"`` (→ 85.3, the percent sign is dropped, not divided),
    ``"$12"``, ``"1e-3"``. With ``extract`` (default) a text that contains exactly one number among
    words (``"about 42 points"``) yields that number; two or more numbers yield ``None``.
    """
    value = _unwrap_single(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if not isinstance(value, str):
        return None
    parsed = _unwrap_single(parse_literal(value))
    if isinstance(parsed, bool):
        return None
    if isinstance(parsed, (int, float)):
        return parsed
    text = clean_text(parsed if isinstance(parsed, str) else value)
    text = strip_quotes(text.translate(_TYPOGRAPHIC))
    number = _number_from_text(text)
    if number is not None or not extract:
        return number
    found = _NUMBER_IN_TEXT_RE.findall(text)
    if len(found) == 1:
        return _number_from_text(found[0])
    return None


def coerce_int(value: Any) -> int | None:
    """``value`` read as an integer (``42.0`` → 42; ``42.5`` → ``None``), see :func:`coerce_number`."""
    number = coerce_number(value)
    if isinstance(number, int):
        return number
    if isinstance(number, float) and math.isfinite(number) and number.is_integer():
        return int(number)
    return None


def coerce_str(value: Any) -> str | None:
    """``value`` read as one string, or ``None`` (dicts, multi-element lists, ``None``).

    A text that is a quoted string literal or a one-element list of strings (``"'BERT'"``,
    ``"['BERT']"``) yields the inner string; any other text yields its cleaned form; numbers and
    booleans yield ``str(value)``.
    """
    value = _unwrap_single(value)
    if isinstance(value, str):
        parsed = _unwrap_single(parse_literal(value))
        if isinstance(parsed, str):
            return parsed
        return clean_text(value)
    if isinstance(value, (bool, int, float)):
        return str(value)
    return None


def strip_quotes(s: str) -> str:
    """``s`` without matching surrounding quote pairs (``"x"``, ``'x'``, `` `x` ``, curly quotes)."""
    changed = True
    while changed and len(s) >= 2:
        changed = False
        for left, right in _QUOTE_PAIRS:
            if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
                s = s[len(left) : -len(right)].strip()
                changed = True
    return s


def normalize_string(s: str, *, lowercase: bool = False, ignore_blank: bool = False) -> str:
    """The comparison form of ``s``, applied identically to prediction and gold.

    Always: Unicode NFKC, typographic quotes/dashes/spaces → ASCII, surrounding whitespace and
    matching quote pairs removed, one trailing period removed, inner whitespace runs → one space.
    ``lowercase``: case-folded. ``ignore_blank``: all whitespace removed.
    """
    s = unicodedata.normalize("NFKC", s).translate(_TYPOGRAPHIC).strip()
    s = strip_quotes(s)
    if len(s) > 1 and s.endswith(".") and not s.endswith(".."):
        s = s[:-1]
    s = re.sub(r"\s+", " ", s).strip()
    if lowercase:
        s = s.casefold()
    if ignore_blank:
        s = re.sub(r"\s+", "", s)
    return s


def normalize_title(title: str) -> str:
    """The comparison form of a paper title: accents and case folded, a leading ``Title:`` dropped,
    every run of non-alphanumeric characters (punctuation, hyphens, LaTeX braces) → one space."""
    s = unicodedata.normalize("NFKD", clean_text(title).translate(_TYPOGRAPHIC))
    s = "".join(ch for ch in s if not unicodedata.combining(ch))
    s = _TITLE_PREFIX_RE.sub("", strip_quotes(s.strip()))
    s = s.casefold()
    s = re.sub(r"[^\w]+|_", " ", s)
    return re.sub(r"\s+", " ", s).strip()


def round_half_up(x: float, ndigits: int) -> float:
    """``x`` rounded to ``ndigits`` decimals the way people round (``12.25`` → ``12.3``), computed
    on the shortest decimal representation of ``x`` rather than its binary value."""
    if not math.isfinite(x):
        return x
    try:
        quantum = Decimal(1).scaleb(-ndigits)
        return float(Decimal(repr(float(x))).quantize(quantum, rounding=ROUND_HALF_UP))
    except InvalidOperation:  # absurdly many digits for the magnitude
        return float(x)


def strip_fences(text: str) -> str:
    """``text`` stripped, without a Markdown code fence around the whole of it."""
    s = text.strip()
    fence = _FENCE_RE.match(s)
    return fence.group(1).strip() if fence else s


def prediction_text(value: Any) -> str:
    """A prediction as free text for an LLM judge: strings stripped (and unfenced) but otherwise
    verbatim, other values JSON-encoded."""
    if value is None:
        return ""
    if isinstance(value, str):
        return strip_fences(value)
    if isinstance(value, (list, tuple, dict)):
        try:
            return json.dumps(_plain(value), ensure_ascii=False)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


__all__ = [
    "MAX_PARSE_CHARS",
    "UNPARSED",
    "as_structure",
    "clean_text",
    "coerce_bool",
    "coerce_int",
    "coerce_number",
    "coerce_str",
    "normalize_string",
    "normalize_title",
    "parse_literal",
    "prediction_text",
    "round_half_up",
    "strip_fences",
    "strip_quotes",
]
