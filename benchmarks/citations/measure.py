"""Precision and recall of the citation resolution (neusym/ingest/citations.py) on the hand-checked gold set.

Input: a NEUSYM_HOME holding the 17 PDFs of ``pdfs.txt`` (``neusym ingest``) and the four ACL Anthology
collections of ../shared/corpus/acl (``neusym crawl acl ... --no-download``), i.e. the corpus the labels
of ``gold.jsonl`` refer to. Two measurements:

1. the links the last publish stored (``citation_links`` of the current version): what users get;
2. the resolver re-run on the gold references with other fuzzy thresholds (and without the fuzzy
   step), against the same targets: how the threshold was chosen.

A reference is matched to its gold row by (citing PDF sha256, ordinal) and checked to have the same text.
A gold target is a corpus paper found by its Anthology id (``provenance``) or, for a parsed PDF, its title.
Precision = correct links / links made; recall = correct links / gold positives.

    python benchmarks/citations/measure.py --home /tmp/citehome --out benchmarks/citations/results.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from neusym.ingest.citations import FUZZY_THRESHOLD, Resolver, _TARGETS_SQL, _target_of  # noqa: E402
from neusym.ids import normalize_title as normalize  # noqa: E402


def load_gold() -> list[dict]:
    return [json.loads(line) for line in (HERE / "gold.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]


def gold_target_ids(con, gold: list[dict]) -> dict[int, str | None]:
    """gold row index -> the corpus paper id its target is (None for a negative). Raises when a
    positive's target is not in the corpus (the home does not hold the collections)."""
    by_anthology = {a.lower(): p for a, p in con.execute(
        "SELECT anthology_id, ref_paper_id::VARCHAR FROM provenance WHERE anthology_id IS NOT NULL").fetchall()}
    by_title = {}
    for pid, title in con.execute("SELECT paper_id::VARCHAR, title FROM metadata").fetchall():
        by_title.setdefault(normalize(title), pid)
    out: dict[int, str | None] = {}
    for i, g in enumerate(gold):
        t = g["target"]
        if t is None:
            out[i] = None
            continue
        pid = by_anthology.get((t.get("anthology_id") or "").lower()) or by_title.get(normalize(t["title"]))
        if pid is None:
            raise SystemExit(f"gold row {i} ({g['citing_pdf']} #{g['ordinal']}): target {t['title']!r} is not in the corpus")
        out[i] = pid
    return out


def score(pred: dict[int, str | None], truth: dict[int, str | None]) -> dict:
    made = [i for i, p in pred.items() if p is not None]
    correct = [i for i in made if truth.get(i) == pred[i]]
    positives = [i for i, t in truth.items() if t is not None]
    p = len(correct) / len(made) if made else None
    r = len(correct) / len(positives) if positives else None
    return {"links": len(made), "correct": len(correct), "positives": len(positives),
            "precision": round(p, 4) if p is not None else None, "recall": round(r, 4) if r is not None else None,
            "wrong": [i for i in made if truth.get(i) != pred[i]],
            "missed": [i for i in positives if pred.get(i) != truth[i]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", required=True, type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    gold = load_gold()
    con = duckdb.connect(str(args.home / "corpus-snapshot.duckdb"), read_only=True)
    rows = {(sha, o): (rid, pid, text) for rid, pid, sha, o, text in con.execute(
        "SELECT r.reference_id::VARCHAR, r.ref_paper_id::VARCHAR, m.pdf_sha256, r.ordinal, r.reference_content "
        "FROM reference r JOIN metadata m ON m.paper_id = r.ref_paper_id").fetchall()}
    refs: dict[int, tuple[str, str, str]] = {}
    for i, g in enumerate(gold):
        hit = rows.get((g["citing_sha256"], g["ordinal"]))
        if hit is None or hit[2] != g["reference"]:
            raise SystemExit(f"gold row {i} ({g['citing_pdf']} #{g['ordinal']}) does not match the stored reference")
        refs[i] = hit
    truth = gold_target_ids(con, gold)
    stored = dict(con.execute("SELECT reference_id::VARCHAR, cited_paper_id::VARCHAR FROM citation_links").fetchall())
    methods = dict(con.execute("SELECT reference_id::VARCHAR, method FROM citation_links").fetchall())
    published = score({i: stored.get(rid) for i, (rid, _, _) in refs.items()}, truth)
    by_method: dict[str, dict] = {}
    for m in sorted({methods[rid] for rid, _, _ in refs.values() if rid in methods}):
        sub = {i: stored.get(rid) if methods.get(rid) == m else None for i, (rid, _, _) in refs.items()}
        s = score(sub, truth)
        by_method[m] = {"links": s["links"], "correct": s["correct"]}
    targets = [_target_of(r)[0] for r in con.execute(_TARGETS_SQL).fetchall()]
    grid = {}
    for threshold in (80.0, 85.0, 88.0, 90.0, 93.0, 95.0, 101.0):
        resolver = Resolver(targets, fuzzy_threshold=threshold)
        pred = {}
        for i, (rid, citing, text) in refs.items():
            hit = resolver.resolve(text, citing)
            pred[i] = hit[0] if hit else None
        s = score(pred, truth)
        grid["no fuzzy step" if threshold > 100 else f"fuzzy >= {threshold:g}"] = {
            k: s[k] for k in ("links", "correct", "precision", "recall")}
    detail = {"wrong": [{"row": i, "citing": gold[i]["citing_pdf"], "ordinal": gold[i]["ordinal"],
                         "reference": gold[i]["reference"][:200], "linked_to": con.execute(
                             "SELECT title FROM metadata WHERE paper_id = ?", [stored.get(refs[i][0])]).fetchone()[0],
                         "gold": (gold[i]["target"] or {}).get("title")} for i in published["wrong"]],
              "missed": [{"row": i, "citing": gold[i]["citing_pdf"], "ordinal": gold[i]["ordinal"],
                          "reference": gold[i]["reference"][:200], "gold": gold[i]["target"]["title"]}
                         for i in published["missed"]]}
    corpus = {"papers": con.execute("SELECT count(*) FROM metadata").fetchone()[0],
              "parsed": con.execute("SELECT count(*) FROM metadata WHERE pdf_sha256 IS NOT NULL").fetchone()[0],
              "references": con.execute("SELECT count(*) FROM reference").fetchone()[0],
              "links": con.execute("SELECT count(*) FROM citation_links").fetchone()[0]}
    con.close()
    result = {"gold_references": len(gold), "gold_positives": published["positives"], "corpus": corpus,
              "fuzzy_threshold": FUZZY_THRESHOLD,
              "published": {k: published[k] for k in ("links", "correct", "precision", "recall")},
              "published_by_method": by_method, "threshold_grid": grid, **detail}
    text = json.dumps(result, indent=1, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
