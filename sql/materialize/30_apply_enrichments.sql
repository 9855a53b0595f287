-- Fill the summary, tldr/tags and OCR columns from the enrichments cache (same transaction as
-- 10_upsert_papers.sql; also run by neusym.ingest.enrich.apply_enrichment after new results arrive).
-- Input: the temporary view enrichment_inputs of 25_enrichment_inputs.sql. The newest cached value
-- of an element's exact input wins, whatever model produced it.

CREATE OR REPLACE TEMP VIEW enrichment_values AS
SELECT i.kind, i.element_id, e.value
FROM (SELECT *, sha256(input_text) AS content_sha256 FROM enrichment_inputs) i
JOIN (SELECT kind, content_sha256, arg_max(value, created_at) AS value FROM enrichments GROUP BY ALL) e
  ON e.kind = i.kind AND e.content_sha256 = i.content_sha256;

UPDATE pages SET page_summary = v.value FROM enrichment_values v
WHERE v.kind = 'page_summary' AND pages.page_id = v.element_id::UUID AND pages.page_summary IS DISTINCT FROM v.value;

UPDATE sections SET section_summary = v.value FROM enrichment_values v
WHERE v.kind = 'section_summary' AND sections.section_id = v.element_id::UUID
  AND sections.section_summary IS DISTINCT FROM v.value;

UPDATE tables SET table_summary = v.value FROM enrichment_values v
WHERE v.kind = 'table_summary' AND tables.table_id = v.element_id::UUID AND tables.table_summary IS DISTINCT FROM v.value;

UPDATE images SET image_ocr_text = v.value FROM enrichment_values v
WHERE v.kind = 'image_ocr_text' AND images.image_id = v.element_id::UUID
  AND images.image_ocr_text IS DISTINCT FROM v.value;

UPDATE images SET image_summary = v.value FROM enrichment_values v
WHERE v.kind = 'image_summary' AND images.image_id = v.element_id::UUID AND images.image_summary IS DISTINCT FROM v.value;

UPDATE metadata SET tldr = json_extract_string(v.value, '$.tldr'),
                    tags = CAST(json_extract(v.value, '$.tags') AS VARCHAR[])
FROM enrichment_values v
WHERE v.kind = 'paper_tldr_tags' AND metadata.paper_id = v.element_id::UUID
  AND (metadata.tldr IS DISTINCT FROM json_extract_string(v.value, '$.tldr')
       OR metadata.tags IS DISTINCT FROM CAST(json_extract(v.value, '$.tags') AS VARCHAR[]));
