"""``neusym eval run|score`` and the RAG methods, on the ingested sample corpus (``corpus_settings``).

The LLM is scripted: a :class:`Script` gives the replies for each question (by the question text in
the task prompt) and records every request. It is served either as an object with the project's
``LLM`` protocol (:class:`ScriptedLLM`) or over a loopback OpenAI-compatible HTTP server
(:class:`LoopbackEndpoint`), so the CLI runs end to end through the real ``OpenAICompatibleLLM``
with ``NEUSYM_LLM_BASE_URL``. Retrieval, SQL, the vector store and the evaluators are all real.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from neusym.query.agent.actions import Environment
from neusym.llm.chat import LLMReply
from neusym.query.agent.methods import METHODS, MethodError
from neusym.query.ask import ask
from neusym.interfaces.cli import app
from neusym.evaluation.runner import QuestionFileError, load_questions, run_eval
from neusym.evaluation.scoring import score_predictions

from .openai_loopback import LoopbackOpenAI, completion

# AirQA ids follow uuid5(NAMESPACE_DNS, <alphanumeric lower-case title> + "-" + <venue+year>):
SPECTER_TITLE = "SPECTER: Document-level Representation Learning using Citation-informed Transformers"
SPECTER_AIRQA = str(uuid.uuid5(uuid.NAMESPACE_DNS,
                               "specterdocumentlevelrepresentationlearningusingcitationinformedtransformers-acl2020"))
S2_TITLE = "Construction of the Literature Graph in Semantic Scholar"
S2_AIRQA = str(uuid.uuid5(uuid.NAMESPACE_DNS, "constructionoftheliteraturegraphinsemanticscholar-naacl2018"))
NOT_IN_CORPUS = "00000000-1111-5222-8333-444444444444"
DENSE = "text_sentence_transformers_all_minilm_l6_v2"

Q_SPECTER = "What is the name of the evaluation suite of document-level tasks that this paper introduces and releases?"
Q_POPQA = "According to Table 1, what is the overall recall@1 of Contriever?"
Q_LONGEVAL = "How many summarization papers did the authors survey for the human evaluation setup?"
Q_S2 = "What kinds of nodes does the literature graph contain?"
Q_BADFUNC = "Which transformer does SPECTER initialize from?"
Q_MISSING = "What is the main result of this paper?"


def act(action_type: str, thought: str = "t", **parameters: Any) -> dict:
    return {"thought": thought, "action": {"action_type": action_type, "parameters": parameters}}


def question_of(messages: list[dict]) -> str:
    for message in messages:
        content = message.get("content")
        if message["role"] == "user" and isinstance(content, str) and content.startswith("[Question]: "):
            return content.split("\n", 1)[0][len("[Question]: "):]
    raise AssertionError("no [Question] in the request")


def action_types(schema: dict) -> list[str]:
    action = schema["properties"]["action"]
    variants = action.get("anyOf", [action])
    return [v["properties"]["action_type"]["enum"][0] for v in variants]


class Script:
    """Replies per question (dicts, strings, or callables of the request messages) and judge verdicts
    per question; records every agent request as {question, messages, json_schema}."""

    def __init__(self, replies: dict[str, list], verdicts: dict[str, bool] | None = None):
        self.replies = {q: list(r) for q, r in replies.items()}
        self.verdicts = verdicts or {}
        self.requests: list[dict] = []
        self.judge_requests: list[dict] = []
        self._lock = threading.Lock()

    def reply(self, messages: list[dict], json_schema: dict | None) -> str:
        props = (json_schema or {}).get("properties", {})
        if "correct" in props:  # an LLM-judge request
            user = messages[-1]["content"]
            asked = re.search(r"<question>\n(.*?)\n</question>", user, re.S).group(1)
            with self._lock:
                self.judge_requests.append({"question": asked, "messages": messages})
            return json.dumps({"reasoning": "scripted", "correct": self.verdicts[asked]})
        question = question_of(messages)
        with self._lock:
            self.requests.append({"question": question, "messages": json.loads(json.dumps(messages)),
                                  "json_schema": json_schema})
            queue = self.replies.get(question)
            if not queue:
                raise AssertionError(f"no scripted reply left for {question!r}")
            reply = queue.pop(0)
        if callable(reply):
            reply = reply(messages)
        return reply if isinstance(reply, str) else json.dumps(reply)

    def asked(self, question: str) -> list[dict]:
        return [r for r in self.requests if r["question"] == question]


class ScriptedLLM:
    """The project's LLM protocol over a :class:`Script`."""

    def __init__(self, script: Script):
        self.script = script

    def chat(self, messages, *, json_schema=None, max_tokens=None) -> LLMReply:
        return LLMReply(text=self.script.reply(messages, json_schema), prompt_tokens=1000, completion_tokens=20,
                        cached_tokens=900)


def LoopbackEndpoint(script: Script) -> LoopbackOpenAI:  # noqa: N802
    """An OpenAI-compatible endpoint on 127.0.0.1 answering from a :class:`Script` (a failed script
    assertion becomes an HTTP 500)."""

    def respond(body: dict) -> tuple[int, dict]:
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("schema")
        try:
            text = script.reply(body["messages"], schema)
        except AssertionError as exc:
            return 500, {"error": {"message": str(exc), "type": "server_error"}}
        return 200, completion(text, body["model"], prompt_tokens=1200, completion_tokens=30)

    return LoopbackOpenAI(respond)


# --------------------------------------------------------------------------------------------
# The sample corpus and a small AirQA-format question file over it
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def papers(corpus_settings) -> dict[str, dict]:
    """Our ids and AirQA ids of the sample papers, read with plain SQL (inputs, not expectations)."""
    with Environment(corpus_settings) as env:
        rows = env.run_sql("SELECT CAST(paper_id AS VARCHAR), CAST(airqa_paper_id AS VARCHAR), title FROM metadata").rows
    by_title = {title: {"paper_id": pid, "airqa": aid} for pid, aid, title in rows}
    assert by_title[SPECTER_TITLE]["airqa"] == SPECTER_AIRQA and by_title[S2_TITLE]["airqa"] == S2_AIRQA
    short = {"SPECTER": SPECTER_TITLE, "S2": S2_TITLE, "PopQA": "When Not to Trust Language Models",
             "LongEval": "LongEval:"}
    return {key: next(v | {"title": t} for t, v in by_title.items() if t.startswith(prefix)) for key, prefix in short.items()}


def airqa_items(papers: dict[str, dict]) -> list[dict]:
    """Six AirQA-Real items; anchor ids are AirQA ids except LongEval (our own paper_id)."""
    return [
        {"uuid": "a0000000-0000-4000-8000-000000000001", "question": Q_SPECTER,
         "answer_format": "Your answer should be the name only.", "tags": ["single", "text", "objective"],
         "anchor_pdf": [SPECTER_AIRQA], "reference_pdf": [], "conference": [],
         "evaluator": {"eval_func": "eval_string_exact_match", "eval_kwargs": {"gold": "SciDocs", "lowercase": True}}},
        {"uuid": "a0000000-0000-4000-8000-000000000002", "question": Q_POPQA,
         "answer_format": "Your answer should be a float with two decimals.", "tags": ["single", "table", "objective"],
         "anchor_pdf": [papers["PopQA"]["airqa"]], "reference_pdf": [], "conference": [],
         "evaluator": {"eval_func": "eval_float_exact_match", "eval_kwargs": {"gold": 0.42, "ndigits": 2}}},
        {"uuid": "a0000000-0000-4000-8000-000000000003", "question": Q_LONGEVAL,
         "answer_format": "Your answer should be an integer.", "tags": ["single", "text", "table", "objective"],
         "anchor_pdf": [papers["LongEval"]["paper_id"]], "reference_pdf": [], "conference": [],
         "evaluator": {"eval_func": "eval_int_exact_match", "eval_kwargs": {"gold": 162}}},
        {"uuid": "a0000000-0000-4000-8000-000000000004", "question": Q_S2,
         "answer_format": "Your answer should be one sentence.", "tags": ["single", "text", "subjective"],
         "anchor_pdf": [S2_AIRQA], "reference_pdf": [SPECTER_AIRQA], "conference": [],
         "evaluator": {"eval_func": "eval_reference_answer_with_llm",
                       "eval_kwargs": {"reference_answer": "Papers, authors, entities and venues."}}},
        {"uuid": "a0000000-0000-4000-8000-000000000005", "question": Q_BADFUNC,
         "answer_format": "Your answer should be a model name.", "tags": ["single", "text", "objective"],
         "anchor_pdf": [SPECTER_AIRQA], "reference_pdf": [], "conference": [],
         "evaluator": {"eval_func": "eval_magic_match", "eval_kwargs": {"gold": "SciBERT"}}},
        {"uuid": "a0000000-0000-4000-8000-000000000006", "question": Q_MISSING,
         "answer_format": "One sentence.", "tags": ["single", "text", "subjective"],
         "anchor_pdf": [NOT_IN_CORPUS], "reference_pdf": [], "conference": [],
         "evaluator": {"eval_func": "eval_reference_answer_with_llm", "eval_kwargs": {"reference_answer": "x"}}},
    ]


def write_jsonl(path: Path, items: list) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def neusym_script(papers: dict[str, dict]) -> Script:
    specter = papers["SPECTER"]["paper_id"]

    def search_specter(messages):  # the filter uses the id the prompt gave (resolved from the AirQA id)
        pid = re.search(r"\[Paper IDs\]: ([0-9a-f-]{36}) ", messages[1]["content"]).group(1)
        return act("RetrieveFromVectorstore", "search the paper", query="evaluation suite document-level tasks release",
                   collection_name="text_bm25_en", table_name="chunks", column_name="text_content",
                   filter=f"paper_id == '{pid}'", limit=3)

    return Script({
        Q_SPECTER: [search_specter, act("GenerateAnswer", answer="SciDocs")],
        Q_POPQA: [act("RetrieveFromDatabase", sql="SELECT table_caption FROM tables WHERE table_caption ILIKE "
                                                  "'%recall@1 of Contriever%'"),
                  act("CalculateExpr", expr="0.42 * 1"), act("GenerateAnswer", answer=0.42)],
        Q_LONGEVAL: [act("GenerateAnswer", answer="162")],
        Q_S2: [act("GenerateAnswer", answer="Nodes for papers, authors, entities and venues.")],
        Q_BADFUNC: [act("GenerateAnswer", answer="SciBERT")],
    }, verdicts={Q_S2: True}), specter


# --------------------------------------------------------------------------------------------
# neusym eval run / score through the CLI
# --------------------------------------------------------------------------------------------


def test_eval_run_end_to_end_resume_and_score(corpus_settings, papers, tmp_path, monkeypatch) -> None:
    questions = write_jsonl(tmp_path / "questions.jsonl", airqa_items(papers))
    out = tmp_path / "pred" / "neusym.pred.jsonl"
    script, specter = neusym_script(papers)
    runner = CliRunner()
    with LoopbackEndpoint(script) as endpoint:
        monkeypatch.setenv("NEUSYM_HOME", str(corpus_settings.home))
        monkeypatch.setenv("NEUSYM_LLM_BASE_URL", endpoint.base_url)
        monkeypatch.setenv("NEUSYM_LLM_MODEL", "scripted")
        result = runner.invoke(app, ["eval", "run", str(questions), "--out", str(out), "--method", "neusym"])
        assert result.exit_code == 0, result.output
        assert "6 questions: 0 already in" in result.stderr and "5 answered, 1 errors" in result.stderr
        lines = read_jsonl(out)
        assert len(lines) == 6 and len(script.requests) == 2 + 3 + 1 + 1 + 1
        by_uuid = {line["uuid"]: line for line in lines}
        for line in lines:
            assert set(line) == {"uuid", "method", "answer", "trajectory", "turns", "prompt_tokens",
                                 "completion_tokens", "cached_tokens", "seconds", "stop_reason", "timings", "paper_ids",
                                 "error"}
            assert line["method"] == "neusym"
        s1 = by_uuid["a0000000-0000-4000-8000-000000000001"]
        assert s1["answer"] == "SciDocs" and s1["error"] is None and s1["turns"] == 2
        assert s1["paper_ids"] == [specter]  # the AirQA id resolved to our paper_id
        assert s1["prompt_tokens"] == 2400 and s1["completion_tokens"] == 60 and s1["seconds"] > 0
        search = s1["trajectory"][0]
        assert search["action"] == "RetrieveFromVectorstore" and search["arguments"]["filter"] == f"paper_id == '{specter}'"
        rows = [ln for ln in search["observation"].splitlines() if ln.startswith("| ") and "primary_key" not in ln]
        assert len(rows) == 3 and all(specter in row for row in rows) and "SCIDOCS" in search["observation"]
        task = script.asked(Q_SPECTER)[0]["messages"][1]["content"]
        assert f"[Paper IDs]: {specter} ({SPECTER_TITLE})" in task
        assert "[Answer Format]: Your answer should be the name only." in task
        popqa = by_uuid["a0000000-0000-4000-8000-000000000002"]
        assert popqa["answer"] == 0.42 and popqa["turns"] == 3
        assert "Table 1: The recall@1 of Contriever" in popqa["trajectory"][0]["observation"]
        assert popqa["trajectory"][1]["observation"] == "Result: 0.42"
        assert by_uuid["a0000000-0000-4000-8000-000000000003"]["paper_ids"] == [papers["LongEval"]["paper_id"]]
        s2_task = script.asked(Q_S2)[0]["messages"][1]["content"]  # anchor then reference paper
        assert f"{papers['S2']['paper_id']} ({S2_TITLE}); {specter} ({SPECTER_TITLE})" in s2_task
        missing = by_uuid["a0000000-0000-4000-8000-000000000006"]
        assert missing["answer"] is None and missing["turns"] == 0 and missing["trajectory"] == []
        assert missing["error"].startswith(f"{questions}:6 (uuid a0000000-0000-4000-8000-000000000006): paper id(s) "
                                           "not in the corpus")
        assert f"{NOT_IN_CORPUS} (anchor_pdf)" in missing["error"]
        assert not script.asked(Q_MISSING)

        # resuming: the same command asks the LLM nothing and writes nothing
        before = out.read_bytes()
        n_requests = len(script.requests)
        again = runner.invoke(app, ["eval", "run", str(questions), "--out", str(out), "--method", "neusym"])
        assert again.exit_code == 0, again.output
        assert "6 questions: 6 already in" in again.stderr
        assert out.read_bytes() == before and len(script.requests) == n_requests
        # --retry-errors re-runs only the failed item (still failing: its paper is not in the corpus)
        retry = runner.invoke(app, ["eval", "run", str(questions), "--out", str(out), "--method", "neusym",
                                     "--retry-errors"])
        assert retry.exit_code == 0 and "0 answered, 1 errors" in retry.stderr
        assert [line["uuid"] for line in read_jsonl(out)[6:]] == ["a0000000-0000-4000-8000-000000000006"]
        assert len(script.requests) == n_requests
        # another method may not append to this file
        other = runner.invoke(app, ["eval", "run", str(questions), "--out", str(out), "--method", "iterative-sym"])
        assert other.exit_code == 2 and "was answered with method 'neusym'" in other.stderr

        # scoring with the judge on the loopback endpoint
        scored = runner.invoke(app, ["eval", "score", str(questions), str(out), "--json",
                                     "--judge-llm", endpoint.base_url, "--judge-model", "judge-model"])
    assert scored.exit_code == 0, scored.output
    report = json.loads(scored.stdout)
    assert set(report) == {"overall", "by_tag", "items", "notes"}
    items = {i["uuid"]: i for i in report["items"]}
    assert [i["uuid"] for i in report["items"]] == [q["uuid"] for q in airqa_items(papers)]
    assert all(set(i) == {"uuid", "score", "error"} for i in report["items"])
    assert [items[f"a0000000-0000-4000-8000-00000000000{k}"]["score"] for k in range(1, 7)] == [1, 1, 1, 1, 0, 0]
    assert report["overall"] == round(4 / 6, 4)
    assert report["by_tag"] == {"single": round(4 / 6, 4), "text": round(3 / 5, 4), "table": 1.0,
                                "subjective": 0.5, "objective": 0.75}
    bad = items["a0000000-0000-4000-8000-000000000005"]["error"]
    assert bad.startswith(f"{questions}:5: ") and "unknown evaluation function 'eval_magic_match'" in bad
    assert items["a0000000-0000-4000-8000-000000000006"]["error"].startswith("run error: ")
    assert items["a0000000-0000-4000-8000-000000000001"]["error"] is None
    assert [j["question"] for j in script.judge_requests] == [Q_S2]  # one verdict, then cached
    assert (corpus_settings.home / "judge_cache" / "judge_verdicts.sqlite").exists()


def test_score_matches_by_uuid_not_position(tmp_path, monkeypatch, papers) -> None:
    monkeypatch.setenv("NEUSYM_HOME", str(tmp_path / "home"))
    items = airqa_items(papers)[:3] + [dict(airqa_items(papers)[4])]
    questions = write_jsonl(tmp_path / "q.jsonl", items)
    preds = [
        # shuffled, with an earlier wrong line for item 1 (the last line of a uuid wins) and a stray uuid
        {"uuid": items[0]["uuid"], "answer": "SPECTER", "turns": 9, "seconds": 90.0, "error": None},
        {"uuid": items[2]["uuid"], "answer": 162, "turns": 2, "prompt_tokens": 300, "completion_tokens": 30,
         "seconds": 20.0, "error": None},
        {"uuid": "ffffffff-0000-4000-8000-000000000000", "answer": "x", "error": None},
        {"uuid": items[3]["uuid"], "answer": "SciBERT", "turns": 1, "prompt_tokens": 100, "completion_tokens": 10,
         "seconds": 4.0, "error": None},
        {"uuid": items[0]["uuid"], "answer": "scidocs", "turns": 3, "prompt_tokens": 500, "completion_tokens": 50,
         "seconds": 30.0, "error": None, "verification": {"status": "pass", "basis": "read", "checks": []}},
    ]
    preds[1]["verification"] = {"status": "pass", "basis": "read", "checks": []}
    preds[3]["verification"] = {"status": "pass", "basis": "computed", "checks": []}
    pred_path = write_jsonl(tmp_path / "p.jsonl", preds)
    report = score_predictions(questions, pred_path)
    assert [(i.uuid, i.score) for i in report.items] == [
        (items[0]["uuid"], 1.0), (items[1]["uuid"], 0.0), (items[2]["uuid"], 1.0), (items[3]["uuid"], 0.0)]
    assert report.items[1].error == "no prediction" and report.missing == 1
    assert "unknown evaluation function 'eval_magic_match'" in report.items[3].error and report.eval_errors == 1
    assert report.unknown_predictions == 1
    assert report.overall == 0.5 and report.by_tag["table"] == 0.5 and report.by_tag["objective"] == 0.5
    assert report.means == {"turns": 2.0, "prompt_tokens": 300.0, "completion_tokens": 30.0, "seconds": 18.0}
    # accuracy per verdict: two 'read' passes (items 0 and 2, both right), one 'computed' pass (item 3: its
    # evaluator is unknown, so it scores 0); item 1 has no prediction and the stray uuid is not counted
    assert report.by_verification == {"computed pass": {"n": 1, "accuracy": 0.0},
                                      "read pass": {"n": 2, "accuracy": 1.0}}
    assert report.summary()["by_verification"] == report.by_verification
    human = CliRunner().invoke(app, ["eval", "score", str(questions), str(pred_path)])
    assert human.exit_code == 0, human.output
    assert "overall" in human.stdout and "50.0%" in human.stdout
    assert "2.00 turns, 300 prompt + 30 completion tokens, 18.0 s" in human.stdout
    assert "missing predictions 1" in human.stdout and "no prediction" in human.stderr
    assert "verification: read pass" in human.stdout


def test_malformed_question_lines_name_the_line(tmp_path, papers) -> None:
    good = airqa_items(papers)[0]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([
        json.dumps(good),
        '{"uuid": "b1", "question": ',
        json.dumps({"uuid": "b2", "answer_format": "x"}),
        json.dumps(good),
        "",
        json.dumps({"uuid": "b3", "question": "q?", "anchor_pdf": ["not-a-uuid"]}),
        json.dumps({"uuid": "b4", "question": "q?", "tags": "text"}),
    ]) + "\n")
    with pytest.raises(QuestionFileError) as info:
        load_questions(path)
    message = str(info.value)
    assert message.startswith(f"5 malformed line(s) in {path}:")
    assert f"{path}:2: not valid JSON" in message
    assert f"{path}:3: missing or empty 'question'" in message
    assert f"{path}:4: duplicate uuid {good['uuid']} (first on line 1)" in message
    assert f"{path}:6: anchor_pdf holds 'not-a-uuid', which is not a paper UUID" in message
    assert f"{path}:7: tags must be a list of strings" in message
    result = CliRunner().invoke(app, ["eval", "score", str(path), str(path)])
    assert result.exit_code == 2 and f"{path}:2: not valid JSON" in result.stderr


def test_unknown_method_lists_the_valid_ones(corpus_settings, tmp_path, monkeypatch) -> None:
    with pytest.raises(MethodError, match="unknown method 'graph-rag'; valid methods: neusym, auto, question-only"):
        ask("q?", settings=corpus_settings, llm=ScriptedLLM(Script({})), method="graph-rag")
    monkeypatch.setenv("NEUSYM_HOME", str(corpus_settings.home))
    result = CliRunner().invoke(app, ["eval", "run", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "p.jsonl"),
                                      "--method", "graph-rag"])
    assert result.exit_code == 2
    assert "unknown method 'graph-rag'; valid methods:" in result.stderr and "two-stage-hybrid" in result.stderr


# --------------------------------------------------------------------------------------------
# Methods are restrictions of the same agent: what the LLM is offered, what runs
# --------------------------------------------------------------------------------------------


class RecordingStore:
    """Wraps the real cell search of the current corpus version and records every search."""

    def __init__(self, settings):
        from neusym.store.cells import CellSearch
        from neusym.store.versions import open_version

        self.version = open_version(settings)
        self.inner = CellSearch(self.version.cells, settings)
        self.calls: list[tuple] = []

    def search(self, *args):
        self.calls.append(args)
        return self.inner.search(*args)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def store(corpus_settings):
    recording = RecordingStore(corpus_settings)
    yield recording
    recording.version.close()


def run_method(settings, store, method: str, question: str, replies: list, paper_ids: list[str] | None = None):
    script = Script({question: replies})
    env = Environment(settings, vectorstore=store)
    result = ask(question, settings=settings, llm=ScriptedLLM(script), env=env, method=method,
                             paper_ids=paper_ids, answer_format="A short answer.")
    return result, script.requests


def test_iterative_sym_never_offers_or_runs_vector_search(corpus_settings, store, papers) -> None:
    specter = papers["SPECTER"]["paper_id"]
    result, requests = run_method(corpus_settings, store, "iterative-sym", Q_SPECTER, [
        act("RetrieveFromVectorstore", query="evaluation suite", collection_name="text_bm25_en", table_name="chunks",
            column_name="text_content", filter="", limit=3),
        act("RetrieveFromDatabase", sql=f"SELECT section_title FROM sections WHERE ref_paper_id = '{specter}' "
                                        "AND section_title ILIKE '%SCIDOCS%'"),
        act("GenerateAnswer", answer="SciDocs"),
    ], [specter])
    assert result.answer == "SciDocs" and result.method == "iterative-sym"
    assert all(action_types(r["json_schema"]) == ["RetrieveFromDatabase", "CalculateExpr", "ViewImage",
                                                  "GenerateAnswer"] for r in requests)
    system = requests[0]["messages"][0]["content"]
    assert "RetrieveFromVectorstore" not in system and "[Vectorstore Schema]" not in system
    assert "## [Database Schema]" in system and "CREATE TABLE" in system.upper()
    refused, sql, _ = result.trajectory
    assert refused.error and "RetrieveFromVectorstore is not available in this task (method iterative-sym)" in refused.observation
    assert store.calls == []  # refused before reaching the store
    assert not sql.error and "SCIDOCS" in sql.observation.upper()
    task = requests[0]["messages"][1]["content"]
    assert "every SQL query" in task and "vector search filter" not in task


def test_iterative_neu_and_classic_rag_restrict_views(corpus_settings, store, papers) -> None:
    specter = papers["SPECTER"]["paper_id"]
    result, requests = run_method(corpus_settings, store, "iterative-neu", Q_SPECTER, [
        act("RetrieveFromDatabase", sql="SELECT 1"),
        act("RetrieveFromVectorstore", query="evaluation suite released", collection_name="text_bm25_en",
            table_name="sections", column_name="section_content", filter=f"paper_id == '{specter}'", limit=2),
        act("GenerateAnswer", answer="SciDocs"),
    ], [specter])
    assert all(action_types(r["json_schema"]) == ["RetrieveFromVectorstore", "CalculateExpr", "ViewImage",
                                                  "GenerateAnswer"] for r in requests)
    system = requests[0]["messages"][0]["content"]
    assert "[Database Schema]" not in system and "RetrieveFromDatabase" not in system
    assert "## [Vectorstore Schema]" in system
    assert "RetrieveFromDatabase is not available in this task (method iterative-neu)" in result.trajectory[0].observation
    assert len(store.calls) == 1 and "sections.section_content" in result.trajectory[1].observation

    store.calls.clear()
    result, requests = run_method(corpus_settings, store, "iterative-classic-rag", Q_SPECTER, [
        act("RetrieveFromVectorstore", query="evaluation suite", collection_name="text_bm25_en", table_name="chunks",
            column_name="text_content", filter=f"paper_id == '{specter}'", limit=2),
        act("RetrieveFromVectorstore", query="evaluation suite", collection_name=DENSE, table_name="chunks",
            column_name="text_content", filter=f"paper_id == '{specter}'", limit=2),
        act("GenerateAnswer", answer="SciDocs"),
    ], [specter])
    params = requests[0]["json_schema"]["properties"]["action"]["anyOf"][0]["properties"]["parameters"]["properties"]
    assert params["collection_name"]["enum"] == [DENSE]
    assert params["table_name"]["enum"] == ["chunks"] and params["column_name"]["enum"] == ["text_content"]
    assert action_types(requests[0]["json_schema"]) == ["RetrieveFromVectorstore", "GenerateAnswer"]
    assert "fixes collection_name to" in result.trajectory[0].observation and result.trajectory[0].error
    assert store.calls == [("evaluation suite", DENSE, "chunks", "text_content", f"paper_id == '{specter}'", 2)]


def test_two_stage_methods_retrieve_once_then_answer(corpus_settings, store, papers) -> None:
    specter = papers["SPECTER"]["paper_id"]
    result, requests = run_method(corpus_settings, store, "two-stage-sym", Q_SPECTER, [
        act("RetrieveFromDatabase", sql=f"SELECT title FROM metadata WHERE paper_id = '{specter}'"),
        act("GenerateAnswer", answer="SciDocs"),
    ], [specter])
    assert result.turns == 2 and len(requests) == 2 and result.answer == "SciDocs"
    assert action_types(requests[0]["json_schema"]) == ["RetrieveFromDatabase"]  # must retrieve first
    assert action_types(requests[1]["json_schema"]) == ["GenerateAnswer"]
    assert SPECTER_TITLE in requests[1]["messages"][-1]["content"] and "last turn" in requests[1]["messages"][-1]["content"]
    _, requests = run_method(corpus_settings, store, "two-stage-hybrid", Q_SPECTER, [
        act("RetrieveFromVectorstore", query="evaluation suite", collection_name="text_bm25_en", table_name="chunks",
            column_name="text_content", filter=f"paper_id == '{specter}'", limit=2),
        act("GenerateAnswer", answer="SciDocs"),
    ], [specter])
    assert action_types(requests[0]["json_schema"]) == ["RetrieveFromDatabase", "RetrieveFromVectorstore"]
    system = requests[0]["messages"][0]["content"]
    assert "[Database Schema]" in system and "[Vectorstore Schema]" in system and "exactly two turns" in system


def test_classic_rag_injects_real_chunks_of_the_anchor_paper(corpus_settings, store, papers) -> None:
    specter = papers["SPECTER"]["paper_id"]
    result, requests = run_method(corpus_settings, store, "classic-rag", Q_SPECTER,
                                  [act("GenerateAnswer", answer="SciDocs")], [specter])
    assert result.turns == 1 and len(requests) == 1 and result.answer == "SciDocs"
    fixed, answer = result.trajectory
    assert fixed.fixed and not answer.fixed and fixed.prompt_tokens == 0
    assert fixed.action == "RetrieveFromVectorstore"
    assert fixed.arguments == {"query": Q_SPECTER, "collection_name": DENSE, "table_name": "chunks",
                               "column_name": "text_content", "filter": f"paper_id == '{specter}'", "limit": 4}
    assert store.calls == [(Q_SPECTER, DENSE, "chunks", "text_content", f"paper_id == '{specter}'", 4)]
    with Environment(corpus_settings) as env:
        chunks = dict(env.run_sql(f"SELECT CAST(chunk_id AS VARCHAR), text_content FROM chunks "
                                  f"WHERE ref_paper_id = '{specter}'", max_rows=10_000).rows)
    rows = [ln for ln in fixed.observation.splitlines() if ln.startswith("| ") and "primary_key" not in ln]
    assert len(rows) == 4
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == specter and cells[3] in chunks  # a chunk of the anchor paper
        assert " ".join(chunks[cells[3]].split())[:60] in row  # its real text
    assert "In total, 4 rows are displayed." in fixed.observation
    # the model saw exactly that observation, and could only answer
    messages = requests[0]["messages"]
    assert messages[-1]["content"].startswith("[Observation]:\n" + fixed.observation[:200])
    assert "last turn" in messages[-1]["content"]
    assert action_types(requests[0]["json_schema"]) == ["GenerateAnswer"]
    assert "[Database Schema]" not in messages[0]["content"] and "[Vectorstore Schema]" not in messages[0]["content"]


def test_context_methods_inline_title_abstract_or_cut_full_text(corpus_settings, store, papers) -> None:
    s2 = papers["S2"]["paper_id"]
    with Environment(corpus_settings) as env:
        abstract = env.run_sql(f"SELECT abstract FROM metadata WHERE paper_id = '{s2}'").rows[0][0]
        page1 = env.run_sql(f"SELECT page_content FROM pages WHERE ref_paper_id = '{s2}' AND page_number = 1").rows[0][0]
    result, requests = run_method(corpus_settings, store, "title-abstract", Q_S2, [act("GenerateAnswer", answer="x")], [s2])
    assert result.trajectory[0].fixed and " ".join(abstract.split())[:80] in " ".join(result.trajectory[0].observation.split())
    settings = corpus_settings.model_copy(update={"eval_context_max_tokens": 600})
    result, requests = run_method(settings, store, "full-text", Q_S2, [act("GenerateAnswer", answer="x")], [s2])
    text = result.trajectory[0].observation
    assert " ".join(page1.split())[:60] in " ".join(text.split())
    assert len(text) <= 600 * 4 and "[observation truncated" in text  # the full-text cutoff
    assert store.calls == []  # neither touched the vector store
    _, requests = run_method(corpus_settings, store, "question-only", Q_S2, [act("GenerateAnswer", answer="x")], [s2])
    messages = requests[0]["messages"]
    assert len(messages) == 2 and "[Paper IDs]" not in messages[1]["content"] and S2_TITLE not in str(messages)
    assert action_types(requests[0]["json_schema"]) == ["GenerateAnswer"]


def test_every_method_is_defined_over_the_five_actions() -> None:
    assert list(METHODS) == ["neusym", "auto", "question-only", "title-abstract", "full-text", "classic-rag",
                             "iterative-classic-rag", "two-stage-neu", "iterative-neu", "two-stage-sym",
                             "iterative-sym", "two-stage-hybrid"]
    assert METHODS["iterative-neu"].actions == ("RetrieveFromVectorstore", "CalculateExpr", "ViewImage", "GenerateAnswer")
    assert METHODS["iterative-sym"].actions == ("RetrieveFromDatabase", "CalculateExpr", "ViewImage", "GenerateAnswer")
    assert [METHODS[m].max_turns for m in ("question-only", "classic-rag", "two-stage-neu", "iterative-neu")] == [1, 1, 2, None]


def test_concurrent_run_over_http_writes_every_item_once(corpus_settings, papers, tmp_path) -> None:
    from neusym.llm.chat import OpenAICompatibleLLM

    items = airqa_items(papers)[:4]
    questions = write_jsonl(tmp_path / "q.jsonl", items)
    out = tmp_path / "p.jsonl"
    script = Script({i["question"]: [act("GenerateAnswer", answer=f"answer {n}")] for n, i in enumerate(items)})
    with LoopbackEndpoint(script) as endpoint:
        llm = OpenAICompatibleLLM(endpoint.base_url, "scripted", timeout=30)
        report = run_eval(questions, out, settings=corpus_settings, method="question-only", llm=llm, concurrency=3,
                          limit=3)
    lines = read_jsonl(out)
    assert report.selected == 3 and report.answered == 3 and report.errors == 0
    assert sorted(line["uuid"] for line in lines) == sorted(i["uuid"] for i in items[:3])
    assert {line["uuid"]: line["answer"] for line in lines} == {items[n]["uuid"]: f"answer {n}" for n in range(3)}


# --------------------------------------------------------------------------------------------
# The offline model
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_offline_model_eval_run_smoke(corpus_settings, papers, tmp_path, monkeypatch) -> None:
    """`neusym eval run --method classic-rag` with the offline GGUF on one item, then `eval score`."""
    questions = write_jsonl(tmp_path / "q.jsonl", airqa_items(papers)[:1])
    out = tmp_path / "p.jsonl"
    monkeypatch.setenv("NEUSYM_HOME", str(corpus_settings.home))
    monkeypatch.delenv("NEUSYM_LLM_BASE_URL", raising=False)
    result = CliRunner().invoke(app, ["eval", "run", str(questions), "--out", str(out), "--method", "classic-rag"])
    assert result.exit_code == 0, result.output
    (line,) = read_jsonl(out)
    assert line["error"] is None and line["turns"] == 1 and line["stop_reason"] == "answered"
    assert line["trajectory"][0]["fixed"] and "SCIDOCS" in line["trajectory"][0]["observation"].upper()
    assert line["answer"] not in (None, "") and line["prompt_tokens"] > 500
    scored = CliRunner().invoke(app, ["eval", "score", str(questions), str(out), "--json"])
    report = json.loads(scored.stdout)
    assert report["items"][0]["error"] is None and report["items"][0]["score"] in (0.0, 1.0)
    print(f"offline classic-rag answer {line['answer']!r} in {line['seconds']:.1f} s, score {report['overall']}")
