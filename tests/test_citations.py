"""The in-corpus citation graph (``citation_links``, views ``paper_citations`` / ``cited_by``) on the real
sample PDFs: SPECTER's bibliography names "Construction of the Literature Graph in Semantic Scholar"
(NAACL 2018, N18-3011), also a sample paper. Expected links come from SQL over the stored reference
texts and titles (a containment check written in SQL, not the resolver), and from what the PDFs print.
"""

from __future__ import annotations

import duckdb
from neusym.ids import normalize_title as normalize
from neusym.ingest.citations import Resolver, Target, reference_ids, update_citation_links

from .conftest import SAMPLES

LITGRAPH = "Construction of the Literature Graph in Semantic Scholar"
SPECTER = "SPECTER: Document-level Representation Learning using Citation-informed Transformers"

_NORM = "trim(regexp_replace(lower(strip_accents({x})), '[^a-z0-9]+', ' ', 'g'))"
CONTAINED = f"""
SELECT r.reference_id::VARCHAR, r.ref_paper_id::VARCHAR, m.paper_id::VARCHAR
FROM reference r JOIN metadata m
  ON (' ' || {_NORM.format(x='r.reference_content')} || ' ') LIKE ('% ' || {_NORM.format(x='m.title')} || ' %')
WHERE m.paper_id <> r.ref_paper_id AND len(string_split({_NORM.format(x='m.title')}, ' ')) >= 3
"""


def _links(con) -> set[tuple[str, str, str]]:
    return set(con.execute("SELECT reference_id::VARCHAR, citing_paper_id::VARCHAR, cited_paper_id::VARCHAR "
                           "FROM citation_links").fetchall())


def test_specter_cites_the_literature_graph_paper_in_the_sample_corpus(db):
    ids = dict(db.execute("SELECT title, paper_id::VARCHAR FROM metadata").fetchall())
    litgraph, specter = ids[LITGRAPH], ids[SPECTER]
    # SPECTER's reference list prints "Waleed Ammar, ... 2018. Construction of the literature graph in semantic scholar."
    printed = db.execute("SELECT reference_id::VARCHAR FROM reference WHERE ref_paper_id = ? AND "
                         "reference_content ILIKE '%Construction of the literature graph in semantic scholar%'",
                         [specter]).fetchall()
    assert len(printed) == 1
    links = _links(db)
    assert (printed[0][0], specter, litgraph) in links
    row = db.execute("SELECT method, score FROM citation_links WHERE reference_id = ?", [printed[0][0]]).fetchone()
    assert row == ("title", 100.0)
    # every whole-title containment SQL finds is a link (the title method's recall on the sample corpus)
    contained = set(db.execute(CONTAINED).fetchall())
    assert contained and contained <= links
    # the views count what the table holds
    n_citing = db.execute("SELECT count(DISTINCT citing_paper_id) FROM citation_links WHERE cited_paper_id = ?",
                          [litgraph]).fetchone()[0]
    assert db.execute("SELECT cited_by_count FROM paper_citations WHERE paper_id = ?", [litgraph]).fetchone()[0] == n_citing >= 1
    assert db.execute("SELECT cites_count, reference_count FROM paper_citations WHERE paper_id = ?", [specter]).fetchone() == (
        db.execute("SELECT count(DISTINCT cited_paper_id) FROM citation_links WHERE citing_paper_id = ?", [specter]).fetchone()[0],
        db.execute("SELECT count(*) FROM reference WHERE ref_paper_id = ?", [specter]).fetchone()[0])
    titles = {t for (t,) in db.execute("SELECT citing_title FROM cited_by WHERE cited_paper_id = ?", [litgraph]).fetchall()}
    assert SPECTER in titles


def test_resolution_is_incremental_and_follows_papers_that_arrive_and_leave(corpus_settings, tmp_path):
    """A copy of the sample corpus's writer database: the literature-graph paper removed (as if not yet
    crawled), its references kept, then put back: only the references that may name it are re-checked,
    and SPECTER's stored reference links to it again."""
    from neusym.store.sqlfiles import read_sql

    con = duckdb.connect(str(tmp_path / "copy.duckdb"))
    try:
        con.execute(f"ATTACH '{corpus_settings.db_path}' AS source (READ_ONLY)")
        con.execute("COPY FROM DATABASE source TO copy")
        con.execute("DETACH source")
        con.execute(read_sql("schema.sql"))
        assert update_citation_links(con).links == len(_links(con))  # up to date: nothing to do
        quiet = update_citation_links(con)
        assert (quiet.citing_changed, quiet.targets_changed, quiet.rechecked, quiet.links_added) == (0, 0, 0, 0)
        litgraph = con.execute("SELECT paper_id::VARCHAR FROM metadata WHERE title = ?", [LITGRAPH]).fetchone()[0]
        before = _links(con)
        to_it = {lk for lk in before if lk[2] == litgraph}
        assert to_it
        con.execute("CREATE TEMP TABLE kept AS SELECT * FROM metadata WHERE paper_id = ?", [litgraph])
        con.execute("DELETE FROM metadata WHERE paper_id = ?", [litgraph])
        gone = update_citation_links(con)
        assert gone.links_removed >= len(to_it)
        assert not {lk for lk in _links(con) if lk[2] == litgraph}
        con.execute("INSERT INTO metadata SELECT * FROM kept")
        back = update_citation_links(con)
        assert (back.targets_changed, back.citing_changed) == (1, 1)  # the paper itself, as cited and as citing
        assert 1 <= back.rechecked < con.execute("SELECT count(*) FROM reference").fetchone()[0] / 10
        assert _links(con) == before
    finally:
        con.close()


def test_identifiers_printed_in_references_are_read():
    # two reference endings as printed in the DecompX (a sample) and PaSa PDFs; the Anthology's and DOI's id forms
    assert ("arxiv", "1907.11692") in reference_ids(
        "2019. Roberta: A robustly optimized bert pretraining approach. arXiv, abs/1907.11692.")
    assert ("arxiv", "2402.01788") in reference_ids(
        "2024. Litllm: A toolkit for scientific literature review. arXiv preprint arXiv:2402.01788.")
    assert ("anthology", "n18-3011") in reference_ids("In NAACL-HLT. https://aclanthology.org/N18-3011")
    assert ("anthology", "2023.eacl-main.121") in reference_ids("pages 1650-1669. 2023.eacl-main.121")
    assert ("doi", "10.18653/v1/2020.acl-main.207") in reference_ids("doi: 10.18653/v1/2020.acl-main.207.")


def test_the_resolver_prefers_the_longest_title_and_never_links_a_paper_to_itself():
    short = Target("a", "Dense Passage Retrieval", tuple(normalize("Dense Passage Retrieval").split()), 2020)
    long_title = "Dense Passage Retrieval for Open-Domain Question Answering"
    long_ = Target("b", long_title, tuple(normalize(long_title).split()), 2020)
    r = Resolver([short, long_])
    text = ("Vladimir Karpukhin, Barlas Oguz, Sewon Min, et al. 2020. Dense passage retrieval for open-domain "
            "question answering. In EMNLP, pages 6769-6781.")
    assert r.resolve(text) == ("b", "title", 100.0)
    assert r.resolve(text, citing_paper_id="b") == ("a", "title", 100.0)
    # a line-broken hyphenation keeps the title from matching whole; the fuzzy step still finds it
    broken = text.replace("open-domain", "open-do main")
    assert r.resolve(broken)[0] == "b" and r.resolve(broken)[1] == "fuzzy"
    # a title of fewer than three words is never matched by containment alone
    tiny = Target("c", "BERT", ("bert",), 2019)
    assert Resolver([tiny]).resolve("Devlin et al. 2019. BERT: Pre-training of deep bidirectional transformers.") is None


def test_hand_checked_references_resolve_against_the_crawled_acl_2024_collection(tmp_path):
    """The 828 references of benchmarks/citations (parsed from 17 real PDFs, each labelled by hand) against
    the ACL 2024 collection crawled from its real Anthology XML (tests/fixtures/acl/2024.acl.xml, 1,030
    papers, loaded through the crawl stages): the references labelled with an ACL 2024 paper link to
    exactly that paper, and no other reference links to an ACL 2024 paper."""
    import json

    from neusym.ingest.citations import _TARGETS_SQL, _target_of
    from neusym.ingest.crawl import crawl_stage, load_crawl_stage
    from neusym.settings import Settings

    from .conftest import FIXTURES, REPO

    settings = Settings(home=tmp_path / "home")
    crawled = crawl_stage({"source": "acl", "paths": [str(FIXTURES / "acl" / "2024.acl.xml")]}, settings)
    assert crawled.status == "ok", crawled.error
    load_crawl_stage([crawled], settings, download=False)
    con = duckdb.connect(str(settings.db_path), read_only=True)
    try:
        targets = [_target_of(r)[0] for r in con.execute(_TARGETS_SQL).fetchall()]
        by_anthology = dict(con.execute("SELECT anthology_id, ref_paper_id::VARCHAR FROM provenance").fetchall())
    finally:
        con.close()
    assert len(targets) == 1030
    gold = [json.loads(line) for line in (REPO / "benchmarks" / "citations" / "gold.jsonl").read_text().splitlines()]
    assert len(gold) == 828
    resolver = Resolver(targets)
    expected, got = {}, {}
    for i, g in enumerate(gold):
        t = g["target"]
        if t and t["collection"] == "2024.acl.xml":
            expected[i] = by_anthology[t["anthology_id"]]
        hit = resolver.resolve(g["reference"])
        if hit:
            got[i] = hit[0]
    assert len(expected) == 4
    assert got == expected
