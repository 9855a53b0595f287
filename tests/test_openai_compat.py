"""The OpenAI-compatible endpoint (neusym.interfaces.service.openai_compat) through the official
``openai`` client against uvicorn on loopback.

Runs on the session's sample corpus (``corpus_settings``); questions the router answers without the
LLM use model ``neusym-auto``, the others ``neusym-neusym`` driven by a scripted OpenAI-compatible
endpoint on loopback (never the offline model).
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from openai import OpenAI

from neusym.interfaces.service import create_app, openai_compat
from neusym.interfaces.service.openai_compat import ChatRequestError, answer_parts, chat_question, cited_paper_ids
from neusym.store.versions import current_version

from .service_support import LiveServer, ScriptedAgentLLM, wait_for

LONGEVAL = "LongEval: Guidelines for Human Evaluation of Faithfulness in Long-form Summarization"
COUNT_TABLES = "How many tables are in this paper?"


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def llm():
    with ScriptedAgentLLM({}, delay_s=0.4) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def app(corpus_settings, llm):
    settings = corpus_settings.model_copy(update={"llm_base_url": llm.base_url, "llm_model": "scripted"})
    return create_app(settings)


@pytest.fixture(scope="module")
def server(app):
    with LiveServer(app) as live:
        yield live


@pytest.fixture(scope="module")
def client(server):
    with OpenAI(base_url=server.url + "/v1", api_key="no-key-needed", max_retries=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def ids(db) -> dict[str, str]:
    return {title: pid for pid, title in db.execute("SELECT paper_id::VARCHAR, title FROM metadata").fetchall()}


def table_rows(db, pid: str, page: int) -> list[tuple]:
    return db.execute("SELECT table_caption, bounding_box FROM tables WHERE ref_paper_id = ? AND page_number = ? "
                      "ORDER BY ordinal", [pid, page]).fetchall()


def scripted_answer(pid: str, boxes: list[tuple]) -> list[dict]:
    """Three agent turns: SQL over the tables of page 3, look at the first table, answer."""
    box = [round(v, 2) for v in boxes[0][1]]
    return [
        {"thought": "Count the tables on page 3 of the paper.",
         "action": {"action_type": "RetrieveFromDatabase",
                    "parameters": {"sql": f"SELECT table_caption, bounding_box FROM tables WHERE ref_paper_id = '{pid}' "
                                          "AND page_number = 3 ORDER BY ordinal"}}},
        {"thought": "Look at the first table to be sure.",
         "action": {"action_type": "ViewImage", "parameters": {"paper_id": pid, "page_number": 3, "bounding_box": box}}},
        {"thought": "There are two table captions on page 3.",
         "action": {"action_type": "GenerateAnswer", "parameters": {"answer": str(len(boxes))}}},
    ]


def one_turn_answer(answer: str) -> list[dict]:
    return [{"thought": "I know it.", "action": {"action_type": "GenerateAnswer", "parameters": {"answer": answer}}}]


def extra(obj, name: str):
    """A non-standard field the openai client kept on its pydantic model."""
    return (obj.model_extra or {}).get(name)


def collect(stream) -> tuple[list, str]:
    chunks = list(stream)
    return chunks, "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def task_prompt(llm: ScriptedAgentLLM, question: str) -> str:
    asked = [r for r in llm.requests if r["question"] == question]
    assert asked, f"the scripted LLM was never asked {question!r}"
    return asked[0]["messages"][1]["content"]


# ------------------------------------------------------------------------------------ pure helpers
def test_the_question_is_the_last_user_message_and_history_gives_the_papers():
    a, b = "fd34dbb5-0462-5c0c-b32b-87c588cab037", "0b7e36a4-1111-5222-8333-944455556666"
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first?"},
        {"role": "assistant", "content": f'2 [1]\n\n[1] LongEval, p. 3 — "Table 1: x" (paper {a.upper()})'},
        {"role": "user", "content": "second?"},
        {"role": "assistant", "content": f"yes [1][2]\n\n[1] S, p. 1 (paper {b})\n[2] L (paper {a})\n"
                                         "see (paper 11111111-2222-3333-4444-555555555555) in passing"},
        {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "text", "text": "figures?"}]},
    ]
    assert chat_question(messages) == ("and\nfigures?", 5)
    assert cited_paper_ids(messages, before=5) == [b, a]  # latest turn first, no repeats, only reference lines
    assert cited_paper_ids(messages, before=3) == [a]
    with pytest.raises(ChatRequestError, match="only text content"):
        chat_question([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    head, refs = answer_parts({"answer": ["BLEU", "ROUGE"], "citations": [
        {"paper_id": a, "title": "LongEval", "page_number": 4, "quote": "We  use\nBLEU."}]})
    assert head == '["BLEU", "ROUGE"] [1]' and refs == f'\n\n[1] LongEval, p. 4 — "We use BLEU." (paper {a})'
    none = answer_parts({"answer": None, "stop_reason": "max_turns"})
    assert none == ("(no answer: the agent stopped with max_turns)", "")


# ------------------------------------------------------------------------------------ models
def test_models_are_the_agent_methods(client):
    from neusym.query.agent.methods import METHODS

    models = client.models.list()
    names = [m.id for m in models.data]
    assert names[0] == "neusym-auto" and "neusym-neusym" in names
    assert sorted(names) == sorted(f"neusym-{m}" for m in METHODS)
    assert all(m.object == "model" and m.owned_by == "neusym" and m.created > 1_600_000_000 for m in models.data)
    assert client.models.retrieve("neusym-classic-rag").id == "neusym-classic-rag"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-4o")
    assert err.value.code == "model_not_found" and "neusym-auto" in err.value.message


# ------------------------------------------------------------------------------------ the router (no LLM)
def test_a_symbolic_question_is_answered_with_references_and_citations(client, server, db, ids, corpus_settings):
    pid = ids[LONGEVAL]
    n_tables = db.execute("SELECT count(*) FROM tables WHERE ref_paper_id = ?", [pid]).fetchone()[0]
    ask = {"model": "neusym-auto", "messages": [{"role": "user", "content": COUNT_TABLES}],
           "extra_body": {"paper_ids": [pid]}}
    done = client.chat.completions.create(**ask)
    assert done.object == "chat.completion" and done.id.startswith("chatcmpl-") and done.model == "neusym-auto"
    choice = done.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    text = choice.message.content
    citations = extra(choice.message, "citations")
    assert citations and all(c["paper_id"] == pid and c["title"] == LONGEVAL for c in citations)
    answer_line, _, references = text.partition("\n\n")
    markers = "".join(f"[{i}]" for i in range(1, len(citations) + 1))
    assert answer_line == f"{n_tables} {markers}"
    lines = references.split("\n")
    assert len(lines) == len(citations) and [c["index"] for c in citations] == list(range(1, len(citations) + 1))
    for line, c in zip(lines, citations):
        assert line.startswith(f"[{c['index']}] {LONGEVAL}, p. {c['page_number']} — \"")
        assert line.endswith(f"(paper {pid})") and " ".join(c["quote"].split())[:40] in line
    with_page = [c for c in citations if c.get("page_number")]
    assert with_page
    first = with_page[0]
    assert first["page_image"].startswith(f"{server.url}/papers/{pid}/pages/{first['page_number']}.png")
    image = httpx.get(first["page_image"], timeout=30)
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    info = extra(choice.message, "neusym")
    assert info["version"] == current_version(corpus_settings).number and info["method"] == "auto"
    assert info["route"] == "symbolic" and info["verification"]["status"] in ("pass", "fail", "unverifiable")
    assert info["paper_ids"] == [pid] and info["seconds"] >= 0
    assert extra(done, "citations") == citations and extra(done, "neusym") == info
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens

    # the same question streamed: the same text and citations, in chat.completion.chunk events
    chunks, streamed = collect(client.chat.completions.create(**ask, stream=True))
    assert streamed == text
    assert chunks[0].choices[0].delta.role == "assistant" and len({c.id for c in chunks}) == 1
    assert all(c.object == "chat.completion.chunk" and c.model == "neusym-auto" for c in chunks)
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop"
    assert [c.choices[0].finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert extra(last, "citations") == citations == extra(last.choices[0].delta, "citations")
    assert extra(last, "neusym")["route"] == "symbolic" and extra(last, "neusym")["paper_ids"] == [pid]


# ------------------------------------------------------------------------------------ the agent (scripted LLM)
def test_a_focused_question_runs_the_agent_method_of_the_model(client, llm, db, ids):
    pid = ids[LONGEVAL]
    boxes = table_rows(db, pid, 3)
    results = {}
    for stream in (False, True):
        question = f"How many tables are on page 3 of the LongEval paper? (stream={stream})"
        llm.replies[question] = scripted_answer(pid, boxes)
        ask = {"model": "neusym-neusym", "messages": [{"role": "system", "content": "You are helpful."},
                                                      {"role": "user", "content": question}],
               "extra_body": {"paper_ids": [pid]}, "temperature": 0.2, "max_tokens": 100}
        if stream:
            chunks, text = collect(client.chat.completions.create(**ask, stream=True,
                                                                 stream_options={"include_usage": True}))
            final = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
            results[stream] = (text, extra(final, "citations"), extra(final.choices[0].delta, "neusym"))
            assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 3 * 900
        else:
            done = client.chat.completions.create(**ask)
            msg = done.choices[0].message
            results[stream] = (msg.content, extra(msg, "citations"), extra(msg, "neusym"))
            assert done.usage.prompt_tokens == 3 * 900 and done.usage.completion_tokens == 3 * 40
            assert done.usage.total_tokens == 3 * 940
        assert pid in task_prompt(llm, question)
        assert len([r for r in llm.requests if r["question"] == question]) == 3
    for text, citations, info in results.values():
        assert text == str(len(boxes)) == "2"  # the ReAct method gives no citations: no markers, no references
        assert citations == []
        assert info["method"] == "neusym" and info["route"] is None and info["paper_ids"] == [pid]
    assert results[True][:2] == results[False][:2]


def test_a_follow_up_stays_on_the_paper_the_previous_answer_cited(client, llm, ids):
    pid = ids[LONGEVAL]
    first = client.chat.completions.create(
        model="neusym-auto", messages=[{"role": "user", "content": COUNT_TABLES}], extra_body={"paper_ids": [pid]})
    previous = first.choices[0].message.content
    assert f"(paper {pid})" in previous
    follow_up = "Which dataset does the first table describe?"
    llm.replies[follow_up] = one_turn_answer("PubMed")
    history = [{"role": "user", "content": COUNT_TABLES}, {"role": "assistant", "content": previous},
               {"role": "user", "content": follow_up}]
    done = client.chat.completions.create(model="neusym-neusym", messages=history)
    assert done.choices[0].message.content == "PubMed"
    assert extra(done.choices[0].message, "neusym")["paper_ids"] == [pid]
    assert pid in task_prompt(llm, follow_up)

    # paper_ids in the body override the history: an empty list asks about the whole corpus
    unfocused = "Which dataset does the first table describe? (whole corpus)"
    llm.replies[unfocused] = one_turn_answer("PubMed")
    done = client.chat.completions.create(model="neusym-neusym", messages=history[:2] + [
        {"role": "user", "content": unfocused}], extra_body={"paper_ids": []})
    assert extra(done.choices[0].message, "neusym")["paper_ids"] == []
    assert pid not in task_prompt(llm, unfocused)


def test_a_stream_sends_keep_alives_while_the_agent_runs_and_ends_with_done(server, llm, db, ids, monkeypatch):
    """The wire format: SSE data lines of chunks, ``: keep-alive`` comments while the scripted
    turns take their time (0.4 s each), the final chunk, then ``data: [DONE]``."""
    monkeypatch.setattr(openai_compat, "KEEPALIVE_S", 0.3)
    pid = ids[LONGEVAL]
    question = "How many tables are on page 3 of LongEval? (wire format)"
    llm.replies[question] = scripted_answer(pid, table_rows(db, pid, 3))
    body = {"model": "neusym-neusym", "stream": True, "messages": [{"role": "user", "content": question}],
            "paper_ids": [pid]}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    data = [json.loads(line[6:]) for line in lines[:-1] if line.startswith("data: ")]
    first_content = next(i for i, line in enumerate(lines) if '"content": "2"' in line)
    assert ": keep-alive" in lines[1:first_content]
    assert all(line.startswith("data: ") or line == ": keep-alive" for line in lines)
    assert data[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert data[-1]["choices"][0]["finish_reason"] == "stop" and data[-1]["neusym"]["method"] == "neusym"


def test_an_llm_failure_is_a_502_or_the_last_chunk_of_a_stream(client):
    question = "A question the scripted endpoint has no reply for (openai)."
    with pytest.raises(openai.InternalServerError) as err:
        client.chat.completions.create(model="neusym-neusym", messages=[{"role": "user", "content": question}])
    assert err.value.status_code == 502 and "no scripted reply left" in err.value.message
    chunks, text = collect(client.chat.completions.create(
        model="neusym-neusym", messages=[{"role": "user", "content": question}], stream=True))
    assert text.startswith("Error: ") and "no scripted reply left" in text and "Traceback" not in text
    assert chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_leaves_cancels_its_run_and_frees_the_llm(app, server, llm, stream):
    question = f"A long question nobody waits for (openai, stream={stream})."
    llm.replies[question] = [{"thought": f"step {i}", "action": {"action_type": "RetrieveFromDatabase", "parameters": {
        "sql": f"SELECT {i} AS step"}}} for i in range(5)] + one_turn_answer("done")

    def asked() -> int:
        return len([x for x in llm.requests if x["question"] == question])

    body = {"model": "neusym-neusym", "stream": stream, "messages": [{"role": "user", "content": question}]}
    if stream:
        with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=30) as r:
            lines = r.iter_lines()  # kept: a dropped iterator closes the connection at once
            assert next(lines).startswith("data: ")  # the stream is open
            wait_for(lambda: asked() >= 1, 10, "the first agent turn")  # the run is under way; the client leaves
    else:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.url + "/v1/chat/completions", json=body, timeout=1.0)
        assert asked() >= 1
    slots = app.state.neusym.llm
    wait_for(lambda: slots.running == 0 and slots.waiting == 0, 5, "the LLM slot to be free")
    seen = asked()
    time.sleep(2.0)  # the 6-turn run (0.4 s a turn) would have asked several more times by now
    assert asked() == seen <= 4


# ------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("messages, extra_args, words", [
    ([{"role": "user", "content": "   "}], {}, ["must not be blank"]),
    ([{"role": "system", "content": "hi"}], {}, ["no user message"]),
    ([{"role": "user", "content": "x" * 4001}], {}, ["4001 characters", "at most 4000"]),
    ([{"role": "user", "content": "q?"}], {"n": 2}, ["n must be 1"]),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}], {},
     ["only text content"]),
    ([{"role": "user", "content": "q?"}], {"tools": [{"type": "function", "function": {"name": "f"}}]},
     ["tools", "not supported"]),
    ([{"role": "user", "content": "q?"}], {"extra_body": {"paper_ids": ["not-a-uuid"]}}, ["not a paper id"]),
])
def test_bad_requests_are_400_with_a_clear_message(client, messages, extra_args, words):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="neusym-auto", messages=messages, **extra_args)
    assert err.value.status_code == 400 and all(w in err.value.message for w in words), err.value.message
    assert isinstance(err.value.body, dict) and err.value.body["type"] == "invalid_request_error"


def test_unknown_models_and_papers_are_404(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "q?"}])
    assert err.value.code == "model_not_found" and err.value.param == "model"
    assert "'gpt-4o' does not exist" in err.value.message and "neusym-auto" in err.value.message
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="neusym-auto", messages=[{"role": "user", "content": "q?"}],
                                       extra_body={"paper_ids": ["00000000-0000-0000-0000-000000000001"]})
    assert "unknown paper id" in err.value.message


def test_errors_on_v1_paths_are_openai_shaped_and_others_keep_detail(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        invalid = c.post("/v1/chat/completions", json={"model": "neusym-auto"})
        assert invalid.status_code == 422
        error = invalid.json()["error"]
        assert error["type"] == "invalid_request_error" and "'messages'" in error["message"]
        assert set(error) == {"message", "type", "param", "code"}
        missing = c.get("/v1/nothing")
        assert missing.status_code == 404 and "no such endpoint" in missing.json()["error"]["message"]
        assert "detail" in c.post("/ask/json", json={"question": "  "}).json()
        assert "detail" in c.get("/no/such/thing").json()


def test_a_wrong_api_key_is_an_authentication_error(corpus_settings):
    settings = corpus_settings.model_copy(update={"api_keys": ["k-123"]})
    with LiveServer(create_app(settings)) as live:
        wrong = OpenAI(base_url=live.url + "/v1", api_key="k-999", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as err:
            wrong.models.list()
        assert err.value.status_code == 401 and "not valid" in err.value.message
        assert err.value.code == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            wrong.chat.completions.create(model="neusym-auto", messages=[{"role": "user", "content": "q?"}])
        right = OpenAI(base_url=live.url + "/v1", api_key="k-123", max_retries=0)
        assert "neusym-auto" in [m.id for m in right.models.list().data]
        bare = httpx.get(live.url + "/v1/models", timeout=30)
        assert bare.status_code == 401 and "API key is required" in bare.json()["error"]["message"]
        assert bare.headers["www-authenticate"] == "Bearer"
        assert "detail" in httpx.get(live.url + "/schema", timeout=30).json()  # other paths keep their shape
