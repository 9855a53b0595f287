-- NeuSym corpus schema (DuckDB). Source of truth for the database: the materialize step runs this
-- file on every run (idempotent: IF NOT EXISTS + COMMENT ON). The COMMENT ON texts are what analysts
-- see in `neusym schema` and what the agent sees as [Database Schema].
-- Conventions: ids are UUIDs (uuid5, deterministic); page numbers start at 1; bounding boxes are
-- [x0, y0, width, height] in PDF points (1/72 inch) from the top-left corner of the page.

CREATE TABLE IF NOT EXISTS metadata (
    paper_id UUID PRIMARY KEY,
    title VARCHAR NOT NULL,
    abstract VARCHAR,
    num_pages INTEGER,
    conference_full VARCHAR,
    conference_abbreviation VARCHAR,
    pub_year INTEGER,
    volume VARCHAR,
    download_url VARCHAR,
    bibtex VARCHAR,
    authors VARCHAR[],
    pdf_path VARCHAR,
    pdf_sha256 VARCHAR,
    tldr VARCHAR,
    tags VARCHAR[],
    airqa_paper_id UUID
);
COMMENT ON TABLE metadata IS 'One row per paper: bibliographic metadata of each PDF (title, authors, abstract, venue, year).';
COMMENT ON COLUMN metadata.paper_id IS 'A unique identifier for this paper (uuid5 of the normalized title).';
COMMENT ON COLUMN metadata.title IS 'The title of this paper.';
COMMENT ON COLUMN metadata.abstract IS 'The abstract of this paper.';
COMMENT ON COLUMN metadata.num_pages IS 'The number of pages in this paper; NULL while only its metadata is known (PDF not parsed yet).';
COMMENT ON COLUMN metadata.conference_full IS 'The full name of the conference where this paper was published, e.g. Annual Meeting of the Association for Computational Linguistics; NULL if unknown.';
COMMENT ON COLUMN metadata.conference_abbreviation IS 'The abbreviation of the conference, e.g. ACL, EMNLP, NAACL, EACL, ICLR; NULL if unknown.';
COMMENT ON COLUMN metadata.pub_year IS 'The year when this paper was published; NULL if unknown.';
COMMENT ON COLUMN metadata.volume IS 'The volume of the conference where this paper was published, e.g. long, short, findings, demo; NULL if unknown.';
COMMENT ON COLUMN metadata.download_url IS 'The URL from which the PDF can be downloaded; NULL if unknown.';
COMMENT ON COLUMN metadata.bibtex IS 'The BibTeX entry of this paper; NULL if unknown.';
COMMENT ON COLUMN metadata.authors IS 'The full names of the authors of this paper, in order.';
COMMENT ON COLUMN metadata.pdf_path IS 'Where the parsed PDF is stored, relative to the corpus storage (pdfs/sha256/<pdf_sha256>.pdf); NULL while only its metadata is known.';
COMMENT ON COLUMN metadata.pdf_sha256 IS 'The sha256 hex digest of the parsed PDF file bytes; NULL while only its metadata is known.';
COMMENT ON COLUMN metadata.tldr IS 'A brief LLM-written summary of the main idea or findings; NULL until summarized.';
COMMENT ON COLUMN metadata.tags IS 'LLM-written keyword tags of this paper; empty until summarized.';
COMMENT ON COLUMN metadata.airqa_paper_id IS 'The id NeuSym-RAG/AirQA-Real datasets use for this paper: uuid5(DNS namespace, lower-case alphanumeric title + "-" + lower-case conference abbreviation and year, e.g. "acl2024", or "uncategorized"); join external AirQA files on it.';

CREATE TABLE IF NOT EXISTS pages (
    page_id UUID PRIMARY KEY,
    page_number INTEGER NOT NULL,
    page_width DOUBLE NOT NULL,
    page_height DOUBLE NOT NULL,
    page_content VARCHAR NOT NULL,
    page_summary VARCHAR,
    ref_paper_id UUID NOT NULL
);
COMMENT ON TABLE pages IS 'One row per page of each paper, with its full text (extracted with PyMuPDF) and size.';
COMMENT ON COLUMN pages.page_id IS 'A unique identifier for each page.';
COMMENT ON COLUMN pages.page_number IS 'The page number in the paper, starting from 1.';
COMMENT ON COLUMN pages.page_width IS 'The width of the page in PDF points (1/72 inch).';
COMMENT ON COLUMN pages.page_height IS 'The height of the page in PDF points (1/72 inch).';
COMMENT ON COLUMN pages.page_content IS 'The text content of the page in reading order.';
COMMENT ON COLUMN pages.page_summary IS 'A brief LLM-written summary of the page content; NULL until summarized.';
COMMENT ON COLUMN pages.ref_paper_id IS 'Foreign key to metadata.paper_id.';

CREATE TABLE IF NOT EXISTS sections (
    section_id UUID PRIMARY KEY,
    section_title VARCHAR NOT NULL,
    section_content VARCHAR NOT NULL,
    section_summary VARCHAR,
    ordinal INTEGER NOT NULL,
    level INTEGER NOT NULL,
    parent_section_id UUID,
    page_numbers INTEGER[] NOT NULL,
    ref_paper_id UUID NOT NULL
);
COMMENT ON TABLE sections IS 'One row per section or subsection of each paper (e.g. Introduction, Experiments, Conclusion, References) with its text.';
COMMENT ON COLUMN sections.section_id IS 'A unique identifier for each section.';
COMMENT ON COLUMN sections.section_title IS 'The title of the section as printed, including its number, e.g. "3.1 Training Data".';
COMMENT ON COLUMN sections.section_content IS 'The text content of the section (without the text of its subsections).';
COMMENT ON COLUMN sections.section_summary IS 'A brief LLM-written summary of the section content; NULL until summarized.';
COMMENT ON COLUMN sections.ordinal IS 'The position of the section in the paper in reading order, starting from 0.';
COMMENT ON COLUMN sections.level IS 'The heading level: 1 for a section, 2 for a subsection, 3 for a subsubsection.';
COMMENT ON COLUMN sections.parent_section_id IS 'The section_id of the enclosing section; NULL for a top-level section.';
COMMENT ON COLUMN sections.page_numbers IS 'The page numbers (from 1) the section spans.';
COMMENT ON COLUMN sections.ref_paper_id IS 'Foreign key to metadata.paper_id.';

CREATE TABLE IF NOT EXISTS chunks (
    chunk_id UUID PRIMARY KEY,
    text_content VARCHAR NOT NULL,
    ordinal INTEGER NOT NULL,
    page_number INTEGER NOT NULL,
    ref_paper_id UUID NOT NULL,
    ref_page_id UUID NOT NULL,
    ref_section_id UUID
);
COMMENT ON TABLE chunks IS 'Fixed-size chunks of each page text: at most 254 all-MiniLM-L6-v2 word pieces each (256 with [CLS]/[SEP], the model window), no overlap, never crossing a page.';
COMMENT ON COLUMN chunks.chunk_id IS 'A unique identifier for each chunk.';
COMMENT ON COLUMN chunks.text_content IS 'The text content of the chunk.';
COMMENT ON COLUMN chunks.ordinal IS 'The position of the chunk within its page, starting from 0.';
COMMENT ON COLUMN chunks.page_number IS 'The page number (from 1) of the chunk.';
COMMENT ON COLUMN chunks.ref_paper_id IS 'Foreign key to metadata.paper_id.';
COMMENT ON COLUMN chunks.ref_page_id IS 'Foreign key to pages.page_id.';
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS ref_section_id UUID;
COMMENT ON COLUMN chunks.ref_section_id IS 'Foreign key to sections.section_id: the innermost section or subsection where the chunk starts; NULL before the first heading. Count elements of a section with its subsections by also matching sections whose parent_section_id is that section.';

CREATE TABLE IF NOT EXISTS tables (
    table_id UUID PRIMARY KEY,
    table_caption VARCHAR NOT NULL,
    table_content VARCHAR,
    table_summary VARCHAR,
    bounding_box DOUBLE[4],
    ordinal INTEGER NOT NULL,
    page_number INTEGER NOT NULL,
    ref_paper_id UUID NOT NULL,
    ref_page_id UUID NOT NULL,
    ref_section_id UUID
);
COMMENT ON TABLE tables IS 'One row per table printed in each paper, found by its caption (e.g. "Table 2: ...").';
COMMENT ON COLUMN tables.table_id IS 'A unique identifier for each table.';
COMMENT ON COLUMN tables.table_caption IS 'The caption of the table, starting with its label, e.g. "Table 2: Results on ...".';
COMMENT ON COLUMN tables.table_content IS 'The content of the table in HTML format; NULL if the cells could not be extracted.';
COMMENT ON COLUMN tables.table_summary IS 'A brief LLM-written summary of the table; NULL until summarized.';
COMMENT ON COLUMN tables.bounding_box IS 'The region of the table on its page: [x0, y0, width, height] in PDF points from the top-left corner.';
COMMENT ON COLUMN tables.ordinal IS 'The position of the table within its page, starting from 0.';
COMMENT ON COLUMN tables.page_number IS 'The page number (from 1) of the table.';
COMMENT ON COLUMN tables.ref_paper_id IS 'Foreign key to metadata.paper_id.';
COMMENT ON COLUMN tables.ref_page_id IS 'Foreign key to pages.page_id.';
ALTER TABLE tables ADD COLUMN IF NOT EXISTS ref_section_id UUID;
ALTER TABLE tables ADD COLUMN IF NOT EXISTS table_source VARCHAR;
COMMENT ON COLUMN tables.table_source IS 'Which reading of the page built table_content: ''slanet'' (the SLANet-1M table-structure model''s cells filled with the PDF''s words), ''pymupdf4llm'' (pymupdf4llm''s table engine), ''words'' (the word grid or PyMuPDF''s ruled-line finder) or ''mineru''; NULL when no cells were extracted or the paper was parsed before the column existed. Filter on it to compare or exclude a source.';
COMMENT ON COLUMN tables.ref_section_id IS 'Foreign key to sections.section_id: the innermost section or subsection holding the caption of the table; NULL before the first heading. Count elements of a section with its subsections by also matching sections whose parent_section_id is that section.';

CREATE TABLE IF NOT EXISTS images (
    image_id UUID PRIMARY KEY,
    image_caption VARCHAR NOT NULL,
    image_summary VARCHAR,
    image_ocr_text VARCHAR,
    bounding_box DOUBLE[4],
    ordinal INTEGER NOT NULL,
    page_number INTEGER NOT NULL,
    ref_paper_id UUID NOT NULL,
    ref_page_id UUID NOT NULL,
    ref_section_id UUID
);
COMMENT ON TABLE images IS 'One row per figure in each paper, found by its caption (e.g. "Figure 1: ...").';
COMMENT ON COLUMN images.image_id IS 'A unique identifier for each figure.';
COMMENT ON COLUMN images.image_caption IS 'The caption of the figure, starting with its label, e.g. "Figure 1: Overview of ..."; empty if none.';
COMMENT ON COLUMN images.image_summary IS 'A brief LLM-written description of the figure; NULL until summarized.';
ALTER TABLE images ADD COLUMN IF NOT EXISTS image_ocr_text VARCHAR;
COMMENT ON COLUMN images.image_ocr_text IS 'Text printed inside the figure (axis labels, legends, node labels), read by OCR (RapidOCR) from the figure region rendered at 200 dpi, lines in reading order; NULL until OCR has run on the figure, empty if it holds no text.';
COMMENT ON COLUMN images.bounding_box IS 'The region of the figure on its page: [x0, y0, width, height] in PDF points from the top-left corner.';
COMMENT ON COLUMN images.ordinal IS 'The position of the figure within its page, starting from 0.';
COMMENT ON COLUMN images.page_number IS 'The page number (from 1) of the figure.';
COMMENT ON COLUMN images.ref_paper_id IS 'Foreign key to metadata.paper_id.';
COMMENT ON COLUMN images.ref_page_id IS 'Foreign key to pages.page_id.';
ALTER TABLE images ADD COLUMN IF NOT EXISTS ref_section_id UUID;
COMMENT ON COLUMN images.ref_section_id IS 'Foreign key to sections.section_id: the innermost section or subsection holding the caption of the figure; NULL before the first heading. Count elements of a section with its subsections by also matching sections whose parent_section_id is that section.';

CREATE TABLE IF NOT EXISTS equations (
    equation_id UUID PRIMARY KEY,
    equation_content VARCHAR NOT NULL,
    equation_number VARCHAR,
    bounding_box DOUBLE[4],
    ordinal INTEGER NOT NULL,
    page_number INTEGER NOT NULL,
    ref_paper_id UUID NOT NULL,
    ref_page_id UUID NOT NULL,
    ref_section_id UUID
);
COMMENT ON TABLE equations IS 'One row per display equation in each paper: every numbered one; unnumbered ones (equation_number NULL) when a layout model or MinerU found them.';
COMMENT ON COLUMN equations.equation_id IS 'A unique identifier for each equation.';
COMMENT ON COLUMN equations.equation_content IS 'The content of the equation (plain text as extracted from the PDF, LaTeX when available).';
COMMENT ON COLUMN equations.equation_number IS 'The printed equation number, e.g. "3"; NULL if unnumbered.';
COMMENT ON COLUMN equations.bounding_box IS 'The region of the equation on its page: [x0, y0, width, height] in PDF points from the top-left corner.';
COMMENT ON COLUMN equations.ordinal IS 'The position of the equation within its page, starting from 0.';
COMMENT ON COLUMN equations.page_number IS 'The page number (from 1) of the equation.';
COMMENT ON COLUMN equations.ref_paper_id IS 'Foreign key to metadata.paper_id.';
COMMENT ON COLUMN equations.ref_page_id IS 'Foreign key to pages.page_id.';
ALTER TABLE equations ADD COLUMN IF NOT EXISTS ref_section_id UUID;
COMMENT ON COLUMN equations.ref_section_id IS 'Foreign key to sections.section_id: the innermost section or subsection holding the equation; NULL before the first heading. Count elements of a section with its subsections by also matching sections whose parent_section_id is that section.';

CREATE TABLE IF NOT EXISTS reference (
    reference_id UUID PRIMARY KEY,
    reference_content VARCHAR NOT NULL,
    ordinal INTEGER NOT NULL,
    page_number INTEGER NOT NULL,
    ref_paper_id UUID NOT NULL,
    ref_page_id UUID NOT NULL,
    ref_section_id UUID
);
COMMENT ON TABLE reference IS 'One row per bibliography entry cited by each paper.';
COMMENT ON COLUMN reference.reference_id IS 'A unique identifier for each reference entry.';
COMMENT ON COLUMN reference.reference_content IS 'The full text of the bibliography entry (authors, year, title, venue).';
COMMENT ON COLUMN reference.ordinal IS 'The position of the entry in the bibliography, starting from 0.';
COMMENT ON COLUMN reference.page_number IS 'The page number (from 1) where the entry starts.';
COMMENT ON COLUMN reference.ref_paper_id IS 'Foreign key to metadata.paper_id.';
COMMENT ON COLUMN reference.ref_page_id IS 'Foreign key to pages.page_id.';
ALTER TABLE reference ADD COLUMN IF NOT EXISTS ref_section_id UUID;
COMMENT ON COLUMN reference.ref_section_id IS 'Foreign key to sections.section_id: the innermost section or subsection holding the entry (the References/Bibliography section); NULL before the first heading. Count elements of a section with its subsections by also matching sections whose parent_section_id is that section.';

CREATE TABLE IF NOT EXISTS quarantine (
    pdf_sha256 VARCHAR PRIMARY KEY,
    pdf_path VARCHAR NOT NULL,
    reason VARCHAR NOT NULL,
    quarantined_at TIMESTAMP NOT NULL
);
COMMENT ON TABLE quarantine IS 'PDFs that were not loaded, with the reason: could not be parsed (corrupt, damaged, encrypted, no text layer, not a PDF), or held because they are a lower-quality copy of a stored paper or the same work as another paper. They are evaluated again on the next run.';
COMMENT ON COLUMN quarantine.pdf_sha256 IS 'The sha256 hex digest of the PDF file bytes.';
COMMENT ON COLUMN quarantine.pdf_path IS 'The file name of the PDF (or its URL).';
COMMENT ON COLUMN quarantine.reason IS 'Why the PDF was not loaded (what is damaged, or which stored paper it would have replaced or duplicated).';
COMMENT ON COLUMN quarantine.quarantined_at IS 'When the PDF was last found unparseable or held (UTC).';

CREATE TABLE IF NOT EXISTS paper_fingerprints (
    paper_id UUID PRIMARY KEY,
    pdf_sha256 VARCHAR,
    shingles BIGINT NOT NULL,
    minhash UBIGINT[] NOT NULL
);
COMMENT ON TABLE paper_fingerprints IS 'Text fingerprint of each parsed paper (MinHash of its word 5-shingles), used to recognise a new PDF that is the same work as a stored paper.';
COMMENT ON COLUMN paper_fingerprints.paper_id IS 'Foreign key to metadata.paper_id.';
COMMENT ON COLUMN paper_fingerprints.pdf_sha256 IS 'The sha256 of the PDF the fingerprint was computed from.';
COMMENT ON COLUMN paper_fingerprints.shingles IS 'Number of distinct word 5-shingles in the text.';
COMMENT ON COLUMN paper_fingerprints.minhash IS 'The 128 MinHash values (datasketch, seed 1, scheme affine32).';

CREATE TABLE IF NOT EXISTS provenance (
    source VARCHAR NOT NULL,
    external_id VARCHAR NOT NULL,
    ref_paper_id UUID NOT NULL,
    version VARCHAR,
    arxiv_id VARCHAR,
    openreview_id VARCHAR,
    anthology_id VARCHAR,
    doi VARCHAR,
    pdf_url VARCHAR,
    updated TIMESTAMP,
    fetched_at TIMESTAMP NOT NULL,
    PRIMARY KEY (source, external_id)
);
COMMENT ON TABLE provenance IS 'Which metadata source knows each paper under which external ids (one row per source record; a paper found on arXiv and at ACL has two rows).';
COMMENT ON COLUMN provenance.source IS 'The source: arxiv, openreview or acl.';
COMMENT ON COLUMN provenance.external_id IS 'The id of the paper in that source without version: arXiv id (2305.14314), OpenReview forum id, or ACL Anthology id (2024.acl-long.1).';
COMMENT ON COLUMN provenance.ref_paper_id IS 'Foreign key to metadata.paper_id.';
COMMENT ON COLUMN provenance.version IS 'The arXiv version (e.g. v2) of the latest record seen; NULL for other sources.';
COMMENT ON COLUMN provenance.arxiv_id IS 'The arXiv id when known.';
COMMENT ON COLUMN provenance.openreview_id IS 'The OpenReview forum id when known.';
COMMENT ON COLUMN provenance.anthology_id IS 'The ACL Anthology id when known.';
COMMENT ON COLUMN provenance.doi IS 'The DOI when known (lower case, without https://doi.org/).';
COMMENT ON COLUMN provenance.pdf_url IS 'Where this source serves the PDF.';
COMMENT ON COLUMN provenance.updated IS 'When the source last changed the record (UTC).';
COMMENT ON COLUMN provenance.fetched_at IS 'When the crawl last saw the record (UTC).';

CREATE TABLE IF NOT EXISTS crawl_state (
    watermark_key VARCHAR PRIMARY KEY,
    watermark TIMESTAMP,
    last_success_at TIMESTAMP,
    last_error VARCHAR,
    last_error_at TIMESTAMP
);
COMMENT ON TABLE crawl_state IS 'Incremental crawl watermarks, one per source and scope (query, venue or collection); advanced only when the records they cover are committed.';
COMMENT ON COLUMN crawl_state.watermark_key IS 'source:scope, e.g. arxiv:(cat:cs.CL) or openreview:ICLR.cc/2024/Conference or acl:2024.acl.';
COMMENT ON COLUMN crawl_state.watermark IS 'The latest submitted/updated time (UTC) covered by committed records; the next crawl asks only for newer ones.';
COMMENT ON COLUMN crawl_state.last_success_at IS 'When this crawl last completed (UTC).';
COMMENT ON COLUMN crawl_state.last_error IS 'The error of the last failed crawl; after a successful crawl that skipped bad records, "skipped N bad record(s): <id> (<reason>); ..."; NULL after a clean success.';
COMMENT ON COLUMN crawl_state.last_error_at IS 'When the last failure happened (UTC).';

CREATE TABLE IF NOT EXISTS downloads (
    download_url VARCHAR PRIMARY KEY,
    ref_paper_id UUID NOT NULL,
    pdf_sha256 VARCHAR NOT NULL,
    pdf_path VARCHAR NOT NULL,
    bytes BIGINT NOT NULL,
    fetched_at TIMESTAMP NOT NULL
);
COMMENT ON TABLE downloads IS 'PDFs downloaded by the crawl, stored by content (sha256) under $NEUSYM_HOME/pdfs/sha256/.';
COMMENT ON COLUMN downloads.download_url IS 'The URL the PDF was downloaded from.';
COMMENT ON COLUMN downloads.ref_paper_id IS 'Foreign key to metadata.paper_id.';
COMMENT ON COLUMN downloads.pdf_sha256 IS 'The sha256 hex digest of the downloaded bytes.';
COMMENT ON COLUMN downloads.pdf_path IS 'Where the PDF is stored, relative to the corpus storage (pdfs/sha256/<pdf_sha256>.pdf).';
COMMENT ON COLUMN downloads.bytes IS 'Size of the PDF in bytes.';
COMMENT ON COLUMN downloads.fetched_at IS 'When it was downloaded (UTC).';

CREATE TABLE IF NOT EXISTS enrichments (
    kind VARCHAR NOT NULL,
    content_sha256 VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    prompt_version VARCHAR NOT NULL,
    value VARCHAR NOT NULL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    seconds DOUBLE,
    created_at TIMESTAMP NOT NULL,
    PRIMARY KEY (kind, content_sha256, model, prompt_version)
);
COMMENT ON TABLE enrichments IS 'Cache of LLM summaries and OCR text, keyed by the sha256 of the exact input (see sql/materialize/30_apply_enrichments.sql) + model + prompt version: nothing is computed twice, and re-parsed papers get their summaries back at materialize time.';
COMMENT ON COLUMN enrichments.kind IS 'What was computed: page_summary, section_summary, table_summary, image_summary, paper_tldr_tags (JSON {"tldr", "tags"}) or image_ocr_text.';
COMMENT ON COLUMN enrichments.content_sha256 IS 'sha256 hex digest of the input text (for OCR: of "pdf_sha256|page_number|bounding box").';
COMMENT ON COLUMN enrichments.model IS 'The model that produced the value (LLM model name, or the OCR engine and version).';
COMMENT ON COLUMN enrichments.prompt_version IS 'sha256 prefix of the prompt file used (OCR: its render settings).';
COMMENT ON COLUMN enrichments.value IS 'The summary / OCR text (paper_tldr_tags: a JSON object).';
COMMENT ON COLUMN enrichments.prompt_tokens IS 'Prompt tokens the LLM reported (NULL for OCR).';
COMMENT ON COLUMN enrichments.completion_tokens IS 'Completion tokens the LLM reported (NULL for OCR).';
COMMENT ON COLUMN enrichments.seconds IS 'Wall-clock seconds the computation took.';
COMMENT ON COLUMN enrichments.created_at IS 'When the value was computed (UTC); the newest value per input wins.';

CREATE TABLE IF NOT EXISTS enrichment_failures (
    kind VARCHAR NOT NULL,
    content_sha256 VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    prompt_version VARCHAR NOT NULL,
    element_id VARCHAR NOT NULL,
    error VARCHAR NOT NULL,
    attempts INTEGER NOT NULL,
    last_attempt_at TIMESTAMP NOT NULL,
    PRIMARY KEY (kind, content_sha256, model, prompt_version)
);
COMMENT ON TABLE enrichment_failures IS 'Summaries / OCR that failed; retried by later runs until attempts reaches NEUSYM_ENRICH_MAX_ATTEMPTS. A failure never fails the DAG run.';
COMMENT ON COLUMN enrichment_failures.kind IS 'As enrichments.kind.';
COMMENT ON COLUMN enrichment_failures.content_sha256 IS 'As enrichments.content_sha256.';
COMMENT ON COLUMN enrichment_failures.model IS 'As enrichments.model.';
COMMENT ON COLUMN enrichment_failures.prompt_version IS 'As enrichments.prompt_version.';
COMMENT ON COLUMN enrichment_failures.element_id IS 'The row that was being enriched (page_id, section_id, table_id, image_id or paper_id) at the last attempt.';
COMMENT ON COLUMN enrichment_failures.error IS 'The last error message.';
COMMENT ON COLUMN enrichment_failures.attempts IS 'Failed attempts so far.';
COMMENT ON COLUMN enrichment_failures.last_attempt_at IS 'When it last failed (UTC).';

CREATE TABLE IF NOT EXISTS table_cells (
    ref_table_id UUID NOT NULL,
    row_index INTEGER NOT NULL,
    column_index INTEGER NOT NULL,
    row_header VARCHAR,
    column_header_path VARCHAR,
    cell_text VARCHAR NOT NULL,
    number DOUBLE,
    plus_minus DOUBLE,
    unit VARCHAR,
    marks VARCHAR,
    is_header BOOLEAN NOT NULL,
    ref_paper_id UUID NOT NULL,
    PRIMARY KEY (ref_table_id, row_index, column_index)
);
COMMENT ON TABLE table_cells IS 'One row per non-empty cell of each parsed table (tables.table_content read as a grid by neusym/ingest/parse/cells.py): a table as a relation, e.g. every number under a header path matching ''BLEU''. Derived at materialization; versioned with the corpus.';
COMMENT ON COLUMN table_cells.ref_table_id IS 'Foreign key to tables.table_id.';
COMMENT ON COLUMN table_cells.row_index IS 'Row of the cell in the table, from 0, header rows first.';
COMMENT ON COLUMN table_cells.column_index IS 'Column of the cell, from 0 (a column the extraction merged, e.g. two numbers under "prec. yield", is split in two).';
COMMENT ON COLUMN table_cells.row_header IS 'The label of the cell''s row: the text of the leftmost label column(s), joined with " / " when there are several (e.g. "LLaMA / 13B"); NULL in header rows and full-width divider rows.';
COMMENT ON COLUMN table_cells.column_header_path IS 'The header texts above the cell''s column, top row first, joined with " / " (e.g. "MNLI / Acc."); a spanning header is part of the path of every column it covers; NULL when the column has no header.';
COMMENT ON COLUMN table_cells.cell_text IS 'The cell as printed (marks and spreads included), whitespace collapsed.';
COMMENT ON COLUMN table_cells.number IS 'The one number the cell shows: "98.4±0.3" -> 98.4, "62.1%" -> 62.1, "1.2k" -> 1200, "−0.5" -> -0.5; NULL for words, header cells and cells with several numbers.';
COMMENT ON COLUMN table_cells.plus_minus IS 'The spread printed after the number ("98.4±0.3" -> 0.3); NULL when none.';
COMMENT ON COLUMN table_cells.unit IS 'A unit printed with the number: "%", "×", "x", "ms", "s", "GB"; NULL when none.';
COMMENT ON COLUMN table_cells.marks IS 'Footnote or significance marks printed with the number ("*", "†", a superscript letter); NULL when none.';
COMMENT ON COLUMN table_cells.is_header IS 'Whether the cell is in a header row of the table.';
COMMENT ON COLUMN table_cells.ref_paper_id IS 'Foreign key to metadata.paper_id.';

CREATE TABLE IF NOT EXISTS citation_links (
    citing_paper_id UUID NOT NULL,
    cited_paper_id UUID NOT NULL,
    reference_id UUID PRIMARY KEY,
    method VARCHAR NOT NULL,
    score DOUBLE NOT NULL
);
COMMENT ON TABLE citation_links IS 'The in-corpus citation graph: one row per bibliography entry (reference row) that names a paper of this corpus. Resolved at every publish (neusym/ingest/citations.py); a reference naming no corpus paper has no row. Count with the views paper_citations and cited_by.';
COMMENT ON COLUMN citation_links.citing_paper_id IS 'The paper whose bibliography holds the entry (metadata.paper_id).';
COMMENT ON COLUMN citation_links.cited_paper_id IS 'The corpus paper the entry names (metadata.paper_id).';
COMMENT ON COLUMN citation_links.reference_id IS 'Foreign key to reference.reference_id.';
COMMENT ON COLUMN citation_links.method IS 'How the entry was resolved: title (the paper''s whole title occurs in the entry), doi, arxiv, anthology (an identifier printed in the entry), or fuzzy (near-exact title alignment).';
COMMENT ON COLUMN citation_links.score IS 'Match score 0-100: 100 for title and identifier matches, the title alignment score for fuzzy ones.';

CREATE TABLE IF NOT EXISTS citation_state (
    paper_id UUID PRIMARY KEY,
    target_signature VARCHAR NOT NULL,
    references_signature VARCHAR
);
COMMENT ON TABLE citation_state IS 'Bookkeeping of the incremental citation resolution: per paper, a signature of its title and identifiers (as a cited paper) and of its references (as a citing paper) at the last resolution.';
COMMENT ON COLUMN citation_state.paper_id IS 'Foreign key to metadata.paper_id.';
COMMENT ON COLUMN citation_state.target_signature IS 'Normalised title, year and identifiers the paper was last matched with.';
COMMENT ON COLUMN citation_state.references_signature IS 'md5 of the paper''s reference ids and texts at the last resolution; NULL for a paper without references.';
