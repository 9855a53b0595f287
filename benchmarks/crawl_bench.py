"""Crawl benchmark: ACL Anthology collections through the real crawl stages, first and second run.

Usage:  .venv/bin/python benchmarks/crawl_bench.py [COLLECTION.xml ...] [--out FILE.json]

Default input: ``/work/shared/corpus/acl/{2024.acl,2024.findings}.xml`` when present, else the
bundled fixture ``tests/fixtures/acl/2024.acl.xml``. The files are served by a loopback HTTP server
(with ETags, like GitHub's raw file server) and crawled by URL, as a nightly run would, into a fresh
``$NEUSYM_HOME`` under a temporary directory, metadata only (``--no-download``):

1. each collection alone: wall time of ``crawl_stage`` + ``load_crawl_stage`` (fetch, parse, merge,
   one DuckDB transaction), papers/s;
2. all collections together (the merge across collections) and then a second run with nothing new:
   HTTP requests made, ``304 Not Modified`` answers, bytes transferred, papers inserted, and
   whether any ``metadata``/``provenance`` row changed (fingerprint without ``fetched_at``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import duckdb  # noqa: E402

from neusym.ingest.crawl import crawl_stage, load_crawl_stage  # noqa: E402
from neusym.settings import Settings  # noqa: E402

SHARED = Path("/work/shared/corpus/acl")
FIXTURE = REPO / "tests" / "fixtures" / "acl" / "2024.acl.xml"


class XMLServer:
    """Serves files by name with ETags; counts requests, 304 answers and body bytes sent."""

    def __init__(self, files: list[Path]):
        self.files = {f.name: f for f in files}
        self.requests = self.not_modified = self.bytes_sent = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.requests += 1
                f = outer.files.get(self.path.lstrip("/"))
                if f is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                body = f.read_bytes()
                etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
                if self.headers.get("If-None-Match") == etag:
                    outer.not_modified += 1
                    self.send_response(304)
                    self.send_header("ETag", etag)
                    self.end_headers()
                    return
                outer.bytes_sent += len(body)
                self.send_response(200)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def reset(self) -> None:
        self.requests = self.not_modified = self.bytes_sent = 0

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def fingerprint(db: Path) -> str:
    """sha256 over all metadata rows and provenance rows (without the fetch time)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT * FROM metadata ORDER BY paper_id").fetchall()
        rows += con.execute("SELECT * EXCLUDE (fetched_at) FROM provenance ORDER BY source, external_id").fetchall()
    finally:
        con.close()
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def crawl(settings: Settings, urls: list[str]) -> dict:
    """One metadata-only crawl of ``urls`` through the stage functions; timings and counts."""
    t0 = time.perf_counter()
    result = crawl_stage({"source": "acl", "paths": urls}, settings)
    t1 = time.perf_counter()
    report = load_crawl_stage([result], settings, download=False)
    t2 = time.perf_counter()
    if result.status != "ok":
        raise SystemExit(f"crawl failed: {result.error}")
    return {"records": result.papers, "papers_new": report.papers_new, "papers_known": report.papers_known,
            "provenance_rows": report.provenance_rows, "crawl_s": round(t1 - t0, 3), "load_s": round(t2 - t1, 3),
            "total_s": round(t2 - t0, 3), "records_per_s": round(result.papers / (t2 - t0), 1)}


def count(db: Path, sql: str) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    args = ap.parse_args()
    files = args.files or ([SHARED / "2024.acl.xml", SHARED / "2024.findings.xml"] if SHARED.exists() else [FIXTURE])
    server = XMLServer(files)
    out: dict = {"python": platform.python_version(), "machine": platform.machine(), "single": [], "together": {}}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for f in files:
                settings = Settings(home=Path(tmp) / f.stem, source_retries=0)
                r = crawl(settings, [f"{server.url}/{f.name}"])
                out["single"].append({"file": f.name, "bytes": f.stat().st_size, **r})
                print(f"{f.name}: {r['records']} records -> {r['papers_new']} papers in {r['total_s']:.2f}s "
                      f"(fetch+parse {r['crawl_s']:.2f}s, load {r['load_s']:.2f}s) = {r['records_per_s']:.0f} records/s")
            settings = Settings(home=Path(tmp) / "all", source_retries=0)
            urls = [f"{server.url}/{f.name}" for f in files]
            server.reset()
            first = crawl(settings, urls)
            first.update(requests=server.requests, not_modified=server.not_modified, bytes_transferred=server.bytes_sent)
            before = fingerprint(settings.db_path)
            papers = count(settings.db_path, "SELECT count(*) FROM metadata")
            multi = count(settings.db_path, "SELECT count(*) FROM (SELECT ref_paper_id FROM provenance "
                                            "GROUP BY ref_paper_id HAVING count(*) > 1)")
            server.reset()
            second = crawl(settings, urls)
            second.update(requests=server.requests, not_modified=server.not_modified, bytes_transferred=server.bytes_sent,
                          rows_changed=fingerprint(settings.db_path) != before)
            out["together"] = {"files": [f.name for f in files], "papers": papers,
                               "papers_with_several_records": multi, "first_run": first, "second_run": second}
            print(f"together: {first['records']} records -> {papers} papers ({multi} with several records) "
                  f"in {first['total_s']:.2f}s; {first['requests']} requests, {first['bytes_transferred']} bytes")
            print(f"second run: {second['requests']} requests ({second['not_modified']} answered 304), "
                  f"{second['bytes_transferred']} bytes, {second['papers_new']} new papers, "
                  f"rows changed: {second['rows_changed']}, {second['total_s']:.2f}s")
    finally:
        server.close()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
