-- View author_paper: the author list of metadata unnested, one row per (author, paper).
-- Example: SELECT author, count(*) AS papers FROM author_paper GROUP BY author ORDER BY papers DESC;
-- Authors are matched by their printed full name only (no disambiguation of namesakes).

CREATE OR REPLACE VIEW author_paper AS
SELECT
    a.author,
    a.author_position::INTEGER AS author_position,
    len(m.authors)::INTEGER AS author_count,
    m.paper_id,
    m.title,
    m.conference_abbreviation AS venue,
    m.pub_year
FROM metadata AS m, unnest(m.authors) WITH ORDINALITY AS a(author, author_position);

COMMENT ON VIEW author_paper IS 'One row per author of each paper (metadata.authors unnested), with the author position; papers without known authors have no rows.';
COMMENT ON COLUMN author_paper.author IS 'The full name of the author as printed on the paper.';
COMMENT ON COLUMN author_paper.author_position IS 'The position of the author in the author list, starting from 1 (1 = first author; author_count = last author).';
COMMENT ON COLUMN author_paper.author_count IS 'The number of authors of the paper.';
COMMENT ON COLUMN author_paper.paper_id IS 'The paper (metadata.paper_id).';
COMMENT ON COLUMN author_paper.title IS 'The title of the paper.';
COMMENT ON COLUMN author_paper.venue IS 'The conference abbreviation, e.g. ACL; NULL if unknown.';
COMMENT ON COLUMN author_paper.pub_year IS 'The publication year; NULL if unknown.';
