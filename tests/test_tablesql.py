"""Table questions through SQL (neusym/query/answer/table_query.py) on a real table of a sample PDF:
Table 1 of the Semantic Scholar literature-graph paper (page 3, ScienceParse's precision / recall / F1
per metadata field), read by hand from the PDF: title 85.5 (the lowest F1), authors 92.1, year 97.3."""

from __future__ import annotations

import json
import time

import pymupdf
import pytest

from neusym.settings import Settings

from neusym.query.agent.actions import Environment
from neusym.query.answer.table_query import TableRelation, bound_sql, closest_name, link_names, load_relation
from neusym.query.ask import ask

from .conftest import REPO, SAMPLES
from .test_agent import ScriptedLLM

GRAPH_PDF = SAMPLES / "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"
QUESTION = ("In its table of metadata extraction results, which field does the ScienceParse system extract with "
            "the lowest F1, and what is that F1?")
#: The same question without the word "table": it names the table's rows and columns only.
UNNAMED = "Which metadata field does the ScienceParse system extract with the lowest F1, and what is that F1?"
FORMAT = "Your answer should be a Python list of two elements: [field name as a string, F1 as a float]."


@pytest.fixture(scope="module")
def sql_settings(corpus_settings):
    return corpus_settings


@pytest.fixture
def cells_form():
    """The table shown as one row per data cell (``FocusedConfig.table_form`` "cells"), the form before "wide"."""
    from neusym.query.answer.config import FocusedConfig, using

    with using(FocusedConfig(table_form="cells")):
        yield


@pytest.fixture(scope="module")
def graph(corpus_settings):
    with Environment(corpus_settings) as env:
        pid = env.query("SELECT paper_id::VARCHAR FROM metadata WHERE title LIKE 'Construction of the Literature%'")[0][0]
        table_id = env.query("SELECT table_id::VARCHAR FROM tables WHERE ref_paper_id = ?::UUID AND page_number = 3 "
                             "AND table_caption LIKE 'Table 1:%'", [pid])[0][0]
    return pid, table_id


def test_the_hand_read_numbers_are_on_the_page():
    with pymupdf.open(GRAPH_PDF) as doc:
        page3 = " ".join(doc[2].get_text().split())
    assert "Table 1: Results of the ScienceParse system." in page3
    assert "title 85.5 85.5 85.5" in page3 and "authors 92.1 92.1 92.1" in page3


def test_the_model_sees_the_table_as_a_relation_and_its_query_runs_bound_to_that_table(corpus_settings, graph):
    _, table_id = graph
    with Environment(corpus_settings) as env:
        rel = load_relation(env, table_id)
        assert rel is not None and "F1" in rel.headers and {"title", "authors"} <= set(rel.rows)
        rows = env.run_sql(bound_sql("SELECT row_name, value FROM cells WHERE column_name = 'F1' "
                                     "ORDER BY value LIMIT 1", table_id)).rows
        assert rows == [("title", 85.5)]
        # the query's own WITH is merged with the binding; other tables of the corpus stay out of cells
        rows = env.run_sql(bound_sql("WITH f AS (SELECT * FROM cells WHERE column_name = 'F1') "
                                     "SELECT count(DISTINCT row_name) FROM f", table_id)).rows
        assert rows[0][0] == len([r for r in rel.rows if any(c[1] == r and c[2] == "F1" for c in rel.cells)])
        assert load_relation(env, "00000000-0000-0000-0000-000000000000") is None
        assert load_relation(env, "'; DROP TABLE tables; --") is None


def test_names_the_model_shortens_are_linked_to_the_listed_ones():
    rel = TableRelation("t", "Table 1", ["Citation prediction / Cite / MAP", "Citation prediction / Co-Cite / MAP",
                                         "Classification / MAG / F1"], ["SPECTER (Ours)", "SGC (2019a)", "Random"])
    linked = link_names("SELECT row_name, value FROM cells WHERE column_name = 'Cite / MAP' "
                        "AND row_name <> 'SPECTER' ORDER BY value DESC LIMIT 1", rel)
    assert "'Citation prediction / Cite / MAP'" in linked and "'SPECTER (Ours)'" in linked
    assert "'SGC (2019a)'" in link_names("SELECT value FROM cells WHERE row_name IN ('sgc', 'Random')", rel)
    assert closest_name("MAG F1", rel.headers) == "Classification / MAG / F1"
    assert closest_name("BLEU", rel.headers) is None
    assert link_names("not sql at all (", rel) == "not sql at all ("  # runs as written, fails there


def test_a_table_question_is_answered_by_the_query_the_model_writes(sql_settings, graph, cells_form):
    pid, _ = graph
    sql = {"sql": "SELECT row_name, value FROM cells WHERE column_name = 'f1' ORDER BY value ASC LIMIT 1"}
    llm = ScriptedLLM([sql])
    result = ask(QUESTION, settings=sql_settings, llm=llm, method="auto", answer_format=FORMAT, paper_ids=[pid])
    prompt = llm.requests[0]["messages"][0]["content"]
    assert "CREATE TABLE cells" in prompt and "'F1'" in prompt and "'title'" in prompt
    step = next(s for s in result.trajectory if s.action == "RetrieveFromDatabase")
    assert "'F1'" in step.arguments["sql"]  # 'f1' linked to the listed header
    assert step.observation == "row_name = title; value = 85.5"
    # one row of two values for "a list of two elements": the rows are the answer, no answer call
    assert result.answer == ["title", 85.5] and len(llm.requests) == 1
    check = result.verification["checks"][0]
    assert check["kind"] == "sql" and check["ok"] is True and result.verification["status"] == "pass"
    assert (result.citations[0]["table_name"], result.citations[0]["page_number"]) == ("tables", 3)


def test_rows_of_another_shape_are_the_first_evidence_of_the_answer_call(sql_settings, graph, cells_form):
    pid, _ = graph
    sql = {"sql": "SELECT row_name, value FROM cells WHERE column_name = 'F1' ORDER BY value ASC LIMIT 2"}
    answer = {"answer": "The title field, with an F1 of 85.5.", "evidence": [1]}
    llm = ScriptedLLM([sql, answer, answer])
    result = ask(QUESTION, settings=sql_settings, llm=llm, method="auto", paper_ids=[pid],
                 answer_format="Your answer should be one short sentence of plain text.")
    first = llm.requests[1]["messages"][1]["content"].split("[Evidence]:\n", 1)[1].split("\n")[0]
    assert "Computed by SQL over Table 1: Results of the ScienceParse system." in first
    assert "row_name = title; value = 85.5 | row_name = " in first
    assert result.answer == "The title field, with an F1 of 85.5."
    assert result.verification["checks"][0]["kind"] == "sql" and result.verification["checks"][0]["ok"] is True


def test_a_query_that_fails_is_repaired_once_with_the_database_message(sql_settings, corpus_settings, graph, cells_form):
    pid, _ = graph
    writes = {"sql": "DELETE FROM cells"}
    wrong_table = {"sql": "SELECT row_name FROM results ORDER BY value LIMIT 1"}
    answer = {"answer": ["title", 85.5], "evidence": [1]}
    llm = ScriptedLLM([writes, wrong_table, answer, answer])
    result = ask(QUESTION, settings=sql_settings, llm=llm, method="auto", answer_format=FORMAT, paper_ids=[pid])
    assert "A previous query failed: DELETE FROM cells" in llm.requests[1]["messages"][0]["content"]
    step = next(s for s in result.trajectory if s.action == "RetrieveFromDatabase")
    assert step.observation.startswith("(query failed:")
    # both queries failed: the answer call reads the retrieved evidence as it is, without a computed line
    assert "Computed by SQL" not in llm.requests[2]["messages"][1]["content"]
    with Environment(corpus_settings) as env:  # nothing was written
        assert env.query("SELECT count(*) FROM table_cells")[0][0] > 0


def test_tables_are_answered_through_sql_by_default_and_the_old_menu_is_refused(corpus_settings, graph, monkeypatch):
    """No setting needed: the focused route queries the table's cells. The operation menu that was
    the default before is gone; a setting still naming it fails closed instead of being ignored."""
    pid, _ = graph
    llm = ScriptedLLM([{"sql": "SELECT row_name, F1 FROM t ORDER BY F1 LIMIT 1"}])
    result = ask(QUESTION, settings=corpus_settings, llm=llm, method="auto", answer_format=FORMAT, paper_ids=[pid])
    assert "CREATE TABLE t (" in llm.requests[0]["messages"][0]["content"]
    assert result.answer == ["title", 85.5]
    assert [s.action for s in result.trajectory] == ["RetrieveFromVectorstore", "RetrieveFromDatabase"]
    monkeypatch.setenv("NEUSYM_TABLE_ANSWER", "operations")
    with pytest.raises(ValueError, match="NEUSYM_TABLE_ANSWER is no longer a setting"):
        Settings()


def test_a_looked_up_cell_is_the_answer_when_the_query_names_its_row(sql_settings, graph, cells_form):
    """The offline model selects the row name beside the one value asked for: the value is the answer
    (before, the two columns went to the answer call, which read the neighbouring value)."""
    pid, _ = graph
    question = "In the table of ScienceParse results, what F1 does the system reach on the authors field?"
    llm = ScriptedLLM([{"sql": "SELECT row_name, value FROM cells WHERE column_name = 'F1' AND row_name = 'authors'"}])
    result = ask(question, settings=sql_settings, llm=llm, method="auto", paper_ids=[pid],
                 answer_format="Your answer should be a float rounded to 1 decimal place.")
    assert "CREATE TABLE cells" in llm.requests[0]["messages"][0]["content"]
    assert result.answer == 92.1 and len(llm.requests) == 1
    assert result.verification["checks"][0]["kind"] == "sql" and result.verification["status"] == "pass"


@pytest.mark.slow
def test_the_offline_model_writes_a_query_that_finds_the_lowest_f1(corpus_settings, graph, monkeypatch):
    """The offline coder model (Qwen2.5-Coder-1.5B) on the real table: its query gives the row."""
    from neusym.llm.chat import LocalLlamaLLM
    from neusym.llm.model_files import offline_model_path
    from neusym.query.answer.table_query import query_table

    monkeypatch.setenv("NEUSYM_HOME", str(REPO / ".neusym"))  # the model files shared with the demo
    llm = LocalLlamaLLM(corpus_settings, model_path=offline_model_path(corpus_settings.model_copy(
        update={"home": REPO / ".neusym"})))
    _, table_id = graph
    started = time.monotonic()
    with Environment(corpus_settings) as env:
        rel = load_relation(env, table_id)
        res = query_table(QUESTION, FORMAT, rel, env, llm)
    assert res.ok, (res.sql, res.error)
    flat = [v for row in res.rows for v in row]
    assert "title" in flat and 85.5 in flat, (res.sql, res.rows)
    assert time.monotonic() - started < 300


def test_a_result_wider_than_the_format_is_shaped_by_dropping_what_the_query_filtered_on(corpus_settings, graph):
    """The offline model often selects the header it filtered on, or the row name beside a single
    value asked for: the rows still carry the answer in the shape the format asks for."""
    from neusym.query.answer.table_query import SqlResult, shaped_result

    _, table_id = graph
    with Environment(corpus_settings) as env:
        def run(sql):
            res = env.run_sql(bound_sql(sql, table_id))
            return SqlResult(sql, list(res.columns), list(res.rows))

        lowest = run("SELECT row_name, column_name, value FROM cells WHERE column_name = 'F1' ORDER BY value LIMIT 1")
        assert lowest.rows == [("title", "F1", 85.5)]
        assert shaped_result(lowest, FORMAT) == ["title", 85.5]
        one = run("SELECT row_name, value FROM cells WHERE column_name = 'F1' AND row_name = 'authors'")
        assert shaped_result(one, "Your answer should be a float rounded to 1 decimal place.") == 92.1
        assert shaped_result(one, "Your answer should be an integer.") is None  # 92.1 is no integer
        assert shaped_result(one, "Your answer should be a string.") is None  # a name and a number: not one string
        two = run("SELECT row_name, value FROM cells WHERE column_name = 'F1' ORDER BY value LIMIT 2")
        assert shaped_result(two, "Your answer should be a float rounded to 1 decimal place.") is None  # which row?
        named = run("SELECT row_name FROM cells WHERE column_name = 'F1' ORDER BY value LIMIT 1")
        assert shaped_result(named, "Your answer should be a string.") == "title"


def test_a_question_names_the_table_whose_rows_and_columns_it_shares_words_with(corpus_settings, graph):
    """The table slot opens when the question names a stored table's row and column (Table 1 of the
    literature-graph paper: rows title, authors, year, ...; columns Precision, Recall, F1), read from
    the table's own labels rather than from wording rules."""
    from neusym.query.answer.focused import tables_the_question_names

    pid, table_id = graph
    with pymupdf.open(GRAPH_PDF) as doc:
        page3 = " ".join(doc[2].get_text().split())
    assert "authors 92.1 92.1 92.1" in page3  # the row and its F1, as printed
    papers = [(pid, "Construction of the Literature Graph in Semantic Scholar")]
    with Environment(corpus_settings) as env:
        assert tables_the_question_names("What F1 does ScienceParse reach on the authors field?", papers, env)[0] == table_id
        # a row without a column (or a column without a row) is not enough, nor is a question about the text
        assert table_id not in tables_the_question_names("Who are the authors of the paper?", papers, env)
        assert tables_the_question_names("How are papers linked to their entities in the graph?", papers, env) == []
        assert tables_the_question_names("What F1 does it reach on the authors field?", [], env) == []


def test_a_question_naming_rows_and_columns_gets_the_table_as_evidence_but_no_query(sql_settings, graph):
    """Sharing words with a table's rows and columns puts the table in the reader's evidence, but only
    a top-ranked table or a question about a table opens the SQL path: opened on the shared words
    alone, it sent text questions to SQL and lost blind answers (results/table_menu_removal.json)."""
    pid, _ = graph
    reply = {"answer": ["title", 85.5], "evidence": [1]}
    llm = ScriptedLLM([reply, reply])  # the answer call, and its repair if the verifier asks for one
    result = ask(UNNAMED, settings=sql_settings, llm=llm, method="auto", answer_format=FORMAT, paper_ids=[pid])
    actions = [s.action for s in result.trajectory]
    assert actions[:2] == ["RetrieveFromVectorstore", "GenerateAnswer"] and "RetrieveFromDatabase" not in actions
    evidence = result.trajectory[0].observation
    assert "ScienceParse" in evidence and "85.5" in evidence  # Table 1's rows are in the evidence
    assert not any("CREATE TABLE" in r["messages"][0]["content"] for r in llm.requests)


def test_the_wide_form_has_one_column_per_header_path_and_runs_bound_to_that_table(corpus_settings, graph):
    """``table_form`` "wide": the same table as t(row_no, row_name, Precision, Recall, F1) — the
    row-label column is row_name, not a column of its own — with its rows listed in the prompt."""
    from neusym.query.answer.table_query import bound_wide_sql, link_wide_names, wide_columns, wide_prompt

    _, table_id = graph
    with Environment(corpus_settings) as env:
        rel = load_relation(env, table_id)
        columns = wide_columns(rel)
        assert [c.name for c in columns if c.numeric][-1] == "F1" and "row_name" not in [c.name for c in columns]
        prompt = wide_prompt(QUESTION, FORMAT, rel)
        assert "CREATE TABLE t (" in prompt and "    F1 DOUBLE" in prompt and "'title', 85.5, 85.5, 85.5)" in prompt
        lowest = link_wide_names('SELECT row_name, `F 1` FROM t ORDER BY "F-1" LIMIT 1', rel)
        assert lowest.count('"F1"') == 2, lowest  # a misspelt header linked to the listed one
        assert env.run_sql(bound_wide_sql(lowest, rel)).rows == [("title", 85.5)]
        # an alias the query defines is not a header to link; the query's own WITH is merged
        gap = link_wide_names('WITH u AS (SELECT row_name, "F1" - "Recall" AS gap FROM t) '
                              'SELECT row_name, gap FROM u WHERE row_name = \'Title\' ORDER BY gap', rel)
        assert "gap" in gap and "'title'" in gap
        assert env.run_sql(bound_wide_sql(gap, rel)).rows == [("title", 0.0)]
        with pytest.raises(ValueError):
            bound_wide_sql("SELECT 1", TableRelation("x'; --", "", [], []))


def test_a_table_question_is_answered_through_the_wide_form_by_default(sql_settings, graph):
    pid, _ = graph
    llm = ScriptedLLM([{"sql": 'SELECT row_name, "F1" FROM t ORDER BY "F1" ASC LIMIT 1'}])
    result = ask(QUESTION, settings=sql_settings, llm=llm, method="auto", answer_format=FORMAT, paper_ids=[pid])
    assert "CREATE TABLE t (" in llm.requests[0]["messages"][0]["content"]
    assert result.answer == ["title", 85.5] and len(llm.requests) == 1
    assert result.verification["checks"][0]["kind"] == "sql" and result.verification["status"] == "pass"
    assert result.verification["basis"] == "queried"  # the rows of the model's query are the answer
