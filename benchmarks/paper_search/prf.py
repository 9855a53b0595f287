"""Pseudo-relevance feedback for paper search (issue O, item 2), measured on the dev split only.

Two classic expansions of the default fused search (2.5k corpus, packaged encoder, the dev questions
of questions.jsonl and questions_hard.jsonl), each re-running the fused search once with the
expanded query built from the top-k papers of the first ranking:

- dense Rocchio: query vector + beta * mean of the top-k papers' ``minilm`` vectors (renormalised),
  for the dense views;
- sparse RM3-style: the ``n_terms`` heaviest non-query terms of the top-k papers' titles + abstracts
  (term frequency / length, summed) join the BM25 query with a total weight of ``lam`` x the number
  of query terms (original terms weight 1).

Result (``benchmarks/results/paper_search_prf.json``): neither helps on dev — R@1 falls on both the
abstract-written and the hard questions for every setting tried — so neither is in the default and
the test split was not run. Usage: ``python benchmarks/paper_search/prf.py [--index DIR]``
"""
import argparse
import json, sys, time
from collections import Counter
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2])); sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np

from bench import load_docs, load_questions, QUESTION_SETS
from neusym.store.paper_index import MULTI_VIEWS, PaperIndex, SearchConfig, _fuse, strip_question
from neusym.store.vectors import EdgeBackend, QuerySpec
from neusym.encode import paper_tokens, sparse_query_vector, token_index, encode_query

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--index", type=Path, default=Path("/tmp/neusym-prf-index"), help="index cache (built when missing)")
ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "paper_search_prf.json")
args = ap.parse_args()
path = args.index
built = path.exists()
index = PaperIndex(EdgeBackend(path))
if not built:
    t = time.time(); index.build(load_docs(Path("/work/shared/corpus/acl"), "2.5k")); print("built", time.time() - t, flush=True)
qs = [q for n in ("concise", "hard") for q in load_questions(QUESTION_SETS[n]) if q["split"] == "dev"]
cfg = SearchConfig()
weights = {k: w for k, w in cfg.weights.items() if w and k not in ("bm25_body", "minilm_body")}

def run(q, k_docs=0, beta=0.0, n_terms=0, lam=0.0):
    text = strip_question(q)
    qvec = encode_query(text)
    qtok = paper_tokens(text)
    def requests(qv, sparse):
        reqs = []
        for view in weights:
            if view == "bm25":
                reqs.append((view, sparse))
            elif view == "bm25_basic":
                continue
            else:
                reqs.append((view, [qv] if view in MULTI_VIEWS else qv))
        return reqs
    def search(reqs):
        res = index.backend.query([QuerySpec(n, v, None, 100, with_payload=False) for n, v in reqs])
        return _fuse([(n, [(h.id, h.score) for h in r]) for (n, _), r in zip(reqs, res)], weights, cfg, 100)
    sv = sparse_query_vector(qtok)
    fused = search(requests(qvec, sv))
    if k_docs:
        top = [pid for pid, _ in sorted(fused.items(), key=lambda kv: -kv[1])[:k_docs]]
        recs = index.backend.retrieve(top, payload=["title", "sentences"], vectors=["minilm"])
        qv2 = qvec
        if beta:
            m = np.mean([r.vectors["minilm"] for r in recs], axis=0)
            v = np.asarray(qvec) + beta * m
            qv2 = (v / np.linalg.norm(v)).tolist()
        sv2 = sv
        if n_terms:
            score = Counter()
            for r in recs:
                toks = paper_tokens(" ".join([r.payload.get("title", "")] + list(r.payload.get("sentences") or [])))
                c = Counter(toks); L = max(1, len(toks))
                for t, n in c.items():
                    if t not in qtok:
                        score[t] += n / L
            exp = score.most_common(n_terms)
            tot = sum(s for _, s in exp) or 1
            w = {token_index(t): 1.0 for t in qtok}
            for t, s in exp:
                w[token_index(t)] = w.get(token_index(t), 0) + lam * len(set(qtok)) * s / tot
            idx = sorted(w)
            sv2 = (idx, [w[i] for i in idx])
        fused = search(requests(qv2, sv2))
    ranked = [pid for pid, _ in sorted(fused.items(), key=lambda kv: -kv[1])[:10]]
    return ranked

# gold point ids: map anthology id -> point id via payload
aid2pid = {}
for r in index.backend.scroll(payload=["anthology_id"]):
    aid2pid[r.payload.get("anthology_id")] = r.id
results = []
grid = [(0,0,0,0)] + [(k,b,0,0) for k in (3,5) for b in (0.3,0.6,1.0)] + [(k,0,n,l) for k in (3,5) for n in (10,20) for l in (0.3,0.6)] + [(5,0.6,10,0.3)]
for k, b, n, l in grid:
    per = {}
    t = time.time()
    for q in qs:
        ranked = run(q["question"], k, b, n, l)
        g = aid2pid[q["anthology_id"]]
        r = ranked.index(g) if g in ranked else None
        per.setdefault(q.get("set", "abstract-2024"), []).append(r)
    ms = (time.time() - t) / len(qs) * 1000
    out = {s: (round(sum(1 for r in v if r is not None and r < 1)/len(v),3), round(sum(1 for r in v if r is not None and r < 5)/len(v),3)) for s, v in per.items()}
    print(f"k={k} beta={b} terms={n} lam={l}: {out} {ms:.1f} ms/q", flush=True)
    results.append({"k_docs": k, "beta": b, "n_terms": n, "lam": l, "ms_per_query": round(ms, 1),
                    "dev": {s: {"R@1": r1, "R@5": r5, "n": len(per[s])} for s, (r1, r5) in out.items()}})
args.out.write_text(json.dumps({"description": "PRF on the default fused search, 2.5k corpus, dev split only; "
                                "first row = no feedback", "runs": results}, indent=1) + "\n")
print("wrote", args.out)
