"""End-to-end stage tests on the bundled real PDFs: DuckDB rows, Qdrant points, idempotency, quarantine."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import duckdb
import pytest

from neusym.encode import BM25_COLLECTION, DENSE_COLLECTION, ENCODABLE_COLUMNS, PRIMARY_KEYS
from neusym.pipeline import ingest, sha256_file
from neusym.settings import Settings
from neusym.vectorstore import VectorStore

from .conftest import SAMPLE_PAGES, SAMPLES

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
        assert {Path(path).name: (n, c) for path, n, c in rows} == {k: (v, v) for k, v in SAMPLE_PAGES.items()}
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
    cells = encodable_cell_count(settings.db_path)
    assert report.publish.point_counts[DENSE_COLLECTION] == cells
    # BM25 skips only cells without any indexable word (e.g. pure symbols)
    assert 0.97 * cells <= report.publish.point_counts[BM25_COLLECTION] <= cells
    con = duckdb.connect(str(settings.db_path), read_only=True)
    chunk_id, text, page, paper = con.execute(
        "SELECT chunk_id::VARCHAR, text_content, page_number, ref_paper_id::VARCHAR FROM chunks "
        "ORDER BY chunk_id LIMIT 1").fetchone()
    con.close()
    with VectorStore(settings) as store:
        for collection in (BM25_COLLECTION, DENSE_COLLECTION):
            points, _ = store.client.scroll(collection, scroll_filter=None, limit=10_000, with_payload=True)
            hit = [p for p in points if p.payload["primary_key"] == chunk_id]
            assert len(hit) == 1
            pl = hit[0].payload
            assert (pl["table_name"], pl["column_name"], pl["paper_id"], pl["page_number"], pl["text"]) == (
                "chunks", "text_content", paper, page, text)


def test_search_finds_the_right_paper_and_respects_filters(ingested):
    settings, _ = ingested
    con = duckdb.connect(str(settings.db_path), read_only=True)
    popqa = con.execute("SELECT paper_id::VARCHAR FROM metadata WHERE title ILIKE '%Trust Language Models%'").fetchone()[0]
    specter = con.execute("SELECT paper_id::VARCHAR FROM metadata WHERE title ILIKE 'SPECTER%'").fetchone()[0]
    con.close()
    with VectorStore(settings) as store:
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


def test_reingest_changes_nothing(ingested):
    settings, first = ingested
    before = db_fingerprint(settings.db_path)
    again = ingest([SAMPLES], settings)
    assert [r.status for r in again.parsed] == ["reused"] * 5
    assert [e.status for e in again.encoded] == ["reused"] * 5
    assert again.row_counts == first.row_counts
    assert again.publish.point_counts == first.publish.point_counts
    assert again.publish.papers_unchanged == 5 and sum(again.publish.upserted.values()) == 0
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
