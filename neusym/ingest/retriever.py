"""The retriever refresh stage: adapt the paper-search encoder to the corpus it serves.

No stronger embedding model installs with its weights, so the packaged all-MiniLM-L6-v2 is
fine-tuned on pairs the corpus itself provides, without any labelled question:

- ``title``: a paper's title -> its abstract;
- ``ict`` (the inverse cloze task): one abstract sentence -> the paper's title and the rest of its
  abstract, the sentence removed (what a researcher's description of a contribution looks like);
- ``tldr``: the enrichment's tldr (when the corpus has one) -> title and abstract.

Training (:func:`train_encoder`) uses sentence-transformers' ``MultipleNegativesRankingLoss`` (the
other passages of a batch are the negatives; a batch never holds two pairs of the same paper, so no
paper is its own negative), AdamW with a linear warm-up/decay, CPU only, within a time budget
(``NEUSYM_RETRIEVER_TRAIN_MINUTES``): a few calibration steps measure the step time and fix how
many pairs fit, drawn at random. The result is exported to the same int8 ONNX graph the packaged
model runs as (:func:`neusym.encode.export_onnx_int8`) into a directory with the tokenizer and a
training record (:data:`neusym.encode.RETRIEVER_INFO`); its id is the first 12 hex digits of the
graph's sha256.

:func:`refresh_retriever` (``neusym train-retriever``, the ``retriever_refresh`` DAG) trains on the
current corpus version, holds a random 5% of its papers (at most :data:`VALIDATION_MAX`) out of
training (at least a fifth of a small corpus, up to 50) and checks on them that the new encoder
retrieves at least as well as the one serving (ICT queries
of the held-out papers among them and :data:`VALIDATION_DISTRACTORS` other papers, MRR@10); only
then it publishes a new corpus version whose paper index is re-encoded with it (readers switch
atomically, as for any publish; later publishes keep it). An encoder that is not better is not
published. :func:`reset_retriever` publishes a version with the packaged encoder again.

What it gains on questions nobody trained on: ``benchmarks/paper_search/adapt.py`` and its results.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import resource
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

from pydantic import BaseModel, Field

from neusym.encode import (
    RETRIEVER_INFO,
    RETRIEVER_ONNX,
    RETRIEVER_TOKENIZER,
    DenseEncoder,
    export_onnx_int8,
    get_encoder,
    split_sentences,
)
from neusym.errors import NeusymError
from neusym.settings import Settings
from neusym.store.paper_index import PaperDoc, read_paper_docs

logger = logging.getLogger(__name__)

MIN_ABSTRACT_CHARS = 200
"""Papers with a shorter abstract give no training pair (a title alone says too little)."""
ICT_PER_PAPER = 2
VALIDATION_SHARE = 0.05
VALIDATION_MAX = 200
VALIDATION_MIN_PAPERS = 20
"""Below this many usable papers there is nothing to learn from or check against: training refuses."""
VALIDATION_DISTRACTORS = 1000
CALIBRATION_STEPS = 3


class RetrieverError(NeusymError):
    """The corpus cannot train a retriever (too few papers with abstracts), or the home has no corpus."""


@dataclass(frozen=True)
class TrainingPair:
    """One (query, passage) pair of ``paper_id``; ``kind``: ``title``, ``ict`` or ``tldr``."""

    paper_id: str
    kind: str
    query: str
    passage: str


def _ws(text: str | None) -> str:
    return " ".join((text or "").split())


def usable(doc: PaperDoc) -> bool:
    """Whether a paper gives training pairs: a title and an abstract of :data:`MIN_ABSTRACT_CHARS`+."""
    return bool(_ws(doc.title)) and len(_ws(doc.abstract)) >= MIN_ABSTRACT_CHARS


def training_pairs(docs: Sequence[PaperDoc], *, seed: int = 0, ict_per_paper: int = ICT_PER_PAPER) -> list[TrainingPair]:
    """The self-supervised pairs of ``docs`` (see the module docstring), shuffled with ``seed``.

    Per usable paper: one ``title`` pair, up to ``ict_per_paper`` ``ict`` pairs (abstracts of 3+
    sentences; sentences drawn at random) and one ``tldr`` pair when it has a tldr.
    """
    rng = random.Random(seed)
    pairs: list[TrainingPair] = []
    for d in docs:
        if not usable(d):
            continue
        title, abstract = _ws(d.title), _ws(d.abstract)
        pairs.append(TrainingPair(d.paper_id, "title", title, abstract))
        sentences = split_sentences(abstract)
        if len(sentences) >= 3:
            for i in sorted(rng.sample(range(len(sentences)), min(ict_per_paper, len(sentences)))):
                rest = " ".join(s for j, s in enumerate(sentences) if j != i)
                pairs.append(TrainingPair(d.paper_id, "ict", sentences[i], f"{title}. {rest}"))
        tldr = _ws(d.tldr)
        if tldr:
            pairs.append(TrainingPair(d.paper_id, "tldr", tldr, f"{title}. {abstract}"))
    rng.shuffle(pairs)
    return pairs


def batches_without_duplicates(pairs: Sequence[TrainingPair], batch_size: int) -> list[list[TrainingPair]]:
    """``pairs`` cut into full batches in order, a pair moved to a later batch when its paper is
    already in the current one (in-batch negatives must not be the positive's own paper).
    Pairs that fill no complete batch at the end are dropped."""
    batches: list[list[TrainingPair]] = []
    waiting: list[TrainingPair] = list(pairs)
    while len(waiting) >= batch_size:
        batch: list[TrainingPair] = []
        seen: set[str] = set()
        rest: list[TrainingPair] = []
        for p in waiting:
            if len(batch) < batch_size and p.paper_id not in seen:
                batch.append(p)
                seen.add(p.paper_id)
            else:
                rest.append(p)
        if len(batch) < batch_size:
            break
        batches.append(batch)
        waiting = rest
    return batches


class TrainingRecord(BaseModel):
    """What :func:`train_encoder` did (also written as :data:`neusym.encode.RETRIEVER_INFO`).

    ``id``: 12 hex digits of the int8 graph's sha256; ``pairs``: pairs available per kind;
    ``pairs_used``: pairs trained on (``steps`` × ``batch_size``); ``train_seconds`` /
    ``export_seconds``: wall time; ``peak_rss_mb``: the process's peak resident memory after
    training (MiB); ``papers``: papers the pairs came from.
    """

    id: str = ""
    base_model: str = "sentence-transformers/all-MiniLM-L6-v2"
    created_at: str = ""
    corpus_version: int | None = None
    papers: int = 0
    pairs: dict[str, int] = Field(default_factory=dict)
    pairs_used: int = 0
    steps: int = 0
    batch_size: int = 0
    max_seq_length: int = 0
    learning_rate: float = 0.0
    budget_seconds: float = 0.0
    train_seconds: float = 0.0
    export_seconds: float = 0.0
    peak_rss_mb: float = 0.0
    last_loss: float | None = None
    seed: int = 0


def train_encoder(pairs: Sequence[TrainingPair], out_dir: Path, *, budget_s: float, batch_size: int = 32,
                  learning_rate: float = 3e-5, max_seq_length: int = 160, seed: int = 0,
                  corpus_version: int | None = None,
                  on_step: Callable[[int, int, float], None] | None = None) -> TrainingRecord:
    """Fine-tune the packaged all-MiniLM-L6-v2 on ``pairs`` and write the corpus-adapted encoder.

    ``budget_s``: wall-time budget of training in seconds (export not counted, ~15 s): the pace of
    :data:`CALIBRATION_STEPS` forward/backward passes (weights not updated) fixes how many steps
    fit, at most one pass over the pairs. ``max_seq_length``: word pieces per text while training
    (the encoder still reads 256 when it serves). ``out_dir`` must not exist; it is written in a
    temporary sibling and renamed, holding :data:`neusym.encode.RETRIEVER_ONNX`,
    :data:`neusym.encode.RETRIEVER_TOKENIZER` and :data:`neusym.encode.RETRIEVER_INFO`.
    ``on_step(step, steps, loss)`` is called after each step. Raises ``ValueError`` when the pairs
    fill no batch or the budget is not positive, ``FileExistsError`` when ``out_dir`` exists.
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from neusym.encode import _model_dir

    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists; a retriever directory is written once")
    if budget_s <= 0:
        raise ValueError(f"the training budget must be positive, got {budget_s} s")
    batches = batches_without_duplicates(pairs, batch_size)
    if not batches:
        raise ValueError(f"{len(pairs)} training pairs fill no batch of {batch_size} distinct papers")
    torch.manual_seed(seed)
    model = SentenceTransformer(str(_model_dir()), device="cpu")
    model.max_seq_length = max_seq_length
    loss_fn = MultipleNegativesRankingLoss(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    record = TrainingRecord(created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                            corpus_version=corpus_version, papers=len({p.paper_id for p in pairs}),
                            batch_size=batch_size, max_seq_length=max_seq_length, learning_rate=learning_rate,
                            budget_seconds=budget_s, seed=seed)
    for p in pairs:
        record.pairs[p.kind] = record.pairs.get(p.kind, 0) + 1

    def batch_loss(batch: list[TrainingPair]):
        return loss_fn([model.preprocess([p.query for p in batch]), model.preprocess([p.passage for p in batch])],
                       None)

    t0 = time.perf_counter()
    model.train()
    # the pace: forward + backward of the first batches, without updating the weights
    for batch in batches[:CALIBRATION_STEPS]:
        batch_loss(batch).backward()
        optimizer.zero_grad()
    pace = (time.perf_counter() - t0) / min(CALIBRATION_STEPS, len(batches))
    steps = max(1, min(len(batches), int((budget_s - (time.perf_counter() - t0)) / (pace * 1.05))))
    warmup = int(0.1 * steps)  # linear warm-up over the first 10% of the steps, then linear decay to 0
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: i / max(1, warmup) if i < warmup else max(0.0, (steps - i) / max(1, steps - warmup)))
    last = None
    for step in range(1, steps + 1):
        loss = batch_loss(batches[step - 1])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        last = float(loss.item())
        if on_step is not None:
            on_step(step, steps, last)
    model.eval()
    record.train_seconds = round(time.perf_counter() - t0, 1)
    record.steps, record.pairs_used, record.last_loss = steps, steps * batch_size, last
    record.peak_rss_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    t1 = time.perf_counter()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=".retriever-") as tmp:
        work = Path(tmp) / "r"
        work.mkdir()
        model.max_seq_length = 256
        export_onnx_int8(work / RETRIEVER_ONNX, model)
        shutil.copyfile(_model_dir() / "tokenizer.json", work / RETRIEVER_TOKENIZER)
        digest = hashlib.sha256((work / RETRIEVER_ONNX).read_bytes()).hexdigest()
        record.id = digest[:12]
        record.export_seconds = round(time.perf_counter() - t1, 1)
        (work / RETRIEVER_INFO).write_text(record.model_dump_json(indent=1), encoding="utf-8")
        work.rename(out_dir)
    return record


# ----------------------------------------------------------------------------------- validation
class Validation(BaseModel):
    """Held-out check of a new encoder against the serving one (see the module docstring).

    ``queries``: ICT queries of held-out papers; ``candidates``: papers ranked per query (held-out
    + distractors); ``serving`` / ``adapted``: R@1, R@5 and MRR@10 of each encoder.
    """

    queries: int = 0
    candidates: int = 0
    serving: dict[str, float] = Field(default_factory=dict)
    adapted: dict[str, float] = Field(default_factory=dict)
    serving_encoder: str = ""

    @property
    def better(self) -> bool:
        """The adapted encoder's MRR@10 is at least the serving one's."""
        return self.adapted.get("MRR@10", 0.0) >= self.serving.get("MRR@10", 0.0)


def _scores(encoder: DenseEncoder, queries: list[str], gold: list[int], passages: list[str]) -> dict[str, float]:
    import numpy as np

    q = encoder.encode(queries)
    p = encoder.encode(passages)
    sims = q @ p.T
    r1 = r5 = mrr = 0.0
    for i, g in enumerate(gold):
        rank = int((sims[i] > sims[i, g]).sum())
        r1 += rank < 1
        r5 += rank < 5
        mrr += 1.0 / (rank + 1) if rank < 10 else 0.0
    n = max(1, len(gold))
    return {"R@1": round(r1 / n, 4), "R@5": round(r5 / n, 4), "MRR@10": round(mrr / n, 4)}


def validate(held_out: Sequence[PaperDoc], distractors: Sequence[PaperDoc], serving: DenseEncoder,
             adapted: DenseEncoder, *, seed: int = 0) -> Validation:
    """Rank, for one ICT query per held-out paper (a random abstract sentence), every held-out
    paper (title + abstract without that sentence) and every distractor (title + abstract) with
    each encoder. Returns :class:`Validation` (R@1, R@5, MRR@10)."""
    rng = random.Random(seed)
    queries, gold, passages = [], [], []
    for d in held_out:
        sentences = split_sentences(_ws(d.abstract))
        if len(sentences) < 3:
            continue
        i = rng.randrange(len(sentences))
        queries.append(sentences[i])
        gold.append(len(passages))
        passages.append(f"{_ws(d.title)}. " + " ".join(s for j, s in enumerate(sentences) if j != i))
    passages += [f"{_ws(d.title)}. {_ws(d.abstract)}" for d in distractors]
    return Validation(queries=len(queries), candidates=len(passages), serving_encoder=serving.version,
                      serving=_scores(serving, queries, gold, passages),
                      adapted=_scores(adapted, queries, gold, passages))


# -------------------------------------------------------------------------------------- refresh
class RetrieverReport(BaseModel):
    """What :func:`refresh_retriever` did (JSON-ready: travels through Airflow XCom).

    ``published``: whether a new corpus version now serves the new encoder (``version``);
    ``reason``: why not, when not; ``training``: the :class:`TrainingRecord`; ``validation``: the
    held-out check; ``paper_index_seconds``: the publish's re-encoding of the paper index.
    """

    published: bool = False
    version: int | None = None
    reason: str = ""
    retriever_id: str = ""
    training: dict = Field(default_factory=dict)
    validation: dict = Field(default_factory=dict)
    paper_index_seconds: float | None = None
    seconds: float = 0.0


def refresh_retriever(settings: Settings, *, budget_minutes: float | None = None, publish: bool = True,
                      seed: int = 0, learning_rate: float = 3e-5,
                      on_progress: Callable[[str], None] | None = None) -> RetrieverReport:
    """Train a corpus-adapted paper encoder on the current corpus version, check it on held-out
    papers and publish it when it is at least as good as the serving encoder (module docstring).

    ``budget_minutes``: training budget (default ``settings.retriever_train_minutes``);
    ``publish``: False trains and validates only (the encoder is discarded); ``seed``: the draw of
    held-out papers, pairs and initial batches; ``learning_rate``: AdamW's peak rate. Raises
    :class:`RetrieverError` when there is no corpus or fewer than :data:`VALIDATION_MIN_PAPERS`
    usable papers, :class:`neusym.store.db.WriterBusyError` when another writer holds the home at
    publish time. Nothing changes unless the new version is published in full.
    """
    from neusym.ingest.publish import publish as run_publish
    from neusym.store.versions import NoCorpusVersion, open_version

    t0 = time.perf_counter()
    say = on_progress or (lambda _m: None)
    budget = float(budget_minutes if budget_minutes is not None else settings.retriever_train_minutes) * 60
    try:
        version = open_version(settings)
    except NoCorpusVersion as exc:
        raise RetrieverError(str(exc)) from exc
    with version:
        docs = read_paper_docs(version.db_path)
        serving_dir = version.retriever_dir
        number = version.number
        serving = version.paper_encoder() or get_encoder(settings)
        good = [d for d in docs if usable(d)]
        if len(good) < VALIDATION_MIN_PAPERS:
            raise RetrieverError(f"corpus version {number} has {len(good)} papers with a title and an abstract of "
                                 f"{MIN_ABSTRACT_CHARS}+ characters; at least {VALIDATION_MIN_PAPERS} are needed")
        rng = random.Random(seed)
        n_val = min(VALIDATION_MAX, max(int(len(good) * VALIDATION_SHARE), min(50, len(good) // 5)))
        held = rng.sample(good, n_val)
        held_ids = {d.paper_id for d in held}
        train_docs = [d for d in good if d.paper_id not in held_ids]
        pairs = training_pairs(train_docs, seed=seed)
        say(f"training on {len(pairs)} pairs of {len(train_docs)} papers of version {number} "
            f"(budget {budget / 60:.1f} min); {len(held)} papers held out")
        home_tmp = Path(settings.home) / "tmp"
        home_tmp.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=home_tmp, prefix="retriever-") as tmp:
            out = Path(tmp) / "retriever"
            last_said = [0.0]

            def step(i: int, n: int, loss: float) -> None:
                if time.perf_counter() - last_said[0] > 30 or i == n:
                    last_said[0] = time.perf_counter()
                    say(f"step {i}/{n} loss {loss:.3f}")

            record = train_encoder(pairs, out, budget_s=budget, seed=seed, corpus_version=number,
                                   learning_rate=learning_rate, on_step=step)
            report = RetrieverReport(retriever_id=record.id, training=record.model_dump(mode="json"))
            adapted = DenseEncoder("onnx-int8", Path(settings.cache_dir) / "models", retriever_dir=out)
            distractors = random.Random(seed + 1).sample(train_docs, min(VALIDATION_DISTRACTORS, len(train_docs)))
            check = validate(held, distractors, serving, adapted, seed=seed)
            report.validation = check.model_dump(mode="json")
            say(f"held-out check: serving {check.serving}, adapted {check.adapted}")
            if serving_dir is not None and (serving_dir / RETRIEVER_INFO).is_file():
                old = json.loads((serving_dir / RETRIEVER_INFO).read_text(encoding="utf-8")).get("id")
                if old == record.id:
                    report.reason = f"the serving encoder is already {record.id}"
            if not report.reason and not check.better:
                report.reason = (f"not published: held-out MRR@10 {check.adapted.get('MRR@10')} is below the serving "
                                 f"encoder's {check.serving.get('MRR@10')}")
            if not report.reason and not publish:
                report.reason = "not published (publish=False)"
            if not report.reason:
                say("publishing a corpus version with the adapted encoder (re-encodes the paper index)")
                published = run_publish(settings, retriever=out)
                report.published, report.version = True, published.version
                report.paper_index_seconds = published.seconds.get("paper_index")
    report.seconds = round(time.perf_counter() - t0, 1)
    return report


def reset_retriever(settings: Settings) -> int:
    """Publish a corpus version whose paper index uses the packaged encoder again; returns its number.
    Raises :class:`neusym.store.versions.PublishError` as any publish does."""
    from neusym.ingest.publish import publish as run_publish

    return run_publish(settings, retriever="base").version


__all__ = [
    "RetrieverError",
    "RetrieverReport",
    "TrainingPair",
    "TrainingRecord",
    "Validation",
    "batches_without_duplicates",
    "refresh_retriever",
    "reset_retriever",
    "train_encoder",
    "training_pairs",
    "validate",
]
