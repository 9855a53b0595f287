"""Crawl → load → download → parse, end to end, against a loopback server.

The server serves the real ACL Anthology collection XML (tests/fixtures/acl/2024.acl.xml) and, as
a PDF mirror (settings.pdf_mirrors), real PDFs from samples/ and tests/fixtures/ for the papers'
Anthology URLs. (The mirrored PDFs are real papers but not the ones the XML describes: the test is
about the pipeline mechanics — ids, downloads, idempotency — not about content matching.)
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import uuid
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import pytest
from pydantic import BaseModel

from neusym.ingest.crawl import DownloadJob, download_stage
from neusym.ingest.pipeline import ingest
from neusym.settings import Settings

from .conftest import FIXTURES, SAMPLES

ACL_XML = FIXTURES / "acl" / "2024.acl.xml"
PDFS = sorted(SAMPLES.glob("*.pdf")) + [FIXTURES / "arxiv2005.11401_RAG_first3pages_NeuSymRAG-test_pdf.pdf"]


def xml_papers(volume: str | None = None) -> list[tuple[str, str]]:
    """(anthology id, title text) of the real papers in the fixture XML, read independently with ElementTree."""
    root = ET.parse(ACL_XML).getroot()
    out = []
    for vol in root.iter("volume"):
        if volume and vol.get("id") != volume:
            continue
        for paper in vol.iter("paper"):
            if paper.get("id") == "0":
                continue
            title = "".join(paper.find("title").itertext())
            out.append((f"{root.get('id')}-{vol.get('id')}.{paper.get('id')}", " ".join(title.split())))
    return out


class Server:
    """Loopback HTTP server: /xml/<file>, /acl/<anthology id>.pdf (mirror), /arxiv (always 503)."""

    def __init__(self, pdf_for: dict[str, Path]):
        self.pdf_for = pdf_for
        self.requests: list[tuple[str, str | None]] = []
        self.truncate_once: set[str] = set()
        self.not_modified = 0  # 304 answers given
        self.routes: dict[str, object] = {}  # path without query -> () -> (status, body, content type)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.requests.append((self.path, self.headers.get("Range")))
                route = outer.routes.get(self.path.split("?")[0])
                if route:
                    return self._send(*route())
                if self.path.startswith("/xml/"):  # with an ETag, answering conditional GETs like GitHub does
                    body = (FIXTURES / "acl" / self.path[5:]).read_bytes()
                    etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
                    if self.headers.get("If-None-Match") == etag:
                        outer.not_modified += 1
                        self.send_response(304)
                        self.send_header("ETag", etag)
                        self.end_headers()
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("ETag", etag)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if self.path.startswith("/arxiv"):
                    return self._send(503, b"busy", "text/plain")
                if self.path.startswith("/acl/") and self.path.endswith(".pdf"):
                    key = self.path[5:-4]
                    if key not in outer.pdf_for:
                        return self._send(404, b"not found", "text/plain")
                    data = outer.pdf_for[key].read_bytes()
                    rng = self.headers.get("Range")
                    if rng:
                        start = int(rng.split("=")[1].split("-")[0])
                        self.send_response(206)
                        self.send_header("Content-Type", "application/pdf")
                        self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                        self.send_header("Content-Length", str(len(data) - start))
                        self.end_headers()
                        self.wfile.write(data[start:])
                        return
                    if key in outer.truncate_once:  # promise the whole file, send 40 %, hang up
                        outer.truncate_once.discard(key)
                        self.send_response(200)
                        self.send_header("Content-Type", "application/pdf")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data[: len(data) * 2 // 5])
                        self.close_connection = True
                        return
                    return self._send(200, data, "application/pdf")
                if self.path == "/notpdf.pdf":
                    return self._send(200, b"<html>login required</html>", "text/html")
                return self._send(404, b"not found", "text/plain")

            def _send(self, code, body, ctype):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    tutorials = xml_papers("tutorials")
    assert len(tutorials) == len(PDFS) == 6
    srv = Server({aid: pdf for (aid, _), pdf in zip(tutorials, PDFS)})
    yield srv
    srv.close()


def fetch_all(db: Path, sql: str, params=()):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def test_acl_collection_metadata_only_and_rerun_is_a_no_op(tmp_path):
    settings = Settings(home=tmp_path, source_retries=0)
    spec = {"source": "acl", "paths": [str(ACL_XML)]}
    report = ingest([], settings, crawl_specs=[spec], download=False)
    expected = xml_papers()
    assert report.crawled[0].status == "ok" and report.crawled[0].papers == len(expected) == 1031
    rows = fetch_all(settings.db_path, "SELECT p.anthology_id, m.title, m.conference_abbreviation, m.pub_year, "
                     "m.num_pages, m.airqa_paper_id::VARCHAR FROM metadata m JOIN provenance p ON p.ref_paper_id = m.paper_id")
    by_id = {r[0]: r for r in rows}
    assert set(by_id) == {aid for aid, _ in expected}
    # 2024.acl-short.69 and .70 are the same paper listed twice by the Anthology (same title, authors and
    # PDF hash): one paper with two provenance rows
    assert by_id["2024.acl-short.69"][1:] == by_id["2024.acl-short.70"][1:]
    assert len({r[5] for r in rows}) == 1030
    aid, title = expected[0]
    assert by_id[aid][2:5] == ("ACL", 2024, None)  # venue from the XML; metadata-only: no pages yet
    # the AirQA/NeuSym-RAG id convention: uuid5(DNS, alphanumeric lower-case title + "-acl2024")
    airqa = uuid.uuid5(uuid.NAMESPACE_DNS, "".join(c for c in by_id[aid][1].lower() if c.isalnum() and c.isascii()) + "-acl2024")
    assert by_id[aid][5] == str(airqa)
    assert fetch_all(settings.db_path, "SELECT last_error, last_success_at IS NOT NULL FROM crawl_state") == [(None, True)]
    before = fetch_all(settings.db_path, "SELECT * FROM metadata ORDER BY paper_id")
    again = ingest([], settings, crawl_specs=[spec], download=False)
    assert again.row_counts["metadata"] == 1030 and again.row_counts["provenance"] == 1031
    assert fetch_all(settings.db_path, "SELECT * FROM metadata ORDER BY paper_id") == before


def test_crawl_downloads_parses_new_pdfs_once(tmp_path, server):
    settings = Settings(home=tmp_path, source_retries=2, source_backoff_s=0.01,
                        pdf_mirrors={"https://aclanthology.org/": server.url + "/acl/"})
    first_key = xml_papers("tutorials")[0][0]
    server.truncate_once.add(first_key)
    spec = {"source": "acl", "paths": [server.url + "/xml/2024.acl.xml"], "volumes": ["tutorials"]}
    report = ingest([], settings, crawl_specs=[spec])
    assert [d["status"] for d in report.downloads] == ["downloaded"] * 6
    assert sorted(r.status for r in report.parsed) == ["parsed"] * 6
    # the truncated transfer was resumed with a Range request
    assert any(path == f"/acl/{first_key}.pdf" and rng for path, rng in server.requests)
    rows = fetch_all(settings.db_path, "SELECT p.anthology_id, m.title, m.num_pages, m.pdf_sha256, d.pdf_sha256 "
                     "FROM metadata m JOIN provenance p ON p.ref_paper_id = m.paper_id "
                     "JOIN downloads d ON d.ref_paper_id = m.paper_id")
    titles = dict(xml_papers("tutorials"))
    served = {aid: hashlib.sha256(pdf.read_bytes()).hexdigest() for aid, pdf in server.pdf_for.items()}
    assert len(rows) == 6
    for aid, title, pages, sha, dl_sha in rows:
        assert title == titles[aid]  # the crawled (venue) title wins over the one printed in the PDF
        assert pages and sha == dl_sha == served[aid]
    chunks = fetch_all(settings.db_path, "SELECT count(DISTINCT ref_paper_id) FROM chunks")[0][0]
    assert chunks == 6
    # second run: one conditional request for the collection XML, answered 304 Not Modified;
    # nothing is downloaded or parsed again and the database is unchanged
    before = fetch_all(settings.db_path, "SELECT * FROM metadata ORDER BY paper_id")
    server.requests.clear()
    again = ingest([], settings, crawl_specs=[spec])
    assert server.requests == [("/xml/2024.acl.xml", None)] and server.not_modified == 1
    assert fetch_all(settings.db_path, "SELECT * FROM metadata ORDER BY paper_id") == before
    assert again.downloads == [] and again.parsed == []


def test_a_failing_source_does_not_block_the_others(tmp_path, server):
    settings = Settings(home=tmp_path, source_retries=0, arxiv_delay_s=0, arxiv_api_url=server.url + "/arxiv")
    specs = [{"source": "acl", "paths": [str(ACL_XML)], "volumes": ["tutorials"]},
             {"source": "arxiv", "id_list": ["2104.12255"]}]
    report = ingest([], settings, crawl_specs=specs, download=False)
    status = {c.source: c for c in report.crawled}
    assert status["acl"].status == "ok" and status["arxiv"].status == "failed"
    assert "503" in status["arxiv"].error
    state = dict((k.split(":")[0], (wm, err)) for k, wm, err in
                 fetch_all(settings.db_path, "SELECT watermark_key, watermark, last_error FROM crawl_state"))
    assert state["arxiv"][0] is None and "503" in state["arxiv"][1]
    assert state["acl"][1] is None
    assert fetch_all(settings.db_path, "SELECT count(*) FROM metadata")[0][0] == 6


def test_download_failures_are_reported_not_raised(tmp_path, server):
    settings = Settings(home=tmp_path, source_retries=1, source_backoff_s=0.01, download_max_mb=0.05)
    missing = download_stage(DownloadJob(paper_id="p", download_url=server.url + "/acl/none.pdf"), settings)
    assert missing.status == "failed" and missing.error == "HTTP 404"
    html = download_stage(DownloadJob(paper_id="p", download_url=server.url + "/notpdf.pdf"), settings)
    assert html.status == "failed" and "not a PDF" in html.error
    big = next(iter(server.pdf_for))
    too_big = download_stage(DownloadJob(paper_id="p", download_url=f"{server.url}/acl/{big}.pdf"), settings)
    assert too_big.status == "failed" and "larger than" in too_big.error
    assert not any((tmp_path / "pdfs").rglob("*.pdf"))  # nothing half-downloaded is left as a PDF


ARXIV_V1 = FIXTURES / "arxiv" / "id_2104.12255v1_s0_m100_6ae69987ffe1.json"


def test_new_arxiv_version_reparses_that_paper_only(tmp_path, server):
    """A new arXiv version (new <updated>, new PDF URL, changed PDF) re-downloads and re-parses that
    paper only; the other papers of the corpus do no work and keep their rows."""
    import json

    import pymupdf

    real = json.loads(ARXIV_V1.read_text())["body"]  # the real recorded feed of 2104.12255v1
    assert "https://arxiv.org/pdf/2104.12255v1" in real
    # CONSTRUCTED v2 feed: the real entry with its id, PDF link and <updated> moved to a later version
    v2 = real.replace("2104.12255v1", "2104.12255v2").replace(
        "<updated>2021-04-20T16:07:14Z</updated>", "<updated>2021-05-02T09:00:00Z</updated>")
    feed = {"body": real}
    server.routes["/api/query"] = lambda: (200, feed["body"].encode(), "application/atom+xml")
    # the versions' PDFs: v1 = the real 3-page RAG excerpt, v2 = its first two pages (a changed PDF)
    v1_pdf = FIXTURES / "arxiv2005.11401_RAG_first3pages_NeuSymRAG-test_pdf.pdf"
    v2_pdf = tmp_path / "v2.pdf"
    with pymupdf.open(v1_pdf) as doc:
        doc.select([0, 1])
        doc.save(v2_pdf)
    server.routes["/pdf/2104.12255v1"] = lambda: (200, v1_pdf.read_bytes(), "application/pdf")
    server.routes["/pdf/2104.12255v2"] = lambda: (200, v2_pdf.read_bytes(), "application/pdf")
    home = tmp_path / "home"
    settings = Settings(home=home, source_retries=0, arxiv_delay_s=0, arxiv_api_url=server.url + "/api/query",
                        pdf_mirrors={"https://arxiv.org/pdf/": server.url + "/pdf/"})
    local = [SAMPLES / "eacl2023_2023.eacl-main.121_LongEval.pdf"]
    spec = {"source": "arxiv", "id_list": ["2104.12255"]}

    first = ingest(local, settings, crawl_specs=[spec])
    assert [d["status"] for d in first.downloads] == ["downloaded"]
    assert sorted(r.status for r in first.parsed) == ["parsed", "parsed"]
    arxiv_pid = first.downloads[0]["paper_id"]
    other_before = fetch_all(settings.db_path, "SELECT * FROM chunks WHERE ref_paper_id <> ? ORDER BY chunk_id",
                             [arxiv_pid])
    assert fetch_all(settings.db_path, "SELECT num_pages FROM metadata WHERE paper_id = ?", [arxiv_pid]) == [(3,)]

    # nothing new: the feed is read again, no download, no parse
    server.requests.clear()
    same = ingest(local, settings, crawl_specs=[spec])
    assert same.downloads == [] and [r.status for r in same.parsed] == ["reused"]
    assert [p for p, _ in server.requests if p.startswith("/pdf/")] == []

    # v2 appears
    feed["body"] = v2
    server.requests.clear()
    newer = ingest(local, settings, crawl_specs=[spec])
    assert [(d["status"], d["paper_id"]) for d in newer.downloads] == [("downloaded", arxiv_pid)]
    assert [p for p, _ in server.requests if p.startswith("/pdf/")] == ["/pdf/2104.12255v2"]
    statuses = {r.paper_id: r.status for r in newer.parsed}
    assert statuses[arxiv_pid] == "parsed"
    assert [s for pid, s in statuses.items() if pid != arxiv_pid] == ["reused"]
    # same paper id, now the 2-page v2 PDF; one provenance row carrying the new version
    assert fetch_all(settings.db_path, "SELECT num_pages, pdf_sha256 FROM metadata WHERE paper_id = ?", [arxiv_pid]) == [
        (2, hashlib.sha256(v2_pdf.read_bytes()).hexdigest())]
    assert fetch_all(settings.db_path, "SELECT max(page_number) FROM pages WHERE ref_paper_id = ?", [arxiv_pid]) == [(2,)]
    assert fetch_all(settings.db_path, "SELECT external_id, version FROM provenance") == [("2104.12255", "v2")]
    assert fetch_all(settings.db_path, "SELECT count(*) FROM metadata")[0][0] == 2
    # the other paper's rows are untouched
    assert fetch_all(settings.db_path, "SELECT * FROM chunks WHERE ref_paper_id <> ? ORDER BY chunk_id",
                     [arxiv_pid]) == other_before


# -- bad input through `neusym crawl acl` ------------------------------------------------------------------


def _crawl_cli(home: Path, monkeypatch, *args: str):
    from typer.testing import CliRunner

    from neusym.interfaces.cli import app

    monkeypatch.setenv("NEUSYM_HOME", str(home))
    monkeypatch.setenv("COLUMNS", "400")  # rich wraps at 80 columns when not on a terminal
    return CliRunner().invoke(app, ["crawl", "acl", *args, "--no-download"])


def test_cli_crawl_skips_a_paper_without_title_and_loads_the_rest(tmp_path, monkeypatch):
    from .test_sources import acl_dates, without_title

    bad_id = "2024.acl-long.5"
    xml = tmp_path / "xml" / "2024.acl.xml"
    xml.parent.mkdir()
    xml.write_bytes(without_title(ACL_XML.read_bytes(), bad_id))
    expected = {aid for aid, _ in xml_papers()} - {bad_id}
    assert len(expected) == 1030
    out = _crawl_cli(tmp_path / "home", monkeypatch, str(xml))
    assert out.exit_code == 0, out.output
    assert "acl: ok, 1030 records (acl:2024.acl.xml), 1 bad skipped" in out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: acl: skipped record {bad_id}: record missing title ({xml} paper {bad_id} (line 88))"]
    db = Settings(home=tmp_path / "home").db_path
    assert {r[0] for r in fetch_all(db, "SELECT anthology_id FROM provenance")} == expected
    assert fetch_all(db, "SELECT count(*) FROM metadata WHERE title ILIKE 'GenTranslate%'") == [(0,)]
    (key, watermark, success, error, error_at), = fetch_all(db, "SELECT * FROM crawl_state")
    assert (key, error) == ("acl:2024.acl.xml", f"skipped 1 bad record(s): {bad_id} (record missing title)")
    assert success is not None and error_at == success
    dates = acl_dates()  # the watermark stays below the skipped paper's date
    assert watermark == max(d for aid, d in dates.items() if d < dates[bad_id]).replace(tzinfo=None)


@pytest.mark.parametrize("case", ["folder without xml", "collection without papers", "volume matching nothing"])
def test_cli_crawl_acl_that_finds_nothing_fails(tmp_path, monkeypatch, case):
    args: list[str]
    if case == "folder without xml":
        target = tmp_path / "data"
        target.mkdir()
        (target / "README.md").write_text("no collection files here\n")
        args, message = [str(target)], f"acl {target}: nothing found: no collection XML files (*.xml)"
    elif case == "collection without papers":
        # the real collection with its volumes' <meta> and frontmatter, every paper removed
        target = tmp_path / "2024.acl.xml"
        text = ACL_XML.read_text(encoding="utf-8")
        target.write_text(re.sub(r'\s*<paper id="[1-9][^"]*"[^>]*>.*?</paper>', "", text, flags=re.S), encoding="utf-8")
        args, message = [str(target)], f"acl {target}: nothing found: no papers in 1 collection file(s)"
    else:
        target = ACL_XML
        args, message = [str(target), "--volume", "keynotes"], f"acl {target}: nothing found: no papers in volumes keynotes"
    out = _crawl_cli(tmp_path / "home", monkeypatch, *args)
    assert out.exit_code == 1, out.output
    assert message in out.stderr and "acl: failed, 0 records" in out.stderr, out.stderr
    as_json = _crawl_cli(tmp_path / "home", monkeypatch, *args, "--json")
    assert as_json.exit_code == 1 and message in json.loads(as_json.stdout)["crawled"][0]["error"]


# --- a source is one object registered in one place ----------------------------------------------------
class JsonlOptions(BaseModel):
    path: str


class JsonlSource:
    """A source written for this test: SourcePaper records, one JSON object a line (what a new source
    module would hold); its watermark is the newest ``updated``, and it skips what is not newer."""

    name = "jsonl"
    options = JsonlOptions

    def scope(self, options):
        return Path(options.path).name

    def fetch(self, options, settings, since, errors):
        from neusym.ingest.sources.base import SourcePaper

        papers = [SourcePaper.model_validate(json.loads(line)) for line in Path(options.path).read_text().splitlines()]
        papers = [p for p in papers if since is None or p.updated > since]
        return papers, max((p.updated for p in papers), default=since)


JSONL_SOURCE = JsonlSource()


def test_a_new_source_is_one_object_registered_in_one_place(tmp_path, monkeypatch):
    from datetime import datetime, timedelta, timezone

    from neusym.ingest.sources import registry
    from neusym.ingest.sources.acl_source import parse_acl_collection

    monkeypatch.setitem(registry.SOURCES, "jsonl", "tests.test_crawl:JSONL_SOURCE")
    day = datetime(2024, 8, 1, tzinfo=timezone.utc)
    records = tmp_path / "records.jsonl"
    papers = [p.model_copy(update={"source": "jsonl", "updated": day + timedelta(hours=i)})
              for i, p in enumerate(parse_acl_collection(ACL_XML)[:3])]
    records.write_text("".join(p.model_dump_json() + "\n" for p in papers))
    settings = Settings(home=tmp_path / "home", source_retries=0)
    spec = {"source": "jsonl", "path": str(records)}
    report = ingest([], settings, crawl_specs=[spec], download=False)
    assert (report.crawled[0].status, report.crawled[0].papers) == ("ok", 3)
    assert sorted(t for (t,) in fetch_all(settings.db_path, "SELECT title FROM metadata")) == sorted(p.title for p in papers)
    assert fetch_all(settings.db_path, "SELECT watermark_key, watermark FROM crawl_state") == [
        ("jsonl:records.jsonl", (day + timedelta(hours=2)).replace(tzinfo=None))]
    again = ingest([], settings, crawl_specs=[spec], download=False)  # nothing newer than the watermark
    assert again.crawled[0].papers == 0 and again.row_counts["metadata"] == 3
    with pytest.raises(ValueError, match="unknown crawl source 'dblp'; known sources: arxiv, openreview, acl, jsonl"):
        ingest([], settings, crawl_specs=[{"source": "dblp"}], download=False)
