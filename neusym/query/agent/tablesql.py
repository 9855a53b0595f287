"""Table questions through SQL: the model writes one query over one table's cells, DuckDB answers.

A 1.5B coder model reads a long table badly (it answers with the neighbouring row, a row label or a
footnote mark) but writes a short SQL query reliably. So when the focused route's evidence holds a
table, the model is shown that table as a relation — its caption, its header paths and row headers
exactly as ``table_cells`` stores them (:mod:`neusym.ingest.parse.cells`), and a few of its cells —
and writes one ``SELECT`` over::

    cells(row_no INTEGER, row_name VARCHAR, column_name VARCHAR, text VARCHAR, value DOUBLE)

(one row per data cell: ``row_name`` the row header, ``column_name`` the column's header path,
``text`` the cell as printed, ``value`` its number or NULL). The query runs read-only under the SQL budget
(:meth:`neusym.query.agent.actions.Environment.run_sql`, with ``cells`` bound to that table by a
``WITH`` clause); a query that fails is repaired once with DuckDB's message. Extremum, difference
against a named row, threshold, average, "which setting": all are the same mechanism, no operation
menu and no wording rule. When the rows have the shape the answer format asks for (one row of N
values for a list of N, one value for a number, :func:`shaped_result`) they are the answer; otherwise
they become the first evidence line of the answer call. The query is re-run by the verifier (:func:`verify_sql`), which cites the table. Before it runs, each
name the query compares ``row_name`` / ``column_name`` with is linked to the listed name it means
(:func:`link_names`: "Cite / MAP" -> "Citation prediction / Cite / MAP").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from neusym.errors import NeusymError
from neusym.query.agent.cues import WITHOUT_YEAR

#: Header paths / row headers listed in the prompt at most (a larger table is listed in part, its size said).
MAX_LISTED = 40
#: Result rows the answer call sees.
MAX_RESULT_ROWS = 12
#: Example cells shown to the model.
EXAMPLE_CELLS = 6

SQL_SCHEMA = {
    "type": "object",
    "properties": {"sql": {"type": "string"}},
    "required": ["sql"],
    "additionalProperties": False,
}

_UUID = re.compile(r"^[0-9a-fA-F-]{36}$")
_WITH = re.compile(r"^\s*with\s+(?!recursive\b)", re.I)


@dataclass
class TableRelation:
    """One stored table as the model sees it: ``table_id``, ``caption``, header paths and row headers
    in table order, the data cells ``(row_no, row, header, text, number)``."""

    table_id: str
    caption: str
    headers: list[str]
    rows: list[str]
    cells: list[tuple] = field(default_factory=list)


@dataclass
class SqlResult:
    """What the query gave: the model's ``sql``, the ``columns`` and ``rows`` (at most
    :data:`MAX_RESULT_ROWS`), the ``error`` of a query that failed twice (rows empty then), and the
    LLM ``replies`` spent."""

    sql: str
    columns: list[str]
    rows: list[tuple]
    error: str | None = None
    replies: list[Any] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.rows)

    def text(self) -> str:
        """The result as one evidence line: ``col = value; ...`` per row, rows separated by " | "."""
        if self.error:
            return f"(query failed: {self.error})"
        if not self.rows:
            return "(no rows)"
        out = []
        for row in self.rows[:MAX_RESULT_ROWS]:
            out.append("; ".join(f"{c} = {_fmt(v)}" for c, v in zip(self.columns, row)))
        return " | ".join(out)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{round(value, 6):g}"
    return str(value)


def load_relation(env: Any, table_id: str) -> TableRelation | None:
    """The cells of table ``table_id`` (a ``tables.table_id``) from ``table_cells``; None when the
    table has no numeric data cell (nothing to compute over) or the database has no cell relation."""
    if not _UUID.match(str(table_id)):
        return None
    try:
        caption = env.query("SELECT table_caption FROM tables WHERE table_id = ?::UUID", [str(table_id)])
        cells = env.query(
            "SELECT row_index, row_header, column_header_path, cell_text, number FROM table_cells "
            "WHERE ref_table_id = ?::UUID AND NOT is_header ORDER BY row_index, column_index", [str(table_id)])
    except Exception:  # noqa: BLE001 - a database from before table_cells: no relation, the route goes on
        return None
    if not cells or not any(c[4] is not None for c in cells):
        return None
    headers: list[str] = []
    rows: list[str] = []
    for _, row, header, _, number in cells:
        if header and number is not None and header not in headers:
            headers.append(header)
        if row and row not in rows:
            rows.append(row)
    return TableRelation(str(table_id), (caption[0][0] if caption else "") or "", headers, rows, cells)


def _listing(names: list[str], quote=None) -> str:
    quote = quote or (lambda n: json.dumps(n, ensure_ascii=False))
    shown = names[:MAX_LISTED]
    more = f" ... ({len(names) - len(shown)} more)" if len(names) > len(shown) else ""
    return ", ".join(quote(n) for n in shown) + more


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _examples(rel: TableRelation) -> list[str]:
    """Three query shapes (an extremum, a difference against a named row, a gap between two columns),
    written with this table's own first names: generic SQL idioms a small model composes from."""
    h1 = _sql_literal(rel.headers[0] if rel.headers else "...")
    h2 = _sql_literal(rel.headers[1] if len(rel.headers) > 1 else "...")
    r1 = _sql_literal(rel.rows[0] if rel.rows else "...")
    return [
        f"-- e.g. the row with the highest value in a column: SELECT row_name, value FROM cells WHERE column_name = {h1} "
        "ORDER BY value DESC LIMIT 1",
        "-- e.g. the row furthest above a named row in a column, and by how much: SELECT a.row_name, a.value - b.value "
        f"AS difference FROM cells a JOIN cells b ON a.column_name = b.column_name WHERE a.column_name = {h1} "
        f"AND b.row_name = {r1} ORDER BY difference DESC LIMIT 1",
        "-- e.g. the row where two columns differ least: SELECT a.row_name, abs(a.value - b.value) AS gap FROM cells a "
        f"JOIN cells b ON a.row_no = b.row_no WHERE a.column_name = {h1} AND b.column_name = {h2} ORDER BY gap LIMIT 1",
    ]


def relation_prompt(question: str, answer_format: str | None, rel: TableRelation, note: str = "") -> str:
    """The prompt that asks for one query over ``cells`` (see the module docstring): the relation as
    a commented ``CREATE TABLE`` (the form a coder model reads best), its row and column names
    listed, a few example cells, the question and the answer format."""
    numeric = [c for c in rel.cells if c[4] is not None and c[1] and c[2]]
    step = max(1, len(numeric) // EXAMPLE_CELLS)
    examples = numeric[::step][:EXAMPLE_CELLS]
    caption = " ".join(rel.caption.split())[:300]
    lines = [
        f"-- {caption}",
        "-- The table above, one row per data cell:",
        "CREATE TABLE cells (",
        "    row_no INTEGER,      -- position of the row in the table, from the top",
        "    row_name VARCHAR,    -- the row's label: " + _listing(rel.rows, _sql_literal),
        "    column_name VARCHAR, -- the column's header, levels joined by ' / ': " + _listing(rel.headers, _sql_literal),
        "    text VARCHAR,        -- the cell as printed",
        "    value DOUBLE         -- the cell's number (NULL for words)",
        ");",
        "-- example rows (row_name, column_name, value): " + "; ".join(
            f"({_sql_literal(r)}, {_sql_literal(h)}, {_fmt(n)})" for _, r, h, _, n in examples),
        f"-- Question: {question}",
        f"-- Answer format: {answer_format or '-'}",
    ]
    if note:
        lines.append(f"-- A previous query failed: {note}")
    lines += [
        "-- Write one DuckDB query over the table cells (SELECT ... FROM cells ...) whose result answers the question.",
        "-- Copy row_name and column_name values exactly as listed; compare and compute with value; "
        "select row_name with every value so the answer says which row it is.",
        *_examples(rel),
        'Reply with JSON {"sql": "SELECT ... FROM cells ..."}.',
    ]
    return "\n".join(lines)


def bound_sql(sql: str, table_id: str) -> str:
    """``sql`` with ``cells`` bound to table ``table_id`` by a leading ``WITH`` (merged into the
    query's own ``WITH`` when it has one). ``table_id`` must be a UUID (it is inlined)."""
    if not _UUID.match(table_id):
        raise ValueError(f"not a table id: {table_id!r}")
    cte = ("cells AS (SELECT row_index AS row_no, row_header AS row_name, column_header_path AS column_name, "
           f"cell_text AS text, number AS value FROM table_cells WHERE ref_table_id = '{table_id}'::UUID "
           "AND NOT is_header)")
    body = sql.strip().rstrip(";").strip()
    if _WITH.match(body):
        return "WITH " + cte + ", " + _WITH.sub("", body, count=1)
    return "WITH " + cte + " " + body


def _name_key(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", (text or "").lower()).split())


def closest_name(literal: str, names: list[str]) -> str | None:
    """The listed name a literal the model wrote means, or None when none is close: the name itself;
    else the name whose normalised header levels end with the literal's ("Cite / MAP" ->
    "Citation prediction / Cite / MAP"), or that contains it as whole words; else the most similar
    name (difflib ratio ≥ 0.75). Ties: the first in table order."""
    import difflib

    if literal in names:
        return literal
    key = _name_key(literal)
    if not key:
        return None
    keys = [_name_key(n) for n in names]
    for n, k in zip(names, keys):
        if k == key:
            return n
    for n, k in zip(names, keys):
        if k.endswith(" " + key) or (" / " in n and _name_key(n.split(" / ")[-1]) == key):
            return n
    for n, k in zip(names, keys):
        if re.search(r"(?:^| )" + re.escape(key) + r"(?: |$)", k):
            return n
    best, score = None, 0.0
    for n, k in zip(names, keys):
        r = difflib.SequenceMatcher(None, key, k).ratio()
        if r > score:
            best, score = n, r
    return best if score >= 0.75 else None


def link_names(sql: str, rel: TableRelation) -> str:
    """``sql`` with each string literal compared to ``row_name`` / ``column_name`` (=, <>, IN) replaced
    by the listed name it means (:func:`closest_name`) — the value linking of text-to-SQL: a small
    model shortens or misspells the long header paths it was shown. ``sql`` unchanged when it does not
    parse or nothing needed linking."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except Exception:  # noqa: BLE001 - sqlglot raises several error types; the query runs as written
        return sql
    names = {"row_name": rel.rows, "column_name": rel.headers}
    changed = False

    def target(node: exp.Expression) -> str | None:
        return node.name.lower() if isinstance(node, exp.Column) and node.name.lower() in names else None

    for cmp in list(tree.find_all(exp.EQ, exp.NEQ, exp.In)):
        column = target(cmp.this) or (target(cmp.expression) if not isinstance(cmp, exp.In) else None)
        if column is None:
            continue
        literals = (cmp.expressions if isinstance(cmp, exp.In) else [cmp.expression, cmp.this])
        for lit in literals:
            if isinstance(lit, exp.Literal) and lit.is_string:
                linked = closest_name(lit.this, names[column])
                if linked is not None and linked != lit.this:
                    lit.replace(exp.Literal.string(linked))
                    changed = True
    return tree.sql(dialect="duckdb") if changed else sql


def _extract_sql(text: str) -> str:
    try:
        value = json.loads(text)
        if isinstance(value, dict) and isinstance(value.get("sql"), str):
            return value["sql"]
    except (ValueError, TypeError):
        pass
    m = re.search(r"(?is)\b(select|with)\b.*", text or "")
    return m.group(0) if m else ""


def query_table(question: str, answer_format: str | None, rel: TableRelation, env: Any, llm: Any) -> SqlResult:
    """Ask ``llm`` for one query over ``rel`` and run it under the SQL budget; one repair round with
    DuckDB's message (or "no rows") when it fails. Never raises for a bad query: the result's
    ``error`` says what went wrong. Raises :class:`NeusymError` subclasses of the LLM (cancelled,
    unavailable) as they come."""
    note = ""
    result = SqlResult("", [], [])
    for _ in range(2):
        reply = llm.chat([{"role": "user", "content": relation_prompt(question, answer_format, rel, note)}],
                         json_schema=SQL_SCHEMA, max_tokens=220)
        result.replies.append(reply)
        sql = _extract_sql(reply.text)
        result.sql = sql
        if not sql.strip():
            note = "the reply held no SELECT query"
            result.error = note
            continue
        sql = link_names(sql, rel)
        result.sql = sql
        try:
            res = env.run_sql(bound_sql(sql, rel.table_id), max_rows=MAX_RESULT_ROWS)
        except NeusymError as exc:
            result.error = str(exc).splitlines()[0][:300]
            note = f"{sql} -- {result.error} (the only table is cells)"
            continue
        result.columns, result.rows, result.error = list(res.columns), list(res.rows), None
        if result.rows and any(v is not None for row in result.rows for v in row):
            return result
        note = f"{sql} -- returned no rows: copy row_name and column_name values exactly as listed"
        result.error = "no rows"
    return result


def verify_sql(result: SqlResult, rel: TableRelation, env: Any) -> bool:
    """Re-run the query and compare: True when it gives the same rows again (a query over a
    published, read-only corpus version is deterministic unless it is not: ``random()``)."""
    try:
        again = env.run_sql(bound_sql(result.sql, rel.table_id), max_rows=MAX_RESULT_ROWS)
    except NeusymError:
        return False
    return list(again.rows) == list(result.rows)


def _plain_value(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: Result columns that repeat what the query filtered on rather than answer it (the relation's own
#: position and header columns): dropped when a result is wider than the answer format asks.
_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st"})


def answer_label(label: str, answer_format: str | None = None) -> str:
    """A row label as an answer: typographic ligatures spelled out ("Oﬀ-the-shelf" -> "Off-the-shelf"),
    the parenthesised year or citation dropped when the format says "without the year" ("SGC (2019a)"
    -> "SGC"), and the one option of a format that lists them ("'bias', 'FFN' or 'classification
    head'") that the label names, spelled as listed. Reads the answer format, never the question."""
    out = label.translate(_LIGATURES)
    if WITHOUT_YEAR.search(answer_format or ""):
        out = " ".join(re.sub(r"\s*\([^)]*\)", " ", out).split()) or out
    options = re.findall(r"'([^']{1,60})'", answer_format or "")
    if len(options) >= 2:
        inside = [o for o in options if re.search(r"(?<!\w)" + re.escape(o.lower()) + r"(?!\w)", out.lower())]
        if len(inside) == 1:
            out = inside[0]
    return out


ECHO_COLUMNS = ("column_name", "row_no")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def shaped_result(result: SqlResult, answer_format: str | None) -> Any:
    """The query's rows as the answer, when their shape is the one the answer format asks for
    (:func:`neusym.query.agent.answer_format.shape_of`): a list of N elements from one row of N
    columns or N rows of one column; a list of any length from the rows of one column; one number
    from a one-row result with exactly one numeric column (the row's name beside it is the query
    saying which row it read); one string from a one-by-one result. A result wider than the list
    asked for first loses its :data:`ECHO_COLUMNS` (``SELECT row_name, column_name, value`` for
    "[name, value]"). Row names in the answer are spelled as a reader would write them
    (:func:`answer_label`: ligatures, "without the year"). None
    otherwise (a yes/no question, more rows than asked for, words where a number is asked): the rows
    are then evidence for the answer call."""
    from neusym.query.agent.answer_format import shape_of

    if not result.ok:
        return None
    shape = shape_of(answer_format)
    columns = list(result.columns)
    rows = [tuple(_plain_value(v) for v in row) for row in result.rows]
    want = shape.length if shape.kind == "list" else 1
    lowered = [c.lower() for c in columns]
    for echo in ECHO_COLUMNS:
        if want and len(columns) > want and echo in lowered:
            i = lowered.index(echo)
            columns.pop(i), lowered.pop(i)
            rows = [row[:i] + row[i + 1:] for row in rows]
    width = len(columns)

    def label(value: Any) -> Any:
        return answer_label(value, answer_format) if isinstance(value, str) else value

    if shape.kind == "list":
        if shape.length and len(rows) == 1 and width == shape.length:
            return [label(v) for v in rows[0]]
        if width == 1 and (not shape.length or len(rows) == shape.length):
            return [label(r[0]) for r in rows]
        return None
    if len(rows) != 1:
        return None
    if shape.kind in ("int", "float"):
        numbers = [v for v in rows[0] if _is_number(v)]
        if len(numbers) != 1 or any(v is not None and not _is_number(v) and not isinstance(v, str) for v in rows[0]):
            return None
        value = numbers[0]
        if shape.kind == "int":
            return value if isinstance(value, int) else None
        return round(value, shape.decimals) if shape.decimals is not None else value
    if width != 1:
        return None
    value = rows[0][0]
    if shape.kind == "str" and isinstance(value, str):
        return label(value)
    return None


__all__ = ["SqlResult", "TableRelation", "answer_label", "bound_sql", "closest_name", "link_names", "load_relation", "query_table",
           "relation_prompt", "shaped_result", "verify_sql"]
