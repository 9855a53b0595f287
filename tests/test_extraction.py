"""Extraction backends, section links and figure OCR on real PDFs.

Expected values were read off the rendered PDFs, not produced by the parser:

- SPECTER (ACL 2020), page 7: Table 1 spans both columns above its caption (y 248) with the
  header groups "Classification", "User activity prediction", "Citation prediction" and the row
  "SPECTER (Ours) 82.0 86.4 83.6 91.5 ..."; Table 2 (right column) has the row
  "SPECTER 84.2 88.4 91.5 36.9 80.0". Page 3 prints display (2) and, below it, the unnumbered
  display "d(P^A, P^B) = ||v_A - v_B||_2,". Page 8: Figure 2 (left column, caption at y 196) is two
  t-SNE plots whose legends (Business, Chemistry, ..., Medicine) are raster pixels, not text.
- DecompX (ACL 2023): "4 Experiments" (page 6) has subsections 4.1 Evaluation Metrics and
  4.2 Results and ends where "5 Conclusions" starts (page 9, right column); inside it are
  Table 1 (page 7) and Figures 3 (page 7), 4, 5 (page 8) and 6 (page 9, top).
- NAACL 2018 (Literature Graph): "4 Entity Extraction and Linking" (pages 4-6, subsections 4.1-4.4)
  holds Tables 2, 3 and 4; Table 1 is in "3 Extracting Metadata".
- Corpus papers (../shared/corpus/pdfs, beside the clone in CI): Skill-Mix prints Tables 9-13 as
  landscape pages 29-33 with rotated captions; West-of-N sets its "Figure 1." label in italics.

The MinerU fixture (tests/fixtures/mineru/) is MinerU 4.0.12's real ``--tier flash`` output for
SPECTER (see its README): Tables 1-2 (Table 1's body as plain text, Table 2's as HTML), Figures
1-2, three equation boxes (page 2; page 3 twice); it missed Table 3.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pymupdf
import pytest

from neusym.errors import UnparseablePDF
from neusym.ingest.materialize import materialize
from neusym.ingest.parse import parse_pdf, parser_version
from neusym.ingest.parse.mineru import MineruFormatError, MineruUnavailable
from neusym.ingest.parse.ocr import ocr_image_text
from neusym.settings import Settings
from neusym.ingest.staging import stage_parsed

from .conftest import FIXTURES, REPO, SAMPLES

SPECTER = SAMPLES / "acl2020_2020.acl-main.207_SPECTER.pdf"
DECOMPX = SAMPLES / "acl2023_DecompX_acl-long.pdf"
NAACL = SAMPLES / "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"
CORPUS = REPO.parent / "shared" / "corpus" / "pdfs"
MINERU = FIXTURES / "mineru"
A4 = (595.2760009765625, 841.8900146484375)  # page size in points, as MinerU records it


def _label(caption: str) -> str:
    return caption.split(":")[0]


@pytest.fixture(scope="module")
def specter_layout():
    return parse_pdf(SPECTER, Settings(parse_backend="layout"))


@pytest.fixture(scope="module")
def specter_pymupdf():
    return parse_pdf(SPECTER, Settings(parse_backend="pymupdf"))


# ------------------------------------------------------------------------------ layout backend


def test_layout_tables_are_html_with_regions(specter_layout):
    tables = specter_layout.tables
    assert [(t.page_number, _label(t.table_caption)) for t in tables] == [(7, "Table 1"), (7, "Table 2"), (8, "Table 3")]
    t1, t2 = tables[0], tables[1]
    # Table 1: grouped header cells span columns, the SPECTER row is cut into cells
    assert "colspan" in t1.table_content and ">User activity prediction<" in t1.table_content
    assert "<td>82.0</td><td>86.4</td><td>83.6</td><td>91.5</td>" in t1.table_content
    assert "<td>84.2</td><td>88.4</td><td>91.5</td><td>36.9</td><td>80.0</td>" in t2.table_content
    x, y, w, h = t1.bounding_box
    assert w > 400 and y + h <= 248  # both columns, above its caption
    x, y, w, h = t2.bounding_box
    assert x > 297 and y + h <= 387  # right column, above its caption (y 386)
    assert all(t.table_content.startswith("<table>") for t in tables)


def test_layout_figures_and_equations(specter_layout, specter_pymupdf):
    f1, f2 = specter_layout.images
    assert (f1.page_number, f2.page_number) == (2, 8)
    x, y, w, h = f1.bounding_box
    assert x > 297 and y + h <= 158 and h > 60  # right column, above its caption (y 158)
    x, y, w, h = f2.bounding_box
    assert x + w < 297 and y + h <= 197 and h > 100  # left column, both plots, above the caption
    eqs = [(e.page_number, e.equation_number) for e in specter_layout.equations]
    assert eqs == [(2, "1"), (3, "2"), (3, None)]
    unnumbered = specter_layout.equations[2]
    assert unnumbered.equation_content.startswith("d(PA, PB) =")
    # it sits below display (2) in the left column
    assert unnumbered.bounding_box[1] > specter_layout.equations[1].bounding_box[1] and unnumbered.bounding_box[0] < 297
    # the text parser alone sees only the numbered ones; both backends agree on everything else
    assert [(e.page_number, e.equation_number) for e in specter_pymupdf.equations] == [(2, "1"), (3, "2")]
    assert [s.section_title for s in specter_layout.sections] == [s.section_title for s in specter_pymupdf.sections]
    assert [t.table_caption for t in specter_layout.tables] == [t.table_caption for t in specter_pymupdf.tables]
    assert len(specter_layout.reference) == len(specter_pymupdf.reference)


def test_a_failing_layout_model_keeps_the_pymupdf_elements(monkeypatch, caplog):
    import neusym.ingest.parse.layout as layout

    def broken(*args, **kwargs):
        raise RuntimeError("model exploded")

    monkeypatch.setattr(layout, "html_tables", broken)
    monkeypatch.setattr(layout, "page_regions", broken)
    import neusym.ingest.parse.structure as structure

    monkeypatch.setattr(structure.StructureModel, "predict", broken)
    paper = parse_pdf(NAACL, Settings(parse_backend="layout"))
    assert paper.model_dump() == parse_pdf(NAACL, Settings(parse_backend="pymupdf")).model_dump()
    assert "pymupdf4llm tables failed" in caplog.text and "rapid-layout failed on page" in caplog.text
    assert "table-structure model failed on page" in caplog.text
    assert str(NAACL) in caplog.text


def test_parser_version_names_the_backend():
    assert parser_version(Settings(parse_backend="pymupdf")) != parser_version(Settings(parse_backend="layout"))
    assert parser_version(Settings(parse_backend="mineru", mineru_tier="flash")).endswith("mineru-flash")


# ------------------------------------------------------------------------------ section links


@pytest.fixture(scope="module")
def linked_db(tmp_path_factory):
    """DecompX and the NAACL paper parsed (PyMuPDF backend), staged and materialized into DuckDB."""
    home = tmp_path_factory.mktemp("links-home")
    settings = Settings(home=home, parse_backend="pymupdf")
    papers = [parse_pdf(p, settings) for p in (DECOMPX, NAACL)]
    materialize(settings, [stage_parsed(p, settings, "test") for p in papers], [])
    return settings.db_path, papers


ELEMENTS_IN_SECTION = """
SELECT count(*) FROM {table} e
JOIN metadata m ON m.paper_id = e.ref_paper_id
JOIN sections s ON s.section_id = e.ref_section_id
WHERE m.title ILIKE ? AND (s.section_title = ? OR s.parent_section_id IN (
    SELECT section_id FROM sections WHERE ref_paper_id = m.paper_id AND section_title = ?))
"""


def test_tables_in_a_section_is_one_query(linked_db):
    db, _ = linked_db
    con = duckdb.connect(str(db), read_only=True)
    try:
        def count(table, title, section):
            return con.execute(ELEMENTS_IN_SECTION.format(table=table), [title, section, section]).fetchone()[0]

        # "How many tables are in the Experiments section of DecompX?" -> 1 (Table 1)
        assert count("tables", "DecompX%", "4 Experiments") == 1
        assert count("images", "DecompX%", "4 Experiments") == 4  # Figures 3-6
        assert count("tables", "Construction of the Literature Graph%", "4 Entity Extraction and Linking") == 3
        assert count("tables", "Construction of the Literature Graph%", "3 Extracting Metadata") == 1
        # every element row links to a section of its own paper (or none, before the first heading)
        for table in ("chunks", "tables", "images", "equations", "reference"):
            bad = con.execute(
                f"SELECT count(*) FROM {table} e LEFT JOIN sections s ON s.section_id = e.ref_section_id "
                f"AND s.ref_paper_id = e.ref_paper_id WHERE e.ref_section_id IS NOT NULL AND s.section_id IS NULL"
            ).fetchone()[0]
            assert bad == 0, table
        # references belong to the References section; DecompX prints equations (1)-(14) in Section 3
        # (3 Methodology and its subsections), (15) in 4.1 Evaluation Metrics, (16) in Appendix A.1
        refs = con.execute(
            "SELECT DISTINCT s.section_title FROM reference r JOIN sections s ON s.section_id = r.ref_section_id"
        ).fetchall()
        assert sorted(refs) == [("References",)]
        eq_sections = dict(con.execute(
            "SELECT e.equation_number, s.section_title FROM equations e JOIN sections s ON s.section_id = e.ref_section_id "
            "JOIN metadata m ON m.paper_id = e.ref_paper_id WHERE m.title ILIKE 'DecompX%'"
        ).fetchall())
        assert sorted(eq_sections, key=int) == [str(n) for n in range(1, 17)]
        assert all(eq_sections[str(n)].startswith("3") for n in range(1, 15)), eq_sections
        assert (eq_sections["15"], eq_sections["16"]) == (
            "4.1 Evaluation Metrics", "A.1 Equivalent Weight and Bias in the Attention Module")
    finally:
        con.close()


def test_chunks_link_to_the_section_where_they_start(linked_db):
    _, (decompx, naacl) = linked_db
    by_id = {s.section_id: s.section_title for s in decompx.sections}
    # page 7 of DecompX lies wholly inside 4.1 Evaluation Metrics / 4.2 Results
    page7 = {by_id[c.ref_section_id] for c in decompx.chunks if c.page_number == 7}
    assert page7 <= {"4.1 Evaluation Metrics", "4.2 Results"} and len(page7) == 2
    # the first chunk of page 1 starts with the title, before any heading
    first = next(c for c in naacl.chunks if c.page_number == 1 and c.ordinal == 0)
    assert first.text_content.startswith("Construction of the Literature Graph") and first.ref_section_id is None


def test_a_database_made_before_the_new_columns_is_migrated(tmp_path, linked_db):
    _, (decompx, _) = linked_db
    settings = Settings(home=tmp_path, parse_backend="pymupdf")
    materialize(settings, [stage_parsed(decompx, settings, "test")], [])
    con = duckdb.connect(str(settings.db_path))
    for table in ("chunks", "tables", "images", "equations", "reference"):
        con.execute(f"ALTER TABLE {table} DROP COLUMN ref_section_id")  # the schema before this change
    con.execute("ALTER TABLE images DROP COLUMN image_ocr_text")
    con.close()
    materialize(settings, [stage_parsed(decompx, settings, "test2")], [])
    con = duckdb.connect(str(settings.db_path), read_only=True)
    try:
        linked = con.execute("SELECT count(*) FROM tables WHERE ref_section_id IS NOT NULL").fetchone()[0]
        assert linked == len(decompx.tables) == 3
        assert con.execute("SELECT count(*) FROM images WHERE image_ocr_text IS NULL").fetchone()[0] == len(decompx.images)
    finally:
        con.close()


# ------------------------------------------------------------------------------ captions on the corpus


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus not present")
def test_landscape_tables_and_italic_labels():
    skill = parse_pdf(CORPUS / "arxiv2310.17567_Skill-Mix_iclr2024.pdf", Settings(parse_backend="pymupdf"))
    landscape = {int(_label(t.table_caption).split()[1]): t for t in skill.tables if _label(t.table_caption)[6:].isdigit()}
    assert sorted(landscape) == list(range(1, 14))
    for n, page in zip(range(9, 14), range(29, 34)):
        t = landscape[n]
        assert t.page_number == page
        x, y, w, h = t.bounding_box
        assert h > 400  # the rotated table runs down the page
    assert landscape[9].table_caption.startswith("Table 9: Examples of Failure Cases (LLaMA-2 Family)")
    west = parse_pdf(CORPUS / "arxiv2401.12086_West-of-N.pdf", Settings(parse_backend="pymupdf"))
    assert [(i.page_number, i.image_caption[:21]) for i in west.images][0] == (2, "Figure 1. West-of-N s")


# ------------------------------------------------------------------------------ OCR


def test_ocr_reads_raster_legend_of_a_figure(specter_pymupdf):
    fig2 = specter_pymupdf.images[1]
    assert fig2.image_ocr_text is None  # parse never runs OCR
    x, y, w, h = fig2.bounding_box
    with pymupdf.open(SPECTER) as doc:
        layer = doc[7].get_text("text", clip=pymupdf.Rect(x, y, x + w, y + h))
    assert "Chemistry" not in layer  # the legend is pixels: only OCR can read it
    text = ocr_image_text(SPECTER, fig2.page_number, fig2.bounding_box)
    for word in ("Chemistry", "Medicine", "Physics", "Economics"):
        assert word in text, text


POPQA = SAMPLES / "acl2023_2023.acl-long.478_PopQA-WhenNotToTrustLMs.pdf"


def test_ocr_pairs_the_counts_printed_under_bar_labels():
    # PopQA's Figure 4 (page 5): under each relation type of the x axis the figure prints its question count
    # ("director" over "(n=1999)"); read row by row, the nine labels and nine counts end up a line apart
    fig4 = next(i for i in parse_pdf(POPQA, Settings(parse_backend="pymupdf")).images
                if i.image_caption.startswith("Figure 4:"))
    text = ocr_image_text(POPQA, fig4.page_number, fig4.bounding_box)
    assert "director (n=1999), country (n=838), capital of (n=363), capital (n=645)" in text, text
    # OCR read "Aggregate occupation" as one piece over two counts: one word each
    assert "Aggregate (n=14267), occupation (n=532), author (n=1514)" in text, text


def test_ocr_reading_order_of_rotated_titles_and_value_rows():
    from neusym.ingest.parse.ocr import _reading_order

    # pieces as RapidOCR returns them for part of PopQA's Figure 13 (y0, y1, x0, text, x1 in pixels at 200 dpi)
    pieces = [(249, 262, 55, "0.0", 74), (100, 181, 35, "Accuracy", 57), (257, 279, 95, "occupation", 191),
              (257, 277, 249, "author", 309), (255, 279, 645, "capital of", 727), (275, 297, 106, "(n=532)", 179),
              (274, 297, 237, "(n=1514)", 320), (272, 298, 648, "(n=363)", 723), (109, 126, 54, "0.6", 74),
              (315, 331, 119, "GPT-neo 1.3B", 209), (315, 331, 265, "GPT-neo 2.7B", 355), (313, 333, 410, "GPT-j6B", 470),
              (333, 350, 119, "OPT 1.3B", 183), (333, 350, 265, "OPT 2.7B", 329), (333, 350, 410, "OPT 6.7B", 475)]
    assert _reading_order(pieces).split("\n") == [
        "Accuracy", "0.6", "0.0", "occupation (n=532), author (n=1514), capital of (n=363)",
        "GPT-neo 1.3B GPT-neo 2.7B GPT-j6B", "OPT 1.3B OPT 2.7B OPT 6.7B"]  # legend rows are not values
    # a count that falls under no label, or two labels in a row of values: read row by row
    shifted = [p if p[3] != "(n=363)" else (272, 298, 900, "(n=363)", 975) for p in pieces]
    assert "occupation author capital of" in _reading_order(shifted)
    assert _reading_order([]) == ""


def test_ocr_bad_input_names_the_file(tmp_path):
    with pytest.raises(ValueError, match="page 14 out of range 1..13") as err:
        ocr_image_text(SPECTER, 14, [10, 10, 50, 50])
    assert str(SPECTER) in str(err.value)
    with pytest.raises(ValueError, match="no area"):
        ocr_image_text(SPECTER, 1, [700, 900, 20, 20])
    with pytest.raises(UnparseablePDF) as err:
        ocr_image_text(tmp_path / "missing.pdf", 1, [0, 0, 10, 10])
    assert err.value.reason.startswith("unreadable")


# ------------------------------------------------------------------------------ MinerU backend


def mineru_settings(**kw) -> Settings:
    return Settings(parse_backend="mineru", mineru_output_dir=MINERU, **kw)


def test_mineru_output_becomes_the_same_records(specter_pymupdf):
    paper = parse_pdf(SPECTER, mineru_settings())
    w, h = A4
    t1, t2, t3 = paper.tables
    assert [_label(t.table_caption) for t in paper.tables] == ["Table 1", "Table 2", "Table 3"]
    # Table 2: MinerU's HTML and box ([0.52, 0.33, 0.879, 0.445] of the page in the fixture)
    assert t2.table_content.startswith("<table><tbody>") and "<td>84.2</td><td>88.4</td>" in t2.table_content
    assert t2.bounding_box == pytest.approx([0.52 * w, 0.33 * h, (0.879 - 0.52) * w, (0.445 - 0.33) * h], abs=0.01)
    # Table 1: MinerU's flash tier wrote plain text, so PyMuPDF's cells stay; the box is MinerU's
    assert t1.table_content == specter_pymupdf.tables[0].table_content
    assert t1.bounding_box == pytest.approx([0.123 * w, 0.075 * h, (0.881 - 0.123) * w, (0.281 - 0.075) * h], abs=0.01)
    # Table 3: MinerU missed it; PyMuPDF's stays
    assert t3.model_dump() == specter_pymupdf.tables[2].model_dump()
    # figures take MinerU's body boxes (Figure 1: [0.554, 0.075, 0.845, 0.178])
    assert paper.images[0].bounding_box == pytest.approx([0.554 * w, 0.075 * h, (0.845 - 0.554) * w, (0.178 - 0.075) * h], abs=0.01)
    # equations: (1) and (2) keep their numbers; the third box is the unnumbered display of page 3
    assert [(e.page_number, e.equation_number) for e in paper.equations] == [(2, "1"), (3, "2"), (3, None)]
    assert paper.equations[2].equation_content.startswith("d(PA, PB) =")
    # same ids and text as the PyMuPDF parse
    assert [t.table_id for t in paper.tables] == [t.table_id for t in specter_pymupdf.tables]
    assert paper.pages == specter_pymupdf.pages and paper.sections == specter_pymupdf.sections


def test_mineru_missing_or_bad_output_is_a_clear_error(tmp_path):
    with pytest.raises(MineruUnavailable, match="no MinerU flash output") as err:
        parse_pdf(NAACL, mineru_settings())
    assert str(NAACL) in str(err.value)
    with pytest.raises(MineruUnavailable, match="mineru_output_dir is not set"):
        parse_pdf(NAACL, Settings(parse_backend="mineru"))
    # a MinerU command that fails: its exit status is reported with the PDF
    with pytest.raises(MineruUnavailable, match="exited with 1"):
        parse_pdf(NAACL, Settings(parse_backend="mineru", mineru_output_dir=tmp_path, mineru_command="false"))
    with pytest.raises(MineruUnavailable, match="not found"):
        parse_pdf(NAACL, Settings(parse_backend="mineru", mineru_output_dir=tmp_path,
                                  mineru_command="no-such-mineru-binary"))
    # output in another format
    sha = hashlib.sha256(SPECTER.read_bytes()).hexdigest()
    bad = tmp_path / sha[:2] / sha / "flash" / "1-13_1.json"
    bad.parent.mkdir(parents=True)
    bad.write_text(json.dumps({"pdf_info": []}))
    with pytest.raises(MineruFormatError, match="unsupported MinerU output schema") as err:
        parse_pdf(SPECTER, Settings(parse_backend="mineru", mineru_output_dir=tmp_path))
    assert str(bad) in str(err.value)
