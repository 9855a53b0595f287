-- View papers_per_venue_year: how many papers (and pages) the corpus holds per venue and year.
-- Created by the materialize step (neusym.store.views.create_views), idempotent (CREATE OR REPLACE).
-- Example: SELECT venue, pub_year, paper_count FROM papers_per_venue_year WHERE venue = 'ACL';

CREATE OR REPLACE VIEW papers_per_venue_year AS
SELECT
    conference_abbreviation AS venue,
    min(conference_full) AS venue_full,
    pub_year,
    count(*) AS paper_count,
    count(pdf_sha256) AS parsed_count,
    coalesce(sum(num_pages), 0)::BIGINT AS page_count
FROM metadata
GROUP BY conference_abbreviation, pub_year
ORDER BY venue NULLS LAST, pub_year NULLS LAST;

COMMENT ON VIEW papers_per_venue_year IS 'Number of papers and pages per venue (conference abbreviation) and publication year; one row per (venue, pub_year), NULL meaning unknown.';
COMMENT ON COLUMN papers_per_venue_year.venue IS 'The conference abbreviation (metadata.conference_abbreviation), e.g. ACL, EMNLP, ICLR; NULL groups papers whose venue is unknown.';
COMMENT ON COLUMN papers_per_venue_year.venue_full IS 'The full conference name of the papers in this group (the alphabetically first one if they differ); NULL if unknown.';
COMMENT ON COLUMN papers_per_venue_year.pub_year IS 'The publication year (metadata.pub_year); NULL groups papers whose year is unknown.';
COMMENT ON COLUMN papers_per_venue_year.paper_count IS 'The number of papers of this venue and year (including papers whose PDF is not parsed yet).';
COMMENT ON COLUMN papers_per_venue_year.parsed_count IS 'How many of these papers have a parsed PDF (metadata.pdf_sha256 is set).';
COMMENT ON COLUMN papers_per_venue_year.page_count IS 'The total number of pages of the parsed papers (sum of metadata.num_pages).';
