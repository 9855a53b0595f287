"""Fuzz table: byte-level damage to real PDFs, ingested over a corpus that already holds the originals.

For each of the five sample papers (ACL Anthology PDFs in ``samples/pdfs``) the script builds
damaged copies: 20 KB blocks zeroed at three offsets, 200 random bit flips (two seeds), truncation
at 60% with a fresh ``%%EOF``, a duplicated 40 KB block, the first 3 KB zeroed behind a new
``%PDF-1.5`` header, and the title redacted from page 1 (a copy that lost its title). It ingests the
five originals into a fresh home, then ingests every damaged copy alone (``neusym.ingest.pipeline.ingest``,
the code path of ``neusym ingest``) and classifies the outcome:

- ``quarantined``: the parse rejected it (reason recorded);
- ``held``: parsed, but not loaded (lower quality than the stored paper, same text, or the same work
  as a stored paper);
- ``loaded complete``: loaded and the stored paper lost nothing (pages, chunks, sections, tables,
  characters of chunk text within the limits of :func:`neusym.ingest.admission.quality_losses`, same title);
- ``silent loss``: loaded and the stored paper lost content or its title, or a second paper
  appeared. The target is zero.

After each case the corpus is compared with the state before it. Writes
``benchmarks/results/bad_input_fuzz.json``.

Usage: ``python benchmarks/bad_input_fuzz.py [--backend pymupdf] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
import pymupdf  # noqa: E402

from neusym.ingest.admission import Content, quality_losses  # noqa: E402
from neusym.ingest.pipeline import ingest  # noqa: E402
from neusym.settings import Settings  # noqa: E402
from tests.damage import without_title, zeroed  # noqa: E402

pymupdf.TOOLS.mupdf_display_errors(False)
SAMPLES = ROOT / "samples" / "pdfs"


def mutations(src: Path, rng: random.Random) -> dict[str, bytes]:
    """Damaged copies of ``src`` (name -> bytes)."""
    data = src.read_bytes()
    n = len(data)
    out: dict[str, bytes] = {}
    for k in range(3):
        out[f"zeroed_20kb_{k}"] = zeroed(data, rng.randrange(2000, n - 30000))
    for k in range(2):
        d = bytearray(data)
        for _ in range(200):
            i = rng.randrange(1000, n - 1000)
            d[i] ^= 1 << rng.randrange(8)
        out[f"bit_flips_{k}"] = bytes(d)
    out["truncated_60pct_eof"] = data[: int(n * 0.6)] + b"\n%%EOF\n"
    off = rng.randrange(2000, n - 60000)
    out["duplicated_block"] = data[:off] + data[off:off + 40000] + data[off:]
    header = bytearray(zeroed(data, 0, 3000))
    header[0:8] = b"%PDF-1.5"
    out["damaged_header"] = bytes(header)
    out["title_removed"] = without_title(src)
    return out


def state(db: Path) -> dict[str, tuple[str, Content]]:
    """paper_id -> (title, content) of every paper in the corpus."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for pid, title in con.execute("SELECT paper_id::VARCHAR, title FROM metadata").fetchall():
            q = lambda t: con.execute(f"SELECT count(*) FROM {t} WHERE ref_paper_id = ?::UUID", [pid]).fetchone()[0]  # noqa: E731
            chars = con.execute("SELECT coalesce(sum(length(text_content)), 0) FROM chunks WHERE ref_paper_id = ?::UUID",
                                [pid]).fetchone()[0]
            out[pid] = (title, Content(q("pages"), q("chunks"), q("sections"), q("tables"), int(chars)))
        return out
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="pymupdf")
    ap.add_argument("--seed", type=int, default=20261124)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bad_input_fuzz.json"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="neusym-fuzz-"))
    settings = Settings(home=work / "home", parse_backend=args.backend)
    originals = sorted(SAMPLES.glob("*.pdf"))
    t0 = time.perf_counter()
    ingest(originals, settings)
    reference = state(settings.db_path)
    rng = random.Random(args.seed)
    cases = []
    for src in originals:
        for kind, data in mutations(src, rng).items():
            path = work / "inbox" / f"{src.stem}.{kind}.pdf"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(data)
            before = state(settings.db_path)
            report = ingest([path], settings)
            after = state(settings.db_path)
            [parsed] = report.parsed
            case = {"paper": src.name, "mutation": kind, "bytes": len(data), "parse": parsed.status,
                    "reason": parsed.reason}
            if parsed.status == "quarantined":
                case["outcome"] = "quarantined"
            elif report.held:
                case["outcome"], case["reason"] = "held", report.held[0]["reason"]
            else:
                case["outcome"] = "loaded"
            # what happened to the stored papers (against the reference corpus of complete originals)
            losses = []
            for pid, (title, content) in reference.items():
                if pid not in after:
                    losses.append(f"{pid} removed")
                    continue
                lost = quality_losses(after[pid][1], content)
                if after[pid][0] != title:
                    lost.append(f"title {title[:30]!r} -> {after[pid][0][:30]!r}")
                losses += [f"{title[:30]}: {x}" for x in lost]
            extra = sorted(set(after) - set(reference))
            if extra:
                losses.append(f"second paper(s) added: {[after[p][0][:40] for p in extra]}")
            case["changed"] = after != before
            case["stored_losses"] = losses
            if case["outcome"] == "loaded":
                case["outcome"] = "silent loss" if losses else "loaded complete"
            cases.append(case)
            print(f"{src.stem[:28]:28} {kind:22} {case['outcome']:16} {(case['reason'] or '')[:90]}", flush=True)
            if losses:  # put the reference corpus back for the next case
                ingest(originals, Settings(home=settings.home, parse_backend=args.backend), force=True)
    summary: dict[str, int] = {}
    for c in cases:
        summary[c["outcome"]] = summary.get(c["outcome"], 0) + 1
    by_kind: dict[str, dict[str, int]] = {}
    for c in cases:
        by_kind.setdefault(c["mutation"], {}).setdefault(c["outcome"], 0)
        by_kind[c["mutation"]][c["outcome"]] += 1
    result = {
        "cases": len(cases), "papers": len(originals), "backend": args.backend, "seed": args.seed,
        "summary": summary, "by_mutation": by_kind, "seconds": round(time.perf_counter() - t0, 1),
        "load_average": os.getloadavg(), "details": cases,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("cases", "summary", "by_mutation", "seconds")}, indent=1))


if __name__ == "__main__":
    main()
