"""Metadata sources against recorded real responses served from a loopback HTTP server.

- arXiv: the real ``arxiv`` client (``arxiv.Client.query_url_format`` pointed at 127.0.0.1) reads
  recorded live API bodies (tests/fixtures/arxiv, from lukasschwab/arxiv.py). The recordings were
  made with ``sortBy=relevance``; the server ignores ``sortBy``/``sortOrder``, so the served order is
  the recorded relevance order.
- OpenReview: the real ``openreview-py`` client (``OpenReviewClient(baseurl=<loopback>)``) reads API
  v2 notes BUILT from real records (tests/fixtures/openreview/build_notes.py says which fields are
  real, derived or synthesised: dates are synthesised).
- ACL Anthology: the real ``2024.acl.xml`` collection and verbatim subsets of two other real
  collections (tests/fixtures/acl).
A few records are CONSTRUCTED here and say so where they are: an arXiv v2 of a real v1 entry (version
collapse), a real entry with <published> removed (missing fields), the arXiv-side record of the real
ACL paper 2024.acl-long.814 (cross-source dedup), and small SourcePaper objects for merge-rule tests.
Nothing here contacts arxiv.org, openreview.net or aclanthology.org.
"""

from __future__ import annotations

import json
import re
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from neusym.errors import NeusymError
from neusym.ingest.sources import _http
from neusym.ingest.sources.acl_source import fetch_acl, parse_acl_collection, render_markup
from neusym.ingest.sources.arxiv_source import build_arxiv_query, fetch_arxiv, split_arxiv_id
from neusym.ingest.sources.base import (
    SourceError,
    SourcePaper,
    dedup_key,
    dedup_keys,
    merge_sources,
    merged_metadata,
    provenance_rows,
    title_key,
)
from neusym.ingest.sources.openreview_source import fetch_openreview, note_to_paper, resolve_pdf_url, venue_names

FIX = Path(__file__).resolve().parent / "fixtures"
ARXIV_FIX = FIX / "arxiv"
OR_FIX = FIX / "openreview"
ACL_FIX = FIX / "acl"
ACL_XML = ACL_FIX / "2024.acl.xml"
UTC = timezone.utc


# -- loopback server -------------------------------------------------------------------------------


class Reply:
    """One scripted answer: status, body, headers; ``cut`` sends the full Content-Length but only half the body."""

    def __init__(self, status: int = 200, body: bytes | str = b"", headers: dict | None = None, cut: bool = False,
                 delay: float = 0.0):
        self.delay = delay
        self.status = status
        self.body = body.encode() if isinstance(body, str) else body
        self.headers = headers or {}
        self.cut = cut


class Loopback:
    """A 127.0.0.1 HTTP server on a free port, in a thread. ``route(method, path, query, body, headers)``
    gives the default :class:`Reply`; ``push(predicate, reply)`` queues scripted replies served first."""

    def __init__(self):
        self.route = lambda *a: Reply(404, b"no route")
        self.scripted: list[tuple] = []
        self.log: list[tuple[str, str, dict, dict]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def _serve(self, method):
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with server.lock:
                    server.log.append((method, parts.path, query, dict(self.headers)))
                    reply = None
                    for i, (pred, scripted) in enumerate(server.scripted):
                        if pred(method, parts.path, query):
                            reply = scripted
                            del server.scripted[i]
                            break
                if reply is None:
                    reply = server.route(method, parts.path, query, body, self.headers)
                if reply.delay:
                    time.sleep(reply.delay)
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(reply.body)))
                if reply.cut:
                    self.send_header("Connection", "close")
                self.end_headers()
                if reply.cut:
                    self.wfile.write(reply.body[: len(reply.body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                else:
                    self.wfile.write(reply.body)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def push(self, pred, *replies: Reply) -> None:
        self.scripted.extend((pred, r) for r in replies)

    def requests(self, path: str) -> list[dict]:
        return [q for m, p, q, h in self.log if p == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    srv = Loopback()
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    """Record the retry waits instead of sleeping; keep openreview-py from logging in from the environment."""
    waits: list[float] = []
    monkeypatch.setattr(_http, "sleep", waits.append)
    for var in ("OPENREVIEW_USERNAME", "OPENREVIEW_PASSWORD", "OPENREVIEW_API_BASEURL_V2"):
        monkeypatch.delenv(var, raising=False)
    return waits


# -- arXiv -----------------------------------------------------------------------------------------


def _arxiv_key(q: dict) -> tuple:
    return (q.get("search_query", ""), q.get("id_list", ""), q.get("start", "0"), q.get("max_results", ""))


def _recorded_arxiv() -> dict[tuple, dict]:
    index = {}
    for f in sorted(ARXIV_FIX.glob("*.json")):
        rec = json.loads(f.read_text())
        q = {k: v[0] for k, v in parse_qs(urlsplit(rec["url"]).query, keep_blank_values=True).items()}
        index[_arxiv_key(q)] = rec
    return index


RECORDED = _recorded_arxiv()


def _atom_ids(body: str) -> list[str]:
    """Entry ids of a recorded Atom body, read with a regex (independent of the code under test)."""
    return re.findall(r"<id>http://arxiv.org/abs/([^<]+)</id>", body)


def _body(key: tuple) -> str:
    return RECORDED[key]["body"]


@pytest.fixture
def arxiv_server(server):
    extra: dict[tuple, str] = {}

    def route(method, path, q, body, headers):
        if path != "/api/query":
            return Reply(404, "not the arXiv API")
        key = _arxiv_key(q)
        if key in extra:
            return Reply(200, extra[key], {"Content-Type": "application/atom+xml; charset=utf-8"})
        rec = RECORDED.get(key)
        if rec is None:
            return Reply(404, f"no recording for {key}")
        return Reply(rec["status_code"], rec["body"], {"Content-Type": "application/atom+xml; charset=utf-8"})

    server.route = route
    server.extra = extra
    server.api = server.url + "/api/query"
    return server


def _page(start: int, size: int = 10):
    return lambda m, p, q: p == "/api/query" and q.get("start") == str(start) and q.get("max_results") == str(size)


def test_arxiv_paging_three_pages_in_order(arxiv_server):
    papers, wm = fetch_arxiv("testing", page_size=10, max_results=30, delay_seconds=0, base_url=arxiv_server.api)
    expected = [split_arxiv_id(i)[0] for i in _atom_ids(_body(("testing", "", "0", "100")))[:30]]
    assert [p.external_id for p in papers] == expected
    reqs = arxiv_server.requests("/api/query")
    assert [(q["start"], q["max_results"]) for q in reqs] == [("0", "10"), ("10", "10"), ("20", "10")]
    assert all(q["sortBy"] == "lastUpdatedDate" and q["sortOrder"] == "descending" for q in reqs)
    assert wm == max(p.updated for p in papers)


@pytest.mark.parametrize("size", [15, 100])
def test_arxiv_single_page_sizes(arxiv_server, size):
    papers, _ = fetch_arxiv("testing", page_size=size, max_results=size, delay_seconds=0, base_url=arxiv_server.api)
    assert len(papers) == size
    assert [p.external_id for p in papers] == [split_arxiv_id(i)[0] for i in _atom_ids(_body(("testing", "", "0", str(size))))]
    assert len(arxiv_server.requests("/api/query")) == 1


def test_arxiv_record_mapping(arxiv_server):
    p = fetch_arxiv(id_list=["2104.12255v1"], page_size=100, delay_seconds=0, base_url=arxiv_server.api)[0][0]
    assert (p.source, p.external_id, p.version, p.arxiv_id) == ("arxiv", "2104.12255", "v1", "2104.12255")
    assert p.title == "0"
    assert p.authors == ["Quan Thoi Minh Nguyen"]
    assert p.abstract.startswith("What is the funniest number in cryptography? 0.")
    assert p.published == datetime(2021, 4, 20, 16, 7, 14, tzinfo=UTC) and p.pub_year == 2021
    assert p.categories == ["cs.CR"]
    assert p.pdf_url == "https://arxiv.org/pdf/2104.12255v1"
    assert "eprint = \"2104.12255\"" in p.bibtex and p.conference_abbreviation is None
    old = fetch_arxiv(id_list=["quant-ph/0201082v1"], page_size=100, delay_seconds=0, base_url=arxiv_server.api)[0][0]
    assert (old.external_id, old.version) == ("quant-ph/0201082", "v1")


def test_arxiv_watermark_resume(arxiv_server):
    first, wm = fetch_arxiv("testing", page_size=10, max_results=30, delay_seconds=0, base_url=arxiv_server.api)
    assert len(first) == 30
    arxiv_server.log.clear()
    again, wm2 = fetch_arxiv("testing", since=wm, page_size=10, max_results=30, delay_seconds=0,
                             base_url=arxiv_server.api)
    assert again == [] and wm2 == wm
    # newest-first order means paging stops at the first entry not newer than the watermark
    assert len(arxiv_server.requests("/api/query")) == 1
    # a lookback re-reads before the watermark (late announcements); the watermark itself does not move back.
    # Served (recorded relevance) order of updated dates: 2022-02-24, 2024-05-22, 2020-07-16, ...
    back = wm - datetime(2022, 1, 1, tzinfo=UTC)
    seen, wm3 = fetch_arxiv("testing", since=wm, lookback=back, page_size=10, max_results=30, delay_seconds=0,
                            base_url=arxiv_server.api)
    assert [p.external_id for p in seen] == ["2202.12139", "2405.13786"] and wm3 == wm


def test_arxiv_watermark_cut_in_served_order(arxiv_server):
    # Served (recorded relevance) order of updated dates: 2022-02-24, 2024-05-22, 2020-07-16, ...
    since = datetime(2021, 1, 1, tzinfo=UTC)
    papers, wm = fetch_arxiv("testing", since=since, page_size=10, max_results=30, delay_seconds=0,
                             base_url=arxiv_server.api)
    assert [p.external_id for p in papers] == ["2202.12139", "2405.13786"]
    assert wm == datetime(2024, 5, 22, 16, 11, 45, tzinfo=UTC)
    assert len(arxiv_server.requests("/api/query")) == 1


def test_arxiv_400_error_feed_names_the_id(arxiv_server):
    with pytest.raises(SourceError) as err:
        fetch_arxiv(id_list=["abc"], page_size=100, delay_seconds=0, base_url=arxiv_server.api)
    msg = str(err.value)
    assert err.value.source == "arxiv" and "id_list=abc" in msg
    assert "HTTP 400" in msg and "incorrect id format for abc" in msg
    assert isinstance(err.value, NeusymError)
    assert len(arxiv_server.requests("/api/query")) == 1  # a 400 is not retried


def test_arxiv_unknown_id_gives_nothing(arxiv_server):
    assert fetch_arxiv(id_list=["0000.0000"], page_size=100, delay_seconds=0, base_url=arxiv_server.api) == ([], None)


def test_arxiv_503_then_success_resumes_at_the_failed_page(arxiv_server, no_sleep):
    arxiv_server.push(_page(10), Reply(503, "Service Unavailable"))
    papers, _ = fetch_arxiv("testing", page_size=10, max_results=30, delay_seconds=0, backoff_seconds=2.0,
                            base_url=arxiv_server.api)
    assert len(papers) == 30
    assert [q["start"] for q in arxiv_server.requests("/api/query")] == ["0", "10", "10", "20"]
    assert no_sleep == [2.0]


def test_arxiv_retries_are_counted_per_page(arxiv_server, no_sleep):
    arxiv_server.push(_page(0), Reply(503, "down"))
    arxiv_server.push(_page(10), Reply(503, "down"))
    arxiv_server.push(_page(20), Reply(503, "down"))
    papers, _ = fetch_arxiv("testing", page_size=10, max_results=30, delay_seconds=0, num_retries=1,
                            backoff_seconds=1, base_url=arxiv_server.api)
    assert len(papers) == 30 and no_sleep == [1, 1, 1]


def test_arxiv_429_honours_retry_after_and_backs_off(arxiv_server, no_sleep):
    arxiv_server.push(_page(0), Reply(429, "slow down", {"Retry-After": "7"}), Reply(502, "bad gateway"))
    papers, _ = fetch_arxiv("testing", page_size=10, max_results=10, delay_seconds=0, backoff_seconds=1.5,
                            base_url=arxiv_server.api)
    assert len(papers) == 10
    assert no_sleep == [7.0, 3.0]  # Retry-After, then 1.5 * 2**1


def test_arxiv_persistent_503_is_a_clear_error_keeping_partial(arxiv_server, no_sleep):
    arxiv_server.push(_page(10), *[Reply(503, "down")] * 3)
    with pytest.raises(SourceError) as err:
        fetch_arxiv("testing", page_size=10, max_results=30, delay_seconds=0, num_retries=2, backoff_seconds=1,
                    base_url=arxiv_server.api)
    assert "query='testing'" in str(err.value) and "HTTP 503" in str(err.value) and "3 attempts" in str(err.value)
    assert len(err.value.partial) == 10  # page 1 is kept for the caller (the watermark must not move)
    assert no_sleep == [1, 2]


def test_arxiv_truncated_body_is_retried_then_reported(arxiv_server):
    body = _body(("testing", "", "0", "10"))
    truncated = body[: len(body) // 2]
    arxiv_server.push(_page(0), Reply(200, truncated))
    papers, _ = fetch_arxiv("testing", page_size=10, max_results=10, delay_seconds=0, base_url=arxiv_server.api)
    assert len(papers) == 10  # the retry got the whole feed (the library alone would return a short page)
    assert [q["start"] for q in arxiv_server.requests("/api/query")] == ["0", "0"]
    arxiv_server.push(_page(0), Reply(200, truncated), Reply(200, truncated))
    with pytest.raises(SourceError) as err:
        fetch_arxiv("testing", page_size=10, max_results=10, delay_seconds=0, num_retries=1, base_url=arxiv_server.api)
    assert "query='testing'" in str(err.value) and "truncated or ill-formed Atom feed" in str(err.value)


def test_arxiv_connection_cut_mid_body_is_retried(arxiv_server):
    arxiv_server.push(_page(0), Reply(200, _body(("testing", "", "0", "10")), cut=True))
    papers, _ = fetch_arxiv("testing", page_size=10, max_results=10, delay_seconds=0, base_url=arxiv_server.api)
    assert len(papers) == 10
    assert len(arxiv_server.requests("/api/query")) == 2


def test_arxiv_timeout_is_retried(arxiv_server):
    slow = Reply(200, _body(("testing", "", "0", "10")), {"Content-Type": "application/atom+xml"}, delay=0.6)
    arxiv_server.push(_page(0), slow)
    papers, _ = fetch_arxiv("testing", page_size=10, max_results=10, delay_seconds=0, timeout=0.2,
                            base_url=arxiv_server.api)
    assert len(papers) == 10 and len(arxiv_server.requests("/api/query")) == 2
    arxiv_server.push(_page(0), slow, slow)
    with pytest.raises(SourceError, match="ReadTimeout"):
        fetch_arxiv("testing", page_size=10, max_results=10, delay_seconds=0, timeout=0.2, num_retries=1,
                    base_url=arxiv_server.api)


def test_arxiv_versions_collapse_to_highest(arxiv_server):
    # CONSTRUCTED: a v2 entry made from the real 2104.12255v1 entry (id and <updated> changed).
    real = _body(("", "2104.12255v1", "0", "100"))
    entry = real[real.index("<entry>"): real.index("</entry>") + len("</entry>")]
    v2 = entry.replace("2104.12255v1", "2104.12255v2").replace(
        "<updated>2021-04-20T16:07:14Z</updated>", "<updated>2021-05-02T09:00:00Z</updated>")
    feed = real.replace(entry, v2 + "\n  " + entry).replace(
        "<opensearch:totalResults>1<", "<opensearch:totalResults>2<")
    arxiv_server.extra[("", "2104.12255v1,2104.12255", "0", "100")] = feed
    papers, wm = fetch_arxiv(id_list=["2104.12255v1", "2104.12255"], page_size=100, delay_seconds=0,
                             base_url=arxiv_server.api)
    assert [(p.external_id, p.version) for p in papers] == [("2104.12255", "v2")]
    assert wm == datetime(2021, 5, 2, 9, 0, tzinfo=UTC)


def test_arxiv_record_missing_fields(arxiv_server):
    # CONSTRUCTED from the real 1605.08386 feed: its <published> removed (the library skips such entries silently).
    real = _body(("", "1605.08386", "0", "100"))
    arxiv_server.extra[("", "1605.08386", "0", "100")] = re.sub(r"\s*<published>[^<]*</published>", "", real)
    with pytest.raises(SourceError) as err:
        fetch_arxiv(id_list=["1605.08386"], page_size=100, delay_seconds=0, base_url=arxiv_server.api)
    assert "1605.08386" in str(err.value) and "missing published" in str(err.value)
    errors: list[SourceError] = []
    papers, _ = fetch_arxiv(id_list=["1605.08386"], page_size=100, delay_seconds=0, base_url=arxiv_server.api,
                            errors=errors)
    assert papers == [] and len(errors) == 1


def test_build_arxiv_query():
    assert build_arxiv_query(["cs.CL", "cs.LG", "cs.AI"]) == "(cat:cs.CL OR cat:cs.LG OR cat:cs.AI)"
    assert build_arxiv_query(["cs.CL"], "ti:retrieval") == "(cat:cs.CL) AND (ti:retrieval)"
    with pytest.raises(ValueError):
        build_arxiv_query()


# -- OpenReview ------------------------------------------------------------------------------------

ICLR25 = "ICLR.cc/2025/Conference"
NOTES_2025 = json.loads((OR_FIX / "notes_iclr2025.json").read_text())
NOTES_2023 = json.loads((OR_FIX / "notes_iclr2023.json").read_text())


@pytest.fixture
def or_server(server):
    notes = NOTES_2025 + NOTES_2023
    server.page_cap = 5

    def route(method, path, q, body, headers):
        if method == "POST" and path == "/login":
            creds = json.loads(body)
            if creds.get("password") != "secret":
                return Reply(400, json.dumps({"name": "LoginError", "message": "Invalid username or password"}),
                             {"Content-Type": "application/json"})
            user = {"id": creds["id"], "profile": {"id": "~Test_User1"}}
            return Reply(200, json.dumps({"token": "tok-123", "user": user}), {"Content-Type": "application/json"})
        if path != "/notes":
            return Reply(404, json.dumps({"name": "NotFound", "message": path}), {"Content-Type": "application/json"})
        found = notes
        if "content.venueid" in q:
            found = [n for n in found if n["content"].get("venueid", {}).get("value") == q["content.venueid"]]
        if "invitation" in q:
            found = [n for n in found if q["invitation"] in n.get("invitations", [])]
        found = sorted(found, key=lambda n: n["id"])
        total = len(found)
        if "after" in q:
            found = [n for n in found if n["id"] > q["after"]]
        page = found[: min(int(q.get("limit", 1000)), server.page_cap)]
        out = {"notes": page}
        if q.get("count") == "true":
            out["count"] = total
        return Reply(200, json.dumps(out), {"Content-Type": "application/json; charset=utf-8"})

    server.route = route
    return server


def _notes_pred(m, p, q):
    return p == "/notes"


def test_openreview_accepted_only_pages_and_unwraps_values(or_server):
    papers, wm = fetch_openreview(ICLR25, baseurl=or_server.url)
    accepted = [n for n in NOTES_2025 if n["content"]["venueid"]["value"] == ICLR25]
    assert sorted(p.external_id for p in papers) == sorted(n["id"] for n in accepted) and len(papers) == 14
    reqs = or_server.requests("/notes")
    assert all(q["content.venueid"] == ICLR25 and q["sort"] == "id" for q in reqs)
    assert reqs[0]["count"] == "true" and "after" not in reqs[0]
    assert len(reqs) == 4 and all("after" in q for q in reqs[1:])  # 5 + 5 + 4, then an empty page
    dark = next(p for p in papers if p.external_id == "odjMSBSWRt")
    real = next(n for n in NOTES_2025 if n["id"] == "odjMSBSWRt")
    assert dark.title == "DarkBench: Benchmarking Dark Patterns in Large Language Models"
    assert dark.authors == real["content"]["authors"]["value"] and dark.authors[0] == "Esben Kran"
    assert (dark.decision, dark.volume, dark.conference_abbreviation, dark.pub_year) == ("Accept (Oral)", "oral", "ICLR", 2025)
    assert dark.conference_full == "International Conference on Learning Representations"
    assert dark.pdf_url == "https://openreview.net/pdf?id=odjMSBSWRt"  # = the recorded pdf_url of the real record
    assert dark.openreview_id == "odjMSBSWRt" and dark.keywords == real["content"]["keywords"]["value"]
    assert wm == max(p.updated for p in papers)


def test_openreview_all_submissions_with_decisions(or_server):
    papers, _ = fetch_openreview(ICLR25, accepted_only=False, baseurl=or_server.url)
    assert all(q["invitation"] == f"{ICLR25}/-/Submission" for q in or_server.requests("/notes"))
    assert Counter(p.decision for p in papers) == Counter({"Accept (Poster)": 13, "Accept (Oral)": 1, "Reject": 6})
    rejected = [p for p in papers if p.decision == "Reject"]
    assert all(p.conference_abbreviation is None and p.pub_year is None and p.volume is None for p in rejected)


def test_openreview_watermark_resume(or_server):
    papers, wm = fetch_openreview(ICLR25, baseurl=or_server.url)
    again, wm2 = fetch_openreview(ICLR25, since=wm, baseurl=or_server.url)
    assert again == [] and wm2 == wm
    # tmdate of the 10th accepted note (synthesised dates increase with the note's position)
    cut = datetime.fromtimestamp(NOTES_2025[9]["tmdate"] / 1000, tz=UTC)
    newer, _ = fetch_openreview(ICLR25, since=cut, baseurl=or_server.url)
    assert sorted(p.external_id for p in newer) == sorted(n["id"] for n in NOTES_2025[10:14])


def test_openreview_5xx_then_success(or_server):
    or_server.push(_notes_pred, Reply(503, "upstream down"))
    papers, _ = fetch_openreview(ICLR25, baseurl=or_server.url)
    assert len(papers) == 14
    assert len(or_server.requests("/notes")) == 5  # openreview-py's own retry repeated the first page


def test_openreview_truncated_json_is_retried_then_reported(or_server, no_sleep):
    first = or_server.route("GET", "/notes", {"content.venueid": ICLR25, "count": "true", "limit": "1000"}, b"", {})
    truncated = first.body[: len(first.body) // 2]
    or_server.push(_notes_pred, Reply(200, truncated, {"Content-Type": "application/json"}))
    papers, _ = fetch_openreview(ICLR25, baseurl=or_server.url, backoff_seconds=4)
    assert len(papers) == 14 and no_sleep == [4]
    or_server.push(_notes_pred, *[Reply(200, truncated, {"Content-Type": "application/json"})] * 2)
    with pytest.raises(SourceError) as err:
        fetch_openreview(ICLR25, baseurl=or_server.url, num_retries=1)
    assert err.value.source == "openreview" and ICLR25 in str(err.value) and "truncated or invalid JSON" in str(err.value)


def test_openreview_400_is_a_clear_error(or_server):
    or_server.push(_notes_pred, Reply(400, json.dumps({"name": "ValidationError", "message": "content.venueid is invalid"}),
                                      {"Content-Type": "application/json"}))
    with pytest.raises(SourceError) as err:
        fetch_openreview(ICLR25, baseurl=or_server.url)
    assert ICLR25 in str(err.value) and "content.venueid is invalid" in str(err.value)


def test_openreview_login_sends_token(or_server):
    papers, _ = fetch_openreview(ICLR25, baseurl=or_server.url, username="me@example.org", password="secret")
    assert len(papers) == 14
    notes_headers = [h for m, p, q, h in or_server.log if p == "/notes"]
    assert notes_headers and all(h.get("Authorization") == "Bearer tok-123" for h in notes_headers)
    with pytest.raises(SourceError) as err:
        fetch_openreview(ICLR25, baseurl=or_server.url, username="me@example.org", password="wrong")
    assert "Invalid username or password" in str(err.value)


def test_openreview_bad_note_and_plain_values():
    note = json.loads(json.dumps(NOTES_2025[0]))
    del note["content"]["title"]
    with pytest.raises(SourceError) as err:
        note_to_paper(note, ICLR25)
    assert note["id"] in str(err.value) and "missing title" in str(err.value)
    # API v1 shape (plain values) maps the same way as v2 {"value": ...}
    v1 = json.loads(json.dumps(NOTES_2025[2]))
    v1["content"] = {k: v["value"] for k, v in v1["content"].items()}
    assert note_to_paper(v1, ICLR25) == note_to_paper(NOTES_2025[2], ICLR25)


def test_openreview_venue_names():
    assert venue_names("ICLR.cc/2024/Conference") == ("International Conference on Learning Representations", "ICLR", 2024)
    assert venue_names("NeurIPS.cc/2023/Conference")[1:] == ("NeurIPS", 2023)
    assert venue_names("thecvf.com/ECCV/2024/Conference") == (None, "ECCV", 2024)
    assert venue_names("TMLR") == ("Transactions on Machine Learning Research", "TMLR", None)


def test_openreview_pdf_url_resolution():
    assert resolve_pdf_url("/pdf/0123abcd.pdf", "F1") == "https://openreview.net/pdf/0123abcd.pdf"
    assert resolve_pdf_url("https://example.org/x.pdf", "F1") == "https://example.org/x.pdf"
    assert resolve_pdf_url(None, "F1", "http://127.0.0.1:9") == "http://127.0.0.1:9/pdf?id=F1"


# -- ACL Anthology ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def acl2024() -> list[SourcePaper]:
    return parse_acl_collection(ACL_XML)


def test_acl_whole_collection_counts(acl2024):
    assert len(acl2024) == 1031
    assert Counter(p.volume for p in acl2024) == {"long": 864, "short": 77, "demo": 38, "srw": 46, "tutorials": 6}
    assert not any(p.external_id.endswith(".0") for p in acl2024)  # frontmatter excluded
    assert all(p.conference_abbreviation == "ACL" and p.pub_year == 2024 for p in acl2024)


def test_acl_first_paper_fields(acl2024):
    p = acl2024[0]
    assert p.external_id == p.anthology_id == "2024.acl-long.1"
    assert p.title == "Quantized Side Tuning: Fast and Memory-Efficient Tuning of Quantized Large Language Models"
    assert p.authors == ["Zhengxin Zhang", "Dan Zhao", "Xupeng Miao", "Gabriele Oliaro", "Zhihao Zhang", "Qing Li",
                         "Yong Jiang", "Zhihao Jia"]
    assert p.doi == "10.18653/v1/2024.acl-long.1" and p.bibkey == "zhang-etal-2024-quantized" and p.pages == "1-17"
    assert p.pdf_url == "https://aclanthology.org/2024.acl-long.1.pdf"
    assert p.conference_full == "Annual Meeting of the Association for Computational Linguistics"
    assert p.booktitle.endswith("(Volume 1: Long Papers)")
    assert p.abstract.endswith("up to 7$\\times$.") and "top-" not in p.abstract
    assert p.updated == datetime(2024, 8, 27, tzinfo=UTC)  # the volume's ingest-date
    assert p.bibtex.startswith("@inproceedings{zhang-etal-2024-quantized,") and 'pages = "1--17"' in p.bibtex


def test_acl_markup_rendering_on_real_titles(acl2024):
    by_id = {p.external_id: p for p in acl2024}
    assert by_id["2024.acl-long.814"].title == "$\\infty$Bench: Extending Long Context Evaluation Beyond 100K Tokens"
    assert by_id["2024.acl-long.446"].title == (
        "M$^3$CoT: A Novel Benchmark for Multi-Domain Multi-step Multi-modal Chain-of-Thought")
    assert by_id["2024.acl-long.479"].title == (
        "MC$^2$: Towards Transparent and Culturally-Aware NLP for Minority Languages in China")
    assert by_id["2024.acl-srw.1"].title == "Feriji: A French-Zarma Parallel Corpus, Glossary & Translator"
    assert 'title = "Feriji: A {F}rench-{Z}arma Parallel Corpus, Glossary & Translator"' in by_id["2024.acl-srw.1"].bibtex
    # <tex-math>K</tex-math> is trivial: rendered as plain text (2024.acl-long.2 abstract: "top-<tex-math>K</tex-math>")
    assert "the top-K parameter" in by_id["2024.acl-long.2"].abstract
    assert all("<" not in p.title and "fixed-case" not in p.title for p in acl2024)


def test_acl_volume_selection(acl2024):
    short = parse_acl_collection(ACL_XML, volumes={"2024.acl-short"})
    assert len(short) == 77 and all(p.external_id.startswith("2024.acl-short.") for p in short)
    demo = parse_acl_collection(ACL_XML, volumes={"demo", "tutorials"})
    assert Counter(p.volume for p in demo) == {"demo": 38, "tutorials": 6}
    assert len(parse_acl_collection(ACL_XML, volumes={"2024.acl"})) == 1031
    assert parse_acl_collection(ACL_XML, volumes={"2024.findings-acl"}) == []


def test_acl_findings_get_their_conference():
    papers = parse_acl_collection(ACL_FIX / "2024.findings.subset.xml")
    assert [(p.external_id, p.conference_abbreviation, p.volume) for p in papers] == [
        ("2024.findings-eacl.1", "EACL", "findings"), ("2024.findings-eacl.2", "EACL", "findings"),
        ("2024.findings-acl.1", "ACL", "findings"), ("2024.findings-acl.2", "ACL", "findings")]
    chem = papers[0]
    assert chem.title == "Chem-FINESE: Validating Fine-Grained Few-shot Entity Extraction through Text Reconstruction"
    assert chem.doi is None  # the real EACL findings entries carry no DOI
    assert chem.updated == datetime(2024, 5, 30, tzinfo=UTC)  # revision 2 date
    assert papers[2].conference_full == "Annual Meeting of the Association for Computational Linguistics"


def test_acl_truncated_xml_names_file_and_line(tmp_path):
    raw = ACL_XML.read_bytes()[:100_000]
    bad = tmp_path / "2024.acl.xml"
    bad.write_bytes(raw)
    with pytest.raises(SourceError) as err:
        parse_acl_collection(bad)
    msg = str(err.value)
    assert err.value.source == "acl" and str(bad) in msg
    line = int(re.search(r"line (\d+)", msg).group(1))
    assert abs(line - (raw.count(b"\n") + 1)) <= 1  # the error is at the end of the cut file
    with pytest.raises(SourceError, match="https://example.invalid/2024.acl.xml"):
        parse_acl_collection(raw, name="https://example.invalid/2024.acl.xml")


def test_acl_directory_collections_and_watermark(tmp_path):
    papers, wm = fetch_acl(ACL_FIX, collections={"2024.findings.subset", "2023.emnlp.subset"})
    assert {p.external_id for p in papers} == {"2023.emnlp-main.1", "2023.emnlp-main.67", "2024.findings-eacl.1",
                                              "2024.findings-eacl.2", "2024.findings-acl.1", "2024.findings-acl.2"}
    assert wm == max(p.updated for p in papers)
    again, wm2 = fetch_acl(ACL_FIX, collections={"2024.findings.subset", "2023.emnlp.subset"}, since=wm)
    assert again == [] and wm2 == wm
    # since = the ACL 2024 long volume ingest date: only papers revised later remain (oracle: ElementTree)
    since = datetime(2024, 8, 27, tzinfo=UTC)
    later, _ = fetch_acl(ACL_XML, since=since)
    root = ET.parse(ACL_XML).getroot()
    expected = set()
    for vol in root.iter("volume"):
        for paper in vol.iter("paper"):
            dates = [vol.get("ingest-date")] + [r.get("date") for r in paper.iter("revision") if r.get("date")]
            if max(dates) > "2024-08-27":
                expected.add(paper.find("url").text)
    assert {p.external_id for p in later} == expected and expected


def test_acl_download_by_url_with_retry_and_truncation(server, no_sleep):
    raw = ACL_XML.read_bytes()
    server.route = lambda m, p, q, b, h: (Reply(200, raw, {"Content-Type": "application/xml"})
                                         if p == "/data/xml/2024.acl.xml" else Reply(404, "missing"))
    url = server.url + "/data/xml/2024.acl.xml"
    server.push(lambda m, p, q: True, Reply(503, "busy"), Reply(200, raw, cut=True))
    papers, _ = fetch_acl([url], volumes={"short"}, backoff_seconds=0.5)
    assert len(papers) == 77 and no_sleep == [0.5, 1.0]
    server.push(lambda m, p, q: True, Reply(200, raw[:50_000]))  # a complete answer whose body is cut XML
    with pytest.raises(SourceError) as err:
        fetch_acl(url)
    assert url in str(err.value) and "line" in str(err.value)
    server.push(lambda m, p, q: True, Reply(404, "gone"))
    errors: list[SourceError] = []
    assert fetch_acl([url], errors=errors) == ([], None) and "HTTP 404" in str(errors[0])


def test_render_markup_without_element():
    assert render_markup(None) == ""


# -- dedup across sources --------------------------------------------------------------------------

# CONSTRUCTED arXiv record of the real ACL paper 2024.acl-long.814 ("∞Bench"): arXiv id 2402.13718 and
# its "$\infty$Bench" title spelling are taken from public references to the arXiv version; authors and
# abstract are copied from the ACL record; version and dates are made up.
INFTY_FEED = """<?xml version='1.0' encoding='UTF-8'?>
<feed xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/" xmlns:arxiv="http://arxiv.org/schemas/atom" xmlns="http://www.w3.org/2005/Atom">
  <id>https://arxiv.org/api/constructed-for-tests</id>
  <title>arXiv Query: id_list=2402.13718</title>
  <updated>2024-03-01T00:00:00Z</updated>
  <opensearch:itemsPerPage>100</opensearch:itemsPerPage>
  <opensearch:totalResults>1</opensearch:totalResults>
  <opensearch:startIndex>0</opensearch:startIndex>
  <entry>
    <id>http://arxiv.org/abs/2402.13718v1</id>
    <title>$\\infty$Bench: Extending Long Context Evaluation Beyond 100K
  Tokens</title>
    <updated>2024-02-21T00:00:00Z</updated>
    <published>2024-02-21T00:00:00Z</published>
    <summary>{abstract}</summary>
    <link href="https://arxiv.org/abs/2402.13718v1" rel="alternate" type="text/html"/>
    <link href="https://arxiv.org/pdf/2402.13718v1" rel="related" type="application/pdf" title="pdf"/>
    <category term="cs.CL" scheme="http://arxiv.org/schemas/atom"/>
    <arxiv:primary_category term="cs.CL"/>
{authors}
  </entry>
</feed>
"""


def test_merge_acl_and_arxiv_prefers_the_venue_record(arxiv_server, acl2024):
    acl = next(p for p in acl2024 if p.external_id == "2024.acl-long.814")
    from xml.sax.saxutils import escape

    arxiv_server.extra[("", "2402.13718", "0", "100")] = INFTY_FEED.format(
        abstract=escape(acl.abstract), authors="\n".join(f"    <author><name>{a}</name></author>" for a in acl.authors))
    arx, _ = fetch_arxiv(id_list=["2402.13718"], page_size=100, delay_seconds=0, base_url=arxiv_server.api)
    others, _ = fetch_arxiv("testing", page_size=10, max_results=10, delay_seconds=0, base_url=arxiv_server.api)
    groups = merge_sources(acl2024[810:820] + arx + others)
    assert len(groups) == 10 + 10  # 10 ACL papers (one of them now with its arXiv record) + 10 arXiv-only
    group = next(g for g in groups if any(p.source == "arxiv" and p.external_id == "2402.13718" for p in g))
    assert sorted(p.label for p in group) == ["acl:2024.acl-long.814", "arxiv:2402.13718v1"]
    meta = merged_metadata(group)
    assert meta["title"] == "$\\infty$Bench: Extending Long Context Evaluation Beyond 100K Tokens"
    assert (meta["conference_abbreviation"], meta["volume"], meta["pub_year"]) == ("ACL", "long", 2024)
    assert meta["download_url"] == "https://aclanthology.org/2024.acl-long.814.pdf"
    assert meta["bibtex"] == acl.bibtex and meta["authors"] == acl.authors
    rows = provenance_rows(group)
    assert {(r["source"], r["external_id"], r["version"]) for r in rows} == {
        ("acl", "2024.acl-long.814", None), ("arxiv", "2402.13718", "v1")}
    only_arxiv = merged_metadata([p for p in others if p.external_id == "2202.12139"])
    assert only_arxiv["conference_abbreviation"] is None and only_arxiv["pub_year"] == 2022


def test_merge_rejected_openreview_with_later_emnlp_paper(or_server):
    # Real case: "Large Language Models Can Self-Improve", rejected at ICLR 2023 (anonymous, no authors in
    # the record), published at EMNLP 2023 as 2023.emnlp-main.67 ("Self-Improve" vs "Self-improve").
    orv, _ = fetch_openreview("ICLR.cc/2023/Conference", accepted_only=False, baseurl=or_server.url)
    assert [(p.external_id, p.decision, p.authors) for p in orv] == [("NiEtU7blzN", "Reject", [])]
    emnlp = parse_acl_collection(ACL_FIX / "2023.emnlp.subset.xml")
    groups = merge_sources(orv + emnlp)
    assert sorted(sorted(p.label for p in g) for g in groups) == [
        ["acl:2023.emnlp-main.1"], ["acl:2023.emnlp-main.67", "openreview:NiEtU7blzN"]]
    meta = merged_metadata(next(g for g in groups if len(g) == 2))
    assert (meta["conference_abbreviation"], meta["volume"], meta["pub_year"]) == ("EMNLP", "main", 2023)
    assert meta["title"] == "Large Language Models Can Self-Improve" and meta["authors"][0] == "Jiaxin Huang"


def test_merge_by_doi_and_keys(acl2024):
    acl = acl2024[0]
    # CONSTRUCTED arXiv-side record carrying the ACL DOI but a differently worded title
    arx = SourcePaper(source="arxiv", external_id="2401.00001", version="v2", title="QST: quantized side tuning",
                      authors=["Z. Zhang"], doi="https://doi.org/10.18653/V1/2024.acl-long.1")
    assert dedup_key(arx) == "doi:10.18653/v1/2024.acl-long.1"
    assert "acl:2024.acl-long.1" in dedup_keys(arx)
    groups = merge_sources([acl, arx])
    assert len(groups) == 1
    assert title_key("$\\infty$Bench: X") == title_key("∞Bench: X") == "bench x"


def test_merge_keeps_same_title_different_ids_apart():
    # two distinct Anthology records with one title and first author (e.g. a paper and a homonymous
    # tutorial) must not merge on title; an arXiv record with that title + author joins the first
    a = SourcePaper(source="acl", external_id="2024.x-long.1", title="Same Title Here", authors=["Ann Lee"])
    b = SourcePaper(source="acl", external_id="2024.x-tutorials.3", title="Same title here", authors=["Ann Lee"])
    c = SourcePaper(source="arxiv", external_id="2401.1", title="Same Title Here", authors=["A. Lee"])
    groups = merge_sources([a, b, c])
    assert [[p.external_id for p in g] for g in groups] == [["2024.x-long.1", "2401.1"], ["2024.x-tutorials.3"]]
    with pytest.raises(ValueError):
        merged_metadata([])


def test_source_error_message():
    err = SourceError("acl", "2024.acl.xml", "truncated or ill-formed XML at line 3")
    assert str(err) == "acl 2024.acl.xml: truncated or ill-formed XML at line 3"
    assert (err.source, err.record, err.partial) == ("acl", "2024.acl.xml", [])


# -- bad records among good ones: skipped, reported, and the watermark never passes them ------------------------


def without_title(xml: bytes, anthology_id: str) -> bytes:
    """CONSTRUCTED: a collection XML with the ``<title>`` of one paper removed, every other byte kept."""
    text = xml.decode("utf-8")
    for match in re.finditer(r'<paper id="[^"]+"[^>]*>.*?</paper>', text, re.S):
        if f">{anthology_id}</url>" in match.group(0):
            block = re.sub(r"\s*<title>.*?</title>", "", match.group(0), count=1, flags=re.S)
            assert block != match.group(0)
            return (text[:match.start()] + block + text[match.end():]).encode("utf-8")
    raise AssertionError(f"{anthology_id} is not in the collection")


def acl_dates(xml: Path = ACL_XML) -> dict[str, datetime]:
    """Anthology id -> latest ingest/revision/erratum date, read independently with ElementTree."""
    out = {}
    root = ET.parse(xml).getroot()
    for vol in root.iter("volume"):
        for paper in vol.iter("paper"):
            if paper.get("id") == "0":
                continue
            dates = [vol.get("ingest-date"), paper.get("ingest-date")]
            dates += [r.get("date") for r in paper.iter("revision")] + [e.get("date") for e in paper.iter("erratum")]
            out[paper.find("url").text] = datetime.strptime(max(d for d in dates if d), "%Y-%m-%d").replace(tzinfo=UTC)
    return out


def test_acl_paper_without_title_is_skipped_and_the_watermark_stays_below_it(tmp_path):
    bad_id = "2024.acl-long.5"
    dates = acl_dates()
    bad = tmp_path / "2024.acl.xml"
    bad.write_bytes(without_title(ACL_XML.read_bytes(), bad_id))
    with pytest.raises(SourceError) as err:  # without an errors list the first bad record raises, as before
        fetch_acl(bad)
    assert bad_id in str(err.value) and "record missing title" in str(err.value)
    errors: list[SourceError] = []
    papers, wm = fetch_acl(bad, errors=errors)
    assert {p.external_id for p in papers} == set(dates) - {bad_id} and len(papers) == 1030
    assert [(e.record_id, e.reason, e.updated) for e in errors] == [(bad_id, "record missing title", dates[bad_id])]
    assert f"{bad} paper {bad_id} (line 88)" in str(errors[0])
    # the other papers reach later dates (revisions), but the watermark stays below the skipped paper's date
    assert max(dates.values()) > dates[bad_id]
    assert wm == max(d for aid, d in dates.items() if aid != bad_id and d < dates[bad_id])
    # so once the Anthology fixes the record, a crawl from that watermark gets it
    fixed, _ = fetch_acl(ACL_XML, since=wm)
    assert bad_id in {p.external_id for p in fixed}
    later, _ = fetch_acl(ACL_XML, since=max(d for aid, d in dates.items() if aid != bad_id))
    assert bad_id not in {p.external_id for p in later}  # (what an uncapped watermark would have lost)


def test_acl_nothing_found_is_an_error(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SourceError, match="nothing found: no collection XML files") as err:
        fetch_acl(empty, errors=[])
    assert str(empty) in str(err.value)
    # a real collection with its volumes' <meta> and frontmatter but every paper removed
    text = ACL_XML.read_text(encoding="utf-8")
    no_papers = tmp_path / "2024.acl.xml"
    no_papers.write_text(re.sub(r'\s*<paper id="[1-9][^"]*"[^>]*>.*?</paper>', "", text, flags=re.S), encoding="utf-8")
    with pytest.raises(SourceError, match=r"nothing found: no papers in 1 collection file\(s\)") as err:
        fetch_acl(no_papers, errors=[])
    assert str(no_papers) in str(err.value)
    with pytest.raises(SourceError, match=r"nothing found: no papers in volumes nope in 1 collection file"):
        fetch_acl(ACL_XML, volumes={"nope"})
    # found but all older than the watermark is not "nothing found": an incremental run with nothing new
    assert fetch_acl(ACL_XML, since=max(acl_dates().values())) == ([], max(acl_dates().values()))


def test_arxiv_entry_without_title_is_skipped_by_the_crawl(arxiv_server, tmp_path):
    from neusym.ingest.crawl import crawl_stage, load_crawl_stage
    from neusym.settings import Settings

    # CONSTRUCTED from the real "testing" feed (10 entries): the <title> of its 3rd entry removed
    real = _body(("testing", "", "0", "10"))
    entries = re.findall(r"<entry>.*?</entry>", real, re.S)
    bad_entry = entries[2]
    bad_id = re.search(r"<id>http://arxiv.org/abs/([^<]+)</id>", bad_entry).group(1)
    feed = real.replace(bad_entry, re.sub(r"\s*<title>.*?</title>", "", bad_entry, flags=re.S))
    arxiv_server.extra[("(testing)", "", "0", "10")] = feed  # the crawl asks build_arxiv_query([], "testing")
    updated = {re.search(r"<id>http://arxiv.org/abs/([^<]+)</id>", e).group(1):
               datetime.fromisoformat(re.search(r"<updated>([^<]+)</updated>", e).group(1).replace("Z", "+00:00"))
               for e in entries}
    assert len(updated) == 10
    settings = Settings(home=tmp_path / "home", arxiv_api_url=arxiv_server.api, arxiv_delay_s=0, source_retries=0,
                        arxiv_page_size=10)
    result = crawl_stage({"source": "arxiv", "query": "testing", "max_results": 10}, settings)
    assert (result.status, result.papers, result.error) == ("ok", 9, None)
    assert [(r.id, r.reason) for r in result.skipped] == [(bad_id, "record missing title")] and result.skipped_count == 1
    assert result.watermark == max(d for i, d in updated.items() if d < updated[bad_id])
    staged = json.loads(Path(result.staged_file).read_text())
    assert sorted(p["external_id"] + p["version"] for p in staged["papers"]) == sorted(set(updated) - {bad_id})
    load_crawl_stage([result], settings, download=False)
    import duckdb

    con = duckdb.connect(str(settings.db_path), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM provenance").fetchone()[0] == 9
        state = con.execute("SELECT watermark, last_success_at IS NOT NULL, last_error FROM crawl_state").fetchall()
    finally:
        con.close()
    assert state == [(result.watermark.replace(tzinfo=None), True, f"skipped 1 bad record(s): {bad_id} (record missing title)")]


def test_openreview_bad_note_is_skipped_and_fetched_again_once_fixed(or_server):
    accepted = sorted((n for n in NOTES_2025 if n["content"]["venueid"]["value"] == ICLR25), key=lambda n: n["id"])
    bad = accepted[3]
    route = or_server.route
    broken = {"on": True}

    def without_bad_title(method, path, q, body, headers):
        reply = route(method, path, q, body, headers)
        if path == "/notes" and broken["on"]:
            data = json.loads(reply.body)
            for note in data["notes"]:
                if note["id"] == bad["id"]:
                    del note["content"]["title"]  # CONSTRUCTED: one real note without its title
            reply = Reply(200, json.dumps(data), {"Content-Type": "application/json"})
        return reply

    or_server.route = without_bad_title
    errors: list[SourceError] = []
    papers, wm = fetch_openreview(ICLR25, baseurl=or_server.url, errors=errors)
    tmdate = {n["id"]: datetime.fromtimestamp(n["tmdate"] / 1000, tz=UTC) for n in accepted}
    assert sorted(p.external_id for p in papers) == sorted(set(tmdate) - {bad["id"]})
    assert [(e.record_id, e.reason, e.updated) for e in errors] == [(bad["id"], "record missing title", tmdate[bad["id"]])]
    assert max(tmdate.values()) > tmdate[bad["id"]]
    assert wm == max(d for d in tmdate.values() if d < tmdate[bad["id"]])
    broken["on"] = False  # the note is fixed upstream; the next incremental run picks it up
    again, _ = fetch_openreview(ICLR25, since=wm, baseurl=or_server.url)
    assert bad["id"] in {p.external_id for p in again}


def test_watermark_before_skipped_rule():
    from neusym.ingest.sources.base import watermark_before_skipped as rule

    d = [datetime(2024, 1, day, tzinfo=UTC) for day in range(1, 8)]
    assert rule(d[0], [d[2], d[5]], []) == d[5]  # nothing skipped: the latest date
    assert rule(d[0], [d[2], d[3], d[5]], [d[4]]) == d[3]  # below the earliest skipped record
    assert rule(d[0], [d[2], d[5]], [d[2]]) == d[0]  # a loaded record on the same date does not count
    assert rule(d[0], [d[2], d[5]], [None]) == d[0]  # an undated skipped record holds the watermark
    assert rule(d[3], [d[5]], [d[1]]) == d[5]  # skipped before the window: not this run's business
    assert rule(None, [d[2]], [d[1]]) is None
