"""Service under attack: `/search` latency and the server's memory while clients send SQL built to
exhaust memory and CPU (the S issue: "one request must not take the server down").

Usage:
    .venv/bin/python benchmarks/service_attack.py [--home DIR] [--seconds 60] [--out benchmarks/results/service_attack.json]

Corpus: the 3,340 papers of benchmarks/service_load.py (ACL Anthology EMNLP 2023 main, ACL 2024 long,
Findings 2024; metadata only), crawled from ../shared/corpus/acl/*.xml into DIR when it has no
published version yet (shared with service_load.py: the same default DIR).

Server: `neusym serve` as its own process with its shipped defaults (1 worker, SQL budget
NEUSYM_SQL_MEMORY_MB=1024 per query, NEUSYM_SQL_WORKERS=2, NEUSYM_SQL_TIMEOUT_S=10).

Phases, each `--seconds` long:
1. quiet: 8 `/search` clients back to back (distinct queries of service_load.query_pool);
2. attack: the same 8 `/search` clients while 2 clients send memory-heavy and CPU-heavy SQL back to back
   (:data:`ATTACKS`: 100M-element lists, 1 GB strings, a 1e9-row shuffle, a cross join), each of
   which took 2.6-9.2 GB of server memory before the budget.
Measured: `/search` p50/p95/p99 per phase, status codes of every response, peak RSS of the server
process and all its descendants (its SQL workers) sampled every 50 ms from /proc, RSS after the
attack. Targets (issue S): peak server RSS <= 3 GB under the attack; `/search` p95 <= 150 ms meanwhile;
0 responses with status 500. The clients run in this process and share the 2 cores with the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_load import NEUSYM, REPO, ensure_corpus, free_port, percentile, query_pool, rss_mb  # noqa: E402

ATTACKS = [
    "SELECT range(100000000)",
    "SELECT sum(x) FROM (SELECT unnest(range(100000000)) x)",
    "SELECT repeat('x', 1000000000)",
    "SELECT x FROM range(1000000000) t(x) ORDER BY random()",
    "SELECT list(x) FROM range(600000000) t(x)",
    "SELECT count(*) FROM metadata a, metadata b, metadata c",
]
"""The S issue's B1 probes (4-9 GB each before the budget), a 1e9-row shuffle and a 3-way cross join."""


class Peak:
    """Peak RSS (MB) of a process tree, sampled every 50 ms in a thread."""

    def __init__(self, pid: int):
        self.pid, self.mb, self._stop = pid, 0.0, threading.Event()

    def __enter__(self) -> "Peak":
        def watch() -> None:
            while not self._stop.is_set():
                self.mb = max(self.mb, rss_mb(self.pid) or 0.0)
                self._stop.wait(0.05)

        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


async def phase(url: str, pool: list, seconds: float, searchers: int, attackers: int) -> dict:
    deadline = time.perf_counter() + seconds
    latencies: list[float] = []
    search_status: Counter = Counter()
    sql_status: Counter = Counter()
    sql_errors: Counter = Counter()
    nxt = [0]

    async def searcher() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=1)) as c:
            while time.perf_counter() < deadline:
                text, filters = pool[nxt[0] % len(pool)]
                nxt[0] += 1
                t0 = time.perf_counter()
                try:
                    r = await c.get("/search", params={"q": text, "limit": 10, **filters})
                    await r.aread()
                    search_status[r.status_code] += 1
                    if r.status_code == 200:
                        latencies.append((time.perf_counter() - t0) * 1000)
                except httpx.HTTPError as exc:
                    search_status[type(exc).__name__] += 1

    async def attacker(offset: int) -> None:
        i = offset
        async with httpx.AsyncClient(base_url=url, timeout=120) as c:
            while time.perf_counter() < deadline:
                try:
                    r = await c.post("/sql", json={"sql": ATTACKS[i % len(ATTACKS)]})
                    sql_status[r.status_code] += 1
                    if r.status_code != 200:
                        sql_errors[r.json().get("error", "?")] += 1
                except httpx.HTTPError as exc:
                    sql_status[type(exc).__name__] += 1
                i += 1

    await asyncio.gather(*(searcher() for _ in range(searchers)), *(attacker(k) for k in range(attackers)))
    return {"search": {"requests": len(latencies), "p50_ms": round(statistics.median(latencies), 1),
                       "p95_ms": round(percentile(latencies, 95), 1), "p99_ms": round(percentile(latencies, 99), 1),
                       "max_ms": round(max(latencies), 1), "status": dict(search_status)},
            "sql": {"status": dict(sql_status), "errors": dict(sql_errors)} if attackers else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", type=Path, default=Path("/tmp/neusym-service-load/home"))
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "service_attack.json")
    args = ap.parse_args()
    corpus = ensure_corpus(args.home)
    pool = query_pool(args.home)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NEUSYM_")},
           "NEUSYM_HOME": str(args.home), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([NEUSYM, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("neusym serve did not start")
            time.sleep(0.2)
        load_before = os.getloadavg()
        idle_mb = rss_mb(proc.pid)
        with Peak(proc.pid) as quiet_peak:
            quiet = asyncio.run(phase(url, pool, args.seconds, 8, 0))
        with Peak(proc.pid) as attack_peak:
            attack = asyncio.run(phase(url, pool[len(pool) // 2:], args.seconds, 8, 2))
        time.sleep(2)
        after_mb = rss_mb(proc.pid)
        alive = httpx.get(f"{url}/healthz", timeout=10).status_code
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    statuses = Counter()
    for ph in (quiet, attack):
        statuses.update({str(k): v for k, v in ph["search"]["status"].items()})
        if ph["sql"]:
            statuses.update({str(k): v for k, v in ph["sql"]["status"].items()})
    out = {
        "benchmark": "service_attack",
        "command": f"python benchmarks/service_attack.py --seconds {args.seconds:g}",
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "loadavg_before": load_before,
                    "loadavg_after": os.getloadavg()},
        "corpus": {"papers": 3340, **corpus},
        "server": "neusym serve (1 worker, shipped defaults: NEUSYM_SQL_MEMORY_MB=1024, NEUSYM_SQL_WORKERS=2, "
                  "NEUSYM_SQL_TIMEOUT_S=10)",
        "attacks": ATTACKS,
        "rss_mb": {"idle": idle_mb, "peak_quiet": round(quiet_peak.mb, 1), "peak_attack": round(attack_peak.mb, 1),
                   "after_attack": after_mb},
        "quiet": quiet,
        "attack": attack,
        "responses_500": statuses.get("500", 0),
        "healthz_after": alive,
        "targets": {"peak_rss_mb_max": 3072, "search_p95_ms_max": 150, "responses_500": 0},
        "met": {"peak_rss": attack_peak.mb <= 3072, "search_p95": attack["search"]["p95_ms"] <= 150,
                "no_500": statuses.get("500", 0) == 0},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
