"""Batch encoding on one session with a thread per core vs one single-threaded session per core side by side.

Usage:  .venv/bin/python benchmarks/encode_parallel.py [--xml ../shared/corpus/acl/2024.acl.xml] [--n 1000]
        [--rounds 2] [--out benchmarks/results/encode_parallel.json]

Texts: the first ``--n`` papers with an abstract in the ACL Anthology collection XML, as the crawl
publishes them ("title. abstract", the paper-text pass of ``neusym.encode.paper_text_vectors``, and the
titles alone). Encoders (onnx-int8, one text per call as by default): ``threads=1`` (one session, one
thread), ``threads=2`` (one session with two intra-op threads: what ``NEUSYM_DENSE_THREADS=0`` gave
on two cores before side-by-side sessions) and ``threads=0`` (now: one one-thread session per core,
``neusym.encode.PARALLEL_MIN_TEXTS``). For each: wall and CPU seconds of ``encode_spans`` over the
paper texts and of ``encode`` over the titles (best of ``--rounds``), texts per second, and the
largest difference of any vector component from the ``threads=1`` run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def papers(xml: Path, n: int) -> list[tuple[str, str]]:
    """(title, abstract) of the first ``n`` papers of a collection file that have an abstract."""
    out = []
    for p in ET.parse(xml).getroot().iter("paper"):
        t, a = p.find("title"), p.find("abstract")
        if t is not None and a is not None:
            out.append((" ".join("".join(t.itertext()).split()), " ".join("".join(a.itertext()).split())))
        if len(out) == n:
            break
    return out


def main() -> None:
    import numpy as np

    from neusym.encode import DenseEncoder, get_encoder
    from neusym.settings import Settings

    ap = argparse.ArgumentParser()
    ap.add_argument("--xml", type=Path, default=REPO.parent / "shared" / "corpus" / "acl" / "2024.acl.xml")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "encode_parallel.json")
    args = ap.parse_args()
    pairs = papers(args.xml, args.n)
    texts = [f"{t}. {a}" for t, a in pairs]
    spans = [[(len(t) + 2, len(t) + 2 + len(a))] for t, a in pairs]
    titles = [t for t, _ in pairs]
    models = get_encoder(Settings()).models_dir
    reference: dict[str, np.ndarray] = {}
    rows = []
    for threads in (1, 2, 0):
        enc = DenseEncoder("onnx-int8", models, threads=threads)
        enc.encode(["warm up"], batch_size=1)
        row: dict = {"threads": threads, "sessions_side_by_side": enc._workers(len(texts))}
        for name, run in (("paper_texts", lambda: enc.encode_spans(texts, spans)[0]),
                          ("titles", lambda: enc._encode_uncached(titles, 1))):
            best = None
            for _ in range(args.rounds):
                c0, t0 = time.process_time(), time.perf_counter()
                vectors = run()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                best = (wall, cpu) if best is None or wall < best[0] else best
            reference.setdefault(name, vectors)
            row[name] = {"wall_s": round(best[0], 2), "cpu_s": round(best[1], 2),
                         "texts_per_s": round(len(vectors) / best[0], 1),
                         "max_abs_diff_to_threads_1": float(np.abs(vectors - reference[name]).max())}
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = {"xml": args.xml.name, "papers": len(pairs), "rounds": args.rounds, "cores": len(os.sched_getaffinity(0)),
           "load_avg_at_end": [round(x, 2) for x in os.getloadavg()], "results": rows}
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
