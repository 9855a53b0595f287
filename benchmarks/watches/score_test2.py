"""The second, fresh test of the feed rule (benchmarks/watches/README.md, "Second test").

20 new queries (``queries_test2.json``), written after the first 20 had been used to choose, before any
ranking of them; their candidates (``candidates_test2.jsonl``) split into three strata: A (fused score > 0,
similarity 0.30-0.45), B (fused score > 0, similarity >= 0.45), C (fused score <= 0, similarity >= 0.30);
40 of each drawn (seed 29) and judged blind (``judgments_test2.jsonl``). The stratum sizes times the judged
shares estimate each rule's entries per query and night, precision, and share of the relevant candidates
(similarity >= 0.30) it keeps. Decided before judging: the rule with the higher F1 here ships.

    python benchmarks/watches/score_test2.py --out benchmarks/watches/results_test2.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    load = lambda name: [json.loads(x) for x in (HERE / name).read_text().splitlines() if x.strip()]
    candidates, sample = load("candidates_test2.jsonl"), load("sample_test2.jsonl")
    relevant = {j["item"]: j["relevant"] for j in load("judgments_test2.jsonl")}
    assert set(relevant) == {s["item"] for s in sample}
    queries = len({c["query"] for c in candidates})
    strata = {"A": lambda c: c["score"] > 0 and 0.30 <= c["similarity"] < 0.45,
              "B": lambda c: c["score"] > 0 and c["similarity"] >= 0.45,
              "C": lambda c: c["score"] <= 0 and c["similarity"] >= 0.30}
    est = {}
    for name, f in strata.items():
        size = sum(1 for c in candidates if f(c))
        judged = [s for s in sample if s["stratum"].startswith(name + ":")]
        rel = sum(relevant[s["item"]] for s in judged)
        est[name] = {"candidates": size, "judged": len(judged), "relevant": rel, "share": rel / len(judged)}
    total = sum(e["candidates"] * e["share"] for e in est.values())

    def rule(names: list[str]) -> dict:
        n = sum(est[k]["candidates"] for k in names)
        r = sum(est[k]["candidates"] * est[k]["share"] for k in names)
        p, k = r / n, r / total
        return {"entries_per_query_night": round(n / queries, 1), "precision": round(p, 3),
                "share_of_relevant_kept": round(k, 3), "f1": round(2 * p * k / (p + k), 3)}

    result = {"queries": queries, "strata": {k: {**v, "share": round(v["share"], 3)} for k, v in est.items()},
              "rules": {"fused score > 0 and similarity >= 0.45 (first shipped)": rule(["B"]),
                        "fused score > 0 and similarity >= 0.30 (best F1 on the first 20 queries)": rule(["A", "B"])}}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
