"""The service's newer surfaces under attack (issue X): each row of its table as a test against a real
uvicorn on loopback with the clients people use (the official ``openai`` and ``mcp`` clients,
``feedparser``, ``rispy``, ``bibtexparser``), on the session's sample corpus.

X1 a chat history of newlines does not stall the process; X2 abandoned LLM calls end at the endpoint
(calls in flight never exceed the LLM limit); X3 a watch redefined during its evaluation is not recorded
under the old query; X4 control characters never break a feed; X5 CPU-heavy expressions have their own
pool and deadline; X6 MCP view_image bounds its box; X7 a bad prompt argument says why; X8 links never
come from the Host header; X9 exports cannot be field-injected; X10 HEAD, /redoc, the 413 of /v1.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import statistics
import threading
import time

import bibtexparser
import feedparser
import httpx
import pytest
import rispy
from openai import OpenAI

from neusym.interfaces.service import create_app
from neusym.interfaces.service.mcp_client import McpClient

from .service_support import HangingEndpoint, LiveServer, ScriptedAgentLLM, copy_home, wait_for
from .test_mcp import http_connect, text_of

LONGEVAL = "LongEval: Guidelines for Human Evaluation of Faithfulness in Long-form Summarization"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
ANSWER = {"thought": "done", "action": {"action_type": "GenerateAnswer", "parameters": {"answer": "done"}}}


@pytest.fixture(scope="module")
def longeval(db) -> str:
    return db.execute("SELECT paper_id::VARCHAR FROM metadata WHERE title = ?", [LONGEVAL]).fetchone()[0]


def timed_get(client: httpx.Client, path: str) -> tuple[int, float]:
    started = time.monotonic()
    r = client.get(path)
    return r.status_code, time.monotonic() - started


# ------------------------------------------------------------------------------ X1: regex over chat history
def test_a_megabyte_of_newlines_in_the_history_does_not_stall_the_server(corpus_settings, longeval):
    """X1: the earlier assistant message is ~1 MiB of newlines (the body limit); before, the
    reference-line pattern took time quadratic in it (8.5 s of frozen /healthz for 120 KB, about an hour
    at 1 MiB). Now the answer comes back and /healthz answers fast meanwhile."""
    question = "What does the LongEval paper propose?"
    with ScriptedAgentLLM({question: [ANSWER]}) as llm:
        settings = corpus_settings.model_copy(update={"llm_base_url": llm.base_url, "llm_model": "scripted"})
        with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url, timeout=30) as probe:
            history = "\n" * 500_000 + f"[1] {LONGEVAL}, p. 1 (paper {longeval})"
            done: dict = {}

            def chat() -> None:
                with OpenAI(base_url=live.url + "/v1", api_key="x", max_retries=0, timeout=120) as client:
                    done["reply"] = client.chat.completions.create(model="neusym-neusym", messages=[
                        {"role": "user", "content": "hello"}, {"role": "assistant", "content": history},
                        {"role": "user", "content": question}])

            started = time.monotonic()
            worker = threading.Thread(target=chat)
            worker.start()
            waits = []
            while worker.is_alive() and time.monotonic() - started < 60:
                status, took = timed_get(probe, "/healthz")
                assert status == 200
                waits.append(took)
                time.sleep(0.05)
            worker.join(60)
    reply = done["reply"]
    assert reply.choices[0].message.content.startswith("done")
    assert reply.choices[0].message.model_extra["neusym"]["paper_ids"] == [longeval]  # the history's reference
    assert time.monotonic() - started < 30
    assert max(waits) < 1.0, waits


# ------------------------------------------------------------------------------ X2: calls in flight
def test_abandoned_calls_end_at_the_endpoint_and_never_exceed_the_limit(corpus_settings, longeval):
    """X2: with NEUSYM_ASK_CONCURRENCY=1, six clients of /ask/json, /v1 and MCP ask, one after the other,
    hang up while the endpoint LLM holds their call; each call is aborted (the endpoint sees its client
    leave) before the next run gets the LLM, so the endpoint never has more than one call in flight
    (before: the abandoned calls ran on for up to llm_timeout_s, 7 at once)."""
    with HangingEndpoint(hold_s=30, reply=ANSWER) as llm:
        settings = corpus_settings.model_copy(update={"llm_base_url": llm.base_url, "llm_model": "scripted",
                                                      "ask_concurrency": 1, "ask_queue_max": 8, "ask_wait_s": 60})
        app = create_app(settings)
        with LiveServer(app) as live:
            def hang_up(path: str, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                with socket.create_connection(("127.0.0.1", live.port)) as sock:
                    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                 .encode() + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()).encode()
                                 + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                    time.sleep(1.2)  # long enough for its run to reach the LLM

            ask = {"question": "Which datasets does LongEval use?", "paper_ids": [longeval], "method": "neusym"}
            chat = {"model": "neusym-neusym", "messages": [{"role": "user", "content": ask["question"]}],
                    "paper_ids": [longeval]}
            mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask", "arguments": ask}}
            for args in [("/ask/json", ask), ("/v1/chat/completions", chat), ("/mcp", mcp, MCP_HEADERS)] * 2:
                hang_up(*args)  # one after the other: each run gets the LLM, then its client leaves
            wait_for(lambda: app.state.neusym.llm.running == 0 and app.state.neusym.llm.waiting == 0, 20,
                     "every run to end")
            wait_for(lambda: llm.in_flight == 0, 5, "the endpoint to have no call in flight")
    assert llm.requests == 6 and llm.aborted == 6  # calls were made, and every one was aborted
    assert llm.peak == 1


# ------------------------------------------------------------------------------ X3: watch redefined mid-run
def test_a_watch_replaced_during_its_evaluation_is_evaluated_afresh(corpus_settings, tmp_path):
    """X3: an evaluation of the old query finishes after ``watch add --replace``: it records nothing,
    the new definition stays unevaluated, and the next run evaluates the new query."""
    from neusym.query.watches import evaluate, run_watches
    from neusym.store.paper_index import PaperIndex
    from neusym.store.versions import open_version
    from neusym.store.watches import WatchStore, check_watch

    settings = corpus_settings.model_copy(update={"home": copy_home(corpus_settings.home, tmp_path / "home")})
    with WatchStore(settings) as store:
        old = store.add(check_watch("w", "question answering with retrieval and parametric memories"))
    with open_version(settings) as version:
        found = evaluate(PaperIndex.of_version(version, settings), old, None)
        number = version.number
    assert found  # the old query matches something: recording it would be visible
    with WatchStore(settings) as store:
        new = store.add(check_watch("w", "faithfulness of long-form summaries, human evaluation"), replace=True)
        assert store.record_run(old, number, found, 100, 0.1, initial=True) == 0
        assert store.get("w").evaluated_version is None and store.matches("w") == []
    report = run_watches(settings, names=["w"])
    with WatchStore(settings, readonly=True) as store:
        assert report.evaluated == 1 and store.get("w").evaluated_version == number
        titles = [m.title for m in store.matches("w")]
    assert titles and titles[0] == LONGEVAL and new.query.startswith("faithfulness")


# ------------------------------------------------------------------------------ X4: control characters in feeds
def test_control_characters_never_break_a_feed(corpus_settings, tmp_path):
    """X4: the CLI refuses a query with a control character; a watch stored with one (an older store) and
    a matched paper whose title holds one still give a well-formed feed."""
    from neusym.store.watches import WatchStore, check_watch

    from .test_watches import cli

    home = copy_home(corpus_settings.home, tmp_path / "home")
    refused = cli(home, "watch", "add", "graphs\x07 of papers", "--name", "g", check=False)
    assert refused.returncode == 2 and "control character U+0007" in refused.stderr
    settings = corpus_settings.model_copy(update={"home": home})
    with WatchStore(settings) as store:
        watch = store.add(check_watch("bell", "rag tables"))
        hit = {"paper_id": "7c5c6b8e-9f2e-5a51-8b1f-0c2f3f6f1d11", "rank": 1, "score": 2.0,
               "title": "Tables\x0b and \x1bgraphs\ufffe", "authors": ["A\x00n Author"], "venue": "acl",
               "year": 2024, "snippet": "abstract \x0c with a form feed"}
        assert store.record_run(watch, 1, [hit], 100, 0.1, initial=False) == 1
    con = sqlite3.connect(home / "watches.sqlite")  # a query saved before the CLI checked it
    con.execute("UPDATE watches SET query = ? WHERE name = 'bell'", ["rag\x07 tables"])
    con.commit()
    con.close()
    with LiveServer(create_app(settings)) as live:
        r = httpx.get(f"{live.url}/feeds/bell.atom", timeout=30)
    assert r.status_code == 200, r.text
    feed = feedparser.parse(r.content)
    assert feed.bozo == 0 and feed.version == "atom10"
    assert feed.entries[0].title == "Tables and graphs" and feed.feed.title == "neusym: rag tables"


# ------------------------------------------------------------------------------ X5: CPU-heavy tools
def test_heavy_expressions_neither_stall_other_endpoints_nor_queue_without_end(corpus_settings, longeval):
    """X5: huge combinatorics are refused at once; expressions that hit the time budget run on their own
    pool with a deadline, so /overview, /watches and /papers/{id} stay fast meanwhile."""
    settings = corpus_settings.model_copy(update={"llm_base_url": "http://127.0.0.1:9/v1"})
    with LiveServer(create_app(settings)) as live, McpClient(http_connect(live.url, None)) as mcp:
        started = time.monotonic()
        calls = [mcp.submit(lambda s: s.call_tool("calculate_expr", {"expr": "comb(10**6, 5*10**5)"}))
                 for _ in range(4)]
        results = [c.result(30) for c in calls]
        assert all(r.is_error and "would have about 301,027 digits" in text_of(r) for r in results)
        assert time.monotonic() - started < 3
        stop = threading.Event()
        slow = "len([x for x in [1]*9999 if x in [2]*9999])"  # runs into the 2 s budget

        def loop() -> None:
            while not stop.is_set():
                r = mcp.submit(lambda s: s.call_tool("calculate_expr", {"expr": slow})).result(60)
                assert r.is_error and "time budget" in text_of(r)

        loopers = [threading.Thread(target=loop) for _ in range(4)]
        for t in loopers:
            t.start()
        try:
            time.sleep(1.0)
            with httpx.Client(base_url=live.url, timeout=30) as c:
                waits = [timed_get(c, path) for _ in range(5) for path in
                         ("/overview", "/watches", f"/papers/{longeval}")]
        finally:
            stop.set()
            for t in loopers:
                t.join()
    assert all(status == 200 for status, _ in waits)
    assert statistics.median(t for _, t in waits) < 0.5 and max(t for _, t in waits) < 1.5, waits


# ------------------------------------------------------------------------------ X6, X7: MCP arguments
def test_mcp_view_image_bounds_its_box_and_a_bad_prompt_argument_says_why(corpus_settings, longeval):
    with LiveServer(create_app(corpus_settings)) as live, McpClient(http_connect(live.url, None)) as mcp:
        huge = mcp.call_tool("view_image", {"paper_id": longeval, "page_number": 1,
                                            "bounding_box": [0, 0, 1e300, 1e300]})
        assert huge.is_error and "within ±100000" in text_of(huge) and "Overflow" not in text_of(huge)
        from mcp.shared.exceptions import MCPError

        with pytest.raises(MCPError) as bad:
            mcp.submit(lambda s: s.get_prompt("neusym_agent", {"question": "x", "paper_ids": "../../etc"})).result(30)
        assert "'../../etc' is not a paper id" in bad.value.message
        ok = mcp.submit(lambda s: s.get_prompt("neusym_agent", {"question": "x", "paper_ids": longeval})).result(30)
        assert LONGEVAL in ok.messages[0].content.text


# ------------------------------------------------------------------------------ X8: the Host header
def test_links_never_point_where_the_host_header_says(corpus_settings, tmp_path, longeval):
    """X8: feed links, /v1 page images and redirects use the configured public URL (or the socket's own
    address), never the request's Host."""
    from neusym.store.watches import WatchStore, check_watch

    home = copy_home(corpus_settings.home, tmp_path / "home")
    question = "How many tables are in this paper?"  # a symbolic question: answered without the LLM
    for public in (None, "https://papers.example.org/neusym/"):
        settings = corpus_settings.model_copy(update={"home": home, "public_url": public,
                                                      "llm_base_url": "http://127.0.0.1:9/v1"})
        with WatchStore(settings) as store:
            store.add(check_watch("tables", "tables"), replace=True)
        with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url, timeout=60) as c:
            evil = {"Host": "evil.example"}
            base = public or f"{live.url}/"
            feed = c.get("/feeds/tables.atom", headers=evil)
            static = c.get("/static", headers=evil)
            chat = c.post("/v1/chat/completions", headers=evil, json={
                "model": "neusym-auto", "messages": [{"role": "user", "content": question}], "paper_ids": [longeval]})
        assert feed.status_code == 200 and b"evil.example" not in feed.content
        links = [link.href for link in feedparser.parse(feed.content).feed.links]
        assert f"{base}feeds/tables.atom" in links and base in links
        assert static.status_code == 307 and static.headers["location"] == "/static/"
        assert chat.status_code == 200 and "evil.example" not in chat.text
        images = [x["page_image"] for x in chat.json()["citations"] if x.get("page_image")]
        assert images and all(i.startswith(f"{base}papers/{longeval}/pages/") for i in images)


# ------------------------------------------------------------------------------ X9: export injection
def test_exports_cannot_be_field_injected():
    """X9: a crawled download_url with line breaks stays one RIS field; an author "Smith and Jones" stays
    one BibTeX author; read back with rispy and bibtexparser, as reference managers would."""
    from neusym.query.citation_export import to_bibtex, to_ris

    records = [{"paper_id": f"5f0e6d2e-1111-4111-8111-11111111111{i}", "title": f"Paper {i}\nTY  - JOUR",
                "abstract": "line one\r\nER  - \nTY  - BOOK\u2028TI  - injected",
                "authors": ["Smith and Jones", "others", "Ann Lee"], "conference_full": "ACL",
                "conference_abbreviation": "ACL", "pub_year": 2024, "volume": None,
                "download_url": "https://example.org/p.pdf\nER  - \n\nTY  - JOUR\nTI  - evil", "bibtex": None}
               for i in range(3)]
    parsed = rispy.loads(to_ris(records))
    assert len(parsed) == 3 and all("evil" not in r.get("title", "") for r in parsed)
    assert parsed[0]["urls"] == ["https://example.org/p.pdf%0AER%20%20-%20%0A%0ATY%20%20-%20JOUR%0ATI%20%20-%20evil"]
    assert parsed[0]["authors"] == ["Smith and Jones", "others", "Ann Lee"]
    library = bibtexparser.parse_string(to_bibtex(records),
                                        append_middleware=[bibtexparser.middlewares.SeparateCoAuthors()])
    assert len(library.entries) == 3 and not library.failed_blocks
    assert library.entries[0]["author"] == ["{Smith and Jones}", "{others}", "Ann Lee"]


# ------------------------------------------------------------------------------ X10: HEAD, /redoc, 413
def test_head_is_answered_redoc_is_gone_and_v1_refuses_large_bodies_in_openai_shape(corpus_settings, longeval):
    import openai

    with LiveServer(create_app(corpus_settings)) as live, httpx.Client(base_url=live.url, timeout=30) as c:
        health = c.head("/healthz")
        assert health.status_code == 200 and health.content == b"" and int(health.headers["content-length"]) > 50
        for path in (f"/papers/{longeval}", f"/papers/{longeval}/pages/1.png", "/", "/openapi.json"):
            got, head = c.get(path), c.head(path)
            assert head.status_code == got.status_code == 200, path
            assert head.content == b"" and head.headers["content-length"] == str(len(got.content)), path
        assert c.head("/sql").status_code == 405
        assert c.get("/redoc").status_code == 404
        with OpenAI(base_url=live.url + "/v1", api_key="x", max_retries=0) as client:
            with pytest.raises(openai.APIStatusError) as too_large:
                client.chat.completions.create(model="neusym-auto",
                                               messages=[{"role": "user", "content": "x" * (2 << 20)}])
    assert too_large.value.status_code == 413
    assert "larger than 1,048,576 bytes" in too_large.value.message
    assert too_large.value.body["code"] == "request_too_large"
