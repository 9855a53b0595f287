-- View result_cells: every number printed in a table of the corpus, with its paper, table caption, row
-- header and header path -- "every result reported on dataset X with metric Y", e.g.
--   SELECT paper_title, table_label, row_header, column_header_path, number FROM result_cells
--   WHERE column_header_path ILIKE '%BLEU%' ORDER BY number DESC;
-- One row per numeric, non-header cell of table_cells. Header paths and row headers are as printed
-- ("MNLI / Acc."), so match them with ILIKE or regexp_matches rather than =.

CREATE OR REPLACE VIEW result_cells AS
SELECT
    m.paper_id,
    m.title AS paper_title,
    m.conference_abbreviation AS venue,
    m.pub_year,
    t.table_id,
    regexp_extract(t.table_caption, '^\s*(Table\s*[A-Za-z]?\d+)', 1) AS table_label,
    t.table_caption,
    t.page_number,
    t.bounding_box AS table_bounding_box,
    c.row_index,
    c.column_index,
    c.row_header,
    c.column_header_path,
    c.cell_text,
    c.number,
    c.plus_minus,
    c.unit,
    c.marks
FROM table_cells c
JOIN tables t ON t.table_id = c.ref_table_id
JOIN metadata m ON m.paper_id = c.ref_paper_id
WHERE c.number IS NOT NULL AND NOT c.is_header;

COMMENT ON VIEW result_cells IS 'Every number printed in a table: paper, table caption and label, page, row header, header path, number (numeric non-header cells of table_cells).';
COMMENT ON COLUMN result_cells.paper_id IS 'The paper (metadata.paper_id).';
COMMENT ON COLUMN result_cells.paper_title IS 'The paper''s title (metadata.title).';
COMMENT ON COLUMN result_cells.venue IS 'The conference abbreviation (metadata.conference_abbreviation); NULL if unknown.';
COMMENT ON COLUMN result_cells.pub_year IS 'The publication year (metadata.pub_year); NULL if unknown.';
COMMENT ON COLUMN result_cells.table_id IS 'The table (tables.table_id).';
COMMENT ON COLUMN result_cells.table_label IS 'The table''s label as its caption starts, e.g. "Table 2"; NULL when the caption has none.';
COMMENT ON COLUMN result_cells.table_caption IS 'The table''s caption (tables.table_caption).';
COMMENT ON COLUMN result_cells.page_number IS 'The page (from 1) the table is on.';
COMMENT ON COLUMN result_cells.table_bounding_box IS 'The table''s region on its page: [x0, y0, width, height] in PDF points from the top-left corner.';
COMMENT ON COLUMN result_cells.row_index IS 'Row of the cell in the table, from 0, header rows first (table_cells.row_index).';
COMMENT ON COLUMN result_cells.column_index IS 'Column of the cell, from 0 (table_cells.column_index).';
COMMENT ON COLUMN result_cells.row_header IS 'The label of the cell''s row, label columns joined with " / " (table_cells.row_header).';
COMMENT ON COLUMN result_cells.column_header_path IS 'The header texts above the cell''s column, top first, joined with " / " (table_cells.column_header_path).';
COMMENT ON COLUMN result_cells.cell_text IS 'The cell as printed (table_cells.cell_text).';
COMMENT ON COLUMN result_cells.number IS 'The number the cell shows (table_cells.number).';
COMMENT ON COLUMN result_cells.plus_minus IS 'The spread printed after the number; NULL when none.';
COMMENT ON COLUMN result_cells.unit IS 'A unit printed with the number ("%", "ms", ...); NULL when none.';
COMMENT ON COLUMN result_cells.marks IS 'Footnote or significance marks printed with the number; NULL when none.';
