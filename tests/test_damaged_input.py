"""Bad input never costs good data: damaged copies, lower-quality copies, duplicates, non-PDFs.

Every damaged file is built by the test itself from the real sample PDFs (ACL Anthology, CC BY 4.0):
zeroed blocks, truncation, removed pages, a removed title, a second name for the same bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from neusym.cli import app
from neusym.pipeline import ingest, materialize_stage, parse_stage, sha256_file
from neusym.settings import Settings

from .conftest import SAMPLES
from .damage import without_pages, without_title, zeroed

SPECTER = SAMPLES / "acl2020_2020.acl-main.207_SPECTER.pdf"
GRAPH = SAMPLES / "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"


def _settings(home: Path) -> Settings:
    return Settings(home=home, parse_backend="pymupdf")


def _paper_state(db: Path) -> dict:
    """Per paper: title, pdf sha256 and row counts of every paper table (what a user would lose)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for pid, title, sha in con.execute("SELECT paper_id::VARCHAR, title, pdf_sha256 FROM metadata").fetchall():
            counts = {t: con.execute(f"SELECT count(*) FROM {t} WHERE ref_paper_id = ?::UUID", [pid]).fetchone()[0]
                      for t in ("pages", "sections", "chunks", "tables", "images", "reference")}
            out[pid] = (title, sha, counts)
        return out
    finally:
        con.close()


def _quarantine(db: Path) -> dict[str, str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return dict(con.execute("SELECT pdf_path, reason FROM quarantine").fetchall())
    finally:
        con.close()


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A home holding SPECTER and the Literature Graph paper, and its state right after ingest."""
    home = tmp_path_factory.mktemp("bad-input-home")
    settings = _settings(home)
    ingest([SPECTER, GRAPH], settings)
    return settings, _paper_state(settings.db_path)


def _zeroed(src: Path, dst: Path, offset_fraction: float, size: int = 20_000) -> Path:
    data = src.read_bytes()
    dst.write_bytes(zeroed(data, int(len(data) * offset_fraction), size))
    return dst


def _without_pages(src: Path, dst: Path, keep: int) -> Path:
    dst.write_bytes(without_pages(src, keep))
    return dst


def _without_title(src: Path, dst: Path) -> Path:
    dst.write_bytes(without_title(src))
    return dst


def test_damaged_copies_are_quarantined_and_the_stored_paper_is_unchanged(stored, tmp_path):
    settings, before = stored
    folder = tmp_path / "inbox"
    folder.mkdir()
    for i, frac in enumerate((0.15, 0.35, 0.55, 0.75)):
        _zeroed(SPECTER, folder / f"specter_zeroed_{i}.pdf", frac)
    data = SPECTER.read_bytes()
    (folder / "specter_truncated.pdf").write_bytes(data[: int(len(data) * 0.6)] + b"\n%%EOF\n")
    report = ingest([folder], settings)
    assert _paper_state(settings.db_path) == before  # nothing stored was lost, replaced or added
    not_loaded = {Path(r.pdf_path).name: r.reason for r in report.parsed if r.status == "quarantined"}
    not_loaded.update({Path(h["pdf_path"]).name: h["reason"] for h in report.held})
    assert set(not_loaded) == {p.name for p in folder.iterdir()}
    quarantine = {Path(k).name: v for k, v in _quarantine(settings.db_path).items()}
    for name, reason in not_loaded.items():
        assert quarantine[name] == reason
        assert reason.startswith(("damaged:", "corrupt:", "lower quality than the stored version",
                                  "same text as the stored version")), (name, reason)
    # the reasons name what is wrong: the damaged pages, or the content a copy would lose
    assert any(r.startswith("damaged: content MuPDF could not read on page") for r in not_loaded.values())


def test_a_copy_with_fewer_pages_is_held_and_force_replaces_it(tmp_path):
    settings = _settings(tmp_path / "home")
    ingest([GRAPH], settings)
    before = _paper_state(settings.db_path)
    short = _without_pages(GRAPH, tmp_path / "graph_first5pages.pdf", keep=5)
    report = ingest([short], settings)
    assert _paper_state(settings.db_path) == before
    [held] = report.held
    assert held["reason"].startswith("lower quality than the stored version of paper")
    assert "pages 8 → 5" in held["reason"] and "--force" in held["reason"]
    assert _quarantine(settings.db_path)[str(short)] == held["reason"]
    again = ingest([short], settings)  # idempotent: held again, nothing changes
    assert [h["reason"] for h in again.held] == [held["reason"]]
    assert _paper_state(settings.db_path) == before
    result = CliRunner().invoke(app, ["ingest", str(short), "--force"], env={"NEUSYM_HOME": str(settings.home),
                                                                              "NEUSYM_PARSE_BACKEND": "pymupdf"})
    assert result.exit_code == 0, result.output
    [(pid, (title, sha, counts))] = _paper_state(settings.db_path).items()
    assert counts["pages"] == 5 and pid in before
    assert str(short) not in _quarantine(settings.db_path)


def test_the_better_file_wins_when_both_are_in_one_run(tmp_path):
    settings = _settings(tmp_path / "home")
    folder = tmp_path / "inbox"
    folder.mkdir()
    shutil.copy(GRAPH, folder / "b_graph.pdf")
    _without_pages(GRAPH, folder / "a_graph_short.pdf", keep=6)  # sorts first: order must not decide
    report = ingest([folder], settings)
    [(_, (_, sha, counts))] = _paper_state(settings.db_path).items()
    assert counts["pages"] == 8
    [held] = report.held
    assert held["pdf_path"].endswith("a_graph_short.pdf")
    assert "b_graph.pdf" in held["reason"] and "in this run" in held["reason"]


def test_a_copy_that_lost_its_title_attaches_to_the_stored_paper(stored, tmp_path):
    settings, before = stored
    copy = _without_title(SPECTER, tmp_path / "specter_no_title.pdf")
    parsed = parse_stage(copy, settings)
    assert parsed.status == "parsed" and "SPECTER" not in (parsed.title or "")  # the title is really gone
    report = ingest([copy], settings)
    assert _paper_state(settings.db_path) == before  # no second paper
    [held] = report.held
    specter_id = next(pid for pid, (title, _, _) in before.items() if title.startswith("SPECTER"))
    assert held["reason"].startswith(f"same work as stored paper {specter_id}")
    assert "text similarity" in held["reason"]


def test_the_same_file_under_two_names_is_parsed_once(tmp_path):
    settings = _settings(tmp_path / "home")
    folder = tmp_path / "inbox"
    folder.mkdir()
    shutil.copy(GRAPH, folder / "graph.pdf")
    shutil.copy(GRAPH, folder / "graph_copy.pdf")
    first = ingest([folder], settings)
    assert [Path(r.pdf_path).name for r in first.parsed] == ["graph.pdf"]
    assert first.same_files == [{"pdf_path": str(folder / "graph_copy.pdf"), "same_as": str(folder / "graph.pdf")}]
    second = ingest([folder], settings)
    assert [r.status for r in second.parsed] == ["reused"]
    assert [e.status for e in second.encoded] == ["reused"]


def test_empty_and_html_files_get_precise_reasons(tmp_path):
    settings = _settings(tmp_path / "home")
    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    html = tmp_path / "login.pdf"
    html.write_text("<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>"
                    "<a href='paper.pdf'>%PDF-1.7 download</a></body></html>\n")
    assert parse_stage(empty, settings).reason == "empty file (0 bytes)"
    assert parse_stage(html, settings).reason.startswith("not a PDF: an HTML page")


def test_ingest_of_a_folder_without_pdfs_fails_saying_where(tmp_path):
    folder = tmp_path / "nothing-here"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a paper")
    result = CliRunner().invoke(app, ["ingest", str(folder)], env={"NEUSYM_HOME": str(tmp_path / "home")})
    assert result.exit_code == 1
    assert f"no PDF files found in {folder}" in " ".join(result.output.split())


def test_a_downloaded_new_version_of_a_known_paper_replaces_it_even_when_shorter(tmp_path):
    """Provenance decides versions: a crawled paper's new PDF (a v2 without the appendix, say) is
    loaded without the quality comparison; the integrity gate still applies to it."""
    settings = _settings(tmp_path / "home")
    ingest([GRAPH], settings)
    [pid] = _paper_state(settings.db_path)
    v2 = _without_pages(GRAPH, tmp_path / "graph_v2.pdf", keep=6)
    download = {"download_url": "https://example.org/graph_v2.pdf", "ref_paper_id": pid,
                "pdf_sha256": sha256_file(v2), "pdf_path": str(v2), "bytes": v2.stat().st_size,
                "fetched_at": "2026-11-24T00:00:00"}
    parsed = parse_stage(v2, settings, paper_id=pid, download=download)
    report = materialize_stage([parsed], settings)
    assert report.held == []
    [(_, (_, sha, counts))] = _paper_state(settings.db_path).items()
    assert counts["pages"] == 6 and sha == download["pdf_sha256"]
