-- The cells of every parsed table (table_cells), derived from tables.table_content.
-- Input: temporary table staged_table_cells, built by neusym.ingest.materialize with
-- neusym.ingest.parse.cells.table_cells from the staged tables of this run and from stored tables that
-- have no cells yet (a database created before table_cells existed is filled on its next load).
-- Runs after 10_upsert_papers.sql, in the same transaction.

DELETE FROM table_cells WHERE ref_paper_id IN (SELECT paper_id::UUID FROM staged_metadata);
DELETE FROM table_cells WHERE ref_table_id IN (SELECT DISTINCT ref_table_id::UUID FROM staged_table_cells);

INSERT INTO table_cells (ref_table_id, row_index, column_index, row_header, column_header_path, cell_text, number,
                         plus_minus, unit, marks, is_header, ref_paper_id)
SELECT ref_table_id::UUID, row_index, column_index, row_header, column_header_path, cell_text, number, plus_minus,
       unit, marks, is_header, ref_paper_id::UUID
FROM staged_table_cells
WHERE ref_table_id::UUID IN (SELECT table_id FROM tables);

-- cells of tables that are gone (their paper was re-parsed with fewer tables, or removed)
DELETE FROM table_cells WHERE ref_table_id NOT IN (SELECT table_id FROM tables);
