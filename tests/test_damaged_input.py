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

from neusym.interfaces.cli import app
from neusym.ingest.pipeline import ingest, materialize_stage, parse_stage, sha256_file
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
    assert _quarantine(settings.db_path)[short.name] == held["reason"]  # the file name: no server folder in SQL
    again = ingest([short], settings)  # idempotent: held again, nothing changes
    assert [h["reason"] for h in again.held] == [held["reason"]]
    assert _paper_state(settings.db_path) == before
    result = CliRunner().invoke(app, ["ingest", str(short), "--force"], env={"NEUSYM_HOME": str(settings.home),
                                                                              "NEUSYM_PARSE_BACKEND": "pymupdf"})
    assert result.exit_code == 0, result.output
    [(pid, (title, sha, counts))] = _paper_state(settings.db_path).items()
    assert counts["pages"] == 5 and pid in before
    assert short.name not in _quarantine(settings.db_path)


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


# --- files that are not what they claim, and where a stored paper's bytes come from ---------------------

def _all_text(db: Path) -> str:
    """Every text cell of every table (what any SQL client could read), joined."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        parts = []
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT internal "
                                    "AND database_name = current_database()").fetchall():
            cols = [c for c, t in con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE NOT internal "
                                              "AND database_name = current_database() AND table_name = ?",
                                              [table]).fetchall() if t == "VARCHAR"]
            for col in cols:
                parts += [str(v) for (v,) in con.execute(f'SELECT "{col}" FROM {table}').fetchall() if v]
        return "\n".join(parts)
    finally:
        con.close()


def test_a_symlink_out_of_the_input_folder_is_not_read(tmp_path):
    """B9: `x.pdf -> a file outside the folder` is refused with its reason; no byte of the target, and
    no server folder, reaches the database; a link that stays inside the folder is followed."""
    secret = tmp_path / "outside" / "passwd"
    secret.parent.mkdir()
    secret.write_text("root:x:0:0:SECRET-ROOT-LINE:/root:/bin/bash\n")
    inbox = tmp_path / "inbox"
    (inbox / "sub").mkdir(parents=True)
    shutil.copy(GRAPH, inbox / "sub" / "graph.pdf")
    (inbox / "evil.pdf").symlink_to(secret)
    (inbox / "alias.pdf").symlink_to(inbox / "sub" / "graph.pdf")  # inside the folder: followed
    settings = _settings(tmp_path / "home")
    report = ingest([inbox], settings)
    assert [r["pdf_path"] for r in report.refused] == [str(inbox / "evil.pdf")]
    assert "symbolic link to a file outside" in report.refused[0]["reason"]
    assert [r.status for r in report.parsed] == ["parsed"]  # graph.pdf once (alias.pdf: the same bytes)
    text = _all_text(settings.db_path)
    assert "SECRET-ROOT-LINE" not in text and "root:x" not in text
    assert str(tmp_path) not in text, "a server folder is readable through SQL"
    with pytest.raises(Exception, match="refused: .*evil.pdf: symbolic link"):
        ingest([inbox / "evil.pdf"], settings)


def test_a_file_that_is_not_a_pdf_is_quarantined_without_quoting_its_bytes(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "notes.pdf").write_text("root:x:0:0:SECRET-ROOT-LINE:/root:/bin/bash\n")
    shutil.copy(GRAPH, inbox / "graph.pdf")
    settings = _settings(tmp_path / "home")
    report = ingest([inbox], settings)
    [bad] = [r for r in report.parsed if r.status == "quarantined"]
    assert bad.reason.startswith("not a PDF") and "root" not in bad.reason
    assert _quarantine(settings.db_path) == {"notes.pdf": bad.reason}
    assert "root:x" not in _all_text(settings.db_path) and str(inbox) not in _all_text(settings.db_path)


def test_an_identical_copy_from_a_temporary_folder_does_not_repoint_the_stored_paper(tmp_path):
    """B10: the stored paper keeps serving its page images from the PDF store after both the
    folder it was ingested from and a byte-identical copy's temporary folder are gone."""
    from neusym.interfaces.service.papers import PageRenderer, pdf_of

    settings = _settings(tmp_path / "home")
    first = tmp_path / "first"
    first.mkdir()
    shutil.copy(GRAPH, first / "graph.pdf")
    ingest([first], settings)
    before = _paper_state(settings.db_path)
    temp = tmp_path / "tmp-download"
    temp.mkdir()
    shutil.copy(GRAPH, temp / "copy-of-graph.pdf")
    again = ingest([temp], settings)
    assert [r.status for r in again.parsed] == ["reused"]
    shutil.rmtree(temp)
    shutil.rmtree(first)
    assert _paper_state(settings.db_path) == before
    [(pid, (_, sha, _))] = before.items()
    con = duckdb.connect(str(settings.db_path), read_only=True)
    try:
        assert con.execute("SELECT pdf_path FROM metadata").fetchall() == [(f"pdfs/sha256/{sha}.pdf",)]
        path, got_sha = pdf_of(con.cursor(), pid, settings)
    finally:
        con.close()
    assert got_sha == sha and sha256_file(path) == sha
    image = PageRenderer().render(path, 1, key=sha)
    assert image.png.startswith(b"\x89PNG") and image.width > 100
