"""Citation export (neusym.query.citation_export): BibTeX and RIS of search results and of single papers,
through the CLI (``neusym search --format bibtex|ris``) and the service (``/search.bib``, ``/search.ris``,
``/papers/{id}.bib``, ``/papers/{id}.ris``).

Real data: the session's sample corpus (5 parsed PDFs, no stored BibTeX: entries are generated from the
metadata) and a metadata-only crawl of the ACL 2024 tutorials volume (tests/fixtures/acl/2024.acl.xml),
whose stored Anthology BibTeX must come out with its own citation key and DOI. Expected values are read
independently: metadata rows with SQL, the Anthology's bibkey/DOI with ElementTree; the output is parsed
back with bibtexparser (LaTeX decoded) and rispy.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import bibtexparser
import httpx
import pytest
import rispy
from bibtexparser.middlewares import LatexDecodingMiddleware

from neusym.interfaces.service import create_app
from neusym.query.citation_export import paper_records, to_bibtex, to_ris
from neusym.settings import Settings
from neusym.store.db import connect_readonly
from neusym.store.versions import current_version

from .conftest import FIXTURES
from .service_support import LiveServer
from .test_search import crawl_and_publish

ACL_XML = FIXTURES / "acl" / "2024.acl.xml"
LONGEVAL = "LongEval: Guidelines for Human Evaluation of Faithfulness in Long-form Summarization"
SPECTER = "SPECTER: Document-level Representation Learning using Citation-informed Transformers"
QUERY = "language models"


def parse_bib(text: str) -> bibtexparser.Library:
    """BibTeX text parsed back with LaTeX decoding (``\\&`` -> ``&``, ``{LongEval}`` -> ``LongEval``)."""
    library = bibtexparser.parse_string(text, append_middleware=[LatexDecodingMiddleware()])
    assert library.failed_blocks == [], [b.error for b in library.failed_blocks]
    return library


def field(entry, name: str):
    f = entry.fields_dict.get(name)
    return None if f is None else f.value


def authors_of(entry) -> list[str]:
    value = field(entry, "author")
    return [" ".join(a.split()) for a in value.split(" and ")] if value else []


def metadata_rows(db, paper_ids: list[str]) -> dict[str, dict]:
    """paper_id -> metadata columns, straight from SQL."""
    rows = db.execute("SELECT paper_id::VARCHAR, title, authors, conference_full, conference_abbreviation, pub_year, "
                      "download_url, bibtex FROM metadata WHERE paper_id::VARCHAR IN "
                      f"({', '.join('?' for _ in paper_ids)})", paper_ids).fetchall()
    keys = ("paper_id", "title", "authors", "conference_full", "conference_abbreviation", "pub_year", "download_url",
            "bibtex")
    return {r[0]: dict(zip(keys, r)) for r in rows}


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def server(corpus_settings):
    with LiveServer(create_app(corpus_settings)) as live:
        yield live


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def ids(db) -> dict[str, str]:
    return {title: pid for pid, title in db.execute("SELECT paper_id::VARCHAR, title FROM metadata").fetchall()}


@pytest.fixture(scope="module")
def tutorials_home(tmp_path_factory) -> Settings:
    """A NEUSYM_HOME whose current version holds the six ACL 2024 tutorials (metadata only, stored BibTeX)."""
    settings = Settings(home=tmp_path_factory.mktemp("export-acl-home"))
    crawl_and_publish(settings, [ACL_XML], volumes=["tutorials"])
    return settings


@pytest.fixture(scope="module")
def anthology() -> dict[str, dict]:
    """Title -> {anthology_id, bibkey, doi, authors} of the tutorials, read from the XML with ElementTree."""
    root = ET.parse(ACL_XML).getroot()
    out = {}
    for volume in root.iter("volume"):
        if volume.get("id") != "tutorials":
            continue
        for paper in volume.iter("paper"):
            title = " ".join("".join(paper.find("title").itertext()).split())
            authors = [" ".join(f"{a.findtext('first') or ''} {a.findtext('last') or ''}".split())
                       for a in paper.findall("author")]
            out[title] = {"anthology_id": f"{root.get('id')}-tutorials.{paper.get('id')}",
                          "bibkey": paper.findtext("bibkey"), "doi": paper.findtext("doi"), "authors": authors}
    assert len(out) == 6
    return out


def cli(home, *args: str):
    from typer.testing import CliRunner

    from neusym.interfaces.cli import app

    return CliRunner(env={"NEUSYM_HOME": str(home), "COLUMNS": "400"}).invoke(app, ["search", *args])


# ------------------------------------------------------------------------------------ BibTeX of search results
def test_search_bib_round_trips_to_the_metadata_of_the_hits_in_order(client, db):
    hits = client.get("/search", params={"q": QUERY, "limit": 5}).json()["hits"]
    assert len(hits) == 5
    r = client.get("/search.bib", params={"q": QUERY, "limit": 5})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-bibtex; charset=utf-8"
    assert r.headers["content-disposition"] == 'attachment; filename="neusym-search.bib"'
    entries = parse_bib(r.text).entries
    assert len(entries) == 5
    rows = metadata_rows(db, [h["paper_id"] for h in hits])
    assert all(row["bibtex"] is None for row in rows.values())  # parsed PDFs: every entry is generated
    for hit, entry in zip(hits, entries):  # best first, as /search lists them
        row = rows[hit["paper_id"]]
        assert field(entry, "title") == row["title"]
        assert authors_of(entry) == list(row["authors"])
        venue = row["conference_full"] or row["conference_abbreviation"]
        assert entry.entry_type == ("inproceedings" if venue else "misc")
        assert field(entry, "booktitle") == venue
        assert field(entry, "year") == (str(row["pub_year"]) if row["pub_year"] else None)
        assert field(entry, "url") == row["download_url"]
    keys = [e.key for e in entries]
    assert len({k.lower() for k in keys}) == 5 and all(k.isascii() and " " not in k for k in keys)


def test_generated_keys_and_case_protection_of_known_papers(client):
    r = client.get("/search.bib", params={"q": QUERY, "limit": 5})
    raw = {e.key: e for e in bibtexparser.parse_string(r.text).entries}  # no decoding: the braces as written
    by_title = {field(e, "title"): e for e in parse_bib(r.text).entries}
    longeval, specter = by_title[LONGEVAL], by_title[SPECTER]
    # <first author's last name><year><first significant title word>, lower-case ASCII
    assert (longeval.key, specter.key) == ("krishna2023longeval", "cohan2020specter")
    assert field(raw["krishna2023longeval"], "title").startswith("{LongEval:} Guidelines")
    assert field(raw["cohan2020specter"], "title").startswith("{SPECTER:} Document-level Representation")


def test_latex_specials_accents_and_duplicate_keys_round_trip():
    """Titles and names with LaTeX specials and accents survive a write/parse cycle; equal keys get a, b."""
    title = r"Q&A at 100% for $5: C# {braces} back\slash under_score ~tilde in Zürich"
    records = [{"paper_id": f"00000000-0000-0000-0000-00000000000{i}", "title": title, "abstract": "50% & more",
                "authors": ["José Ñúñez-García", "Zoë O'Brien"], "conference_full": None,
                "conference_abbreviation": None, "pub_year": 2024, "volume": None, "download_url": None,
                "bibtex": "@misc{broken, title = {unbalanced}" if i == 1 else None} for i in range(3)]
    entries = parse_bib(to_bibtex(records)).entries
    assert [e.key for e in entries] == ["nunezgarcia2024qa", "nunezgarcia2024qaa", "nunezgarcia2024qab"]
    for entry in entries:
        assert entry.entry_type == "misc" and field(entry, "booktitle") is None
        assert field(entry, "title") == title and field(entry, "abstract") == "50% & more"
        assert authors_of(entry) == ["José Ñúñez-García", "Zoë O'Brien"]
    assert to_bibtex([]) == "" and to_ris([]) == ""


# ------------------------------------------------------------------------------------ stored Anthology BibTeX
def test_a_crawled_paper_keeps_its_anthology_citation_key_and_doi(tutorials_home, anthology):
    con = connect_readonly(current_version(tutorials_home).db_path)
    try:
        pids = [r[0] for r in con.execute("SELECT paper_id::VARCHAR FROM metadata ORDER BY title").fetchall()]
        titles = [r[0] for r in con.execute("SELECT title FROM metadata ORDER BY title").fetchall()]
        records = paper_records(con, list(reversed(pids)) + ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
    finally:
        con.close()
    assert [r["paper_id"] for r in records] == list(reversed(pids))  # in the order asked; unknown ids left out
    entries = bibtexparser.parse_string(to_bibtex(records)).entries
    assert len(entries) == 6
    for title, entry in zip(reversed(titles), entries):
        expected = anthology[title]
        assert entry.key == expected["bibkey"] and entry.entry_type == "inproceedings"
        assert field(entry, "doi") == expected["doi"]
        assert expected["anthology_id"] in field(entry, "url")
        assert field(entry, "booktitle").startswith("Proceedings of the 62nd Annual Meeting")
    ris = rispy.loads(to_ris(records))
    assert [r["doi"] for r in ris] == [anthology[t]["doi"] for t in reversed(titles)]
    assert [r["authors"] for r in ris] == [anthology[t]["authors"] for t in reversed(titles)]


def test_cli_search_format_bibtex_prints_the_stored_entry(tutorials_home, anthology):
    title = "Computational Linguistics for Brain Encoding and Decoding: Principles, Practices and Beyond"
    out = cli(tutorials_home.home, title, "--format", "bibtex", "--limit", "1")
    assert out.exit_code == 0, out.output
    entries = parse_bib(out.stdout).entries
    assert [e.key for e in entries] == [anthology[title]["bibkey"]] == ["sun-etal-2024-computational"]
    assert field(entries[0], "doi") == "10.18653/v1/2024.acl-tutorials.1"


# ------------------------------------------------------------------------------------ RIS
def test_search_ris_parses_back_with_the_titles_of_the_hits(client, db):
    hits = client.get("/search", params={"q": QUERY, "limit": 5}).json()["hits"]
    r = client.get("/search.ris", params={"q": QUERY, "limit": 5})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-research-info-systems; charset=utf-8"
    assert r.headers["content-disposition"] == 'attachment; filename="neusym-search.ris"'
    records = rispy.loads(r.text)
    rows = metadata_rows(db, [h["paper_id"] for h in hits])
    assert [x["id"] for x in records] == [h["paper_id"] for h in hits]
    assert [x["title"] for x in records] == [rows[h["paper_id"]]["title"] for h in hits]
    for x in records:
        row = rows[x["id"]]
        venue = row["conference_full"] or row["conference_abbreviation"]
        assert x["type_of_reference"] == ("CONF" if venue else "GEN") and x.get("secondary_title") == venue
        assert x["authors"] == list(row["authors"])
        assert x.get("year") == (str(row["pub_year"]) if row["pub_year"] else None)


# ------------------------------------------------------------------------------------ HTTP details
def test_paper_bib_and_ris_are_not_taken_by_the_paper_route(client, ids, db):
    pid = ids[LONGEVAL]
    row = metadata_rows(db, [pid])[pid]
    bib = client.get(f"/papers/{pid}.bib")
    assert bib.status_code == 200, bib.text
    assert bib.headers["content-type"] == "application/x-bibtex; charset=utf-8"
    assert bib.headers["content-disposition"] == f'attachment; filename="neusym-{pid}.bib"'
    (entry,) = parse_bib(bib.text).entries
    assert field(entry, "title") == row["title"] and authors_of(entry) == list(row["authors"])
    ris = client.get(f"/papers/{pid}.ris")
    assert ris.status_code == 200 and ris.headers["content-type"].startswith("application/x-research-info-systems")
    (record,) = rispy.loads(ris.text)
    assert record["title"] == row["title"] and record["id"] == pid
    assert client.get(f"/papers/{pid}").json()["title"] == row["title"]  # the JSON route still answers
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/search.bib", "/search.ris", "/papers/{paper_id}.bib", "/papers/{paper_id}.ris"} <= set(paths)


@pytest.mark.parametrize("path, params, status, words", [
    ("/search.bib", {"q": "   "}, 400, ["blank"]),
    ("/search.ris", {"q": "   "}, 400, ["blank"]),
    ("/search.bib", {}, 422, ["'q'", "required"]),
    ("/search.bib", {"q": "x", "limit": 0}, 422, ["'limit'"]),
    ("/papers/00000000-0000-0000-0000-000000000000.bib", {}, 404, ["no paper with id"]),
    ("/papers/00000000-0000-0000-0000-000000000000.ris", {}, 404, ["no paper with id"]),
    ("/papers/not-a-paper.bib", {}, 404, ["no paper with id", "UUID"]),
])
def test_export_endpoints_reject_bad_input_with_a_clear_message(client, path, params, status, words):
    r = client.get(path, params=params)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert all(w in detail for w in words), detail


# ------------------------------------------------------------------------------------ CLI on the sample corpus
def test_cli_search_formats(corpus_settings, db):
    out = cli(corpus_settings.home, QUERY, "--format", "bibtex", "--limit", "3")
    assert out.exit_code == 0, out.output
    entries = parse_bib(out.stdout).entries
    assert len(entries) == 3
    titles = {r[0] for r in db.execute("SELECT title FROM metadata").fetchall()}
    assert {field(e, "title") for e in entries} <= titles
    ris = cli(corpus_settings.home, QUERY, "--format", "ris", "--limit", "3")
    assert ris.exit_code == 0, ris.output
    assert [x["title"] for x in rispy.loads(ris.stdout)] == [field(e, "title") for e in entries]
    as_json = cli(corpus_settings.home, QUERY, "--json", "--limit", "3")  # the old flag still works
    assert as_json.exit_code == 0 and as_json.stdout.lstrip().startswith("[")
    bad = cli(corpus_settings.home, QUERY, "--format", "nope")
    assert bad.exit_code == 2 and "--format must be table, json, bibtex or ris, not 'nope'" in bad.output
    both = cli(corpus_settings.home, QUERY, "--json", "--format", "ris")
    assert both.exit_code == 2 and "cannot be combined" in both.output
