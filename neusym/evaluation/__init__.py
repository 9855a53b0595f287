"""Evaluation of agent answers on AirQA-Real-format items (paper §3.1, Appendix D / Table 11).

:func:`evaluate` scores one prediction with an item's ``evaluator``
(``{"eval_func": ..., "eval_kwargs": {...}}``) using the registry :data:`EVAL_FUNCTIONS`;
LLM-judged functions use a :class:`Judge` (temperature 0, JSON verdicts, cached).

Runs over question files: :func:`run_eval` (``neusym eval run``, :mod:`neusym.evaluation.runner`)
answers every AirQA-Real item with one method and writes a predictions file;
:func:`score_predictions` (``neusym eval score``, :mod:`neusym.evaluation.scoring`) scores it by uuid.
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
from neusym.values import parse_literal
from neusym.evaluation.runner import (
    EvalQuestion,
    PredictionFileError,
    QuestionFileError,
    RunReport,
    load_questions,
    read_predictions,
    run_eval,
)
from neusym.evaluation.scoring import ItemScore, ScoreReport, make_judge, score_predictions

__all__ = [
    "EVAL_FUNCTIONS",
    "FUZZ_METHODS",
    "KWARG_ALIASES",
    "LLM_FUNCTIONS",
    "EvalKwargWarning",
    "EvalOutcome",
    "EvalQuestion",
    "EvalSpecError",
    "ItemScore",
    "Judge",
    "JudgeError",
    "JudgeUnavailableError",
    "JudgeVerdictError",
    "MatchOptions",
    "PredictionFileError",
    "QuestionFileError",
    "RunReport",
    "ScoreReport",
    "Verdict",
    "VerdictCache",
    "evaluate",
    "evaluate_item",
    "get_function",
    "load_questions",
    "make_judge",
    "needs_judge",
    "parse_literal",
    "read_predictions",
    "run_eval",
    "score_predictions",
    "values_equal",
]
