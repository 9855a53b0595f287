"""HyDE for paper search (issue O, item 4): the accurate mode of ``neusym search`` measured.

The configured LLM writes a hypothetical title + abstract for the question
(:func:`neusym.query.hyde.write_hypothesis`). Methods, one LLM call per question shared by both:
``hyde`` (its MiniLM vector joins the question's, normalised sum, in the dense views only; BM25
keeps the question's words) and ``accurate`` (the shipped mode, :func:`neusym.query.hyde.accurate_search`:
the hypothesis is the query's expansion in every view, words and vector), next to ``default``.
(Before the mode shipped, ``accurate`` was measured by this script as ``hyde+bm25``; the sections
``dev``/``test`` keep those numbers, the shipped code's are under ``shipped``.)

2.5k corpus (packaged encoder; ``--index`` caches the index), the offline Qwen2.5-Coder-1.5B by
default (``NEUSYM_LLM_BASE_URL`` for an endpoint). Questions: seeded random subsets (``--max`` per
set, seed 20250) of the concise (``questions.jsonl``) and hard (``questions_hard.jsonl``) sets of
the split(s) given; decided on ``dev`` first, then ``test`` ran once. Writes
``benchmarks/results/paper_search_hyde.json`` (sections of other splits kept).

Usage: ``python benchmarks/paper_search/hyde.py --splits dev [--max 40]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from bench import QUESTION_SETS, _rank, _recall, load_docs, load_questions, pct, question_subset  # noqa: E402

from neusym.query.hyde import accurate_search  # noqa: E402
from neusym.store.paper_index import PaperIndex, strip_question  # noqa: E402
from neusym.store.vectors import EdgeBackend  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--splits", default="dev")
    ap.add_argument("--max", type=int, default=40)
    ap.add_argument("--seed", type=int, default=20250)
    ap.add_argument("--index", type=Path, default=Path("/tmp/neusym-prf-index"))
    ap.add_argument("--corpus-dir", type=Path, default=Path("/work/shared/corpus/acl"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "paper_search_hyde.json")
    args = ap.parse_args()

    from neusym.llm.chat import make_llm
    from neusym.settings import Settings

    settings = Settings()
    built = args.index.exists()
    index = PaperIndex(EdgeBackend(args.index))
    if not built:
        index.build(load_docs(args.corpus_dir, "2.5k"))
    llm = make_llm(settings)
    llm.chat([{"role": "user", "content": "warm up"}], max_tokens=4)
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result["description"] = ("HyDE: an LLM-written hypothetical title+abstract joins the query (hyde: its MiniLM "
                             "vector only; accurate: vector and words, the shipped --accurate mode); 2.5k corpus, "
                             "packaged encoder.")
    result["llm"] = settings.llm_model if settings.llm_base_url else "offline Qwen2.5-Coder-1.5B-Instruct (llama.cpp)"
    shipped = result.setdefault("shipped", {})
    for split in [s.strip() for s in args.splits.split(",") if s.strip()]:
        section: dict = {}
        for qname in ("concise", "hard"):
            qs = question_subset(load_questions(QUESTION_SETS[qname]), split, args.max, args.seed)
            ranks: dict[str, list] = {"default": [], "hyde": [], "accurate": []}
            llm_s, total_s, rows = [], [], []
            for q in qs:
                t0 = time.perf_counter()
                acc = accurate_search(index, q["question"], limit=10, settings=settings, llm=llm)
                total_s.append(time.perf_counter() - t0)
                ranks["default"].append(_rank(acc.default_hits, q["anthology_id"]))
                ranks["accurate"].append(_rank(acc.hits, q["anthology_id"]))
                hypo = acc.hypothesis.text if acc.hypothesis else ""
                llm_s.append(acc.hypothesis.seconds if acc.hypothesis else 0.0)
                if hypo:
                    v = np.asarray(index._encode_query(strip_question(q["question"]))) + np.asarray(index._encode_query(hypo))
                    hits = index.search(q["question"], limit=10, query_vector=(v / np.linalg.norm(v)).tolist())
                else:
                    hits = acc.default_hits
                ranks["hyde"].append(_rank(hits, q["anthology_id"]))
                rows.append({"qid": q["qid"], "hypothetical": hypo[:400], "note": acc.note,
                             **{m: r[-1] for m, r in ranks.items()}})
                print(split, qname, q["qid"], rows[-1]["default"], rows[-1]["hyde"], rows[-1]["accurate"],
                      f"{llm_s[-1]:.1f}s", flush=True)
            section[qname] = {m: _recall(r) for m, r in ranks.items()}
            section[qname]["llm_seconds"] = {"p50": round(pct(llm_s, 0.5), 2), "p95": round(pct(llm_s, 0.95), 2)}
            section[qname]["accurate_seconds"] = {"p50": round(pct(total_s, 0.5), 2),
                                                  "p95": round(pct(total_s, 0.95), 2)}
            section[qname]["per_question"] = rows
        shipped[split] = section
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps({q: {m: v for m, v in s.items() if m != "per_question"} for q, s in section.items()}, indent=1))


if __name__ == "__main__":
    main()
