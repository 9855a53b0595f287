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
whose result would exceed :data:`MAX_INT_DIGITS` digits (``comb``/``perm``/``factorial`` too), string ``%`` formatting, non-numeric results
such as a bare function, complex numbers, and results with more than :data:`MAX_RESULT_ELEMENTS`
elements or characters.

Budget: :func:`calculate` evaluates in one of :data:`WORKERS` worker processes (started once, reused,
at a lowered CPU priority) under a memory limit (:data:`MAX_MEMORY_MB`) and a wall-clock limit (``timeout_s``, default
:data:`TIMEOUT_S`): ``comb(10**7, 5*10**6)`` or ``[[[0]*1000]*1000]*1000`` end with a clear error
after at most that long instead of running for minutes; the worker is then replaced. The time spent
waiting for a free worker counts against the same limit.
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
MAX_RESULT_ELEMENTS = 10_000
"""Largest result: list/dict elements counted recursively, or characters of a string."""
TIMEOUT_S = 2.0
"""Default wall-clock budget of one expression (seconds)."""
MAX_MEMORY_MB = 512
"""Address-space limit of the evaluation worker (MB)."""


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


def _choose_digits(n: int, k: int, *, ordered: bool) -> float:
    """Decimal digits of comb(n, k) (or perm(n, k) when ``ordered``), from log-gamma: no big integers."""
    logs = math.lgamma(n + 1) - math.lgamma(n - k + 1) - (0.0 if ordered else math.lgamma(k + 1))
    return logs / math.log(10)


def _checked_choose(name: str, fn: Callable[..., int], n: Any, k: Any = None, *, ordered: bool) -> int:
    if k is None and ordered:
        k = n
    for v in (n, k):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{name}() needs integers, got {v!r}")
    if 0 <= k <= n and _choose_digits(n, k, ordered=ordered) > MAX_INT_DIGITS:
        raise simpleeval.NumberTooHigh(f"{name}({n}, {k}) would have about "
                                       f"{_choose_digits(n, k, ordered=ordered):,.0f} digits (limit {MAX_INT_DIGITS})")
    return fn(n, k)


def _comb(n: Any, k: Any) -> int:
    return _checked_choose("comb", math.comb, n, k, ordered=False)


def _perm(n: Any, k: Any = None) -> int:
    return _checked_choose("perm", math.perm, n, k, ordered=True)


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
    "comb": _comb,
    "perm": _perm,
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


def _count_elements(value: Any, limit: int) -> int:
    """Elements of a nested result (strings count their characters), counting stops past ``limit``."""
    seen = 0
    stack = [value]
    while stack and seen <= limit:
        v = stack.pop()
        if isinstance(v, str):
            seen += len(v)
        elif isinstance(v, (list, tuple, set, frozenset)):
            seen += len(v)
            if seen <= limit:
                stack.extend(v)
        elif isinstance(v, dict):
            seen += len(v)
            if seen <= limit:
                stack.extend(v.keys())
                stack.extend(v.values())
    return seen


def _check_result(expr: str, value: Any) -> Any:
    if _count_elements(value, MAX_RESULT_ELEMENTS) > MAX_RESULT_ELEMENTS:
        raise ActionError(f"CalculateExpr: the result of {expr!r} is too large (more than {MAX_RESULT_ELEMENTS:,} "
                          "elements or characters); compute a summary such as sum(...) or len(...) instead.")
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


def calculate(expr: str, *, timeout_s: float | None = None) -> int | float | bool | str | list | dict | None:
    """Evaluate an arithmetic expression such as ``"(85.2 - 80.1) / 80.1 * 100"`` or ``"mean([1, 2, 3])"``.

    Returns a Python number (int/float), bool, str, list or dict (lists and tuples come back as
    lists). Runs in the evaluation worker within ``timeout_s`` seconds (default :data:`TIMEOUT_S`)
    and :data:`MAX_MEMORY_MB` MB. Raises :class:`ActionError` with a message stating what is wrong:
    empty or too long input, syntax error, unknown name or function, a refused construct (attribute
    access, f-string, lambda, assignment, import), numbers too large, division by zero, domain
    errors (``sqrt(-1)``), non-value results, results too large, and the time or memory budget.
    """
    if not isinstance(expr, str):
        raise ActionError(f"CalculateExpr: expr must be a string, got {type(expr).__name__}.")
    return _SANDBOX.run(expr, TIMEOUT_S if timeout_s is None else float(timeout_s))


def calculate_in_process(expr: str) -> int | float | bool | str | list | dict | None:
    """:func:`calculate` without the worker process (no time budget): what the worker runs."""
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


# ------------------------------------------------------------------------------------- sandbox
def _worker_loop(memory_mb: int) -> None:  # pragma: no cover - runs in the worker process
    """``python -m neusym.query.calc --worker MB``: read one JSON expression per line on stdin, write one
    JSON ``[status, value]`` per line on stdout, under an address-space limit of ``MB``."""
    import json
    import resource
    import sys

    import os

    limit = memory_mb * 1024 * 1024
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError):
        pass
    try:  # an expression that runs to its time limit must not take the CPU from the process serving requests
        os.nice(10)
    except OSError:
        pass
    for line in sys.stdin:
        expr = json.loads(line)
        try:
            out = ["ok", calculate_in_process(expr)]
        except ActionError as exc:
            out = ["error", str(exc)]
        except MemoryError:
            out = ["error", f"CalculateExpr: {expr.strip()!r} needs more than {memory_mb} MB of memory."]
        except Exception as exc:  # noqa: BLE001 - reported to the caller, the worker keeps serving
            out = ["error", f"CalculateExpr: cannot evaluate {expr.strip()!r}: {type(exc).__name__}: {exc}."]
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


class _Worker:
    """One evaluation worker process (``python -m neusym.query.calc --worker``), started on first use and
    replaced after a timeout or a crash. Used by one caller at a time (:class:`_Sandbox` hands it out)."""

    def __init__(self) -> None:
        self._proc: Any = None

    def _start(self) -> None:
        import subprocess
        import sys

        self._proc = subprocess.Popen(
            [sys.executable, "-m", "neusym.query.calc", "--worker", str(MAX_MEMORY_MB)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
        )

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(5)
            for stream in (self._proc.stdin, self._proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        self._proc = None

    def run(self, expr: str, timeout_s: float) -> Any:
        import json
        import select

        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            self._start()
        try:
            self._proc.stdin.write(json.dumps(expr) + "\n")
            self._proc.stdin.flush()
        except OSError:
            self._stop()
            raise ActionError("CalculateExpr: the evaluation worker stopped; try again.") from None
        ready, _, _ = select.select([self._proc.stdout], [], [], max(0.0, timeout_s))
        if not ready:
            self._stop()
            raise ActionError(f"CalculateExpr: {expr.strip()[:200]!r} did not finish within {timeout_s:g} s "
                              "(time budget); simplify the expression.")
        line = self._proc.stdout.readline()
        if not line:
            self._stop()
            raise ActionError(f"CalculateExpr: {expr.strip()[:200]!r} exceeded the {MAX_MEMORY_MB} MB memory "
                              "budget.")
        status, value = json.loads(line)
        if status == "error":
            raise ActionError(value)
        return value


class _Sandbox:
    """:data:`WORKERS` evaluation worker processes per interpreter. A call waits for a free worker and
    evaluates within one deadline (``timeout_s`` from the moment it is made: waiting counts), so
    concurrent callers get at most ``timeout_s`` each and never queue behind each other unboundedly."""

    def __init__(self, workers: int) -> None:
        import queue

        self._free: queue.Queue = queue.Queue()
        for _ in range(workers):
            self._free.put(_Worker())

    def run(self, expr: str, timeout_s: float) -> Any:
        import queue
        import time

        deadline = time.monotonic() + timeout_s
        try:
            worker = self._free.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            raise ActionError(f"CalculateExpr: every evaluation worker was busy for {timeout_s:g} s (time budget); "
                              "try again.") from None
        try:
            return worker.run(expr, deadline - time.monotonic())
        finally:
            self._free.put(worker)


WORKERS = 2
"""Evaluation worker processes per interpreter (expressions evaluated at once)."""
_SANDBOX = _Sandbox(WORKERS)


__all__ = ["FUNCTIONS", "MAX_EXPR_CHARS", "MAX_INT_DIGITS", "MAX_RESULT_ELEMENTS", "NAMES", "TIMEOUT_S",
           "calculate", "calculate_in_process"]


if __name__ == "__main__":  # the evaluation worker of _Sandbox
    import sys as _sys

    if len(_sys.argv) == 3 and _sys.argv[1] == "--worker":
        _worker_loop(int(_sys.argv[2]))
