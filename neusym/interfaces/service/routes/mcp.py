"""``/mcp``: the MCP server (:mod:`neusym.interfaces.service.mcp`, the corpus as tools for LLM clients)
as a route of the app, behind the same authentication as the other API routes. Its ``ask`` tool runs
the agent as ``POST /ask/json`` does (:func:`~.ask.run_agent`: the same LLM slots and queue)."""

from __future__ import annotations

import functools
import threading
from typing import Callable

from fastapi import APIRouter, Request
from fastapi.responses import Response

from neusym.interfaces.service.mcp import McpEndpoint, build_server
from neusym.interfaces.service.models import AskRequest
from neusym.interfaces.service.routes.ask import run_agent
from neusym.interfaces.service.state import ServiceState

router = APIRouter()
"""``GET|POST|DELETE /mcp`` (not in the OpenAPI document: JSON-RPC)."""


def mcp_endpoint(state: ServiceState) -> McpEndpoint:
    """The MCP server over the app's ``state`` (its version holder and pools; ``ask`` queues for the
    LLM like ``/ask``, :func:`mcp_ask`) as an ASGI app; the app keeps it as ``app.state.mcp``."""
    return McpEndpoint(build_server(state.settings, state.holder, ask=functools.partial(mcp_ask, state),
                                    run_blocking=state.run))


def mcp_ask(state: ServiceState, question: str, paper_ids: list[str], method: str | None, answer_format: str | None,
            cancel: threading.Event) -> dict:
    """The MCP ``ask`` tool's agent run (an :data:`~neusym.interfaces.service.tools.AskRunner` once
    ``state`` is bound): refused at once when the LLM's queue is full, else :func:`~.ask.run_agent`."""
    state.llm.check_room()
    body = AskRequest(question=question, paper_ids=paper_ids, method=method, answer_format=answer_format)
    return run_agent(state, body, lambda kind, data: None, cancel)


class _Asgi(Response):
    """Hands the request to an ASGI app once the route's dependencies (authentication) passed."""

    def __init__(self, asgi: Callable) -> None:
        self.asgi, self.background = asgi, None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        await self.asgi(scope, receive, send)


@router.api_route("/mcp", methods=["GET", "POST", "DELETE"], include_in_schema=False)  # JSON-RPC: not OpenAPI
async def mcp(request: Request) -> Response:
    """The MCP server (Model Context Protocol, streamable HTTP, stateless, JSON responses): the
    five NeuSym-RAG actions, paper search, paper outlines and ask as tools for any MCP client
    (docs/mcp.md); behind the same API key as the other routes."""
    return _Asgi(request.app.state.mcp)
