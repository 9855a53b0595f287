-- What each enrichment (LLM summary, tldr/tags, OCR) reads, one row per element and kind.
-- enrichment_inputs is THE definition of what each enrichment reads: neusym.ingest.enrich plans and prompts
-- from this view, and the cache key is sha256 of input_text, so a changed page/section/table/figure
-- is summarized again while an unchanged one (even after a re-parse) gets its cached value back.

CREATE OR REPLACE TEMP VIEW enrichment_inputs AS
SELECT 'page_summary' AS kind, page_id::VARCHAR AS element_id, ref_paper_id::VARCHAR AS paper_id,
       page_number, NULL::DOUBLE[4] AS bounding_box, page_content AS input_text
FROM pages WHERE length(trim(page_content)) > 0
UNION ALL
SELECT 'section_summary', section_id::VARCHAR, ref_paper_id::VARCHAR, page_numbers[1], NULL,
       section_title || chr(10) || section_content
FROM sections WHERE length(trim(section_content)) > 0
UNION ALL
SELECT 'table_summary', table_id::VARCHAR, ref_paper_id::VARCHAR, page_number, bounding_box,
       table_caption || chr(10) || coalesce(table_content, '')
FROM tables
UNION ALL
SELECT 'image_summary', image_id::VARCHAR, ref_paper_id::VARCHAR, page_number, bounding_box,
       image_caption || chr(10) || coalesce(image_ocr_text, '')
FROM images
UNION ALL
SELECT 'paper_tldr_tags', paper_id::VARCHAR, paper_id::VARCHAR, NULL, NULL,
       title || chr(10) || coalesce(abstract, '')
FROM metadata WHERE length(trim(coalesce(abstract, ''))) > 0
UNION ALL
SELECT 'image_ocr_text', i.image_id::VARCHAR, i.ref_paper_id::VARCHAR, i.page_number, i.bounding_box,
       'ocr|' || m.pdf_sha256 || '|' || i.page_number || '|' || i.bounding_box::VARCHAR
FROM images i JOIN metadata m ON m.paper_id = i.ref_paper_id
WHERE m.pdf_sha256 IS NOT NULL AND i.bounding_box IS NOT NULL;
