"""Paper-level search (neusym.store.paper_index) on real ACL Anthology records, metadata only.

One embedded (qdrant-edge) index per module, built directly (not through a corpus version): the first 40 papers of ACL 2024 (real XML fixture) and the
papers the questions are about, plus
the Findings 2024 and EMNLP 2023 subsets, so venues and years differ.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import duckdb
import pytest

from neusym.encode import paper_tokens
from neusym.ids import paper_id_for
from neusym.store.paper_index import (
    PaperDoc,
    PaperHit,
    PaperIndex,
    SearchConfig,
    author_keys,
    normalize_person,
    point_id_for_paper,
    split_sentences,
    strip_question,
    sync_paper_index,
)
from neusym.ingest.sources.acl_source import parse_acl_collection
from neusym.query.paper_search import search_papers
from neusym.store.vectors import ClientBackend, EdgeBackend
from neusym.store.versions import current_db

N_ACL = 40
_VECTORS: dict[str, list[float]] = {}


def memo_embed(texts: list[str]) -> list[list[float]]:
    """Real all-MiniLM-L6-v2 vectors, each text encoded once per test session (keeps the module fast)."""
    from neusym.store.paper_index import _dense

    missing = sorted({t for t in texts if t not in _VECTORS})
    for t, v in zip(missing, _dense(missing)):
        _VECTORS[t] = v
    return [_VECTORS[t] for t in texts]
TARGETS = {"2024.acl-long.1", "2024.acl-long.65", "2024.acl-long.77", "2024.acl-long.93", "2024.acl-long.101",
           "2024.acl-long.109"}


@pytest.fixture(scope="module")
def papers(repo_root):
    acl = repo_root / "tests" / "fixtures" / "acl"
    acl2024 = parse_acl_collection(acl / "2024.acl.xml")
    records = acl2024[:N_ACL] + [p for p in acl2024[N_ACL:] if p.anthology_id in TARGETS]
    records += parse_acl_collection(acl / "2024.findings.subset.xml")
    records += parse_acl_collection(acl / "2023.emnlp.subset.xml")
    return [PaperDoc.from_source(p) for p in records]


@pytest.fixture(scope="module")
def index(papers, tmp_path_factory):
    idx = PaperIndex(EdgeBackend(tmp_path_factory.mktemp("papers") / "papers_edge"))
    stats = idx.build(papers, embed=memo_embed)
    assert stats["papers"] == len(papers)
    yield idx
    idx.close()


# Paraphrased questions (no title words copied verbatim where avoidable) -> anthology id.
QUESTIONS = {
    "Is there any paper that reduces the memory needed to fine-tune a 4-bit LLM by training a small network "
    "alongside the frozen model?": "2024.acl-long.1",
    "Which paper first surveys the literature on step-by-step reasoning prompts for LLMs?": "2024.acl-long.65",
    "How can an LLM keep its old abilities during continual learning when the original training data is "
    "unavailable, by generating its own replay examples?": "2024.acl-long.77",
    "What paper replaces the cosine objective when training text embeddings for semantic similarity, since "
    "cosine saturates and its gradients vanish?":
        "2024.acl-long.101",
    "I'm looking for a benchmark for instruction-following models that listen to sounds, speech and music.":
        "2024.acl-long.109",
}


@pytest.mark.parametrize("question,anthology_id", list(QUESTIONS.items()))
def test_paraphrased_questions_rank_first(index, question, anthology_id):
    hits = index.search(question, limit=5)
    assert hits, question
    assert hits[0].anthology_id == anthology_id, [h.title for h in hits]
    assert hits[0].snippet  # the best-matching abstract sentence


def test_snippet_is_a_sentence_of_the_abstract(index, papers):
    by_id = {p.anthology_id: p for p in papers}
    hit = index.search("benchmark for audio-language models that answer open-ended questions about audio", limit=1)[0]
    assert hit.snippet in by_id[hit.anthology_id].abstract


def test_venue_and_year_filters_are_honoured(index):
    hits = index.search("large language models", venue="EMNLP", limit=10)
    assert hits and all(h.venue == "emnlp" for h in hits)
    hits = index.search("large language models", year=2023, limit=10)
    assert hits and all(h.year == 2023 for h in hits)
    hits = index.search("few-shot entity extraction", venue="eacl", year="2024", limit=10)
    assert hits and all(h.venue == "eacl" and h.year == 2024 for h in hits)
    assert index.search("large language models", venue="acl", year=2023, limit=10) == []


def test_author_filter_full_name_and_last_name(index, papers):
    target = next(p for p in papers if p.anthology_id == "2024.acl-long.1")
    full = target.authors[0]                      # "Zhengxin Zhang"
    last = full.split()[-1]
    hits = index.search("tuning quantized language models", author=full, limit=10)
    assert hits and hits[0].anthology_id == "2024.acl-long.1"
    assert all(normalize_person(full) in [normalize_person(a) for a in h.authors] for h in hits)
    by_last = index.search("language models", author=last.upper(), limit=10)
    assert by_last and all(any(normalize_person(a).split()[-1] == last.lower() for a in h.authors) for h in by_last)
    assert len(by_last) >= len(hits)
    # "Last, First" form and accents are normalized
    assert normalize_person("Zhang, Zhengxin") == "zhengxin zhang"
    assert "muller" in author_keys(["Thomas Müller"])


def test_metadata_only_papers_and_missing_abstract(tmp_path):
    """A record with a title only (no abstract, no PDF) is indexed and findable; ids follow ids.py."""
    docs = [
        PaperDoc(paper_id=paper_id_for("Graph Neural Networks for Protein Folding", ""),
                 title="Graph Neural Networks for Protein Folding", venue="ACL", year=2024, authors=["Ada Lovelace"]),
        PaperDoc(paper_id=paper_id_for("Speech Recognition for Low-Resource Dialects", ""),
                 title="Speech Recognition for Low-Resource Dialects",
                 abstract="We build an ASR system for dialects with little data. It uses self-training.",
                 venue="EMNLP", year=2023, authors=["Alan Turing"]),
    ]
    with PaperIndex(EdgeBackend(tmp_path / "edge")) as idx:
        idx.build(docs)
        hits = idx.search("Which paper applies GNNs to predict how proteins fold?", limit=2)
        assert hits[0].paper_id == docs[0].paper_id
        assert hits[0].snippet == docs[0].title
        assert idx.search("speech", author="turing")[0].title == docs[1].title


def test_full_text_sections_are_used_when_present(tmp_path):
    body = ("We also evaluate on the Kalamang language. Our tokenizer merges rare morphemes. "
            "Results on Kalamang show a large gain from morpheme-aware merging.")
    docs = [
        PaperDoc(paper_id="p-a", title="A Study of Subword Tokenizers", abstract="We compare tokenizers.",
                 venue="acl", year=2024, sections=[body]),
        PaperDoc(paper_id="p-b", title="A Study of Subword Units", abstract="We compare subword units.",
                 venue="acl", year=2024),
    ]
    with PaperIndex(EdgeBackend(tmp_path / "edge")) as idx:
        stats = idx.build(docs)
        assert stats["with_body"] == 1
        hits = idx.search("tokenizer results on Kalamang", limit=2)
        assert hits[0].paper_id == "p-a"


def test_reindexing_is_idempotent(index, papers):
    before = index.count()
    assert before == len(papers)
    index.build(papers[:5], embed=memo_embed)
    assert index.count() == before
    assert point_id_for_paper(papers[0].paper_id) == point_id_for_paper(papers[0].paper_id)


def test_hit_json_shape(index):
    hits = index.search("Is there any paper on cognitive reframing with LLMs for psychotherapy?", limit=3)
    assert hits and all(isinstance(h, PaperHit) for h in hits)
    payload = json.loads(json.dumps([h.to_dict() for h in hits]))
    assert set(payload[0]) >= {"paper_id", "title", "venue", "year", "authors", "score", "snippet"}
    assert isinstance(payload[0]["authors"], list) and isinstance(payload[0]["score"], float)
    assert [p["score"] for p in payload] == sorted((p["score"] for p in payload), reverse=True)
    assert payload[0]["title"].startswith("HealMe")


def test_baseline_configs_run(index):
    rrf = SearchConfig(weights={"bm25_basic": 1.0, "minilm": 1.0}, fusion="rrf", strip_scaffold=False)
    assert index.search("quantized side tuning", limit=3, config=rrf)[0].anthology_id == "2024.acl-long.1"


def test_search_papers_module_api_reads_the_current_version(tmp_path, repo_root):
    from neusym.store.paper_index import close_paper_indexes
    from neusym.settings import Settings
    from neusym.store.versions import NoCorpusVersion

    settings = Settings(home=tmp_path / "home")
    with pytest.raises(NoCorpusVersion, match="no corpus version"):
        search_papers("anything", settings=settings)
    crawl_and_publish(settings, [repo_root / "tests" / "fixtures" / "acl" / "2024.acl.xml"], volumes=["tutorials"])
    titles = xml_titles(repo_root / "tests" / "fixtures" / "acl" / "2024.acl.xml", {"tutorials"})
    title = titles["2024.acl-tutorials.6"]
    try:
        hits = search_papers(title, settings=settings, limit=1)
        assert hits[0].title == title and hits[0].anthology_id == "2024.acl-tutorials.6"
        assert (tmp_path / "home" / "versions" / "v000001" / "papers").is_dir()
        # metadata only: the published index knows it has no full text and skips the two body scans,
        # which changes nothing in the ranking
        from neusym.store.paper_index import BODY_VIEWS, DEFAULT_WEIGHTS, current_paper_index

        idx = current_paper_index(settings)
        assert idx.backend.read_only and idx.has_body() is False
        no_body = SearchConfig(weights={k: w for k, w in DEFAULT_WEIGHTS.items() if k not in BODY_VIEWS})
        query = "a tutorial on evaluating language models"
        assert [h.to_dict() for h in search_papers(query, settings=settings, limit=5)] == \
            [h.to_dict() for h in idx.search(query, limit=5, config=no_body)]
    finally:
        close_paper_indexes()


def test_client_backend_local_mode(papers):
    """The qdrant-client code path (used with NEUSYM_QDRANT_URL; here against qdrant-client's local mode,
    no server being available) gives the same hits on a small set."""
    from qdrant_client import QdrantClient

    client = QdrantClient(location=":memory:")
    idx = PaperIndex(ClientBackend(client, "papers"))
    subset = papers[:15] + [p for p in papers if p.anthology_id == "2024.acl-long.65"]
    idx.build(subset, embed=memo_embed)
    assert idx.count() == 16
    q = "Which paper first surveys the literature on step-by-step reasoning prompts for LLMs?"
    hits = idx.search(q, limit=3, venue="ACL", author="Chu")
    assert hits and hits[0].anthology_id == "2024.acl-long.65"
    client.close()


def test_query_processing_and_analyzer():
    assert strip_question("Is there any paper that performs adversarial training on frame level?") == \
        "performs adversarial training on frame level"
    assert strip_question("Which paper first used LLMs to name affected packages?") == "used LLMs to name affected packages"
    assert strip_question("I'm looking for work on dialect translation") == "dialect translation"
    assert strip_question("Has anyone studied euphemisms?") == "studied euphemisms"
    assert strip_question("Is there?") == "Is there"
    toks = paper_tokens("Chain-of-thought prompting of LLMs")
    assert {"chain", "thought", "llm"} <= set(toks)
    assert set(paper_tokens("chain of thought")) <= set(toks)
    assert {"bloom", "vqa", "bloomvqa"} <= set(paper_tokens("BloomVQA: Assessing Hierarchical Comprehension"))
    assert set(paper_tokens("Bloom's taxonomy")) & set(paper_tokens("BloomVQA"))  # a query word meets the name
    assert paper_tokens("Resonance RoPE") == paper_tokens("resonance rope")  # no 2-letter pieces ("ro", "pe")
    assert strip_question("Is there an evaluation suite for Indic languages?") == "evaluation suite for Indic languages"
    assert strip_question("Is there work investigating bias?") == "investigating bias"
    assert split_sentences("First sentence here. Second one is also long enough.") == [
        "First sentence here.", "Second one is also long enough."]


def test_bad_arguments(index):
    with pytest.raises(ValueError):
        index.search("  ")
    with pytest.raises(ValueError):
        index.search("x", limit=0)
    with pytest.raises(ValueError):
        index.search("x", year="twenty")


# ------------------------------------------------------------------ sync from the published snapshot
class RecordingEmbed:
    """memo_embed that records every text the index asked to encode."""

    def __init__(self):
        self.texts: list[str] = []

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.texts += texts
        return memo_embed(texts)


def xml_titles(path, volumes=None) -> dict[str, str]:
    """Anthology id -> title of the real papers of an ACL collection XML, read with ElementTree (frontmatter excluded)."""
    root = ET.parse(path).getroot()
    out = {}
    for vol in root.iter("volume"):
        if volumes and vol.get("id") not in volumes:
            continue
        for paper in vol.iter("paper"):
            if paper.get("id") != "0":
                out[f"{root.get('id')}-{vol.get('id')}.{paper.get('id')}"] = " ".join(
                    "".join(paper.find("title").itertext()).split())
    return out


def crawl_and_publish(settings, paths, volumes=()):
    """Metadata-only crawl of ACL XML files through the real crawl stages, then publish a corpus version."""
    from neusym.ingest.crawl import crawl_stage, load_crawl_stage
    from neusym.ingest.publish import publish

    res = crawl_stage({"source": "acl", "paths": [str(p) for p in paths], "volumes": list(volumes)}, settings)
    assert res.status == "ok", res.error
    load_crawl_stage([res], settings, download=False)
    return publish(settings)


def paper_row(settings, anthology_id):
    """(paper_id, title, abstract) of a paper in the writer's database, looked up by its Anthology id."""
    con = duckdb.connect(str(settings.db_path), read_only=True)
    try:
        return con.execute("SELECT m.paper_id::VARCHAR, m.title, m.abstract FROM metadata m JOIN provenance p "
                           "ON p.ref_paper_id = m.paper_id WHERE p.anthology_id = ?", [anthology_id]).fetchone()
    finally:
        con.close()


@pytest.fixture()
def crawled(repo_root, tmp_path):
    """A NEUSYM_HOME whose current version holds ACL 2024 tutorials + the Findings/EMNLP subsets (metadata only)."""
    from neusym.settings import Settings

    acl = repo_root / "tests" / "fixtures" / "acl"
    settings = Settings(home=tmp_path / "home")
    crawl_and_publish(settings, [acl / "2024.acl.xml"], volumes=["tutorials"])
    crawl_and_publish(settings, [acl / "2024.findings.subset.xml", acl / "2023.emnlp.subset.xml"])
    expected = {**xml_titles(acl / "2024.acl.xml", {"tutorials"}), **xml_titles(acl / "2024.findings.subset.xml"),
                **xml_titles(acl / "2023.emnlp.subset.xml")}
    return settings, expected


def test_sync_is_incremental_idempotent_and_honours_deletes(crawled, tmp_path, repo_root):
    settings, expected = crawled

    def sync(embed):
        return sync_paper_index(settings, backend=idx.backend, db_path=current_db(settings), embed=embed)

    with PaperIndex(EdgeBackend(tmp_path / "edge")) as idx:
        rec = RecordingEmbed()
        first = sync(rec)
        assert (first.added, first.updated, first.unchanged, first.deleted) == (len(expected), 0, 0, 0)
        assert first.papers == idx.count() == len(expected) == 12
        assert first.texts_encoded == len(rec.texts) > 2 * len(expected)
        for aid, title in expected.items():  # every crawled paper is findable by its title, with its Anthology id
            hit = idx.search(title, limit=1)[0]
            assert (hit.anthology_id, hit.title) == (aid, title)

        rec = RecordingEmbed()
        again = sync(rec)
        assert (again.added, again.updated, again.unchanged, again.deleted, again.texts_encoded) == (0, 0, 12, 0, 0)
        assert rec.texts == []

        # a revised abstract arrives with the next crawl: exactly that paper is re-encoded
        src = (repo_root / "tests" / "fixtures" / "acl" / "2024.findings.subset.xml").read_text(encoding="utf-8")
        old = "We have opened our source code for further study and reproducibility."
        added = " A follow-up study applies the annotator to Korean speech transcripts of call-center dialogues."
        assert src.count(old) == 1
        revised = tmp_path / "revised" / "2024.findings.subset.xml"
        revised.parent.mkdir()
        revised.write_text(src.replace(old, old + added), encoding="utf-8")
        crawl_and_publish(settings, [revised])
        pid, title, abstract = paper_row(settings, "2024.findings-eacl.2")
        assert abstract.endswith(added.strip())
        rec = RecordingEmbed()
        changed = sync(rec)
        assert (changed.added, changed.updated, changed.unchanged, changed.deleted) == (0, 1, 11, 0)
        assert rec.texts and all(t in f"{title}. {abstract}" for t in rec.texts)
        assert changed.texts_encoded == len(rec.texts)
        hit = idx.search("Which paper annotates Korean call-center speech transcripts with GPT?", limit=1)[0]
        assert hit.paper_id == pid

        # a paper removed from the corpus disappears from the index and from results
        gone_id, gone_title, _ = paper_row(settings, "2024.acl-tutorials.6")
        from neusym.ingest.publish import publish
        from neusym.store.db import writer

        with writer(settings) as con:
            con.execute("DELETE FROM provenance WHERE ref_paper_id = ?", [gone_id])
            con.execute("DELETE FROM metadata WHERE paper_id = ?", [gone_id])
        published = publish(settings)
        assert published.papers_removed == 1 and published.paper_index["deleted"] == 1
        rec = RecordingEmbed()
        removed = sync(rec)
        assert (removed.added, removed.updated, removed.unchanged, removed.deleted) == (0, 0, 11, 1)
        assert rec.texts == [] and idx.count() == 11
        assert gone_id not in [h.paper_id for h in idx.search(gone_title, limit=20)]

        # filters still hold on the synced index
        emnlp = idx.search("large language models", venue="EMNLP", year=2023, limit=20)
        assert {h.anthology_id for h in emnlp} == {a for a in expected if a.startswith("2023.emnlp")}
        findings = idx.search("large language models", venue="findings", limit=20)
        assert {h.anthology_id for h in findings} == {a for a in expected if ".findings-" in a}
        assert all(h.year == 2024 for h in idx.search("language", year=2024, limit=20))
        by_author = idx.search("entity extraction", author="Qingyun Wang", limit=5)
        assert by_author and all("Qingyun Wang" in h.authors for h in by_author)


def test_sync_uses_full_text_of_parsed_papers(repo_root, tmp_path):
    """A parsed PDF (real parser, real materialize) gets the full-text views; body-only terms find it."""
    from neusym.ingest.pipeline import materialize_stage, parse_stage
    from neusym.ingest.publish import publish
    from neusym.settings import Settings

    settings = Settings(home=tmp_path / "home")
    crawl_and_publish(settings, [repo_root / "tests" / "fixtures" / "acl" / "2024.acl.xml"], volumes=["tutorials"])
    parsed = parse_stage(str(repo_root / "tests" / "fixtures" / "arxiv2005.11401_RAG_first3pages_NeuSymRAG-test_pdf.pdf"),
                         settings)
    assert parsed.status == "parsed"
    materialize_stage([parsed], settings)
    publish(settings)
    con = duckdb.connect(str(settings.db_path), read_only=True)
    abstract, = con.execute("SELECT abstract FROM metadata WHERE paper_id = ?", [parsed.paper_id]).fetchone()
    con.close()
    assert "triviaqa" not in abstract.lower() and "mips" not in abstract.lower()
    with PaperIndex(EdgeBackend(tmp_path / "edge")) as idx:
        report = sync_paper_index(settings, backend=idx.backend, db_path=current_db(settings), embed=memo_embed)
        assert (report.added, report.with_body, report.papers) == (7, 1, 7)
        query = "maximum inner product search over an index built by a retriever trained on TriviaQA"
        hits = idx.search(query, limit=3)
        assert hits[0].paper_id == parsed.paper_id and hits[0].title == parsed.title
        body_only = SearchConfig(weights={"bm25_body": 1.0})  # these two words occur in its body only
        assert [h.paper_id for h in idx.search("TriviaQA MIPS", limit=7, config=body_only)] == [parsed.paper_id]
        abstract_only = SearchConfig(weights={"bm25": 1.0})
        assert idx.search("TriviaQA MIPS", limit=7, config=abstract_only) == []
    from neusym.store.versions import open_version

    with open_version(settings) as version:  # the published (read-only) index keeps its body views
        published = PaperIndex(version.papers, settings)
        assert published.has_body() is True
        assert [h.paper_id for h in published.search("TriviaQA MIPS", limit=7, config=body_only)] == [parsed.paper_id]


def test_cli_search_reads_the_published_version(repo_root, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from neusym.interfaces.cli import app
    from neusym.settings import Settings

    monkeypatch.setenv("NEUSYM_HOME", str(tmp_path / "empty"))
    result = CliRunner().invoke(app, ["search", "watermarking", "--json"])
    assert result.exit_code == 1 and "no corpus version" in result.output and "Traceback" not in result.output

    home = tmp_path / "home"
    crawl_and_publish(Settings(home=home), [repo_root / "tests" / "fixtures" / "acl" / "2024.acl.xml"],
                      volumes=["tutorials"])
    monkeypatch.setenv("NEUSYM_HOME", str(home))
    result = CliRunner().invoke(app, ["search", "Is there a tutorial on watermarking the text that LLMs generate?",
                                      "--json", "--limit", "2"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert hits[0]["anthology_id"] == "2024.acl-tutorials.6" and len(hits) == 2
