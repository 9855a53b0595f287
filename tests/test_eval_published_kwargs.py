"""Evaluator kwargs that the published AirQA-Real test set uses (issue F).

The published file (553 items) carries kwargs that the registry used to refuse: ``question`` on
every paper-retrieval item, ``threshold`` (80/90/95, with or without ``fuzz_method``) on
``eval_structured_object_exact_match``, and ``threshold: -1`` on the element functions. The items
here are written in that shape (the kwargs and values are the published ones); each scores 1 for
its gold and 0 for a wrong answer.

``tests/fixtures/airqa_evaluator_shapes.jsonl`` holds twelve items of these shapes for the
command-line checks. Their gold answers exercise the scorer; they were not verified against the
papers and are not a QA set.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from neusym.interfaces.cli import app
from neusym.evaluation import evaluate, evaluate_item
from neusym.evaluation.functions import EVAL_FUNCTIONS, UNUSED_REASONS, gold_answer
from neusym.evaluation.scoring import check_gold, score_predictions

SHAPES = Path(__file__).parent / "fixtures" / "airqa_evaluator_shapes.jsonl"

RETRIEVAL_QUESTION = (
    "Is there any paper that leverages knowledge distillation of language models for textual "
    "out-of-distribution detection or anomaly detection?"
)
RETRIEVAL_ITEM = {  # Listing 4 of the paper, with the question copied into eval_kwargs as published
    "uuid": "4b4877cd-4cdc-5d52-ac20-edfaa6dd7e32",
    "question": RETRIEVAL_QUESTION,
    "answer_format": "Your answer should be the title of the paper WITHOUT ANY EXPLANATION.",
    "tags": ["retrieval", "text", "objective"],
    "anchor_pdf": [],
    "reference_pdf": [],
    "conference": ["acl2023"],
    "evaluator": {
        "eval_func": "eval_paper_relevance_with_reference_answer",
        "eval_kwargs": {
            "reference_answer": "Multi-Level Knowledge Distillation for Out-of-Distribution Detection in Text",
            "question": RETRIEVAL_QUESTION,
        },
    },
}


def _item(func: str, **kwargs) -> dict:
    return {"uuid": "x", "question": "q", "tags": ["objective"], "evaluator": {"eval_func": func, "eval_kwargs": kwargs}}


def _score(pred, it: dict) -> float:
    outcome = evaluate_item(pred, it)
    assert outcome.error is None, outcome.error
    return outcome.score


# -- row 1: question on eval_paper_relevance_with_reference_answer ----------------------------


def test_paper_relevance_accepts_question_and_scores_titles():
    gold = RETRIEVAL_ITEM["evaluator"]["eval_kwargs"]["reference_answer"]
    outcome = evaluate_item(gold, RETRIEVAL_ITEM)
    assert outcome.error is None and outcome.score == 1.0
    # the question is not needed for scoring: it is reported as a note, not an error
    assert any("'question' accepted but not used" in n for n in outcome.notes)
    assert _score("multi-level knowledge distillation for out of distribution detection in text.", RETRIEVAL_ITEM) == 1.0
    assert _score("Knowledge Distillation for Anomaly Detection", RETRIEVAL_ITEM) == 0.0
    assert _score("Multi-Level Knowledge Distillation for Out-of-Distribution Detection in Images", RETRIEVAL_ITEM) == 0.0


def test_paper_relevance_threshold_minus_one_is_exact_title_equality():
    it = _item("eval_paper_relevance_with_reference_answer", reference_answer="PaSa: An LLM Agent for Comprehensive Academic Paper Search",
               question="Which paper builds an LLM agent for academic paper search?", threshold=-1)
    assert _score("PaSa: An LLM Agent for Comprehensive Academic Paper Search", it) == 1.0
    assert _score("pasa - an llm agent for comprehensive academic paper search", it) == 1.0  # normalised titles
    assert _score("PaSa: An LLM Agent for Comprehensive Academic Papers Search", it) == 0.0  # ratio 99, not exact


# -- row 2: threshold (and fuzz_method) on eval_structured_object_exact_match ------------------


@pytest.mark.parametrize("threshold", [80, 90, 95])
def test_structured_threshold_compares_string_leaves_fuzzily(threshold):
    it = _item("eval_structured_object_exact_match", gold=["Multi-LexSum", "long"], threshold=threshold)
    assert _score(["Multi-LexSum", "long"], it) == 1.0
    assert _score("['Multi-LexSum', 'long']", it) == 1.0
    assert _score(["Multi LexSum", "long"], it) == (1.0 if threshold <= 90 else 0.0)  # ratio 91.7
    assert _score(["CaseSumm", "long"], it) == 0.0


def test_structured_threshold_with_fuzz_method_and_numbers_still_exact():
    it = _item("eval_structured_object_exact_match", gold={"method": "Getis-Ord pooling", "layers": 2, "acc": 91.3},
               threshold=80, fuzz_method="token_sort_ratio", ndigits=1)
    assert _score({"method": "pooling Getis-Ord", "layers": 2, "acc": 91.31}, it) == 1.0  # token order ignored
    assert _score({"method": "Getis-Ord pooling", "layers": 3, "acc": 91.3}, it) == 0.0  # numbers not fuzzy
    assert _score({"method": "Getis-Ord pooling", "layers": 2, "acc": 91.4}, it) == 0.0
    assert _score({"method": "max pooling", "layers": 2, "acc": 91.3}, it) == 0.0


def test_structured_threshold_minus_one_is_exact():
    it = _item("eval_structured_object_exact_match", gold=["DoRA"], threshold=-1, fuzz_method="ratio")
    outcome = evaluate_item(["DoRA"], it)
    assert outcome.score == 1.0 and outcome.error is None
    assert any("'fuzz_method' accepted but not used" in n for n in outcome.notes)
    assert _score(["DORA"], it) == 0.0
    assert _score(["DoRA "], it) == 1.0  # surrounding whitespace is never significant


# -- row 3: threshold -1 on the element functions ----------------------------------------------


@pytest.mark.parametrize("func", ["eval_element_included", "eval_element_list_included", "eval_element_list_overlap"])
def test_element_functions_threshold_minus_one_is_exact(func):
    gold = ["SPECTER", "SciBERT", "Citeomatic"]
    it = _item(func, gold=gold, threshold=-1, lowercase=True)
    right = "specter" if func == "eval_element_included" else ["specter", "SciBERT"]
    near = "SPECTRE" if func == "eval_element_included" else ["SPECTRE", "SciBERTa"]
    assert _score(right, it) == 1.0
    assert _score(near, it) == 0.0  # would pass a fuzzy match at 80


@pytest.mark.parametrize("func", ["eval_element_included", "eval_element_list_included", "eval_element_list_overlap"])
def test_element_functions_positive_threshold_without_fuzz_method_uses_ratio(func):
    it = _item(func, gold=["Semantic Scholar Open Research Corpus"], threshold=90)
    pred = "Semantic Scholar Open Research Corpora"
    assert _score(pred if func == "eval_element_included" else [pred], it) == 1.0
    assert _score("S2ORC" if func == "eval_element_included" else ["S2ORC"], it) == 0.0


def test_threshold_still_refuses_nonsense():
    for bad in (101, "high", float("nan")):
        outcome = evaluate("x", {"eval_func": "eval_element_included", "eval_kwargs": {"gold": ["x"], "threshold": bad}})
        assert outcome.error and "threshold" in outcome.error


# -- nested combinators ------------------------------------------------------------------------


def test_conjunction_with_nested_fuzzy_structured_matches():
    it = _item(
        "eval_conjunction",
        eval_func_list=["eval_structured_object_exact_match", "eval_disjunction", "eval_element_list_included"],
        eval_kwargs_list=[
            {"gold": ["Ring Attention", "blockwise"], "threshold": 90, "lowercase": True},
            {
                "eval_func_list": ["eval_structured_object_exact_match", "eval_int_exact_match"],
                "eval_kwargs_list": [{"gold": {"context": "100M tokens"}, "threshold": 80, "fuzz_method": "partial_ratio"},
                                     {"gold": 512}],
                "elementwise": False,
            },
            {"gold": ["TPUv4", "A100"], "threshold": -1},
        ],
    )
    assert _score([["ring attention", "Blockwise"], {"context": "100M tokens"}, ["A100"]], it) == 1.0
    assert _score([["Ring-Attention", "blockwise"], {"context": "up to 100M tokens"}, ["TPUv4", "A100"]], it) == 1.0
    assert _score([["Ring Attention", "blockwise"], {"context": "100M tokens"}, ["H100"]], it) == 0.0
    assert _score([["Sparse Attention", "blockwise"], {"context": "100M tokens"}, ["A100"]], it) == 0.0
    assert _score([["Ring Attention", "blockwise"], {"context": "4K"}, ["A100"]], it) == 0.0


def test_negation_of_fuzzy_structured_match():
    it = _item("eval_negation", eval_func="eval_structured_object_exact_match",
               eval_kwargs={"gold": ["West-of-N"], "threshold": 90})
    assert _score(["Best-of-N sampling"], it) == 1.0
    assert _score(["West-ofN"], it) == 0.0  # ratio 94 >= 90
    assert _score(["West of N"], it) == 1.0  # ratio 78 < 90


# -- the audit: accepted where meaningful, refused where meaningless ---------------------------


def test_every_function_accepts_question():
    for name, fn in EVAL_FUNCTIONS.items():
        assert "question" in fn.accepted_kwargs | fn.unused_kwargs, name


@pytest.mark.parametrize(
    ("func", "kwargs", "bad"),
    [
        ("eval_int_exact_match", {"gold": 3}, {"scoring_points": ["a"]}),
        ("eval_string_exact_match", {"gold": "a"}, {"count": 2}),
        ("eval_bool_exact_match", {"gold": True}, {"element_type": "str"}),
        ("eval_element_included", {"gold": ["a"]}, {"reference_answer": "a"}),
        ("eval_paper_relevance_with_reference_answer", {"reference_answer": "A title"}, {"gold": "A title"}),
        ("eval_structured_object_exact_match", {"gold": ["a"]}, {"llm_model": "gpt-4o"}),
    ],
)
def test_meaningless_kwargs_are_clear_item_errors(func, kwargs, bad):
    outcome = evaluate("a", {"eval_func": func, "eval_kwargs": {**kwargs, **bad}})
    assert outcome.score == 0.0
    assert outcome.error and f"unknown kwarg {next(iter(bad))!r}" in outcome.error and func in outcome.error


def test_llm_functions_accept_reference_judge_settings_as_notes():
    outcome = evaluate("x", {"eval_func": "eval_scoring_points_with_llm",
                             "eval_kwargs": {"scoring_points": ["a"], "llm_model": "gpt-4o", "temperature": 0.0,
                                             "ignore_order": True}})
    # no judge configured: an error about the judge, not about the kwargs
    assert outcome.error and "unknown kwarg" not in outcome.error
    assert {n.split(": kwarg ")[1].split()[0] for n in outcome.notes} == {"'llm_model'", "'temperature'", "'ignore_order'"}


def test_known_misspellings_still_renamed():
    with pytest.warns(UserWarning):
        outcome = evaluate("12.34", {"eval_func": "eval_float_exact_match", "eval_kwargs": {"gold": 12.3, "nidigits": 1}})
    assert outcome.score == 1.0 and outcome.error is None


def test_unused_reasons_cover_every_registration():
    for fn in EVAL_FUNCTIONS.values():
        assert fn.unused_kwargs <= set(UNUSED_REASONS)
        assert not fn.unused_kwargs & fn.accepted_kwargs


# -- whole files: gold in, score 1; notes once per run -----------------------------------------


def test_gold_answers_of_shaped_items_all_score_one():
    report, skipped = check_gold(SHAPES)
    assert skipped == 0 and len(report.items) == 12
    assert [(i.uuid, i.error) for i in report.items if i.score != 1.0 or i.error] == []
    assert report.overall == 1.0


def test_notes_reported_once_per_run_with_item_counts():
    lines = [json.loads(line) for line in SHAPES.read_text().splitlines()]
    preds = {}
    for q in lines:
        ok, answer = gold_answer(q["evaluator"])
        assert ok, q["uuid"]
        preds[q["uuid"]] = {"uuid": q["uuid"], "answer": answer}
    report = score_predictions(SHAPES, preds)
    question_note = [n for n in report.notes if n.startswith("eval_paper_relevance_with_reference_answer: kwarg 'question'")]
    assert len(question_note) == 1 and report.notes[question_note[0]] == 2
    assert report.eval_errors == 0


def test_wrong_answers_of_shaped_items_score_zero():
    wrong = {json.loads(line)["uuid"]: {"answer": "['BERT', 12]"} for line in SHAPES.read_text().splitlines()}
    report = score_predictions(SHAPES, wrong)
    assert report.eval_errors == 0
    assert all(i.score == 0.0 for i in report.items)


def test_cli_eval_check_and_score(tmp_path):
    runner = CliRunner()
    checked = runner.invoke(app, ["eval", "check", str(SHAPES), "--json"])
    assert checked.exit_code == 0, checked.output
    out = json.loads(checked.stdout)
    assert out["checked"] == 12 and out["passed"] == 12 and out["items"] == []
    assert any("'question'" in n["note"] for n in out["notes"])
    # a broken item (unknown kwarg) makes the check fail with its uuid named
    bad = tmp_path / "bad.jsonl"
    line = json.loads(SHAPES.read_text().splitlines()[6])
    line["evaluator"]["eval_kwargs"]["scoring_points"] = ["x"]
    bad.write_text(json.dumps(line) + "\n")
    failed = runner.invoke(app, ["eval", "check", str(bad)])
    assert failed.exit_code == 1
    assert line["uuid"] in failed.stderr and "unknown kwarg 'scoring_points'" in failed.stderr
