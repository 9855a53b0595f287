"""The encoders (neusym.encode): ONNX int8 vs torch, one pass with span vectors, the paper-text pass, memo."""

from __future__ import annotations

import json

import numpy as np
import pymupdf
import pytest

from neusym.encode import (
    BACKEND_BATCH_SIZE,
    ONNX_EXPORT_SHA256,
    DenseEncoder,
    batch_size_for,
    encoder_version,
    get_encoder,
    mean_vector,
    paper_text_vectors,
    split_sentences,
)
from neusym.settings import Settings

from .conftest import SAMPLES

ABSTRACT = (
    "We propose SPECTER, a new method to generate document-level embedding of scientific documents based on "
    "pretraining a Transformer language model on a powerful signal of document-level relatedness: the citation "
    "graph. Unlike existing pretrained language models, SPECTER can be easily applied to downstream applications "
    "without task-specific fine-tuning. Additionally, to encourage further research on document-level models, we "
    "introduce SCIDOCS, a new evaluation benchmark consisting of seven document-level tasks ranging from citation "
    "prediction, to document classification and recommendation."
)
TITLE = "SPECTER: Document-level Representation Learning using Citation-informed Transformers"


@pytest.fixture(scope="module")
def page_texts() -> list[str]:
    doc = pymupdf.open(str(SAMPLES / "acl2020_2020.acl-main.207_SPECTER.pdf"))
    texts = [" ".join(p.get_text().split())[:1200] for p in doc]
    doc.close()
    return texts


def test_onnx_int8_is_close_to_torch_and_deterministic(page_texts):
    onnx = get_encoder(Settings(dense_backend="onnx-int8"))
    torch = get_encoder(Settings(dense_backend="torch"))
    a, b = onnx.encode(page_texts), torch.encode(page_texts)
    assert a.shape == b.shape == (len(page_texts), 384)
    assert np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-5)
    cos = (a * b).sum(axis=1)
    assert cos.min() > 0.97 and cos.mean() > 0.985, cos
    info = json.loads(onnx.onnx_path.with_suffix(".json").read_text())
    assert info["sha256"] == ONNX_EXPORT_SHA256  # the export is reproducible with the pinned libraries
    assert encoder_version("onnx-int8") != encoder_version("torch")
    with pytest.raises(ValueError, match="unknown dense backend"):
        encoder_version("tf-idf")


def test_query_encoding_matches_batch_encoding():
    enc = get_encoder(Settings())
    q = "citation-informed transformers for document embeddings"
    assert np.allclose(enc.encode_query(q), enc.encode([q])[0], atol=1e-5)


def test_default_batch_gives_each_text_its_own_vector(page_texts):
    """With the default batch size (one text per call for onnx-int8) a text's vector does not depend
    on what else is encoded with it; in batches the int8 graph quantizes a batch's activations
    together, so the same page text moves slightly with its batchmates."""
    assert batch_size_for(Settings()) == BACKEND_BATCH_SIZE["onnx-int8"] == 1
    assert batch_size_for(Settings(dense_backend="torch")) == 32
    assert batch_size_for(Settings(dense_batch_size=8)) == 8
    enc = get_encoder(Settings())
    mixed = page_texts + [TITLE, "BM25", ABSTRACT]
    together = enc._encode_uncached(mixed, batch_size_for(Settings()))
    alone = np.stack([enc._encode_uncached([t], 1)[0] for t in mixed])
    assert np.array_equal(together, alone)
    batched = enc._encode_uncached(mixed, 16)
    cos = (batched * alone).sum(axis=1)
    assert cos.min() > 0.97 and not np.allclose(batched, alone, atol=1e-6), cos


@pytest.mark.parametrize("backend", ["onnx-int8", "torch"])
def test_one_pass_gives_the_plain_vectors_and_span_vectors(backend, page_texts):
    enc = get_encoder(Settings(dense_backend=backend))
    text = f"{TITLE}. {ABSTRACT}"
    start = len(TITLE) + 2
    spans = [(0, len(TITLE)), (start, len(text)), (start, start + 40)]
    full, span_vecs = enc.encode_spans([text, page_texts[3]], [spans, [(0, 50)]])
    plain = enc.encode([text, page_texts[3]])
    assert np.allclose(full, plain, atol=1e-5)  # identical to encoding the text on its own
    for v in span_vecs[0] + span_vecs[1]:
        assert v is not None and abs(np.linalg.norm(v) - 1) < 1e-5
    # a span past the model's 256-piece window has no vector
    long_text = " ".join(["word"] * 400) + " tail sentence here"
    _, far = enc.encode_spans([long_text], [[(len(long_text) - 18, len(long_text))]])
    assert far == [[None]]


def test_paper_text_pass_covers_the_views():
    settings = Settings()
    enc = get_encoder(settings)
    (ptv,) = paper_text_vectors([(TITLE, ABSTRACT, None)], settings=settings)
    assert ptv.text == f"{TITLE}. {' '.join(ABSTRACT.split())}"
    assert np.allclose(ptv.full, enc.encode([ptv.text])[0], atol=1e-5)
    assert np.allclose(ptv.title, enc.encode([TITLE])[0], atol=1e-5)
    assert ptv.sentences == split_sentences(ABSTRACT) and len(ptv.sentence_vectors) == len(ptv.sentences) == 3
    assert ptv.abstract is not None
    # the abstract's span vector is about the abstract: closer to its own text than to an unrelated one
    own = enc.encode([ABSTRACT])[0]
    other = enc.encode(["A recipe for baking sourdough bread at home with a cast-iron pot."])[0]
    assert float(np.dot(ptv.abstract, own)) > float(np.dot(ptv.abstract, other)) + 0.3
    # cached: asking again encodes nothing
    before = enc.texts_encoded
    (again,) = paper_text_vectors([(TITLE, ABSTRACT, None)], settings=settings)
    assert enc.texts_encoded == before and again.full == ptv.full
    # a long abstract: sentences past the window are left out of the sentence view
    long_abstract = " ".join(f"Sentence number {i} talks about a different experimental detail of the method."
                             for i in range(40))
    (lp,) = paper_text_vectors([("A long one", long_abstract, None)], settings=settings)
    assert 5 < len(lp.sentences) < 40 and lp.sentences == split_sentences(long_abstract)[:len(lp.sentences)]


def test_short_texts_are_memoised():
    enc = DenseEncoder("onnx-int8", get_encoder(Settings()).models_dir)
    first = enc.encode(["Ring Attention with Blockwise Transformers", "a title"])
    n = enc.texts_encoded
    again = enc.encode(["a title", "Ring Attention with Blockwise Transformers", "a new title"])
    assert enc.texts_encoded == n + 1  # only the new text went through the model
    assert np.allclose(again[0], first[1]) and np.allclose(again[1], first[0])


def test_mean_vector():
    assert mean_vector([]) is None
    v = mean_vector([[1.0] + [0.0] * 383, [0.0, 1.0] + [0.0] * 382])
    assert np.isclose(v[0], v[1]) and np.isclose(np.linalg.norm(v), 1.0)


def test_batches_on_side_by_side_sessions_give_the_same_vectors():
    """A large batch with the runtime's default threads runs on one single-threaded session per core
    side by side (PARALLEL_MIN_TEXTS); its vectors and span vectors equal one session's, text by text.
    In a process that asked for one-thread models (a parse worker) it stays on one session."""
    import os
    import subprocess
    import sys

    from neusym.encode import PARALLEL_MIN_TEXTS

    texts = []
    for pdf in sorted(SAMPLES.glob("*.pdf"))[:3]:
        doc = pymupdf.open(str(pdf))
        for page in doc:
            words = page.get_text().split()
            texts += [" ".join(words[k:k + 60]) for k in range(0, min(len(words), 600), 60)]
        doc.close()
    assert len(texts) >= PARALLEL_MIN_TEXTS
    spans = [[(0, 30), (10, len(t))] for t in texts]
    side = DenseEncoder("onnx-int8", get_encoder(Settings()).models_dir)  # threads 0: the runtime default
    one = DenseEncoder("onnx-int8", get_encoder(Settings()).models_dir, threads=1)
    cores = len(os.sched_getaffinity(0))
    assert side._workers(len(texts)) == min(cores, 4) and one._workers(len(texts)) == 1
    assert side._workers(PARALLEL_MIN_TEXTS - 1) == 1
    a, sa = side.encode_spans(texts, spans)
    b, sb = one.encode_spans(texts, spans)
    assert len(side._sessions) == (min(cores, 4) if cores > 1 else 0) and one._sessions == []
    assert np.array_equal(a, b) and sa == sb
    assert np.array_equal(side._encode_uncached(texts, 1), one._encode_uncached(texts, 1))
    code = ("from neusym.ingest.parse.layout import single_threaded_models; single_threaded_models(); "
            "from neusym.encode import DenseEncoder; import sys; "
            "print(DenseEncoder('onnx-int8', sys.argv[1])._workers(1000))")
    out = subprocess.run([sys.executable, "-c", code, str(one.models_dir)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_a_negative_thread_count_is_refused():
    """NEUSYM_DENSE_THREADS=-1 used to pass through to the runtime unnoticed; settings fail closed."""
    import pydantic

    with pytest.raises(pydantic.ValidationError, match="dense_threads"):
        Settings(dense_threads=-1)
