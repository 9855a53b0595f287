"""What the service shows of saved searches and of the corpus as a whole: Atom feeds of watches
(``GET /feeds/{name}.atom``, written with ``feedgen``), the watch list (``GET /watches``) and the
landing page's overview (``GET /overview``).

Watches and their matches come from :class:`neusym.store.watches.WatchStore` (opened read-only: the
evaluation task writes it); everything else from the served corpus version (a DuckDB cursor and its
manifest).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from neusym.store.watches import Match, Watch

FEED_ENTRIES = 50
"""Entries of one Atom feed (newest corpus version first)."""
OVERVIEW_ADDED = 20
"""Papers of the last refresh listed on the landing page."""


_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: Any) -> str:
    """``value`` as text XML 1.0 can carry: characters outside its ``Char`` production (C0 controls
    but tab/newline/return, lone surrogates, U+FFFE/U+FFFF) are dropped. A paper title, abstract or
    saved query holding such a character would otherwise make lxml refuse the whole feed."""
    return _NOT_XML.sub("", str(value))


def _when(text: str | None) -> datetime:
    try:
        value = datetime.fromisoformat(text or "")
    except ValueError:
        return datetime.now(timezone.utc)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def atom_feed(watch: Watch, matches: list[Match], *, base_url: str) -> bytes:
    """The Atom 1.0 document of one watch: one entry per matched paper (newest version first), its id a
    stable ``urn:uuid`` of the (watch, paper) pair, its link the paper on this service
    (``{base_url}#/paper/<id>``), its summary the abstract's start, with authors, venue and year.
    ``base_url`` ends with ``/`` (the page's URL) or is empty: links are then relative to the feed's own
    URL (``feeds/NAME.atom``), which feed readers resolve against where they fetched it. Every text
    goes through :func:`xml_text`. Returns UTF-8 XML bytes."""
    import uuid

    from feedgen.feed import FeedGenerator

    fg = FeedGenerator()
    fg.id(f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'neusym:watch:' + watch.name)}")
    filters = ", ".join(f"{k} {v}" for k, v in (("venue", watch.venue), ("year", watch.year),
                                                 ("author", watch.author)) if v)
    fg.title(xml_text(f"neusym: {watch.query}" + (f" ({filters})" if filters else "")))
    fg.subtitle(f"New papers matching the saved search {watch.name!r}, after each corpus refresh.")
    page = base_url or "../"  # relative: resolved against .../feeds/NAME.atom
    fg.link(href=f"{base_url}feeds/{watch.name}.atom" if base_url else f"{watch.name}.atom", rel="self",
            type="application/atom+xml")
    fg.link(href=page, rel="alternate", type="text/html")
    fg.generator("neusym")
    fg.language("en")
    fg.updated(max((_when(m.matched_at) for m in matches), default=_when(watch.created_at)))
    for m in reversed(matches):  # feedgen prepends: add oldest first so the document lists newest first
        e = fg.add_entry()
        e.id(f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'neusym:watch:{watch.name}:{m.paper_id}')}")
        e.title(xml_text(m.title or m.paper_id))
        e.link(href=f"{page}#/paper/{m.paper_id}", rel="alternate", type="text/html")
        for name in m.authors[:20]:
            if xml_text(name).strip():
                e.author({"name": xml_text(name)})
        where = " ".join(str(x) for x in (m.venue, m.year) if x)
        label = "already in the corpus when the watch was added" if m.initial else f"new in corpus version {m.version}"
        e.summary(xml_text(f"{where + ' · ' if where else ''}{label} · rank {m.rank}"
                           + (f"\n\n{m.snippet}" if m.snippet else "")))
        e.updated(_when(m.matched_at))
        e.published(_when(m.matched_at))
    return fg.atom_str(pretty=True)


def watches_payload(watches: list[Watch], counts: dict[str, dict], matches: dict[str, list[Match]]) -> list[dict]:
    """``GET /watches``: per watch its fields, ``matches`` (papers found), ``new`` (papers of the newest
    version that found any, first evaluation excluded), ``feed`` (its relative URL) and ``recent``
    (the newest matches as dicts)."""
    out = []
    for w in watches:
        c = counts.get(w.name, {})
        out.append({**w.to_dict(), "matches": c.get("matches", 0), "new": c.get("new", 0),
                    "feed": f"feeds/{w.name}.atom", "recent": [m.to_dict() for m in matches.get(w.name, [])]})
    return out


def corpus_overview(cur: Any, manifest: dict, number: int) -> dict:
    """The landing page's picture of a corpus version: ``{"version", "published_at", "papers",
    "parsed", "pages", "venues": [{"venue", "venue_full", "year", "papers", "parsed"}], "last_refresh":
    {"papers_added", "papers_changed", "papers_removed", "added": [{"paper_id", "title", "venue", "year"}]},
    "citations": {"links", "papers_cited"}}`` from the ``papers_per_venue_year`` view, the version's
    manifest (what its publish changed) and ``citation_links`` when the version has it."""
    cur.execute("SELECT count(*), count(pdf_sha256), coalesce(sum(num_pages), 0) FROM metadata")
    papers, parsed, pages = cur.fetchone()
    cur.execute("SELECT venue, venue_full, pub_year, paper_count, parsed_count FROM papers_per_venue_year")
    venues = [{"venue": v, "venue_full": f, "year": y, "papers": n, "parsed": p} for v, f, y, n, p in cur.fetchall()]
    changes = manifest.get("changes") or {}
    added_ids = list(changes.get("added") or [])[:OVERVIEW_ADDED]
    added: list[dict] = []
    if added_ids:
        cur.execute("SELECT paper_id::VARCHAR, title, conference_abbreviation, pub_year FROM metadata "
                    f"WHERE paper_id::VARCHAR IN ({', '.join('?' for _ in added_ids)})", added_ids)
        rows = {r[0]: r for r in cur.fetchall()}
        added = [{"paper_id": r[0], "title": r[1], "venue": r[2], "year": r[3]} for r in
                 (rows.get(p) for p in added_ids) if r is not None]
    cur.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = 'citation_links'")
    citations = None
    if cur.fetchone()[0]:
        cur.execute("SELECT count(*), count(DISTINCT cited_paper_id) FROM citation_links")
        links, cited = cur.fetchone()
        citations = {"links": links, "papers_cited": cited}
    return {"version": number, "published_at": manifest.get("published_at") or manifest.get("created_at"),
            "papers": papers, "parsed": parsed, "pages": int(pages), "venues": venues,
            "last_refresh": {"papers_added": changes.get("papers_added"), "papers_changed": changes.get("papers_changed"),
                             "papers_removed": changes.get("papers_removed"), "added": added},
            "citations": citations}
