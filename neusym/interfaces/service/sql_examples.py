"""Example queries over the documented views: the SQL console's examples, ``GET /schema`` and the
MCP resource ``neusym://views`` (docs/sql.md has more)."""

from __future__ import annotations

SQL_EXAMPLES: list[dict[str, str]] = [
    {"title": "Corpus coverage by venue and year",
     "sql": "SELECT venue, pub_year, paper_count, page_count FROM papers_per_venue_year ORDER BY paper_count DESC"},
    {"title": "Papers with the most tables",
     "sql": "SELECT title, table_count, image_count, equation_count FROM paper_overview\n"
            "ORDER BY table_count DESC LIMIT 10"},
    {"title": "Most prolific authors",
     "sql": "SELECT author, count(*) AS papers FROM author_paper\nGROUP BY author ORDER BY papers DESC, author LIMIT 10"},
    {"title": "Tables and figures that mention accuracy",
     "sql": "SELECT paper_title, element_type, page_number, label FROM element_search\n"
            "WHERE element_type IN ('table', 'image') AND text ILIKE '%accuracy%'\nORDER BY paper_title, page_number"},
    {"title": "Top-level sections of each paper",
     "sql": "SELECT m.title, s.ordinal, s.section_title, s.page_numbers\nFROM sections s JOIN metadata m "
            "ON m.paper_id = s.ref_paper_id\nWHERE s.level = 1 ORDER BY m.title, s.ordinal LIMIT 100"},
]
"""Example queries of the SQL console over the documented views (docs/sql.md)."""

__all__ = ["SQL_EXAMPLES"]
