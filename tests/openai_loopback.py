"""One OpenAI-compatible ``/v1/chat/completions`` server on loopback, shared by the tests that point
the real ``openai`` client (``OpenAICompatibleLLM``) at a scripted endpoint."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Callable


def completion(content: str, model: str, *, prompt_tokens: int, completion_tokens: int,
               cached_tokens: int | None = None) -> dict:
    """A ``chat.completion`` payload with one assistant message and the given usage."""
    usage: dict = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                   "total_tokens": prompt_tokens + completion_tokens}
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return {"id": "cmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": usage}


class LoopbackOpenAI:
    """Serves POSTs on 127.0.0.1:<free port> (``base_url`` ends in ``/v1``) while the ``with`` block runs.

    ``respond(body) -> (status, payload)`` answers each request from its JSON body; every request is
    recorded in ``received`` as ``{"path", "body", "auth"}``.
    """

    def __init__(self, respond: Callable[[dict], tuple[int, dict]]):
        self.received: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.received.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                status, payload = respond(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "LoopbackOpenAI":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
