"""The HTTP service (neusym.interfaces.service) through a real HTTP client against uvicorn on loopback.

Runs on the session's sample corpus (5 real papers ingested once, ``corpus_settings``); the agent
talks to a scripted OpenAI-compatible endpoint on loopback (never the offline model). The version
switch test works on a copy of that home, so publishing there leaves the shared one untouched.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pymupdf
import pytest

from neusym.ids import paper_id_for
from neusym.interfaces.service import create_app
from neusym.interfaces.service.papers import sanitize_table_html
from neusym.settings import Settings
from neusym.store.db import connect_readonly
from neusym.store.versions import current_version

from .service_support import LiveServer, ScriptedAgentLLM, copy_home, sse_events, wait_for

LONGEVAL = "LongEval: Guidelines for Human Evaluation of Faithfulness in Long-form Summarization"
SPECTER = "SPECTER: Document-level Representation Learning using Citation-informed Transformers"
QUESTION = "How many tables are on page 3 of the LongEval paper?"


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def llm():
    with ScriptedAgentLLM({}, delay_s=0.4) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def server(corpus_settings, llm):
    settings = corpus_settings.model_copy(update={"llm_base_url": llm.base_url, "llm_model": "scripted"})
    with LiveServer(create_app(settings)) as live:
        yield live


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def ids(db) -> dict[str, str]:
    return {title: pid for pid, title in db.execute("SELECT paper_id::VARCHAR, title FROM metadata").fetchall()}


def table_rows(db, pid: str, page: int) -> list[tuple]:
    return db.execute("SELECT table_caption, bounding_box FROM tables WHERE ref_paper_id = ? AND page_number = ? "
                      "ORDER BY ordinal", [pid, page]).fetchall()


# ------------------------------------------------------------------------------------ health, docs
def test_healthz_names_the_served_version_and_openapi_lists_every_endpoint(client, corpus_settings):
    h = client.get("/healthz")
    assert h.status_code == 200
    body = h.json()
    assert body["status"] == "ok" and body["version"] == current_version(corpus_settings).number
    assert body["papers"] == 5 and body["published_at"]
    spec = client.get("/openapi.json").json()
    for path in ("/search", "/ask", "/ask/json", "/sql", "/schema", "/papers/{paper_id}",
                 "/papers/{paper_id}/pages/{page}.png", "/healthz"):
        assert path in spec["paths"], path
    assert "text/event-stream" in json.dumps(spec["paths"]["/ask"]["post"]["responses"])
    page = client.get("/")
    assert page.status_code == 200 and "static/app.js" in page.text
    assert client.get("/static/app.js").status_code == 200
    missing = client.get("/no/such/thing")
    assert missing.status_code == 404 and "no such endpoint" in missing.json()["detail"]


# ------------------------------------------------------------------------------------ search
def test_search_returns_papers_with_snippets_and_facets(client, ids):
    r = client.get("/search", params={"q": "human evaluation of faithfulness in long-form summaries", "limit": 3})
    assert r.status_code == 200
    data = r.json()
    top = data["hits"][0]
    assert top["title"] == LONGEVAL and top["paper_id"] == ids[LONGEVAL] and top["rank"] == 1
    assert "faithfulness" in top["snippet"].lower() and top["venue"] == "eacl" and top["year"] == 2023
    assert len(data["hits"]) == 3 and [h["rank"] for h in data["hits"]] == [1, 2, 3]
    assert data["hits"][0]["score"] >= data["hits"][1]["score"] >= data["hits"][2]["score"]
    facets = data["facets"]
    assert facets["pool"] == 5  # the whole sample corpus matches somewhere
    assert sum(v["count"] for v in facets["venue"]) == sum(v["count"] for v in facets["year"]) == 5
    venues = {v["value"]: v["count"] for v in facets["venue"]}
    assert venues == {"eacl": 1, "acl": 1, "naacl": 1, None: 2}


def test_search_ranks_and_counts_facets_as_the_paper_index_does(client, corpus_settings):
    """Hits (with snippets) and the facet pool come from one encoded query and shared scans; they
    must be exactly what neusym.store.paper_index.PaperIndex.search returns for the same query."""
    from collections import Counter

    from neusym.store.paper_index import PaperIndex
    from neusym.store.versions import open_version

    with open_version(corpus_settings) as version:
        index = PaperIndex(version.papers, corpus_settings)
        for q, filters in [("Is there any paper that evaluates faithfulness of long summaries?", {}),
                           ("citation graph embeddings", {"venue": "acl"}), ("language models", {"year": 2023})]:
            ref = index.search(q, limit=100, **filters)
            got = client.get("/search", params={"q": q, "limit": 3, **filters}).json()
            assert [(h["paper_id"], h["score"], h["snippet"]) for h in got["hits"]] == [
                (h.paper_id, h.score, h.snippet) for h in ref[:3]]
            assert {v["value"]: v["count"] for v in got["facets"]["venue"]} == Counter(h.venue for h in ref)
            assert {v["value"]: v["count"] for v in got["facets"]["year"]} == Counter(h.year for h in ref)


def test_search_filters_by_venue_year_and_author(client):
    def titles(**params):
        r = client.get("/search", params={"q": "language models", **params})
        assert r.status_code == 200, r.text
        return r.json()

    eacl = titles(venue="EACL")
    assert [h["title"] for h in eacl["hits"]] == [LONGEVAL]
    assert eacl["facets"]["venue"] == [{"value": "eacl", "count": 1}]
    assert [h["title"] for h in titles(year=2020)["hits"]] == [SPECTER]
    cohan = titles(author="Cohan")  # Arman Cohan wrote both
    assert sorted(h["title"] for h in cohan["hits"]) == sorted([LONGEVAL, SPECTER])
    assert titles(venue="iclr")["hits"] == []


@pytest.mark.parametrize("params, status, words", [
    ({}, 422, ["'q'", "required"]),
    ({"q": "x", "limit": 0}, 422, ["'limit'", "greater than or equal to 1"]),
    ({"q": "x", "limit": 1000}, 422, ["'limit'"]),
    ({"q": "x", "year": "twenty"}, 422, ["'year'", "integer"]),
    ({"q": "   "}, 400, ["blank"]),
])
def test_search_rejects_bad_input_with_a_clear_message(client, params, status, words):
    r = client.get("/search", params=params)
    assert r.status_code == status
    detail = r.json()["detail"]
    assert all(w in detail for w in words), detail
    assert "Traceback" not in r.text


# ------------------------------------------------------------------------------------ SQL
def test_sql_answers_json_and_csv_from_the_served_version(client, db):
    sql = ("SELECT m.title, count(*) AS pages FROM pages p JOIN metadata m ON m.paper_id = p.ref_paper_id "
           "GROUP BY m.title ORDER BY m.title")
    expected = [list(r) for r in db.execute(sql).fetchall()]
    r = client.post("/sql", json={"sql": sql})
    assert r.status_code == 200
    body = r.json()
    assert body["columns"] == ["title", "pages"] and body["types"] == ["VARCHAR", "BIGINT"]
    assert body["rows"] == expected and body["row_count"] == 5 and body["truncated"] is False
    assert dict(expected)[LONGEVAL] == 20
    c = client.post("/sql", json={"sql": sql, "format": "csv"})
    assert c.status_code == 200 and c.headers["content-type"].startswith("text/csv")
    assert c.headers["x-neusym-row-count"] == "5" and c.headers["x-neusym-truncated"] == "false"
    rows = list(csv.reader(io.StringIO(c.text)))
    assert rows[0] == ["title", "pages"] and [[t, int(n)] for t, n in rows[1:]] == expected
    capped = client.post("/sql", json={"sql": "SELECT * FROM range(50)", "max_rows": 7}).json()
    assert capped["row_count"] == 7 and capped["truncated"] and capped["truncated_by"] == "rows"


@pytest.mark.parametrize("sql, words", [
    ("DROP TABLE metadata", ["refused", "DROP"]),
    ("INSERT INTO metadata (title) VALUES ('x')", ["refused"]),
    ("SELECT * FROM read_csv('/etc/passwd')", ["refused", "read_csv"]),
    ("SELECT 1; SELECT 2", ["refused", "2 statements"]),
    ("SELEC title FROM metadata", ["syntax error"]),
    ("SELECT nope FROM metadata", ["SQL error", "nope"]),
])
def test_sql_refuses_writes_files_and_errors_with_400(client, sql, words):
    r = client.post("/sql", json={"sql": sql})
    assert r.status_code == 400, r.text
    assert all(w in r.json()["detail"] for w in words), r.json()
    assert "Traceback" not in r.text


def test_sql_body_errors_are_422(client):
    assert client.post("/sql", json={}).status_code == 422
    assert "format" in client.post("/sql", json={"sql": "SELECT 1", "format": "xml"}).json()["detail"]
    bad = client.post("/sql", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 422 and "not valid JSON" in bad.json()["detail"]


def test_schema_lists_tables_views_and_runnable_examples(client):
    s = client.get("/schema").json()
    names = {r["name"]: r for r in s["relations"]}
    for view in ("papers_per_venue_year", "paper_overview", "author_paper", "element_search"):
        assert names[view]["kind"] == "view" and names[view]["comment"]
    assert names["metadata"]["primary_key"] == ["paper_id"]
    assert any(c["name"] == "bounding_box" and c["comment"] for c in names["tables"]["columns"])
    for example in s["examples"]:
        r = client.post("/sql", json={"sql": example["sql"]})
        assert r.status_code == 200 and r.json()["row_count"] > 0, (example, r.text)
    md = client.get("/schema", params={"format": "markdown"})
    assert md.headers["content-type"].startswith("text/markdown")
    assert md.text.startswith("# NeuSym corpus schema") and "### paper_overview" in md.text
    assert client.get("/schema", params={"format": "yaml"}).status_code == 422


# ------------------------------------------------------------------------------------ papers
def test_paper_detail_has_metadata_section_tree_and_elements(client, db, ids):
    pid = ids[LONGEVAL]
    r = client.get(f"/papers/{pid}")
    assert r.status_code == 200
    p = r.json()
    assert p["title"] == LONGEVAL and p["venue"] == "EACL" and p["year"] == 2023 and p["num_pages"] == 20
    assert p["has_pdf"] and len(p["pages"]) == 20 and "Kalpesh Krishna" in p["authors"]
    counts = dict(zip(("sections", "tables", "figures", "equations", "references"), db.execute(
        "SELECT (SELECT count(*) FROM sections WHERE ref_paper_id = $1), (SELECT count(*) FROM tables WHERE "
        "ref_paper_id = $1), (SELECT count(*) FROM images WHERE ref_paper_id = $1), (SELECT count(*) FROM equations "
        "WHERE ref_paper_id = $1), (SELECT count(*) FROM reference WHERE ref_paper_id = $1)", [pid]).fetchone()))
    assert {k: p["counts"][k] for k in counts} == counts and counts["tables"] > 5 and counts["references"] > 30

    def walk(nodes, parent_level=0):
        for n in nodes:
            assert n["level"] > parent_level
            yield n
            yield from walk(n["children"], n["level"])

    flat = list(walk(p["sections"]))
    assert len(flat) == counts["sections"] and len(p["sections"]) < len(flat)  # a real tree
    assert [n["ordinal"] for n in p["sections"]] == sorted(n["ordinal"] for n in p["sections"])
    table1 = next(t for t in p["tables"] if t["caption"].startswith("Table 1:"))
    assert table1["page_number"] == 3 and len(table1["bounding_box"]) == 4
    assert table1["content_html"].startswith("<table") and "PubMed" in table1["content_html"]
    assert all(len(f["bounding_box"]) == 4 for f in p["figures"])


def test_table_html_is_sanitised():
    dirty = ('<table onclick="x()"><tr><td colspan="2" style="color:red">a<script>alert(1)</script></td>'
             '<td><img src=x onerror=alert(2)><a href="javascript:alert(3)">b</a></td></tr></table>')
    clean = sanitize_table_html(dirty)
    assert clean == '<table><tbody><tr><td colspan="2">a</td><td>b</td></tr></tbody></table>'


def test_citations_get_page_links_only_for_real_papers_and_pages():
    from neusym.interfaces.service.app import enrich_answer

    pid = "fd34dbb5-0462-5c0c-b32b-87c588cab037"
    out = enrich_answer({"citations": [
        {"paper_id": pid, "page_number": 3, "bounding_box": [308.74, 70.85, 213.08, 111.79]},
        {"paper_id": pid, "page_number": 2, "bounding_box": None},
        {"paper_id": "../../healthz?", "page_number": 3},
        {"paper_id": pid, "page_number": None, "table_name": "metadata"},
    ]}, {pid: LONGEVAL})["citations"]
    assert out[0]["page_image"] == f"papers/{pid}/pages/3.png?bbox=308.74,70.85,213.08,111.79"
    assert out[1]["page_image"] == f"papers/{pid}/pages/2.png"
    assert "page_image" not in out[2] and "page_image" not in out[3]
    assert out[0]["title"] == LONGEVAL and out[2]["title"] is None
    assert enrich_answer({"answer": "x"}) == {"answer": "x"}  # agents without citations are fine


@pytest.mark.parametrize("path, words", [
    ("/papers/00000000-0000-0000-0000-000000000000", ["no paper with id 00000000"]),
    ("/papers/not-a-uuid", ["paper ids are UUIDs"]),
    ("/papers/not-a-uuid/pages/1.png", ["paper ids are UUIDs"]),
])
def test_unknown_papers_are_404(client, path, words):
    r = client.get(path)
    assert r.status_code == 404 and all(w in r.json()["detail"] for w in words), r.text


def _pixmap(data: bytes) -> pymupdf.Pixmap:
    return pymupdf.Pixmap(data)


def test_page_image_highlights_the_box_a_citation_points_at(client, db, ids):
    pid = ids[LONGEVAL]
    _caption, box = table_rows(db, pid, 3)[0]
    x0, y0, w, h = box
    plain = client.get(f"/papers/{pid}/pages/3.png")
    marked = client.get(f"/papers/{pid}/pages/3.png", params={"bbox": f"{x0},{y0},{w},{h}"})
    assert plain.status_code == marked.status_code == 200
    assert marked.headers["content-type"] == "image/png" and marked.headers["etag"]
    a, b = _pixmap(plain.content), _pixmap(marked.content)
    assert (a.width, a.height) == (b.width, b.height)
    assert abs(a.width - 595.276 * 1.5) <= 1 and abs(a.height - 841.89 * 1.5) <= 1
    zoom = 1.5
    inside = (int((x0 + w / 2) * zoom), int((y0 + h / 2) * zoom))
    outside = (int(40 * zoom), int(400 * zoom))  # left margin, far from the box
    assert a.pixel(*outside) == b.pixel(*outside)
    assert a.pixel(*inside) != b.pixel(*inside)  # shaded
    edge = (int((x0 + w / 2) * zoom), int(y0 * zoom))
    assert b.pixel(*edge)[2] < 80 and b.pixel(*edge)[0] > 180  # the orange outline
    crop = _pixmap(client.get(f"/papers/{pid}/pages/3.png",
                              params={"bbox": f"{x0},{y0},{w},{h}", "crop": "true", "zoom": 2}).content)
    assert abs(crop.width - (w + 12) * 2) <= 2 and abs(crop.height - (h + 12) * 2) <= 2


@pytest.mark.parametrize("suffix, params, status, words", [
    ("99.png", {}, 404, ["page 99 does not exist", "1-20"]),
    ("0.png", {}, 404, ["numbered from 1"]),
    ("three.png", {}, 404, ["numbered from 1"]),
    ("3.png", {"bbox": "1,2,3"}, 400, ["four numbers"]),
    ("3.png", {"bbox": "a,b,c,d"}, 400, ["four numbers"]),
    ("3.png", {"bbox": "10,10,-5,5"}, 400, ["positive"]),
    ("3.png", {"bbox": "5000,5000,10,10"}, 400, ["outside page 3"]),
    ("3.png", {"zoom": 40}, 400, ["zoom"]),
    ("3.png", {"crop": "true"}, 400, ["needs a bbox"]),
])
def test_page_image_rejects_bad_pages_and_boxes(client, ids, suffix, params, status, words):
    r = client.get(f"/papers/{ids[LONGEVAL]}/pages/{suffix}", params=params)
    assert r.status_code == status, r.text
    assert all(w in r.json()["detail"] for w in words), r.json()


# ------------------------------------------------------------------------------------ ask
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


def test_ask_streams_each_step_then_the_answer(client, llm, db, ids, corpus_settings):
    pid = ids[LONGEVAL]
    boxes = table_rows(db, pid, 3)
    assert len(boxes) == 2
    llm.replies[QUESTION] = scripted_answer(pid, boxes)
    with client.stream("POST", "/ask", json={"question": QUESTION, "paper_ids": [pid], "method": "neusym"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    kinds = [k for k, _, _ in events]
    assert kinds == ["start", "step", "step", "step", "answer"], kinds
    start, steps, answer = events[0][1], [e for e in events if e[0] == "step"], events[-1]
    assert start["version"] == current_version(corpus_settings).number and start["paper_ids"] == [pid]
    assert [s[1]["action"] for s in steps] == ["RetrieveFromDatabase", "ViewImage", "GenerateAnswer"]
    assert [s[1]["index"] for s in steps] == [1, 2, 3]
    assert "Table 1:" in steps[0][1]["observation"] and "Table 2:" in steps[0][1]["observation"]
    # streamed: the first step arrived well before the answer (each scripted turn takes 0.4 s)
    assert answer[2] - steps[0][2] > 0.6
    result = answer[1]
    assert result["answer"] == "2" and result["turns"] == 3 and result["stop_reason"] == "answered"
    assert result["version"] == start["version"] and len(result["trajectory"]) == 3
    for c in result.get("citations") or []:  # present once the agent gives citations
        if c.get("page_number"):
            assert c["page_image"].startswith(f"papers/{c['paper_id']}/pages/{c['page_number']}.png")
            assert client.get("/" + c["page_image"]).status_code == 200
    asked = [r for r in llm.requests if r["question"] == QUESTION]
    assert len(asked) == 3 and pid in asked[0]["messages"][1]["content"]


def test_ask_json_returns_the_same_answer_in_one_object(client, llm, db, ids):
    pid = ids[LONGEVAL]
    question = "Count the tables on page 3 of LongEval (json variant)."
    llm.replies[question] = scripted_answer(pid, table_rows(db, pid, 3))
    r = client.post("/ask/json", json={"question": question, "paper_ids": [pid], "method": "neusym"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"] == "2" and [s["action"] for s in body["trajectory"]] == [
        "RetrieveFromDatabase", "ViewImage", "GenerateAnswer"]
    methods = client.get("/ask/methods").json()
    assert {"neusym", "classic-rag"} <= {m["name"] for m in methods} and sum(m["default"] for m in methods) == 1


def test_ask_with_the_router_carries_route_verification_and_page_links_for_citations(client, db, ids):
    """Method ``auto`` (the router) answers a counting question without the LLM and cites the table
    captions; every citation with a page gets a ``page_image`` link that renders the cited box."""
    if "auto" not in {m["name"] for m in client.get("/ask/methods").json()}:
        pytest.skip("this agent has no router method 'auto' (route, verification and citations come with it)")
    pid = ids[LONGEVAL]
    n_tables = db.execute("SELECT count(*) FROM tables WHERE ref_paper_id = ?", [pid]).fetchone()[0]
    body = {"question": "How many tables are in this paper?", "paper_ids": [pid], "method": "auto"}
    with client.stream("POST", "/ask", json=body) as r:
        events = sse_events(r)
    assert events[0][0] == "start" and events[-1][0] == "answer", [k for k, _, _ in events]
    answer = events[-1][1]
    assert str(answer["answer"]) == str(n_tables) and isinstance(answer["route"], str) and answer["route"]
    assert answer["verification"]["status"] in ("pass", "fail", "unverifiable")
    cited = [c for c in answer["citations"] if c.get("page_image")]
    assert cited and all(c["paper_id"] == pid and c["title"] == LONGEVAL for c in cited)
    first = cited[0]
    box = ",".join(f"{float(v):g}" for v in first["bounding_box"])
    assert first["page_image"] == f"papers/{pid}/pages/{first['page_number']}.png?bbox={box}"
    image = client.get("/" + first["page_image"])
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    same = client.post("/ask/json", json=body).json()
    assert same["citations"] == answer["citations"] and same["answer"] == answer["answer"]


@pytest.mark.parametrize("body, status, words", [
    ({"question": "x", "method": "telepathy"}, 400, ["unknown method", "neusym"]),
    ({"question": "x", "paper_ids": ["not-a-uuid"]}, 400, ["paper_ids", "not a paper id"]),
    ({"question": "x", "paper_ids": ["00000000-0000-0000-0000-000000000001"]}, 404, ["unknown paper id"]),
    ({"question": "   "}, 400, ["blank"]),
    ({"paper_ids": []}, 422, ["'question'", "required"]),
    ({"question": "x" * 5000}, 422, ["'question'", "at most 4000"]),
    ({"question": "x", "shape": "list:9"}, 422, ["'shape.length'", "less than or equal to 6"]),
    ({"question": "x", "shape": "a float"}, 422, ["'shape'", "unknown answer shape"]),
    ({"question": "x", "shape": "integer", "answer_format": "an integer"}, 400, ["shape or answer_format"]),
])
def test_ask_refuses_bad_requests_before_streaming(client, body, status, words):
    for path in ("/ask", "/ask/json"):
        r = client.post(path, json=body)
        assert r.status_code == status, (path, r.text)
        assert r.headers["content-type"].startswith("application/json")
        assert all(w in r.json()["detail"] for w in words), r.json()


def test_a_failing_llm_is_an_error_event_and_a_502(client):
    question = "A question the scripted endpoint has no reply for."
    with client.stream("POST", "/ask", json={"question": question, "method": "neusym"}) as r:
        events = sse_events(r)
    assert [k for k, _, _ in events] == ["start", "error"]
    assert "no scripted reply left" in events[-1][1]["detail"]
    j = client.post("/ask/json", json={"question": question, "method": "neusym"})
    assert j.status_code == 502 and "no scripted reply left" in j.json()["detail"]


# ------------------------------------------------------------------------------------ API keys
def test_api_keys_protect_every_endpoint_but_health_and_page(corpus_settings, ids):
    settings = corpus_settings.model_copy(update={"api_keys": ["k-one", "k-two"]})
    pid = ids[LONGEVAL]
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url, timeout=30) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/").status_code == 200 and c.get("/static/style.css").status_code == 200
        requests = [("GET", "/search?q=summaries", None), ("POST", "/sql", {"sql": "SELECT 1"}),
                    ("GET", "/schema", None), ("GET", f"/papers/{pid}", None),
                    ("GET", f"/papers/{pid}/pages/1.png", None), ("POST", "/ask/json", {"question": "x"}),
                    ("POST", "/ask", {"question": "x"}), ("GET", "/ask/methods", None)]
        for method, path, body in requests:
            r = c.request(method, path, json=body)
            assert r.status_code == 401, (path, r.status_code)
            assert "API key is required" in r.json()["detail"] and r.headers["www-authenticate"] == "Bearer"
            wrong = c.request(method, path, json=body, headers={"X-API-Key": "k-three"})
            assert wrong.status_code == 401 and "not valid" in wrong.json()["detail"]
        ok = c.get("/search", params={"q": "summaries"}, headers={"X-API-Key": "k-two"})
        assert ok.status_code == 200 and ok.json()["hits"]
        bearer = c.post("/sql", json={"sql": "SELECT 42 AS x"}, headers={"Authorization": "Bearer k-one"})
        assert bearer.status_code == 200 and bearer.json()["rows"] == [[42]]
        # the endpoints of saved searches, citations and export are protected the same way
        for path in ("/watches", "/overview", f"/papers/{pid}/similar", f"/papers/{pid}.bib", "/search.bib?q=x"):
            assert c.get(path).status_code == 401, path
            assert c.get(path, headers={"X-API-Key": "k-one"}).status_code == 200, path
        # a feed reader: challenged with Basic, it sends the key of its subscription URL as the password
        feed = c.get("/feeds/nope.atom")
        assert feed.status_code == 401 and feed.headers["www-authenticate"].startswith("Basic")
        assert c.get("/feeds/nope.atom", auth=("reader", "k-two")).status_code == 404  # past auth: no such watch
        assert c.get("/feeds/nope.atom", auth=("reader", "k-three")).status_code == 401
        assert c.get("/overview", auth=("any", "k-one")).status_code == 200


def test_sql_time_limit_and_byte_cap(corpus_settings):
    settings = corpus_settings.model_copy(update={"sql_timeout_s": 0.5, "sql_max_bytes": 20_000})
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url, timeout=30) as c:
        slow = c.post("/sql", json={"sql": "SELECT count(*) FROM range(100000) a, range(100000) b WHERE a.range + b.range = 7"})
        assert slow.status_code == 400 and slow.json()["error"] == "timeout" and "0.5 s" in slow.json()["detail"]
    # the byte cap under a time limit a loaded CI machine cannot hit by accident (0.5 s did, once)
    settings = corpus_settings.model_copy(update={"sql_timeout_s": 30, "sql_max_bytes": 20_000})
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url, timeout=60) as c:
        cap = 20_000
        sql = "SELECT page_content FROM pages ORDER BY page_id"
        big = c.post("/sql", json={"sql": sql})
        body = big.json()
        assert big.status_code == 200 and body["truncated"] and body["truncated_by"] == "bytes"
        assert 0 < body["row_count"] < 73 and len(json.dumps(body["rows"]).encode()) <= cap + 4096
        csv_big = c.post("/sql", json={"sql": sql, "format": "csv"})
        assert len(csv_big.content) <= cap + 4096 and csv_big.headers["x-neusym-truncated"] == "bytes"


# ------------------------------------------------------------------------------------ versions
def test_the_server_follows_a_new_version_without_blocking(corpus_settings, tmp_path):
    from neusym.ingest.publish import publish
    from neusym.store.db import writer

    home = copy_home(Path(corpus_settings.home), tmp_path / "home")
    settings = corpus_settings.model_copy(update={"home": home})
    first = current_version(settings).number
    title = "Quantum Gravity Sonnets as Tokenizer Benchmarks"
    new_id = paper_id_for(title, "")
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url, timeout=30) as c:
        assert c.get("/healthz").json()["version"] == first
        before = c.get("/search", params={"q": "quantum gravity sonnets tokenizer", "limit": 1}).json()
        assert before["hits"][0]["paper_id"] != new_id
        with writer(settings) as con:
            con.execute("INSERT INTO metadata (paper_id, title, abstract, authors, conference_abbreviation, pub_year) "
                        "VALUES (?, ?, ?, ?, 'ACL', 2031)", [new_id, title,
                        "We write sonnets about quantum gravity and use them to benchmark tokenizers.", ["Ada Poet"]])
        done, errors = threading.Event(), []

        def refresh():
            try:
                publish(settings)
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)
            finally:
                done.set()

        threading.Thread(target=refresh, daemon=True).start()
        statuses, versions = [], set()
        while not done.is_set():  # requests keep being answered while the refresh runs
            r = c.get("/search", params={"q": "faithfulness", "limit": 1})
            statuses.append(r.status_code)
            versions.add(r.json()["version"])
        assert not errors and set(statuses) == {200} and len(statuses) > 3
        assert versions <= {first, first + 1}
        wait_for(lambda: c.get("/healthz").json()["version"] == first + 1, 30, "the server to switch versions")
        health = c.get("/healthz").json()
        assert health["papers"] == 6 and health["switches"] == 1
        after = c.get("/search", params={"q": "quantum gravity sonnets tokenizer", "limit": 1}).json()
        assert after["version"] == first + 1 and after["hits"][0]["paper_id"] == new_id
        assert after["hits"][0]["year"] == 2031
        count = c.post("/sql", json={"sql": "SELECT count(*) FROM metadata"}).json()
        assert count["rows"] == [[6]] and count["version"] == first + 1
        no_pdf = c.get(f"/papers/{new_id}/pages/1.png")
        assert no_pdf.status_code == 404 and "has no PDF" in no_pdf.json()["detail"]
        assert c.get(f"/papers/{new_id}").json()["has_pdf"] is False
        # the old version was released: nothing in this process holds its reader lock any more
        old = home / "versions" / f"v{first:06d}" / ".readers"

        def released() -> bool:
            fd = os.open(old, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False
            finally:
                os.close(fd)

        wait_for(released, 10, "the old version to be released")


def test_an_empty_home_is_503_with_a_clear_message(tmp_path):
    settings = Settings(home=tmp_path / "empty")
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url, timeout=30) as c:
        for path in ("/healthz", "/search?q=x", "/schema"):
            r = c.get(path)
            assert r.status_code == 503, path
            assert "no corpus to serve yet" in r.json()["detail"] and "neusym ingest" in r.json()["detail"]
        assert c.get("/").status_code == 200  # the page still loads and says so


@pytest.mark.parametrize("workers", [1, 2])
def test_neusym_serve_command_starts_warm(corpus_settings, repo_root, workers):
    """`neusym serve` as a process (and with two worker processes): ready with the version open,
    first search answered quickly."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NEUSYM_")}, "NEUSYM_HOME": str(corpus_settings.home)}
    proc = subprocess.Popen([sys.executable, "-m", "neusym.interfaces.cli", "serve", "--port", str(port), "--workers", str(workers)],
                            env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=repo_root)
    try:
        url = f"http://127.0.0.1:{port}"

        def up():
            try:
                return httpx.get(url + "/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                return proc.poll() is not None and pytest.fail(proc.stdout.read())

        wait_for(up, 60, "neusym serve to accept requests")
        started = time.monotonic()
        r = httpx.get(url + "/search", params={"q": "citation-informed transformers"}, timeout=10)
        assert r.status_code == 200 and r.json()["hits"][0]["title"] == SPECTER
        assert time.monotonic() - started < 2.0  # warmed at start-up (benchmarks/service_load.py measures it)
        if workers > 1:  # uvicorn's supervisor and one server process per worker (+ multiprocessing's tracker)
            assert len(psutil.Process(proc.pid).children()) >= workers
            served = {httpx.get(url + "/healthz", timeout=10).json()["version"] for _ in range(8)}
            assert served == {current_version(corpus_settings).number}
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert out.count("serving corpus version") == workers


def test_serve_workers_balance_connections_restart_and_refuse_a_taken_port(corpus_settings, repo_root):
    """`neusym serve --workers 2`: each worker listens on its own SO_REUSEPORT socket, so 16 keep-alive
    clients land on both processes (uvicorn's shared socket put 8 of 8 on one); a killed worker is
    replaced; a second server on the same port is refused with a clear message."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NEUSYM_")}, "NEUSYM_HOME": str(corpus_settings.home)}
    cmd = [sys.executable, "-m", "neusym.interfaces.cli", "serve", "--port", str(port), "--workers", "2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=repo_root)
    url = f"http://127.0.0.1:{port}"

    def answering_processes(connections: int) -> set[int]:
        clients = [httpx.Client(base_url=url, timeout=10) for _ in range(connections)]
        try:  # one connection per client, each asked twice (keep-alive: the same process answers)
            seen = [{c.get("/healthz").json()["process"] for _ in range(2)} for c in clients]
        except httpx.TransportError:
            return set()
        finally:
            for c in clients:
                c.close()
        assert all(len(s) == 1 for s in seen)
        return set().union(*seen)

    try:
        def worker_pids() -> list[int]:
            """The supervisor's spawned workers (``spawn_main`` in their command line): a child caught between
            fork and exec still shows the supervisor's command line, and multiprocessing's resource tracker
            is a child too."""
            pids = []
            for c in psutil.Process(proc.pid).children():
                try:
                    if "spawn_main" in " ".join(c.cmdline()):
                        pids.append(c.pid)
                except psutil.NoSuchProcess:
                    continue
            return pids

        workers = wait_for(lambda: proc.poll() is None and len(pids := worker_pids()) == 2 and pids,
                           30, "two worker processes")
        wait_for(lambda: len(answering_processes(16)) == 2, 60, "both workers to answer")
        assert answering_processes(16) == set(workers) and len(workers) == 2

        taken = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=repo_root, timeout=60)
        assert taken.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr + taken.stdout
        assert answering_processes(16) == set(workers)  # the running server is untouched

        os.kill(workers[0], signal.SIGKILL)
        replaced = wait_for(lambda: (lambda p: len(p) == 2 and workers[0] not in p and p)(answering_processes(16)),
                            60, "a new worker replacing the killed one")
        assert workers[1] in replaced
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "exited (exit code -9); starting a new one" in out
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in replaced)
