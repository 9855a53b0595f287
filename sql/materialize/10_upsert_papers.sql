-- Upsert the staged papers of this run. Runs inside one transaction opened by neusym.ingest.materialize:
-- either every staged paper is replaced completely or nothing changes.
-- Inputs (temporary views created by neusym.ingest.materialize over the staged Parquet files):
--   staged_metadata, staged_pages, staged_sections, staged_chunks, staged_tables, staged_images,
--   staged_equations, staged_reference.
-- A re-parsed paper replaces all of its previous rows (delete by paper, then insert), so rows of
-- elements that disappeared do not linger; unchanged input yields identical rows. Inserts name their
-- columns: a database created before a column was added gets it appended by sql/schema.sql
-- (ALTER TABLE ... ADD COLUMN IF NOT EXISTS), so column positions differ between databases.

-- A crawled paper (one with provenance rows) keeps its crawled bibliographic fields; the parse
-- contributes what only the PDF knows (pages, path, sha256) and fills the fields the crawl lacks.
CREATE OR REPLACE TEMP TABLE prev_metadata AS
SELECT m.* FROM metadata m
WHERE m.paper_id IN (SELECT paper_id::UUID FROM staged_metadata)
  AND EXISTS (SELECT 1 FROM provenance p WHERE p.ref_paper_id = m.paper_id);

DELETE FROM pages     WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM sections  WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM chunks    WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM tables    WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM images    WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM equations WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM reference WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM metadata  WHERE paper_id     IN (SELECT paper_id::UUID FROM staged_metadata);

INSERT INTO metadata
SELECT s.paper_id::UUID,
       coalesce(p.title, s.title),
       coalesce(p.abstract, s.abstract),
       s.num_pages::INTEGER,
       coalesce(p.conference_full, s.conference_full),
       coalesce(p.conference_abbreviation, s.conference_abbreviation),
       coalesce(p.pub_year, s.pub_year::INTEGER),
       coalesce(p.volume, s.volume),
       coalesce(p.download_url, s.download_url),
       coalesce(p.bibtex, s.bibtex),
       CASE WHEN len(p.authors) > 0 THEN p.authors ELSE s.authors END,
       -- the PDF store key (neusym/store/pdfs.py); staged parses older than the store hold a path here
       CASE WHEN s.pdf_sha256 IS NOT NULL THEN 'pdfs/sha256/' || lower(s.pdf_sha256) || '.pdf' ELSE s.pdf_path END,
       s.pdf_sha256,
       coalesce(s.tldr, p.tldr),
       CASE WHEN len(s.tags) > 0 THEN s.tags ELSE p.tags END,
       coalesce(p.airqa_paper_id, s.airqa_paper_id::UUID)
FROM staged_metadata s LEFT JOIN prev_metadata p ON p.paper_id = s.paper_id::UUID;

INSERT INTO pages
SELECT page_id::UUID, page_number::INTEGER, page_width, page_height, page_content, page_summary,
       ref_paper_id::UUID
FROM staged_pages;

INSERT INTO sections
SELECT section_id::UUID, section_title, section_content, section_summary, ordinal::INTEGER,
       level::INTEGER, parent_section_id::UUID, page_numbers::INTEGER[], ref_paper_id::UUID
FROM staged_sections;

INSERT INTO chunks (chunk_id, text_content, ordinal, page_number, ref_paper_id, ref_page_id, ref_section_id)
SELECT chunk_id::UUID, text_content, ordinal::INTEGER, page_number::INTEGER, ref_paper_id::UUID,
       ref_page_id::UUID, ref_section_id::UUID
FROM staged_chunks;

INSERT INTO tables (table_id, table_caption, table_content, table_summary, bounding_box, ordinal, page_number,
                    ref_paper_id, ref_page_id, ref_section_id, table_source)
SELECT table_id::UUID, table_caption, table_content, table_summary, bounding_box::DOUBLE[4],
       ordinal::INTEGER, page_number::INTEGER, ref_paper_id::UUID, ref_page_id::UUID, ref_section_id::UUID,
       table_source
FROM staged_tables;

INSERT INTO images (image_id, image_caption, image_summary, image_ocr_text, bounding_box, ordinal, page_number,
                    ref_paper_id, ref_page_id, ref_section_id)
SELECT image_id::UUID, image_caption, image_summary, image_ocr_text, bounding_box::DOUBLE[4], ordinal::INTEGER,
       page_number::INTEGER, ref_paper_id::UUID, ref_page_id::UUID, ref_section_id::UUID
FROM staged_images;

INSERT INTO equations (equation_id, equation_content, equation_number, bounding_box, ordinal, page_number,
                       ref_paper_id, ref_page_id, ref_section_id)
SELECT equation_id::UUID, equation_content, equation_number, bounding_box::DOUBLE[4],
       ordinal::INTEGER, page_number::INTEGER, ref_paper_id::UUID, ref_page_id::UUID, ref_section_id::UUID
FROM staged_equations;

INSERT INTO reference (reference_id, reference_content, ordinal, page_number, ref_paper_id, ref_page_id,
                       ref_section_id)
SELECT reference_id::UUID, reference_content, ordinal::INTEGER, page_number::INTEGER,
       ref_paper_id::UUID, ref_page_id::UUID, ref_section_id::UUID
FROM staged_reference;

-- A PDF that parses now is no longer quarantined (same bytes, or a fixed file of the same name;
-- input: temporary table staged_sources with the file names of this run's staged PDFs).
DELETE FROM quarantine
WHERE pdf_sha256 IN (SELECT pdf_sha256 FROM staged_metadata)
   OR pdf_path IN (SELECT source_name FROM staged_sources);

-- PDFs downloaded by the crawl for the papers of this run (input: temporary table staged_downloads).
INSERT OR REPLACE INTO downloads
SELECT download_url, ref_paper_id::UUID, pdf_sha256, pdf_path, bytes, fetched_at::TIMESTAMP FROM staged_downloads;
