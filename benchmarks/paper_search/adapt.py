"""Corpus-adapted paper-search encoder (issue O): what ``neusym train-retriever`` gains, on questions
nobody trained on.

Runs (``--runs``, each trains with the production code, :func:`neusym.ingest.retriever.train_encoder`
on :func:`neusym.ingest.retriever.training_pairs`, in a child process so its peak memory is its own):

- ``heldapart``: trained on EMNLP 2023 + EMNLP 2024 (2,629 papers), evaluated on the 2.5k corpus
  (ACL 2024 + Findings 2024) — collections it never saw;
- ``self2.5k``: trained on the 2.5k corpus itself (what the command does on a served corpus: the
  pairs come from the papers' own titles and abstracts; no question is used);
- ``self5k``: trained on the 5k corpus (2.5k + EMNLP 2023/2024), evaluated on the 5k index.

For each: the paper index is built with the packaged encoder and with the adapted one (same code as
the publish stage: :class:`neusym.store.paper_index.PaperIndex` with ``encoder=``), and the question
sets of ``benchmarks/paper_search`` are run with the default ``SearchConfig``, dense only
(``minilm``) and BM25 + MiniLM RRF: R@1/5/10 per split and question set, p50/p95 latency. A weight
grid over the fused views is searched on ``dev`` only (``--grid``) and its choice reported on ``test``.
Training time, steps, pairs and peak RSS come from the child; index build time before/after.

Usage: ``python benchmarks/paper_search/adapt.py [--runs heldapart,self2.5k,self5k] [--minutes 25] [--grid]``
Writes ``benchmarks/results/paper_search_adapted.json`` (sections of runs not redone are kept).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench import CORPORA, QUESTION_SETS, evaluate, load_docs, load_questions  # noqa: E402

from neusym.store.paper_index import DEFAULT_WEIGHTS, PaperIndex, SearchConfig  # noqa: E402
from neusym.store.vectors import EdgeBackend  # noqa: E402

TRAIN_SETS = {
    "heldapart": ["2023.emnlp.xml", "2024.emnlp.xml"],
    "self2.5k": CORPORA["2.5k"],
    "self5k": CORPORA["5k"],
}
EVAL_SIZE = {"heldapart": "2.5k", "self2.5k": "2.5k", "self5k": "5k"}
CONFIGS = {
    "neusym (default fusion)": SearchConfig(),
    "dense only (minilm)": SearchConfig(weights={"minilm": 1.0}),
    "bm25+minilm_rrf": SearchConfig(weights={"bm25_basic": 1.0, "minilm": 1.0}, fusion="rrf", strip_scaffold=False),
}


def train_child(corpus_dir: Path, files: list[str], out_dir: Path, minutes: float) -> dict:
    """Train in a child process (its own peak RSS); returns the TrainingRecord as a dict."""
    code = (
        "import json, sys; from pathlib import Path\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from neusym.ingest.sources.acl_source import parse_acl_collection\n"
        "from neusym.store.paper_index import PaperDoc\n"
        "from neusym.ingest.retriever import training_pairs, train_encoder\n"
        f"docs = [PaperDoc.from_source(p) for f in {files!r} for p in parse_acl_collection(Path({str(corpus_dir)!r}) / f)]\n"
        "pairs = training_pairs(docs)\n"
        "def step(i, n, loss):\n"
        "    if i % 25 == 0 or i == n: print(f'step {i}/{n} loss {loss:.3f}', file=sys.stderr, flush=True)\n"
        f"rec = train_encoder(pairs, Path({str(out_dir)!r}), budget_s={minutes * 60}, on_step=step)\n"
        "print(rec.model_dump_json())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def grid_configs() -> dict[str, SearchConfig]:
    out = {}
    for bm25, minilm, title, sents in itertools.product((0.5, 1.0), (1.0, 1.5, 2.0), (0.25, 0.5), (0.0, 0.25, 0.5)):
        w = {"bm25": bm25, "minilm": minilm, "minilm_title": title, "minilm_sents": sents}
        out[json.dumps(w, sort_keys=True)] = SearchConfig(weights={**DEFAULT_WEIGHTS, **w})
    return out


def run_index(index: PaperIndex, qsets: dict[str, list[dict]], grid: bool) -> dict:
    res: dict = {"configs": {}}
    for cname, cfg in CONFIGS.items():
        res["configs"][cname] = {q: evaluate(index, qs, cfg) for q, qs in qsets.items()}
        r = res["configs"][cname]["concise"]
        h = res["configs"][cname]["hard"]
        print(f"  {cname:28s} concise dev R@1 {r['dev']['R@1']:.3f} R@5 {r['dev']['R@5']:.3f} | test "
              f"R@1 {r['test']['R@1']:.3f} R@5 {r['test']['R@5']:.3f} | hard test R@1 {h['test']['R@1']:.3f} "
              f"R@5 {h['test']['R@5']:.3f} | p95 {r['latency_ms']['p95']} ms", flush=True)
    if grid:  # chosen on dev (concise + hard dev questions, mean of R@1 and R@5), reported on test
        dev = [q for name in ("concise", "hard") for q in qsets[name] if q["split"] == "dev"]
        scored = []
        for key, cfg in grid_configs().items():
            r = evaluate(index, dev, cfg, repeat_latency=False)["dev"]
            scored.append((r["R@1"] + r["R@5"], r["R@1"], key))
        scored.sort(reverse=True)
        best = scored[0][2]
        cfg = grid_configs()[best]
        res["grid"] = {"chosen_on_dev": json.loads(best), "dev_score": scored[0][0],
                       "default_dev_score": next(s for s, _, k in scored if json.loads(k) == {
                           k2: DEFAULT_WEIGHTS[k2] for k2 in ("bm25", "minilm", "minilm_title", "minilm_sents")}),
                       "results": {q: evaluate(index, qs, cfg) for q, qs in qsets.items()}}
        r = res["grid"]["results"]["concise"]
        print(f"  grid choice {best}: concise test R@1 {r['test']['R@1']:.3f} R@5 {r['test']['R@5']:.3f}", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus-dir", type=Path, default=Path(os.environ.get("NEUSYM_ACL_CORPUS", "/work/shared/corpus/acl")))
    ap.add_argument("--runs", default="heldapart,self2.5k,self5k")
    ap.add_argument("--minutes", type=float, default=25.0, help="training budget per run (the setting's default)")
    ap.add_argument("--grid", action="store_true", help="also search fusion weights on dev (reported on test)")
    ap.add_argument("--models", type=Path, default=None, help="keep trained encoders here (default: a temporary dir)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "paper_search_adapted.json")
    args = ap.parse_args()

    from neusym.encode import DenseEncoder, get_encoder
    from neusym.settings import Settings

    base = get_encoder(Settings())
    base.warm_up()
    qsets = {name: load_questions(p) for name, p in QUESTION_SETS.items()}
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.update({
        "description": "Corpus-adapted all-MiniLM-L6-v2 (neusym train-retriever) vs the packaged encoder: paper "
                       "search R@k per split and question set (test = only reported), latency per query in ms.",
        "questions": {k: {s: sum(1 for q in v if q["split"] == s) for s in ("dev", "test")} for k, v in qsets.items()},
        "machine": {"cores": os.cpu_count()},
    })
    result.setdefault("runs", {})
    baselines: dict[str, dict] = result.setdefault("packaged_encoder", {})
    models_root = args.models or Path(tempfile.mkdtemp(prefix="neusym-adapt-"))
    done_baselines: set[str] = set()
    for run in [r.strip() for r in args.runs.split(",") if r.strip()]:
        size = EVAL_SIZE[run]
        docs = load_docs(args.corpus_dir, size)
        print(f"[{run}] training on {TRAIN_SETS[run]} ({args.minutes} min budget)", flush=True)
        model_dir = models_root / run
        if model_dir.exists():
            record = json.loads((model_dir / "retriever.json").read_text())
        else:
            record = train_child(args.corpus_dir, TRAIN_SETS[run], model_dir, args.minutes)
        print(f"[{run}] trained {record['id']}: {record['steps']} steps, {record['train_seconds']} s, "
              f"peak {record['peak_rss_mb']} MB", flush=True)
        adapted = DenseEncoder("onnx-int8", base.models_dir, retriever_dir=model_dir)
        adapted.warm_up()
        entry = {"trained_on": TRAIN_SETS[run], "evaluated_on": CORPORA[size], "papers": len(docs), "training": record}
        with tempfile.TemporaryDirectory() as tmp:
            if size not in done_baselines:
                print(f"[{run}] packaged encoder, {size}", flush=True)
                index = PaperIndex(EdgeBackend(Path(tmp) / "base"))
                build = index.build(docs)
                baselines[size] = {"papers": len(docs), "build": build, **run_index(index, qsets, args.grid)}
                index.close()
                done_baselines.add(size)
            print(f"[{run}] adapted encoder, {size}", flush=True)
            index = PaperIndex(EdgeBackend(Path(tmp) / "adapted"), encoder=adapted)
            entry["build"] = index.build(docs)
            entry.update(run_index(index, qsets, args.grid))
            entry["load_avg_at_end"] = os.getloadavg()[0]
            index.close()
        result["runs"][run] = entry
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
