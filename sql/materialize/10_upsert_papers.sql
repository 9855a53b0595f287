-- Upsert the staged papers of this run. Runs inside one transaction opened by neusym.materialize:
-- either every staged paper is replaced completely or nothing changes.
-- Inputs (temporary views created by neusym.materialize over the staged Parquet files):
--   staged_metadata, staged_pages, staged_sections, staged_chunks, staged_tables, staged_images,
--   staged_equations, staged_reference.
-- A re-parsed paper replaces all of its previous rows (delete by paper, then insert), so rows of
-- elements that disappeared do not linger; unchanged input yields identical rows.

DELETE FROM pages     WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM sections  WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM chunks    WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM tables    WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM images    WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM equations WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM reference WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM metadata  WHERE paper_id     IN (SELECT paper_id::UUID FROM staged_metadata);

INSERT INTO metadata
SELECT paper_id::UUID, title, abstract, num_pages::INTEGER, conference_full, conference_abbreviation,
       pub_year::INTEGER, volume, download_url, bibtex, authors, pdf_path, pdf_sha256, tldr, tags
FROM staged_metadata;

INSERT INTO pages
SELECT page_id::UUID, page_number::INTEGER, page_width, page_height, page_content, page_summary,
       ref_paper_id::UUID
FROM staged_pages;

INSERT INTO sections
SELECT section_id::UUID, section_title, section_content, section_summary, ordinal::INTEGER,
       level::INTEGER, parent_section_id::UUID, page_numbers::INTEGER[], ref_paper_id::UUID
FROM staged_sections;

INSERT INTO chunks
SELECT chunk_id::UUID, text_content, ordinal::INTEGER, page_number::INTEGER, ref_paper_id::UUID,
       ref_page_id::UUID
FROM staged_chunks;

INSERT INTO tables
SELECT table_id::UUID, table_caption, table_content, table_summary, bounding_box::DOUBLE[4],
       ordinal::INTEGER, page_number::INTEGER, ref_paper_id::UUID, ref_page_id::UUID
FROM staged_tables;

INSERT INTO images
SELECT image_id::UUID, image_caption, image_summary, bounding_box::DOUBLE[4], ordinal::INTEGER,
       page_number::INTEGER, ref_paper_id::UUID, ref_page_id::UUID
FROM staged_images;

INSERT INTO equations
SELECT equation_id::UUID, equation_content, equation_number, bounding_box::DOUBLE[4],
       ordinal::INTEGER, page_number::INTEGER, ref_paper_id::UUID, ref_page_id::UUID
FROM staged_equations;

INSERT INTO reference
SELECT reference_id::UUID, reference_content, ordinal::INTEGER, page_number::INTEGER,
       ref_paper_id::UUID, ref_page_id::UUID
FROM staged_reference;

-- A PDF that parses now is no longer quarantined (same bytes, or a fixed file at the same path).
DELETE FROM quarantine
WHERE pdf_sha256 IN (SELECT pdf_sha256 FROM staged_metadata)
   OR pdf_path IN (SELECT pdf_path FROM staged_metadata);
