"""Safe arithmetic for the ``CalculateExpr`` action (never Python ``eval``/``exec``).

Expressions are parsed with :mod:`ast` and interpreted by :mod:`simpleeval` with a closed set of
operators, names and functions:

- operators: ``+ - * / // % **``, comparisons, ``and/or/not``, ``x if c else y``, subscripts, list /
  tuple / dict / set literals and comprehensions (at most 10,000 items);
- names: ``pi``, ``e``, ``inf``, ``nan``, ``True``, ``False``, ``None``;
- functions: :data:`FUNCTIONS` (``sqrt log log2 log10 exp abs round min max sum mean median stdev
  floor ceil pow factorial len int float sorted ...``).

Refused (raised as :class:`neusym.errors.ActionError` with the reason): attribute access
(``x.__class__``, ``'a'.upper()``), any name or function not listed (``__import__``, ``open``),
assignment, f-strings, lambdas, expressions longer than :data:`MAX_EXPR_CHARS`, powers or products
whose result would exceed :data:`MAX_INT_DIGITS` digits, string ``%`` formatting, non-numeric results
such as a bare function, and complex numbers.
"""

from __future__ import annotations

import ast
import math
import operator
import statistics
from collections.abc import Callable, Iterable
from typing import Any

import simpleeval

from neusym.errors import ActionError

MAX_EXPR_CHARS = 2000
"""Longest accepted expression (characters)."""
MAX_INT_DIGITS = 1000
"""Largest integer result of ``**``, ``*``, ``pow`` or ``factorial`` (decimal digits)."""
MAX_FACTORIAL = 300


def _digits_estimate(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    if isinstance(value, int):
        return max(value.bit_length() - 1, 0) * math.log10(2)
    magnitude = abs(value)
    if magnitude < 1 or math.isinf(magnitude) or math.isnan(magnitude):
        return 0.0
    return math.log10(magnitude)


def _safe_pow(base: Any, exponent: Any) -> Any:
    if isinstance(base, (int, float)) and isinstance(exponent, (int, float)):
        if abs(base) > 1 and exponent > 0:
            digits = math.log10(abs(base)) * exponent
            if digits > MAX_INT_DIGITS:
                raise simpleeval.NumberTooHigh(
                    f"{base} ** {exponent} would have about {digits:,.0f} digits (limit {MAX_INT_DIGITS})"
                )
    result = operator.pow(base, exponent)
    if isinstance(result, complex):
        raise ValueError(f"{base} ** {exponent} is a complex number")
    return result


def _safe_mult(a: Any, b: Any) -> Any:
    if _digits_estimate(a) + _digits_estimate(b) > MAX_INT_DIGITS and isinstance(a, int) and isinstance(b, int):
        raise simpleeval.NumberTooHigh(f"product would have more than {MAX_INT_DIGITS} digits")
    return simpleeval.safe_mult(a, b)


def _safe_mod(a: Any, b: Any) -> Any:
    if isinstance(a, (str, bytes)):
        raise simpleeval.FeatureNotAvailable("string % formatting is not supported")
    return operator.mod(a, b)


def _safe_pow_fn(base: Any, exponent: Any) -> Any:
    return _safe_pow(base, exponent)


def _factorial(n: Any) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"factorial() needs a non-negative integer, got {n!r}")
    if n > MAX_FACTORIAL:
        raise simpleeval.NumberTooHigh(f"factorial({n}) is too large (limit {MAX_FACTORIAL})")
    return math.factorial(n)


def _values(args: tuple) -> list:
    """``mean(1, 2, 3)`` and ``mean([1, 2, 3])`` both work."""
    if len(args) == 1 and isinstance(args[0], Iterable) and not isinstance(args[0], (str, bytes)):
        return list(args[0])
    return list(args)


def _mean(*args: Any) -> float:
    return statistics.fmean(_values(args))


def _median(*args: Any) -> Any:
    return statistics.median(_values(args))


def _stdev(*args: Any) -> float:
    return statistics.stdev(_values(args))


def _pstdev(*args: Any) -> float:
    return statistics.pstdev(_values(args))


def _log(x: Any, base: Any = math.e) -> float:
    return math.log(x, base)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sum": sum,
    "len": len,
    "sorted": sorted,
    "int": int,
    "float": float,
    "bool": bool,
    "mean": _mean,
    "avg": _mean,
    "average": _mean,
    "median": _median,
    "stdev": _stdev,
    "pstdev": _pstdev,
    "sqrt": math.sqrt,
    "cbrt": math.cbrt,
    "exp": math.exp,
    "log": _log,
    "ln": math.log,
    "log2": math.log2,
    "log10": math.log10,
    "floor": math.floor,
    "ceil": math.ceil,
    "trunc": math.trunc,
    "pow": _safe_pow_fn,
    "factorial": _factorial,
    "comb": math.comb,
    "perm": math.perm,
    "gcd": math.gcd,
    "lcm": math.lcm,
    "hypot": math.hypot,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "atan": math.atan,
    "isclose": math.isclose,
}
"""Every callable an expression may use, by name."""

NAMES: dict[str, Any] = {
    "pi": math.pi,
    "e": math.e,
    "inf": math.inf,
    "nan": math.nan,
    "True": True,
    "False": False,
    "None": None,
}


class _Evaluator(simpleeval.EvalWithCompoundTypes):
    """simpleeval with attribute access, f-strings and lambdas removed and big-number guards."""

    def __init__(self) -> None:
        operators = dict(simpleeval.DEFAULT_OPERATORS)
        operators[ast.Pow] = _safe_pow
        operators[ast.Mult] = _safe_mult
        operators[ast.Mod] = _safe_mod
        super().__init__(operators=operators, functions=dict(FUNCTIONS), names=dict(NAMES))
        for node_type in (ast.Attribute, ast.JoinedStr, ast.FormattedValue):
            self.nodes.pop(node_type, None)

    def _eval_call(self, node: ast.Call) -> Any:
        # only plain names of whitelisted functions may be called (no calls of call results etc.)
        if not isinstance(node.func, ast.Name):
            raise simpleeval.FeatureNotAvailable("only calls of named functions like sqrt(x) are allowed")
        return super()._eval_call(node)


def _node_name(node: ast.AST) -> str:
    return {
        "Attribute": "attribute access (x.y)",
        "JoinedStr": "f-strings",
        "FormattedValue": "f-strings",
        "Lambda": "lambda",
        "NamedExpr": "assignment (:=)",
        "Assign": "assignment",
        "Await": "await",
        "Yield": "yield",
        "Starred": "* unpacking",
    }.get(type(node).__name__, type(node).__name__)


def _check_result(expr: str, value: Any) -> Any:
    if isinstance(value, complex):
        raise ActionError(f"CalculateExpr: {expr!r} gives a complex number, which is not supported.")
    if isinstance(value, (bool, int, float, str)) or value is None:
        if isinstance(value, int) and not isinstance(value, bool) and _digits_estimate(value) > MAX_INT_DIGITS:
            raise ActionError(f"CalculateExpr: the result of {expr!r} has more than {MAX_INT_DIGITS} digits.")
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_check_result(expr, v) for v in value]
    if isinstance(value, dict):
        return {_check_result(expr, k): _check_result(expr, v) for k, v in value.items()}
    raise ActionError(
        f"CalculateExpr: {expr!r} does not evaluate to a number or value (got {type(value).__name__}); "
        "call functions with arguments, e.g. sqrt(2)."
    )


def calculate(expr: str) -> int | float | bool | str | list | dict | None:
    """Evaluate an arithmetic expression such as ``"(85.2 - 80.1) / 80.1 * 100"`` or ``"mean([1, 2, 3])"``.

    Returns a Python number (int/float), bool, str, list or dict (lists and tuples come back as
    lists). Raises :class:`ActionError` with a message stating what is wrong: empty or too long
    input, syntax error, unknown name or function, a refused construct (attribute access, f-string,
    lambda, assignment, import), numbers too large, division by zero, domain errors (``sqrt(-1)``)
    and non-value results.
    """
    if not isinstance(expr, str):
        raise ActionError(f"CalculateExpr: expr must be a string, got {type(expr).__name__}.")
    text = expr.strip()
    if not text:
        raise ActionError("CalculateExpr: the expression is empty.")
    if len(text) > MAX_EXPR_CHARS:
        raise ActionError(f"CalculateExpr: the expression is {len(text)} characters long (limit {MAX_EXPR_CHARS}).")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ActionError(f"CalculateExpr: syntax error in {text!r}: {exc.msg}.") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise ActionError(f"CalculateExpr: cannot parse {text!r}: {type(exc).__name__}.") from None
    evaluator = _Evaluator()
    supported = tuple(evaluator.nodes)
    for node in ast.walk(tree.body):
        if isinstance(node, (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.comprehension)):
            continue
        if not isinstance(node, supported):
            raise ActionError(f"CalculateExpr: not allowed in {text!r}: {_node_name(node)}.")
    try:
        value = evaluator.eval(text, previously_parsed=tree.body)
    except simpleeval.NameNotDefined as exc:
        raise ActionError(
            f"CalculateExpr: unknown name {exc.name!r} in {text!r}; allowed names: {', '.join(sorted(NAMES))}."
        ) from None
    except simpleeval.FunctionNotDefined as exc:
        raise ActionError(
            f"CalculateExpr: unknown function {exc.func_name!r} in {text!r}; allowed functions: "
            f"{', '.join(sorted(FUNCTIONS))}."
        ) from None
    except simpleeval.NumberTooHigh as exc:
        raise ActionError(f"CalculateExpr: number too large in {text!r}: {exc}.") from None
    except simpleeval.IterableTooLong as exc:
        raise ActionError(f"CalculateExpr: sequence too long in {text!r}: {exc}.") from None
    except simpleeval.FeatureNotAvailable as exc:
        raise ActionError(f"CalculateExpr: not allowed in {text!r}: {exc}.") from None
    except simpleeval.InvalidExpression as exc:
        raise ActionError(f"CalculateExpr: invalid expression {text!r}: {exc}.") from None
    except ZeroDivisionError:
        raise ActionError(f"CalculateExpr: division by zero in {text!r}.") from None
    except OverflowError:
        raise ActionError(f"CalculateExpr: numeric overflow in {text!r}.") from None
    except (TypeError, ValueError, KeyError, IndexError, statistics.StatisticsError) as exc:
        raise ActionError(f"CalculateExpr: cannot evaluate {text!r}: {type(exc).__name__}: {exc}.") from None
    except (RecursionError, MemoryError) as exc:
        raise ActionError(f"CalculateExpr: {text!r} is too deeply nested or too large ({type(exc).__name__}).") from None
    return _check_result(text, value)


__all__ = ["FUNCTIONS", "MAX_EXPR_CHARS", "MAX_INT_DIGITS", "NAMES", "calculate"]
