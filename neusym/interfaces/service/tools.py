"""The corpus as tool calls: what the MCP server (:mod:`neusym.interfaces.service.mcp`) exposes.

:class:`CorpusTools` answers the five NeuSym-RAG actions with the agent's own code
(:func:`neusym.query.agent.actions.execute_action` on an environment of the served corpus
version), so a client model sees exactly the observation text our agent sees, plus paper search,
a paper's outline and the router (``ask``). Every call runs on the version the
:class:`~neusym.interfaces.service.corpus.VersionHolder` serves at that moment (a refresh switches
the next call to the new version) and returns a :class:`ToolResult`: the ``text`` for the model,
``data`` (JSON-ready, always with ``version``) and, for ``view_image``, the PNG.

Budgets are the agent's: SQL read-only in worker processes with the time, row, byte, cell and
memory limits of the settings; vector search at most :data:`neusym.query.agent.actions.MAX_VECTOR_LIMIT`
hits; expressions through :func:`neusym.query.calc.calculate` (no ``eval``); observation texts cut
to ``NEUSYM_OBSERVATION_MAX_TOKENS``; page images at 144 dpi. Bad input raises :class:`ToolInputError`
with a message naming the argument and the reason; nothing here writes.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from neusym.errors import NeusymError
from neusym.interfaces.service.corpus import ServedVersion, VersionHolder
from neusym.settings import Settings

SEARCH_MAX_LIMIT = 50
"""Most papers one ``search_papers`` call returns."""
SQL_ROWS_IN_DATA = 200
"""Rows of a ``retrieve_from_database`` result carried in ``data`` (the text shows what the agent sees)."""
OUTLINE_PREVIEW_CHARS = 300
"""Characters of a section's text shown in ``get_paper``'s outline (the full text is one SQL query away)."""


class ToolInputError(NeusymError):
    """A tool call with bad arguments or one that failed on them (the message says which and why)."""


@dataclass
class ToolResult:
    """One tool answer: ``text`` for the model, ``data`` (JSON-ready dict with ``version``), ``image_png``."""

    text: str
    data: dict = field(default_factory=dict)
    image_png: bytes | None = None


AskRunner = Callable[[str, list[str], "str | None", "str | None", threading.Event], dict]
"""``(question, paper_ids, method, answer_format, cancel) -> answer dict`` (as ``POST /ask/json``)."""


class CorpusTools:
    """The tool implementations over the corpus version ``holder`` serves (see the module docstring).

    ``settings``: the service's settings (budgets, offline model); ``ask``: how ``ask`` runs the agent
    (``neusym serve`` passes its own runner, which queues for the LLM like ``/ask``); default
    :func:`local_ask_runner`, one run at a time in this process. Thread-safe.
    """

    def __init__(self, settings: Settings, holder: VersionHolder, *, ask: AskRunner | None = None):
        self.settings = settings
        self.holder = holder
        self._ask = ask or local_ask_runner(settings, holder)

    # -- the five actions -----------------------------------------------------------------------
    def _action(self, action_type: str, parameters: dict) -> tuple[Any, int, Any]:
        """Validate and execute one agent action; returns (observation, version number, environment).
        Raises :class:`ToolInputError` with the agent's error text when it fails."""
        from neusym.errors import ActionError
        from neusym.query.agent.actions import validate_action

        try:
            action = validate_action({"action_type": action_type, "parameters": parameters})
        except ActionError as exc:
            raise ToolInputError(f"[Error]: {exc}") from None
        with self.holder.use() as served:
            env = served.environment()
            obs = env.execute(action)
            if obs.error:
                raise ToolInputError(obs.text)
            return obs, served.number, served

    def retrieve_from_database(self, sql: str) -> ToolResult:
        """RetrieveFromDatabase: one read-only SQL query (DuckDB) on the corpus database.

        ``text``: the result table as the agent sees it (with its hints for empty results);
        ``data``: ``{"version", "columns", "rows" (at most :data:`SQL_ROWS_IN_DATA`), "row_count",
        "truncated", "citations"}`` — a citation for each row that carries a primary key of a
        corpus table (``table_id``, ``chunk_id``, ``paper_id`` ...). Raises :class:`ToolInputError`
        for refused SQL (anything but one SELECT), SQL errors and limits reached.
        """
        from neusym.query.sqlsafe import to_jsonable

        obs, number, served = self._action("RetrieveFromDatabase", {"sql": sql})
        result = obs.data
        rows = [[to_jsonable(v) for v in row] for row in (result.rows if result is not None else [])]
        data = {"version": number, "columns": list(result.columns) if result is not None else [],
                "rows": rows[:SQL_ROWS_IN_DATA], "row_count": len(rows),
                "truncated": bool(getattr(result, "truncated", False)) or len(rows) > SQL_ROWS_IN_DATA,
                "citations": self._row_citations(served, result)}
        return ToolResult(obs.text, data)

    def retrieve_from_vectorstore(self, query: str, collection_name: str, table_name: str, column_name: str,
                                  filter: str = "", limit: int = 5) -> ToolResult:
        """RetrieveFromVectorstore: similarity search over the encoded cells of one (table, column).

        ``text``: the hits table as the agent sees it; ``data``: ``{"version", "hits": [{"score",
        "paper_id", "page_number", "table_name", "column_name", "primary_key", "text"}], "citations"}``
        (one citation per hit: paper, title, page, bounding box, cell, quote). Raises
        :class:`ToolInputError` for an unknown collection/table/column, a malformed filter or an
        unavailable vector store.
        """
        from neusym.query.answer.citations import citations_for

        params = {"query": query, "collection_name": collection_name, "table_name": table_name,
                  "column_name": column_name, "filter": filter or "", "limit": limit}
        obs, number, served = self._action("RetrieveFromVectorstore", params)
        hits = [dict(h) for h in (obs.data or [])]
        env = served.environment()
        citations = [c.to_dict() for c in citations_for(env, hits, query, limit=len(hits))]
        return ToolResult(obs.text, {"version": number, "hits": hits, "citations": citations})

    def calculate_expr(self, expr: str) -> ToolResult:
        """CalculateExpr: evaluate an arithmetic expression (:func:`neusym.query.calc.calculate`:
        numbers, + - * / ** %, comparisons, round/abs/min/max/sum/len/sqrt/log..., no names, no
        ``eval``). ``data``: ``{"version", "value"}``. Raises :class:`ToolInputError` for what it refuses."""
        obs, number, _ = self._action("CalculateExpr", {"expr": expr})
        value = obs.data
        if not isinstance(value, (int, float, str, bool, list, type(None))):
            value = str(value)
        return ToolResult(obs.text, {"version": number, "value": value})

    def view_image(self, paper_id: str, page_number: int, bounding_box: list[float] | None = None) -> ToolResult:
        """ViewImage: page ``page_number`` (from 1) of a paper, or the region ``bounding_box``
        (``[x0, y0, width, height]`` in PDF points from the page's top-left corner), as a 144 dpi PNG.

        ``text``: the agent's observation (image size and the PDF text inside the region);
        ``data``: ``{"version", "paper_id", "title", "page_number", "bounding_box", "width", "height"}``.
        Raises :class:`ToolInputError` for an unknown paper, a page out of range, a box outside the
        page or a PDF that is not on this host.
        """
        params = {"paper_id": paper_id, "page_number": page_number, "bounding_box": list(bounding_box or [])}
        obs, number, served = self._action("ViewImage", params)
        pid = str(uuid.UUID(str(paper_id)))
        title = self._titles(served, [pid]).get(pid)
        width, height = obs.image_size or (None, None)
        return ToolResult(obs.text, {"version": number, "paper_id": pid, "title": title, "page_number": page_number,
                                     "bounding_box": list(bounding_box) if bounding_box else None,
                                     "width": width, "height": height}, image_png=obs.image_png)

    # -- papers ---------------------------------------------------------------------------------
    def search_papers(self, query: str, venue: str | None = None, year: int | None = None,
                      author: str | None = None, limit: int = 10) -> ToolResult:
        """Conference-wide paper search (the hybrid BM25 + MiniLM paper index of ``GET /search``).

        ``venue``: conference abbreviation (acl, emnlp, ...) or ``findings``; ``year``; ``author``:
        full or last name; ``limit``: 1-:data:`SEARCH_MAX_LIMIT`. ``data``: ``{"version", "hits":
        [{"rank", "paper_id", "title", "venue", "year", "authors", "score", "snippet", ...}]}``.
        Raises :class:`ToolInputError` for a blank query, a limit out of range or a bad filter.
        """
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= SEARCH_MAX_LIMIT:
            raise ToolInputError(f"limit must be an integer from 1 to {SEARCH_MAX_LIMIT}, got {limit!r}")
        with self.holder.use() as served:
            try:
                found, _ = served.search(query, venue=venue or None, year=year, author=author or None,
                                         limit=limit, with_citations=False)
            except ValueError as exc:
                raise ToolInputError(str(exc)) from None
            number = served.number
        hits = [{"rank": i + 1, **h.to_dict()} for i, h in enumerate(found.hits)]
        if not hits:
            return ToolResult("No papers match." + (" Try without the filters." if venue or year or author else ""),
                              {"version": number, "hits": []})
        lines = [f"{h['rank']}. {h['title']} ({h.get('venue') or '?'} {h.get('year') or '?'}; "
                 f"paper_id {h['paper_id']})\n   {h.get('snippet') or ''}" for h in hits]
        return ToolResult("\n".join(lines), {"version": number, "hits": hits})

    def get_paper(self, paper_id: str) -> ToolResult:
        """One paper's metadata and outline: title, authors, venue, year, abstract, pages, the section
        tree (titles, pages, the start of each section's text), tables (caption, page, box), figures
        and equations (page, box) and counts; the full texts are in the database (``sections``,
        ``chunks``, ``tables.table_content``...). ``data``: the same as JSON with ``version``.
        Raises :class:`ToolInputError` for a malformed or unknown paper id."""
        from neusym.interfaces.service.papers import NotFound, paper_detail

        with self.holder.use() as served:
            cur = served.cursor()
            try:
                detail = paper_detail(cur, paper_id if isinstance(paper_id, str) else str(paper_id), self.settings)
            except NotFound as exc:
                raise ToolInputError(str(exc)) from None
            finally:
                cur.close()
            number = served.number
        data = _outline(detail)
        data["version"] = number
        return ToolResult(_outline_text(data), data)

    # -- the router -------------------------------------------------------------------------------
    def ask(self, question: str, paper_ids: list[str] | None = None, method: str | None = None,
            answer_format: str | None = None, cancel: threading.Event | None = None,
            shape: str | None = None) -> ToolResult:
        """Answer a question with neusym's own agent (default method ``auto``: the router with its
        symbolic paths and verification). ``shape``: the answer's shape in the compact form of
        :meth:`neusym.query.answer.shapes.AnswerShape.parse` (or ``answer_format``, a sentence; not
        both). ``data``: ``{"version", "answer", "route", "verification", "citations", "method",
        "seconds", "stop_reason"}``. ``cancel`` set: the run stops at its next token, query or step.
        Raises :class:`ToolInputError` for a blank question, an unknown method, paper id or shape;
        errors of the LLM backend are :class:`~neusym.errors.NeusymError` too."""
        from neusym.query.agent.methods import MethodError, get_method
        from neusym.query.answer.shapes import AnswerShape

        if shape is not None:
            if answer_format is not None:
                raise ToolInputError("give shape or answer_format, not both")
            try:
                answer_format = AnswerShape.parse(shape).format_text()
            except ValueError as exc:
                raise ToolInputError(f"shape: {' '.join(str(exc).split())[:300]}") from None

        if not isinstance(question, str) or not question.strip():
            raise ToolInputError("question must not be blank")
        if len(question) > 4000:
            raise ToolInputError(f"question is {len(question)} characters; at most 4000")
        if method is not None:
            try:
                get_method(method)
            except MethodError as exc:
                raise ToolInputError(str(exc)) from None
        ids = [_paper_uuid(p, "paper_ids") for p in (paper_ids or [])]
        if ids:
            with self.holder.use() as served:
                known = self._titles(served, ids)
            missing = [p for p in ids if p not in known]
            if missing:
                raise ToolInputError(f"unknown paper id(s) in this corpus version: {', '.join(missing)}")
        out = self._ask(question, ids, method, answer_format, cancel or threading.Event())
        if not out:
            raise ToolInputError("the run was cancelled")
        data = {k: out.get(k) for k in ("version", "answer", "route", "verification", "citations", "method",
                                        "seconds", "stop_reason")}
        return ToolResult(_answer_text(data), data)

    # -- helpers ----------------------------------------------------------------------------------
    @staticmethod
    def _titles(served: ServedVersion, paper_ids: list[str]) -> dict[str, str]:
        from neusym.interfaces.service.papers import paper_titles

        cur = served.cursor()
        try:
            return paper_titles(cur, paper_ids)
        finally:
            cur.close()

    def _row_citations(self, served: ServedVersion, result: Any, limit: int = 20) -> list[dict]:
        """A citation for each of the first ``limit`` rows that carries the primary key of a corpus
        table in a column of that key's name (``table_id`` -> tables ...), quoting the row's longest
        text value; none when the result has no such column."""
        from neusym.encode import PRIMARY_KEYS
        from neusym.query.answer.citations import cell_rows

        if result is None or not result.rows:
            return []
        columns = [c.lower() for c in result.columns]
        keyed = [(t, columns.index(pk)) for t, pk in PRIMARY_KEYS.items() if pk in columns]
        if not keyed:
            return []
        table, at = keyed[-1] if len(keyed) > 1 and keyed[0][0] == "metadata" else keyed[0]
        cells = []
        for row in result.rows[:limit]:
            key = row[at]
            if key is None:
                continue
            texts = [v for v in row if isinstance(v, str)]
            cells.append({"table_name": table, "primary_key": str(key), "text": max(texts, key=len) if texts else ""})
        found = cell_rows(served.environment(), cells)
        out = []
        for c in cells:
            row = found.get((table, c["primary_key"]))
            if row is not None:
                out.append({"paper_id": row["paper_id"], "title": row["title"], "page_number": row["page_number"],
                            "bounding_box": row["bounding_box"], "table_name": table,
                            "column_name": PRIMARY_KEYS[table], "primary_key": c["primary_key"],
                            "quote": c["text"][:300]})
        return out


def _paper_uuid(value: Any, where: str) -> str:
    try:
        return str(uuid.UUID(str(value).strip()))
    except ValueError:
        raise ToolInputError(f"{where}: {str(value)[:80]!r} is not a paper id (a UUID from metadata.paper_id)") from None


def _outline(detail: dict) -> dict:
    """The parts of :func:`~neusym.interfaces.service.papers.paper_detail` a model needs to plan its next call."""

    def section(node: dict) -> dict:
        text = (node.get("content") or "").strip()
        return {"section_id": node["section_id"], "title": node["title"], "level": node["level"],
                "page_numbers": node["page_numbers"], "preview": text[:OUTLINE_PREVIEW_CHARS],
                "characters": len(text), "children": [section(c) for c in node.get("children") or []]}

    keep = ("paper_id", "title", "authors", "venue", "conference_full", "year", "num_pages", "abstract", "tldr",
            "tags", "download_url", "has_pdf", "counts")
    out = {k: detail.get(k) for k in keep}
    out["sections"] = [section(s) for s in detail.get("sections") or []]
    out["tables"] = [{k: t.get(k) for k in ("table_id", "caption", "page_number", "bounding_box")}
                     for t in detail.get("tables") or []]
    out["figures"] = [{k: f.get(k) for k in ("image_id", "caption", "page_number", "bounding_box")}
                      for f in detail.get("figures") or []]
    out["equations"] = [{k: e.get(k) for k in ("equation_id", "number", "page_number", "bounding_box")}
                        for e in detail.get("equations") or []]
    return out


def _outline_text(data: dict) -> str:
    lines = [f"{data['title']} (paper_id {data['paper_id']})",
             f"Authors: {', '.join(data.get('authors') or []) or 'unknown'}",
             f"Venue: {data.get('conference_full') or data.get('venue') or 'unknown'} {data.get('year') or ''}".rstrip(),
             f"Pages: {data.get('num_pages')}; " + ", ".join(f"{n} {k}" for k, n in (data.get("counts") or {}).items()),
             f"Abstract: {data.get('abstract') or '(none)'}", "Sections:"]

    def walk(nodes: list[dict], depth: int) -> None:
        for s in nodes:
            pages = ",".join(str(p) for p in s["page_numbers"]) or "?"
            lines.append(f"{'  ' * depth}- {s['title']} (p. {pages}; section_id {s['section_id']})")
            walk(s["children"], depth + 1)

    walk(data["sections"], 1)
    if data["tables"]:
        lines.append("Tables:")
        lines += [f"  - p. {t['page_number']}: {(t['caption'] or '(no caption)')[:160]} (table_id {t['table_id']})"
                  for t in data["tables"]]
    if data["figures"]:
        lines.append("Figures:")
        lines += [f"  - p. {f['page_number']}: {(f['caption'] or '(no caption)')[:160]} (image_id {f['image_id']})"
                  for f in data["figures"]]
    return "\n".join(lines)


def _answer_text(data: dict) -> str:
    import json

    answer = data.get("answer")
    text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
    lines = [f"Answer: {text}"]
    if data.get("route"):
        verification = data.get("verification") or {}
        status, basis = verification.get("status"), verification.get("basis_text")
        lines.append(f"Route: {data['route']}" + (f"; verification: {status}" if status else "")
                     + (f" ({basis})" if status and basis else ""))
    for i, c in enumerate(data.get("citations") or [], start=1):
        if isinstance(c, dict):
            where = f"p. {c.get('page_number')}" if c.get("page_number") else "metadata"
            lines.append(f"[{i}] {c.get('title') or c.get('paper_id')}, {where}: \"{c.get('quote') or ''}\"")
    return "\n".join(lines)


def local_ask_runner(settings: Settings, holder: VersionHolder) -> AskRunner:
    """An :data:`AskRunner` for a process without the service's LLM queue (``neusym mcp``): one
    agent run at a time (the offline model has one slot), on the version ``holder`` serves."""
    lock = threading.Lock()

    def run(question: str, paper_ids: list[str], method: str | None, answer_format: str | None,
            cancel: threading.Event) -> dict:
        from neusym.llm.chat import RunCancelled
        from neusym.query.agent.actions import Environment
        from neusym.query.ask import ask

        with lock:
            if cancel.is_set():
                return {}
            with holder.use() as served:
                env = Environment(settings, version=served.version, db_schema=served.agent_schema)
                try:
                    result = ask(question, settings=settings, method=method, paper_ids=paper_ids or None,
                                 answer_format=answer_format, env=env, cancel=cancel)
                except RunCancelled:
                    return {}
                finally:
                    env.close()
                out = {"version": served.number, **result.to_dict()}
                missing = [str(c.get("paper_id")) for c in out.get("citations") or []
                           if isinstance(c, dict) and c.get("paper_id") and not c.get("title")]
                if missing:
                    titles = CorpusTools._titles(served, missing)
                    for c in out["citations"]:
                        if isinstance(c, dict) and not c.get("title"):
                            c["title"] = titles.get(str(c.get("paper_id")))
                return out

    return run


__all__ = ["CorpusTools", "ToolInputError", "ToolResult", "local_ask_runner"]
