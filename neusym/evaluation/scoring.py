"""``neusym eval score``: score a predictions file against its questions, matched by uuid.

Every question of the questions file gets one :class:`ItemScore`:

- no line for its uuid in the predictions file → score 0, error ``no prediction``;
- a prediction whose run failed (``error`` set by ``neusym eval run``) → score 0, error ``run error: ...``;
- otherwise the item's ``evaluator`` scores the prediction's ``answer``
  (:func:`neusym.evaluation.evaluate_item`): an unknown evaluation function, bad kwargs or a judge
  failure is an error of that item (score 0), never of the run.

Accuracy is the mean score (0–1) over all questions of the file (``overall``) and over the questions
carrying each tag (``by_tag``: the paper's single/multiple/retrieval, text/table/image/formula/
metadata, subjective/objective, plus any other tag present), and over the predictions whose answer
carries a verification (method ``auto``), per its basis and status (``by_verification``: how often a
``pass`` of each basis is right — :mod:`neusym.query.answer.verify`). Predictions whose uuid is not in the
questions file are ignored and counted. Mean turns, prompt/completion tokens and seconds are over
the questions that have a prediction without a run error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from neusym.evaluation.functions import evaluate_item, gold_answer, needs_judge
from neusym.evaluation.runner import EvalQuestion, load_questions, read_predictions

TAG_ORDER = ("single", "multiple", "retrieval", "text", "table", "image", "formula", "metadata", "subjective", "objective")
"""The AirQA-Real tags in the order of the paper's tables; other tags follow alphabetically."""

MEAN_FIELDS = ("turns", "prompt_tokens", "completion_tokens", "seconds")


@dataclass
class ItemScore:
    """The score of one question: ``score`` 0–1, ``error`` (why it could not be scored properly:
    missing prediction, run error, evaluator or judge problem), ``detail`` from the evaluator,
    the question's ``tags`` and the prediction's cost fields (None without a usable prediction)."""

    uuid: str
    score: float
    error: str | None = None
    detail: str | None = None
    tags: list[str] = field(default_factory=list)
    turns: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float | None = None


@dataclass
class ScoreReport:
    """Scores of a whole file: ``items`` in question-file order, ``overall`` and ``by_tag`` accuracy
    (0–1), ``tag_counts`` (questions per tag), ``means`` per question (turns, prompt_tokens,
    completion_tokens, seconds), and counts: ``missing`` predictions, ``run_errors``,
    ``eval_errors``, ``unknown_predictions`` (uuids not in the questions file), ``notes``:
    each kwarg that items carry but that does not affect their score, once, with the number of
    items carrying it (e.g. ``question`` on every paper-retrieval item), and ``by_verification``:
    ``{"<basis> <status>": {"n", "accuracy"}}`` over the predictions that carry a verification with a
    basis (none for methods without a verifier)."""

    items: list[ItemScore]
    overall: float
    by_tag: dict[str, float]
    tag_counts: dict[str, int]
    means: dict[str, float | None]
    missing: int = 0
    run_errors: int = 0
    eval_errors: int = 0
    unknown_predictions: int = 0
    judge_calls: int = 0
    notes: dict[str, int] = field(default_factory=dict)
    by_verification: dict[str, dict] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The ``neusym eval score --json`` object: ``overall`` (0–1), ``by_tag`` ({tag: 0–1}),
        ``items`` ([{uuid, score, error}]) and ``notes`` ([{note, items}]: accepted-but-unused kwargs)."""
        return {
            "overall": self.overall,
            "by_tag": dict(self.by_tag),
            "items": [{"uuid": i.uuid, "score": i.score, "error": i.error} for i in self.items],
            "notes": [{"note": note, "items": count} for note, count in self.notes.items()],
        }

    def summary(self) -> dict:
        """Everything but the per-item list: accuracy, tag counts, means and error counts."""
        return {
            "n": len(self.items),
            "overall": self.overall,
            "by_tag": dict(self.by_tag),
            "tag_counts": dict(self.tag_counts),
            "means": dict(self.means),
            "missing": self.missing,
            "run_errors": self.run_errors,
            "eval_errors": self.eval_errors,
            "unknown_predictions": self.unknown_predictions,
            "notes": dict(self.notes),
            "by_verification": dict(self.by_verification),
        }


def _ordered_tags(tags: set[str]) -> list[str]:
    return [t for t in TAG_ORDER if t in tags] + sorted(tags - set(TAG_ORDER))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def score_predictions(
    questions: Path | str | list[EvalQuestion],
    predictions: Path | str | dict[str, dict],
    *,
    judge: Any = None,
    judge_factory: Callable[[], Any] | None = None,
) -> ScoreReport:
    """Score every question of ``questions`` (a JSONL path or loaded items) with the prediction of
    the same uuid in ``predictions`` (a PRED JSONL path or ``{uuid: line}``).

    ``judge``: a :class:`neusym.evaluation.Judge` (or bare LLM) for the LLM-judged evaluators;
    ``judge_factory``: called once, only if some predicted item needs a judge and ``judge`` is None
    (so the offline model is not loaded for purely objective files). Without a judge such items
    score 0 with an error. Raises :class:`neusym.evaluation.runner.QuestionFileError` /
    :class:`PredictionFileError` for malformed files (each naming the line).
    """
    items = load_questions(questions) if isinstance(questions, (str, Path)) else list(questions)
    preds = read_predictions(predictions, tolerate_partial_tail=False) if isinstance(predictions, (str, Path)) else dict(predictions)
    known = {q.uuid for q in items}
    scored: list[ItemScore] = []
    verdicts: dict[str, list[float]] = {}
    notes: dict[str, int] = {}
    missing = run_errors = eval_errors = 0
    for q in items:
        pred = preds.get(q.uuid)
        if pred is None:
            missing += 1
            scored.append(ItemScore(q.uuid, 0.0, "no prediction", tags=q.tags))
            continue
        costs = {name: _number(pred.get(name)) for name in MEAN_FIELDS}
        if pred.get("error"):
            run_errors += 1
            scored.append(ItemScore(q.uuid, 0.0, f"run error: {pred['error']}", tags=q.tags))
            continue
        if q.evaluator is None:
            outcome_score, outcome_error, detail = 0.0, f"{q.path}:{q.line}: the question has no evaluator", None
        else:
            if judge is None and judge_factory is not None and needs_judge(q.evaluator):
                judge = judge_factory()
            outcome = evaluate_item(pred.get("answer"), {"question": q.question, "evaluator": q.evaluator}, judge=judge)
            outcome_score, detail = outcome.score, outcome.detail
            for note in outcome.notes:
                notes[note] = notes.get(note, 0) + 1
            outcome_error = f"{q.path}:{q.line}: {outcome.error}" if outcome.error else None
        if outcome_error:
            eval_errors += 1
        verification = pred.get("verification")
        if isinstance(verification, dict) and verification.get("basis") and verification.get("status"):
            verdicts.setdefault(f"{verification['basis']} {verification['status']}", []).append(float(outcome_score))
        scored.append(
            ItemScore(
                q.uuid,
                float(outcome_score),
                outcome_error,
                detail,
                tags=q.tags,
                turns=None if costs["turns"] is None else int(costs["turns"]),
                prompt_tokens=None if costs["prompt_tokens"] is None else int(costs["prompt_tokens"]),
                completion_tokens=None if costs["completion_tokens"] is None else int(costs["completion_tokens"]),
                seconds=costs["seconds"],
            )
        )
    n = len(scored)
    overall = round(sum(s.score for s in scored) / n, 4) if n else 0.0
    all_tags = {t for s in scored for t in s.tags}
    by_tag: dict[str, float] = {}
    tag_counts: dict[str, int] = {}
    for tag in _ordered_tags(all_tags):
        group = [s.score for s in scored if tag in s.tags]
        tag_counts[tag] = len(group)
        by_tag[tag] = round(sum(group) / len(group), 4)
    ran = [s for s in scored if s.turns is not None]
    means: dict[str, float | None] = {}
    for name in MEAN_FIELDS:
        values = [getattr(s, name) for s in ran if getattr(s, name) is not None]
        means[name] = round(sum(values) / len(values), 3) if values else None
    return ScoreReport(
        items=scored,
        overall=overall,
        by_tag=by_tag,
        tag_counts=tag_counts,
        means=means,
        missing=missing,
        run_errors=run_errors,
        eval_errors=eval_errors,
        unknown_predictions=sum(1 for uid in preds if uid not in known),
        judge_calls=int(getattr(judge, "calls", 0) or 0),
        notes=notes,
        by_verification={key: {"n": len(v), "accuracy": round(sum(v) / len(v), 4)} for key, v in sorted(verdicts.items())},
    )


def check_gold(questions: Path | str | list[EvalQuestion]) -> tuple[ScoreReport, int]:
    """Score every objective item of ``questions`` with its own gold answer
    (:func:`~neusym.evaluation.functions.gold_answer`) — each such item must score 1, so any other
    score or an item error points at the evaluator or at this scorer, not at an agent.

    Returns the report over the checked items and the number of items skipped (LLM-judged,
    ``eval_negation``, or no evaluator). Raises :class:`QuestionFileError` for a malformed file.
    """
    items = load_questions(questions) if isinstance(questions, (str, Path)) else list(questions)
    checked, preds = [], {}
    for q in items:
        ok, answer = gold_answer(q.evaluator) if q.evaluator is not None else (False, None)
        if ok and not needs_judge(q.evaluator):
            checked.append(q)
            preds[q.uuid] = {"uuid": q.uuid, "answer": answer}
    return score_predictions(checked, preds), len(items) - len(checked)


def make_judge(settings: Any, judge_llm: str | None = None, judge_model: str | None = None,
               cache_dir: Path | str | None = None) -> Any:
    """The LLM judge for subjective evaluators, at temperature 0 with the sqlite verdict cache.

    ``judge_llm``: None = the configured LLM (``NEUSYM_LLM_BASE_URL`` endpoint or the offline model);
    ``"offline"`` = the offline model even when an endpoint is configured; otherwise an
    OpenAI-compatible base URL (``judge_model`` names its model, default ``settings.llm_model``; the
    key is ``settings.llm_api_key``). ``cache_dir`` default ``$NEUSYM_HOME/judge_cache``.
    """
    from neusym.evaluation.judge import Judge

    if judge_llm is None:
        chosen = settings
    elif judge_llm.strip().lower() == "offline":
        chosen = settings.model_copy(update={"llm_base_url": None})
    else:
        chosen = settings.model_copy(update={"llm_base_url": judge_llm.strip(),
                                             "llm_model": judge_model or settings.llm_model})
    if judge_model and judge_llm is None:
        chosen = chosen.model_copy(update={"llm_model": judge_model})
    return Judge.from_settings(chosen, cache_dir=cache_dir)


__all__ = ["MEAN_FIELDS", "TAG_ORDER", "ItemScore", "ScoreReport", "check_gold", "make_judge", "score_predictions"]
