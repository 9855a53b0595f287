"""Typed answer shapes (neusym.query.answer.shapes): a shape asked for in the compact form or as an
object reaches the answer engine as the format it reads back to exactly that shape, through ask(), the
CLI, the HTTP API and the MCP tool; bad shapes are refused naming what is wrong."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from neusym.query.answer.answer_format import shape_of
from neusym.query.answer.focused import answer_schema
from neusym.query.answer.shapes import AnswerShape
from neusym.query.ask import ask

from .test_auto import NoLLM

# compact form -> (Shape the format reading gives, JSON type of the answer schema, list length)
CASES = {
    "text": ("free", None, None),
    "string": ("str", "string", None),
    "integer": ("int", "integer", None),
    "number": ("float", "number", None),
    "number:2": ("float", "number", None),
    "boolean": ("bool", "boolean", None),
    "list": ("list", "array", None),
    "list:3": ("list", "array", 3),
    "list:model,F1": ("list", "array", 2),
}


@pytest.mark.parametrize("compact", sorted(CASES))
def test_every_shape_is_read_back_as_itself(compact):
    shape = AnswerShape.parse(compact)
    assert shape.compact() == compact and AnswerShape.parse(shape.compact()) == shape
    kind, json_type, length = CASES[compact]
    text = shape.format_text()
    got = shape_of(text)
    assert got.kind == kind and got.length == length
    if compact == "number:2":
        assert got.decimals == 2
    answer = answer_schema(text)["properties"]["answer"]
    if json_type is None:
        assert text is None
    else:
        assert answer["type"] == json_type
        if length:
            assert answer["minItems"] == answer["maxItems"] == length
    if compact == "list:model,F1":
        assert "[model, F1]" in text


@pytest.mark.parametrize("compact, words", [
    ("float", "unknown answer shape"), ("list:9", "length"), ("number:two", "whole number"),
    ("integer:3", "takes no argument"), ("list:a[1],b", "brackets"),
])
def test_bad_shapes_are_refused_naming_what_is_wrong(compact, words):
    with pytest.raises(ValueError, match=words):
        AnswerShape.parse(compact)
    with pytest.raises(ValidationError, match="digits applies to kind number only"):
        AnswerShape(kind="integer", digits=2)


def test_ask_with_a_shape_answers_as_with_its_sentence(corpus_settings):
    question = "How many pages does the LongEval paper have?"
    typed = ask(question, settings=corpus_settings, llm=NoLLM(), shape=AnswerShape(kind="integer"))
    worded = ask(question, settings=corpus_settings, llm=NoLLM(), answer_format="Your answer should be a single integer.")
    assert typed.route == worded.route == "symbolic"
    assert typed.answer == worded.answer and isinstance(typed.answer, int) and typed.answer > 0
    with pytest.raises(ValueError, match="not both"):
        ask(question, settings=corpus_settings, llm=NoLLM(), shape=AnswerShape(kind="integer"), answer_format="x")
    with pytest.raises(TypeError, match="AnswerShape"):
        ask(question, settings=corpus_settings, llm=NoLLM(), shape="integer")


def test_the_cli_takes_a_shape_and_refuses_a_bad_one(corpus_settings):
    env_run = {"NEUSYM_HOME": str(corpus_settings.home), "HF_HUB_OFFLINE": "1"}
    import os

    env = {**os.environ, **env_run}
    cmd = [sys.executable, "-c", "from neusym.interfaces.cli import main; main()", "ask",
           "How many pages does the LongEval paper have?", "--json"]
    ok = subprocess.run(cmd + ["--shape", "integer"], env=env, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["route"] == "symbolic" and isinstance(out["answer"], int)
    bad = subprocess.run(cmd + ["--shape", "list:9"], env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --shape:") and "Traceback" not in bad.stderr
