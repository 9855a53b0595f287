"""Evaluation of agent answers on AirQA-Real-format items (paper §3.1, Appendix D / Table 11).

:func:`evaluate` scores one prediction with an item's ``evaluator``
(``{"eval_func": ..., "eval_kwargs": {...}}``) using the registry :data:`EVAL_FUNCTIONS`;
LLM-judged functions use a :class:`Judge` (temperature 0, JSON verdicts, cached).
"""

from neusym.evaluation.functions import (
    EVAL_FUNCTIONS,
    FUZZ_METHODS,
    KWARG_ALIASES,
    LLM_FUNCTIONS,
    EvalKwargWarning,
    EvalOutcome,
    EvalSpecError,
    MatchOptions,
    evaluate,
    evaluate_item,
    get_function,
    needs_judge,
    values_equal,
)
from neusym.evaluation.judge import (
    Judge,
    JudgeError,
    JudgeUnavailableError,
    JudgeVerdictError,
    Verdict,
    VerdictCache,
)
from neusym.evaluation.parsing import parse_literal

__all__ = [
    "EVAL_FUNCTIONS",
    "FUZZ_METHODS",
    "KWARG_ALIASES",
    "LLM_FUNCTIONS",
    "EvalKwargWarning",
    "EvalOutcome",
    "EvalSpecError",
    "Judge",
    "JudgeError",
    "JudgeUnavailableError",
    "JudgeVerdictError",
    "MatchOptions",
    "Verdict",
    "VerdictCache",
    "evaluate",
    "evaluate_item",
    "get_function",
    "needs_judge",
    "parse_literal",
    "values_equal",
]
