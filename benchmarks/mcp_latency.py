"""MCP tool-call latency: the same calls over MCP (streamable HTTP on `neusym serve`, and stdio to
`neusym mcp`) next to the REST endpoints and the in-process tool, and the time from spawning
`neusym mcp` to the first answered tool call.

Usage:
    .venv/bin/python benchmarks/mcp_latency.py [--home DIR] [--calls 200] [--out benchmarks/results/mcp_latency.json]

Corpus: the 3,340-paper crawled ACL corpus of benchmarks/service_load.py (EMNLP 2023 main, ACL 2024
long, Findings 2024; metadata only), built into DIR (default /tmp/neusym-service-load/home) when it
has no published version yet.

Calls, sequential, one client (the question is the cost a transport adds, not throughput):
`search_papers` (distinct queries of service_load's pool, limit 10) vs `GET /search` (limit 10; it
also counts facets over the top 100, which the tool does not); `retrieve_from_database` (the 6
analyst queries of service_load) vs `POST /sql`; `retrieve_from_vectorstore` (BM25 over
metadata.abstract, limit 5) vs the same :class:`CorpusTools` call in this process (there is no REST
endpoint for it). Latency from sending the request to the parsed response, after 10 warm-up calls.
MCP over HTTP runs in the SDK's stateless mode with JSON responses (as `neusym serve` mounts it);
the client is the SDK's `ClientSession` over `streamable_http_client`. Target (issue N): MCP
overhead <= 5 ms p50 over REST for the same call; first tool call <= 2 s after `neusym mcp` starts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import service_load  # noqa: E402  (the corpus and the query pool of the service benchmark)

NEUSYM = str(Path(sys.executable).parent / "neusym")


def summary(values: list[float]) -> dict:
    ms = [v * 1000 for v in values]
    return {"calls": len(ms), "p50_ms": round(service_load.percentile(ms, 50), 2),
            "p95_ms": round(service_load.percentile(ms, 95), 2), "max_ms": round(max(ms), 2)}


def timed(fn, args_list: list, warmup: int = 10) -> list[float]:
    for a in args_list[:warmup]:
        fn(a)
    out = []
    for a in args_list[warmup:]:
        started = time.perf_counter()
        fn(a)
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=Path("/tmp/neusym-service-load/home"))
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "mcp_latency.json")
    args = parser.parse_args()

    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    from neusym.interfaces.service.corpus import VersionHolder
    from neusym.interfaces.service.mcp_client import McpClient
    from neusym.interfaces.service.tools import CorpusTools
    from neusym.settings import Settings

    built = service_load.ensure_corpus(args.home)
    env = dict(os.environ, NEUSYM_HOME=str(args.home), HF_HUB_OFFLINE="1")
    n = args.calls + 10
    pool = service_load.query_pool(args.home, n=3 * n)
    queries = [q for q, _ in pool]
    sqls = [service_load.SQL[i % len(service_load.SQL)] for i in range(n)]
    vector_queries = queries[n:2 * n]
    results: dict = {"benchmark": "mcp_latency", "command": " ".join(["python", *sys.argv]),
                     "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                                 "loadavg_before": [round(x, 2) for x in os.getloadavg()]},
                     "corpus": {"home": str(args.home), **built}, "calls_per_row": args.calls}

    # -- stdio: time to the first answered call, then the calls
    started = time.perf_counter()
    params = StdioServerParameters(command=NEUSYM, args=["mcp"], env=env)
    stdio = McpClient(lambda: stdio_client(params))
    initialized = time.perf_counter() - started
    first = stdio.call_tool("search_papers", {"query": "retrieval augmented generation", "limit": 10})
    first_s = time.perf_counter() - started
    assert not first.is_error, first.content
    results["stdio_startup"] = {"spawn_to_initialized_s": round(initialized, 3),
                                "spawn_to_first_tool_result_s": round(first_s, 3)}

    def mcp_calls(client: McpClient) -> dict:
        def call(name: str):
            def run(arguments: dict):
                r = client.call_tool(name, arguments)
                if r.is_error:
                    raise RuntimeError(r.content[0].text)
            return run
        return {
            "search_papers": summary(timed(call("search_papers"), [{"query": q, "limit": 10} for q in queries[:n]])),
            "retrieve_from_database": summary(timed(call("retrieve_from_database"), [{"sql": s} for s in sqls])),
            "retrieve_from_vectorstore": summary(timed(call("retrieve_from_vectorstore"), [
                {"query": q, "collection_name": "text_bm25_en", "table_name": "metadata", "column_name": "abstract",
                 "limit": 5} for q in vector_queries])),
        }

    try:
        results["mcp_stdio"] = mcp_calls(stdio)
    finally:
        stdio.close()

    # -- neusym serve: REST and MCP over HTTP on one server process
    port = service_load.free_port()
    server = subprocess.Popen([NEUSYM, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("neusym serve did not start")
            time.sleep(0.2)
        with httpx.Client(base_url=url, timeout=60) as rest:
            def get_search(q: str) -> None:
                rest.get("/search", params={"q": q, "limit": 10}).raise_for_status()

            def post_sql(s: str) -> None:
                rest.post("/sql", json={"sql": s}).raise_for_status()

            results["rest"] = {"search_papers": summary(timed(get_search, queries[:n])),
                               "retrieve_from_database": summary(timed(post_sql, sqls))}
        http = McpClient(lambda: streamable_http_client(f"{url}/mcp"))
        try:
            results["mcp_http"] = mcp_calls(http)
        finally:
            http.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)

    # -- the same tool in this process (no transport)
    settings = Settings(home=args.home)
    holder = VersionHolder(settings, watch_interval_s=0)
    tools = CorpusTools(settings, holder)
    try:
        results["in_process"] = {
            "search_papers": summary(timed(lambda q: tools.search_papers(q, limit=10), queries[:n])),
            "retrieve_from_database": summary(timed(tools.retrieve_from_database, sqls)),
            "retrieve_from_vectorstore": summary(timed(
                lambda q: tools.retrieve_from_vectorstore(q, "text_bm25_en", "metadata", "abstract", "", 5),
                vector_queries)),
        }
    finally:
        holder.close()

    over = {}
    for name in ("search_papers", "retrieve_from_database"):
        over[name] = {"mcp_http_minus_rest_p50_ms": round(results["mcp_http"][name]["p50_ms"]
                                                          - results["rest"][name]["p50_ms"], 2)}
    for name in ("search_papers", "retrieve_from_database", "retrieve_from_vectorstore"):
        over.setdefault(name, {})["mcp_http_minus_in_process_p50_ms"] = round(
            results["mcp_http"][name]["p50_ms"] - results["in_process"][name]["p50_ms"], 2)
        over[name]["mcp_stdio_minus_in_process_p50_ms"] = round(
            results["mcp_stdio"][name]["p50_ms"] - results["in_process"][name]["p50_ms"], 2)
    results["overhead"] = over
    results["targets"] = {
        "mcp_overhead_over_rest_p50_ms_max": 5.0,
        "met_overhead": all(v["mcp_http_minus_rest_p50_ms"] <= 5.0 for k, v in over.items()
                            if "mcp_http_minus_rest_p50_ms" in v),
        "first_call_after_start_s_max": 2.0,
        "met_first_call": results["stdio_startup"]["spawn_to_first_tool_result_s"] <= 2.0,
    }
    results["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
