"""Conference-wide paper search benchmark: recall@1/5/10 and latency of neusym.search vs two baselines.

Corpus: ACL 2024 + Findings 2024 (``2.5k``: 2,460 papers) from the ACL Anthology XML in
``/work/shared/corpus/acl`` (``--corpus-dir``), and optionally ``5k`` (+ EMNLP 2023 and 2024: 5,089
papers). All papers are metadata-only (title + abstract), as a freshly crawled conference is.

Questions: ``questions.jsonl`` (the primary set: short natural-language questions in a researcher's
words, written from abstracts, no 4-word phrase copied) and ``questions_detailed.jsonl`` (the same
papers, longer questions that stack several details of the abstract). Each has a ``dev`` split (weights
and choices were made on it) and a ``test`` split (only reported).

Methods (all run through the same Qdrant index and the same ``PaperIndex.search`` code path):
- ``bm25``: plain BM25 over title + abstract (project analyzer ``encode.bm25_tokens``), raw question;
- ``bm25+minilm_rrf``: that BM25 and all-MiniLM-L6-v2 on "title. abstract", reciprocal-rank fusion (k=60);
- ``neusym``: the default ``SearchConfig`` (see neusym/search.py);
- dev ablations from the RRF baseline to the default, one step at a time.

Latency: wall time of one ``search`` call (query encoding + Qdrant queries + fusion + snippet),
model loaded and warmed up, single thread of queries; the machine's load average is recorded with it.

Usage: ``python benchmarks/paper_search/bench.py [--sizes 2.5k,5k] [--engines] [--sync] [--out FILE]``
Embeddings are cached by text in ``$NEUSYM_BENCH_CACHE`` (default /tmp/neusym_bench_cache).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from embcache import EmbeddingCache  # noqa: E402

from neusym.search import DEFAULT_WEIGHTS, PaperDoc, PaperIndex, SearchConfig, encode_papers  # noqa: E402
from neusym.sources.acl_source import parse_acl_collection  # noqa: E402

CORPORA = {
    "2.5k": ["2024.acl.xml", "2024.findings.xml"],
    "5k": ["2024.acl.xml", "2024.findings.xml", "2024.emnlp.xml", "2023.emnlp.xml"],
}
QUESTION_SETS = {"concise": HERE / "questions.jsonl", "detailed": HERE / "questions_detailed.jsonl"}


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
    """Recall@1/5/10 per split (gold = anthology_id) and latency percentiles over all questions (ms)."""
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
    out: dict = {}
    for split, rs in ranks.items():
        out[split] = {f"R@{k}": round(sum(1 for r in rs if r is not None and r < k) / len(rs), 3) for k in (1, 5, 10)}
        out[split]["n"] = len(rs)
    out["latency_ms"] = {"p50": round(pct(lat, 0.5), 1), "p95": round(pct(lat, 0.95), 1), "max": round(max(lat), 1)}
    return out


def build(index: PaperIndex, docs: list[PaperDoc], cache: EmbeddingCache) -> dict:
    stats = index.build(docs, embed=cache)
    cache.save()
    return stats


def engine_comparison(docs: list[PaperDoc], questions: list[dict], cache: EmbeddingCache, n_queries: int) -> dict:
    """Latency of the default method on qdrant-client local mode vs qdrant-edge, same points."""
    from qdrant_client import QdrantClient

    out = {}
    qs = questions[:n_queries]
    client = QdrantClient(location=":memory:")
    idx = PaperIndex(client=client)
    t0 = time.perf_counter()
    idx.backend.ensure()
    for s in range(0, len(docs), 256):
        idx.backend.upsert(encode_papers(docs[s:s + 256], embed=cache))
    upsert_s = time.perf_counter() - t0
    r = evaluate(idx, qs, SearchConfig())
    out["qdrant-client local (:memory:)"] = {"papers": len(docs), "upsert_plus_cached_encode_s": round(upsert_s, 1),
                                             "queries": len(qs), "latency_ms": r["latency_ms"]}
    client.close()
    return out


def sync_timing(corpus_dir: Path, size: str, cache: EmbeddingCache, sample_papers: int = 40) -> dict:
    """Cost of ``neusym.search.sync_paper_index`` on a crawled corpus of ``size`` (metadata only).

    The collection XMLs go through the real crawl stages into a fresh NEUSYM_HOME and a published
    snapshot; then a first sync (every paper added; vectors from the benchmark cache, so its time is
    the non-encoding overhead), a second sync (nothing changed), and the MiniLM cost per paper
    measured by encoding the texts of ``sample_papers`` papers without the cache (1 torch thread
    per process as configured; the machine's load average is recorded).
    """
    import random

    from neusym.crawl import crawl_stage, load_crawl_stage
    from neusym.search import _dense, read_paper_docs, split_sentences, sync_paper_index
    from neusym.settings import Settings
    from neusym.snapshot import publish_snapshot

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(home=Path(tmp) / "home")
        t0 = time.perf_counter()
        res = crawl_stage({"source": "acl", "paths": [str(corpus_dir / n) for n in CORPORA[size]]}, settings)
        load_crawl_stage([res], settings, download=False)
        snap = publish_snapshot(settings)
        crawl_s = time.perf_counter() - t0
        with PaperIndex(path=Path(tmp) / "papers_edge") as idx:
            first = sync_paper_index(settings, index=idx, embed=cache)
            second = sync_paper_index(settings, index=idx, embed=cache)
        cache.save()
        docs = read_paper_docs(snap)
    sample = random.Random(0).sample(docs, min(sample_papers, len(docs)))
    texts = []
    for d in sample:
        abstract = " ".join((d.abstract or "").split())
        texts += [f"{d.title}. {abstract}", d.title] + (split_sentences(abstract) or [d.title])
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    _dense(texts)
    enc_s = time.perf_counter() - t0
    return {
        "papers": first.papers, "crawl_load_publish_s": round(crawl_s, 1),
        "first_sync": first.model_dump(exclude={"source"}), "second_sync": second.model_dump(exclude={"source"}),
        "texts_per_paper": round(first.texts_encoded / max(first.papers, 1), 2),
        "encode_s_per_paper_uncached": round(enc_s / len(sample), 3),
        "encode_sample": {"papers": len(sample), "texts": len(texts), "seconds": round(enc_s, 1), "load_avg": load0},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus-dir", type=Path, default=Path(os.environ.get("NEUSYM_ACL_CORPUS", "/work/shared/corpus/acl")))
    ap.add_argument("--sizes", default="2.5k,5k")
    ap.add_argument("--engines", action="store_true", help="also time qdrant-client local mode on the largest corpus")
    ap.add_argument("--engine-queries", type=int, default=20)
    ap.add_argument("--sync", action="store_true", help="also time sync_paper_index on the largest corpus, crawled")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "paper_search.json")
    args = ap.parse_args()

    cache = EmbeddingCache()
    from neusym.encode import dense_model

    dense_model().encode(["warm up"])  # model load is excluded from latency
    qsets = {name: load_questions(p) for name, p in QUESTION_SETS.items()}
    result: dict = {
        "description": "Paper-level search over ACL Anthology XML (metadata-only papers). R@k per split, "
                       "latency per query in ms (model loaded). Gold = the paper a question was written from.",
        "questions": {k: {s: sum(1 for q in v if q["split"] == s) for s in ("dev", "test")} for k, v in qsets.items()},
        "default_weights": DEFAULT_WEIGHTS,
        "engine": "qdrant-edge (embedded shard)",
        "corpora": {},
    }
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    for size in sizes:
        docs = load_docs(args.corpus_dir, size)
        with tempfile.TemporaryDirectory() as tmp:
            index = PaperIndex(path=Path(tmp) / "papers_edge")
            enc_before, secs_before = cache.encoded, cache.encode_seconds
            stats = build(index, docs, cache)
            stats["texts_encoded_now"] = cache.encoded - enc_before
            stats["encode_seconds_now"] = round(cache.encode_seconds - secs_before, 1)
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
            result["engine_comparison"] = engine_comparison(docs, qsets["concise"], cache, args.engine_queries)
            result["engine_comparison"]["qdrant-edge"] = {
                "papers": len(docs), "latency_ms": entry["results"]["concise"]["neusym"]["latency_ms"]}
            print(json.dumps(result["engine_comparison"], indent=1))
    if args.sync:
        result["sync"] = {sizes[-1]: sync_timing(args.corpus_dir, sizes[-1], cache)}
        print(json.dumps(result["sync"], indent=1))
    cache.save()
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
