"""The corpus-adapted paper encoder (neusym.ingest.retriever, ``neusym train-retriever``) on real ACL
Anthology records (the fixture's 2024.acl.xml, metadata only).

The training pairs and batches are checked against the XML's own abstracts; one short real training
run (a few steps on the SRW + demo volumes, 84 papers) gives an encoder whose publish, carry-forward,
reset and query encoding are checked against vectors computed independently with that encoder and
the packaged one. A second run with a learning rate that wrecks the model shows the held-out gate
refusing to publish.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from neusym.encode import RETRIEVER_INFO, DenseEncoder, get_encoder, split_sentences
from neusym.ingest.retriever import (
    MIN_ABSTRACT_CHARS,
    batches_without_duplicates,
    refresh_retriever,
    train_encoder,
    training_pairs,
)
from neusym.ingest.sources.acl_source import parse_acl_collection
from neusym.settings import Settings
from neusym.store.paper_index import (
    PaperDoc,
    PaperIndex,
    close_paper_indexes,
    current_paper_index,
    point_id_for_paper,
)
from neusym.store.versions import open_version

from .test_search import crawl_and_publish


@pytest.fixture(scope="module")
def srw_docs(repo_root):
    return [PaperDoc.from_source(p) for p in parse_acl_collection(repo_root / "tests/fixtures/acl/2024.acl.xml")
            if p.anthology_id.startswith("2024.acl-srw")]


def _ws(text):
    return " ".join((text or "").split())


def test_training_pairs_come_from_each_papers_own_text(srw_docs):
    docs = list(srw_docs)
    short = dataclasses.replace(docs[0], paper_id="short", abstract=docs[0].abstract[:MIN_ABSTRACT_CHARS - 1])
    with_tldr = dataclasses.replace(docs[1], tldr="A one-line summary written by the enrichment stage.")
    pairs = training_pairs(docs[2:] + [short, with_tldr], seed=3)
    by_paper: dict[str, list] = {}
    for p in pairs:
        by_paper.setdefault(p.paper_id, []).append(p)
    assert "short" not in by_paper  # too short an abstract: no pair
    assert len(by_paper) == len(docs) - 1
    for d in docs[2:] + [with_tldr]:
        mine = by_paper[d.paper_id]
        kinds = [p.kind for p in mine]
        assert kinds.count("title") == 1
        (title,) = [p for p in mine if p.kind == "title"]
        assert title.query == _ws(d.title) and title.passage == _ws(d.abstract)
        sentences = split_sentences(_ws(d.abstract))
        ict = [p for p in mine if p.kind == "ict"]
        assert len(ict) == (min(2, len(sentences)) if len(sentences) >= 3 else 0)
        for p in ict:  # the inverse cloze task: the sentence is taken out of its passage
            assert p.query in sentences
            assert p.passage.startswith(_ws(d.title) + ". ") and p.query not in p.passage
    assert [p.kind for p in by_paper[with_tldr.paper_id]].count("tldr") == 1
    # seeded: the same pairs in the same order again, another order with another seed
    assert training_pairs(docs, seed=3) == training_pairs(docs, seed=3)
    assert training_pairs(docs, seed=3) != training_pairs(docs, seed=4)


def test_batches_never_hold_two_pairs_of_one_paper(srw_docs):
    pairs = training_pairs(srw_docs, seed=0)
    batches = batches_without_duplicates(pairs, 16)
    assert batches and all(len(b) == 16 for b in batches)
    for b in batches:
        assert len({p.paper_id for p in b}) == 16
    used = [p for b in batches for p in b]
    assert len(used) == len(set(map(id, used))) and len(pairs) - len(used) < 16 * 3
    # fewer papers than a batch: no batch can be filled
    assert batches_without_duplicates([p for p in pairs if p.paper_id in {pairs[0].paper_id}], 2) == []


@pytest.fixture(scope="module")
def adapted_dir(srw_docs, tmp_path_factory):
    """A real (short) training run on the SRW volume: a few steps, exported to int8 ONNX."""
    out = tmp_path_factory.mktemp("retriever") / "r"
    record = train_encoder(training_pairs(srw_docs), out, budget_s=25, batch_size=16, learning_rate=1e-4)
    return out, record


@pytest.mark.slow
def test_train_encoder_writes_a_complete_encoder_directory(adapted_dir, srw_docs):
    out, record = adapted_dir
    info = json.loads((out / RETRIEVER_INFO).read_text())
    assert info["id"] == record.id and len(record.id) == 12
    assert record.steps >= 1 and record.pairs_used == record.steps * 16
    assert record.papers == len(srw_docs) and record.pairs["title"] == len(srw_docs)
    with pytest.raises(FileExistsError):
        train_encoder(training_pairs(srw_docs), out, budget_s=5)
    adapted = DenseEncoder("onnx-int8", get_encoder(Settings()).models_dir, retriever_dir=out)
    base = get_encoder(Settings())
    assert adapted.version == f"4/retriever-{record.id}"
    text = f"{srw_docs[0].title}. {srw_docs[0].abstract}"
    a, b = adapted.encode([text])[0], base.encode([text])[0]
    assert abs(np.linalg.norm(a) - 1) < 1e-4
    assert 0.5 < float(a @ b) < 0.99999  # trained: close to the packaged model, not equal to it


@pytest.mark.slow
def test_publish_with_an_adapted_encoder_keep_it_and_reset(adapted_dir, repo_root, tmp_path, srw_docs):
    from neusym.ingest.publish import publish

    out, record = adapted_dir
    acl = repo_root / "tests/fixtures/acl/2024.acl.xml"
    settings = Settings(home=tmp_path / "home")
    crawl_and_publish(settings, [acl], volumes=["srw", "demos"])
    base = get_encoder(settings)
    adapted = DenseEncoder("onnx-int8", base.models_dir, retriever_dir=out)

    report = publish(settings, retriever=out)
    assert report.paper_encoder == adapted.version
    assert report.paper_index["updated"] == 84 and report.paper_index["unchanged"] == 0  # every paper re-encoded
    assert report.upserted == 0  # the cell collection keeps its encoder
    probe = srw_docs[5]
    with open_version(settings) as v:
        assert v.info.manifest["paper_encoder"] == adapted.version
        assert json.loads((v.retriever_dir / RETRIEVER_INFO).read_text())["id"] == record.id
        (rec,) = v.papers.retrieve([point_id_for_paper(probe.paper_id)], vectors=["minilm"])
        assert PaperIndex.of_version(v, settings).encoder.version == adapted.version  # service, agent, CLI
    stored = np.asarray(rec.vectors["minilm"], dtype=np.float32)
    text = f"{_ws(probe.title)}. {_ws(probe.abstract)}"
    assert float(stored @ adapted.encode([text])[0]) > 0.999
    assert float(stored @ base.encode([text])[0]) < 0.9999
    # readers encode queries with the version's encoder
    close_paper_indexes()
    try:
        index = current_paper_index(settings)
        ranking = index.rank(probe.title, depth=3)
        assert np.allclose(ranking.query_vector, adapted.encode_query(probe.title), atol=1e-5)
        assert index.hits(ranking, 1)[0].paper_id == probe.paper_id
    finally:
        close_paper_indexes()

    # the next refresh keeps the encoder and encodes only its new papers
    again = crawl_and_publish(settings, [acl], volumes=["tutorials"])
    assert again.paper_encoder == adapted.version
    assert again.paper_index["added"] == 6 and again.paper_index["unchanged"] == 84
    with open_version(settings) as v:
        assert json.loads((v.retriever_dir / RETRIEVER_INFO).read_text())["id"] == record.id

    # back to the packaged encoder: every paper re-encoded with it
    result = CliRunner().invoke(_cli(), ["train-retriever", "--reset", "--json"], env={"NEUSYM_HOME": str(settings.home)})
    assert result.exit_code == 0, result.output
    with open_version(settings) as v:
        assert v.retriever_dir is None and v.info.manifest["paper_encoder"] == v.info.manifest["encoder_version"]
        (rec,) = v.papers.retrieve([point_id_for_paper(probe.paper_id)], vectors=["minilm"])
        assert json.loads(result.output)["version"] == v.number
    assert float(np.asarray(rec.vectors["minilm"], dtype=np.float32) @ base.encode([text])[0]) > 0.999


def _cli():
    from neusym.interfaces.cli import app

    return app


@pytest.mark.slow
def test_an_encoder_worse_on_held_out_papers_is_not_published(repo_root, tmp_path):
    acl = repo_root / "tests/fixtures/acl/2024.acl.xml"
    settings = Settings(home=tmp_path / "home")
    crawl_and_publish(settings, [acl], volumes=["srw", "demos"])
    with open_version(settings) as v:
        before = v.number
    # a learning rate far too high for fine-tuning wrecks the encoder within a few steps
    report = refresh_retriever(settings, budget_minutes=0.4, learning_rate=0.02)
    assert not report.published and report.version is None
    assert report.validation["adapted"]["MRR@10"] < report.validation["serving"]["MRR@10"]
    assert "not published" in report.reason
    with open_version(settings) as v:
        assert v.number == before and v.retriever_dir is None
    assert not list((settings.home / "tmp").glob("retriever-*"))  # nothing left behind


def test_cli_errors_without_a_corpus(tmp_path):
    result = CliRunner().invoke(_cli(), ["train-retriever", "--minutes", "1"], env={"NEUSYM_HOME": str(tmp_path / "empty")})
    assert result.exit_code == 1
    assert "no corpus version" in result.output.lower()
