"""Bad input gets a clear one-line error, never a traceback: malformed vector filters and deeply
nested SQL, through the filter parser, the agent (as an observation) and the command line.

The corpus is the small real one of tests/test_agent.py (the bundled 3-page RAG paper, parsed and
published with its cell vectors), so RetrieveFromVectorstore runs on the real cell collection.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from neusym.query.agent.actions import FILTER_HINT, Environment
from neusym.query.agent.react import run_loop
from neusym.interfaces.cli import app
from neusym.errors import ActionError
from neusym.store.cells import MAX_FILTER_NESTING, parse_filter
from neusym.store.vectors import Match

from .test_agent import ScriptedLLM, act, build_corpus
from .test_sqlsafe import nested_subqueries


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(settings, paper_id) of the published one-paper corpus."""
    return build_corpus(tmp_path_factory.mktemp("bad-input-home"))


BAD_FILTERS = [
    # (filter, what the message must say after "filter '<text>': ")
    ("page_number == 'abc'", "page_number expects an integer, got 'abc'"),
    ("page_number in [1, 'two']", "page_number expects an integer, got 'two'"),
    ("page_number == 1.5", "page_number expects an integer, got 1.5"),
    ("page_number <= 1e400", "page_number expects a finite number, got inf"),
    ("page_number == 99999999999999999999999", "page_number 99999999999999999999999 is out of range"),
    ("page_number == -'a'", "page_number expects an integer, got the expression \"-'a'\""),
    ("page_number == True", "page_number expects an integer, got True"),
    ("paper_id == abc", "paper_id expects a value, got the bare word 'abc'; quote text values"),
    ("paper_id == 'abc", "unbalanced quotes: a string is opened but never closed"),
    ('paper_id == "abc\'', "unbalanced quotes: a string is opened but never closed"),
    ("(page_number == 1 and paper_id == 'a'", "unbalanced parentheses: '(' was never closed"),
    ("page_number == 1)", "unbalanced parentheses: unmatched ')'"),
    ("page_number in [1, 2)", "unbalanced parentheses: closing parenthesis ')' does not match opening parenthesis '['"),
    ("title == 'RAG'", "unknown field 'title'; filter fields are paper_id, page_number, primary_key"),
    ("text_content == 'x' and page_number == 1", "unknown field 'text_content'"),
    ("1 == 1", "a comparison needs a field on one side"),
    ("page_number", "'page_number' alone is not a condition"),
    ("paper_id like '%rag%'", "unsupported operator 'like'; use ==, !=, <, <=, >, >=, in [...], not in [...]"),
    ("page_number between 1 and 3", "unsupported operator 'between'"),
    ("page_number => 3", "unsupported operator '=>'"),
    ("page_number <> 3", "unsupported operator '<>'"),
    ("paper_id ~ 1", "unsupported operator '~'"),
    ("paper_id is null", "unsupported operator 'is'"),
    ("paper_id == 'a' & page_number == 2", "unsupported operator '&'; join conditions with and / or"),
    ("paper_id < 'a'", "< only applies to page_number"),
    ("paper_id in 'a'", "'in' expects a list, e.g. paper_id in ['a']"),
    ("page_number == [1, 2]", "a list needs 'in' or 'not in'"),
    ("page_number == 1 and", "not a valid expression"),
    ("(" * 40 + "page_number == 1" + ")" * 40, f"nested too deeply (more than {MAX_FILTER_NESTING} levels of parentheses)"),
    ("(" * 300 + "page_number == 1" + ")" * 300, f"nested too deeply (more than {MAX_FILTER_NESTING} levels of parentheses)"),
    ("not " * 500 + "page_number == 1", f"nested too deeply (more than {MAX_FILTER_NESTING} levels)"),
]


@pytest.mark.parametrize("text,problem", BAD_FILTERS, ids=[f[0][:40] for f in BAD_FILTERS])
def test_malformed_filter_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ActionError) as info:
        parse_filter(text)
    message = str(info.value)
    assert message.startswith("filter '") or message.startswith('filter "'), message
    assert problem in message, message
    assert "\n" not in message and len(message) < 300, message


def test_valid_filters_still_parse() -> None:
    both = parse_filter("paper_id == 'a=b&&c' && page_number = 2")  # aliases apply outside quotes only
    assert both.must[0].must == (Match("paper_id", "a=b&&c"),) and both.must[1].must == (Match("page_number", 2),)
    assert parse_filter("3 >= page_number").must[0].lte == 3
    assert parse_filter("page_number >= 2.5").must[0].gte == 2.5
    assert parse_filter("(" * MAX_FILTER_NESTING + "page_number == 1" + ")" * MAX_FILTER_NESTING) is not None
    assert parse_filter("not " * MAX_FILTER_NESTING + "page_number == 1") is not None
    assert parse_filter("  ") is None


def test_agent_gets_filter_and_nesting_errors_as_observations(corpus) -> None:
    settings, pid = corpus
    llm = ScriptedLLM([
        act("RetrieveFromVectorstore", query="generator", collection_name="text_bm25_en", table_name="chunks",
            column_name="text_content", filter="page_number == 'abc'", limit=3),
        act("RetrieveFromVectorstore", query="generator", collection_name="text_bm25_en", table_name="chunks",
            column_name="text_content", filter=f"(paper_id == '{pid}' and page_number <= 2", limit=3),
        act("RetrieveFromDatabase", sql=nested_subqueries(44)),
        act("RetrieveFromVectorstore", query="generator", collection_name="text_bm25_en", table_name="chunks",
            column_name="text_content", filter=f"paper_id == '{pid}' and page_number <= 2", limit=3),
        act("GenerateAnswer", answer="done"),
    ])
    with Environment(settings) as env:  # the real cell collection of the published version
        result = run_loop("What is the generator?", settings=settings, llm=llm, env=env, method="neusym")
    assert result.answer == "done"
    bad_type, unbalanced, deep, good = result.trajectory[:4]
    assert bad_type.error and bad_type.observation.startswith(
        "[Error]: filter \"page_number == 'abc'\": page_number expects an integer, got 'abc'")
    assert FILTER_HINT in bad_type.observation
    assert unbalanced.error and "unbalanced parentheses: '(' was never closed" in unbalanced.observation
    assert deep.error and deep.observation.startswith(
        "[Error]: refused: SQL nested too deeply (more than 32 levels of parentheses/subqueries: 44 levels")
    assert not good.error and "Top 3 entries of chunks.text_content" in good.observation


def test_cli_sql_and_retrieve_print_one_line_errors(corpus, monkeypatch) -> None:
    settings, _ = corpus
    monkeypatch.setenv("NEUSYM_HOME", str(settings.home))
    monkeypatch.setenv("COLUMNS", "400")  # rich wraps at 80 columns when not on a terminal
    runner = CliRunner()
    deep = runner.invoke(app, ["sql", nested_subqueries(44)])
    assert deep.exit_code == 1, deep.output
    lines = deep.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: refused: SQL nested too deeply (more than 32 levels of parentheses/subqueries: 44 levels"), deep.stderr
    bad = runner.invoke(app, ["retrieve", "generator", "--filter", "page_number == 'abc'"])
    assert bad.exit_code == 2
    lines = bad.stderr.strip().splitlines()
    assert lines == ["error: filter \"page_number == 'abc'\": page_number expects an integer, got 'abc'"], bad.stderr


def test_bad_setting_names_the_variable_and_the_reason(tmp_path):
    """A bad NEUSYM_* variable: one line per bad setting naming it, its value and why; exit 1, no traceback."""
    import os
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NEUSYM_")}, "NEUSYM_HOME": str(tmp_path),
           "NEUSYM_PARSE_WORKERS": "-1", "NEUSYM_CHUNK_TOKENS": "many"}
    done = subprocess.run([sys.executable, "-m", "neusym.interfaces.cli", "status"], env=env, capture_output=True, text=True,
                          timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "invalid setting NEUSYM_PARSE_WORKERS='-1': Input should be greater than or equal to 0" in out
    assert "invalid setting NEUSYM_CHUNK_TOKENS='many': Input should be a valid integer" in out
    assert "Traceback" not in out and "ValidationError" not in out
