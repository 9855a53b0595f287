"""The corpus as an MCP server (Model Context Protocol, the official ``mcp`` SDK): any LLM client
(Claude Desktop, Cursor, VS Code, an agent of its own) drives neusym's corpus with neusym's tools.

Two transports, one server (:func:`build_server`):

- ``neusym mcp``: stdio, for desktop clients (:func:`run_stdio`); it follows the current corpus
  version like the service (a refresh switches the next call to the new version).
- ``neusym serve``: the same server at ``/mcp`` (streamable HTTP, stateless, JSON responses, so
  every worker process of ``neusym serve --workers N`` can answer any request), behind
  ``NEUSYM_API_KEYS`` when keys are set (:class:`McpEndpoint`); through the Airflow plugin it is
  in the api-server under the plugin's prefix, behind Airflow's login.

Tools (schemas and descriptions written for a model; results are the agent's own observation
text, ``structured_content`` with the corpus ``version`` and, where cells are returned, citations:
paper, title, page, bounding box, table/column/primary key, quote):

=============================== ==================================================================
``retrieve_from_database``      one read-only SQL query (DuckDB), the agent's limits
``retrieve_from_vectorstore``   similarity search over the encoded cells of one (table, column)
``calculate_expr``              arithmetic without ``eval``
``view_image``                  a page or a region of it as a PNG (MCP image content) + its PDF text
``search_papers``               conference-wide paper search with venue/year/author filters
``get_paper``                   metadata and outline of one paper (sections, tables, figures)
``ask``                         neusym's own router/agent: answer, route, verification, citations
=============================== ==================================================================

The answer itself (GenerateAnswer) is the client's. Resources: ``neusym://schema/database`` (the
[Database Schema] the agent sees), ``neusym://schema/vectorstore``, ``neusym://schema/docs`` (every
table and view with its comments, as docs/schema.md), ``neusym://views`` (the documented views and
example queries), ``neusym://corpus`` (the current version). Prompt ``neusym_agent``: the NeuSym-RAG
system prompt with a question, so a client can run the paper's agent loop itself.

Bad arguments come back as MCP tool errors (``is_error``) whose text says what was wrong; the
server keeps serving.
"""


import asyncio
import base64
import contextlib
import json
import logging
import threading
import uuid
from typing import Annotated, Any, Awaitable, Callable

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from mcp_types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import Field

from neusym.interfaces.service.corpus import VersionHolder
from neusym.interfaces.service.tools import AskRunner, CorpusTools, ToolInputError, ToolResult
from neusym import package_version
from neusym.encode import ENCODABLE_COLUMNS
from neusym.query.agent.actions import MAX_VECTOR_LIMIT
from neusym.settings import Settings
from neusym.store.cells import COLLECTIONS

logger = logging.getLogger(__name__)

SERVER_NAME = "neusym"
INSTRUCTIONS = (
    "neusym serves a corpus of AI research papers (PDFs parsed into pages, sections, chunks, tables, figures, "
    "equations and references) as a DuckDB database and a vector store of its text cells. To answer a question: "
    "find the paper (search_papers), look at its outline (get_paper), then read evidence with "
    "retrieve_from_database (SQL; read the neusym://schema/database resource first) or retrieve_from_vectorstore, "
    "compute with calculate_expr and look at figures or tables with view_image. Cite the page and paper of every "
    "piece of evidence. `ask` runs neusym's own small agent instead (slower, less capable than you).")

Blocking = Callable[[str, Callable[[], Any]], Awaitable[Any]]
"""``(kind, fn) -> awaitable``: run blocking ``fn`` in the pool of ``kind`` (search, sql, pages, meta, calc, ask)."""


async def _in_thread(kind: str, fn: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(fn)


def _result(out: ToolResult) -> CallToolResult:
    content: list[Any] = [TextContent(type="text", text=out.text)]
    if out.image_png:
        content.append(ImageContent(type="image", data=base64.b64encode(out.image_png).decode("ascii"),
                                    mime_type="image/png"))
    return CallToolResult(content=content, structured_content=out.data)


READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
"""The annotations of every tool but ``ask``: read-only, idempotent, closed world."""
ASK_ANNOTATIONS = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=False,
                                  open_world_hint=False)
"""The ``ask`` tool's: read-only, but two runs may answer differently."""

_COLLECTIONS = list(COLLECTIONS)
_TABLES = sorted({t for t, _ in ENCODABLE_COLUMNS})
_COLUMNS = sorted({c for _, c in ENCODABLE_COLUMNS})


def tool_table(settings: Settings) -> list[tuple[str, ToolAnnotations, str]]:
    """The tools :func:`build_server` registers, in this order: ``(name, annotations, description)``.
    Each tool runs the :class:`_Handlers` method of its name, whose signature is the tool's argument
    schema; the SQL tool's description states ``settings``' row and time limits."""
    pairs = ", ".join(f"{t}.{c}" for t, c in ENCODABLE_COLUMNS)
    return [
        ("retrieve_from_database", READ_ONLY, (
            "Run ONE read-only SQL query (DuckDB dialect) on the corpus database and get the result table. Read the "
            "resource neusym://schema/database for the tables, columns and their meaning. Only SELECT/WITH; at most "
            f"{settings.sql_max_rows} rows, a time limit of {settings.sql_timeout_s:g} s and a memory budget per query. "
            "Match text with ILIKE '%word%'. Rows that carry a primary key (table_id, chunk_id, section_id, "
            "image_id, equation_id, page_id, reference_id, paper_id) come back with citations (page, bounding box).")),
        ("retrieve_from_vectorstore", READ_ONLY, (
            "Similarity search over the encoded text cells of ONE database column (every point is one cell). "
            f"Encodable table.column pairs: {pairs}. Collections: "
            + "; ".join(f"{k}: {v}" for k, v in COLLECTIONS.items())
            + " Returns score, paper_id, page_number, primary_key and the cell text, with a citation per hit.")),
        ("calculate_expr", READ_ONLY, (
            "Evaluate an arithmetic expression exactly (numbers, + - * / ** %, parentheses, comparisons, and the "
            "functions round, abs, min, max, sum, len, sqrt, log, exp...). No variables: put the numbers in.")),
        ("view_image", READ_ONLY, (
            "Look at a page of a paper, or a region of it (a table, figure or equation: their bounding_box is in the "
            "database and in get_paper), as a PNG image, with the PDF text inside the region.")),
        ("search_papers", READ_ONLY, (
            "Find papers of the corpus that match a description or keywords (hybrid keyword + semantic search over "
            "titles, abstracts and full texts), optionally only one venue, year or author. Returns paper_id, title, "
            "venue, year, authors and the abstract sentence closest to the query. Works best when the query reads "
            "like the paper's abstract would (its task, method, data and findings) rather than like a question.")),
        ("get_paper", READ_ONLY, (
            "Metadata and outline of one paper: title, authors, venue, year, abstract, the section tree (titles, pages, "
            "ids, the start of each section), tables and figures (caption, page, bounding box, id) and equations.")),
        ("ask", ASK_ANNOTATIONS, (
            "Ask neusym's own agent (a small offline model by default, with symbolic routes for counting, listing and "
            "table questions, and a verifier). Returns the answer, the route taken, the verification and citations. "
            "Slow (seconds to a minute); prefer the other tools when you can reason over the evidence yourself.")),
    ]


RESOURCES: list[tuple[str, str, str, str, Callable[[Any], Any]]] = [
    ("neusym://schema/database", "database_schema", "text/plain",
     "The [Database Schema] neusym's agent sees: every table with its columns, types and comments.",
     lambda s: s.agent_schema),
    ("neusym://schema/vectorstore", "vectorstore_schema", "text/plain",
     "The [Vectorstore Schema]: collections, point fields, encodable (table, column) pairs, filter grammar.",
     lambda s: _vectorstore_schema()),
    ("neusym://schema/docs", "schema_docs", "text/markdown",
     "Every table and documented view with its comments (docs/schema.md of this corpus version).",
     lambda s: s.schema_markdown),
    ("neusym://views", "views", "text/markdown",
     "The documented views for analysts and example queries over them.", lambda s: _views_markdown(s)),
    ("neusym://corpus", "corpus", "application/json",
     "The corpus version being served: number, papers, when it was published.", lambda s: _corpus_json(s)),
]
"""The resources :func:`build_server` registers: ``(uri, name, mime type, description, read(served))``."""


def build_server(settings: Settings, holder: VersionHolder, *, ask: AskRunner | None = None,
                 run_blocking: Blocking | None = None) -> Any:
    """The MCP server (an ``mcp.server.mcpserver.MCPServer``) over the corpus ``holder`` serves.

    ``ask``: how the ``ask`` tool runs the agent (default one run at a time in this process,
    :func:`neusym.interfaces.service.tools.local_ask_runner`); ``run_blocking``: how blocking work
    is run (default a thread of anyio's pool; the service passes its own pools). Nothing is opened
    before the first call. The tools are :func:`tool_table`'s, the resources :data:`RESOURCES`, the
    prompt ``neusym_agent`` (:func:`agent_prompt`).
    """
    handlers = _Handlers(CorpusTools(settings, holder, ask=ask), holder, run_blocking or _in_thread)
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version=package_version(),
                       log_level="WARNING")  # the SDK configures the root logger; keep the service's level
    for name, annotations, description in tool_table(settings):
        server.tool(name=name, annotations=annotations, description=description)(getattr(handlers, name))
    for uri, name, mime_type, description, read in RESOURCES:
        server.resource(uri, name=name, mime_type=mime_type, description=description)(handlers.reader(read))
    server.prompt(name="neusym_agent", description=(
        "The NeuSym-RAG agent prompt (system prompt with both schemas, then the task) for a question, so a client "
        "can run the paper's agent loop itself; the actions map to this server's tools."))(handlers.neusym_agent)
    return server


class _Handlers:
    """What the server's tools, resources and prompt run: one method per tool of :func:`tool_table`
    (its signature is the tool's argument schema), each calling :class:`CorpusTools` in the pool
    ``blocking`` gives its kind of work; bad arguments and failures become MCP tool errors."""

    def __init__(self, tools: CorpusTools, holder: VersionHolder, blocking: Blocking):
        self.tools = tools
        self.holder = holder
        self.blocking = blocking

    async def call(self, kind: str, fn: Callable[[], ToolResult]) -> CallToolResult:
        """``fn()`` in the ``kind`` pool as a tool result; its failures as :class:`ToolError`."""
        try:
            return _result(await self.blocking(kind, fn))
        except ToolInputError as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - NoCorpusVersion, busy SQL workers, backend failures
            from neusym.errors import NeusymError

            if isinstance(exc, NeusymError):
                raise ToolError(f"{type(exc).__name__}: {exc}") from None
            logger.exception("MCP tool call failed")
            raise ToolError(f"internal error ({type(exc).__name__}); the server log has the details") from None

    # -- tools ----------------------------------------------------------------------------------
    async def retrieve_from_database(
        self,
        sql: Annotated[str, Field(description="One SELECT query, e.g. SELECT title, pub_year FROM metadata LIMIT 5",
                                  min_length=1, max_length=20_000)],
    ) -> CallToolResult:
        """The ``retrieve_from_database`` tool."""
        return await self.call("sql", lambda: self.tools.retrieve_from_database(sql))

    async def retrieve_from_vectorstore(
        self,
        query: Annotated[str, Field(description="What to look for, in words.", min_length=1, max_length=2000)],
        collection_name: Annotated[str, Field(description="Which collection: " + ", ".join(_COLLECTIONS),
                                              json_schema_extra={"enum": _COLLECTIONS})],
        table_name: Annotated[str, Field(description="Table of the column to search.",
                                         json_schema_extra={"enum": _TABLES})],
        column_name: Annotated[str, Field(description="Column to search (must be encodable in that table).",
                                          json_schema_extra={"enum": _COLUMNS})],
        filter: Annotated[str, Field(description=(
            "Optional condition on paper_id, page_number or primary_key, e.g. \"paper_id == '<uuid>'\" or "
            "\"paper_id == '<uuid>' and page_number <= 3\"; no SQL."), max_length=2000)] = "",
        limit: Annotated[int, Field(description=f"Hits to return (1-{MAX_VECTOR_LIMIT}).", ge=1,
                                    le=MAX_VECTOR_LIMIT)] = 5,
    ) -> CallToolResult:
        """The ``retrieve_from_vectorstore`` tool."""
        return await self.call("search", lambda: self.tools.retrieve_from_vectorstore(
            query, collection_name, table_name, column_name, filter, limit))

    async def calculate_expr(
        self,
        expr: Annotated[str, Field(description="e.g. round((85.1 - 83.4) / 83.4 * 100, 2)", min_length=1,
                                   max_length=2000)],
    ) -> CallToolResult:
        """The ``calculate_expr`` tool."""
        return await self.call("calc", lambda: self.tools.calculate_expr(expr))

    async def view_image(
        self,
        paper_id: Annotated[str, Field(description="The paper's UUID (metadata.paper_id).")],
        page_number: Annotated[int, Field(description="Page, from 1.", ge=1)],
        bounding_box: Annotated[list[float] | None, Field(
            description="Optional [x0, y0, width, height] in PDF points from the page's top-left corner; "
                        "omit (or []) for the whole page.", max_length=4)] = None,
    ) -> CallToolResult:
        """The ``view_image`` tool."""
        return await self.call("pages", lambda: self.tools.view_image(paper_id, page_number, bounding_box))

    async def search_papers(
        self,
        query: Annotated[str, Field(description="What the paper is about, or a question it answers.", min_length=1,
                                    max_length=1000)],
        venue: Annotated[str | None, Field(description="Conference abbreviation (acl, emnlp, naacl, ...) or "
                                           "'findings'.", max_length=64)] = None,
        year: Annotated[int | None, Field(description="Publication year.", ge=1900, le=2100)] = None,
        author: Annotated[str | None, Field(description="Author full name or last name.", max_length=200)] = None,
        limit: Annotated[int, Field(description="Papers to return (1-50).", ge=1, le=50)] = 10,
    ) -> CallToolResult:
        """The ``search_papers`` tool."""
        return await self.call("search", lambda: self.tools.search_papers(query, venue, year, author, limit))

    async def get_paper(
        self,
        paper_id: Annotated[str, Field(description="The paper's UUID (metadata.paper_id), e.g. from search_papers.")],
    ) -> CallToolResult:
        """The ``get_paper`` tool."""
        return await self.call("meta", lambda: self.tools.get_paper(paper_id))

    async def ask(
        self,
        question: Annotated[str, Field(description="The question, in natural language.", min_length=1,
                                       max_length=4000)],
        paper_ids: Annotated[list[str] | None, Field(description="Papers the question is about (UUIDs).",
                                                     max_length=20)] = None,
        method: Annotated[str | None, Field(description="Agent method (default auto: the router).",
                                            max_length=64)] = None,
        shape: Annotated[str | None, Field(description="The answer's shape: text, string, integer, number or "
                                           "number:DECIMALS, boolean, list, list:N or list:NAME,NAME.",
                                           max_length=200)] = None,
    ) -> CallToolResult:
        """The ``ask`` tool: a cancelled request stops its run at the next token, query or step."""
        cancel = threading.Event()
        run = asyncio.ensure_future(self.call("ask", lambda: self.tools.ask(question, paper_ids, method,
                                                                            shape=shape, cancel=cancel)))
        run.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved even when nobody waits
        try:
            return await asyncio.shield(run)  # a cancelled request does not wait for the thread to finish
        finally:
            cancel.set()  # the client cancelled or went away: the run stops at its next token, query or step

    # -- resources and the prompt ---------------------------------------------------------------
    def reader(self, fn: Callable[[Any], Any]) -> Callable[[], Awaitable[Any]]:
        """A resource's read: ``fn(served)`` on the served version, in the ``meta`` pool."""
        async def read() -> Any:
            def work() -> Any:
                with self.holder.use() as served:
                    return fn(served)
            return await self.blocking("meta", work)
        return read

    async def neusym_agent(self, question: str, paper_ids: str = "") -> list[Any]:
        """The ``neusym_agent`` prompt (:func:`agent_prompt`) for ``question`` and the comma-separated ``paper_ids``."""
        from mcp.server.mcpserver.prompts.base import UserMessage

        ids = [p.strip() for p in paper_ids.split(",") if p.strip()]

        def work() -> str:
            return agent_prompt(self.holder, question, ids)

        try:
            text = await self.blocking("meta", work)
        except ToolInputError as exc:  # the reason reaches the client (the SDK would say "Error rendering prompt")
            raise MCPError(INVALID_PARAMS, str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - NoCorpusVersion and the like: said, not a traceback
            from neusym.errors import NeusymError

            if isinstance(exc, NeusymError):
                raise MCPError(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}") from None
            logger.exception("MCP prompt failed")
            raise MCPError(INTERNAL_ERROR, f"internal error ({type(exc).__name__}); the server log has the "
                           "details") from None
        return [UserMessage(text)]


TOOL_OF_ACTION = {"RetrieveFromDatabase": "retrieve_from_database", "RetrieveFromVectorstore":
                  "retrieve_from_vectorstore", "CalculateExpr": "calculate_expr", "ViewImage": "view_image"}
"""The MCP tool that runs each NeuSym-RAG action (GenerateAnswer is the client's own reply)."""


def agent_prompt(holder: VersionHolder, question: str, paper_ids: list[str]) -> str:
    """The ``neusym_agent`` prompt text: the agent's system prompt (method ``neusym``, both schemas)
    and its task prompt for ``question`` (with the titles of ``paper_ids``), and how its actions map
    to the tools. Raises :class:`ToolInputError` for a malformed or unknown paper id."""
    from neusym.query.agent.react import system_prompt, task_prompt

    with holder.use() as served:
        ids = []
        for p in paper_ids:
            try:
                ids.append(str(uuid.UUID(p)))
            except ValueError:
                raise ToolInputError(f"paper_ids: {p[:80]!r} is not a paper id (a UUID)") from None
        titles = CorpusTools._titles(served, ids) if ids else {}
        unknown = [p for p in ids if p not in titles]
        if unknown:
            raise ToolInputError(f"paper_ids: unknown in this corpus version: {', '.join(unknown)}")
        system = system_prompt(served.agent_schema, _vectorstore_schema())
        settings = served.index.settings
        task = task_prompt(question, answer_format=None, max_turns=int(settings.agent_max_turns),
                           papers=[(p, titles[p]) for p in ids] or None)
    mapping = "; ".join(f"{a} = tool {t}" for a, t in TOOL_OF_ACTION.items())
    return (f"{system}\n\n## [Tools]\nEach action is a tool of this server: {mapping}; GenerateAnswer is your final "
            f"reply.\n\n{task}")


def _vectorstore_schema() -> str:
    from neusym.store.cells import collections_prompt

    return collections_prompt()


def _views_markdown(served: Any) -> str:
    from neusym.interfaces.service.sql_examples import SQL_EXAMPLES

    lines = ["# Documented views", ""]
    for rel in served.schema:
        if rel.get("kind") == "view":
            lines.append(f"## {rel['table']}")
            if rel.get("comment"):
                lines.append(str(rel["comment"]))
            lines += [f"- {n} ({ty}){': ' + c if c else ''}" for n, ty, c in rel["columns"]]
            lines.append("")
    lines += ["# Example queries", ""]
    for ex in SQL_EXAMPLES:
        lines += [f"## {ex['title']}", "```sql", ex["sql"], "```", ""]
    return "\n".join(lines)


def _corpus_json(served: Any) -> str:
    manifest = served.version.info.manifest
    return json.dumps({"version": served.number, "papers": served.papers,
                       "published_at": manifest.get("published_at") or manifest.get("created_at")})


# ------------------------------------------------------------------------------------- transports
def run_stdio(settings: Settings) -> None:
    """``neusym mcp``: serve :func:`build_server` over stdin/stdout until the client closes it.
    Logs go to stderr (stdout carries the protocol). The corpus version is opened on the first call
    and followed like the service does."""
    holder = VersionHolder(settings)
    server = build_server(settings, holder)

    def warm() -> None:  # open the version (paper index, query encoder) while the client starts up
        try:
            holder.release(holder.acquire())
        except Exception as exc:  # noqa: BLE001 - e.g. nothing published yet: each call then says so
            logger.warning("corpus not opened at start: %s", exc)

    threading.Thread(target=warm, name="neusym-mcp-warm", daemon=True).start()
    try:
        server.run("stdio")
    finally:
        holder.close()


class McpEndpoint:
    """The MCP server as an ASGI app for ``neusym serve`` (route ``/mcp``, behind the service's
    authentication like every API route): streamable HTTP in stateless mode with JSON responses
    (any worker process of ``neusym serve --workers N`` can answer any request; there are no
    sessions to lose). The SDK's session manager is started on the first request, in the serving
    event loop (lifespan events do not run when the app is mounted in another one, e.g. Airflow's
    api-server), and stopped by :meth:`aclose`."""

    def __init__(self, server: MCPServer):
        from mcp.server.transport_security import TransportSecuritySettings

        # The service authenticates requests itself (API keys or Airflow's login); the SDK's
        # host/origin check for servers on localhost would refuse every other host name.
        server.streamable_http_app(stateless_http=True, json_response=True,
                                   transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        self.manager = server.session_manager
        self._started: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    async def _ensure_started(self) -> None:
        if self._started is None:
            self._started, self._stop = asyncio.Event(), asyncio.Event()
            started, stop = self._started, self._stop

            async def run() -> None:
                async with self.manager.run():
                    started.set()
                    await stop.wait()

            self._task = asyncio.get_running_loop().create_task(run())
        await self._started.wait()

    async def aclose(self) -> None:
        """Stop the session manager (the service's shutdown); idempotent."""
        if self._stop is not None and self._task is not None:
            self._stop.set()
            with contextlib.suppress(Exception):
                await self._task

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        await self._ensure_started()
        body_read = asyncio.Event()

        async def tracked_receive() -> dict:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body"):
                body_read.set()
            return message

        handler = asyncio.ensure_future(self.manager.handle_request(scope, tracked_receive, send))

        async def watch() -> None:  # a client that goes away cancels its request (an ask stops its run)
            await body_read.wait()
            while (await receive())["type"] != "http.disconnect":
                pass
            handler.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await handler
        except asyncio.CancelledError:
            if not handler.cancelled() or not watcher.done():
                raise  # the server is shutting down, not a client that left
            logger.info("MCP client went away; its request is cancelled")
        finally:
            watcher.cancel()


__all__ = ["McpEndpoint", "TOOL_OF_ACTION", "agent_prompt", "build_server", "run_stdio"]
