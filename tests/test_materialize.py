"""The single writer: schema from sql/, per-paper replacement, all-or-nothing loads."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from neusym.errors import StagingError
from neusym.ingest.materialize import materialize
from neusym.ingest.parse import parse_pdf
from neusym.store.schema import database_schema_prompt
from neusym.settings import Settings
from neusym.ingest.staging import parsed_dir, stage_parsed

from .conftest import SAMPLES

PDF = SAMPLES / "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"
OTHER = SAMPLES / "acl2020_2020.acl-main.207_SPECTER.pdf"


@pytest.fixture(scope="module")
def papers():
    return parse_pdf(PDF), parse_pdf(OTHER)


def counts(db, paper_id):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t} WHERE ref_paper_id = ?", [paper_id]).fetchone()[0]
                for t in ("pages", "sections", "chunks", "tables", "images", "equations", "reference")}
    finally:
        con.close()


def test_reparse_replaces_all_rows_of_that_paper_only(tmp_path, papers):
    paper, other = papers
    settings = Settings(home=tmp_path)
    d1, d2 = stage_parsed(paper, settings, "t"), stage_parsed(other, settings, "t")
    materialize(settings, [d1, d2], [])
    full = counts(settings.db_path, paper.paper_id)
    other_counts = counts(settings.db_path, other.paper_id)
    assert full["chunks"] == len(paper.chunks) > 0
    # the paper comes back with fewer chunks (e.g. a new parser version): stale rows must go
    smaller = paper.model_copy(update={"chunks": paper.chunks[:3]})
    materialize(settings, [stage_parsed(smaller, settings, "t2")], [])
    assert counts(settings.db_path, paper.paper_id) == dict(full, chunks=3)
    assert counts(settings.db_path, other.paper_id) == other_counts


def test_a_failing_load_leaves_the_database_unchanged(tmp_path, papers):
    paper, other = papers
    settings = Settings(home=tmp_path)
    materialize(settings, [stage_parsed(paper, settings, "t")], [])
    before = counts(settings.db_path, paper.paper_id)
    d_other = stage_parsed(other, settings, "t")
    (d_other / "chunks.parquet").write_bytes(b"PAR1 this is not parquet")  # corrupt one staged file
    with pytest.raises((duckdb.Error, StagingError), match="chunks"):
        materialize(settings, [parsed_dir(settings, paper.metadata.pdf_sha256), d_other], [])
    assert counts(settings.db_path, paper.paper_id) == before
    assert counts(settings.db_path, other.paper_id) == dict.fromkeys(before, 0)


def test_schema_prompt_carries_the_sql_comments(tmp_path, papers):
    settings = Settings(home=tmp_path)
    materialize(settings, [stage_parsed(papers[0], settings, "t")], [])
    text = database_schema_prompt(settings.db_path)
    sql = (Path(__file__).parent.parent / "sql" / "schema.sql").read_text()
    for table in ("metadata", "pages", "sections", "chunks", "tables", "images", "equations", "reference"):
        assert f"CREATE TABLE {table} (" in text
    # every column comment written in sql/schema.sql reaches the prompt verbatim
    assert "The title of the section as printed, including its number" in sql
    assert "section_title VARCHAR, -- The title of the section as printed, including its number" in text
    assert "bounding_box DOUBLE[4], -- The region of the table on its page" in text
    assert "quarantine" not in text
