"""The AirQA-Real evaluation functions (paper Table 11) on realistic items.

Items are written in the AirQA-Real format (question, answer_format, tags, evaluator with
eval_func / eval_kwargs). Each function is checked on a correct answer, near misses and wrong
answers; objective functions must give score 1 when fed their own gold answer.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass

import pytest

from neusym.evaluation import (
    EVAL_FUNCTIONS,
    LLM_FUNCTIONS,
    EvalKwargWarning,
    EvalOutcome,
    Judge,
    evaluate,
    evaluate_item,
    needs_judge,
    parse_literal,
)
from neusym.evaluation.judge import load_prompt, parse_prompt
from neusym.values import clean_text, coerce_number, normalize_title

PAPER_TABLE_11 = {
    "eval_bool_exact_match",
    "eval_int_exact_match",
    "eval_float_exact_match",
    "eval_string_exact_match",
    "eval_string_fuzzy_match",
    "eval_structured_object_exact_match",
    "eval_element_included",
    "eval_element_list_included",
    "eval_element_list_overlap",
    "eval_paper_relevance_with_reference_answer",
    "eval_reference_answer_with_llm",
    "eval_scoring_points_with_llm",
    "eval_partial_scoring_points_with_llm",
    "eval_complex_math_formula_with_llm",
    "eval_conjunction",
    "eval_disjunction",
    "eval_negation",
}


def item(question: str, answer_format: str, func: str, tags: list[str] | None = None, **eval_kwargs) -> dict:
    """An AirQA-Real style example with evaluator ``{"eval_func": func, "eval_kwargs": eval_kwargs}``."""
    return {
        "uuid": f"test-{func}-{len(question):04d}",
        "question": question,
        "answer_format": answer_format,
        "tags": tags or ["single", "text", "objective"],
        "anchor_pdf": [],
        "reference_pdf": [],
        "conference": [],
        "evaluator": {"eval_func": func, "eval_kwargs": eval_kwargs},
    }


def score(pred, it: dict, **kw) -> float:
    outcome = evaluate_item(pred, it, **kw)
    assert outcome.error is None, outcome.error
    return outcome.score


# -- realistic items ---------------------------------------------------------------------------

BOOL_ITEM = item(
    "Does the SPECTER paper fine-tune SciBERT with a triplet loss over citation-informed triples?",
    "Your answer should be a Python boolean, either True or False.",
    "eval_bool_exact_match",
    gold=True,
)
INT_ITEM = item(
    "How many downstream tasks are included in the SciDocs benchmark proposed together with SPECTER?",
    "Your answer should be a single integer.",
    "eval_int_exact_match",
    gold=7,
)
FLOAT_ITEM = item(
    "On the ALFWorld dataset experiments, how much did the success rate improve when the authors used their "
    "method compared to the original baseline model?",
    "Your answer should be a floating-point number with one decimal place.",
    "eval_float_exact_match",
    gold=12.3,
    ndigits=1,
)
FLOAT_TOL_ITEM = item(
    "What is the Spearman correlation between LongEval's fine-grained annotations and the overall scores?",
    "Your answer should be a float between 0 and 1, rounded to 2 decimal places.",
    "eval_float_exact_match",
    gold=0.84,
    tolerance=0.01,
)
STRING_ITEM = item(
    "Which pretrained model is SPECTER's encoder initialised from?",
    "Your answer should be a single string, the name of the model.",
    "eval_string_exact_match",
    gold="SciBERT",
    lowercase=True,
)
STRING_BLANK_ITEM = item(
    "What is the name of the dataset the PopQA paper constructs?",
    "Your answer should be the dataset name as a string.",
    "eval_string_exact_match",
    gold="PopQA",
    lowercase=True,
    ignore_blank=True,
)
FUZZY_ITEM = item(
    "What is the full name of the method proposed in the DecompX paper?",
    "Your answer should be a string, the full name of the method.",
    "eval_string_fuzzy_match",
    gold="Explaining Transformers Decisions by Propagating Token Decomposition",
    fuzz_method="ratio",
    threshold=90,
)
STRUCT_ITEM = item(  # Listing 3 of the paper
    "On the HEML sentence level with AUC metric, which baseline outperforms MIND on specific conditons? Is it the "
    "best variant according to the paper that proposed that baseline?",
    "Your answer should be a Python list of two strings. The first string is the name of the baseline (with "
    "variant) that outperforms MIND, as proposed in the anchor PDF. The second string is either `true` or `false`.",
    "eval_structured_object_exact_match",
    tags=["multiple", "text", "table", "objective"],
    gold=["SCG-NLI", "false"],
    ignore_order=False,
    lowercase=True,
)
STRUCT_DICT_ITEM = item(
    "Report the number of papers and citation links in the SPECTER pretraining corpus.",
    'Your answer should be a Python dict with keys "papers" and "citations", both integers.',
    "eval_structured_object_exact_match",
    gold={"papers": 146000, "citations": 26700000},
)
STRUCT_ORDERLESS_ITEM = item(
    "Which two evaluation datasets does the LongEval paper annotate?",
    "Your answer should be a Python list of two strings, the dataset names, in any order.",
    "eval_structured_object_exact_match",
    gold=["SQuALITY", "PubMed"],
    ignore_order=True,
    lowercase=True,
)
ELEMENT_ITEM = item(
    "Which venue published the PopQA paper?",
    "Your answer should be a string, the venue abbreviation.",
    "eval_element_included",
    gold=["ACL 2023", "ACL2023", "ACL"],
    lowercase=True,
)
LIST_INCLUDED_ITEM = item(
    "Name some of the SciDocs tasks on which SPECTER is evaluated.",
    "Your answer should be a Python list of strings, each a task name.",
    "eval_element_list_included",
    gold=["classification", "citation prediction", "user activity", "recommendation"],
    lowercase=True,
)
OVERLAP_ITEM = item(
    "Which retrieval systems does the PopQA paper combine with LMs? Give at least two.",
    "Your answer should be a Python list of strings, the retriever names.",
    "eval_element_list_overlap",
    gold=["BM25", "Contriever", "GenRead"],
    count=2,
    lowercase=True,
)
RETRIEVAL_ITEM = item(  # Listing 4 of the paper
    "Is there any paper leverages knowledge distillation of language models for textual out-of-distribution "
    "detection or anomaly detection?",
    "Your answer should be the title of the paper WITHOUT ANY EXPLANATION.",
    "eval_paper_relevance_with_reference_answer",
    tags=["retrieval", "text", "objective"],
    reference_answer="Multi-Level Knowledge Distillation for Out-of-Distribution Detection in Text",
)

OBJECTIVE_ITEMS = [
    BOOL_ITEM,
    INT_ITEM,
    FLOAT_ITEM,
    FLOAT_TOL_ITEM,
    STRING_ITEM,
    STRING_BLANK_ITEM,
    FUZZY_ITEM,
    STRUCT_ITEM,
    STRUCT_DICT_ITEM,
    STRUCT_ORDERLESS_ITEM,
    ELEMENT_ITEM,
    LIST_INCLUDED_ITEM,
    OVERLAP_ITEM,
    RETRIEVAL_ITEM,
]


def gold_of(it: dict):
    kwargs = it["evaluator"]["eval_kwargs"]
    gold = kwargs["gold"] if "gold" in kwargs else kwargs["reference_answer"]
    if it["evaluator"]["eval_func"] == "eval_element_included":
        return gold[0]
    return gold


# -- the registry ------------------------------------------------------------------------------


def test_registry_has_exactly_the_paper_names():
    assert set(EVAL_FUNCTIONS) == PAPER_TABLE_11
    assert LLM_FUNCTIONS == {
        "eval_reference_answer_with_llm",
        "eval_scoring_points_with_llm",
        "eval_partial_scoring_points_with_llm",
        "eval_complex_math_formula_with_llm",
    }
    for name, fn in EVAL_FUNCTIONS.items():
        assert fn.__doc__ and len(fn.__doc__) > 80, name


@pytest.mark.parametrize("it", OBJECTIVE_ITEMS, ids=lambda it: it["evaluator"]["eval_func"] + ":" + it["uuid"][-4:])
def test_gold_fed_back_scores_one(it):
    gold = gold_of(it)
    assert score(gold, it) == 1.0  # typed
    assert score(json.dumps(gold), it) == 1.0  # JSON text
    assert score(repr(gold), it) == 1.0  # Python literal text
    if isinstance(gold, str):
        assert score(gold, it) == 1.0  # bare text


# -- bool / int / float ------------------------------------------------------------------------


@pytest.mark.parametrize("pred", [True, "True", "true", "yes", "Yes.", "```python\nTrue\n```", "Yes, it does.", ["True"]])
def test_bool_correct(pred):
    assert score(pred, BOOL_ITEM) == 1.0


@pytest.mark.parametrize("pred", [False, "False", "no", "No, they use a margin-ranking loss.", 1, "maybe", "None"])
def test_bool_wrong_or_unreadable(pred):
    assert score(pred, BOOL_ITEM) == 0.0


@pytest.mark.parametrize("pred", [7, "7", "7.0", "The answer is 7.", "**7**", "`7`", "[7]", "There are 7 tasks."])
def test_int_correct(pred):
    assert score(pred, INT_ITEM) == 1.0


@pytest.mark.parametrize("pred", [6, "8", "7.5", "seven", "7 or 8", True, "[7, 8]"])
def test_int_near_miss_and_wrong(pred):
    assert score(pred, INT_ITEM) == 0.0


def test_int_tolerance_and_thousands_separator():
    it = item("How many papers are in the corpus?", "An integer.", "eval_int_exact_match", gold=146000, tolerance=500)
    assert score("146,000", it) == 1.0
    assert score("146,400", it) == 1.0
    assert score("147,000", it) == 0.0


@pytest.mark.parametrize("pred", [12.3, "12.3", "12.34", "12.25", "The improvement is 12.3.", "12.3%"])
def test_float_ndigits_correct(pred):
    assert score(pred, FLOAT_ITEM) == 1.0  # 12.25 rounds half-up to 12.3


@pytest.mark.parametrize("pred", ["12.2", "12.4", "12.35", "1.23", "twelve", "[12.3, 12.4]"])
def test_float_ndigits_near_miss(pred):
    assert score(pred, FLOAT_ITEM) == 0.0


def test_float_tolerance_and_default_exactness():
    assert score("0.845", FLOAT_TOL_ITEM) == 1.0
    assert score("0.83", FLOAT_TOL_ITEM) == 1.0
    assert score("0.82", FLOAT_TOL_ITEM) == 0.0
    exact = item("What is the dropout rate?", "A float.", "eval_float_exact_match", gold=0.1)
    assert score(0.1, exact) == 1.0
    assert score(0.1 + 0.2 - 0.2, exact) == 1.0  # float noise
    assert score("0.11", exact) == 0.0


# -- strings -----------------------------------------------------------------------------------


@pytest.mark.parametrize("pred", ["SciBERT", "scibert", "'SciBERT'", '"SciBERT".', "SciBERT.", "['SciBERT']", "Answer: SciBERT"])
def test_string_exact_correct(pred):
    assert score(pred, STRING_ITEM) == 1.0


@pytest.mark.parametrize("pred", ["SciBERT-base", "BERT", "Sci BERT", "['SciBERT', 'BERT']", ""])
def test_string_exact_near_miss(pred):
    assert score(pred, STRING_ITEM) == 0.0


def test_string_case_and_blank_options():
    strict = item("Model?", "A string.", "eval_string_exact_match", gold="SciBERT")
    assert score("scibert", strict) == 0.0
    assert score("scibert", item("Model?", "A string.", "eval_string_exact_match", gold="SciBERT", ignore_case=True)) == 1.0
    assert score("Pop QA", STRING_BLANK_ITEM) == 1.0
    assert score("Pop QA", STRING_ITEM | {"evaluator": {"eval_func": "eval_string_exact_match", "eval_kwargs": {"gold": "PopQA"}}}) == 0.0


def test_bare_string_vs_one_element_list_gold():
    one = item("Which encoder?", "A string.", "eval_string_exact_match", gold=["SciBERT"])
    assert score("SciBERT", one) == 1.0
    struct = item("Which encoder?", "A list of one string.", "eval_structured_object_exact_match", gold=["SciBERT"])
    assert score("SciBERT", struct) == 1.0
    assert score("['SciBERT']", struct) == 1.0
    assert score("BERT", struct) == 0.0
    scalar_gold = item("Which encoder?", "A string.", "eval_structured_object_exact_match", gold="SciBERT")
    assert score(["SciBERT"], scalar_gold) == 1.0


def test_string_gold_with_alternatives_is_a_spec_error():
    bad = item("Which encoder?", "A string.", "eval_string_exact_match", gold=["SciBERT", "BERT"])
    outcome = evaluate_item("SciBERT", bad)
    assert outcome.score == 0.0 and "eval_element_included" in outcome.error


@pytest.mark.parametrize(
    "pred",
    [
        "Explaining Transformers Decisions by Propagating Token Decomposition",
        "explaining transformer decisions by propagating token decomposition",  # near miss, within 90
        "Explaining Transformers' Decisions by Propagating Token Decompositions.",
    ],
)
def test_fuzzy_correct_and_near(pred):
    assert score(pred, FUZZY_ITEM) == 1.0


@pytest.mark.parametrize("pred", ["Decomposition-based explanations", "DecompX", "Attention rollout for transformers"])
def test_fuzzy_wrong(pred):
    assert score(pred, FUZZY_ITEM) == 0.0


def test_fuzzy_methods_and_fractional_threshold():
    gold = "Language-agnostic BERT Sentence Embedding"
    partial = item("Which model?", "A string.", "eval_string_fuzzy_match", gold=gold, fuzz_method="partial_ratio", threshold=0.9)
    assert score("We use the Language-agnostic BERT Sentence Embedding model", partial) == 1.0
    ratio = item("Which model?", "A string.", "eval_string_fuzzy_match", gold=gold, fuzz_method="ratio", threshold=0.9)
    assert score("We use the Language-agnostic BERT Sentence Embedding model", ratio) == 0.0
    token_sort = item("Which model?", "A string.", "eval_string_fuzzy_match", gold=gold, fuzz_method="token_sort_ratio", threshold=95)
    assert score("BERT Sentence Embedding Language-agnostic", token_sort) == 1.0
    outcome = evaluate_item("x", item("?", "A string.", "eval_string_fuzzy_match", gold=gold, fuzz_method="levenshtein"))
    assert outcome.error and "fuzz_method" in outcome.error


# -- structured objects ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pred",
    [
        ["SCG-NLI", "false"],
        '["SCG-NLI", "False"]',
        "['scg-nli', False]",  # Python bool against the string "false"
        "```json\n[\"SCG-NLI\", false]\n```",
        "The answer is ['SCG-NLI', 'false'].",
        ("SCG-NLI", "false"),
    ],
)
def test_structured_listing3_correct(pred):
    assert score(pred, STRUCT_ITEM) == 1.0


@pytest.mark.parametrize(
    "pred", [["false", "SCG-NLI"], ["SCG-NLI", "true"], ["SCG NLI", "false"], ["SCG-NLI"], "SCG-NLI", ["SCG-NLI", "false", "x"]]
)
def test_structured_listing3_near_miss(pred):
    assert score(pred, STRUCT_ITEM) == 0.0


def test_structured_order_numbers_and_dicts():
    assert score('["pubmed", "squality"]', STRUCT_ORDERLESS_ITEM) == 1.0
    assert score('["PubMed", "arXiv"]', STRUCT_ORDERLESS_ITEM) == 0.0
    assert score('["PubMed", "PubMed"]', STRUCT_ORDERLESS_ITEM) == 0.0  # multiset, not set
    assert score('{"citations": 26700000, "papers": 146000}', STRUCT_DICT_ITEM) == 1.0
    assert score({"papers": "146000", "citations": 26700000.0}, STRUCT_DICT_ITEM) == 1.0
    assert score({"papers": 146000}, STRUCT_DICT_ITEM) == 0.0
    assert score({"papers": 146000, "citations": 2670000}, STRUCT_DICT_ITEM) == 0.0
    nested = item(
        "Give (dataset, F1) pairs for the two best systems.",
        "A Python list of [string, float] pairs, F1 rounded to 1 decimal.",
        "eval_structured_object_exact_match",
        gold=[["SciFact", 72.4], ["FEVER", 88.1]],
        ndigits=1,
        ignore_order=True,
    )
    assert score("[['FEVER', 88.14], ['SciFact', 72.4]]", nested) == 1.0
    assert score("[['FEVER', 88.2], ['SciFact', 72.4]]", nested) == 0.0


# -- sets --------------------------------------------------------------------------------------


def test_element_included():
    assert score("acl 2023", ELEMENT_ITEM) == 1.0
    assert score("['ACL']", ELEMENT_ITEM) == 1.0
    assert score("EMNLP 2023", ELEMENT_ITEM) == 0.0
    assert score("['ACL', 'EMNLP']", ELEMENT_ITEM) == 0.0  # one element expected
    typed = item("Which year?", "An integer.", "eval_element_included", gold=["2022", "2023"], element_type="int")
    assert score("2023", typed) == 1.0
    assert score(2021, typed) == 0.0
    fuzzy = item("Which venue?", "A string.", "eval_element_included", gold=["Association for Computational Linguistics"],
                 fuzz_method="token_set_ratio", threshold=90)
    assert score("the Association for Computational Linguistics", fuzzy) == 1.0
    pairs = item("Which (model, size) pair?", "A Python list [name, params in millions].", "eval_element_included",
                 gold=[["BERT-base", 110], ["BERT-large", 340]], lowercase=True)
    assert score("['bert-large', 340]", pairs) == 1.0
    assert score("['bert-large', 110]", pairs) == 0.0


def test_element_list_included():
    assert score('["Classification", "Recommendation"]', LIST_INCLUDED_ITEM) == 1.0
    assert score("citation prediction", LIST_INCLUDED_ITEM) == 1.0  # bare value = one-element list
    assert score('["classification", "summarization"]', LIST_INCLUDED_ITEM) == 0.0
    assert score(["Classification ", "user  activity"], LIST_INCLUDED_ITEM) == 1.0


@pytest.mark.parametrize("pred", ["[]", [], "", None, "   "])
def test_element_list_included_empty_prediction_scores_zero(pred):
    assert score(pred, LIST_INCLUDED_ITEM) == 0.0


def test_element_list_overlap():
    assert score("['bm25', 'Contriever', 'DPR']", OVERLAP_ITEM) == 1.0
    assert score("['BM25', 'DPR', 'ColBERT']", OVERLAP_ITEM) == 0.0  # one hit, two needed
    assert score("['BM25', 'BM25']", OVERLAP_ITEM) == 0.0  # repeats count once
    assert score("[]", OVERLAP_ITEM) == 0.0
    one = item("Any retriever?", "A list of strings.", "eval_element_list_overlap", gold=["BM25", "Contriever"])
    assert score("['DPR', 'Contriever']", one) == 1.0
    too_many = item("?", "A list.", "eval_element_list_overlap", gold=["a"], count=2)
    assert "count" in evaluate_item(["a"], too_many).error


# -- retrieval ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pred",
    [
        "Multi-Level Knowledge Distillation for Out-of-Distribution Detection in Text",
        "multi-level knowledge distillation for out-of-distribution detection in text.",
        '"Multi-Level Knowledge Distillation for Out-of-Distribution Detection in Text"',
        "Title: Multi-Level Knowledge Distilation for Out-of-Distribution Detection in Text",  # typo
        "['Multi-Level Knowledge Distillation for Out-of-Distribution Detection in Text']",
    ],
)
def test_paper_relevance_correct(pred):
    assert score(pred, RETRIEVAL_ITEM) == 1.0


@pytest.mark.parametrize(
    "pred",
    [
        "Knowledge Distillation for Out-of-Distribution Detection",  # a different (shorter) title
        "Multi-Level Knowledge Distillation for Anomaly Detection in Images",
        "Out-of-Distribution Detection in Text",
        # listing an extra wrong paper is not rewarded
        "['Multi-Level Knowledge Distillation for Out-of-Distribution Detection in Text', 'Deep Anomaly Detection with Outlier Exposure']",
        "[]",
    ],
)
def test_paper_relevance_wrong(pred):
    assert score(pred, RETRIEVAL_ITEM) == 0.0


def test_paper_relevance_with_several_references():
    it = item(
        "Find a paper that builds a citation-informed transformer for scientific documents.",
        "Your answer should be the title of the paper WITHOUT ANY EXPLANATION.",
        "eval_paper_relevance_with_reference_answer",
        reference_answer=[
            "SPECTER: Document-level Representation Learning using Citation-informed Transformers",
            "SciNCL: Neighborhood Contrastive Learning for Scientific Document Representations",
        ],
    )
    assert score("SPECTER: Document-level Representation Learning using Citation-informed Transformers", it) == 1.0
    assert score("SciNCL: Neighborhood Contrastive Learning for Scientific Document Representations", it) == 1.0
    assert score("SciBERT: A Pretrained Language Model for Scientific Text", it) == 0.0
    assert normalize_title("  Title: “SPECTER”: Document-level  ") == "specter document level"


# -- kwargs handling and errors ----------------------------------------------------------------


def test_misspelled_kwargs_are_normalised_with_a_warning(caplog):
    it = item("How much?", "A float with one decimal.", "eval_float_exact_match", gold=12.3, nidigits=1)
    with pytest.warns(EvalKwargWarning, match="nidigits"):
        outcome = evaluate_item("12.34", it)
    assert outcome.score == 1.0 and outcome.error is None
    formula = item("Formula?", "LaTeX.", "eval_complex_math_formula_with_llm", fomulas=["E = mc^2"])
    with pytest.warns(EvalKwargWarning, match="fomulas"):
        assert evaluate_item("$E = mc^2$", formula).score == 1.0  # identical: no judge needed


def test_unknown_function_is_an_error_outcome_not_an_exception():
    outcome = evaluate("42", {"eval_func": "eval_integer_exact_match", "eval_kwargs": {"gold": 42}})
    assert isinstance(outcome, EvalOutcome) and outcome.score == 0.0
    assert "unknown evaluation function" in outcome.error and "eval_int_exact_match" in outcome.error
    assert "not supported" in evaluate("x", {"eval_func": "eval_m3sciqa", "eval_kwargs": {}}).error


@pytest.mark.parametrize(
    "evaluator, fragment",
    [
        ({"eval_func": "eval_int_exact_match", "eval_kwargs": {"gold": 7, "ignore_ordr": True}}, "unknown kwarg"),
        ({"eval_func": "eval_int_exact_match", "eval_kwargs": {}}, "missing required"),
        ({"eval_func": "eval_int_exact_match", "eval_kwargs": {"gold": "seven"}}, "gold must be an integer"),
        ({"eval_func": "eval_float_exact_match", "eval_kwargs": {"gold": 1.0, "ndigits": "two"}}, "ndigits"),
        ({"eval_func": "eval_float_exact_match", "eval_kwargs": {"gold": 1.0, "tolerance": -1}}, "tolerance"),
        ({"eval_func": "eval_structured_object_exact_match", "eval_kwargs": {"gold": [1], "ignore_order": "sometimes"}}, "ignore_order"),
        ({"eval_func": "eval_element_list_included", "eval_kwargs": {"gold": [], "element_type": "str"}}, "non-empty"),
        ({"eval_func": "eval_element_included", "eval_kwargs": {"gold": ["a"], "element_type": "tensor"}}, "element_type"),
        ({"eval_func": "eval_conjunction", "eval_kwargs": {"eval_func_list": ["eval_int_exact_match"], "eval_kwargs_list": []}}, "eval_kwargs_list"),
        ({"eval_func": "eval_int_exact_match", "eval_kwargs": [7]}, "eval_kwargs must be a dict"),
        ({"eval_kwargs": {"gold": 7}}, "no eval_func"),
        ("not json", "not valid JSON"),
        (None, "must be a dict"),
        ({"eval_func": "eval_int_exact_match", "eval_kwargs": {"gold": 7, "judge": "gpt-4"}}, "not an eval kwarg"),
    ],
)
def test_malformed_evaluators_are_error_outcomes(evaluator, fragment):
    outcome = evaluate("7", evaluator)
    assert outcome.score == 0.0 and outcome.error and fragment in outcome.error


def test_spec_errors_are_reported_even_for_empty_predictions():
    outcome = evaluate("", {"eval_func": "eval_int_exact_match", "eval_kwargs": {"gold": 7, "bogus": 1}})
    assert outcome.error and "bogus" in outcome.error
    ok = evaluate("", {"eval_func": "eval_int_exact_match", "eval_kwargs": {"gold": 7}})
    assert ok.error is None and ok.score == 0.0


def test_evaluator_as_json_text():
    assert evaluate("7", json.dumps(INT_ITEM["evaluator"])).score == 1.0


# -- logical combinators -----------------------------------------------------------------------

CONJ_ITEM = item(
    "What is the best baseline on SciDocs and its average score?",
    "Your answer should be a Python list: [model name (string), average score (float, one decimal)].",
    "eval_conjunction",
    eval_func_list=["eval_string_exact_match", "eval_float_exact_match"],
    eval_kwargs_list=[{"gold": "SciBERT", "lowercase": True}, {"gold": 59.6, "ndigits": 1}],
)


def test_conjunction_elementwise():
    assert score("['scibert', 59.62]", CONJ_ITEM) == 1.0
    assert score(["SciBERT", "59.6"], CONJ_ITEM) == 1.0
    assert score("['SciBERT', 60.1]", CONJ_ITEM) == 0.0
    assert score("['BERT', 59.6]", CONJ_ITEM) == 0.0
    assert score("SciBERT", CONJ_ITEM) == 0.0  # not a pair: each sub-evaluation sees the whole answer


def test_disjunction_whole_prediction_alternatives_and_elementwise():
    alternatives = item(
        "Which optimiser is used?",
        "A string.",
        "eval_disjunction",
        eval_func_list=["eval_string_exact_match", "eval_string_fuzzy_match"],
        eval_kwargs_list=[{"gold": "AdamW", "lowercase": True}, {"gold": "Adam with decoupled weight decay", "threshold": 85}],
    )
    assert score("adamw", alternatives) == 1.0
    assert score("Adam with decoupled weight-decay", alternatives) == 1.0
    assert score("SGD", alternatives) == 0.0
    pair = item(
        "Give either the dataset size or the vocabulary size.",
        "A list of two integers; at least one must be right.",
        "eval_disjunction",
        eval_func_list=["eval_int_exact_match", "eval_int_exact_match"],
        eval_kwargs_list=[{"gold": 1000}, {"gold": 30522}],
    )
    assert score("[999, 30522]", pair) == 1.0
    assert score("[999, 30000]", pair) == 0.0


def test_negation_and_nesting():
    not_bert = item(
        "Which encoder is NOT used as a baseline? Answer with a model that is not BERT.",
        "A string.",
        "eval_negation",
        eval_func="eval_string_exact_match",
        eval_kwargs={"gold": "BERT", "lowercase": True},
    )
    assert score("SciBERT", not_bert) == 1.0
    assert score("bert", not_bert) == 0.0
    assert score("", not_bert) == 0.0  # no answer never passes a negation
    nested = item(
        "Name the dataset and say whether it is public; the dataset must not be PubMed.",
        "A Python list: [dataset name, boolean].",
        "eval_conjunction",
        eval_func_list=["eval_conjunction", "eval_bool_exact_match"],
        eval_kwargs_list=[
            {
                "eval_func_list": ["eval_element_included", "eval_negation"],
                "eval_kwargs_list": [
                    {"gold": ["SQuALITY", "PubMed", "arXiv"], "lowercase": True},
                    {"eval_func_list": ["eval_string_exact_match"], "eval_kwargs_list": [{"gold": "PubMed", "lowercase": True}]},
                ],
                "elementwise": False,
            },
            {"gold": True},
        ],
    )
    assert score("['SQuALITY', True]", nested) == 1.0
    assert score("['PubMed', True]", nested) == 0.0  # fails the inner negation
    assert score("['SQuALITY', False]", nested) == 0.0
    assert score("['Wikipedia', True]", nested) == 0.0


def test_negation_of_an_error_is_an_error_not_a_pass():
    it = item("?", "A string.", "eval_negation", eval_func="eval_no_such_function", eval_kwargs={"gold": "x"})
    outcome = evaluate_item("y", it)
    assert outcome.score == 0.0 and "eval_no_such_function" in outcome.error
    conj = item("?", "A list.", "eval_conjunction", eval_func_list=["eval_int_exact_match", "eval_int_exact_match"],
                eval_kwargs_list=[{"gold": 1}, {"gold": 2, "nope": 0}])
    outcome = evaluate_item("[1, 2]", conj)
    assert outcome.score == 0.0 and "nope" in outcome.error and "[1]" in outcome.error


# -- LLM-judged functions ----------------------------------------------------------------------


@dataclass
class Reply:
    text: str
    prompt_tokens: int = 100
    completion_tokens: int = 20


class ScriptedJudgeLLM:
    """A chat LLM that returns canned replies in order and records what it was asked."""

    model = "scripted-judge"
    temperature = 0.0

    def __init__(self, *replies):
        self.replies = list(replies)
        self.requests: list[dict] = []

    def chat(self, messages, *, json_schema=None, max_tokens=None):
        self.requests.append({"messages": messages, "json_schema": json_schema, "max_tokens": max_tokens})
        reply = self.replies.pop(0)
        return Reply(reply if isinstance(reply, str) else json.dumps(reply))

    @property
    def prompt_text(self) -> str:
        return "\n".join(m["content"] for r in self.requests for m in r["messages"])


REF_ITEM = item(
    "Why does PopQA find that retrieval augmentation helps more for less popular entities?",
    "Your answer should be a short paragraph.",
    "eval_reference_answer_with_llm",
    tags=["single", "text", "subjective"],
    reference_answer="Because LMs memorise facts about popular entities well, but struggle with long-tail entities, "
    "so non-parametric memory from retrieval fills the gap for the less popular ones.",
)
POINTS_ITEM = item(
    "What are the main limitations of the LongEval guidelines discussed in the paper?",
    "Your answer should be a short paragraph.",
    "eval_scoring_points_with_llm",
    tags=["single", "text", "subjective"],
    scoring_points=[
        "Annotating long summaries is costly and slow.",
        "Fine-grained annotation may lower inter-annotator agreement on some dimensions.",
        "The study covers only English summarization datasets.",
    ],
)
PARTIAL_ITEM = item(
    POINTS_ITEM["question"],
    "Your answer should be a short paragraph.",
    "eval_partial_scoring_points_with_llm",
    tags=["single", "text", "subjective"],
    scoring_points=POINTS_ITEM["evaluator"]["eval_kwargs"]["scoring_points"],
    count=2,
)
FORMULA_ITEM = item(
    "What is the SPECTER triplet margin loss?",
    "Your answer should be a LaTeX formula.",
    "eval_complex_math_formula_with_llm",
    tags=["single", "formula", "subjective"],
    formulas=r"\mathcal{L} = \max\{ d(P^Q, P^+) - d(P^Q, P^-) + m, 0 \}",
)


def test_reference_answer_with_llm_prompt_verdict_and_cache(tmp_path):
    llm = ScriptedJudgeLLM({"reasoning": "Same explanation.", "correct": True})
    judge = Judge(llm, cache_dir=tmp_path)
    answer = "LMs memorise popular entities, while long-tail ones are not memorised, so retrieval helps there."
    outcome = evaluate_item(answer, REF_ITEM, judge=judge)
    assert outcome.score == 1.0 and outcome.detail == "Same explanation."
    asked = llm.prompt_text
    assert REF_ITEM["question"] in asked
    assert REF_ITEM["evaluator"]["eval_kwargs"]["reference_answer"] in asked
    assert answer in asked
    assert llm.requests[0]["json_schema"]["required"] == ["reasoning", "correct"]
    # the same question again: served from the cache, no second LLM call
    assert evaluate_item(answer, REF_ITEM, judge=judge).score == 1.0
    assert len(llm.requests) == 1 and judge.cache_hits == 1
    # a new judge over the same cache directory reuses the stored verdict too
    other = ScriptedJudgeLLM()
    assert evaluate_item(answer, REF_ITEM, judge=Judge(other, cache_dir=tmp_path)).score == 1.0
    assert other.requests == []
    # a different model name is a different cache key
    fresh = ScriptedJudgeLLM({"reasoning": "Contradicts.", "correct": False})
    assert evaluate_item(answer, REF_ITEM, judge=Judge(fresh, model_name="other-model", cache_dir=tmp_path)).score == 0.0
    assert len(fresh.requests) == 1


def test_reference_answer_shortcuts_and_failures():
    gold = REF_ITEM["evaluator"]["eval_kwargs"]["reference_answer"]
    assert evaluate_item(gold, REF_ITEM).score == 1.0  # identical: no judge needed
    assert evaluate_item("", REF_ITEM).score == 0.0
    no_judge = evaluate_item("Because of popularity.", REF_ITEM)
    assert no_judge.score == 0.0 and "judge" in no_judge.error
    garbage = ScriptedJudgeLLM("I think it is correct!")
    outcome = evaluate_item("Because of popularity.", REF_ITEM, judge=Judge(garbage))
    assert outcome.score == 0.0 and "not a JSON object" in outcome.error
    wrong_shape = ScriptedJudgeLLM({"verdict": "yes"})
    outcome = evaluate_item("Because of popularity.", REF_ITEM, judge=Judge(wrong_shape))
    assert outcome.score == 0.0 and "correct" in outcome.error
    # a failed parse is not cached: the next attempt asks again
    retry = ScriptedJudgeLLM("oops", '```json\n{"reasoning": "ok", "correct": "false"}\n```')
    judge = Judge(retry)
    assert evaluate_item("Because of popularity.", REF_ITEM, judge=judge).error
    assert evaluate_item("Because of popularity.", REF_ITEM, judge=judge).score == 0.0
    assert len(retry.requests) == 2


def test_bare_llm_object_is_wrapped_with_a_memory_cache():
    llm = ScriptedJudgeLLM({"reasoning": "Matches.", "correct": True})
    assert evaluate_item("Popular entities are memorised.", REF_ITEM, judge=llm).score == 1.0
    assert evaluate_item("Popular entities are memorised.", REF_ITEM, judge=llm).score == 1.0
    assert len(llm.requests) == 1


def points(*mentioned):
    return {"points": [{"index": i, "reasoning": "r", "mentioned": m} for i, m in enumerate(mentioned, start=1)]}


def test_scoring_points_with_llm():
    llm = ScriptedJudgeLLM(points(True, True, True), points(True, False, True))
    judge = Judge(llm)
    full = "Annotation is expensive; agreement drops with fine granularity; only English data was studied."
    assert evaluate_item(full, POINTS_ITEM, judge=judge).score == 1.0
    asked = llm.prompt_text
    assert POINTS_ITEM["question"] in asked
    for i, point in enumerate(POINTS_ITEM["evaluator"]["eval_kwargs"]["scoring_points"], start=1):
        assert f"{i}. {point}" in asked
    partial = "Annotation is expensive and only English data was studied."
    outcome = evaluate_item(partial, POINTS_ITEM, judge=judge)
    assert outcome.score == 0.0 and "[2]" in outcome.detail
    bad = ScriptedJudgeLLM(points(True, True))  # two verdicts for three points
    outcome = evaluate_item(full, POINTS_ITEM, judge=Judge(bad))
    assert outcome.score == 0.0 and "3 scoring points" in outcome.error


def test_partial_scoring_points_with_llm():
    llm = ScriptedJudgeLLM(points(True, False, True), points(False, False, True), points(False, True, True))
    judge = Judge(llm)
    assert evaluate_item("costly, English only", PARTIAL_ITEM, judge=judge).score == 1.0
    assert evaluate_item("English only", PARTIAL_ITEM, judge=judge).score == 0.0
    fraction = item(PARTIAL_ITEM["question"], "A paragraph.", "eval_partial_scoring_points_with_llm",
                    scoring_points=PARTIAL_ITEM["evaluator"]["eval_kwargs"]["scoring_points"])
    assert evaluate_item("agreement, English only", fraction, judge=judge).score == pytest.approx(2 / 3)
    too_many = item("?", "?", "eval_partial_scoring_points_with_llm", scoring_points=["a"], count=2)
    assert "count" in evaluate_item("a", too_many, judge=judge).error


def test_complex_math_formula_with_llm():
    llm = ScriptedJudgeLLM({"reasoning": "Same hinge loss.", "equivalent": True}, {"reasoning": "Sign flipped.", "equivalent": False})
    judge = Judge(llm)
    gold = FORMULA_ITEM["evaluator"]["eval_kwargs"]["formulas"]
    assert evaluate_item(f"$${gold}$$", FORMULA_ITEM, judge=judge).score == 1.0  # identical: no call
    assert evaluate_item(r"\mathcal{L}=\max\left\{d(P^Q,P^+)-d(P^Q,P^-)+m,\,0\right\}", FORMULA_ITEM, judge=judge).score == 1.0
    assert llm.requests == []
    equivalent = r"\mathcal{L} = \max(0, m + d(P^Q, P^+) - d(P^Q, P^-))"
    assert evaluate_item(equivalent, FORMULA_ITEM, judge=judge).score == 1.0
    assert gold in llm.prompt_text and equivalent in llm.prompt_text and FORMULA_ITEM["question"] in llm.prompt_text
    assert evaluate_item(r"\mathcal{L} = \max(0, d(P^Q, P^-) - d(P^Q, P^+) + m)", FORMULA_ITEM, judge=judge).score == 0.0
    two = item("Give the encoder and loss formulas.", "A Python list of two LaTeX strings.",
               "eval_complex_math_formula_with_llm", formulas=["h = f(x)", "L = -\\log p"])
    assert evaluate_item(json.dumps(["h = f(x)", "L = -\\log p"]), two).score == 1.0
    assert evaluate_item(json.dumps(["h = f(x)"]), two).score == 0.0


def test_llm_judge_inside_a_combinator_gets_question_and_judge():
    llm = ScriptedJudgeLLM({"reasoning": "Right.", "correct": True})
    it = item(
        "Which dataset does PopQA build, and why does retrieval help?",
        "A Python list: [dataset name, short explanation].",
        "eval_conjunction",
        tags=["single", "text", "subjective"],
        eval_func_list=["eval_string_exact_match", "eval_reference_answer_with_llm"],
        eval_kwargs_list=[{"gold": "PopQA"}, {"reference_answer": "Long-tail entities are not memorised."}],
    )
    assert needs_judge(it["evaluator"]) and not needs_judge(INT_ITEM["evaluator"])
    assert evaluate_item("['PopQA', 'LMs fail on rare entities']", it, judge=Judge(llm)).score == 1.0
    assert it["question"] in llm.prompt_text


def test_judge_prompts_are_packaged_and_versioned():
    for name in ("reference_answer", "scoring_points", "formula"):
        prompt = load_prompt(name)
        assert prompt.version and prompt.system and "{{prediction}}" in prompt.user
    custom = parse_prompt("x", "<!-- version: 7 -->\n<!-- user -->\nQ: {{question}} A: {{prediction}}")
    messages = custom.render({"question": "{{prediction}}", "prediction": "42"})
    assert messages == [{"role": "user", "content": "Q: {{prediction}} A: 42"}]  # values are not re-expanded


def test_judge_from_settings_forces_temperature_zero(tmp_path):
    from neusym.settings import Settings

    settings = Settings(home=tmp_path, llm_temperature=0.7)
    judge = Judge.from_settings(settings)  # offline default; the model is only loaded on first chat()
    assert judge.llm.settings.llm_temperature == 0.0 and settings.llm_temperature == 0.7
    assert judge.model_name == settings.llm_model
    assert judge.cache.path == tmp_path / "judge_cache" / "judge_verdicts.sqlite" and judge.cache.path.exists()


def test_judge_warns_about_nonzero_temperature():
    hot = ScriptedJudgeLLM()
    hot.temperature = 0.7
    with pytest.warns(UserWarning, match="temperature"):
        Judge(hot)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Judge(ScriptedJudgeLLM())


# -- answer parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("['a', 'b']", ["a", "b"]),
        ('["a", "b"]', ["a", "b"]),
        ("```python\n['a', 'b']\n```", ["a", "b"]),
        ("The answer is 42.", 42),
        ("Final answer: True", True),
        ("true", True),
        ("null", None),
        ("('x', 1)", ["x", 1]),
        ("The models are ['BERT', 'GPT-2'] in that order", ["BERT", "GPT-2"]),
        ("__import__('os').system('echo pwned')", None),  # never evaluated
    ],
)
def test_parse_literal(text, expected):
    value = parse_literal(text)
    if text.startswith("__import__"):
        assert not isinstance(value, (int, list))
    else:
        assert value == expected


def test_number_and_text_cleanup():
    assert clean_text("**`0.5`**") == "0.5"
    assert coerce_number("85.3%") == 85.3
    assert coerce_number("GPT-4 scores 42") is None  # two numbers: ambiguous
    assert coerce_number("roughly 1,024 tokens") == 1024
