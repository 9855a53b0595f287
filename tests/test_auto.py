"""Method auto (issue H): the router's routes, the verifier's pass / fail / repair, citations that point at real
cells, and the time and size budgets of CalculateExpr, SQL and the agent run.

Everything runs on the ingested sample corpus (``corpus_settings``) with a scripted LLM where an LLM is
involved, so behaviour is exact; expected values come from the PDFs themselves (PyMuPDF text), not from
the code under test.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata

import pymupdf
import pytest

from neusym.query.agent.actions import Environment
from neusym.query.answer.focused import table_rows_text
from neusym.query.answer.paper_search import search_filters
from neusym.query.answer.router import features
from neusym.query.answer.router import route_question
from neusym.query.ask import ask
from neusym.query.answer.symbolic import parse_intent
from neusym.query.answer.verify import verify
from neusym.query.calc import calculate
from neusym.errors import ActionError
from neusym.query.sqlsafe import run_readonly_sql
from neusym.store.versions import current_db

from .conftest import SAMPLES
from .test_agent import ScriptedLLM, act

SPECTER_PDF = SAMPLES / "acl2020_2020.acl-main.207_SPECTER.pdf"


def pdf_text(pdf, page: int | None = None) -> str:
    with pymupdf.open(str(pdf)) as doc:
        pages = [doc[page - 1]] if page else list(doc)
        return "\n".join(p.get_text() for p in pages)


@pytest.fixture
def env(corpus_settings):
    with Environment(corpus_settings) as e:
        yield e


@pytest.fixture(scope="module")
def ids(corpus_settings):
    with Environment(corpus_settings) as e:
        return {t.split(":")[0]: pid for pid, t in e.query("SELECT paper_id::VARCHAR, title FROM metadata")}


class NoLLM:
    """Any call is a test failure: routes that must not use the LLM."""

    def chat(self, *a, **k):
        raise AssertionError("this route must not call the LLM")


# ---------------------------------------------------------------------------------------- routing
def test_features_and_intents():
    f = features("How many tables does the SPECTER paper have?", None, "An integer.")
    assert f["symbolic_intent"] == "count" and f["entities"] >= 1 and "table" in f["modality"]
    assert features("Is there any paper that distils LMs for OOD detection?", None, "The title")["paper_search_cue"]
    assert parse_intent("Who is the last author of LongEval?").position == -1
    assert parse_intent("How many figures are in section 3 of the paper?").section_number == "3"
    assert parse_intent("What loss does SPECTER optimize?") is None
    # a counted word followed by another noun counts that noun, not the paper's authors or pages
    assert parse_intent("Besides its 37M unique paper nodes, how many author nodes and entity nodes does the "
                        "literature graph have?") is None
    assert parse_intent("How many citations per paper does the corpus have?") is None
    # no template answers a venue or year (its rules only ever helped one dev item, issue M): the paper is read
    assert parse_intent("At which conference was LongEval published?") is None
    assert parse_intent("In which year and venue was the SPECTER paper published?") is None
    # pages of the PDF are not pages of the proceedings
    assert parse_intent("How many pages does the SPECTER PDF have?").kind == "count"
    assert parse_intent("On which page of the paper is Table 2?") is None
    assert parse_intent("What is the title of that paper, and on which proceedings page is the highlighted sentence "
                        "printed?") is None
    assert parse_intent("At which conference was LongEval published, and what is its DOI?") is None
    tehran = parse_intent("Which authors of DecompX are affiliated with the University of Tehran?")
    assert (tehran.kind, tehran.org) == ("affiliated", "University of Tehran")
    assert parse_intent("Which SPECTER authors contributed equally?") is None  # no template: read as content
    assert parse_intent("Which authors of X are affiliated with Y, and what are their e-mails?") is None
    assert parse_intent("How many authors of PopQA contributed equally?") is None
    assert parse_intent("Which author of DecompX has an e-mail address at cam.ac.uk?") is None
    assert search_filters("Find the ACL 2023 paper on X", None) == {"venue": "acl", "year": 2023}
    assert search_filters("anything", ["iclr2024"]) == {"venue": "iclr", "year": 2024}


class CatalogEnv:
    """An environment whose metadata table holds every title of ACL 2024 (tests/fixtures/acl/2024.acl.xml),
    for the router's paper-name matching at conference size; ``query`` answers the catalog's SELECT only."""

    def __init__(self):
        from neusym.ingest.sources.acl_source import parse_acl_collection

        from .conftest import FIXTURES

        self.rows = [(f"p{i}", p.title) for i, p in enumerate(parse_acl_collection(FIXTURES / "acl" / "2024.acl.xml"))]

    def query(self, sql, params=None):
        assert sql.startswith("SELECT paper_id::VARCHAR, title FROM metadata")
        return self.rows


def test_a_short_name_that_is_a_common_word_names_a_paper_only_in_its_own_letter_case():
    from neusym.query.answer.symbolic import resolve_papers

    env = CatalogEnv()
    titles = {t.split(":")[0]: t for _, t in env.rows}
    assert {"Mirror", "Parrot", "Marathon", "Mission"} <= set(titles)  # real ACL 2024 titles
    for question in ("Which paper uses a mirror of the model's own reasoning to correct it?",
                     "Is there a marathon-length benchmark for long-context models?",
                     "Which paper first parrots instructions back over many turns?"):
        assert resolve_papers(question, None, env) == [], question
    assert [t for _, t in resolve_papers("How does Mirror reflect on its own reasoning?", None, env)] == [titles["Mirror"]]
    assert [t for _, t in resolve_papers("What does Parrot's training data contain?", None, env)] == [titles["Parrot"]]
    # a question naming no paper is not read as one about "Marathon": the router's LLM call decides
    llm = ScriptedLLM([{"route": "find_paper"}])
    d = route_question("Is there a marathon-length benchmark for long-context models?", paper_ids=None,
                       answer_format=None, env=env, llm=llm)
    assert (d.route, d.papers, d.llm_used) == ("paper_search", [], True)


def test_a_quoted_title_that_is_not_in_the_corpus_is_said_so_without_the_llm(corpus_settings):
    for question, title in (
            ("Which authors of the paper 'A Paper That Is Not In This Corpus' contributed equally?",
             "A Paper That Is Not In This Corpus"),
            ('Which authors appear on both the SPECTER paper and the paper "Attention Is All You Need"?',
             "Attention Is All You Need")):
        result = ask(question, settings=corpus_settings, llm=NoLLM(), method="auto")
        assert result.route == "missing_paper" and result.turns == 0
        assert result.answer == f"No paper titled '{title}' is in the corpus."
        assert result.verification["status"] == "pass" and result.verification["checks"][0]["kind"] == "title"
        assert result.verification["basis"] == "computed"  # a lookup: no title of metadata holds it
    # a quoted sentence is not a title, and a quoted part of a corpus title names that paper
    from neusym.query.answer.symbolic import unknown_titles

    with Environment(corpus_settings) as env:
        assert unknown_titles("A medal table is asked 'Which nation won the most gold medals?' What is the answer?",
                              env) == []
        assert unknown_titles("Who wrote 'When Not to Trust Language Models'?", env) == []
        assert unknown_titles("Who wrote 'Attention Is All You Need'?", env) == ["Attention Is All You Need"]


def test_route_decisions(env, ids):
    decide = lambda q, p=None, fmt=None, conf=None: route_question(q, paper_ids=p, answer_format=fmt, env=env, llm=NoLLM(),  # noqa: E731
                                                                    conferences=conf)
    assert decide("How many tables does the SPECTER paper have?").route == "symbolic"
    assert decide("How many figures does the paper contain?", [ids["DecompX"]]).route == "symbolic"
    assert decide("Which paper introduces a benchmark of document-level tasks?").route == "paper_search"
    assert decide("What does the model use as negatives?", [ids["SPECTER"]]).route == "focused"
    assert decide("What loss does SPECTER optimize?").route == "focused"  # the short name resolves the paper
    assert decide("Compare the datasets of the two papers.", [ids["SPECTER"], ids["LongEval"]]).route == "focused"
    assert decide("Compare SPECTER's ablation variants.", [ids["SPECTER"]]).route == "focused"
    # no paper named, no paper asked for: one LLM call would choose; without an LLM, the agent loop
    assert route_question("Compare how recent papers evaluate faithfulness.", paper_ids=None, answer_format=None,
                          env=env, llm=None).route == "agent"
    # nothing decides: one constrained LLM call picks the class
    llm = ScriptedLLM([{"route": "find_paper"}])
    d = route_question("Retrieval of long-tail facts from language models", paper_ids=None, answer_format=None,
                       env=env, llm=llm)
    assert d.route == "paper_search" and d.llm_used
    assert llm.requests[0]["json_schema"]["properties"]["route"]["enum"]


# ------------------------------------------------------------------------------------ symbolic
def test_symbolic_counts_tables_like_the_pdf_prints_them(corpus_settings):
    printed = {int(n) for n in re.findall(r"^Table (\d+):", pdf_text(SPECTER_PDF), re.M)}
    result = ask("How many tables does the SPECTER paper have?", settings=corpus_settings, llm=NoLLM(),
                             method="auto", answer_format="Your answer should be a single integer.")
    assert result.route == "symbolic" and result.turns == 0 and result.seconds < 5
    assert result.answer == len(printed) == 3
    assert result.verification["status"] == "pass" and "SQL" in result.verification["checks"][0]["detail"]
    assert result.verification["basis"] == "computed"
    quotes = [c["quote"] for c in result.citations]
    assert all(q.startswith("Table ") for q in quotes) and len(quotes) == 3
    assert all(c["bounding_box"] and c["page_number"] for c in result.citations)


def test_symbolic_author_by_position(corpus_settings, ids):
    last = ask("Who is the last author of the paper?", settings=corpus_settings, llm=NoLLM(),
                           method="auto", paper_ids=[ids["LongEval"]])
    page1 = " ".join(pdf_text(SAMPLES / "eacl2023_2023.eacl-main.121_LongEval.pdf", 1).split())
    assert last.route == "symbolic" and last.answer in page1 and last.answer == "Kyle Lo"


def test_symbolic_counts_several_kinds_in_the_order_asked(corpus_settings):
    pdf = pymupdf.open(SPECTER_PDF)
    pages = pdf.page_count
    text = pdf_text(SPECTER_PDF)
    tables = {int(n) for n in re.findall(r"^Table (\d+):", text, re.M)}
    figures = {int(n) for n in re.findall(r"^Figure (\d+):", text, re.M)}
    fmt = "Your answer should be a Python list of two integers."
    both = ask("How many pages does the SPECTER PDF have, and how many tables does the paper contain?",
                           settings=corpus_settings, llm=NoLLM(), method="auto", answer_format=fmt)
    assert both.route == "symbolic" and both.answer == [pages, len(tables)] == [pages, 3]
    chained = ask("How many figures and tables does the SPECTER paper have?", settings=corpus_settings,
                              llm=NoLLM(), method="auto", answer_format=fmt)
    assert chained.answer == [len(figures), len(tables)] and len(chained.verification["checks"][0]["detail"]) > 20


@pytest.mark.parametrize("question, pdf, expected, printed", [
    ("Which authors of the DecompX paper are affiliated with the University of Tehran?", "acl2023_DecompX_acl-long.pdf",
     ["Mohsen Fayyaz", "Ehsan Aghazadeh", "Yadollah Yaghoobzadeh"], "3 University of Tehran, Iran"),
    ("Which authors of LongEval are affiliated with Yale University?", "eacl2023_2023.eacl-main.121_LongEval.pdf",
     ["Arman Cohan"], "♡Yale University"),
])
def test_affiliation_is_read_from_the_marks_of_page_one(corpus_settings, question, pdf,
                                                                              expected, printed):
    result = ask(question, settings=corpus_settings, llm=NoLLM(), method="auto")
    assert result.route == "symbolic" and result.turns == 0
    assert result.answer == expected and result.verification["status"] == "pass"
    page1 = " ".join(pdf_text(SAMPLES / pdf, 1).split())
    assert printed.replace(" ", "") in page1.replace(" ", "") and all(name in page1 for name in expected)
    cite = result.citations[0]
    assert (cite["table_name"], cite["page_number"], cite["quote"]) == ("pages", 1, printed)


def test_an_affiliation_the_marks_do_not_settle_is_read_by_the_model(corpus_settings, ids):
    # the Semantic Scholar paper prints its affiliations without marks; MIT is on no author line of LongEval
    for question in ("Which authors of the Semantic Scholar literature graph paper are affiliated with Northwestern "
                     "University?", "Which authors of LongEval are affiliated with MIT?"):
        llm = ScriptedLLM([{"answer": "Doug Downey", "evidence": [1]}])
        paper = ids["Construction of the Literature Graph in Semantic Scholar"] if "Semantic" in question else ids["LongEval"]
        result = ask(question, settings=corpus_settings, llm=llm, method="auto", paper_ids=[paper])
        assert result.route == "focused" and "template had no answer" in result.route_features["reason"]


def test_a_template_answer_without_the_formats_shape_is_not_the_answer(corpus_settings, ids):
    # the count template answers how many authors; the format asks for two elements (the last author too):
    # the template answered part of the question, so the paper is read instead and the model's answer returned
    names = ["Kalpesh Krishna", "Erin Bransom", "Bailey Kuehl", "Mohit Iyyer", "Pradeep Dasigi", "Arman Cohan",
             "Kyle Lo"]  # as printed on LongEval's page 1
    page1 = " ".join(pdf_text(SAMPLES / "eacl2023_2023.eacl-main.121_LongEval.pdf", 1).split())
    assert all(name in page1 for name in names)
    question = "How many authors does the LongEval paper have, and who is its last author?"
    fmt = ("Your answer should be a Python list of two elements: [number of authors as an integer, full name of the "
           "last author as a string].")
    llm = ScriptedLLM([{"answer": [7, "Kyle Lo"], "evidence": [1]}] * 2)
    result = ask(question, settings=corpus_settings, llm=llm, method="auto", answer_format=fmt,
                 paper_ids=[ids["LongEval"]])
    assert result.route == "focused" and "in the format's shape" in result.route_features["reason"]
    assert result.trajectory[0].action == "RetrieveFromDatabase"
    assert f"lists {len(names)} authors" in result.trajectory[0].thought
    assert "does not answer the whole question" in result.trajectory[0].thought
    assert result.trajectory[1].action == "RetrieveFromVectorstore"  # then the paper is read
    assert result.answer == [7, "Kyle Lo"] and result.verification["basis"] == "read"
    # the same template with a format it fits still answers without the model
    alone = ask("How many authors does the LongEval paper have?", settings=corpus_settings, llm=NoLLM(),
                method="auto", paper_ids=[ids["LongEval"]], answer_format="Your answer should be an integer.")
    assert alone.route == "symbolic" and alone.answer == len(names) and alone.verification["basis"] == "computed"


def test_equal_contribution_and_shared_authors_have_no_template(corpus_settings, ids):
    """No template answers these (their wording rules only ever fired on the dev items they were written
    for, issue M): the focused route reads them like any question about the paper."""
    reply = {"answer": ["Arman Cohan", "Sergey Feldman"], "evidence": [1]}
    llm = ScriptedLLM([reply, reply])  # the verifier may ask once more when the excerpts do not name them
    result = ask("Which SPECTER authors contributed equally?", settings=corpus_settings, llm=llm, method="auto",
                 paper_ids=[ids["SPECTER"]])
    assert result.route == "focused" and result.turns in (1, 2)
    assert parse_intent("Which authors appear on both the SPECTER paper and the LongEval paper?") is None
    assert parse_intent("What do the authors of both papers use TagMe for?") is None


def test_paper_search_route_needs_no_llm(corpus_settings):
    result = ask("Is there any paper that investigates when language models should not be trusted and "
                             "retrieval helps for long-tail entities?", settings=corpus_settings, llm=NoLLM(),
                             method="auto", answer_format="Your answer should be the title of the paper WITHOUT ANY EXPLANATION.")
    assert result.route == "paper_search" and result.turns == 0
    assert result.answer.startswith("When Not to Trust Language Models")
    assert result.verification["status"] == "pass" and result.candidates[0]["title"] == result.answer
    assert result.verification["basis"] == "search"
    assert result.citations[0]["table_name"] == "metadata"


# ------------------------------------------------------------------------ focused + verifier
Q_NEG = "How many hard negatives and how many easy negatives does SPECTER sample for each query paper?"
FMT_NEG = "Your answer should be a Python list of two integers: [hard negatives, easy negatives]."


def test_focused_route_one_llm_call_with_verified_citations(corpus_settings, ids):
    llm = ScriptedLLM([{"answer": "[2, 3]", "evidence": [1, 2]}])
    result = ask(Q_NEG, settings=corpus_settings, llm=llm, method="auto", answer_format=FMT_NEG,
                             paper_ids=[ids["SPECTER"]])
    assert result.route == "focused" and result.turns == 1 and len(llm.requests) == 1
    prompt = llm.requests[0]["messages"][1]["content"]
    assert "[Evidence]:" in prompt and "hard negatives" in prompt and len(prompt) < 5000  # compact
    assert result.answer == [2, 3] and result.verification["status"] == "pass"
    assert result.verification["basis"] == "read"  # the model wrote it: its numbers occur in the evidence
    checks = result.verification["checks"]
    assert {c["claim"] for c in checks if c["kind"] == "number"} == {"2", "3"}
    assert [c["ok"] for c in checks if c["kind"] == "format"] == [True]
    # citations point at real cells: the quote is in that cell, the cell on that page of that paper
    with Environment(corpus_settings) as env:
        for c in result.citations:
            pk = {"chunks": "chunk_id", "tables": "table_id", "images": "image_id"}[c["table_name"]]
            text, page, paper = env.query(f"SELECT {c['column_name']}, page_number, ref_paper_id::VARCHAR FROM "
                                          f"{c['table_name']} WHERE {pk}::VARCHAR = ?", [c["primary_key"]])[0]
            assert c["quote"] in text and c["page_number"] == page and c["paper_id"] == paper == ids["SPECTER"]
    assert any("2 hard negatives" in " ".join(c["quote"].split()) and c["page_number"] == 5 for c in result.citations)
    assert "hard negatives" in " ".join(pdf_text(SPECTER_PDF, 5).split())


def test_a_failed_check_gets_one_repair_round(corpus_settings, ids):
    llm = ScriptedLLM([{"answer": "[7, 3]", "evidence": [1]}, {"answer": "[2, 3]", "evidence": [1]}])
    result = ask(Q_NEG, settings=corpus_settings, llm=llm, method="auto", answer_format=FMT_NEG,
                             paper_ids=[ids["SPECTER"]])
    assert len(llm.requests) == 2 and result.turns == 2
    assert "'7' does not occur in the cited evidence" in llm.requests[1]["messages"][1]["content"]
    assert result.answer == [2, 3] and result.verification == {**result.verification, "status": "pass", "repaired": True}
    still_wrong = ScriptedLLM([{"answer": "[7, 3]", "evidence": [1]}, {"answer": "[9, 3]", "evidence": [1]}])
    bad = ask(Q_NEG, settings=corpus_settings, llm=still_wrong, method="auto", answer_format=FMT_NEG,
                          paper_ids=[ids["SPECTER"]])
    assert bad.verification["status"] == "fail" and bad.verification["repaired"] and len(still_wrong.requests) == 2


def test_an_answer_says_where_its_seconds_went(corpus_settings, ids):
    """``timings``: each phase's own wall time (neusym.telemetry), adding up to the answer's seconds; the
    repair's model call counts as repair, the first one as generation."""
    from neusym.telemetry import llm_request

    class SlowModel(ScriptedLLM):
        @llm_request
        def chat(self, *args, **kwargs):
            time.sleep(0.3)  # stands in for the model's generation time
            return super().chat(*args, **kwargs)

    llm = SlowModel([{"answer": "[7, 3]", "evidence": [1]}, {"answer": "[2, 3]", "evidence": [1]}])
    result = ask(Q_NEG, settings=corpus_settings, llm=llm, method="auto", answer_format=FMT_NEG,
                 paper_ids=[ids["SPECTER"]])
    t = result.timings
    assert result.verification["repaired"] and len(llm.requests) == 2
    assert {"route", "retrieval", "generation", "verification", "repair"} <= set(t)
    assert 0.3 <= t["generation"] < 0.6 and 0.3 <= t["repair"] < 0.9 and t["retrieval"] > 0
    assert sum(t.values()) == pytest.approx(result.seconds, abs=0.1)
    assert result.to_dict()["timings"] == t
    fast = ask("How many tables does the SPECTER paper have?", settings=corpus_settings, llm=NoLLM(), method="auto")
    assert fast.route == "symbolic" and "generation" not in fast.timings and "retrieval" in fast.timings


def test_a_number_written_as_an_expression_is_computed_and_its_operands_checked(corpus_settings, ids):
    fmt = "Your answer should be a single integer."
    # cites the top three passages: the one giving "2 hard negatives ... and 3 easy" is among them
    # (its rank moves with the encoder's vectors; ranking is not what this test checks)
    llm = ScriptedLLM([{"answer": "2 + 3", "evidence": [1, 2, 3]}])
    result = ask("How many negatives in total does SPECTER sample for each query paper?",
                             settings=corpus_settings, llm=llm, method="auto", answer_format=fmt,
                             paper_ids=[ids["SPECTER"]])
    assert "it is computed for you" in llm.requests[0]["messages"][0]["content"]
    assert result.answer == 5 and len(llm.requests) == 1
    calc = [s for s in result.trajectory if s.action == "CalculateExpr"]
    assert [(s.arguments["expr"], s.observation) for s in calc] == [("2 + 3", "Result: 5")]
    kinds = {(c["kind"], c["claim"]): c["ok"] for c in result.verification["checks"]}
    assert kinds[("calc", "2 + 3")] and kinds[("number", "2")] and kinds[("number", "3")]
    assert result.verification["status"] == "pass"


def test_a_question_giving_numbers_is_answered_by_the_arithmetic_the_model_writes(corpus_settings, ids):
    from neusym.query.answer.focused import formula_expression, worked_computation

    q = ("Using SPECTER's triplet margin loss with margin m = 1, what is the loss for a training triple whose "
         "query-to-positive distance is 0.8 and query-to-negative distance is 1.5?")
    assert worked_computation(q)
    # the model writes the formula with the numbers put in, then a wrong result: the formula is computed
    llm = ScriptedLLM([{"formula": "L = max(0.8 - 1.5 + 1, 0)", "answer": "0.0", "evidence": [1]}])
    result = ask(q, settings=corpus_settings, llm=llm, method="auto", paper_ids=[ids["SPECTER"]],
                             answer_format="Your answer should be a float with one decimal place.")
    schema = llm.requests[0]["json_schema"]
    assert schema["required"][:2] == ["formula", "answer"] and schema["properties"]["answer"]["type"] == "string"
    assert result.answer == 0.3  # max(0.8 - 1.5 + 1, 0), worked by hand
    calc = [s for s in result.trajectory if s.action == "CalculateExpr"]
    assert calc and calc[0].arguments["expr"] == "max(0.8 - 1.5 + 1, 0)"
    assert formula_expression("13 * 24 * 16") == "13 * 24 * 16"
    assert formula_expression("AOPC(K) = 0.627") is None  # no arithmetic: the model's answer stands
    assert formula_expression("max(-d + m + d, 0)") is None  # symbols, not numbers
    assert formula_expression(None) is None
    for plain in ("What does GPT-3 davinci-003 reach with 5 examples?", "Which model is best in Table 2 and Table 3?",
                  "What recall@1 and recall@3 does DPR reach in 2023?", "How many hard negatives does SPECTER use?"):
        assert not worked_computation(plain), plain


def test_an_answer_of_the_wrong_shape_gets_a_repair_round(corpus_settings, ids):
    llm = ScriptedLLM([{"answer": "2", "evidence": [1]}, {"answer": "2, 3", "evidence": [1]}])
    result = ask(Q_NEG, settings=corpus_settings, llm=llm, method="auto", answer_format=FMT_NEG,
                             paper_ids=[ids["SPECTER"]])
    assert len(llm.requests) == 2
    assert "'2' has 1 elements, the answer format asks for 2" in llm.requests[1]["messages"][1]["content"]
    assert result.answer == [2, 3] and result.verification["status"] == "pass" and result.verification["repaired"]


def test_the_answer_is_constrained_to_the_type_its_format_asks_for(corpus_settings, ids):
    from neusym.query.answer.focused import answer_schema

    value = lambda fmt, compute=False: answer_schema(fmt, compute=compute)["properties"]["answer"]  # noqa: E731
    assert value(FMT_NEG) == {"type": "array", "minItems": 2, "maxItems": 2, "items": value(FMT_NEG)["items"]}
    assert {t["type"] for t in value(FMT_NEG)["items"]["anyOf"]} == {"string", "number", "boolean"}
    assert value("Your answer should be a single integer.") == {"type": "integer"}
    assert value("Your answer should be a float rounded to 2 decimal places.") == {"type": "number"}
    assert value("Your answer should be a Python boolean, True or False.") == {"type": "boolean"}
    assert value("Your answer should be the title of the paper WITHOUT ANY EXPLANATION.")["type"] == "string"
    # a computed number may also be an expression string, computed by CalculateExpr; a list stays an array
    assert value("Your answer should be a single integer.", True) == {
        "anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 200}]}
    assert value(FMT_NEG, True) == value(FMT_NEG)
    from neusym.query.answer.answer_format import conform

    fmt3 = "Your answer should be a Python list of three elements."
    shaped = conform([16, "54 / 100 * 100", "SQuALITY"], fmt3, compute_strings=True)
    assert shaped.ok and shaped.value == [16, 54.0, "SQuALITY"] and shaped.computed == [("54 / 100 * 100", 54.0)]
    # unless the question asks for a computation, a string stays a string: "1650-1669" is a page range
    assert conform(["EACL 2023", "1650-1669", 3], fmt3).value == ["EACL 2023", "1650-1669", 3]
    assert conform(["BERT-base", "1.5"], "Your answer should be a Python list of two strings.").value == ["BERT-base",
                                                                                                       "1.5"]
    # the model's JSON array is the answer as it is (no string to re-parse)
    llm = ScriptedLLM([{"answer": [2, 3], "evidence": [1, 2]}])
    result = ask(Q_NEG, settings=corpus_settings, llm=llm, method="auto", answer_format=FMT_NEG,
                             paper_ids=[ids["SPECTER"]])
    assert llm.requests[0]["json_schema"]["properties"]["answer"]["minItems"] == 2
    assert result.answer == [2, 3] and result.verification["status"] == "pass" and len(llm.requests) == 1


def test_a_table_reaches_the_prompt_whole_as_rows_under_its_caption(corpus_settings, ids):
    # the PDF's own text of SPECTER's row in Table 1 (page 7), one value per line
    page7 = pdf_text(SPECTER_PDF, 7)
    row = page7[page7.index("SPECTER (Ours)"):].split("Table 1:")[0].split()[2:]
    assert len(row) == 13 and row[0] == "82.0"
    # the table query gives three rows, not the one name asked for: they are evidence for the answer call
    llm = ScriptedLLM([{"sql": "SELECT row_name, Cite_MAP FROM t ORDER BY Cite_MAP DESC LIMIT 3"},
                       {"answer": "SGC", "evidence": [2]}])
    ask("In SPECTER's main results table on SCIDOCS, which model reaches the highest MAP on the Cite task?",
                    settings=corpus_settings, llm=llm, method="auto", paper_ids=[ids["SPECTER"]],
                    answer_format="Your answer should be the model name as a single string.")
    prompt = llm.requests[1]["messages"][1]["content"]
    items = re.split(r"\n(?=\[\d+\] \()", prompt.split("[Evidence]:\n", 1)[1])
    assert "Computed by SQL over Table 1: Results on the SCIDOCS evaluation suite" in items[0]
    table = next(item for item in items[1:] if item.split("\n")[0].split(")")[0].endswith(", table"))
    lines = table.split("\n")
    assert "Table 1: Results on the SCIDOCS evaluation suite" in lines[0] and "<td>" not in prompt
    assert "SPECTER (Ours) | " + " | ".join(row) in lines  # the last row too: the whole table fits
    assert sum(1 for line in lines if line.count(" | ") == 13) >= 10  # one line per row, columns aligned


@pytest.mark.parametrize("fmt, answer, expected, ok", [
    # answer formats of the AirQA-style dev set, answers as the offline model wrote them
    ("Your answer should be a Python list of two elements: the name of the distance function as a short string and "
     "the margin m as an integer.", "L2 norm distance, 1", ["L2 norm distance", 1], True),
    ("Your answer should be a float rounded to 2 decimal places.", "exp(8 * 1 - 6)", 7.39, True),
    ("Your answer should be a single integer.", "strconv(13)", 13, True),  # one number among noise
    ("Your answer should be a single integer.", "12 or 13", "12 or 13", False),
    ("Your answer should be a single integer.", "1,999", 1999, True),
    ("Your answer should be a single integer.", "13.5", "13.5", False),
    ("Your answer should be a Python list of two floats with two decimal places: [homogeneity, completeness].",
     "[0.5 * 1.2, 0.81]", [0.6, 0.81], True),
    ("Your answer should be a Python list of two integers: [number of pages, number of tables].", "[12]", [12], False),
    ("Your answer should be a Python boolean, True or False.", "No, it does not.", False, True),
    ("Your answer should be the dataset name as a single string.", "['SciDocs']", "SciDocs", True),
    ("Your answer should be a Python list of two elements: [the score as a float rounded to 2 decimal places, True "
     "or False].", "[0.12, True]", [0.12, True], True),
    ("Your answer should be a single LaTeX formula for the loss L.", "L = max(d - d' + m, 0)",
     "L = max(d - d' + m, 0)", None),
    ("Your answer should be the title of the paper WITHOUT ANY EXPLANATION.", "SPECTER", "SPECTER", None),
])
def test_answers_are_put_in_the_shape_their_format_asks_for(fmt, answer, expected, ok):
    from neusym.query.answer.answer_format import conform

    shaped = conform(answer, fmt)
    assert shaped.ok is ok and shaped.value == expected and type(shaped.value) is type(expected)
    if ok is False:
        assert shaped.detail


GRAPH_PDF = SAMPLES / "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"
Q_LOWEST = "Which metadata field does the ScienceParse system extract with the lowest F1, and what is that F1?"
FMT_LOWEST = "Your answer should be a Python list of two elements: [field name as a string, F1 as a float]."


S2ORC_TABLE_5 = [
    ["Domain", "Dataset", "Reference", "Task", "SCIBERT", "S2ORC-SCIBERT"],
    ["", "BC5CDR", "Li et al. (2016)", "NER", "90.01", "90.41 ± 0.06"],
    ["", "ChemProt", "Krallinger et al. (2017)", "REL", "83.64", "84.59 ± 0.93"],
    ["", "SciERC", "Luan et al. (2018)", "NER", "67.57", "68.93 ± 0.19"],
    ["CS", "SciERC", "Luan et al. (2018)", "REL", "79.97", "81.77 ± 1.64"],
    ["", "ACL-ARC", "Jurgens et al. (2018)", "CLS", "70.98", "68.45 ± 2.47"],
    ["Biomed & CS", "SciCite", "Cohan et al. (2019)", "CLS", "85.49", "84.76 ± 0.37"],
]


def test_the_table_slot_takes_the_table_whose_numbers_an_excerpt_quotes(corpus_settings, ids):
    from neusym.query.answer.focused import _table_the_excerpts_quote

    page7 = " ".join(pdf_text(SPECTER_PDF, 7).split())
    body = page7[page7.index("CLS USR CITE REC Avg."):page7.index("Table 2: Ablations")]
    assert "SPECTER 84.2 88.4 91.5 36.9 80.0" in body  # Table 2's rows as the page's text
    with Environment(corpus_settings) as env:
        keys = {cap.split(":")[0]: ("tables", tid) for tid, cap in env.query(
            "SELECT table_id::VARCHAR, table_caption FROM tables WHERE ref_paper_id = ?", [ids["SPECTER"]])}
        candidates = [keys["Table 1"], keys["Table 2"]]
        excerpt = {"table_name": "chunks", "text": body}
        assert _table_the_excerpts_quote(candidates, [excerpt], env) == keys["Table 2"]
        # no excerpt quotes a table: the best-ranked one
        prose = {"table_name": "chunks", "text": "SPECTER embeds papers with a citation-informed Transformer."}
        assert _table_the_excerpts_quote(candidates, [prose], env) == keys["Table 1"]


def test_a_chunk_that_reads_a_table_body_gives_its_place_to_the_stored_table(corpus_settings, ids):
    """The page's text layer reads Table 1 of SPECTER as running text; a chunk holding those rows is
    replaced by the stored table (so the table is read as a table), while a paragraph that quotes a
    few of the same results stays a paragraph."""
    from neusym.query.answer import focused as auto

    page7 = " ".join(pdf_text(SPECTER_PDF, 7).split())
    body = page7[page7.index("Doc2vec (2014)"):page7.index("Table 1: Results")]
    page6 = " ".join(pdf_text(SPECTER_PDF, 6).split())
    prose = page6[page6.index("SPECTER achieves a MAP score"):page6.index("Note that methods like SGC")]
    assert "83.8" in prose and "84.5" in prose and "83.8" in body and "84.5" in body
    with Environment(corpus_settings) as env:
        tables = {cap.split(":")[0]: tid for tid, cap in env.query(
            "SELECT table_id::VARCHAR, table_caption FROM tables WHERE ref_paper_id = ?", [ids["SPECTER"]])}
        cells = {("chunks", "body"): {"table_name": "chunks", "text": body},
                 ("chunks", "prose"): {"table_name": "chunks", "text": prose},
                 ("equations", "e1"): {"table_name": "equations", "text": "L = max(d(q, p+) - d(q, p-) + m, 0)"}}
        ranked = [("chunks", "prose"), ("chunks", "body"), ("equations", "e1")]
        out = auto._tables_the_chunks_read(ranked, cells, [(ids["SPECTER"], "SPECTER")], env)
        assert out == [("chunks", "prose"), ("tables", tables["Table 1"]), ("equations", "e1")]
        assert cells[("tables", tables["Table 1"])]["page_number"] == "7"
        # the table is ranked already: the chunk stays, nothing is added twice
        again = auto._tables_the_chunks_read([("tables", tables["Table 1"]), ("chunks", "body")], cells,
                                             [(ids["SPECTER"], "SPECTER")], env)
        assert again == [("tables", tables["Table 1"]), ("chunks", "body")]
        # Table 3's body repeats SPECTER's row of Table 2 (5 decimals): with Table 3 ranked, its body
        # does not read Table 2 (5 of its 25 decimals) and stays
        page8 = " ".join(pdf_text(SPECTER_PDF, 8).split())
        body3 = page8[page8.index("Training signal CLS USR"):page8.index("Table 3: Comparison")]
        assert "SPECTER 84.2 88.4 91.5 36.9 80.0" in body3 and "SPECTER 84.2 88.4 91.5 36.9 80.0" in page7
        cells[("chunks", "body3")] = {"table_name": "chunks", "text": body3}
        ranked3 = [("tables", tables["Table 3"]), ("chunks", "body3")]
        assert auto._tables_the_chunks_read(ranked3, cells, [(ids["SPECTER"], "SPECTER")], env) == ranked3
        # without Table 3 ranked, the body is Table 3
        assert auto._tables_the_chunks_read([("chunks", "body3")], cells, [(ids["SPECTER"], "SPECTER")], env) == [
            ("tables", tables["Table 3"])]


POPQA_PDF = SAMPLES / "acl2023_2023.acl-long.478_PopQA-WhenNotToTrustLMs.pdf"


def test_a_first_keyword_hit_is_not_pushed_out_by_middling_dense_agreement(corpus_settings, ids, monkeypatch):
    """Within one paper the MiniLM lists weigh half of the BM25 lists (``dense_list_weight``): the chunk
    that holds the answer sentence is BM25's first hit for the question, and with equal weights the
    chunks both lists rank 2nd-6th took all four places."""
    from neusym.encode import BM25_COLLECTION
    from neusym.query.answer import focused as auto

    sentence = "we use 15-shot prompting for all mod- els in the GPT-neo and OPT series"  # as printed
    assert sentence in " ".join(pdf_text(POPQA_PDF).split())
    q = ("In the PopQA paper's evaluation of parametric memory, how many in-context examples are used in the "
         "prompts for the GPT-neo and OPT models, and how many for GPT-3?")
    paper = [(ids["When Not to Trust Language Models"], "When Not to Trust Language Models")]

    from neusym.query.answer.config import SHIPPED, FocusedConfig, using

    def context(weight: float) -> tuple[list, str]:
        trace: list = []
        with Environment(corpus_settings) as env, using(FocusedConfig(dense_list_weight=weight)):
            _, text = auto.focused_context(q, paper, {"modality": []}, env, trace=trace)
        return trace, " ".join(text.split())

    assert SHIPPED.dense_list_weight == 0.5
    trace, shipped = context(SHIPPED.dense_list_weight)
    bm25_chunks = next(t for t in trace if t["collection"] == BM25_COLLECTION and t["view"] == "chunks.text_content")
    assert "15-shot" in bm25_chunks["hits"][0]["text"]
    assert "15-shot prompting" in shipped
    _, equal = context(1.0)
    assert "15-shot prompting" not in equal


def test_merged_columns_and_multi_column_labels_of_real_tables():
    from neusym.ingest.parse.cells import split_grid

    # the literature-graph paper's Table 2 (page 4) as extracted: "prec. yield" under CS is one column whose cells hold
    # both numbers ("98.4 712"); split, each number has its own column under its own header path
    graph = split_grid([["Approach", "CS", "Bio", "Bio"], ["", "prec. yield", "prec.", "yield"],
                        ["Statistical", "98.4 712", "94.4", "928"], ["Hybrid", "91.5 1990", "92.1", "3126"],
                        ["Oﬀ-the-shelf", "97.4 873", "77.5", "1206"]])
    assert graph[0] == 2 and graph[1] == ["Approach", "CS / prec.", "CS / yield", "Bio / prec.", "Bio / yield"]
    assert graph[2][2] == ["Oﬀ-the-shelf", "97.4", "873", "77.5", "1206"]
    # S2ORC's Table 5: four label columns (domain, dataset, reference, task) before the two score columns
    n_header, paths, data = split_grid(S2ORC_TABLE_5)
    assert paths[:4] == ["Domain", "Dataset", "Reference", "Task"] and len(data[0]) == len(paths)


def test_a_long_excerpt_is_cut_around_the_sentences_the_question_asks_about():
    from neusym.query.answer.focused import focus_text

    page5 = " ".join(pdf_text(SPECTER_PDF, 5).split())
    start = page5.index("We empirically found it helpful to use 2 hard negatives")
    assert len(page5) > 3000 and start > 650  # the first 650 characters miss it
    cut = focus_text(page5, Q_NEG, 650)
    assert len(cut) <= 658 and cut.startswith("... ") and "use 2 hard negatives (citations of citations) and 3 easy" in cut
    assert cut.replace("... ", "").replace(" ...", "") in page5  # whole sentences, verbatim
    assert focus_text("short text", Q_NEG, 650) == "short text"
    assert focus_text(page5, "", 650).startswith(page5[:100])  # nothing to match: the beginning


def test_table_rows_text_keeps_columns_aligned_across_spans():
    html = ('<table><tr><th>Model</th><th colspan="2">Co-View</th></tr><tr><td>SPECTER</td><td>83.6</td>'
            '<td>91.5</td></tr><tr><td>a &amp; b</td><td></td><td>1</td></tr></table>')
    assert table_rows_text(html).split("\n") == ["Model | Co-View | Co-View", "SPECTER | 83.6 | 91.5", "a & b |  | 1"]
    assert table_rows_text("no table here") == "no table here"
    cut = table_rows_text("<table><tr><td>cut <td")  # truncated HTML: the cell that was being read
    assert cut.startswith("cut") and "<table>" not in cut


def test_verifier_units():
    ev = ["We use 2 hard negatives and 3 easy negatives.", "Table 1 reports MAP 83.6 on co-view."]
    assert verify("[2, 3]", ev).status == "pass"
    assert verify("83.6", ev).status == "pass"
    assert verify("84.1", ev).status == "fail"
    assert verify("It improves by 1.2 points", ev, question="How much does it improve?").status == "unverifiable"
    assert verify("['hard negatives', 'co-view']", ev).status == "pass"
    assert verify("['hard negatives', 'SciBERT']", ev).status == "fail"
    assert verify("SciBERT", ev).status == "unverifiable"  # a short answer not in the evidence: not decided
    assert verify("co-view", ev).status == "pass"  # ... and one that is: pass
    assert verify("The model reaches better scores on every task of the suite overall", ev).status == "unverifiable"
    assert verify("A Title", [], titles={"a title"}).status == "pass"
    assert verify("Another", [], titles={"a title"}).status == "fail"
    # the basis says what the answer is: model-written unless a query computed it or the paper index found it
    assert verify("[2, 3]", ev).to_dict()["basis"] == "read"
    assert verify("3", [], symbolic_sql=["SELECT count(*) FROM tables"]).to_dict()["basis"] == "computed"
    assert verify("A Title", [], titles={"a title"}).to_dict()["basis"] == "search"
    # ... and says it in words, which the web page shows beside the verdict
    assert verify("[2, 3]", ev).to_dict()["basis_text"].startswith("read by the language model: its values occur")


def test_a_question_about_two_papers_reads_the_best_excerpts_of_each(corpus_settings, ids):
    q = ("SPECTER samples hard negatives for each query paper, and LongEval recommends a number of annotators. "
         "How many hard negatives per query paper does SPECTER use?")
    llm = ScriptedLLM([{"answer": 2, "evidence": [1, 4]}] * 2)  # a second reply for a repair round
    result = ask(q, settings=corpus_settings, llm=llm, method="auto",
                             answer_format="Your answer should be a single integer.",
                             paper_ids=[ids["SPECTER"], ids["LongEval"]])
    assert result.route == "focused" and result.route_features["reason"].startswith("about several papers")
    assert 1 <= len(llm.requests) <= 2
    evidence = llm.requests[0]["messages"][1]["content"].split("[Evidence]:\n", 1)[1]
    lines = re.findall(r"^\[(\d+)\] \(([^,]+), page", evidence, re.M)
    # three excerpts of each paper, each labelled with the paper it comes from, in the order given, then
    # each paper's front matter
    assert [name for _, name in lines] == ["SPECTER"] * 3 + ["LongEval"] * 3 + ["SPECTER", "LongEval"]
    assert evidence.count(", page 1, front matter)") == 2
    assert result.answer == 2
    assert [c["paper_id"] for c in result.citations] == [ids["SPECTER"], ids["LongEval"]]


# ------------------------------------------------------------------------------------ agent route
def test_agent_route_verifies_and_cites_the_vector_hits(corpus_settings, ids):
    q = "Compared with the other papers here, which one releases a new evaluation benchmark?"
    llm = ScriptedLLM([
        {"route": "several_papers_or_open"},  # no paper named or asked for: the LLM's tie-break picks the agent
        act("RetrieveFromVectorstore", query="new evaluation benchmark", collection_name="text_bm25_en",
            table_name="chunks", column_name="text_content",
            filter=f"paper_id in ['{ids['SPECTER']}', '{ids['LongEval']}']", limit=3),
        act("GenerateAnswer", answer="SCIDOCS"),
    ])
    result = ask(q, settings=corpus_settings, llm=llm, method="auto")
    assert result.route == "agent" and result.method == "auto" and result.answer == "SCIDOCS"
    assert result.verification["status"] in ("unverifiable", "pass") and result.verification["basis"] == "read"
    assert result.citations and all(c["paper_id"] in (ids["SPECTER"], ids["LongEval"]) for c in result.citations)


# ------------------------------------------------------------------------------------------ budgets
@pytest.mark.parametrize("expr", ["comb(10**7, 5*10**6)", "[[[0]*1000]*1000]*1000", "[[0]*10000]*10000"])
def test_calculate_expr_stops_within_its_budget(expr):
    t0 = time.monotonic()
    with pytest.raises(ActionError, match="time budget|too large|memory"):
        calculate(expr)
    assert time.monotonic() - t0 < 10
    assert calculate("13 * 42") == 546  # the worker is replaced and keeps serving


def test_sql_is_capped_in_bytes_before_formatting(corpus_settings):
    db = current_db(corpus_settings)
    t0 = time.monotonic()
    huge = run_readonly_sql(db, "SELECT repeat('ab ', 30000000) AS x", timeout_s=30, max_rows=10, max_cell_chars=1000)
    assert huge.cells_cut == 1 and len(huge.rows[0][0]) < 1100 and time.monotonic() - t0 < 20
    capped = run_readonly_sql(db, "SELECT text_content FROM chunks", timeout_s=30, max_rows=1000, max_bytes=5000)
    assert capped.bytes_capped and capped.truncated and 1 <= len(capped.rows) < 30
    assert sum(len(r[0]) for r in capped.rows[:-1]) <= 5000


def test_agent_run_has_a_wall_clock_limit(corpus_settings):
    class SlowLLM(ScriptedLLM):
        def chat(self, *a, **k):
            time.sleep(0.6)
            return super().chat(*a, **k)

    settings = corpus_settings.model_copy(update={"agent_max_seconds": 1.0})
    llm = SlowLLM([act("RetrieveFromDatabase", sql=f"SELECT {i}") for i in range(10)] + [act("GenerateAnswer", answer="x")])
    result = ask("q?", settings=settings, llm=llm, method="neusym")
    assert result.stop_reason == "time_limit" and result.seconds < 5 and result.turns <= 3


def test_ask_json_has_route_verification_and_citations(corpus_settings, monkeypatch):
    from typer.testing import CliRunner

    from neusym.interfaces.cli import app

    monkeypatch.setenv("NEUSYM_HOME", str(corpus_settings.home))
    out = CliRunner().invoke(app, ["ask", "How many tables does the SPECTER paper have?", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert (data["route"], data["answer"], data["verification"]["status"]) == ("symbolic", 3, "pass")
    assert len(data["citations"]) == 3


def test_a_new_route_is_one_object_in_the_registry(corpus_settings, monkeypatch):
    """Adding a route touches one place: an object placed in ROUTES takes the questions it decides
    on (before the routes after it) and answers them; the others still route as before."""
    from neusym.query.answer import router
    from neusym.query.answer.results import Step

    class EchoRoute:
        name = "echo"

        def decide(self, facts):
            return "the question says 'echo'" if "echo" in facts.question.lower() else None

        def answer(self, facts, decision, run):
            run.add_step(Step(thought="echo", action="Echo", arguments={}, observation=facts.question, fixed=True))
            run.result.answer = facts.question.upper()
            return run.result

        def fallback(self, facts):
            return "agent"

    monkeypatch.setattr(router, "ROUTES", [EchoRoute(), *router.ROUTES])
    result = ask("Echo: how many tables does the SPECTER paper have?", settings=corpus_settings, llm=NoLLM())
    assert (result.route, result.answer) == ("echo", "ECHO: HOW MANY TABLES DOES THE SPECTER PAPER HAVE?")
    assert result.route_features["reason"] == "the question says 'echo'" and result.turns == 0
    assert ask("How many tables does the SPECTER paper have?", settings=corpus_settings, llm=NoLLM()).route == "symbolic"


def test_the_question_is_read_once(corpus_settings, monkeypatch):
    """The router computes a question's facts once: its symbolic intent is parsed one time."""
    from neusym.query.answer import router

    calls = []
    real = router.parse_intent
    monkeypatch.setattr(router, "parse_intent", lambda q: calls.append(q) or real(q))
    result = ask("How many tables does the SPECTER paper have?", settings=corpus_settings, llm=NoLLM())
    assert result.route == "symbolic" and len(calls) == 1


def test_with_one_paper_in_the_corpus_a_question_about_this_paper_reads_it(tmp_path):
    """A corpus of one paper: "the method this paper proposes" is about that paper's content (focused
    reading), not a paper search, and no LLM is asked to decide."""
    from neusym.ingest.pipeline import ingest
    from neusym.settings import Settings

    settings = Settings(home=tmp_path / "home", parse_backend="pymupdf")
    ingest([SPECTER_PDF], settings)
    with Environment(settings) as e:
        [(pid, title)] = e.query("SELECT paper_id::VARCHAR, title FROM metadata")
        for question in ("What method does this paper propose?", "Which loss function does the paper train with?"):
            d = route_question(question, paper_ids=None, answer_format=None, env=e, llm=NoLLM())
            assert (d.route, d.papers, d.llm_used) == ("focused", [(pid, title)], False), question
            assert d.features["only_paper_in_corpus"]


def test_several_papers_read_each_papers_front_matter(corpus_settings, ids, monkeypatch):
    """A question joining papers reads each paper's page 1 up to the abstract (authors, marks,
    affiliations) and its proceedings line, which no excerpt of the text holds; a question about one
    paper does not get it. Expected lines come from the PDFs' own page 1 text (PyMuPDF)."""
    from neusym.query.answer import focused as auto

    longeval_pdf = SAMPLES / "eacl2023_2023.eacl-main.121_LongEval.pdf"
    q = "Which author of the LongEval paper is also an author of SPECTER?"
    papers = [(ids["LongEval"], "LongEval"), (ids["SPECTER"], "SPECTER")]
    with Environment(corpus_settings) as env:
        cells, text = auto.focused_context(q, papers, {"modality": []}, env)
        one, _ = auto.focused_context(q, papers[:1], {"modality": []}, env)
        from neusym.query.answer.config import FocusedConfig, using

        with using(FocusedConfig(front_matter=False)):
            without, text_without = auto.focused_context(q, papers, {"modality": []}, env)
    front = [c for c in cells if c["table_name"] == "pages"]
    assert [(c["paper_id"], c["page_number"]) for c in front] == [(p, 1) for p, _ in papers]
    flat = " ".join(text.split())
    for pdf in (longeval_pdf, SPECTER_PDF):
        page1 = pdf_text(pdf, 1)
        head = [" ".join(unicodedata.normalize("NFKC", line).split())
                for line in page1[: page1.index("Abstract")].splitlines() if line.strip() and not line.strip().isdigit()]
        assert len(head) >= 8  # title, authors with their marks, affiliations, e-mails (and the footer, printed first)
        missing = [line for line in head if line not in unicodedata.normalize("NFKC", flat)]
        assert not missing
        proceedings = next(line for line in page1.splitlines() if line.startswith("Proceedings of"))
        assert " ".join(proceedings.split()) in flat
    assert "Arman Cohan" in flat and "front matter" in text
    assert not any(c["table_name"] == "pages" for c in one)
    assert not any(c["table_name"] == "pages" for c in without)
    assert "Sergey Feldman" not in text_without  # SPECTER's second author: only its front matter names him
