"""Conference-wide paper search benchmark: recall@1/5/10 and latency of neusym.store.paper_index vs two baselines.

Corpus: ACL 2024 + Findings 2024 (``2.5k``: 2,460 papers) from the ACL Anthology XML in
``/work/shared/corpus/acl`` (``--corpus-dir``), ``3.6k`` (+ EMNLP 2023) and ``5k`` (+ EMNLP 2023 and
2024: 5,089 papers). All papers are metadata-only (title + abstract), as a freshly crawled conference is.

Questions: ``questions.jsonl`` (the primary set: short natural-language questions in a researcher's
words, written from abstracts, no 4-word phrase copied) and ``questions_detailed.jsonl`` (the same
papers, longer questions that stack several details of the abstract) and ``questions_hard.jsonl`` (an
adversarial lexical-gap set: at most 3 content words shared with title + abstract). Each has a ``dev``
split (weights and choices were made on it) and a ``test`` split (only reported); results are also
broken down by question set (``"test/researcher-2026"``).

Methods (all run through the same Qdrant index and the same ``PaperIndex.search`` code path):
- ``bm25``: plain BM25 over title + abstract (project analyzer ``encode.bm25_tokens``), raw question;
- ``bm25+minilm_rrf``: that BM25 and all-MiniLM-L6-v2 on "title. abstract", reciprocal-rank fusion (k=60);
- ``neusym``: the default ``SearchConfig`` (see neusym/store/paper_index.py);
- dev ablations from the RRF baseline to the default, one step at a time.

Latency: wall time of one ``search`` call (query encoding + Qdrant queries + fusion + snippet),
model loaded and warmed up, single thread of queries; the machine's load average is recorded with it.

Index: built with the production encoder (``neusym.store.paper_index.encode_papers``: the settings' dense
backend, one pass over "title. abstract" per paper) in a qdrant-edge shard.

Usage: ``python benchmarks/paper_search/bench.py [--sizes 2.5k,5k] [--engines] [--sync] [--out FILE]``

The accurate mode (an LLM-written hypothetical abstract joins the query) has its own benchmark:
``hyde.py`` next to this file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from neusym.store.paper_index import (  # noqa: E402
    DEFAULT_WEIGHTS,
    PAPER_SCHEMA,
    PaperDoc,
    PaperIndex,
    SearchConfig,
    _points,
    encode_papers,
)
from neusym.ingest.sources.acl_source import parse_acl_collection  # noqa: E402
from neusym.store.vectors import ClientBackend, EdgeBackend  # noqa: E402

CORPORA = {
    "2.5k": ["2024.acl.xml", "2024.findings.xml"],
    "3.6k": ["2024.acl.xml", "2024.findings.xml", "2023.emnlp.xml"],
    "5k": ["2024.acl.xml", "2024.findings.xml", "2024.emnlp.xml", "2023.emnlp.xml"],
}
QUESTION_SETS = {"concise": HERE / "questions.jsonl", "detailed": HERE / "questions_detailed.jsonl",
                 "hard": HERE / "questions_hard.jsonl"}


def methods() -> dict[str, SearchConfig]:
    """Baselines, the default, and the dev ablation ladder (name -> config)."""
    w = DEFAULT_WEIGHTS
    return {
        "bm25": SearchConfig(weights={"bm25_basic": 1.0}, fusion="rrf", strip_scaffold=False),
        "bm25+minilm_rrf": SearchConfig(weights={"bm25_basic": 1.0, "minilm": 1.0}, fusion="rrf", strip_scaffold=False),
        # ablation ladder (each adds one change to the previous)
        "a1 +strip question scaffolding": SearchConfig(weights={"bm25_basic": 1.0, "minilm": 1.0}, fusion="rrf"),
        "a2 +paper analyzer (compounds, acronym plurals)": SearchConfig(weights={"bm25": 1.0, "minilm": 1.0}, fusion="rrf"),
        "a3 +z-score fusion instead of RRF": SearchConfig(weights={"bm25": 1.0, "minilm": 1.0}),
        "a4 +title view (minilm_title 0.5)": SearchConfig(weights={"bm25": 1.0, "minilm": 1.0, "minilm_title": 0.5}),
        "neusym": SearchConfig(),  # a5: + abstract-sentence MaxSim view (minilm_sents 0.25)
        # leave-one-out from the default
        "neusym -strip": SearchConfig(strip_scaffold=False),
        "neusym -minilm_sents": SearchConfig(weights={**w, "minilm_sents": 0.0}),
        "neusym minilm_sents 0.5 (first guess)": SearchConfig(weights={**w, "minilm_sents": 0.5}),
        "neusym -minilm_title": SearchConfig(weights={**w, "minilm_title": 0.0}),
        "neusym rrf fusion": SearchConfig(fusion="rrf"),
        "neusym +bm25_basic instead of bm25": SearchConfig(weights={**w, "bm25": 0.0, "bm25_basic": 1.0}),
    }


MAIN = ("bm25", "bm25+minilm_rrf", "neusym")


def load_docs(corpus_dir: Path, size: str) -> list[PaperDoc]:
    docs = []
    for name in CORPORA[size]:
        docs += [PaperDoc.from_source(p) for p in parse_acl_collection(corpus_dir / name)]
    return docs


def load_questions(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def evaluate(index: PaperIndex, questions: list[dict], cfg: SearchConfig, *, repeat_latency: bool = True) -> dict:
    """Recall@1/5/10 per split (gold = anthology_id), per split and question set (``"test/researcher-2026"``;
    questions without a ``set`` are ``abstract-2024``) and latency percentiles over all questions (ms)."""
    ranks: dict[str, list[int | None]] = {}
    lat: list[float] = []
    for q in questions:
        t0 = time.perf_counter()
        hits = index.search(q["question"], limit=10, config=cfg)
        lat.append((time.perf_counter() - t0) * 1000)
        ids = [h.anthology_id for h in hits]
        rank = ids.index(q["anthology_id"]) if q["anthology_id"] in ids else None
        ranks.setdefault(q["split"], []).append(rank)
        ranks.setdefault("all", []).append(rank)
        ranks.setdefault(f'{q["split"]}/{q.get("set", "abstract-2024")}', []).append(rank)  # per question set
    out: dict = {}
    for split, rs in ranks.items():
        out[split] = {f"R@{k}": round(sum(1 for r in rs if r is not None and r < k) / len(rs), 3) for k in (1, 5, 10)}
        out[split]["n"] = len(rs)
    out["latency_ms"] = {"p50": round(pct(lat, 0.5), 1), "p95": round(pct(lat, 0.95), 1), "max": round(max(lat), 1)}
    return out


def build(index: PaperIndex, docs: list[PaperDoc]) -> dict:
    return index.build(docs)


def engine_comparison(docs: list[PaperDoc], questions: list[dict], n_queries: int) -> dict:
    """Latency of the default method on qdrant-client local mode vs qdrant-edge, same points."""
    from qdrant_client import QdrantClient

    out = {}
    qs = questions[:n_queries]
    client = QdrantClient(location=":memory:")
    idx = PaperIndex(ClientBackend(client, "papers"))
    t0 = time.perf_counter()
    idx.backend.create(PAPER_SCHEMA)
    for s in range(0, len(docs), 256):
        idx.backend.upsert(_points(encode_papers(docs[s:s + 256])))
    upsert_s = time.perf_counter() - t0
    r = evaluate(idx, qs, SearchConfig())
    out["qdrant-client local (:memory:)"] = {"papers": len(docs), "encode_plus_upsert_s": round(upsert_s, 1),
                                             "queries": len(qs), "latency_ms": r["latency_ms"]}
    client.close()
    return out


def sync_timing(corpus_dir: Path, size: str) -> dict:
    """Publishing a crawled corpus of ``size`` (metadata only): the paper index's share of the first
    publish (every paper new) and of a second one with nothing changed."""
    from neusym.ingest.crawl import crawl_stage, load_crawl_stage
    from neusym.ingest.publish import publish
    from neusym.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(home=Path(tmp) / "home")
        t0 = time.perf_counter()
        res = crawl_stage({"source": "acl", "paths": [str(corpus_dir / n) for n in CORPORA[size]]}, settings)
        load_crawl_stage([res], settings, download=False)
        crawl_s = time.perf_counter() - t0
        first = publish(settings)
        second = publish(settings)
    return {
        "papers": first.paper_index["papers"], "crawl_load_s": round(crawl_s, 1),
        "first_publish_s": first.seconds, "first_paper_index": first.paper_index,
        "second_publish_s": second.seconds, "second_paper_index": second.paper_index,
        "load_avg": os.getloadavg()[0],
    }


# ------------------------------------------------------------------------- question subsets, recall
def question_subset(questions: list[dict], split: str, k: int, seed: int) -> list[dict]:
    """A seeded random subset of at most ``k`` questions of ``split`` (file order kept)."""
    pool = [q for q in questions if q["split"] == split]
    keep = {q["qid"] for q in random.Random(f"{seed}:{split}").sample(pool, min(k, len(pool)))}
    return [q for q in pool if q["qid"] in keep]


def _recall(ranks: list[int | None]) -> dict:
    out = {f"R@{k}": round(sum(1 for r in ranks if r is not None and r < k) / len(ranks), 3) for k in (1, 5, 10)}
    out["n"] = len(ranks)
    return out


def _rank(hits, gold: str) -> int | None:
    ids = [h.anthology_id for h in hits]
    return ids.index(gold) if gold in ids else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus-dir", type=Path, default=Path(os.environ.get("NEUSYM_ACL_CORPUS", "/work/shared/corpus/acl")))
    ap.add_argument("--sizes", default="2.5k,5k")
    ap.add_argument("--engines", action="store_true", help="also time qdrant-client local mode on the largest corpus")
    ap.add_argument("--engine-queries", type=int, default=20)
    ap.add_argument("--sync", action="store_true", help="also time sync_paper_index on the largest corpus, crawled")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "paper_search.json")
    args = ap.parse_args()

    from neusym.encode import get_encoder
    from neusym.settings import Settings

    get_encoder(Settings()).warm_up()  # model load is excluded from latency
    qsets = {name: load_questions(p) for name, p in QUESTION_SETS.items()}
    result: dict = {
        "description": "Paper-level search over ACL Anthology XML (metadata-only papers). R@k per split, "
                       "latency per query in ms (model loaded). Gold = the paper a question was written from.",
        "questions": {k: {s: sum(1 for q in v if q["split"] == s) for s in ("dev", "test")} for k, v in qsets.items()},
        "default_weights": DEFAULT_WEIGHTS,
        "engine": "qdrant-edge (embedded shard)",
        "encoder": Settings().dense_backend + ", one pass over 'title. abstract' per paper",
        "corpora": {},
    }
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    for size in sizes:
        docs = load_docs(args.corpus_dir, size)
        with tempfile.TemporaryDirectory() as tmp:
            index = PaperIndex(EdgeBackend(Path(tmp) / "papers_edge"))
            stats = build(index, docs)
            entry: dict = {"papers": len(docs), "build": stats, "load_avg_at_start": os.getloadavg()[0], "results": {}}
            for qname, qs in qsets.items():
                per = {}
                names = list(methods()) if (qname == "concise" and size == "2.5k") else list(MAIN)
                for mname in names:
                    per[mname] = evaluate(index, qs, methods()[mname])
                    r = per[mname]
                    print(f"[{size} {qname}] {mname:50s} dev R@1 {r['dev']['R@1']:.3f} R@5 {r['dev']['R@5']:.3f} "
                          f"R@10 {r['dev']['R@10']:.3f} | test R@1 {r['test']['R@1']:.3f} R@5 {r['test']['R@5']:.3f} "
                          f"R@10 {r['test']['R@10']:.3f} | p50 {r['latency_ms']['p50']} ms p95 {r['latency_ms']['p95']} ms",
                          flush=True)
                entry["results"][qname] = per
            entry["load_avg_at_end"] = os.getloadavg()[0]
            index.close()
        result["corpora"][size] = entry
        if args.engines and size == sizes[-1]:
            result["engine_comparison"] = engine_comparison(docs, qsets["concise"], args.engine_queries)
            result["engine_comparison"]["qdrant-edge"] = {
                "papers": len(docs), "latency_ms": entry["results"]["concise"]["neusym"]["latency_ms"]}
            print(json.dumps(result["engine_comparison"], indent=1))
    if args.sync:
        result["sync"] = {sizes[-1]: sync_timing(args.corpus_dir, sizes[-1])}
        print(json.dumps(result["sync"], indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.out.exists():  # keep sections of an earlier run that this run did not redo
        old = json.loads(args.out.read_text())
        for size, entry in old.get("corpora", {}).items():
            result["corpora"].setdefault(size, entry)
        for key in ("engine_comparison", "sync"):
            if key not in result and key in old:
                result[key] = old[key]
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
