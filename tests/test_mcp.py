"""The MCP server (neusym.interfaces.service.mcp) through the official SDK's own client: over stdio
(spawning ``neusym mcp`` on the session's sample corpus) and over streamable HTTP against
``neusym serve``'s app on a real uvicorn. Expected values come straight from the corpus database.
The parity test runs our ReAct agent in process and through the MCP tools with the same policy and
checks the model was shown the very same prompts, observations and images both ways.
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import sys
import time
from pathlib import Path

import httpx
import pytest

from neusym.interfaces.service import create_app
from neusym.interfaces.service.mcp_client import McpClient, McpEnvironment
from neusym.llm.chat import LLMReply
from neusym.query.agent.actions import Environment
from neusym.query.agent.react import run_loop
from neusym.store.versions import current_version

from .service_support import LiveServer, ScriptedAgentLLM, wait_for

LONGEVAL = "LongEval: Guidelines for Human Evaluation of Faithfulness in Long-form Summarization"
TOOLS = {"retrieve_from_database", "retrieve_from_vectorstore", "calculate_expr", "view_image", "search_papers",
         "get_paper", "ask"}
NO_LLM = "http://127.0.0.1:9/v1"  # nothing listens there: a question that needed the LLM would fail, not hang
API_KEY = "k-mcp-test-123"


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def longeval(db) -> str:
    return db.execute("SELECT paper_id::VARCHAR FROM metadata WHERE title = ?", [LONGEVAL]).fetchone()[0]


def stdio_connect(settings, llm_url: str = NO_LLM):
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {**os.environ, "NEUSYM_HOME": str(settings.home), "NEUSYM_PDF_DIRS": json.dumps([str(p) for p in settings.pdf_dirs]),
           "NEUSYM_LLM_BASE_URL": llm_url, "NEUSYM_LLM_MODEL": "scripted"}
    command = Path(sys.executable).with_name("neusym")
    return lambda: stdio_client(StdioServerParameters(command=str(command), args=["mcp"], env=env))


def http_connect(url: str, key: str | None):
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"X-API-Key": key} if key else None
    return lambda: streamable_http_client(f"{url}/mcp", http_client=create_mcp_http_client(headers=headers))


@pytest.fixture(scope="module")
def stdio(corpus_settings):
    with McpClient(stdio_connect(corpus_settings)) as client:
        yield client


@pytest.fixture(scope="module")
def server(corpus_settings):
    settings = corpus_settings.model_copy(update={"api_keys": [API_KEY], "llm_base_url": NO_LLM, "llm_model": "none"})
    with LiveServer(create_app(settings)) as live:
        yield live


@pytest.fixture(scope="module")
def http(server):
    with McpClient(http_connect(server.url, API_KEY)) as client:
        yield client


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


# ------------------------------------------------------------------------------------ listing
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_lists_tools_with_schemas_resources_and_the_agent_prompt(request, transport, longeval, corpus_settings):
    client = request.getfixturevalue(transport)
    tools = {t.name: t for t in client.list_tools()}
    assert set(tools) == TOOLS
    vs = tools["retrieve_from_vectorstore"].input_schema
    assert set(vs["required"]) == {"query", "collection_name", "table_name", "column_name"}
    assert "text_bm25_en" in vs["properties"]["collection_name"]["enum"]
    assert "text_content" in vs["properties"]["column_name"]["enum"] and vs["properties"]["limit"]["maximum"] == 20
    assert tools["retrieve_from_database"].annotations.read_only_hint is True
    assert all(len(t.description) > 60 for t in tools.values())
    schema = client.read_resource("neusym://schema/database")
    assert "CREATE TABLE metadata" in schema and "CREATE TABLE chunks" in schema and "bounding_box" in schema
    assert "Encodable (table_name, column_name) pairs" in client.read_resource("neusym://schema/vectorstore")
    views = client.read_resource("neusym://views")
    assert "## result_cells" in views and "papers_per_venue_year" in views
    corpus = json.loads(client.read_resource("neusym://corpus"))
    assert corpus["version"] == current_version(corpus_settings).number and corpus["papers"] == 5
    prompt = client._request(lambda s: s.get_prompt("neusym_agent", {"question": "How many tables does it have?",
                                                                      "paper_ids": longeval}))
    text = prompt.messages[0].content.text
    assert "## [Database Schema]" in text and "## [Vectorstore Schema]" in text
    assert "How many tables does it have?" in text and LONGEVAL in text and "RetrieveFromDatabase = tool" in text


# ------------------------------------------------------------------------------------ each tool
def test_search_papers_and_get_paper(stdio, db, longeval):
    r = stdio.call_tool("search_papers", {"query": "human evaluation of faithfulness in long-form summaries",
                                          "limit": 3})
    assert not r.is_error
    hits = r.structured_content["hits"]
    assert [h["rank"] for h in hits] == [1, 2, 3] and hits[0]["paper_id"] == longeval
    assert hits[0]["title"] == LONGEVAL and hits[0]["venue"] == "eacl" and hits[0]["year"] == 2023
    assert text_of(r).startswith(f"1. {LONGEVAL} (eacl 2023; paper_id {longeval})")
    filtered = stdio.call_tool("search_papers", {"query": "summaries", "venue": "acl", "limit": 5})
    venues = {h["venue"] for h in filtered.structured_content["hits"]}
    assert venues == {"acl"}
    paper = stdio.call_tool("get_paper", {"paper_id": longeval})
    assert not paper.is_error
    data = paper.structured_content
    n_tables = db.execute("SELECT count(*) FROM tables WHERE ref_paper_id = ?", [longeval]).fetchone()[0]
    n_sections = db.execute("SELECT count(*) FROM sections WHERE ref_paper_id = ? AND level = 1",
                            [longeval]).fetchone()[0]
    assert data["title"] == LONGEVAL and len(data["tables"]) == n_tables == data["counts"]["tables"]
    assert len(data["sections"]) == n_sections and data["version"] >= 1
    first = db.execute("SELECT table_caption, page_number FROM tables WHERE ref_paper_id = ? "
                       "ORDER BY page_number, ordinal LIMIT 1", [longeval]).fetchone()
    assert data["tables"][0]["caption"] == first[0] and data["tables"][0]["page_number"] == first[1]
    assert "Sections:" in text_of(paper) and "Tables:" in text_of(paper)


def test_retrieve_from_database_returns_the_agents_table_and_cites_rows(stdio, db, longeval):
    sql = (f"SELECT table_id, table_caption, page_number FROM tables WHERE ref_paper_id = '{longeval}' "
           "AND page_number = 3 ORDER BY ordinal")
    r = stdio.call_tool("retrieve_from_database", {"sql": sql})
    assert not r.is_error, text_of(r)
    expected = db.execute("SELECT table_id::VARCHAR, table_caption, page_number, bounding_box FROM tables "
                          "WHERE ref_paper_id = ? AND page_number = 3 ORDER BY ordinal", [longeval]).fetchall()
    data = r.structured_content
    assert data["columns"] == ["table_id", "table_caption", "page_number"] and data["row_count"] == len(expected) == 2
    assert [row[0] for row in data["rows"]] == [e[0] for e in expected]
    assert "Table 1:" in text_of(r) and "Table 2:" in text_of(r) and text_of(r).lstrip().startswith("+")
    cited = data["citations"]
    assert [c["primary_key"] for c in cited] == [e[0] for e in expected]
    assert all(c["title"] == LONGEVAL and c["page_number"] == 3 and c["table_name"] == "tables" for c in cited)
    assert cited[0]["bounding_box"] == [round(float(v), 1) for v in expected[0][3]]
    # no primary key in the result: no citations
    plain = stdio.call_tool("retrieve_from_database", {"sql": "SELECT count(*) AS n FROM metadata"})
    assert plain.structured_content["rows"] == [[5]] and plain.structured_content["citations"] == []


def test_retrieve_from_vectorstore_filters_and_cites_each_hit(stdio, longeval):
    r = stdio.call_tool("retrieve_from_vectorstore", {
        "query": "how many annotators judged faithfulness", "collection_name": "text_bm25_en",
        "table_name": "chunks", "column_name": "text_content", "filter": f"paper_id == '{longeval}'", "limit": 4})
    assert not r.is_error, text_of(r)
    hits, cited = r.structured_content["hits"], r.structured_content["citations"]
    assert len(hits) == 4 and all(h["paper_id"] == longeval for h in hits)
    assert [c["primary_key"] for c in cited] == [h["primary_key"] for h in hits]
    assert all(c["title"] == LONGEVAL and c["page_number"] == h["page_number"] for c, h in zip(cited, hits))
    assert all(c["quote"] and c["quote"] in h["text"] for c, h in zip(cited, hits))
    assert text_of(r).startswith("Top 4 entries of chunks.text_content in text_bm25_en")


def test_calculate_expr_and_view_image(stdio, db, longeval):
    r = stdio.call_tool("calculate_expr", {"expr": "round((85.1 - 83.4) / 83.4 * 100, 2)"})
    assert not r.is_error and r.structured_content["value"] == 2.04 and text_of(r) == "Result: 2.04"
    x0, y0, w, h = db.execute("SELECT bounding_box FROM tables WHERE ref_paper_id = ? AND page_number = 3 "
                              "ORDER BY ordinal LIMIT 1", [longeval]).fetchone()[0]
    img = stdio.call_tool("view_image", {"paper_id": longeval, "page_number": 3, "bounding_box": [x0, y0, w, h]})
    assert not img.is_error, text_of(img)
    images = [c for c in img.content if c.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    import base64

    width, height = png_size(base64.b64decode(images[0].data))
    assert (width, height) == (img.structured_content["width"], img.structured_content["height"])
    assert abs(width - w * 2) <= 2 and abs(height - h * 2) <= 2  # 144 dpi = 2 pixels per PDF point
    assert img.structured_content["title"] == LONGEVAL
    assert text_of(img).startswith(f"[Image] Page 3 of paper {longeval}, region [315.2, 75.0, 200.3, 103.5]")
    assert "GovReport" in text_of(img)  # the PDF text inside the table's box
    page = stdio.call_tool("view_image", {"paper_id": longeval, "page_number": 1})
    assert not page.is_error and "the whole page" in text_of(page)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_ask_runs_the_router_and_returns_citations(request, transport, db, longeval):
    client = request.getfixturevalue(transport)
    n_tables = db.execute("SELECT count(*) FROM tables WHERE ref_paper_id = ?", [longeval]).fetchone()[0]
    r = client.call_tool("ask", {"question": "How many tables are in this paper?", "paper_ids": [longeval],
                                 "shape": "integer"})
    assert not r.is_error, text_of(r)
    data = r.structured_content
    assert data["answer"] == n_tables and data["route"] and data["verification"]["status"]
    assert data["citations"] and all(c["paper_id"] == longeval and c["title"] == LONGEVAL for c in data["citations"])
    assert text_of(r).startswith(f"Answer: {n_tables}") and "[1] " + LONGEVAL in text_of(r)


def long_run(pid: str, turns: int = 20) -> list[dict]:
    """Agent turns that never answer: a different SQL query each turn (no repeat ban)."""
    return [{"thought": f"look again ({i})", "action": {"action_type": "RetrieveFromDatabase", "parameters": {
        "sql": f"SELECT page_number FROM pages WHERE ref_paper_id = '{pid}' AND page_number > {i}"}}}
            for i in range(turns)]


def test_a_cancelled_ask_stops_its_agent_run(corpus_settings, longeval):
    """The client gives up on an ``ask`` (the SDK sends notifications/cancelled): the run stops at
    its next step instead of using the LLM for the 20 turns it was scripted for."""
    question = "Count the pages of LongEval again and again."
    with ScriptedAgentLLM({question: long_run(longeval)}, delay_s=0.4) as llm:
        with McpClient(stdio_connect(corpus_settings, llm.base_url)) as client:
            call = client.submit(lambda s: s.call_tool("ask", {"question": question, "paper_ids": [longeval],
                                                               "method": "neusym"}))
            asked = wait_for(lambda: len(llm.requests) or None, 120, "the run to start")
            assert call.cancel()
            time.sleep(2.0)
            settled = len(llm.requests)
            time.sleep(2.0)
            assert len(llm.requests) == settled and settled <= asked + 6, (asked, settled)
            ok = client.call_tool("calculate_expr", {"expr": "2 ** 10"})  # and the server keeps serving
            assert ok.structured_content["value"] == 1024


def test_an_http_client_that_goes_away_stops_its_ask(corpus_settings, longeval):
    """Over HTTP a client that closes its connection (here: a read timeout) cancels its request and
    the agent run behind it; the server keeps answering."""
    question = "Count the pages of LongEval once more, over HTTP."
    with ScriptedAgentLLM({question: long_run(longeval)}, delay_s=0.4) as llm:
        settings = corpus_settings.model_copy(update={"llm_base_url": llm.base_url, "llm_model": "scripted"})
        with LiveServer(create_app(settings)) as live:
            headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
            call = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "ask", "arguments": {
                "question": question, "paper_ids": [longeval], "method": "neusym"}}}).encode()
            with socket.create_connection(("127.0.0.1", live.port)) as sock:  # a client that hangs up mid-call
                sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             + "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()
                             + f"Content-Length: {len(call)}\r\n\r\n".encode() + call)
                asked = wait_for(lambda: len(llm.requests) or None, 120, "the run to start")
            time.sleep(1.5)
            settled = len(llm.requests)
            time.sleep(2.0)
            assert len(llm.requests) == settled and settled <= asked + 5, (asked, settled)
            ok = httpx.post(f"{live.url}/mcp", headers=headers, timeout=30, json={
                "jsonrpc": "2.0", "id": 8, "method": "tools/call",
                "params": {"name": "calculate_expr", "arguments": {"expr": "1 + 2"}}})
            assert ok.status_code == 200 and ok.json()["result"]["structuredContent"]["value"] == 3


# ------------------------------------------------------------------------------------ bad input
BAD_CALLS = [
    ("retrieve_from_database", {"sql": "DELETE FROM metadata"}, ["refused", "DELETE"]),
    ("retrieve_from_database", {"sql": "SELECT no_such_column FROM metadata"}, ["SQL error", "no_such_column"]),
    ("retrieve_from_database", {"sql": "COPY metadata TO '/tmp/x.csv'"}, ["refused"]),
    ("retrieve_from_vectorstore", {"query": "x", "collection_name": "text_bm25_en", "table_name": "chunks",
                                   "column_name": "no_such_column"}, ["no_such_column"]),
    ("retrieve_from_vectorstore", {"query": "x", "collection_name": "text_bm25_en", "table_name": "chunks",
                                   "column_name": "text_content", "filter": "paper_id = = 'x'"}, ["filter"]),
    ("retrieve_from_vectorstore", {"query": "x", "collection_name": "nope", "table_name": "chunks",
                                   "column_name": "text_content"}, ["nope"]),
    ("retrieve_from_vectorstore", {"query": "x", "collection_name": "text_bm25_en", "table_name": "chunks",
                                   "column_name": "text_content", "limit": 100000}, ["limit", "20"]),
    ("search_papers", {"query": "x", "limit": 100000}, ["limit", "50"]),
    ("search_papers", {"query": "   "}, ["blank"]),
    ("calculate_expr", {"expr": "__import__('os').system('true')"}, ["Error"]),
    ("get_paper", {"paper_id": "00000000-0000-0000-0000-000000000001"}, ["no paper", "00000000-0000-0000-0000-000000000001"]),
    ("get_paper", {"paper_id": "not-a-uuid"}, ["not-a-uuid"]),
    ("view_image", {"paper_id": "00000000-0000-0000-0000-000000000001", "page_number": 1}, ["no paper"]),
    ("ask", {"question": "x", "method": "telepathy"}, ["unknown method", "neusym"]),
    ("ask", {"question": "x", "paper_ids": ["00000000-0000-0000-0000-000000000001"]}, ["unknown paper id"]),
    ("ask", {"question": "x", "shape": "list:9"}, ["shape", "length"]),
]


@pytest.mark.parametrize("tool, arguments, words", BAD_CALLS, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(BAD_CALLS)])
def test_bad_arguments_come_back_as_tool_errors_and_the_server_keeps_serving(stdio, tool, arguments, words):
    r = stdio.call_tool(tool, arguments)
    assert r.is_error, text_of(r)
    message = text_of(r)
    assert all(w.lower() in message.lower() for w in words), message
    assert "Traceback" not in message
    ok = stdio.call_tool("calculate_expr", {"expr": "6 * 7"})
    assert not ok.is_error and ok.structured_content["value"] == 42


def test_view_image_out_of_range_page_and_box(stdio, longeval):
    far = stdio.call_tool("view_image", {"paper_id": longeval, "page_number": 99})
    assert far.is_error and "out of range" in text_of(far)
    outside = stdio.call_tool("view_image", {"paper_id": longeval, "page_number": 1,
                                             "bounding_box": [5000, 5000, 10, 10]})
    assert outside.is_error and "outside page 1" in text_of(outside)


def test_a_huge_result_is_capped_not_an_error(stdio, corpus_settings):
    r = stdio.call_tool("retrieve_from_database", {"sql": "SELECT range AS n FROM range(100000000)"})
    assert not r.is_error, text_of(r)
    data = r.structured_content
    assert data["truncated"] is True and len(data["rows"]) <= 200
    assert "observation truncated" in text_of(r) or len(text_of(r)) <= corpus_settings.observation_max_tokens * 4


# ------------------------------------------------------------------------------------ HTTP + keys
def test_http_needs_the_api_key(server):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    missing = httpx.post(f"{server.url}/mcp", json=body, headers=headers)
    assert missing.status_code == 401 and "API key is required" in missing.json()["detail"]
    wrong = httpx.post(f"{server.url}/mcp", json=body, headers={**headers, "X-API-Key": "wrong"})
    assert wrong.status_code == 401 and "not valid" in wrong.json()["detail"]
    with pytest.raises(Exception):
        McpClient(http_connect(server.url, None), timeout_s=30)


def test_http_and_stdio_return_the_same_results(http, stdio, longeval):
    calls = [("retrieve_from_database", {"sql": f"SELECT section_id, section_title FROM sections WHERE ref_paper_id = "
                                                f"'{longeval}' ORDER BY ordinal LIMIT 5"}),
             ("retrieve_from_vectorstore", {"query": "faithfulness annotation guidelines", "limit": 3,
                                            "collection_name": "text_sentence_transformers_all_minilm_l6_v2",
                                            "table_name": "chunks", "column_name": "text_content"}),
             ("search_papers", {"query": "citation-informed transformers", "limit": 2}),
             ("get_paper", {"paper_id": longeval})]
    for tool, arguments in calls:
        a, b = http.call_tool(tool, arguments), stdio.call_tool(tool, arguments)
        assert not a.is_error and not b.is_error
        assert text_of(a) == text_of(b) and a.structured_content == b.structured_content, tool
    bad = http.call_tool("retrieve_from_database", {"sql": "DROP TABLE metadata"})
    assert bad.is_error and "refused" in text_of(bad)


# ------------------------------------------------------------------------------------ parity
class PolicyLLM:
    """A deterministic agent policy whose every action depends on what it was shown: a vector search
    for the question, SQL on the top hit's row (its key read from the observation), a look at that
    page, a calculation over numbers of the observations, then an answer quoting the evidence. A
    different observation anywhere changes the later requests and the answer."""

    def __init__(self, paper_id: str):
        self.paper_id = paper_id
        self.requests: list[dict] = []

    def chat(self, messages, *, json_schema=None, max_tokens=None) -> LLMReply:
        self.requests.append({"messages": json.loads(json.dumps(messages)), "json_schema": json_schema})
        shown = [m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]) for m in messages
                 if m["role"] == "user"][1:]
        turn = len(shown)
        question = messages[1]["content"].split("[Question]:", 1)[-1].split("\n", 1)[0].strip()
        if turn == 0:
            action = {"action_type": "RetrieveFromVectorstore", "parameters": {
                "query": question, "collection_name": "text_bm25_en", "table_name": "chunks",
                "column_name": "text_content", "filter": f"paper_id == '{self.paper_id}'", "limit": 3}}
        elif turn == 1:
            keys = re.findall(r"\| ([0-9a-f-]{36}) \|", shown[-1])
            action = {"action_type": "RetrieveFromDatabase", "parameters": {
                "sql": f"SELECT chunk_id, page_number, text_content FROM chunks WHERE chunk_id = '{keys[-1]}'"}}
        elif turn == 2:
            page = int(re.findall(r"\| (\d+) +\|", shown[-1])[0])
            action = {"action_type": "ViewImage", "parameters": {"paper_id": self.paper_id, "page_number": page,
                                                                 "bounding_box": []}}
        elif turn == 3:
            numbers = re.findall(r"\b\d+\b", shown[-1])[:3] or ["0"]
            action = {"action_type": "CalculateExpr", "parameters": {"expr": " + ".join(numbers)}}
        else:
            words = " ".join(" | ".join(shown).split()[-12:])
            action = {"action_type": "GenerateAnswer", "parameters": {"answer": words}}
        reply = json.dumps({"thought": f"turn {turn}", "action": action})
        return LLMReply(text=reply, prompt_tokens=100, completion_tokens=10)


def test_our_agent_through_the_mcp_tools_sees_and_answers_exactly_as_in_process(corpus_settings, stdio, db):
    """Dev-set questions about the sample papers (benchmarks/airqa_dev), one seeded policy: the agent
    in process and the agent whose actions are MCP tool calls (schemas from the MCP resources) send
    the model identical requests, get identical observations and images, and give the same answer."""
    dev = Path(__file__).resolve().parents[1] / "benchmarks" / "airqa_dev" / "questions.jsonl"
    ours = dict(db.execute("SELECT airqa_paper_id::VARCHAR, paper_id::VARCHAR FROM metadata "
                           "WHERE airqa_paper_id IS NOT NULL").fetchall())
    items = [json.loads(line) for line in dev.read_text().splitlines() if line.strip()]
    items = [q for q in items if len(q.get("anchor_pdf") or []) == 1 and q["anchor_pdf"][0] in ours][:3]
    assert len(items) == 3
    settings = corpus_settings.model_copy(update={"llm_base_url": NO_LLM})
    for item in items:
        pid = ours[item["anchor_pdf"][0]]
        runs = []
        for make_env in (lambda: Environment(settings), lambda: McpEnvironment(settings, stdio)):
            llm = PolicyLLM(pid)
            env = make_env()
            try:
                result = run_loop(item["question"], settings=settings, llm=llm, env=env, paper_ids=[pid],
                                  answer_format=item.get("answer_format"), method="neusym")
            finally:
                env.close()
            runs.append((result, llm.requests))
        (local, local_requests), (remote, remote_requests) = runs
        assert [s.action for s in local.trajectory] == ["RetrieveFromVectorstore", "RetrieveFromDatabase",
                                                        "ViewImage", "CalculateExpr", "GenerateAnswer"]
        assert not any(s.error for s in local.trajectory), [s.observation for s in local.trajectory]
        assert [s.observation for s in remote.trajectory] == [s.observation for s in local.trajectory]
        assert [s.image_png_base64 for s in remote.trajectory] == [s.image_png_base64 for s in local.trajectory]
        assert remote_requests == local_requests  # system prompt, schemas, task, every observation
        assert remote.answer == local.answer and remote.answer
