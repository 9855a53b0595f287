"""Make an answer take the shape its answer format asks for, or say why it cannot.

AirQA-style answer formats state the expected shape in plain words ("Your answer should be a
single integer.", "... a float rounded to 2 decimal places.", "... a Python list of two elements:
[...]", "... a Python boolean, True or False."). The small offline model often gets the content
right and the shape wrong (``L2 norm distance, 1`` for a two-element list, an expression such as
``exp(8*1-6)`` for a number). :func:`conform` repairs what can be repaired without a model:

- a number written as an arithmetic expression is computed by CalculateExpr
  (:func:`neusym.query.calc.calculate`, sandboxed, time- and size-limited);
- an unbracketed comma-separated answer becomes a list when the format names the list's length
  and the parts match it;
- list elements written as expressions are computed one by one (in a JSON array whose elements
  are strings only when the question asks for a computed value: ``compute_strings``);
- floats are rounded to the decimals the format asks for.

What cannot be repaired comes back with ``ok = False`` and a ``detail`` the verifier turns into a
``format`` check (one repair round with the LLM). Never raises.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from neusym.values import UNPARSED, clean_text, coerce_bool, coerce_number, parse_literal
from neusym.query.answer.cues import (
    FORMAT_BOOL as _BOOL,
    FORMAT_DECIMALS as _DECIMALS,
    FORMAT_FLOAT as _FLOAT,
    FORMAT_FREE as _FREE,
    FORMAT_HEAD as _HEAD,
    FORMAT_INT as _INT,
    FORMAT_LIST as _LIST,
    FORMAT_LIST_LENGTH as _LIST_LEN,
)

_COUNTS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


@dataclass
class Shape:
    """What the answer format asks for: ``kind`` one of ``int``, ``float``, ``bool``, ``list``,
    ``str`` or ``free`` (formulas, paragraphs, titles: not checked); ``length`` of a list when the
    format names it; ``decimals`` of a float when it names them."""
    kind: str
    length: int | None = None
    decimals: int | None = None


@dataclass
class Conformed:
    """The answer in its required shape (``value``; the original when it could not be conformed),
    whether it conforms (``ok``; ``None`` for free-form formats), why not (``detail``) and the
    expressions CalculateExpr computed (``computed``: list of (expression, result))."""
    value: Any
    ok: bool | None
    detail: str = ""
    computed: list[tuple[str, Any]] = field(default_factory=list)


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _COUNTS[word.lower()]


def shape_of(answer_format: str | None) -> Shape:
    """The :class:`Shape` an AirQA-style answer format describes (``free`` when it names none).
    Only the head of the format (before the first colon) decides the outer kind, so "a Python list
    of two elements: [a float, True or False]" is a list, not a float."""
    text = " ".join((answer_format or "").split())
    head = _HEAD.sub("", text).split(":", 1)[0]
    if _LIST.search(head):
        m = _LIST_LEN.search(head)
        return Shape("list", length=_count(m.group(1)) if m else None)
    if _BOOL.search(head):
        return Shape("bool")
    if _INT.search(head):
        return Shape("int")
    if _FLOAT.search(head) or (_DECIMALS.search(head) and not _FREE.search(head)):
        m = _DECIMALS.search(head)
        return Shape("float", decimals=_count(m.group(1)) if m else None)
    if not head or _FREE.search(head):
        return Shape("free")
    return Shape("str")


def _calc(expr: str, computed: list) -> Any:
    """CalculateExpr on ``expr`` when it is arithmetic (an operator or a function call at the top:
    ``2 + 3``, ``exp(2)``; not ``12 or 13``), else :data:`UNPARSED`."""
    from neusym.query.calc import calculate
    from neusym.errors import ActionError

    try:
        if not isinstance(ast.parse(expr, mode="eval").body, (ast.BinOp, ast.UnaryOp, ast.Call)):
            return UNPARSED
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return UNPARSED
    try:
        value = calculate(expr, timeout_s=2)
    except (ActionError, ValueError, TypeError):
        return UNPARSED
    computed.append((expr, value))
    return value


def _number(value: Any, computed: list) -> int | float | None:
    number = coerce_number(value, extract=False)
    if number is None and isinstance(value, str) and re.search(r"[\d)]", value) and len(value) <= 200:
        result = _calc(clean_text(value), computed)
        if isinstance(result, (int, float)) and not isinstance(result, bool):
            number = result
    if number is None:  # one number among noise: "{46.5%}", "about 42 points"
        number = coerce_number(value, extract=True)
    return number


def _round(number: int | float, decimals: int | None) -> int | float:
    if decimals is None or isinstance(number, int):
        return number
    return round(float(number), decimals)


def _element(node: ast.AST, computed: list) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    value = _calc(ast.unparse(node), computed)
    return ast.unparse(node) if value is UNPARSED else value


def _split_scalar(part: str) -> Any:
    part = part.strip().strip("'\"").strip()
    number = coerce_number(part, extract=False)
    if number is not None:
        return number
    flag = coerce_bool(part) if part.lower() in {"true", "false"} else None
    return flag if flag is not None else part


def _list_element(value: Any, computed: list) -> Any:
    """An element of a list the model wrote as JSON: a string holding arithmetic is computed."""
    if isinstance(value, str) and re.search(r"\d", value) and len(value) <= 200:
        result = _calc(clean_text(value), computed)
        if isinstance(result, (int, float)) and not isinstance(result, bool):
            return result
    return value


def _as_list(answer: Any, length: int | None, computed: list, compute_strings: bool = False) -> list | None:
    if isinstance(answer, (list, tuple)):
        return [_list_element(v, computed) if compute_strings else v for v in answer]
    if not isinstance(answer, str):
        return None
    parsed = parse_literal(answer)
    if isinstance(parsed, list):
        return parsed
    text = clean_text(answer)
    if len(text) > 2000:
        return None
    body = text[1:-1] if text.startswith(("[", "(")) and text.endswith(("]", ")")) else text
    try:  # a list with expressions among its elements: [exp(2), 3]
        tree = ast.parse(f"[{body}]", mode="eval").body
        if isinstance(tree, ast.List):
            return [_element(node, computed) for node in tree.elts]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    parts = [p for p in re.split(r"(?<!\s)\s*[,;]\s*", body) if p.strip()]
    if length is not None and len(parts) == length:
        return [_split_scalar(p) for p in parts]
    return None


def conform(answer: Any, answer_format: str | None, *, compute_strings: bool = False) -> Conformed:
    """``answer`` in the shape ``answer_format`` asks for (see the module docstring).
    ``compute_strings``: the question asks for a computed value, so string elements of a list given
    as a list (a JSON array) are computed when they hold arithmetic; otherwise they stay strings
    ("1650-1669" is a page range, not a subtraction)."""
    shape = shape_of(answer_format)
    computed: list[tuple[str, Any]] = []
    if answer is None or shape.kind == "free":
        return Conformed(answer, None)
    if shape.kind in ("int", "float"):
        number = _number(answer, computed)
        if number is None:
            return Conformed(answer, False, f"is not a single number as the answer format requires ({shape.kind})",
                             computed)
        if shape.kind == "int":
            if isinstance(number, float) and not number.is_integer():
                return Conformed(answer, False, "is not an integer as the answer format requires", computed)
            return Conformed(int(number), True, computed=computed)
        return Conformed(_round(number, shape.decimals), True, computed=computed)
    if shape.kind == "bool":
        flag = coerce_bool(answer)
        if flag is None:
            return Conformed(answer, False, "is not True or False as the answer format requires")
        return Conformed(flag, True)
    if shape.kind == "list":
        items = _as_list(answer, shape.length, computed, compute_strings)
        if items is None:
            need = f"of {shape.length} elements " if shape.length else ""
            return Conformed(answer, False, f"is not a Python list {need}as the answer format requires", computed)
        if shape.length is not None and len(items) != shape.length:
            return Conformed(items, False, f"has {len(items)} elements, the answer format asks for {shape.length}",
                             computed)
        return Conformed(items, True, computed=computed)
    # a single string: unwrap ['x'] and strip the usual noise
    if isinstance(answer, (list, tuple)) and len(answer) == 1:
        answer = answer[0]
    if isinstance(answer, str):
        parsed = parse_literal(answer)
        if isinstance(parsed, list) and len(parsed) == 1 and isinstance(parsed[0], str):
            return Conformed(parsed[0], True)
        return Conformed(parsed if isinstance(parsed, str) else clean_text(answer), True)
    return Conformed(answer, True)


__all__ = ["Conformed", "Shape", "conform", "shape_of"]
