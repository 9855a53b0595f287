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
3. surfaces (issue X): the same 8 `/search` clients and the SQL attackers, plus one client per row of
   the X issue, back to back: `/v1/chat/completions` with ~1 MiB of newlines in the history (X1), `/ask/json`
   clients that hang up after 0.5 s while the LLM holds their call (X2), a feed whose watch query and
   matched title hold control characters, fetched with `Host: evil.example` (X4, X8), MCP `calculate_expr`
   of `comb(10**6, 5*10**5)` and of an expression that runs into the 2 s budget (X5), MCP `view_image`
   with a 1e300 box (X6), `prompts/get` with a path as paper id (X7), `/search.ris` and HEAD requests
   (X9, X10), and a `/healthz` prober every 50 ms. The server's LLM is an endpoint on loopback in this
   process (tests/service_support.HangingEndpoint: holds each call 3 s, notices a client that leaves), with
   NEUSYM_ASK_CONCURRENCY=2.
Measured: `/search` p50/p95/p99 per phase, `/healthz` p99, `/overview` p95 in phase 3, status codes of
every response, peak RSS of the server process and all its descendants (its SQL and expression workers)
sampled every 50 ms from /proc, RSS after the attack, the most LLM calls in flight at the endpoint.
Targets (issues S and X): peak server RSS <= 3 GB; `/search` p95 <= 150 ms and `/healthz` p99 <= 150 ms
under the attack; LLM calls in flight never above NEUSYM_ASK_CONCURRENCY; 0 responses with status 500.
The clients run in this process and share the 2 cores with the server.
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
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from service_load import NEUSYM, REPO, ensure_corpus, free_port, percentile, query_pool, rss_mb  # noqa: E402
from tests.service_support import HangingEndpoint  # noqa: E402

ASK_CONCURRENCY = 2
BAD_WATCH = "bell"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
ANSWER = {"thought": "done", "action": {"action_type": "GenerateAnswer", "parameters": {"answer": "done"}}}

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


async def phase(url: str, pool: list, seconds: float, searchers: int, attackers: int, x_mix: bool = False,
                only: set[str] | None = None) -> dict:
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

    surfaces: Counter = Counter()
    healthz: list[float] = []
    overview: list[float] = []
    checks: Counter = Counter()

    async def prober() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            while time.perf_counter() < deadline:
                for path, into in (("/healthz", healthz), ("/overview", overview)):
                    t0 = time.perf_counter()
                    r = await c.get(path)
                    surfaces[f"{path} {r.status_code}"] += 1
                    into.append((time.perf_counter() - t0) * 1000)
                await asyncio.sleep(0.05)

    async def surface(name: str, send) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as c:
            while time.perf_counter() < deadline:
                try:
                    r = await send(c)
                    surfaces[f"{name} {r.status_code}"] += 1
                except httpx.ReadTimeout:
                    surfaces[f"{name} hung up"] += 1  # the abandoning client (X2)
                except httpx.HTTPError as exc:
                    surfaces[f"{name} {type(exc).__name__}"] += 1

    history = "\n" * 500_000 + "[1] A paper, p. 1 (paper 00000000-0000-0000-0000-000000000001)"

    async def x1(c):
        return await c.post("/v1/chat/completions", json={"model": "neusym-neusym", "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": history},
            {"role": "user", "content": "What is retrieval-augmented generation?"}]})

    async def x2(c):
        return await c.post("/ask/json", json={"question": "What is retrieval-augmented generation?",
                                               "method": "neusym"}, timeout=0.5)

    async def x4_x8(c):
        r = await c.get(f"/feeds/{BAD_WATCH}.atom", headers={"Host": "evil.example"})
        checks["feed_mentions_evil_host"] += b"evil.example" in r.content
        return r

    def mcp(name: str, arguments: dict, method: str = "tools/call"):
        async def send(c):
            params = {"name": name, "arguments": arguments}
            r = await c.post("/mcp", headers=MCP_HEADERS, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                                                "params": params})
            body = r.json()
            bad = body.get("error") or (body.get("result") or {}).get("isError")
            checks[f"{name} refused"] += bool(bad)
            return r
        return send

    async def x9_x10(c):
        await c.head("/healthz")
        return await c.get("/search.ris", params={"q": "question answering", "limit": 20})

    extra = []
    if x_mix:
        rows = {"x1": lambda: surface("x1 /v1 newlines", x1), "x2": lambda: surface("x2 /ask/json abandoned", x2),
                "x4": lambda: surface("x4/x8 feed", x4_x8),
                "x5": lambda: surface("x5 comb", mcp("calculate_expr", {"expr": "comb(10**6, 5*10**5)"})),
                "x5s": lambda: surface("x5 slow expr", mcp("calculate_expr",
                                                           {"expr": "len([x for x in [1]*9999 if x in [2]*9999])"})),
                "x6": lambda: surface("x6 view_image", mcp("view_image", {
                    "paper_id": "00000000-0000-0000-0000-000000000001", "page_number": 1,
                    "bounding_box": [0, 0, 1e300, 1e300]})),
                "x7": lambda: surface("x7 prompt", mcp("neusym_agent", {"question": "x", "paper_ids": "../../etc"},
                                                       "prompts/get")),
                "x9": lambda: surface("x9/x10 ris+head", x9_x10)}
        extra = [prober()] + [make() for name, make in rows.items() if only is None or name in only]
    await asyncio.gather(*(searcher() for _ in range(searchers)), *(attacker(k) for k in range(attackers)), *extra)
    out = {"search": {"requests": len(latencies), "p50_ms": round(statistics.median(latencies), 1),
                      "p95_ms": round(percentile(latencies, 95), 1), "p99_ms": round(percentile(latencies, 99), 1),
                      "max_ms": round(max(latencies), 1), "status": dict(search_status)},
           "sql": {"status": dict(sql_status), "errors": dict(sql_errors)} if attackers else None}
    if x_mix:
        out["healthz"] = {"requests": len(healthz), "p50_ms": round(statistics.median(healthz), 1),
                          "p99_ms": round(percentile(healthz, 99), 1), "max_ms": round(max(healthz), 1)}
        out["overview"] = {"requests": len(overview), "p50_ms": round(statistics.median(overview), 1),
                           "p95_ms": round(percentile(overview, 95), 1), "max_ms": round(max(overview), 1)}
        out["surfaces"] = dict(sorted(surfaces.items()))
        out["checks"] = dict(checks)
    return out


def add_bad_watch(home: Path) -> None:
    """A watch whose stored query (as an older store could hold it) and one matched title carry control
    characters: its feed must still be well-formed XML (X4)."""
    import sqlite3

    from neusym.settings import Settings
    from neusym.store.watches import WatchStore, check_watch

    settings = Settings(home=home)
    with WatchStore(settings) as store:
        watch = store.add(check_watch(BAD_WATCH, "question answering"), replace=True)
        store.record_run(watch, 0, [{"paper_id": "00000000-0000-0000-0000-0000000000b7", "rank": 1, "score": 1.0,
                                     "title": "Bell\x07 and escape\x1b in a title", "authors": ["A. Author"],
                                     "venue": "acl", "year": 2024, "snippet": "form\x0cfeed"}], 100, 0.0, initial=False)
    con = sqlite3.connect(home / "watches.sqlite")
    con.execute("UPDATE watches SET query = ? WHERE name = ?", ["question\x07 answering", BAD_WATCH])
    con.commit()
    con.close()


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
    add_bad_watch(args.home)
    llm = HangingEndpoint(hold_s=3.0, reply=ANSWER).__enter__()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NEUSYM_")},
           "NEUSYM_HOME": str(args.home), "HF_HUB_OFFLINE": "1", "NEUSYM_LLM_BASE_URL": llm.base_url,
           "NEUSYM_LLM_MODEL": "hanging", "NEUSYM_ASK_CONCURRENCY": str(ASK_CONCURRENCY)}
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
        with Peak(proc.pid) as surfaces_peak:
            surfaces = asyncio.run(phase(url, pool, args.seconds, 8, 2, x_mix=True))
        time.sleep(5)
        llm_after = llm.in_flight
        after_mb = rss_mb(proc.pid)
        alive = httpx.get(f"{url}/healthz", timeout=10).status_code
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        llm.__exit__(None, None, None)
    statuses = Counter()
    for ph in (quiet, attack, surfaces):
        statuses.update({str(k): v for k, v in ph["search"]["status"].items()})
        if ph["sql"]:
            statuses.update({str(k): v for k, v in ph["sql"]["status"].items()})
    statuses.update({k.rsplit(" ", 1)[1]: v for k, v in surfaces["surfaces"].items()})
    peak_mb = max(attack_peak.mb, surfaces_peak.mb)
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
                   "peak_surfaces": round(surfaces_peak.mb, 1), "after_attack": after_mb},
        "quiet": quiet,
        "attack": attack,
        "surfaces": surfaces,
        "llm": {"ask_concurrency": ASK_CONCURRENCY, "calls": llm.requests, "aborted": llm.aborted,
                "peak_in_flight": llm.peak, "in_flight_5s_after": llm_after},
        "responses_500": statuses.get("500", 0),
        "healthz_after": alive,
        "targets": {"peak_rss_mb_max": 3072, "search_p95_ms_max": 150, "healthz_p99_ms_max": 150,
                    "llm_in_flight_max": ASK_CONCURRENCY, "responses_500": 0},
        "met": {"peak_rss": peak_mb <= 3072,
                "search_p95": max(attack["search"]["p95_ms"], surfaces["search"]["p95_ms"]) <= 150,
                "healthz_p99": surfaces["healthz"]["p99_ms"] <= 150,
                "llm_in_flight": llm.peak <= ASK_CONCURRENCY,
                "no_500": statuses.get("500", 0) == 0},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
