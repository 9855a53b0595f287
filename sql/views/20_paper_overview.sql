-- View paper_overview: one row per paper with its bibliographic fields and how many rows it has in
-- every element table (pages, sections, chunks, tables, figures, equations, references).
-- Example: SELECT title, table_count, image_count FROM paper_overview ORDER BY table_count DESC;

CREATE OR REPLACE VIEW paper_overview AS
WITH
    page_n AS (SELECT ref_paper_id, count(*) AS n FROM pages GROUP BY ref_paper_id),
    section_n AS (SELECT ref_paper_id, count(*) AS n FROM sections GROUP BY ref_paper_id),
    chunk_n AS (SELECT ref_paper_id, count(*) AS n FROM chunks GROUP BY ref_paper_id),
    table_n AS (SELECT ref_paper_id, count(*) AS n FROM tables GROUP BY ref_paper_id),
    image_n AS (SELECT ref_paper_id, count(*) AS n FROM images GROUP BY ref_paper_id),
    equation_n AS (SELECT ref_paper_id, count(*) AS n FROM equations GROUP BY ref_paper_id),
    reference_n AS (SELECT ref_paper_id, count(*) AS n FROM reference GROUP BY ref_paper_id)
SELECT
    m.paper_id,
    m.title,
    m.conference_abbreviation AS venue,
    m.pub_year,
    m.volume,
    coalesce(len(m.authors), 0)::INTEGER AS author_count,
    m.pdf_sha256 IS NOT NULL AS parsed,
    m.num_pages,
    coalesce(page_n.n, 0) AS page_count,
    coalesce(section_n.n, 0) AS section_count,
    coalesce(chunk_n.n, 0) AS chunk_count,
    coalesce(table_n.n, 0) AS table_count,
    coalesce(image_n.n, 0) AS image_count,
    coalesce(equation_n.n, 0) AS equation_count,
    coalesce(reference_n.n, 0) AS reference_count,
    m.pdf_path
FROM metadata AS m
LEFT JOIN page_n ON page_n.ref_paper_id = m.paper_id
LEFT JOIN section_n ON section_n.ref_paper_id = m.paper_id
LEFT JOIN chunk_n ON chunk_n.ref_paper_id = m.paper_id
LEFT JOIN table_n ON table_n.ref_paper_id = m.paper_id
LEFT JOIN image_n ON image_n.ref_paper_id = m.paper_id
LEFT JOIN equation_n ON equation_n.ref_paper_id = m.paper_id
LEFT JOIN reference_n ON reference_n.ref_paper_id = m.paper_id;

COMMENT ON VIEW paper_overview IS 'One row per paper: title, venue, year and the number of pages, sections, chunks, tables, figures, equations and references extracted from it.';
COMMENT ON COLUMN paper_overview.paper_id IS 'The paper (metadata.paper_id).';
COMMENT ON COLUMN paper_overview.title IS 'The title of the paper.';
COMMENT ON COLUMN paper_overview.venue IS 'The conference abbreviation, e.g. ACL; NULL if unknown.';
COMMENT ON COLUMN paper_overview.pub_year IS 'The publication year; NULL if unknown.';
COMMENT ON COLUMN paper_overview.volume IS 'The volume, e.g. long, short, findings, demo; NULL if unknown.';
COMMENT ON COLUMN paper_overview.author_count IS 'The number of authors (length of metadata.authors; 0 when none are known).';
COMMENT ON COLUMN paper_overview.parsed IS 'True when the PDF of the paper has been parsed; false while only its metadata is known (all counts are then 0).';
COMMENT ON COLUMN paper_overview.num_pages IS 'The number of pages of the PDF (metadata.num_pages); NULL while the PDF is not parsed.';
COMMENT ON COLUMN paper_overview.page_count IS 'The number of rows of this paper in pages (equals num_pages when every page was extracted).';
COMMENT ON COLUMN paper_overview.section_count IS 'The number of rows of this paper in sections (sections and subsections).';
COMMENT ON COLUMN paper_overview.chunk_count IS 'The number of rows of this paper in chunks.';
COMMENT ON COLUMN paper_overview.table_count IS 'The number of rows of this paper in tables (printed tables found by their caption).';
COMMENT ON COLUMN paper_overview.image_count IS 'The number of rows of this paper in images (figures found by their caption).';
COMMENT ON COLUMN paper_overview.equation_count IS 'The number of rows of this paper in equations (numbered display equations).';
COMMENT ON COLUMN paper_overview.reference_count IS 'The number of rows of this paper in reference (bibliography entries).';
COMMENT ON COLUMN paper_overview.pdf_path IS 'Where the parsed PDF is stored, relative to the corpus storage (pdfs/sha256/<sha256>.pdf); NULL while the PDF is not parsed.';
