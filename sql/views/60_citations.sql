-- Views paper_citations and cited_by: the in-corpus citation graph (table citation_links, resolved at
-- every publish by neusym/ingest/citations.py) counted per paper and listed per citing/cited pair.
-- "In-corpus": only citations between papers of this corpus are known; a paper cited by papers outside
-- the corpus has no row for them.
-- Example: SELECT title, cited_by_count FROM paper_citations WHERE venue = 'ACL' AND pub_year = 2024
--          ORDER BY cited_by_count DESC LIMIT 10;
-- Example: SELECT citing_title FROM cited_by WHERE cited_title ILIKE 'SPECTER%';

CREATE OR REPLACE VIEW paper_citations AS
WITH
    cited AS (SELECT cited_paper_id AS paper_id, count(DISTINCT citing_paper_id) AS n
              FROM citation_links GROUP BY cited_paper_id),
    cites AS (SELECT citing_paper_id AS paper_id, count(DISTINCT cited_paper_id) AS n
              FROM citation_links GROUP BY citing_paper_id),
    refs AS (SELECT ref_paper_id AS paper_id, count(*) AS n FROM reference GROUP BY ref_paper_id)
SELECT
    m.paper_id,
    m.title,
    m.conference_abbreviation AS venue,
    m.pub_year,
    coalesce(cited.n, 0)::BIGINT AS cited_by_count,
    coalesce(cites.n, 0)::BIGINT AS cites_count,
    coalesce(refs.n, 0)::BIGINT AS reference_count
FROM metadata m
LEFT JOIN cited ON cited.paper_id = m.paper_id
LEFT JOIN cites ON cites.paper_id = m.paper_id
LEFT JOIN refs ON refs.paper_id = m.paper_id;

COMMENT ON VIEW paper_citations IS 'One row per paper: how many corpus papers cite it (cited_by_count) and how many corpus papers it cites (cites_count), from citation_links; citations from or to papers outside the corpus are not counted.';
COMMENT ON COLUMN paper_citations.paper_id IS 'metadata.paper_id.';
COMMENT ON COLUMN paper_citations.title IS 'metadata.title.';
COMMENT ON COLUMN paper_citations.venue IS 'metadata.conference_abbreviation; NULL if unknown.';
COMMENT ON COLUMN paper_citations.pub_year IS 'metadata.pub_year; NULL if unknown.';
COMMENT ON COLUMN paper_citations.cited_by_count IS 'The number of distinct corpus papers whose bibliography names this paper.';
COMMENT ON COLUMN paper_citations.cites_count IS 'The number of distinct corpus papers this paper''s bibliography names.';
COMMENT ON COLUMN paper_citations.reference_count IS 'The number of bibliography entries parsed from this paper (0 for a paper known only by its metadata).';

CREATE OR REPLACE VIEW cited_by AS
SELECT
    l.cited_paper_id,
    cm.title AS cited_title,
    l.citing_paper_id,
    gm.title AS citing_title,
    gm.conference_abbreviation AS citing_venue,
    gm.pub_year AS citing_year,
    l.reference_id,
    r.reference_content,
    l.method,
    l.score
FROM citation_links l
JOIN metadata cm ON cm.paper_id = l.cited_paper_id
JOIN metadata gm ON gm.paper_id = l.citing_paper_id
JOIN reference r ON r.reference_id = l.reference_id;

COMMENT ON VIEW cited_by IS 'One row per in-corpus citation: the cited paper, the citing paper and the bibliography entry that names it (with how it was resolved).';
COMMENT ON COLUMN cited_by.cited_paper_id IS 'The cited corpus paper (metadata.paper_id).';
COMMENT ON COLUMN cited_by.cited_title IS 'Its title.';
COMMENT ON COLUMN cited_by.citing_paper_id IS 'The corpus paper whose bibliography names it (metadata.paper_id).';
COMMENT ON COLUMN cited_by.citing_title IS 'The citing paper''s title.';
COMMENT ON COLUMN cited_by.citing_venue IS 'The citing paper''s conference abbreviation; NULL if unknown.';
COMMENT ON COLUMN cited_by.citing_year IS 'The citing paper''s publication year; NULL if unknown.';
COMMENT ON COLUMN cited_by.reference_id IS 'reference.reference_id of the bibliography entry.';
COMMENT ON COLUMN cited_by.reference_content IS 'The text of the bibliography entry.';
COMMENT ON COLUMN cited_by.method IS 'citation_links.method: title, doi, arxiv, anthology or fuzzy.';
COMMENT ON COLUMN cited_by.score IS 'citation_links.score (0-100).';
