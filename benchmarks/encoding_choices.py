"""What the encoder choices do to retrieval quality and speed (issue G: "choose the dense views by measurement").

Usage:  .venv/bin/python benchmarks/encoding_choices.py [--out benchmarks/results/encoding.json]

Three choices, each measured on question sets with known answers:

1. Dense backend: all-MiniLM-L6-v2 with sentence-transformers on torch vs the project's ONNX graph with
   int8 MatMul weights (``NEUSYM_DENSE_BACKEND``): texts/s on real chunk texts and on "title. abstract"
   texts, cosine between the two backends' vectors, and every quality number below for both.
2. Page and section vectors: the page text encoded on its own (MiniLM reads its first 256 word pieces)
   vs the normalised mean of its chunks' vectors (the default). Quality: the AirQA-format dev set of the
   sample corpus (``benchmarks/airqa_dev``, 36 questions, every answer backed by a quote with its page):
   dense search over the anchor paper's pages with the question; hit@1/@3 of a page that holds a quote.
   Also chunk search: hit@3 of a chunk containing a quote's first 60 characters.
3. Paper-level vectors: each view's text encoded on its own (~10 model inputs per paper) vs one pass
   over "title. abstract" giving the full vector, late-chunked sentence vectors and the abstract's
   span (the default). Quality: the paper-search questions (``benchmarks/paper_search``, dev 90 / test
   30; choices were made on dev) over the 2.5k-paper ACL corpus: R@1/5/10 of ``neusym search`` and of
   dense search over the ``metadata.abstract`` cells alone.

The corpora are built in temporary homes; nothing is cached between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "paper_search"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

BACKENDS = ("onnx-int8", "torch")


def norm(v):
    import numpy as np

    v = np.asarray(v, dtype=np.float32)
    return v / max(float(np.linalg.norm(v)), 1e-12)


# ------------------------------------------------------------------------------ 1 + 2: sample corpus
def sample_corpus(home: Path, backend: str):
    from neusym.ingest.pipeline import ingest
    from neusym.settings import Settings

    settings = Settings(home=home, dense_backend=backend)
    t0 = time.perf_counter()
    report = ingest([REPO / "samples" / "pdfs"], settings)
    return settings, report, time.perf_counter() - t0


def evidence_eval(settings) -> dict:
    """hit@k of evidence pages (dense, within the anchor paper) for derived vs own page vectors, and chunks."""
    import duckdb
    import numpy as np

    from neusym.encode import encode_query, get_encoder
    from neusym.ids import point_id
    from neusym.store.versions import open_version

    items = [json.loads(x) for x in (REPO / "benchmarks/airqa_dev/questions.jsonl").open()]
    evidence = [json.loads(x) for x in (REPO / "benchmarks/airqa_dev/evidence.jsonl").open()]
    enc = get_encoder(settings)
    with open_version(settings) as v:
        con = duckdb.connect(str(v.db_path), read_only=True)
        pages = con.execute("SELECT p.page_id::VARCHAR, p.page_number, p.page_content, m.pdf_path FROM pages p "
                            "JOIN metadata m ON m.paper_id = p.ref_paper_id").fetchall()
        chunks = con.execute("SELECT c.chunk_id::VARCHAR, c.page_number, c.text_content, m.pdf_path FROM chunks c "
                             "JOIN metadata m ON m.paper_id = c.ref_paper_id").fetchall()
        con.close()
        derived = {r.payload["primary_key"]: r.vectors["minilm"] for r in
                   v.cells.retrieve([point_id("pages", "page_content", p[0]) for p in pages],
                                    payload=["primary_key"], vectors=["minilm"])}
        chunk_vecs = {r.payload["primary_key"]: r.vectors["minilm"] for r in
                      v.cells.retrieve([point_id("chunks", "text_content", c[0]) for c in chunks],
                                       payload=["primary_key"], vectors=["minilm"])}
    own = dict(zip([p[0] for p in pages], enc.encode([p[2] for p in pages])))
    stats = {"pages_derived": [0, 0], "pages_own": [0, 0], "chunks_hit3": 0, "items": 0}
    for item, ev in zip(items, evidence):
        quotes = [e for e in ev.get("evidence", []) if e.get("page")]
        if not quotes:
            continue
        pdf = quotes[0]["pdf"]
        gold_pages = {e["page"] for e in quotes if e["pdf"] == pdf}
        q = norm(encode_query(item["question"], settings=settings))
        mine = [p for p in pages if Path(p[3]).name == pdf]
        if not mine:
            continue
        stats["items"] += 1
        for name, vecs in (("pages_derived", derived), ("pages_own", own)):
            scored = sorted(mine, key=lambda p: -float(np.dot(norm(vecs[p[0]]), q)))
            ranks = [p[1] for p in scored]
            stats[name][0] += ranks[0] in gold_pages
            stats[name][1] += bool(set(ranks[:3]) & gold_pages)
        mine_c = [c for c in chunks if Path(c[3]).name == pdf]
        top = sorted(mine_c, key=lambda c: -float(np.dot(norm(chunk_vecs[c[0]]), q)))[:3]
        keys = [" ".join(e["quote"].split())[:60] for e in quotes if e["pdf"] == pdf]
        stats["chunks_hit3"] += any(k in " ".join(c[2].split()) for c in top for k in keys)
    n = stats["items"]
    return {"items": n,
            "page_hit@1": {"mean of chunks (default)": round(stats["pages_derived"][0] / n, 3),
                           "page encoded on its own": round(stats["pages_own"][0] / n, 3)},
            "page_hit@3": {"mean of chunks (default)": round(stats["pages_derived"][1] / n, 3),
                           "page encoded on its own": round(stats["pages_own"][1] / n, 3)},
            "chunk_hit@3": round(stats["chunks_hit3"] / n, 3)}


def speed(settings, texts: list[str], label: str) -> dict:
    from neusym.encode import get_encoder

    enc = get_encoder(settings)
    enc.encode(texts[:8])
    t0 = time.perf_counter()
    enc.encode(texts)
    dt = time.perf_counter() - t0
    return {label: {"texts": len(texts), "texts_per_s": round(len(texts) / dt, 1)}}


# --------------------------------------------------------------------------------- 3: paper search
def paper_search_eval(backend: str) -> dict:
    import numpy as np

    import bench
    from neusym.encode import encode_query, get_encoder, paper_text_vectors
    from neusym.store.paper_index import PAPER_SCHEMA, PaperIndex, SearchConfig, _points, encode_papers
    from neusym.settings import Settings
    from neusym.store.vectors import EdgeBackend

    settings = Settings(dense_backend=backend)
    enc = get_encoder(settings)
    docs = bench.load_docs(REPO.parent / "shared" / "corpus" / "acl", "2.5k")
    qs = bench.load_questions(bench.QUESTION_SETS["concise"])
    memo: dict[str, list[float]] = {}

    def embed(texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in memo]
        for t, v in zip(missing, enc.encode(missing)):
            memo[t] = v.tolist()
        return [memo[t] for t in texts]

    out: dict = {}
    t0 = time.perf_counter()
    standalone = encode_papers(docs, embed=embed)
    t_stand = time.perf_counter() - t0
    t0 = time.perf_counter()
    one_pass = encode_papers(docs, settings=settings)
    t_pass = time.perf_counter() - t0
    out["encode_seconds"] = {"each view on its own": round(t_stand, 1), "one pass per paper (default)": round(t_pass, 1),
                             "papers": len(docs)}
    for name, encoded in (("each view on its own", standalone), ("one pass per paper (default)", one_pass)):
        with tempfile.TemporaryDirectory() as tmp:
            idx = PaperIndex(EdgeBackend(Path(tmp) / "p"), settings)
            idx.backend.create(PAPER_SCHEMA)
            for s in range(0, len(encoded), 256):
                idx.backend.upsert(_points(encoded[s:s + 256]))
            r = bench.evaluate(idx, qs, SearchConfig())
            out[f"neusym search, {name}"] = {k: r[k] for k in ("dev", "test")}
            idx.close()
    # metadata.abstract cells alone: the abstract encoded on its own vs its span of the one pass
    with_abs = [d for d in docs if d.abstract]
    ids = [d.anthology_id for d in with_abs]
    own = np.asarray(embed([" ".join(d.abstract.split()) for d in with_abs]), dtype=np.float32)
    span = np.asarray([p.abstract for p in paper_text_vectors([(d.title, d.abstract, d.tldr) for d in with_abs],
                                                                settings=settings)], dtype=np.float32)
    for name, mat in (("abstract cell encoded on its own", own), ("abstract cell = span of the pass (default)", span)):
        res = {}
        for split in ("dev", "test"):
            ranks = []
            for q in qs:
                if q["split"] != split:
                    continue
                qv = np.asarray(encode_query(q["question"], settings=settings), dtype=np.float32)
                top = [ids[i] for i in np.argsort(-(mat @ qv))[:10]]
                ranks.append(top.index(q["anthology_id"]) if q["anthology_id"] in top else None)
            res[split] = {f"R@{k}": round(sum(1 for r in ranks if r is not None and r < k) / len(ranks), 3)
                          for k in (1, 5, 10)}
        out[f"dense over metadata.abstract, {name}"] = res
    long_texts = [p.text for p in paper_text_vectors([(d.title, d.abstract, None) for d in with_abs[:300]],
                                                        settings=settings)]
    out["speed"] = speed(settings, long_texts, '"title. abstract" texts')
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "encoding.json")
    ap.add_argument("--skip-paper-search", action="store_true")
    args = ap.parse_args()
    import duckdb

    from neusym.encode import get_encoder

    result: dict = {"load_avg_at_start": os.getloadavg()[0], "backends": {}}
    chunk_texts = None
    vectors = {}
    for backend in BACKENDS:
        with tempfile.TemporaryDirectory() as tmp:
            settings, report, secs = sample_corpus(Path(tmp) / "home", backend)
            get_encoder(settings).warm_up()
            entry = {"ingest_samples_s": round(secs, 1), "ingest_stages_s": {k: round(v, 1) for k, v in report.seconds.items()},
                     "evidence_retrieval_airqa_dev": evidence_eval(settings)}
            if chunk_texts is None:
                from neusym.store.versions import current_db

                con = duckdb.connect(str(current_db(settings)), read_only=True)
                chunk_texts = [r[0] for r in con.execute("SELECT text_content FROM chunks ORDER BY chunk_id").fetchall()]
                con.close()
            entry["speed"] = speed(settings, chunk_texts, "chunk texts (<= 254 word pieces)")
            vectors[backend] = get_encoder(settings).encode(chunk_texts[:200])
            if not args.skip_paper_search and (REPO.parent / "shared" / "corpus" / "acl").is_dir():
                entry["paper_search_2.5k"] = paper_search_eval(backend)
            result["backends"][backend] = entry
            print(json.dumps({backend: entry}, indent=1), flush=True)
    cos = (vectors["onnx-int8"] * vectors["torch"]).sum(axis=1)
    result["cosine_onnx_int8_vs_torch_on_200_chunks"] = {"mean": round(float(cos.mean()), 4), "min": round(float(cos.min()), 4)}
    result["load_avg_at_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
