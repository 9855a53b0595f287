"""Helpers of the service tests: the app served by a real uvicorn on loopback, a scripted
OpenAI-compatible endpoint for the agent, and a copy of the sample corpus home that a test may
publish into without touching the session's shared one."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import uvicorn

from .openai_loopback import LoopbackOpenAI, completion


class LiveServer:
    """Serve an ASGI app with uvicorn on 127.0.0.1:<free port> in a thread while the ``with`` block runs
    (lifespan included, as ``neusym serve`` does). ``url`` has no trailing slash."""

    def __init__(self, app: Any):
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        from neusym.interfaces.service.runner import uvicorn_options

        options = {**uvicorn_options(), "timeout_graceful_shutdown": 2}
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **options))
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("uvicorn stopped during startup")
            if time.monotonic() > deadline:
                raise TimeoutError("uvicorn did not start within 120 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


def question_of(messages: list[dict]) -> str:
    """The [Question] of an agent request (its task message)."""
    for m in messages:
        content = m.get("content")
        if m.get("role") == "user" and isinstance(content, str) and "[Question]" in content:
            return content.split("[Question]:", 1)[-1].split("\n", 1)[0].strip()
    return ""


class ScriptedAgentLLM:
    """An OpenAI-compatible endpoint on loopback that answers agent turns from a script.

    ``replies``: {question: [reply, ...]} — each reply a dict (sent as JSON) or a callable of the
    request messages; ``delay_s``: seconds to wait before each reply (to watch a stream arrive).
    Every agent request is recorded in ``requests`` as ``{"question", "messages"}``.
    """

    def __init__(self, replies: dict[str, list], delay_s: float = 0.0):
        self.replies = {q: list(r) for q, r in replies.items()}
        self.delay_s = delay_s
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self.endpoint = LoopbackOpenAI(self._respond)

    def _respond(self, body: dict) -> tuple[int, dict]:
        messages = body["messages"]
        question = question_of(messages)
        with self._lock:
            self.requests.append({"question": question, "messages": messages})
            queue = self.replies.get(question)
            if not queue:
                return 500, {"error": {"message": f"no scripted reply left for {question!r}", "type": "server_error"}}
            reply = queue.pop(0)
        if callable(reply):
            reply = reply(messages)
        if self.delay_s:
            time.sleep(self.delay_s)
        text = reply if isinstance(reply, str) else json.dumps(reply)
        return 200, completion(text, body.get("model", "scripted"), prompt_tokens=900, completion_tokens=40)

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    def __enter__(self) -> "ScriptedAgentLLM":
        self.endpoint.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.endpoint.__exit__(*exc)


def copy_home(source: Path, target: Path) -> Path:
    """A copy of a NEUSYM_HOME (writer database, staging, versions; shards copied sparse) at ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if shutil.which("cp"):
        subprocess.run(["cp", "-a", "--sparse=always", str(source), str(target)], check=True)
    else:
        shutil.copytree(source, target, symlinks=True)
    return target


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.2) -> Any:
    """Poll ``condition`` until it returns something truthy (returned) or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what} (last: {last!r})")


def sse_events(response: httpx.Response) -> list[tuple[str, dict, float]]:
    """(event, data, seconds since the request) of a text/event-stream response, as they arrive."""
    started = time.monotonic()
    events, kind, data = [], "message", []
    for line in response.iter_lines():
        if line.startswith(":"):
            continue
        if line == "":
            if data:
                events.append((kind, json.loads("\n".join(data)), time.monotonic() - started))
            kind, data = "message", []
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    return events


class HangingEndpoint:
    """An OpenAI-compatible endpoint on loopback that holds every chat request for ``hold_s`` seconds
    (then answers ``reply``) and notices a client that hangs up: the request then ends at once, as a
    real server's generation does when its client goes away. ``in_flight`` counts requests being
    held now, ``peak`` the most held at once, ``requests`` all that arrived, ``aborted`` those whose
    client left before the answer."""

    def __init__(self, hold_s: float, reply: dict | str):
        import http.server
        import select

        self.hold_s, self.reply = hold_s, reply
        self.in_flight = self.peak = self.requests = self.aborted = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer._lock:
                    outer.requests += 1
                    outer.in_flight += 1
                    outer.peak = max(outer.peak, outer.in_flight)
                gone = False
                try:
                    deadline = time.monotonic() + outer.hold_s
                    while time.monotonic() < deadline:
                        readable, _, _ = select.select([self.connection], [], [], 0.05)
                        if readable and not self.connection.recv(1, socket.MSG_PEEK):
                            gone = True
                            break
                finally:
                    with outer._lock:
                        outer.in_flight -= 1
                        outer.aborted += gone
                if gone:
                    self.close_connection = True
                    return
                text = outer.reply if isinstance(outer.reply, str) else json.dumps(outer.reply)
                data = json.dumps(completion(text, body.get("model", "m"), prompt_tokens=10,
                                             completion_tokens=5)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "HangingEndpoint":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
