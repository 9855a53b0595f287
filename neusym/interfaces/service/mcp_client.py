"""neusym's own agent driven through a neusym MCP server: the proof that a client model sees what
our agent sees, and a way to run the agent against a corpus served elsewhere.

:class:`McpClient` is a synchronous facade over the official SDK's ``ClientSession`` (stdio or
streamable HTTP), running the session in a thread of its own. :class:`McpEnvironment` is an agent
:class:`~neusym.query.agent.actions.Environment` whose four retrieval/calculation actions are
calls of the server's tools (:data:`neusym.interfaces.service.mcp.TOOL_OF_ACTION`) and whose
[Database Schema] and [Vectorstore Schema] are the server's resources; the vector-search enums
come from the tool's input schema. The loop itself (:func:`neusym.query.agent.react.run_loop`),
the prompts and the answer stay in this process.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import threading
from typing import Any, Callable

from neusym.interfaces.service.mcp import TOOL_OF_ACTION
from neusym.query.agent.actions import Action, Environment, Observation, truncate_observation
from neusym.settings import Settings

CALL_TIMEOUT_S = 600.0
"""Longest wait for one MCP request (an ``ask`` on the offline model can take minutes under load)."""


class McpClient:
    """A synchronous MCP client session. ``connect``: a zero-argument callable returning the SDK's
    transport context manager (``lambda: stdio_client(params)`` or ``lambda:
    streamable_http_client(url, http_client=...)``); the session is opened at construction (raises
    what the transport raises) and closed by :meth:`close`. Thread-safe: requests are sent one at a
    time in the session's own event loop."""

    def __init__(self, connect: Callable[[], Any], *, timeout_s: float = CALL_TIMEOUT_S):
        self.timeout_s = timeout_s
        self._loop = asyncio.new_event_loop()
        self._queue: asyncio.Queue | None = None
        self._ready: concurrent.futures.Future = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._loop.run_forever, name="neusym-mcp-client", daemon=True)
        self._thread.start()
        self._done = asyncio.run_coroutine_threadsafe(self._serve(connect), self._loop)
        try:
            self._ready.result(timeout=timeout_s)
        except BaseException:
            self.close()
            raise

    async def _serve(self, connect: Callable[[], Any]) -> None:
        from mcp import ClientSession

        self._queue = asyncio.Queue()
        try:
            async with connect() as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    self._ready.set_result(None)
                    while True:
                        item = await self._queue.get()
                        if item is None:
                            return
                        make, future = item
                        if not future.cancelled():
                            self._start(make(session), future)
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise

    def _start(self, coroutine: Any, future: concurrent.futures.Future) -> None:
        """Run one request as a task of the session's loop; cancelling ``future`` cancels the task (the
        SDK then tells the server with ``notifications/cancelled``)."""
        task = asyncio.ensure_future(coroutine)

        def settle(t: asyncio.Task) -> None:
            try:
                if t.cancelled():
                    future.cancel()
                elif t.exception() is not None:
                    future.set_exception(t.exception())
                else:
                    future.set_result(t.result())
            except concurrent.futures.InvalidStateError:  # the caller cancelled it meanwhile
                pass

        task.add_done_callback(lambda t: None if future.done() else settle(t))
        future.add_done_callback(lambda f: f.cancelled() and self._loop.call_soon_threadsafe(task.cancel))

    def submit(self, make: Callable[[Any], Any]) -> concurrent.futures.Future:
        """Send one request without waiting: ``make(session)`` is a coroutine of the SDK's
        ``ClientSession`` (e.g. ``lambda s: s.call_tool(name, args)``); cancel the returned future to
        cancel the request."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (make, future))
        return future

    def _request(self, make: Callable[[Any], Any]) -> Any:
        future = self.submit(make)
        try:
            return future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def call_tool(self, name: str, arguments: dict) -> Any:
        """One ``tools/call``; returns the SDK's ``CallToolResult`` (``is_error`` for tool errors)."""
        return self._request(lambda s: s.call_tool(name, arguments))

    def list_tools(self) -> list[Any]:
        """The server's tools (SDK ``Tool`` objects with ``name``, ``description``, ``input_schema``)."""
        return self._request(lambda s: s.list_tools()).tools

    def read_resource(self, uri: str) -> str:
        """The text of one resource."""
        return self._request(lambda s: s.read_resource(uri)).contents[0].text

    def close(self) -> None:
        """End the session and stop its thread (idempotent)."""
        if self._loop.is_closed():
            return
        if self._queue is not None:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, None)
        try:
            self._done.result(timeout=30)
        except BaseException:  # noqa: BLE001 - closing must not fail
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> "McpClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def observation_of(result: Any, tool: str) -> Observation:
    """The agent :class:`Observation` of a tool result: its text (an error result becomes the
    ``[Error]: ...`` observation the agent would have got, without the SDK's "Error executing
    tool" prefix), the PNG of an image content and its pixel size from the structured content."""
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    images = [c for c in result.content if getattr(c, "type", None) == "image"]
    text = "\n".join(texts)
    if result.is_error:
        prefix = f"Error executing tool {tool}: "
        return Observation(text=text[len(prefix):] if text.startswith(prefix) else text, error=True)
    data = result.structured_content or {}
    png = base64.b64decode(images[0].data) if images else None
    size = (data["width"], data["height"]) if png and data.get("width") else None
    return Observation(text=text, image_png=png, image_size=size, data=data)


class McpEnvironment(Environment):
    """An agent environment whose actions run as tool calls of a neusym MCP server (see the module
    docstring). ``settings``: the agent's settings; ``client``: an open :class:`McpClient`; other
    arguments as :class:`Environment` (its local version is still read for the titles of focus
    papers and for citations)."""

    def __init__(self, settings: Settings, client: McpClient, **kwargs: Any):
        super().__init__(settings, **kwargs)
        self.client = client
        self._catalog: tuple[list[str] | None, list[tuple[str, str]] | None] | None = None

    def database_schema(self) -> str:
        """The server's ``neusym://schema/database`` resource."""
        if self._db_schema is None:
            self._db_schema = self.client.read_resource("neusym://schema/database")
        return self._db_schema

    def vectorstore_available(self) -> bool:
        """The server offers ``retrieve_from_vectorstore``."""
        return self.vectorstore_catalog()[0] is not None

    def vectorstore_schema(self) -> str:
        """The server's ``neusym://schema/vectorstore`` resource."""
        return self.client.read_resource("neusym://schema/vectorstore")

    def vectorstore_catalog(self) -> tuple[list[str] | None, list[tuple[str, str]] | None]:
        """Collections and (table, column) pairs from the enums of the tool's input schema (the agent's
        reply schema only uses the sets of tables and of columns)."""
        if self._catalog is None:
            tool = next((t for t in self.client.list_tools() if t.name == "retrieve_from_vectorstore"), None)
            if tool is None:
                self._catalog = (None, None)
            else:
                props = tool.input_schema["properties"]
                tables, columns = props["table_name"].get("enum"), props["column_name"].get("enum")
                self._catalog = (props["collection_name"].get("enum"),
                                 [(t, c) for t in tables for c in columns] if tables and columns else None)
        return self._catalog

    def execute(self, action: Action, *, max_tokens: int | None = None) -> Observation:
        """Run ``action`` as a call of its tool (GenerateAnswer stays here); the text is cut to
        ``max_tokens`` like a local observation. Vector-search hits are recorded as evidence."""
        if action.action_type == "GenerateAnswer":
            return super().execute(action, max_tokens=max_tokens)
        tool = TOOL_OF_ACTION[action.action_type]
        arguments = dict(action.parameters)
        if tool == "view_image" and not arguments.get("bounding_box"):
            arguments.pop("bounding_box", None)
        obs = observation_of(self.client.call_tool(tool, arguments), tool)
        budget = self.settings.observation_max_tokens if max_tokens is None else int(max_tokens)
        obs.text = truncate_observation(obs.text, budget)
        if tool == "retrieve_from_vectorstore" and not obs.error:
            log = getattr(self._local, "hits", None)
            if log is not None:
                log.extend(obs.data.get("hits") or [])
        return obs


__all__ = ["McpClient", "McpEnvironment", "observation_of"]
