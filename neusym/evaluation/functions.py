"""The AirQA-Real evaluation functions (paper Table 11), in one registry.

Every AirQA-Real item carries an ``evaluator`` ``{"eval_func": <name>, "eval_kwargs": {...}}``;
:func:`evaluate` looks the name up in :data:`EVAL_FUNCTIONS`, checks the kwargs and scores one
prediction, returning an :class:`EvalOutcome` (``score`` in [0, 1], ``error`` for a problem with the
evaluator or judge rather than the answer, ``detail`` explaining a score). It never raises for a bad
item: an unknown function name, a misspelled-beyond-repair or ill-typed kwarg, a missing judge or
an unparseable judge verdict all become an error outcome (score 0) for that item only.

Objective functions (no LLM):

=========================================== =======================================================
``eval_bool_exact_match``                   ``gold``
``eval_int_exact_match``                    ``gold``, ``tolerance`` (``ndigits`` accepted, no effect)
``eval_float_exact_match``                  ``gold``, ``ndigits``, ``tolerance``
``eval_string_exact_match``                 ``gold``, ``lowercase``/``ignore_case``, ``ignore_blank`` (``threshold``, ``fuzz_method`` accepted, ignored)
``eval_string_fuzzy_match``                 ``gold``, ``fuzz_method``, ``threshold``, ``lowercase``/``ignore_case``, ``ignore_blank``
``eval_structured_object_exact_match``      ``gold``, ``ignore_order``, ``lowercase``/``ignore_case``, ``ignore_blank``, ``ndigits``, ``tolerance``, ``fuzz_method``, ``threshold``
``eval_element_included``                   ``gold``, ``element_type``, + the element-matching options
``eval_element_list_included``              ``gold``, ``element_type``, + the element-matching options
``eval_element_list_overlap``               ``gold``, ``count``, ``element_type``, + the element-matching options
``eval_paper_relevance_with_reference_answer`` ``reference_answer``, ``fuzz_method``, ``threshold`` (``question``, ``lowercase`` accepted, not needed)
=========================================== =======================================================

(element-matching options: ``lowercase``/``ignore_case``, ``ignore_blank``, ``ndigits``,
``tolerance``, ``fuzz_method``, ``threshold``, ``ignore_order``.)

Thresholds follow the reference implementation: ``threshold`` > 0 compares strings with
``fuzz_method`` (default ``ratio``) at that score (0-100; a fraction in (0, 1] is scaled by 100);
``threshold`` <= 0 (published items write ``-1``) or absent means exact comparison —
``eval_string_fuzzy_match`` alone defaults to 95. Every objective function also accepts
``question`` (not needed to compare answers).

Subjective functions (LLM judge, see :mod:`neusym.evaluation.judge`): ``eval_reference_answer_with_llm``
(``reference_answer``, ``question``), ``eval_scoring_points_with_llm`` (``scoring_points``,
``question``), ``eval_partial_scoring_points_with_llm`` (``scoring_points``, ``count``,
``question``), ``eval_complex_math_formula_with_llm`` (``formulas``, ``question``). They accept the
reference implementation's ``llm_model`` and ``temperature`` (and ``ignore_order`` on the
scoring-point functions) without using them: the judge is configured by the caller.

Logical combinators: ``eval_conjunction`` / ``eval_disjunction`` (``eval_func_list``,
``eval_kwargs_list``, ``elementwise``), ``eval_negation`` (``eval_func`` + ``eval_kwargs``, or
one-element ``eval_func_list`` + ``eval_kwargs_list``).

Known misspellings in published data (:data:`KWARG_ALIASES`, e.g. ``nidigits``, ``fomulas``) are
renamed with an :class:`EvalKwargWarning`. Kwargs a function accepts but does not use are listed in
:attr:`EvalOutcome.notes` (reported once per run by ``neusym eval score``); any other kwarg is
meaningless for that function and an error for the item.
"""

from __future__ import annotations

import contextvars
import dataclasses
import difflib
import functools
import inspect
import json
import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from neusym.evaluation.judge import JudgeError, as_judge
from neusym.values import (
    as_structure,
    clean_text,
    coerce_bool,
    coerce_int,
    coerce_number,
    coerce_str,
    normalize_string,
    normalize_title,
    parse_literal,
    prediction_text,
    round_half_up,
)
from neusym.errors import NeusymError

logger = logging.getLogger(__name__)


# -- outcome and errors ----------------------------------------------------------------------


@dataclass(frozen=True)
class EvalOutcome:
    """The result of scoring one prediction.

    ``score``: 0..1 (1 = correct; fractional only for ``eval_partial_scoring_points_with_llm``
    without ``count``). ``error``: set when the *evaluation* failed (bad evaluator spec, unknown
    function, no judge, unparseable verdict) — the score is then 0 and says nothing about the
    answer. ``detail``: a short human-readable reason for the score. ``notes``: kwargs the item
    carries that were accepted but do not affect the score (e.g. ``question`` on a title match).
    """

    score: float
    error: str | None = None
    detail: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """True when the prediction is fully correct (score 1, no error)."""
        return self.error is None and self.score >= 1.0 - 1e-9

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"score": self.score, "error": self.error, "detail": self.detail, "notes": list(self.notes)}


def _ok(passed: bool, detail: str | None = None) -> EvalOutcome:
    return EvalOutcome(1.0 if passed else 0.0, None, detail)


class EvalSpecError(NeusymError):
    """An evaluator spec problem: unknown function, unknown/missing/ill-typed kwarg."""


class EvalKwargWarning(UserWarning):
    """A known misspelled kwarg (e.g. ``nidigits``) was renamed to its canonical name."""


# -- kwarg names and validation --------------------------------------------------------------

#: Misspellings seen in (or plausible for) published evaluator kwargs → canonical name.
KWARG_ALIASES: dict[str, str] = {
    "nidigits": "ndigits",
    "ndigit": "ndigits",
    "n_digits": "ndigits",
    "fomulas": "formulas",
    "formula": "formulas",
    "fomula": "formulas",
    "ignorecase": "ignore_case",
    "lower_case": "lowercase",
    "ignore_blanks": "ignore_blank",
    "ignoreblank": "ignore_blank",
    "ignore_orders": "ignore_order",
    "ignoreorder": "ignore_order",
    "tolerence": "tolerance",
    "tollerance": "tolerance",
    "threshhold": "threshold",
    "treshold": "threshold",
    "fuzzy_method": "fuzz_method",
    "refernce_answer": "reference_answer",
    "reference_anwser": "reference_answer",
    "scoring_point": "scoring_points",
    "eval_funcs": "eval_func_list",
    "eval_kwargs_lists": "eval_kwargs_list",
}

#: rapidfuzz.fuzz scorers by the names accepted in ``fuzz_method`` (case-insensitive).
FUZZ_METHODS = (
    "ratio",
    "partial_ratio",
    "token_sort_ratio",
    "token_set_ratio",
    "token_ratio",
    "partial_token_sort_ratio",
    "partial_token_set_ratio",
    "partial_token_ratio",
    "WRatio",
    "QRatio",
)
_FUZZ_BY_LOWER = {name.lower(): name for name in FUZZ_METHODS}

#: ``element_type`` values and the comparison they select.
ELEMENT_TYPES = {
    "str": "str", "string": "str", "text": "str",
    "int": "int", "integer": "int",
    "float": "float", "number": "float", "num": "float",
    "bool": "bool", "boolean": "bool",
    "any": "any", "object": "any", "list": "any", "dict": "any", "structured": "any",
}

_warned_aliases: set[tuple[str, str]] = set()


def _check_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise EvalSpecError(f"{name} must be true or false, got {value!r}")


def _check_number(name: str, value: Any, *, minimum: float | None = None, maximum: float | None = None) -> float:
    """``value`` as a finite number within the bounds; :class:`EvalSpecError` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        number = coerce_number(value, extract=False) if isinstance(value, str) else None
        if number is None:
            raise EvalSpecError(f"{name} must be a number, got {value!r}")
        value = number
    if not math.isfinite(value) or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        if minimum is not None and maximum is not None:
            bounds = f" in [{minimum}, {maximum}]"
        elif minimum is not None:
            bounds = f" >= {minimum}"
        else:
            bounds = f" <= {maximum}" if maximum is not None else ""
        raise EvalSpecError(f"{name} must be a finite number{bounds}, got {value!r}")
    return value


def _check_int(name: str, value: Any, *, minimum: int) -> int:
    number = _check_number(name, value, minimum=minimum)
    if float(number) != int(number):
        raise EvalSpecError(f"{name} must be an integer, got {value!r}")
    return int(number)


def _check_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise EvalSpecError(f"{name} must be a string, got {type(value).__name__}")
    return value


def _check_str_list(name: str, value: Any, *, allow_single: bool = True) -> list[str]:
    if isinstance(value, str) and allow_single:
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise EvalSpecError(f"{name} must be a non-empty list of strings, got {value!r:.120}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise EvalSpecError(f"{name} must contain non-empty strings, got {item!r:.120}")
    return list(value)


def _check_threshold(name: str, value: Any) -> float:
    """A fuzzy-match threshold on rapidfuzz's 0-100 scale. As in the reference implementation,
    a value <= 0 (published items use ``-1``) means *exact* comparison and is returned as ``0``;
    a value in (0, 1] is read as a fraction (``0.9`` = 90)."""
    number = _check_number(name, value, maximum=100)
    if number <= 0:
        return 0.0
    return number * 100.0 if number <= 1 else float(number)


def _check_fuzz_method(name: str, value: Any) -> str:
    method = _FUZZ_BY_LOWER.get(str(value).strip().lower()) if isinstance(value, str) else None
    if method is None:
        raise EvalSpecError(f"{name} must be one of {', '.join(FUZZ_METHODS)}; got {value!r}")
    return method


def _check_element_type(name: str, value: Any) -> str:
    kind = ELEMENT_TYPES.get(value.strip().lower()) if isinstance(value, str) else None
    if kind is None:
        raise EvalSpecError(f"{name} must be one of {', '.join(sorted(set(ELEMENT_TYPES)))}; got {value!r}")
    return kind


def _check_kwargs_dict(name: str, value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise EvalSpecError(f"{name} must be a dict, got {type(value).__name__}")
    return value


def _check_kwargs_list(name: str, value: Any) -> list[dict]:
    if not isinstance(value, (list, tuple)):
        raise EvalSpecError(f"{name} must be a list of dicts, got {type(value).__name__}")
    return [_check_kwargs_dict(f"{name}[{i}]", item) for i, item in enumerate(value)]


#: Validators (and normalisers) for kwargs by name; ``None`` values mean "use the default".
_VALIDATORS: dict[str, Callable[[str, Any], Any]] = {
    "ignore_order": _check_bool,
    "lowercase": _check_bool,
    "ignore_case": _check_bool,
    "ignore_blank": _check_bool,
    "elementwise": _check_bool,
    "ndigits": lambda n, v: _check_int(n, v, minimum=0),
    "tolerance": lambda n, v: _check_number(n, v, minimum=0),
    "count": lambda n, v: _check_int(n, v, minimum=1),
    "threshold": _check_threshold,
    "fuzz_method": _check_fuzz_method,
    "element_type": _check_element_type,
    "question": lambda n, v: v if isinstance(v, str) else str(v),
    "scoring_points": _check_str_list,
    "formulas": _check_str_list,
    "eval_func": _check_str,
    "eval_kwargs": _check_kwargs_dict,
    "eval_func_list": lambda n, v: _check_str_list(n, v, allow_single=False),
    "eval_kwargs_list": _check_kwargs_list,
}

_INJECTED = ("judge",)

#: Kwargs that published items carry where they do not change the score. Each function accepts the
#: ones named in its ``unused=`` registration (with the reason); they are dropped before the call
#: and reported once per run as a note (:data:`EvalOutcome.notes`), never as an error.
UNUSED_REASONS: dict[str, str] = {
    "question": "the question is not needed to compare answers (kept in the report)",
    "llm_model": "the judge model is chosen by the caller (--judge-llm / --judge-model), not per item",
    "temperature": "the judge always runs at temperature 0",
    "ndigits": "integers are compared exactly, rounding has no effect",
    "threshold": "an exact match ignores fuzzy thresholds (the reference implementation does too)",
    "fuzz_method": "only used with a threshold > 0",
    "ignore_order": "scoring points are judged regardless of order",
    "lowercase": "titles are always compared case-insensitively",
    "ignore_case": "titles are always compared case-insensitively",
}

_NOTES: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("neusym_eval_notes", default=None)


def _note(text: str) -> None:
    notes = _NOTES.get()
    if notes is not None and text not in notes:
        notes.append(text)


def _prepare_kwargs(
    func_name: str, accepted: dict[str, inspect.Parameter], kwargs: dict, unused: frozenset[str] = frozenset()
) -> dict:
    """Rename known misspellings (warning), drop accepted-but-unused kwargs (``unused``, noted),
    reject unknown kwargs, check required ones and types."""
    prepared: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in _INJECTED:
            prepared[key] = value
            continue
        name = key
        if key not in accepted and key in KWARG_ALIASES:
            name = KWARG_ALIASES[key]
            if (func_name, key) not in _warned_aliases:
                _warned_aliases.add((func_name, key))
                logger.warning("%s: kwarg %r renamed to %r", func_name, key, name)
            warnings.warn(f"{func_name}: misspelled kwarg {key!r} read as {name!r}", EvalKwargWarning, stacklevel=3)
            if name in kwargs and kwargs[name] != value:
                raise EvalSpecError(f"both {key!r} and {name!r} given with different values")
        if name not in accepted and name in unused:
            if value is not None and name in _VALIDATORS:
                _VALIDATORS[name](name, value)  # still reject an ill-typed value
            _note(f"{func_name}: kwarg {name!r} accepted but not used: {UNUSED_REASONS[name]}")
            continue
        if name not in accepted:
            known = sorted(set(accepted) | set(unused))
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise EvalSpecError(
                f"unknown kwarg {key!r}{hint}; {func_name} accepts {', '.join(known) or 'none'}"
            )
        if value is not None and name in _VALIDATORS:
            value = _VALIDATORS[name](name, value)
        prepared[name] = value
    missing = [
        name
        for name, param in accepted.items()
        if param.default is inspect.Parameter.empty
        and (name not in prepared or (prepared[name] is None and name != "gold"))  # a null gold is a value
    ]
    if missing:
        raise EvalSpecError(f"missing required kwarg(s) {', '.join(missing)}")
    return prepared


#: name → evaluation function. Each takes ``(pred, **eval_kwargs)`` (LLM and logical ones also a
#: ``judge=``) and returns an :class:`EvalOutcome`; spec problems raise :class:`EvalSpecError`.
EVAL_FUNCTIONS: dict[str, Callable[..., EvalOutcome]] = {}

#: Functions that need an LLM judge.
LLM_FUNCTIONS: set[str] = set()

#: Table 11 names this project does not implement, with the reason given in the error.
UNSUPPORTED_FUNCTIONS = {
    "eval_m3sciqa": "it wraps the M3SciQA benchmark's own LLM judge, which is not bundled",
    "eval_scidqa": "it wraps the SciDQA benchmark's own LLM judge, which is not bundled",
}


def _register(*, llm: bool = False, unused: tuple[str, ...] = ("question",)) -> Callable:
    """Register an evaluation function. Its keyword-only parameters are the kwargs it uses;
    ``unused`` names kwargs it accepts without using them (reasons in :data:`UNUSED_REASONS`)."""
    for name in unused:
        if name not in UNUSED_REASONS:
            raise ValueError(f"no reason recorded for unused kwarg {name!r}")

    def decorate(fn: Callable[..., EvalOutcome]) -> Callable[..., EvalOutcome]:
        params = inspect.signature(fn).parameters
        accepted = {
            name: p for name, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in _INJECTED
        }
        ignored = frozenset(unused) - set(accepted)

        @functools.wraps(fn)
        def wrapper(pred: Any, **kwargs: Any) -> EvalOutcome:
            return fn(pred, **_prepare_kwargs(fn.__name__, accepted, kwargs, ignored))

        wrapper.accepted_kwargs = frozenset(accepted)  # type: ignore[attr-defined]
        wrapper.unused_kwargs = ignored  # type: ignore[attr-defined]
        wrapper.accepted_params = accepted  # type: ignore[attr-defined]
        wrapper.takes_judge = "judge" in params  # type: ignore[attr-defined]
        EVAL_FUNCTIONS[fn.__name__] = wrapper
        if llm:
            LLM_FUNCTIONS.add(fn.__name__)
        return wrapper

    return decorate


# -- value matching --------------------------------------------------------------------------


@dataclass(frozen=True)
class MatchOptions:
    """How two values are compared (shared by the structured and set functions).

    ``lowercase``: strings case-folded. ``ignore_blank``: whitespace removed from strings.
    ``ndigits``: numbers rounded half-up to this many decimals before comparing. ``tolerance``:
    numbers equal when ``|pred - gold| <= tolerance`` (absolute; after rounding if both given).
    ``threshold``: > 0 makes strings equal when the rapidfuzz ``fuzz_method`` score (0-100) is
    >= threshold; 0 (the default; published items write ``-1``) means exact comparison.
    ``ignore_order``: lists compared as multisets (at every nesting level).
    """

    lowercase: bool = False
    ignore_blank: bool = False
    ndigits: int | None = None
    tolerance: float | None = None
    fuzz_method: str = "ratio"
    threshold: float = 0.0
    ignore_order: bool = False


def _fuzz_score(method: str, a: str, b: str) -> float:
    from rapidfuzz import fuzz

    return float(getattr(fuzz, method)(a, b))


def numbers_equal(pred: float, gold: float, opts: MatchOptions) -> bool:
    """Numeric equality under ``opts.ndigits`` / ``opts.tolerance`` (exact up to float noise when
    neither is set; exact for two ints)."""
    if isinstance(pred, int) and isinstance(gold, int) and opts.ndigits is None and not opts.tolerance:
        return pred == gold
    p, g = float(pred), float(gold)
    if math.isnan(p) or math.isnan(g):
        return False
    if opts.ndigits is not None:
        p, g = round_half_up(p, opts.ndigits), round_half_up(g, opts.ndigits)
    if opts.tolerance:
        return abs(p - g) <= opts.tolerance * (1 + 1e-9) + 1e-12
    return math.isclose(p, g, rel_tol=1e-9, abs_tol=1e-12)


def _fuzzy_normalized(text: str, method: str, lowercase: bool, ignore_blank: bool) -> str:
    # token-based scorers need the word boundaries: ignore_blank only collapses whitespace for them
    keep_spaces = ignore_blank and "token" in method.lower()
    return normalize_string(text, lowercase=lowercase, ignore_blank=ignore_blank and not keep_spaces)


def strings_equal(pred: str, gold: str, opts: MatchOptions) -> bool:
    """String equality after :func:`~neusym.values.normalize_string` of both sides,
    or fuzzy (``opts.fuzz_method`` score >= ``opts.threshold``) when ``opts.threshold > 0``."""
    p = normalize_string(pred, lowercase=opts.lowercase, ignore_blank=opts.ignore_blank)
    g = normalize_string(gold, lowercase=opts.lowercase, ignore_blank=opts.ignore_blank)
    if p == g:
        return True
    if opts.threshold > 0:
        fp = _fuzzy_normalized(pred, opts.fuzz_method, opts.lowercase, opts.ignore_blank)
        fg = _fuzzy_normalized(gold, opts.fuzz_method, opts.lowercase, opts.ignore_blank)
        return _fuzz_score(opts.fuzz_method, fp, fg) >= opts.threshold
    return False


def _perfect_matching(preds: list, golds: list, opts: MatchOptions) -> bool:
    """Whether every pred can be paired with a distinct equal gold (bipartite matching, so it is
    right even when equality is not transitive, e.g. with a tolerance)."""
    n = len(golds)
    adjacency = [[j for j in range(n) if values_equal(p, golds[j], opts)] for p in preds]
    owner: list[int | None] = [None] * n

    def augment(i: int, seen: set[int]) -> bool:
        for j in adjacency[i]:
            if j in seen:
                continue
            seen.add(j)
            if owner[j] is None or augment(owner[j], seen):  # type: ignore[arg-type]
                owner[j] = i
                return True
        return False

    return all(augment(i, set()) for i in range(len(preds)))


def _normalized_key(key: Any, opts: MatchOptions) -> Any:
    if isinstance(key, str):
        return normalize_string(key, lowercase=opts.lowercase, ignore_blank=opts.ignore_blank)
    return key


def values_equal(pred: Any, gold: Any, opts: MatchOptions = MatchOptions()) -> bool:
    """Recursive equality of a prediction with a gold value.

    Lists: same length, element-wise (or as multisets with ``ignore_order``); a non-list
    prediction equals a one-element gold list holding an equal value, and a one-element
    prediction list equals a scalar gold. Dicts: same (normalised) keys, equal values. Booleans:
    ``True``/``"true"``/``"yes"``. Numbers: :func:`numbers_equal` (numeric strings accepted).
    Strings: :func:`strings_equal`; a number/boolean prediction against a string gold compares
    numerically / as a boolean when the gold reads as one, else as text.
    """
    if isinstance(gold, tuple):
        gold = list(gold)
    if isinstance(gold, list):
        p = as_structure(pred)
        if not isinstance(p, list):
            return len(gold) == 1 and values_equal(p, gold[0], opts)
        if len(p) != len(gold):
            if len(gold) == 1 and isinstance(gold[0], (list, tuple)):
                return values_equal(p, gold[0], opts)
            return False
        if opts.ignore_order:
            return _perfect_matching(p, gold, opts)
        return all(values_equal(a, b, opts) for a, b in zip(p, gold))
    if isinstance(gold, dict):
        p = as_structure(pred)
        if isinstance(p, list) and len(p) == 1:
            p = p[0]
        if not isinstance(p, dict):
            return False
        p_items = {_normalized_key(k, opts): v for k, v in p.items()}
        g_items = {_normalized_key(k, opts): v for k, v in gold.items()}
        if set(p_items) != set(g_items):
            return False
        return all(values_equal(p_items[k], g_items[k], opts) for k in g_items)
    # scalar gold
    if isinstance(pred, (list, tuple)):
        return len(pred) == 1 and values_equal(pred[0], gold, opts)
    if gold is None:
        return pred is None or (isinstance(pred, str) and normalize_string(pred, lowercase=True) in ("none", "null"))
    if isinstance(gold, bool):
        value = coerce_bool(pred)
        return value is not None and value == gold
    if isinstance(gold, (int, float)):
        number = coerce_number(pred, extract=False)
        return number is not None and numbers_equal(number, gold, opts)
    if isinstance(gold, str):
        if pred is None:
            pred = "None"
        if isinstance(pred, bool):
            gold_bool = coerce_bool(gold)
            if gold_bool is not None:
                return pred == gold_bool
            pred = str(pred)
        elif isinstance(pred, (int, float)):
            gold_number = coerce_number(gold, extract=False)
            if gold_number is not None:
                return numbers_equal(pred, gold_number, opts)
            pred = str(pred)
        elif isinstance(pred, str):
            parsed = parse_literal(pred)
            if isinstance(parsed, str):
                pred = parsed
        else:
            return False
        return strings_equal(pred, gold, opts)
    return pred == gold


def _string_options(lowercase: bool | None, ignore_case: bool | None, ignore_blank: bool | None, default_lower: bool = False) -> dict:
    if lowercase is None and ignore_case is None:
        lower = default_lower
    else:
        lower = bool(lowercase) or bool(ignore_case)
    return {"lowercase": lower, "ignore_blank": bool(ignore_blank)}


def _gold_string(gold: Any) -> str:
    value = gold
    while isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if isinstance(value, (list, tuple)):
        raise EvalSpecError(
            f"gold must be one string, got a list of {len(value)}; use eval_element_included for alternatives"
        )
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return str(value)
    if not isinstance(value, str):
        raise EvalSpecError(f"gold must be a string, got {type(value).__name__}")
    return value


def _is_blank(pred: Any) -> bool:
    return pred is None or (isinstance(pred, str) and not clean_text(pred))


# -- objective: match ------------------------------------------------------------------------


@_register()
def eval_bool_exact_match(pred: Any, *, gold: Any) -> EvalOutcome:
    """Exact boolean match.

    ``pred``: a bool or text (``True``/``true``/``yes``/``No.``/``"Yes, because ..."``; a
    one-element list is unwrapped). ``gold``: a bool (or ``"true"``/``"false"``). Returns score 1
    when both read as the same boolean, else 0. Raises :class:`EvalSpecError` when ``gold`` is not
    a boolean.
    """
    gold_value = coerce_bool(gold)
    if gold_value is None:
        raise EvalSpecError(f"gold must be a boolean, got {gold!r:.80}")
    value = coerce_bool(pred)
    if value is None:
        return _ok(False, "prediction is not a boolean")
    return _ok(value == gold_value)


@_register(unused=("question", "ndigits"))
def eval_int_exact_match(pred: Any, *, gold: Any, tolerance: float | None = None) -> EvalOutcome:
    """Exact integer match.

    ``pred``: an int or text (``"42"``, ``"42.0"``, ``"1,024"``, ``"The answer is 42."``, a text
    with exactly one number). ``gold``: an integer. ``tolerance``: optional absolute tolerance
    (``|pred - gold| <= tolerance``). A non-integral prediction (``42.5``) scores 0. Raises
    :class:`EvalSpecError` when ``gold`` is not an integer.
    """
    gold_value = coerce_int(gold)
    if gold_value is None:
        raise EvalSpecError(f"gold must be an integer, got {gold!r:.80}")
    value = coerce_int(pred)
    if value is None:
        return _ok(False, "prediction is not an integer")
    if tolerance:
        return _ok(abs(value - gold_value) <= tolerance)
    return _ok(value == gold_value)


@_register()
def eval_float_exact_match(
    pred: Any, *, gold: Any, ndigits: int | None = None, tolerance: float | None = None
) -> EvalOutcome:
    """Float match with variable precision or tolerance.

    ``pred``: a number or text (``"0.85"``, ``"85.3%"`` → 85.3, ``"about 12.5"``). ``gold``: a
    number. ``ndigits``: round both half-up to this many decimals first (``12.34`` matches gold
    ``12.3`` with ``ndigits=1``). ``tolerance``: absolute tolerance, applied after rounding when both
    are given. Neither: equal up to float noise (relative 1e-9). Raises :class:`EvalSpecError` when
    ``gold`` is not a number.
    """
    gold_value = coerce_number(gold, extract=False)
    if gold_value is None:
        raise EvalSpecError(f"gold must be a number, got {gold!r:.80}")
    value = coerce_number(pred)
    if value is None:
        return _ok(False, "prediction is not a number")
    return _ok(numbers_equal(value, gold_value, MatchOptions(ndigits=ndigits, tolerance=tolerance)))


@_register(unused=("question", "threshold", "fuzz_method"))
def eval_string_exact_match(
    pred: Any,
    *,
    gold: Any,
    lowercase: bool | None = None,
    ignore_case: bool | None = None,
    ignore_blank: bool | None = None,
) -> EvalOutcome:
    """Exact string match after normalisation.

    ``pred``: text (a quoted literal ``"'BERT'"`` or one-element list ``"['BERT']"`` is unwrapped;
    numbers/booleans are compared as text). ``gold``: a string or a one-element list of one.
    Always normalised on both sides: Unicode NFKC, typographic quotes/dashes, surrounding quotes and
    whitespace, one trailing period, whitespace runs. ``lowercase`` / ``ignore_case`` (synonyms):
    compare case-folded. ``ignore_blank``: drop all whitespace. ``threshold`` / ``fuzz_method``
    are accepted and ignored, as by the reference implementation (noted once per run; use
    ``eval_string_fuzzy_match`` for fuzzy matching). Raises :class:`EvalSpecError` for a
    gold that is not one string (several alternatives belong in ``eval_element_included``).
    """
    gold_text = _gold_string(gold)
    value = coerce_str(pred)
    if value is None:
        return _ok(False, "prediction is not a single string")
    return _ok(strings_equal(value, gold_text, MatchOptions(**_string_options(lowercase, ignore_case, ignore_blank))))


@_register()
def eval_string_fuzzy_match(
    pred: Any,
    *,
    gold: Any,
    fuzz_method: str = "ratio",
    threshold: float = 95.0,
    lowercase: bool | None = None,
    ignore_case: bool | None = None,
    ignore_blank: bool | None = None,
) -> EvalOutcome:
    """Fuzzy string match with rapidfuzz.

    ``pred``/``gold``: as for :func:`eval_string_exact_match`. ``fuzz_method``: a
    ``rapidfuzz.fuzz`` scorer — ``ratio`` (default), ``partial_ratio``, ``token_sort_ratio``,
    ``token_set_ratio``, ``WRatio``, ... (case-insensitive). ``threshold``: pass when the score is
    >= threshold on the 0-100 scale (default 95, as in the reference implementation); a value in
    (0, 1] is read as a fraction and multiplied by 100 (so ``0.8`` means 80 and ``1`` means 100);
    a value <= 0 (``-1``) means exact comparison. ``lowercase``/``ignore_case``: compare
    case-folded (default false, as in the reference). ``ignore_blank``: drop all whitespace
    (token-based scorers keep single spaces between words). The detail reports the score.
    """
    gold_text = _gold_string(gold)
    value = coerce_str(pred)
    if value is None:
        return _ok(False, "prediction is not a single string")
    opts = _string_options(lowercase, ignore_case, ignore_blank)
    if threshold <= 0:
        return _ok(strings_equal(value, gold_text, MatchOptions(**opts)), "exact comparison (threshold <= 0)")
    p = _fuzzy_normalized(value, fuzz_method, opts["lowercase"], opts["ignore_blank"])
    g = _fuzzy_normalized(gold_text, fuzz_method, opts["lowercase"], opts["ignore_blank"])
    score = 100.0 if p == g else _fuzz_score(fuzz_method, p, g)
    return _ok(score >= threshold, f"{fuzz_method} = {score:.1f} (threshold {threshold:g})")


@_register()
def eval_structured_object_exact_match(
    pred: Any,
    *,
    gold: Any,
    ignore_order: bool = False,
    lowercase: bool | None = None,
    ignore_case: bool | None = None,
    ignore_blank: bool | None = None,
    ndigits: int | None = None,
    tolerance: float | None = None,
    fuzz_method: str | None = None,
    threshold: float | None = None,
) -> EvalOutcome:
    """Recursive exact match of Python-style lists / dicts (see :func:`values_equal`).

    ``pred``: a typed value or text parsed as a Python/JSON literal (``"['SCG-NLI', 'false']"``);
    a bare value is compared with a one-element gold list. ``gold``: any JSON value.
    ``ignore_order``: lists are compared as multisets, at every nesting level. ``lowercase`` /
    ``ignore_case``, ``ignore_blank``: string normalisation (also of dict keys). ``ndigits`` /
    ``tolerance``: numeric comparison as in :func:`eval_float_exact_match`. ``threshold`` > 0:
    string leaves match when their ``fuzz_method`` score (default ``ratio``) reaches it (numbers
    still by ``ndigits``/``tolerance``); absent or <= 0 (``-1``): exact. Mixed scalar types are
    reconciled: ``False`` matches ``"false"``, ``3`` matches ``"3"``.
    """
    opts = MatchOptions(
        **_string_options(lowercase, ignore_case, ignore_blank), ndigits=ndigits, tolerance=tolerance,
        ignore_order=ignore_order, **_fuzzy_options("eval_structured_object_exact_match", fuzz_method, threshold),
    )
    value = as_structure(pred)
    return _ok(values_equal(value, gold, opts))


# -- objective: sets -------------------------------------------------------------------------


def _fuzzy_options(func_name: str, fuzz_method: str | None, threshold: float | None) -> dict:
    """``fuzz_method``/``threshold`` for :class:`MatchOptions`: fuzzy only with a threshold > 0
    (the reference implementation's rule); a ``fuzz_method`` without one is noted as unused."""
    if threshold is None or threshold <= 0:
        if fuzz_method is not None:
            _note(f"{func_name}: kwarg 'fuzz_method' accepted but not used: {UNUSED_REASONS['fuzz_method']}")
        return {"threshold": 0.0}
    return {"threshold": float(threshold), "fuzz_method": fuzz_method or "ratio"}


def _element_options(
    func_name: str, lowercase: bool | None, ignore_case: bool | None, ignore_blank: bool | None,
    ndigits: int | None, tolerance: float | None, fuzz_method: str | None, threshold: float | None,
    ignore_order: bool | None,
) -> MatchOptions:
    return MatchOptions(
        **_string_options(lowercase, ignore_case, ignore_blank), ndigits=ndigits, tolerance=tolerance,
        ignore_order=bool(ignore_order), **_fuzzy_options(func_name, fuzz_method, threshold),
    )


def _coerce_element(value: Any, kind: str | None) -> Any:
    """``value`` as an element of type ``kind`` (``None`` when it is not one); ``any``/None: as is."""
    if kind in (None, "any"):
        return value
    if kind == "str":
        return coerce_str(value)
    if kind == "int":
        return coerce_int(value)
    if kind == "float":
        return coerce_number(value)
    if kind == "bool":
        return coerce_bool(value)
    return value


def _gold_elements(gold: Any, kind: str | None) -> list:
    elements = list(gold) if isinstance(gold, (list, tuple)) else [gold]
    if not elements:
        raise EvalSpecError("gold must be a non-empty list")
    if kind in (None, "any"):
        return elements
    converted = [_coerce_element(e, kind) for e in elements]
    bad = [e for e, c in zip(elements, converted) if c is None]
    if bad:
        raise EvalSpecError(f"gold element {bad[0]!r:.60} is not of element_type {kind}")
    return converted


def _element_matches(element: Any, gold_element: Any, kind: str | None, opts: MatchOptions) -> bool:
    value = _coerce_element(element, kind)
    if value is None:
        return False
    if kind == "str":
        return strings_equal(value, gold_element, opts)
    return values_equal(value, gold_element, opts)


def _pred_list(pred: Any) -> list:
    value = as_structure(pred)
    if isinstance(value, list):
        return value
    if value is None or (isinstance(value, str) and not value.strip()):
        return []
    return [value]


@_register()
def eval_element_included(
    pred: Any,
    *,
    gold: Any,
    element_type: str | None = None,
    lowercase: bool | None = None,
    ignore_case: bool | None = None,
    ignore_blank: bool | None = None,
    ndigits: int | None = None,
    tolerance: float | None = None,
    fuzz_method: str | None = None,
    threshold: float | None = None,
    ignore_order: bool | None = None,
) -> EvalOutcome:
    """Whether the single predicted element is one of the gold list (e.g. acceptable alternatives).

    ``pred``: one value (a one-element list is unwrapped; a longer list scores 0 unless the gold
    elements are themselves lists). ``gold``: the list of acceptable values (a scalar is a
    one-element list). ``element_type``: ``str``,
    ``int``, ``float``, ``bool`` or ``any`` (default: compare by the gold's own types, see
    :func:`values_equal`). ``lowercase``/``ignore_case``, ``ignore_blank``: string normalisation.
    ``ndigits``/``tolerance``: numeric comparison. ``threshold`` > 0 (0-100 scale or a fraction):
    strings compared fuzzily with ``fuzz_method`` (default ``ratio``); absent or <= 0 (published
    items write ``-1``): exact. ``ignore_order``: list-valued elements compared as multisets.
    """
    golds = _gold_elements(gold, element_type)
    opts = _element_options("eval_element_included", lowercase, ignore_case, ignore_blank, ndigits, tolerance,
                            fuzz_method, threshold, ignore_order)
    value = as_structure(pred)
    if value is None or value == [] or (isinstance(value, str) and not value.strip()):
        return _ok(False, "empty prediction")
    # a one-element list is unwrapped by the matching; a longer list can only equal a list element
    passed = any(_element_matches(value, g, element_type, opts) for g in golds)
    several = isinstance(value, list) and len(value) > 1 and not passed
    return _ok(passed, f"expected one element, got a list of {len(value)}" if several else None)


@_register()
def eval_element_list_included(
    pred: Any,
    *,
    gold: Any,
    element_type: str | None = None,
    lowercase: bool | None = None,
    ignore_case: bool | None = None,
    ignore_blank: bool | None = None,
    ndigits: int | None = None,
    tolerance: float | None = None,
    fuzz_method: str | None = None,
    threshold: float | None = None,
    ignore_order: bool | None = None,
) -> EvalOutcome:
    """Whether every element of the predicted list is in the gold list (a subset check).

    ``pred``: a list (a bare value is a one-element list). An **empty** prediction scores 0 —
    the empty set is trivially a subset but answers nothing. Kwargs as for
    :func:`eval_element_included`.
    """
    golds = _gold_elements(gold, element_type)
    opts = _element_options("eval_element_list_included", lowercase, ignore_case, ignore_blank, ndigits, tolerance,
                            fuzz_method, threshold, ignore_order)
    elements = _pred_list(pred)
    if not elements:
        return _ok(False, "empty prediction")
    missing = [e for e in elements if not any(_element_matches(e, g, element_type, opts) for g in golds)]
    if missing:
        return _ok(False, f"{len(missing)} of {len(elements)} predicted elements not in the gold list")
    return _ok(True)


@_register()
def eval_element_list_overlap(
    pred: Any,
    *,
    gold: Any,
    count: int = 1,
    element_type: str | None = None,
    lowercase: bool | None = None,
    ignore_case: bool | None = None,
    ignore_blank: bool | None = None,
    ndigits: int | None = None,
    tolerance: float | None = None,
    fuzz_method: str | None = None,
    threshold: float | None = None,
    ignore_order: bool | None = None,
) -> EvalOutcome:
    """Whether the predicted list overlaps the gold list in at least ``count`` gold elements.

    ``pred``: a list (a bare value is a one-element list; empty scores 0). ``count``: how many
    *distinct* gold elements must be hit (default 1; repeating one element does not count twice;
    must not exceed the gold size). Other kwargs as for :func:`eval_element_included`.
    """
    golds = _gold_elements(gold, element_type)
    if count > len(golds):
        raise EvalSpecError(f"count {count} exceeds the {len(golds)} gold elements")
    opts = _element_options("eval_element_list_overlap", lowercase, ignore_case, ignore_blank, ndigits, tolerance,
                            fuzz_method, threshold, ignore_order)
    elements = _pred_list(pred)
    if not elements:
        return _ok(False, "empty prediction")
    hit = sum(1 for g in golds if any(_element_matches(e, g, element_type, opts) for e in elements))
    return _ok(hit >= count, f"{hit} of {len(golds)} gold elements found (need {count})")


# -- objective: retrieval --------------------------------------------------------------------


def _titles(value: Any) -> list[str]:
    structured = as_structure(value)
    items = structured if isinstance(structured, list) else [structured]
    titles = []
    for item in items:
        if isinstance(item, dict):
            item = item.get("title", "")
        if item is None:
            continue
        normalized = normalize_title(str(item))
        if normalized:
            titles.append(normalized)
    return titles


@_register(unused=("question", "lowercase", "ignore_case"))
def eval_paper_relevance_with_reference_answer(
    pred: Any, *, reference_answer: Any, fuzz_method: str = "ratio", threshold: float = 95.0
) -> EvalOutcome:
    """Whether the retrieved paper(s) are the reference paper(s), by fuzzy title match.

    ``pred``: a paper title, or a list of titles (text of a Python list is parsed; ``{"title":
    ...}`` dicts are accepted). ``reference_answer``: the reference title or list of acceptable
    titles. Titles are normalised (:func:`~neusym.values.normalize_title`: case,
    accents, punctuation, hyphens, a ``Title:`` prefix). Score 1 when the prediction names at
    least one paper and **every** predicted title matches some reference title with
    ``fuzz_method`` (default ``ratio``) >= ``threshold`` (default 95 on 0-100; fractions scaled;
    <= 0 means the normalised titles must be equal) — listing extra wrong papers is not rewarded.
    ``question`` (present on every published item of this kind) is accepted and not needed for
    scoring. Raises :class:`EvalSpecError` for an empty reference.
    """
    references = _titles(reference_answer)
    if not references:
        raise EvalSpecError("reference_answer must be a non-empty title or list of titles")
    predicted = _titles(pred)
    if not predicted:
        return _ok(False, "empty prediction")
    best_scores = []
    for title in predicted:
        if threshold <= 0:
            best_scores.append(100.0 if title in references else 0.0)
            continue
        best_scores.append(max(100.0 if title == ref else _fuzz_score(fuzz_method, title, ref) for ref in references))
    needed = threshold if threshold > 0 else 100.0
    passed = all(score >= needed for score in best_scores)
    return _ok(passed, f"best {fuzz_method} per predicted title: {', '.join(f'{s:.1f}' for s in best_scores)}")


# -- subjective: LLM judge -------------------------------------------------------------------


def _loose(text: str) -> str:
    return normalize_string(text, lowercase=True)


def _judge_failure(exc: Exception) -> EvalOutcome:
    return EvalOutcome(0.0, f"LLM judge failed: {exc}")


@_register(llm=True, unused=("llm_model", "temperature"))
def eval_reference_answer_with_llm(
    pred: Any, *, reference_answer: Any, question: str | None = None, judge: Any = None
) -> EvalOutcome:
    """LLM judgement of a free-form answer against a reference answer.

    ``pred``: the answer (text, or any value — JSON-encoded for the judge). ``reference_answer``:
    the expert answer. ``question``: the question (filled from the item by :func:`evaluate` when
    absent). ``judge``: a :class:`~neusym.evaluation.judge.Judge` or LLM. An empty prediction scores
    0 and a prediction identical to the reference (after normalisation) scores 1 without an LLM
    call. Returns score 1/0 with the judge's reasoning as detail; a missing judge or an
    unparseable verdict gives score 0 with an error.
    """
    reference = reference_answer.strip() if isinstance(reference_answer, str) else prediction_text(reference_answer)
    if not reference:
        raise EvalSpecError("reference_answer must not be empty")
    text = prediction_text(pred)
    if not text:
        return _ok(False, "empty prediction")
    if _loose(text) == _loose(reference):
        return _ok(True, "identical to the reference answer")
    try:
        verdict = as_judge(judge).reference_answer(question=question or "", reference_answer=reference, prediction=text)
    except JudgeError as exc:
        return _judge_failure(exc)
    return _ok(verdict.passed, verdict.reasoning)


def _scoring_point_verdicts(pred: Any, scoring_points: list[str], question: str | None, judge: Any):
    text = prediction_text(pred)
    if not text:
        return None
    return as_judge(judge).scoring_points(question=question or "", scoring_points=scoring_points, prediction=text)


@_register(llm=True, unused=("llm_model", "temperature", "ignore_order"))
def eval_scoring_points_with_llm(
    pred: Any, *, scoring_points: list[str], question: str | None = None, judge: Any = None
) -> EvalOutcome:
    """LLM judgement: does the answer mention **all** scoring points?

    ``scoring_points``: non-empty list of strings (a single string is one point). ``question``:
    as for :func:`eval_reference_answer_with_llm`. One judge call returns a per-point verdict;
    score 1 when every point is mentioned, else 0 (detail lists the missed points). Empty
    prediction: 0 without a call. Missing judge / unparseable verdict: 0 with an error.
    """
    try:
        verdicts = _scoring_point_verdicts(pred, scoring_points, question, judge)
    except JudgeError as exc:
        return _judge_failure(exc)
    if verdicts is None:
        return _ok(False, "empty prediction")
    missed = [i for i, v in enumerate(verdicts, start=1) if not v.passed]
    return _ok(not missed, f"missed scoring points {missed}" if missed else "all scoring points mentioned")


@_register(llm=True, unused=("llm_model", "temperature", "ignore_order"))
def eval_partial_scoring_points_with_llm(
    pred: Any,
    *,
    scoring_points: list[str],
    count: int | None = None,
    question: str | None = None,
    judge: Any = None,
) -> EvalOutcome:
    """LLM judgement: does the answer mention enough of the scoring points?

    ``count``: pass (score 1) when at least ``count`` points are mentioned (must not exceed the
    number of points). Without ``count`` the score is the fraction of points mentioned (partial
    credit in [0, 1]). Other kwargs as for :func:`eval_scoring_points_with_llm`.
    """
    if count is not None and count > len(scoring_points):
        raise EvalSpecError(f"count {count} exceeds the {len(scoring_points)} scoring points")
    try:
        verdicts = _scoring_point_verdicts(pred, scoring_points, question, judge)
    except JudgeError as exc:
        return _judge_failure(exc)
    if verdicts is None:
        return _ok(False, "empty prediction")
    mentioned = sum(1 for v in verdicts if v.passed)
    detail = f"{mentioned} of {len(verdicts)} scoring points mentioned"
    if count is None:
        return EvalOutcome(mentioned / len(verdicts), None, detail)
    return _ok(mentioned >= count, f"{detail} (need {count})")


def _latex_key(formula: str) -> str:
    s = clean_text(formula).strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\[", "\\]"), ("\\(", "\\)")):
        if s.startswith(left) and s.endswith(right) and len(s) > len(left) + len(right):
            s = s[len(left) : -len(right)]
    for token in ("\\left", "\\right", "\\displaystyle", "\\,", "\\;", "\\:", "\\!", "\\quad", "\\qquad", "~"):
        s = s.replace(token, "")
    return "".join(s.split()).rstrip(".,")


@_register(llm=True, unused=("llm_model", "temperature"))
def eval_complex_math_formula_with_llm(
    pred: Any, *, formulas: list[str], question: str | None = None, judge: Any = None
) -> EvalOutcome:
    """LLM judgement of mathematical equivalence of LaTeX formula(s).

    ``formulas``: the reference formula, or a list of them. ``pred``: one formula, or a list of as
    many formulas in the same order (text of a Python list is parsed). Each predicted formula must
    be equivalent to its reference: formulas identical after removing ``$``/``\\[ \\]``
    delimiters, spacing commands, ``\\left``/``\\right`` and whitespace pass without an LLM call;
    the others are judged one pair per call. Score 1 when all pairs are equivalent.
    """
    structured = as_structure(pred)
    if isinstance(structured, list) and (len(formulas) > 1 or len(structured) == 1):
        predicted = [prediction_text(p) for p in structured]
    else:
        predicted = [prediction_text(structured if isinstance(structured, str) else pred)]
    if not any(predicted):
        return _ok(False, "empty prediction")
    if len(predicted) != len(formulas):
        return _ok(False, f"expected {len(formulas)} formula(s), got {len(predicted)}")
    details = []
    for i, (candidate, reference) in enumerate(zip(predicted, formulas), start=1):
        if not candidate:
            return _ok(False, f"formula {i} is empty")
        if _latex_key(candidate) == _latex_key(reference):
            details.append(f"formula {i}: identical")
            continue
        try:
            verdict = as_judge(judge).formula(
                question=question or "", reference_formula=reference, predicted_formula=candidate
            )
        except JudgeError as exc:
            return _judge_failure(exc)
        if not verdict.passed:
            return _ok(False, f"formula {i} not equivalent: {verdict.reasoning}")
        details.append(f"formula {i}: equivalent")
    return _ok(True, "; ".join(details))


# -- logical combinators ---------------------------------------------------------------------


def _sub_evaluators(
    eval_func_list: list[str] | None, eval_kwargs_list: list[dict] | None, where: str
) -> list[tuple[str, dict]]:
    if not eval_func_list:
        raise EvalSpecError(f"{where}: eval_func_list must be a non-empty list of function names")
    kwargs_list = eval_kwargs_list if eval_kwargs_list is not None else [{} for _ in eval_func_list]
    if len(kwargs_list) != len(eval_func_list):
        raise EvalSpecError(
            f"{where}: eval_func_list has {len(eval_func_list)} entries but eval_kwargs_list has {len(kwargs_list)}"
        )
    return list(zip(eval_func_list, kwargs_list))


def _split_prediction(pred: Any, n: int, elementwise: bool | None) -> tuple[list[Any], bool]:
    """The sub-predictions for ``n`` sub-evaluators and whether they are element-wise."""
    if elementwise is False:
        return [pred] * n, False
    structured = as_structure(pred)
    if isinstance(structured, list) and len(structured) == n:
        return list(structured), True
    if elementwise:
        return [], True
    return [pred] * n, False


def _run_subs(pred: Any, subs: list[tuple[str, dict]], elementwise: bool | None, judge: Any, question: str | None, where: str):
    parts, by_element = _split_prediction(pred, len(subs), elementwise)
    if not parts:
        return None, by_element
    outcomes = []
    for i, ((name, kwargs), part) in enumerate(zip(subs, parts)):
        outcome = evaluate(part, {"eval_func": name, "eval_kwargs": kwargs}, judge=judge, question=question, _top=False)
        if outcome.error:
            outcome = EvalOutcome(0.0, f"{where}[{i}] {outcome.error}", outcome.detail)
        outcomes.append(outcome)
    return outcomes, by_element


def _summary(outcomes: list[EvalOutcome]) -> str:
    return "; ".join(f"[{i}] {o.score:g}" + (f" ({o.detail})" if o.detail else "") for i, o in enumerate(outcomes))


@_register()
def eval_conjunction(
    pred: Any,
    *,
    eval_func_list: list[str],
    eval_kwargs_list: list[dict] | None = None,
    elementwise: bool | None = None,
    question: str | None = None,
    judge: Any = None,
) -> EvalOutcome:
    """Logical AND of sub-evaluations.

    ``eval_func_list``: names of the sub-functions; ``eval_kwargs_list``: their kwargs (same
    length; sub-evaluators may themselves be combinators). As in the paper, the prediction is a
    list whose i-th element is scored by the i-th sub-evaluation; when it is not a list of exactly
    that many elements, every sub-evaluation scores the whole prediction. ``elementwise``: force
    one reading (true: a prediction of the wrong length scores 0; false: always whole).
    ``question``: passed down to LLM-judged sub-evaluations. Score: the minimum sub-score; any
    sub-evaluation error makes the whole an error.
    """
    subs = _sub_evaluators(eval_func_list, eval_kwargs_list, "eval_conjunction")
    outcomes, _ = _run_subs(pred, subs, elementwise, judge, question, "eval_conjunction")
    if outcomes is None:
        return _ok(False, f"expected a list of {len(subs)} elements")
    errors = [o.error for o in outcomes if o.error]
    if errors:
        return EvalOutcome(0.0, "; ".join(errors), _summary(outcomes))
    return EvalOutcome(min(o.score for o in outcomes), None, _summary(outcomes))


@_register()
def eval_disjunction(
    pred: Any,
    *,
    eval_func_list: list[str],
    eval_kwargs_list: list[dict] | None = None,
    elementwise: bool | None = None,
    question: str | None = None,
    judge: Any = None,
) -> EvalOutcome:
    """Logical OR of sub-evaluations.

    Kwargs and the element-wise / whole-prediction reading as for :func:`eval_conjunction`
    (whole-prediction is the usual "any of these acceptable answers" case). Score: the maximum
    sub-score; sub-evaluation errors only make the whole an error when no sub-evaluation passes.
    """
    subs = _sub_evaluators(eval_func_list, eval_kwargs_list, "eval_disjunction")
    outcomes, _ = _run_subs(pred, subs, elementwise, judge, question, "eval_disjunction")
    if outcomes is None:
        return _ok(False, f"expected a list of {len(subs)} elements")
    best = max(o.score for o in outcomes)
    errors = [o.error for o in outcomes if o.error]
    if errors and best < 1.0 - 1e-9:
        return EvalOutcome(0.0, "; ".join(errors), _summary(outcomes))
    return EvalOutcome(best, None, _summary(outcomes))


@_register()
def eval_negation(
    pred: Any,
    *,
    eval_func: str | None = None,
    eval_kwargs: dict | None = None,
    eval_func_list: list[str] | None = None,
    eval_kwargs_list: list[dict] | None = None,
    question: str | None = None,
    judge: Any = None,
) -> EvalOutcome:
    """Logical NOT of one sub-evaluation: score ``1 - sub-score``.

    The sub-evaluation is ``eval_func`` + ``eval_kwargs``, or the single entry of
    ``eval_func_list`` + ``eval_kwargs_list``. An error in the sub-evaluation stays an error (it
    never turns into a pass), and an empty prediction scores 0 (see :func:`evaluate`).
    """
    if eval_func is not None and eval_func_list is not None:
        raise EvalSpecError("eval_negation: give eval_func or eval_func_list, not both")
    if eval_func is not None:
        subs = [(eval_func, eval_kwargs or {})]
    else:
        if eval_kwargs is not None:
            raise EvalSpecError("eval_negation: eval_kwargs given without eval_func")
        subs = _sub_evaluators(eval_func_list, eval_kwargs_list, "eval_negation")
        if len(subs) != 1:
            raise EvalSpecError(f"eval_negation: exactly one sub-evaluation expected, got {len(subs)}")
    name, kwargs = subs[0]
    outcome = evaluate(pred, {"eval_func": name, "eval_kwargs": kwargs}, judge=judge, question=question, _top=False)
    if outcome.error:
        return EvalOutcome(0.0, f"eval_negation: {outcome.error}", outcome.detail)
    return EvalOutcome(1.0 - outcome.score, None, f"negated: {outcome.detail or outcome.score}")


# -- entry points ----------------------------------------------------------------------------


def _unpack(evaluator: Any) -> tuple[str, dict]:
    if isinstance(evaluator, str):
        try:
            evaluator = json.loads(evaluator)
        except ValueError as exc:
            raise EvalSpecError(f"evaluator is not valid JSON: {exc}") from exc
    if not isinstance(evaluator, dict):
        raise EvalSpecError(f"evaluator must be a dict with eval_func and eval_kwargs, got {type(evaluator).__name__}")
    name = evaluator.get("eval_func")
    if not isinstance(name, str) or not name.strip():
        raise EvalSpecError("evaluator has no eval_func name")
    kwargs = evaluator.get("eval_kwargs")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise EvalSpecError(f"{name}: eval_kwargs must be a dict, got {type(kwargs).__name__}")
    return name.strip(), kwargs


def get_function(name: str) -> Callable[..., EvalOutcome]:
    """The registered function ``name``; :class:`EvalSpecError` (with a suggestion) if unknown."""
    fn = EVAL_FUNCTIONS.get(name)
    if fn is not None:
        return fn
    if name in UNSUPPORTED_FUNCTIONS:
        raise EvalSpecError(f"evaluation function {name!r} is not supported: {UNSUPPORTED_FUNCTIONS[name]}")
    close = difflib.get_close_matches(name, list(EVAL_FUNCTIONS), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise EvalSpecError(f"unknown evaluation function {name!r}{hint}")


def evaluate(
    pred: Any, evaluator: Any, *, judge: Any = None, question: str | None = None, _top: bool = True
) -> EvalOutcome:
    """Score ``pred`` with ``evaluator`` = ``{"eval_func": name, "eval_kwargs": {...}}``.

    ``pred``: the agent's final answer — text (literal-parsed as needed, LLM noise tolerated) or an
    already-typed value; ``None`` or blank text scores 0. ``judge``: a
    :class:`~neusym.evaluation.judge.Judge` (or bare LLM) for the LLM-judged functions.
    ``question``: the item's question, used by LLM-judged functions whose kwargs do not carry one.
    ``evaluator`` may also be its JSON text.

    Never raises for a bad item: unknown functions, bad kwargs, a missing judge, judge failures
    and unexpected exceptions all come back as ``EvalOutcome(0.0, error=...)``. Kwargs accepted
    but not used for the score (at any nesting level) are listed in the outcome's ``notes``.
    """
    if not _top:
        return _evaluate(pred, evaluator, judge=judge, question=question, top=False)
    notes: list[str] = []
    token = _NOTES.set(notes)
    try:
        outcome = _evaluate(pred, evaluator, judge=judge, question=question, top=True)
    finally:
        _NOTES.reset(token)
    return dataclasses.replace(outcome, notes=tuple(notes)) if notes else outcome


def _evaluate(pred: Any, evaluator: Any, *, judge: Any, question: str | None, top: bool) -> EvalOutcome:
    name = "evaluator"
    try:
        name, kwargs = _unpack(evaluator)
        fn = get_function(name)
        if "judge" in kwargs:
            raise EvalSpecError("'judge' is not an eval kwarg (the judge is configured by the caller)")
        call_kwargs = dict(kwargs)
        if question is not None and "question" in fn.accepted_kwargs and "question" not in call_kwargs:  # type: ignore[attr-defined]
            call_kwargs["question"] = question
        if fn.takes_judge:  # type: ignore[attr-defined]
            call_kwargs["judge"] = judge
        if top and _is_blank(pred):
            # validate the spec anyway, so a broken evaluator is reported even for empty answers
            _prepare_kwargs(name, fn.accepted_params, call_kwargs, fn.unused_kwargs)  # type: ignore[attr-defined]
            return _ok(False, "empty prediction")
        return fn(pred, **call_kwargs)
    except EvalSpecError as exc:
        message = str(exc)
        return EvalOutcome(0.0, message if message.startswith(name) else f"{name}: {message}")
    except JudgeError as exc:
        return EvalOutcome(0.0, f"{name}: LLM judge failed: {exc}")
    except Exception as exc:  # noqa: BLE001 - one bad item must not stop an evaluation run
        logger.exception("evaluation function %s crashed", name)
        return EvalOutcome(0.0, f"{name}: internal error: {type(exc).__name__}: {exc}")


def evaluate_item(pred: Any, item: dict, *, judge: Any = None) -> EvalOutcome:
    """Score ``pred`` for an AirQA-Real ``item`` (uses its ``evaluator`` and ``question``)."""
    if not isinstance(item, dict):
        return EvalOutcome(0.0, f"item must be a dict, got {type(item).__name__}")
    question = item.get("question")
    return evaluate(pred, item.get("evaluator"), judge=judge, question=question if isinstance(question, str) else None)


_GOLD_AS_IS = {
    "eval_bool_exact_match", "eval_int_exact_match", "eval_float_exact_match", "eval_string_exact_match",
    "eval_string_fuzzy_match", "eval_structured_object_exact_match", "eval_element_list_included",
    "eval_element_list_overlap",
}


def gold_answer(evaluator: Any) -> tuple[bool, Any]:
    """The answer an objective ``evaluator`` itself calls correct, for checking question files.

    Returns ``(True, answer)``: ``gold`` for the match and list functions, the first acceptable
    value for ``eval_element_included``, the (first) reference title for
    ``eval_paper_relevance_with_reference_answer``, the list of the sub-evaluators' answers for
    ``eval_conjunction`` / ``eval_disjunction`` (the first sub-evaluator's answer when
    ``elementwise`` is false). Returns ``(False, None)`` when no such answer can
    be derived: LLM-judged functions, ``eval_negation``, unknown functions, malformed specs.
    Misspelled kwarg names are read through :data:`KWARG_ALIASES`.
    """
    try:
        name, raw = _unpack(evaluator)
    except EvalSpecError:
        return False, None
    kwargs = {KWARG_ALIASES[k]: v for k, v in raw.items() if k in KWARG_ALIASES}
    kwargs.update({k: v for k, v in raw.items() if k not in KWARG_ALIASES})  # a correct name wins
    if name in _GOLD_AS_IS and "gold" in kwargs:
        return True, kwargs["gold"]
    if name == "eval_element_included" and "gold" in kwargs:
        gold = kwargs["gold"]
        if isinstance(gold, (list, tuple)):
            return (True, gold[0]) if gold else (False, None)
        return True, gold
    if name == "eval_paper_relevance_with_reference_answer" and kwargs.get("reference_answer"):
        reference = kwargs["reference_answer"]
        return True, reference[0] if isinstance(reference, (list, tuple)) else reference
    if name in ("eval_conjunction", "eval_disjunction"):
        funcs = kwargs.get("eval_func_list")
        kwargs_list = kwargs.get("eval_kwargs_list")
        if not isinstance(funcs, list) or not isinstance(kwargs_list, list) or len(funcs) != len(kwargs_list):
            return False, None
        answers = []
        for func, sub_kwargs in zip(funcs, kwargs_list):
            ok, answer = gold_answer({"eval_func": func, "eval_kwargs": sub_kwargs})
            if not ok:
                return False, None
            answers.append(answer)
        if kwargs.get("elementwise") is False:  # every sub-evaluation scores the whole answer
            return (True, answers[0]) if answers else (False, None)
        return True, answers
    return False, None


def needs_judge(evaluator: Any) -> bool:
    """Whether scoring with ``evaluator`` may call an LLM judge (looks inside combinators)."""
    try:
        name, kwargs = _unpack(evaluator)
    except EvalSpecError:
        return False
    if name in LLM_FUNCTIONS:
        return True
    subs: list[tuple[Any, Any]] = []
    if isinstance(kwargs.get("eval_func"), str):
        subs.append((kwargs["eval_func"], kwargs.get("eval_kwargs") or {}))
    funcs = kwargs.get("eval_func_list") or kwargs.get("eval_funcs") or []
    kwargs_list = kwargs.get("eval_kwargs_list") or [{} for _ in funcs]
    if isinstance(funcs, list):
        subs.extend(zip(funcs, kwargs_list if isinstance(kwargs_list, list) else []))
    return any(needs_judge({"eval_func": f, "eval_kwargs": k}) for f, k in subs if isinstance(f, str))


__all__ = [
    "ELEMENT_TYPES",
    "EVAL_FUNCTIONS",
    "FUZZ_METHODS",
    "KWARG_ALIASES",
    "LLM_FUNCTIONS",
    "UNSUPPORTED_FUNCTIONS",
    "EvalKwargWarning",
    "EvalOutcome",
    "EvalSpecError",
    "MatchOptions",
    "UNUSED_REASONS",
    "evaluate",
    "evaluate_item",
    "get_function",
    "gold_answer",
    "needs_judge",
    "numbers_equal",
    "strings_equal",
    "values_equal",
] + sorted(EVAL_FUNCTIONS)
