-- View element_search: every text element of every paper in one relation, for keyword search with
-- ILIKE / regexp_matches / contains, e.g.
--   SELECT paper_title, element_type, page_number, label FROM element_search
--   WHERE text ILIKE '%contrastive loss%' ORDER BY paper_title, page_number;
-- Covers sections, chunks, tables, figures (images; caption + OCR text), equations and references. Chunks and sections
-- hold overlapping page text: filter on element_type to avoid counting a hit twice.

CREATE OR REPLACE VIEW element_search AS
SELECT
    e.element_type,
    e.element_id,
    e.paper_id,
    m.title AS paper_title,
    e.page_number,
    e.label,
    e.text,
    e.summary
FROM (
    SELECT 'section' AS element_type, section_id AS element_id, ref_paper_id AS paper_id,
           page_numbers[1] AS page_number, section_title AS label,
           concat_ws(chr(10), section_title, section_content) AS text, section_summary AS summary
    FROM sections
    UNION ALL
    SELECT 'chunk', chunk_id, ref_paper_id, page_number, NULL, text_content, NULL
    FROM chunks
    UNION ALL
    SELECT 'table', table_id, ref_paper_id, page_number, table_caption,
           concat_ws(chr(10), table_caption, table_content), table_summary
    FROM tables
    UNION ALL
    SELECT 'image', image_id, ref_paper_id, page_number, image_caption,
           concat_ws(chr(10), image_caption, image_ocr_text), image_summary
    FROM images
    UNION ALL
    SELECT 'equation', equation_id, ref_paper_id, page_number, equation_number, equation_content, NULL
    FROM equations
    UNION ALL
    SELECT 'reference', reference_id, ref_paper_id, page_number, NULL, reference_content, NULL
    FROM reference
) AS e
LEFT JOIN metadata AS m ON m.paper_id = e.paper_id;

COMMENT ON VIEW element_search IS 'Search helper: one row per section, chunk, table, figure, equation and reference of every paper with its searchable text; filter with text ILIKE ''%keyword%''.';
COMMENT ON COLUMN element_search.element_type IS 'The kind of element: section, chunk, table, image (a figure), equation or reference.';
COMMENT ON COLUMN element_search.element_id IS 'The id of the element in its table (section_id, chunk_id, table_id, image_id, equation_id or reference_id).';
COMMENT ON COLUMN element_search.paper_id IS 'The paper the element belongs to (metadata.paper_id).';
COMMENT ON COLUMN element_search.paper_title IS 'The title of that paper.';
COMMENT ON COLUMN element_search.page_number IS 'The page number (from 1) of the element; for a section, the first page it spans.';
COMMENT ON COLUMN element_search.label IS 'A short heading: the section title, the table or figure caption, the equation number; NULL for chunks and references.';
COMMENT ON COLUMN element_search.text IS 'The searchable text: section title and content, table caption and HTML content, figure caption and the text OCR read inside it, equation content, chunk text or bibliography entry.';
COMMENT ON COLUMN element_search.summary IS 'The LLM-written summary of the section, table or figure; NULL for other elements or until summarized.';
