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

Accurate mode (``--rerank``): on the 2.5k corpus, ``search_papers(mode="accurate")`` (fused search +
one LLM rerank of the top N, :mod:`neusym.query.rerank`) with the configured LLM (default settings: the
offline Qwen2.5-Coder-1.5B GGUF on the CPU) next to the default mode, on a seeded random subset of
the concise questions of each split (``--rerank-max`` per split, seed ``--rerank-seed``). The splits
run in the order given (``--rerank-splits dev,test``); with several ``--rerank-n`` values, N is chosen
on ``dev`` only (highest R@1, then R@5, then lower p50 latency) and only that N runs on ``test`` (also
in a later ``--rerank-splits test`` run: the N chosen on dev is read back from the results file).
Writes ``benchmarks/results/paper_search_rerank.json`` (``--rerank-out``; sections of other splits
from an earlier run are kept). Usage: ``python benchmarks/paper_search/bench.py --rerank
[--rerank-splits dev,test] [--rerank-n 5,10] [--rerank-max 40]``
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


# ---------------------------------------------------------------------------------- accurate mode
class RecordingLLM:
    """Passes every ``chat`` to the real LLM and keeps the replies (token usage, seconds) for the report."""

    def __init__(self, llm):
        self.llm = llm
        self.replies: list = []

    def chat(self, messages, **kwargs):
        reply = self.llm.chat(messages, **kwargs)
        self.replies.append(reply)
        return reply


def rerank_subset(questions: list[dict], split: str, k: int, seed: int) -> list[dict]:
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


def evaluate_accurate(index: PaperIndex, questions: list[dict], n: int, llm: RecordingLLM, settings) -> dict:
    """Default vs accurate mode on ``questions``: R@1/5/10, latency percentiles (ms), LLM usage, and
    per question the gold's rank in both modes (0-based, None = not in the top 10)."""
    from neusym.query.paper_search import search_papers

    fused_ranks, acc_ranks, fused_lat, acc_lat, loads, rows = [], [], [], [], [], []
    fallbacks = 0
    for i, q in enumerate(questions):
        t0 = time.perf_counter()
        fused = search_papers(q["question"], index=index, settings=settings, limit=10)
        fused_lat.append((time.perf_counter() - t0) * 1000)
        before = len(llm.replies)
        t0 = time.perf_counter()
        hits = search_papers(q["question"], index=index, settings=settings, limit=10, mode="accurate",
                             rerank_top_n=n, llm=llm)
        acc_lat.append((time.perf_counter() - t0) * 1000)
        loads.append(os.getloadavg()[0])
        info = hits[0].rerank if hits else None
        if info is not None and not info.applied:
            fallbacks += 1
        reply = llm.replies[-1] if len(llm.replies) > before else None
        fr, ar = _rank(fused, q["anthology_id"]), _rank(hits, q["anthology_id"])
        fused_ranks.append(fr)
        acc_ranks.append(ar)
        rows.append({"qid": q["qid"], "fused_rank": fr, "accurate_rank": ar,
                     "llm_order": [h.rerank.fused_rank for h in hits if h.rerank and h.rerank.llm_rank][:n],
                     "note": info.note if info else None, "reply": reply.text[:200] if reply else None,
                     "prompt_tokens": reply.prompt_tokens if reply else 0,
                     "completion_tokens": reply.completion_tokens if reply else 0,
                     "ms": round(acc_lat[-1], 1)})
        print(f"  [{i + 1}/{len(questions)}] {q['qid']} N={n} fused rank {fr} -> accurate {ar} "
              f"({acc_lat[-1] / 1000:.1f} s, load {loads[-1]:.1f}){' FALLBACK ' + info.note if info and info.note else ''}",
              flush=True)

    def lat(values: list[float]) -> dict:
        return {"p50": round(pct(values, 0.5), 1), "p95": round(pct(values, 0.95), 1), "max": round(max(values), 1)}

    top1 = [(f == 0, a == 0) for f, a in zip(fused_ranks, acc_ranks)]
    return {
        "N": n,
        "default": {**_recall(fused_ranks), "latency_ms": lat(fused_lat)},
        "accurate": {**_recall(acc_ranks), "latency_ms": lat(acc_lat)},
        "rank1_fixed": sum(1 for f, a in top1 if a and not f),
        "rank1_broken": sum(1 for f, a in top1 if f and not a),
        "fallbacks": fallbacks,
        "prompt_tokens_mean": round(sum(r["prompt_tokens"] for r in rows) / len(rows), 1),
        "completion_tokens_mean": round(sum(r["completion_tokens"] for r in rows) / len(rows), 1),
        "load_avg_1min": {"mean": round(sum(loads) / len(loads), 2), "max": round(max(loads), 2)},
        "questions": rows,
    }


def _choose_n(per_n: dict[int, dict]) -> int:
    """The dev choice: highest accurate R@1, then R@5, then lower p50 latency."""
    return max(per_n, key=lambda n: (per_n[n]["accurate"]["R@1"], per_n[n]["accurate"]["R@5"],
                                     -per_n[n]["accurate"]["latency_ms"]["p50"]))


def run_rerank(args) -> None:
    """The ``--rerank`` benchmark (see the module docstring)."""
    from neusym.llm.chat import make_llm
    from neusym.encode import get_encoder
    from neusym.query.rerank import rerank_hits
    from neusym.store.paper_index import PaperHit
    from neusym.settings import Settings

    settings = Settings()
    get_encoder(settings).warm_up()
    splits = [s.strip() for s in args.rerank_splits.split(",") if s.strip()]
    out = args.rerank_out
    old = json.loads(out.read_text()) if out.exists() else {}
    chosen: int | None = (old.get("splits", {}).get("dev") or {}).get("chosen_N") if "dev" not in splits else None
    if args.rerank_n:
        ns = [int(x) for x in args.rerank_n.split(",") if x.strip()]
    else:
        ns = [chosen or 10]
    if chosen is not None and ns != [chosen]:
        raise SystemExit(f"{out} says N={chosen} was chosen on dev; run test with that N (or run dev again)")
    questions = load_questions(QUESTION_SETS["concise"])
    llm = RecordingLLM(make_llm(settings))
    backend = type(llm.llm).__name__
    t0 = time.perf_counter()  # model load + one warm-up call, excluded from latency
    dummy = [PaperHit(paper_id=str(i), title=f"Paper {i}", venue=None, year=None, authors=[], score=0.0,
                      snippet="An abstract.") for i in range(2)]
    warm = rerank_hits("warm up", dummy, settings=settings, llm=llm, top_n=2)
    warm_s = time.perf_counter() - t0
    print(f"LLM {backend} ({settings.llm_base_url or settings.llm_model}) warm-up {warm_s:.1f} s, applied {warm.applied}",
          flush=True)
    result: dict = {
        "description": "Accurate paper search (search_papers mode='accurate': fused search + one listwise LLM rerank "
                       "of the top N by title + abstract) vs the default mode, 2.5k corpus (metadata only), on a seeded "
                       "random subset of the concise questions of each split. Latency per query in ms, models loaded "
                       "(LLM load + warm-up excluded). N chosen on dev only.",
        "llm": {"backend": backend, "model": settings.llm_model if settings.llm_base_url else "qwen2.5-coder-1.5b-instruct "
                "Q4_K_M GGUF (offline, llama.cpp)", "endpoint": settings.llm_base_url,
                "temperature": settings.llm_temperature, "context_tokens": settings.llm_context_tokens,
                "threads": settings.llm_threads, "candidate_tokens": settings.search_rerank_candidate_tokens,
                "warm_up_s": round(warm_s, 1)},
        "subset": {"questions_file": "benchmarks/paper_search/questions.jsonl", "max_per_split": args.rerank_max,
                   "seed": args.rerank_seed, "sampler": "random.Random(f'{seed}:{split}').sample(split questions, k)"},
        "splits": {},
    }
    def write() -> None:
        merged = {**result, "chosen_N": chosen, "splits": {**old.get("splits", {}), **result["splits"]}}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(merged, indent=1) + "\n")
        print(f"wrote {out}", flush=True)

    docs = load_docs(args.corpus_dir, "2.5k")
    with tempfile.TemporaryDirectory() as tmp:
        index = PaperIndex(EdgeBackend(Path(tmp) / "papers_edge"), settings)
        stats = build(index, docs)
        print(f"index: {stats}", flush=True)
        result["papers"] = len(docs)
        for split in splits:
            qs = rerank_subset(questions, split, args.rerank_max, args.rerank_seed)
            run_ns = ns if (split == "dev" or chosen is None) else [chosen]
            if split != "dev" and chosen is None and len(ns) > 1:
                raise SystemExit("several --rerank-n values need the dev split first (N is chosen on dev)")
            entry: dict = {"questions": len(qs), "qids": [q["qid"] for q in qs],
                           "split_size": sum(1 for q in questions if q["split"] == split),
                           "load_avg_at_start": os.getloadavg()[0], "by_N": {}}
            for n in run_ns:
                print(f"[{split}] N={n}, {len(qs)} questions", flush=True)
                r = evaluate_accurate(index, qs, n, llm, settings)
                entry["by_N"][str(n)] = r
                print(f"[{split}] N={n} default R@1/5/10 {r['default']['R@1']}/{r['default']['R@5']}/"
                      f"{r['default']['R@10']} p50/p95 {r['default']['latency_ms']['p50']}/"
                      f"{r['default']['latency_ms']['p95']} ms | accurate {r['accurate']['R@1']}/{r['accurate']['R@5']}/"
                      f"{r['accurate']['R@10']} p50/p95 {r['accurate']['latency_ms']['p50']}/"
                      f"{r['accurate']['latency_ms']['p95']} ms | fixed {r['rank1_fixed']} broken {r['rank1_broken']} "
                      f"fallbacks {r['fallbacks']}", flush=True)
            if split == "dev":
                chosen = _choose_n({n: entry["by_N"][str(n)] for n in run_ns})
                entry["chosen_N"] = chosen
                print(f"[dev] chosen N = {chosen}", flush=True)
            entry["load_avg_at_end"] = os.getloadavg()[0]
            entry["index_build"] = stats
            result["splits"][split] = entry
            write()  # after each split (splits of an earlier run that this one did not redo are kept)
        index.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus-dir", type=Path, default=Path(os.environ.get("NEUSYM_ACL_CORPUS", "/work/shared/corpus/acl")))
    ap.add_argument("--sizes", default="2.5k,5k")
    ap.add_argument("--engines", action="store_true", help="also time qdrant-client local mode on the largest corpus")
    ap.add_argument("--engine-queries", type=int, default=20)
    ap.add_argument("--sync", action="store_true", help="also time sync_paper_index on the largest corpus, crawled")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "paper_search.json")
    ap.add_argument("--rerank", action="store_true", help="benchmark the accurate mode (LLM rerank) instead")
    ap.add_argument("--rerank-splits", default="dev,test")
    ap.add_argument("--rerank-n", default=None, help="comma-separated N values (several: chosen on dev); default 10 "
                    "on dev, and on test the N chosen on dev in --rerank-out")
    ap.add_argument("--rerank-max", type=int, default=40, help="questions per split (seeded random subset)")
    ap.add_argument("--rerank-seed", type=int, default=20250)
    ap.add_argument("--rerank-out", type=Path, default=ROOT / "benchmarks" / "results" / "paper_search_rerank.json")
    args = ap.parse_args()
    if args.rerank:
        run_rerank(args)
        return

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
