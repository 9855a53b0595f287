"""HyDE for paper search (issue O, item 4): the configured LLM writes a hypothetical title + abstract for
the question; its MiniLM vector joins the question's (normalised sum) for the dense views of the
default fused search; BM25 views keep the question's words, or (``hyde+bm25``) also get the
hypothetical text's words.

2.5k corpus (packaged encoder; ``--index`` caches the index), the offline Qwen2.5-Coder-1.5B by
default (``NEUSYM_LLM_BASE_URL`` for an endpoint). Questions: seeded random subsets (``--max`` per
set, seed 20250, the rerank benchmark's rule) of the concise (``questions.jsonl``) and hard
(``questions_hard.jsonl``) sets of the split(s) given; decide on ``dev`` first, then run ``test``
once. Writes ``benchmarks/results/paper_search_hyde.json`` (sections of other splits kept).

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
from bench import QUESTION_SETS, _rank, _recall, load_docs, load_questions, pct, rerank_subset  # noqa: E402

from neusym.encode import encode_query  # noqa: E402
from neusym.store.paper_index import PaperIndex, SearchConfig, strip_question  # noqa: E402
from neusym.store.vectors import EdgeBackend  # noqa: E402

SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}, "abstract": {"type": "string"}},
          "required": ["title", "abstract"], "additionalProperties": False}
SYSTEM = ("You help a researcher find a research paper. Given their search request, write the title and a short "
          "abstract (3 sentences) of a paper that would be exactly what they are looking for, in the words such a "
          "paper would use: its task, method, data and findings. Reply with a JSON object only: "
          '{"title": "...", "abstract": "..."}.')


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
    result["description"] = ("HyDE: LLM-written hypothetical title+abstract joins the question's MiniLM vector "
                             "(normalised sum) in the default fused search; 2.5k corpus, packaged encoder.")
    result["llm"] = settings.llm_model if settings.llm_base_url else "offline Qwen2.5-Coder-1.5B-Instruct (llama.cpp)"
    for split in [s.strip() for s in args.splits.split(",") if s.strip()]:
        section: dict = {}
        for qname in ("concise", "hard"):
            qs = rerank_subset(load_questions(QUESTION_SETS[qname]), split, args.max, args.seed)
            ranks: dict[str, list] = {"default": [], "hyde": [], "hyde+bm25": []}
            llm_s, rows = [], []
            for q in qs:
                text = strip_question(q["question"])
                ranks["default"].append(_rank(index.search(q["question"], limit=10), q["anthology_id"]))
                t0 = time.perf_counter()
                reply = llm.chat([{"role": "system", "content": SYSTEM},
                                  {"role": "user", "content": f"Search request: {q['question']}"}],
                                 json_schema=SCHEMA, max_tokens=160)
                llm_s.append(time.perf_counter() - t0)
                try:
                    doc = json.loads(reply.text)
                    hypo = f"{doc.get('title', '')}. {doc.get('abstract', '')}".strip()
                except (ValueError, AttributeError):
                    hypo = ""
                if hypo:
                    v = np.asarray(encode_query(text)) + np.asarray(encode_query(hypo))
                    qv = (v / np.linalg.norm(v)).tolist()
                    hits = index.search(q["question"], limit=10, query_vector=qv)
                    both = index.search(f"{text} {hypo}", limit=10, query_vector=qv,
                                        config=SearchConfig(strip_scaffold=False))
                else:
                    hits = both = index.search(q["question"], limit=10)
                ranks["hyde"].append(_rank(hits, q["anthology_id"]))
                ranks["hyde+bm25"].append(_rank(both, q["anthology_id"]))
                rows.append({"qid": q["qid"], "hypothetical": hypo[:400], "default": ranks["default"][-1],
                             "hyde": ranks["hyde"][-1], "hyde+bm25": ranks["hyde+bm25"][-1]})
                print(split, qname, q["qid"], rows[-1]["default"], rows[-1]["hyde"], rows[-1]["hyde+bm25"],
                      f"{llm_s[-1]:.1f}s", flush=True)
            section[qname] = {m: _recall(r) for m, r in ranks.items()}
            section[qname]["llm_seconds"] = {"p50": round(pct(llm_s, 0.5), 2), "p95": round(pct(llm_s, 0.95), 2)}
            section[qname]["per_question"] = rows
        result[split] = section
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps({q: {m: v for m, v in s.items() if m != "per_question"} for q, s in section.items()}, indent=1))


if __name__ == "__main__":
    main()
