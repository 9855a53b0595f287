"""neusym.ingest.parse on the real sample PDFs.

Every expected value below was read off the PDFs themselves (rendered pages and raw PyMuPDF
text), not produced by the parser: page counts (corpus MANIFEST), titles and author lines of
page 1, the venue footers, the printed headings, the "Table N:" / "Figure N:" captions and the
"(N)" equation numbers, and the bibliography entries counted on the rendered reference pages
(SPECTER: 3 + 28 + 26 = 57 entries on pages 9-11; NAACL 2018: 14 + 13 = 27 on page 8).
"""

from __future__ import annotations

import re
from pathlib import Path

import pymupdf
import pytest

from neusym.errors import UnparseablePDF
from neusym.ingest.parse import parse_pdf
from neusym.ingest.parse.chunks import get_tokenizer
from neusym.records import ParsedPaper
from neusym.settings import Settings

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples" / "pdfs"
SPECTER = SAMPLES / "acl2020_2020.acl-main.207_SPECTER.pdf"
POPQA = SAMPLES / "acl2023_2023.acl-long.478_PopQA-WhenNotToTrustLMs.pdf"
DECOMPX = SAMPLES / "acl2023_DecompX_acl-long.pdf"
LONGEVAL = SAMPLES / "eacl2023_2023.eacl-main.121_LongEval.pdf"
NAACL = SAMPLES / "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"
RAG_TRAP = REPO / "tests" / "fixtures" / "arxiv2005.11401_RAG_first3pages_NeuSymRAG-test_pdf.pdf"

# the PyMuPDF backend: what this file pins down is the text parser itself (tests/test_extraction.py
# covers the layout and MinerU backends, which refine its regions, cells and equations)
SETTINGS = Settings(chunk_tokens=256, parse_backend="pymupdf")

# page counts from /work/shared/corpus/MANIFEST.md
PAGES = {SPECTER: 13, POPQA: 18, DECOMPX: 14, LONGEVAL: 20, NAACL: 8}


@pytest.fixture(scope="module")
def parsed() -> dict[Path, ParsedPaper]:
    return {p: parse_pdf(p, SETTINGS) for p in [*PAGES, RAG_TRAP]}


# ---------------------------------------------------------------------------------- metadata


def test_page_counts_and_page_rows(parsed):
    for path, n in PAGES.items():
        paper = parsed[path]
        assert paper.metadata.num_pages == n
        assert [p.page_number for p in paper.pages] == list(range(1, n + 1))
        # A4 pages of the ACL templates, in PDF points
        assert all(p.page_width == pytest.approx(595.28, abs=1) for p in paper.pages)
        assert all(p.page_height == pytest.approx(841.89, abs=1) for p in paper.pages)
        assert all(p.page_content.strip() for p in paper.pages)


def test_titles_as_printed(parsed):
    assert parsed[SPECTER].metadata.title == (
        "SPECTER: Document-level Representation Learning using Citation-informed Transformers"
    )
    assert parsed[POPQA].metadata.title == (
        "When Not to Trust Language Models: Investigating Effectiveness and Limitations of "
        "Parametric and Non-Parametric Memories"
    )
    assert parsed[DECOMPX].metadata.title == (
        "DecompX: Explaining Transformers Decisions by Propagating Token Decomposition"
    )
    assert parsed[LONGEVAL].metadata.title == (
        "LongEval: Guidelines for Human Evaluation of Faithfulness in Long-form Summarization"
    )
    assert parsed[NAACL].metadata.title == "Construction of the Literature Graph in Semantic Scholar"
    assert parsed[RAG_TRAP].metadata.title == "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks"


def test_authors(parsed):
    assert parsed[SPECTER].metadata.authors == [
        "Arman Cohan", "Sergey Feldman", "Iz Beltagy", "Doug Downey", "Daniel S. Weld",
    ]
    assert parsed[POPQA].metadata.authors[:2] == ["Alex Mallen", "Akari Asai"]
    assert parsed[POPQA].metadata.authors[-1] == "Daniel Khashabi"
    assert parsed[DECOMPX].metadata.authors[0] == "Ali Modarressi"
    assert parsed[DECOMPX].metadata.authors[-1] == "Mohammad Taher Pilehvar"
    naacl = parsed[NAACL].metadata.authors
    assert len(naacl) == 23 and naacl[0] == "Waleed Ammar" and naacl[-1] == "Oren Etzioni"
    assert "Madeleine van Zuylen" in naacl
    rag = parsed[RAG_TRAP].metadata.authors
    assert rag[0] == "Patrick Lewis" and rag[-1] == "Douwe Kiela" and len(rag) == 12
    # no affiliations or e-mail addresses leak into the author list
    for paper in parsed.values():
        for name in paper.metadata.authors:
            assert "@" not in name and "University" not in name and "Institute" not in name


def test_abstract_is_the_abstract(parsed):
    abstract = parsed[SPECTER].metadata.abstract
    assert abstract.startswith("Representation learning is a critical ingredient for natural language processing systems.")
    assert abstract.endswith("on the benchmark.")  # footnote mark "1" dropped
    assert "Introduction" not in abstract and "\n" not in abstract
    assert "ingre-" not in abstract  # wrapped lines joined
    assert parsed[NAACL].metadata.abstract.startswith("We describe a deployed scalable system")


def test_venue_from_first_page_footer(parsed):
    m = parsed[SPECTER].metadata  # "Proceedings of the 58th Annual Meeting of the ACL ... July 5 - 10, 2020."
    assert (m.conference_abbreviation, m.pub_year) == ("ACL", 2020)
    assert m.conference_full == "Annual Meeting of the Association for Computational Linguistics"
    m = parsed[LONGEVAL].metadata  # "Proceedings of the 17th Conference of the European Chapter ... May 2-6, 2023"
    assert (m.conference_abbreviation, m.pub_year) == ("EACL", 2023)
    m = parsed[NAACL].metadata  # "Proceedings of NAACL-HLT 2018, pages 84–91"
    assert (m.conference_abbreviation, m.pub_year) == ("NAACL", 2018)
    # these two copies print no venue footer: nothing is guessed
    for path in (POPQA, DECOMPX):
        m = parsed[path].metadata
        assert m.conference_abbreviation is None and m.pub_year is None and m.conference_full is None


def test_pdf_identity(parsed):
    import hashlib

    m = parsed[SPECTER].metadata
    assert m.pdf_sha256 == hashlib.sha256(SPECTER.read_bytes()).hexdigest()
    assert m.pdf_path == str(SPECTER)


# ---------------------------------------------------------------------------------- pages


def test_two_column_reading_order():
    paper = parse_pdf(SPECTER, SETTINGS)
    page2 = paper.pages[1].page_content
    # left column (2 Model, 2.1 Overview, its paragraph) before the right column (2.2 Background)
    order = [
        "As an additional contribution of this work",
        "2 Model",
        "2.1 Overview",
        "Our goal is to learn task-independent",
        "Figure 1: Overview of SPECTER.",
        "2.2 Background: Pretrained Transformers",
        "Recently, pretrained Transformer networks",
    ]
    positions = [page2.index(s) for s in order]
    assert positions == sorted(positions)
    # ligatures expanded: "scientiﬁc" is searchable as "scientific"
    assert "ﬁ" not in paper.pages[0].page_content and "scientific" in paper.pages[0].page_content


# ---------------------------------------------------------------------------------- sections


def _titles(paper: ParsedPaper) -> list[str]:
    return [s.section_title for s in paper.sections]


def test_sections_specter(parsed):
    paper = parsed[SPECTER]
    assert _titles(paper) == [
        "Abstract",
        "1 Introduction",
        "2 Model",
        "2.1 Overview",
        "2.2 Background: Pretrained Transformers",
        "2.3 Citation-Based Pretraining Objective",
        "2.4 Selecting Negative Distractors",
        "2.5 Inference",
        "3 SciDocs Evaluation Framework",  # printed in small caps: S CI D OCS
        "3.1 Document Classification",
        "3.2 Citation Prediction",
        "3.3 User Activity",
        "3.4 Recommendation",
        "4 Experiments",
        "5 Results",
        "6 Analysis",
        "7 Related Work",
        "8 Conclusions and Future Work",
        "Acknowledgements",
        "References",
        "A Appendix A - Baseline Details",
    ]
    by_title = {s.section_title: s for s in paper.sections}
    assert [s.ordinal for s in paper.sections] == list(range(len(paper.sections)))
    assert by_title["2.1 Overview"].level == 2
    assert by_title["2.1 Overview"].parent_section_id == by_title["2 Model"].section_id
    assert by_title["2 Model"].parent_section_id is None
    assert by_title["1 Introduction"].page_numbers == [1, 2]
    assert by_title["References"].page_numbers == [9, 10, 11]
    intro = by_title["1 Introduction"].section_content
    assert intro.startswith("As the pace of scientific publication continues to")
    # a section's content excludes its subsections and the page furniture
    assert "Recently, pretrained Transformer networks" not in by_title["2.1 Overview"].section_content
    assert "2271" not in by_title["2.1 Overview"].section_content  # page number
    assert "Proceedings of the 58th" not in intro  # venue footer of page 1


def test_sections_other_papers(parsed):
    popqa = _titles(parsed[POPQA])
    for title in ["Abstract", "1 Introduction", "2.4 Benchmark: PopQA", "6 Related Work", "References",
                  "A Details of PopQAConstructions", "C.3 Qualitative Results"]:
        assert title in popqa
    assert popqa.index("1 Introduction") < popqa.index("References") < popqa.index("C.3 Qualitative Results")
    decompx = _titles(parsed[DECOMPX])
    assert decompx[:3] == ["Abstract", "1 Introduction", "2 Related Work"]
    assert {"Limitations", "References", "A.3 RoBERTa Results"} <= set(decompx)
    naacl = _titles(parsed[NAACL])
    assert naacl[0] == "Abstract" and naacl[-1] == "References"
    assert "4.4 Entity Linking Models" in naacl


def test_outline_trap_gives_printed_sections(parsed):
    doc = pymupdf.open(RAG_TRAP)
    toc = doc.get_toc()
    assert len(toc) == 29 and doc.page_count == 3  # the trap: full paper outline, 3 pages
    paper = parsed[RAG_TRAP]
    assert _titles(paper) == [
        "Abstract",
        "1 Introduction",
        "2 Methods",
        "2.1 Models",
        "2.2 Retriever: DPR",
        "2.3 Generator: BART",
        "2.4 Training",
    ]
    assert [s.page_numbers for s in paper.sections] == [[1], [1, 2], [2, 3], [3], [3], [3], [3]]
    levels = {s.section_title: s.level for s in paper.sections}
    assert levels["2 Methods"] == 1 and levels["2.3 Generator: BART"] == 2
    # every title is printed on the first page the section spans
    for s in paper.sections:
        assert s.section_title in paper.pages[s.page_numbers[0] - 1].page_content


# ---------------------------------------------------------------------------------- chunks


def test_chunks_fit_the_encoder_window_and_stay_on_their_page(parsed):
    tok = get_tokenizer()
    for paper in parsed.values():
        pages = {p.page_number: p for p in paper.pages}
        per_page: dict[int, list[int]] = {}
        for c in paper.chunks:
            ids = tok(c.text_content, add_special_tokens=True)["input_ids"]
            assert len(ids) <= SETTINGS.chunk_tokens  # [CLS] chunk [SEP] fits the 256 window
            page = pages[c.page_number]
            assert c.ref_page_id == page.page_id
            assert c.text_content in page.page_content  # never crosses a page
            per_page.setdefault(c.page_number, []).append(c.ordinal)
        assert all(v == list(range(len(v))) for v in per_page.values())
        assert set(per_page) == {p.page_number for p in paper.pages if p.page_content.strip()}


def test_chunks_cover_the_page_without_overlap(parsed):
    page = parsed[SPECTER].pages[1]
    chunks = [c.text_content for c in parsed[SPECTER].chunks if c.page_number == 2]
    assert len(chunks) >= 3
    squash = lambda s: re.sub(r"\s+", "", s)  # noqa: E731
    assert squash("".join(chunks)) == squash(page.page_content)


# ---------------------------------------------------------------------------------- tables & figures


def _bbox_inside(bbox, page) -> bool:
    x, y, w, h = bbox
    return w > 0 and h > 0 and x >= -1 and y >= -1 and x + w <= page.page_width + 1 and y + h <= page.page_height + 1


def test_table_captions(parsed):
    tables = parsed[SPECTER].tables
    assert [(t.page_number, t.table_caption.split(":")[0]) for t in tables] == [
        (7, "Table 1"), (7, "Table 2"), (8, "Table 3"),
    ]
    assert tables[0].table_caption == "Table 1: Results on the SCIDOCS evaluation suite consisting of 7 tasks."
    assert tables[2].table_caption == "Table 3: Comparison with task-specific fine-tuning."
    assert [t.ordinal for t in tables] == [0, 1, 0]
    # printed "Table N:" captions per paper (counted in the PDFs' text)
    assert len(parsed[POPQA].tables) == 4
    assert [t.table_caption.split(":")[0] for t in parsed[DECOMPX].tables] == ["Table 1", "Table A.1", "Table A.2"]
    assert len(parsed[LONGEVAL].tables) == 11
    assert len(parsed[NAACL].tables) == 4
    # in-text mentions ("Table 1 presents the main results", page 6) are not tables
    assert all(t.table_caption.startswith("Table") and ":" in t.table_caption[:12] for p in parsed.values() for t in p.tables)


def test_table_regions_and_cells(parsed):
    paper = parsed[SPECTER]
    page7 = paper.pages[6]
    t1, t2 = paper.tables[0], paper.tables[1]
    for t in (t1, t2):
        assert t.bounding_box is not None and _bbox_inside(t.bounding_box, page7)
    # Table 1 spans both columns above its caption (y 248); Table 2 sits in the right column
    x, y, w, h = t1.bounding_box
    assert w > 400 and y + h <= 250
    x, y, w, h = t2.bounding_box
    assert x > 297 and y + h <= 387  # caption of Table 2 starts at y 386
    # cells of Table 2 (SPECTER row: 84.2 88.4 91.5 36.9 80.0), decimals kept whole
    assert t2.table_content and t2.table_content.startswith("<table>")
    assert "<td>SPECTER</td><td>84.2</td><td>88.4</td><td>91.5</td><td>36.9</td><td>80.0</td>" in t2.table_content


def test_figure_captions_and_regions(parsed):
    images = parsed[SPECTER].images
    assert [(i.page_number, i.image_caption) for i in images][0] == (2, "Figure 1: Overview of SPECTER.")
    assert images[1].page_number == 8 and images[1].image_caption.startswith("Figure 2: t-SNE visualization")
    page2 = parsed[SPECTER].pages[1]
    x, y, w, h = images[0].bounding_box
    assert _bbox_inside(images[0].bounding_box, page2)
    assert x > 297 and y + h <= 159  # right column, above its caption (y 158)
    assert [len(parsed[p].images) for p in (POPQA, DECOMPX, LONGEVAL, NAACL)] == [15, 10, 9, 1]
    assert all(i.bounding_box is not None for p in parsed.values() for i in p.images)


# ---------------------------------------------------------------------------------- equations


def test_numbered_equations(parsed):
    eqs = parsed[SPECTER].equations
    assert [(e.page_number, e.equation_number) for e in eqs] == [(2, "1"), (3, "2")]
    assert eqs[0].equation_content == "v = Transformer(input)[CLS],"
    assert "max" in eqs[1].equation_content
    # DecompX prints equations (1)..(16)
    assert sorted(int(e.equation_number) for e in parsed[DECOMPX].equations) == list(range(1, 17))
    # LongEval, PopQA and the NAACL paper number no equation
    assert parsed[LONGEVAL].equations == [] and parsed[POPQA].equations == [] and parsed[NAACL].equations == []


# ---------------------------------------------------------------------------------- references


def test_references(parsed):
    refs = parsed[SPECTER].reference
    # 57 entries counted on the rendered pages 9-11; the split may drift by one entry at most
    assert abs(len(refs) - 57) <= 1
    assert refs[0].reference_content.startswith("Anant K. Agarwal, Ivan Zaitsev")
    assert refs[-1].reference_content.startswith("Xinyuan Zhang, Yitong Li, Dinghan Shen, and Lawrence Carin. 2018.")
    assert refs[0].page_number == 9 and refs[-1].page_number == 11
    assert [r.ordinal for r in refs] == list(range(len(refs)))
    naacl = parsed[NAACL].reference
    assert abs(len(naacl) - 27) <= 1 and {r.page_number for r in naacl} == {8}
    assert naacl[0].reference_content.startswith("Waleed Ammar, Matthew E. Peters")
    # every author-year entry carries its year: no merged or broken entries
    for path in (SPECTER, NAACL, LONGEVAL):
        for r in parsed[path].reference:
            assert len(re.findall(r"\b(?:19|20)\d\d[a-z]?\.", r.reference_content)) >= 1, r.reference_content
    assert parsed[RAG_TRAP].reference == []  # the 3-page excerpt has no bibliography


# ---------------------------------------------------------------------------------- ids


def test_ids_are_deterministic_and_consistent(parsed):
    again = parse_pdf(SPECTER, SETTINGS)
    assert again.model_dump() == parsed[SPECTER].model_dump()
    for paper in parsed.values():
        pid = paper.paper_id
        page_ids = {p.page_id for p in paper.pages}
        all_ids = [pid, *page_ids]
        for name, rows in paper.rows().items():
            for row in rows:
                if name != "metadata":
                    assert row.ref_paper_id == pid
                if hasattr(row, "ref_page_id"):
                    assert row.ref_page_id in page_ids
            if name not in ("metadata", "pages"):
                key = {"sections": "section_id", "chunks": "chunk_id", "tables": "table_id", "images": "image_id",
                       "equations": "equation_id", "reference": "reference_id"}[name]
                all_ids += [getattr(r, key) for r in rows]
        assert len(all_ids) == len(set(all_ids))
        section_ids = {s.section_id for s in paper.sections}
        assert all(s.parent_section_id in section_ids for s in paper.sections if s.parent_section_id)
    assert len({p.paper_id for p in parsed.values()}) == len(parsed)


# ---------------------------------------------------------------------------------- quarantine


def test_truncated_pdf_is_unparseable(tmp_path):
    data = SPECTER.read_bytes()
    bad = tmp_path / "truncated.pdf"
    bad.write_bytes(data[: int(len(data) * 0.3)])
    with pytest.raises(UnparseablePDF) as err:
        parse_pdf(bad, SETTINGS)
    assert err.value.reason.startswith("corrupt: truncated")
    assert err.value.path == str(bad)


def test_encrypted_pdf_is_unparseable(tmp_path):
    doc = pymupdf.open(NAACL)
    locked = tmp_path / "locked.pdf"
    doc.save(locked, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="x", owner_pw="y")
    with pytest.raises(UnparseablePDF) as err:
        parse_pdf(locked, SETTINGS)
    assert err.value.reason == "encrypted: needs a password"
    # owner-password-only encryption (no password to open) parses normally
    open_copy = tmp_path / "owner_only.pdf"
    doc.save(open_copy, encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="y")
    assert parse_pdf(open_copy, SETTINGS).metadata.title == "Construction of the Literature Graph in Semantic Scholar"


def test_image_only_pdf_is_unparseable(tmp_path):
    src = pymupdf.open(NAACL)
    scan = pymupdf.open()
    for page in src:
        new = scan.new_page(width=page.rect.width, height=page.rect.height)
        new.insert_image(new.rect, pixmap=page.get_pixmap(dpi=40))
    path = tmp_path / "scan.pdf"
    scan.save(path)
    with pytest.raises(UnparseablePDF) as err:
        parse_pdf(path, SETTINGS)
    assert err.value.reason == "no text layer: 0 characters on 8 pages"


def test_non_pdf_and_missing_files(tmp_path):
    junk = tmp_path / "junk.pdf"
    junk.write_bytes(b"<html>not a pdf</html>")
    with pytest.raises(UnparseablePDF) as err:
        parse_pdf(junk, SETTINGS)
    assert err.value.reason.startswith("not a PDF: an HTML page")
    with pytest.raises(UnparseablePDF) as err:
        parse_pdf(tmp_path / "missing.pdf", SETTINGS)
    assert err.value.reason.startswith("unreadable:")
