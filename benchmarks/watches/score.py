"""Precision of saved-search feeds per similarity floor, from the blind relevance judgments.

``candidates.jsonl`` (candidates.py): every (query, new paper) the watches would consider, with its cosine
similarity; ``sample.jsonl``: 26 of them drawn (seeded) per similarity bin; ``judgments.jsonl``: each
sampled item judged relevant or not by reading its query, title and abstract, without its score. Per bin
the judged share of relevant items is applied to the bin's size, which estimates, for each floor, the
feed entries per query and night, their precision, and the share of all relevant candidates kept.

    python benchmarks/watches/score.py --out benchmarks/watches/results.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
BINS = [(0.2, 0.3), (0.3, 0.35), (0.35, 0.4), (0.4, 0.45), (0.45, 0.5), (0.5, 0.55), (0.55, 1.01)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    load = lambda name: [json.loads(x) for x in (HERE / name).read_text().splitlines() if x.strip()]
    candidates, sample, judged = load("candidates.jsonl"), load("sample.jsonl"), load("judgments.jsonl")
    relevant = {j["item"]: j["relevant"] for j in judged}
    assert len(relevant) == len(sample)
    queries = len({c["query"] for c in candidates})
    bins = []
    for lo, hi in BINS:
        size = sum(lo <= c["similarity"] < hi for c in candidates)
        items = [s for s in sample if lo <= s["similarity"] < hi]
        rel = sum(relevant[s["item"]] for s in items)
        bins.append({"bin": [lo, hi if hi <= 1 else 1.0], "candidates": size, "judged": len(items), "relevant": rel,
                     "precision": round(rel / len(items), 3) if items else None,
                     "est_relevant": size * rel / len(items) if items else 0.0})
    total_rel = sum(b["est_relevant"] for b in bins)
    floors = {}
    for f in (0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55):
        kept = [b for b in bins if b["bin"][0] >= f]
        n = sum(b["candidates"] for b in kept)
        r = sum(b["est_relevant"] for b in kept)
        floors[f"{f:.2f}"] = {"entries_per_query_night": round(n / queries, 1), "precision": round(r / n, 3) if n else None,
                              "share_of_relevant_kept": round(r / total_rel, 3) if total_rel else None}
    # the match rule: chosen on the first 10 queries of queries.json, reported on the other 10
    order = json.loads((HERE / "queries.json").read_text())["queries"]

    def estimate(rule, qs: list[str]) -> dict:
        qs = set(qs)
        total = kept_n = kept_rel = 0.0
        for lo, hi in BINS:
            cb = [c for c in candidates if lo <= c["similarity"] < hi and c["query"] in qs]
            sb = [s for s in sample if lo <= s["similarity"] < hi and s["query"] in qs]
            if not sb:
                continue
            for passing in (True, False):
                cs = [c for c in cb if rule(c) == passing]
                ss = [s for s in sb if rule(s) == passing] or sb
                rate = sum(relevant[s["item"]] for s in ss) / len(ss)
                total += len(cs) * rate
                if passing:
                    kept_n += len(cs)
                    kept_rel += len(cs) * rate
        return {"entries_per_query_night": round(kept_n / len(qs), 1),
                "precision": round(kept_rel / kept_n, 3) if kept_n else None,
                "share_of_relevant_kept": round(kept_rel / total, 3) if total else None}

    rules = {
        "similarity >= 0.35 alone (the floor first set by inspection)": lambda c: c["similarity"] >= 0.35,
        "fused score > 0": lambda c: c["score"] > 0,
        "fused score > 0 and similarity >= 0.35": lambda c: c["score"] > 0 and c["similarity"] >= 0.35,
        "fused score > 0 and similarity >= 0.45 (shipped)": lambda c: c["score"] > 0 and c["similarity"] >= 0.45,
        "fused score > 1": lambda c: c["score"] > 1,
        "similarity >= 0.55": lambda c: c["similarity"] >= 0.55,
    }
    rule_table = {name: {"tune (queries 1-10)": estimate(r, order[:10]), "test (queries 11-20)": estimate(r, order[10:])}
                  for name, r in rules.items()}
    result = {"queries": queries, "new_papers": 1429, "candidates": len(candidates), "judged": len(sample),
              "judged_relevant": sum(relevant.values()), "bins": [{k: v for k, v in b.items() if k != "est_relevant"}
                                                                   for b in bins], "similarity_floors": floors,
              "rules": rule_table}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
