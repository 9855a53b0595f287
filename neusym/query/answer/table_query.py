"""Table questions through SQL: the model writes one query over one table, DuckDB answers.

A 1.5B coder model reads a long table badly (it answers with the neighbouring row, a row label or a
footnote mark) but writes a short SQL query reliably. So when the focused route's evidence holds a
table, the model is shown that table as a relation built from ``table_cells``
(:mod:`neusym.ingest.parse.cells`) and writes one ``SELECT`` over it. The relation has two forms
(``FocusedConfig.table_form``, :mod:`neusym.query.answer.config`):

- ``"wide"`` (the default): one row per table row, one column per header path, the form of
  text-to-SQL benchmarks a coder model has seen most::

      t(row_no INTEGER, row_name VARCHAR, Citation_prediction_Cite_MAP DOUBLE, ...)

  Each column is named by an identifier made from its header path (:func:`column_identifier`,
  the path beside it as a comment) so that a query needs no quoting; the rows are listed in the
  prompt as SQL tuples. A column name the query writes that ``t`` does not have is linked to the
  header it means (:func:`link_wide_names`).
- ``"cells"``: one row per data cell, the form before (``benchmarks/results/table_wide_form.json``)::

      cells(row_no INTEGER, row_name VARCHAR, column_name VARCHAR, text VARCHAR, value DOUBLE)

  (``row_name`` the row header, ``column_name`` the column's header path, ``text`` the cell as
  printed, ``value`` its number or NULL), a few cells shown; names the query compares
  ``row_name`` / ``column_name`` with are linked to the listed ones (:func:`link_names`:
  "Cite / MAP" -> "Citation prediction / Cite / MAP").

The query runs read-only under the SQL budget (:meth:`neusym.query.agent.actions.Environment.run_sql`,
the relation bound to that one table by a ``WITH`` clause); a query that fails is repaired once with
DuckDB's message. Extremum, difference against a named row, threshold, average, "which setting": all
are the same mechanism, no operation menu and no wording rule. When the rows have the shape the answer
format asks for (one row of N values for a list of N, one value for a number, :func:`shaped_result`)
they are the answer; otherwise they become the first evidence line of the answer call. The query is
re-run by the verifier (:func:`verify_sql`), which cites the table.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from neusym.errors import NeusymError
from neusym.query.answer.config import current
from neusym.query.answer.cues import WITHOUT_YEAR

#: Header paths / row headers listed in the prompt at most (a larger table is listed in part, its size said).
MAX_LISTED = 40
#: Result rows the answer call sees.
MAX_RESULT_ROWS = 12
#: Example cells shown to the model.
EXAMPLE_CELLS = 6
#: Rows of a wide table listed in the prompt at most.
MAX_WIDE_ROWS = 30

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
    in table order, the data cells ``(row_no, row, header, text, number[, column_index])``."""

    table_id: str
    caption: str
    headers: list[str]
    rows: list[str]
    cells: list[tuple] = field(default_factory=list)

    @cached_property
    def wide(self) -> list["WideColumn"]:
        """The table's columns in wide form (:func:`wide_columns`), computed once."""
        return wide_columns(self)


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
    bound: str = ""  # the query as run, the table bound to its name (what the verifier re-runs)

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
            "SELECT row_index, row_header, column_header_path, cell_text, number, column_index FROM table_cells "
            "WHERE ref_table_id = ?::UUID AND NOT is_header ORDER BY row_index, column_index", [str(table_id)])
    except Exception:  # noqa: BLE001 - a database from before table_cells: no relation, the route goes on
        return None
    if not cells or not any(c[4] is not None for c in cells):
        return None
    headers: list[str] = []
    rows: list[str] = []
    for _, row, header, _, number, *_ in cells:
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


@dataclass
class WideColumn:
    """One column of a table in wide form: its ``name``, an SQL identifier made from the header path
    (:func:`column_identifier`: "Co-View / nDCG" -> ``Co_View_nDCG``, "column_N" when it has none,
    ``_2`` added to a repeated one), the ``path`` it stands for, the ``column_index`` it reads and
    whether it holds numbers."""

    name: str
    column_index: int
    numeric: bool
    path: str = ""


#: DuckDB's reserved words: an identifier equal to one gets a trailing underscore ("All" -> ``All_``).
_RESERVED = frozenset("""all analyse analyze and any array as asc asymmetric both case cast check collate column
constraint create default deferrable desc describe distinct do else end except false fetch for foreign from group
having in initially intersect into lambda lateral leading limit not null offset on only or order pivot pivot_longer
pivot_wider placing primary qualify references returning select show some summarize symmetric table then to
trailing true union unique unpivot using variadic when where window with row_no row_name t""".split())


def column_identifier(path: str) -> str:
    """An identifier a query can write without quotes for a header path: runs of other characters than
    letters and digits become ``_`` ("User activity prediction / Co-View / nDCG" ->
    ``User_activity_prediction_Co_View_nDCG``, "|P|" -> ``P``); ``c_`` before one that starts with a
    digit, ``_`` after a reserved word."""
    ident = re.sub(r"[^0-9A-Za-z]+", "_", path).strip("_") or "column"
    if ident[0].isdigit():
        ident = "c_" + ident
    if ident.lower() in _RESERVED:
        ident += "_"
    return ident


def wide_columns(rel: TableRelation) -> list[WideColumn]:
    """The columns of ``rel`` in wide form, in table order: every column of data cells except the
    row-label columns (each of whose cells is part of its row's name). A column is numeric when at
    least half its cells have a number (its value is then the number, else the text)."""
    by_index: dict[int, list[tuple]] = {}
    for cell in rel.cells:
        if len(cell) < 6:
            return []
        by_index.setdefault(cell[5], []).append(cell)
    out: list[WideColumn] = []
    seen: dict[str, int] = {}
    for index in sorted(by_index):
        column = by_index[index]
        if all(c[1] and c[4] is None and " ".join(c[3].split()) in c[1] for c in column):
            continue  # the row-label column: already row_name
        path = next((c[2] for c in column if c[2]), None) or f"column {index + 1}"
        ident = column_identifier(path)
        seen[ident.lower()] = seen.get(ident.lower(), 0) + 1
        name = ident if seen[ident.lower()] == 1 else f"{ident}_{seen[ident.lower()]}"
        numeric = 2 * sum(c[4] is not None for c in column) >= len(column)
        out.append(WideColumn(name, index, numeric, path))
    return out


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def wide_prompt(question: str, answer_format: str | None, rel: TableRelation, note: str = "") -> str:
    """The prompt that asks for one query over the table in wide form (``FocusedConfig.table_form``
    ``"wide"``): a ``CREATE TABLE t`` with one column per header path (:func:`wide_columns`, the
    path as a comment beside an identifier that differs from it), then its rows (at most
    :data:`MAX_WIDE_ROWS`) as SQL tuples, the question and the answer format."""
    columns = rel.wide
    caption = " ".join(rel.caption.split())[:300]
    grid: dict[int, dict[int, tuple]] = {}
    names: dict[int, str] = {}
    for cell in rel.cells:
        grid.setdefault(cell[0], {})[cell[5]] = cell
        if cell[1] and cell[0] not in names:
            names[cell[0]] = cell[1]
    lines = [f"-- {caption}", "CREATE TABLE t (",
             "    row_no INTEGER,    -- position of the row in the table, from the top",
             "    row_name VARCHAR,  -- the row's label"]
    for i, c in enumerate(columns):
        comma = "," if i < len(columns) - 1 else ""
        lines.append(f"    {c.name} {'DOUBLE' if c.numeric else 'VARCHAR'}{comma}" + (f"  -- {c.path}" if c.path != c.name else ""))
    lines.append(");")
    lines.append("-- The rows of t, values in column order:")
    row_numbers = sorted(grid)
    for row_no in row_numbers[:MAX_WIDE_ROWS]:
        values = []
        for c in columns:
            cell = grid[row_no].get(c.column_index)
            if cell is None:
                values.append("NULL")
            elif c.numeric:
                values.append(_fmt(cell[4]) if cell[4] is not None else "NULL")
            else:
                values.append(_sql_literal(cell[3]))
        name = names.get(row_no)
        lines.append(f"-- ({row_no}, {_sql_literal(name) if name else 'NULL'}, " + ", ".join(values) + ")")
    if len(row_numbers) > MAX_WIDE_ROWS:
        lines.append(f"-- ... ({len(row_numbers) - MAX_WIDE_ROWS} more rows)")
    lines += [f"-- Question: {question}", f"-- Answer format: {answer_format or '-'}"]
    if note:
        lines.append(f"-- A previous query failed: {note}")
    h1 = columns[0].name if columns else "..."
    h2 = columns[1].name if len(columns) > 1 else h1
    r1 = _sql_literal(rel.rows[0] if rel.rows else "...")
    lines += [
        "-- Write one DuckDB query over t whose result answers the question.",
        "-- Write column names exactly as in CREATE TABLE and row names exactly as listed; "
        "select row_name with every value so the answer says which row it is.",
        f"-- e.g. the row with the highest value in a column: SELECT row_name, {h1} FROM t ORDER BY {h1} DESC LIMIT 1",
        f"-- e.g. how far each row is above a named row: SELECT a.row_name, a.{h1} - b.{h1} AS difference FROM t a, t b "
        f"WHERE b.row_name = {r1} ORDER BY difference DESC",
        f"-- e.g. the row where two columns differ least: SELECT row_name, abs({h1} - {h2}) AS gap FROM t ORDER BY gap LIMIT 1",
        'Reply with JSON {"sql": "SELECT ... FROM t ..."}.',
    ]
    return "\n".join(lines)


def bound_wide_sql(sql: str, rel: TableRelation) -> str:
    """``sql`` with ``t`` bound to ``rel`` in wide form (:func:`wide_columns`) by a leading ``WITH``,
    merged into the query's own ``WITH`` when it has one. Raises ValueError for a table id that is
    not a UUID (it is inlined)."""
    if not _UUID.match(rel.table_id):
        raise ValueError(f"not a table id: {rel.table_id!r}")
    picks = [f"max({'number' if c.numeric else 'cell_text'}) FILTER (WHERE column_index = {c.column_index}) "
             f"AS {_ident(c.name)}" for c in rel.wide]
    cte = ("t AS (SELECT row_index AS row_no, any_value(row_header) AS row_name" + "".join(", " + p for p in picks)
           + f" FROM table_cells WHERE ref_table_id = '{rel.table_id}'::UUID AND NOT is_header GROUP BY row_index)")
    body = sql.strip().rstrip(";").strip()
    if _WITH.match(body):
        return "WITH " + cte + ", " + _WITH.sub("", body, count=1)
    return "WITH " + cte + " " + body


def link_wide_names(sql: str, rel: TableRelation) -> str:
    """:func:`link_names` for the wide form: string literals compared to ``row_name`` linked to the
    row names, and each column the query names that ``t`` does not have (and the query does not
    define as an alias) linked to the header path it means (:func:`closest_name`: ``"Cite / MAP"``
    -> ``Citation_prediction_Cite_MAP``); MySQL's backquotes become double quotes. ``sql`` otherwise
    unchanged when it does not parse."""
    import sqlglot
    from sqlglot import exp

    sql = re.sub(r"`([^`]*)`", r'"\1"', sql)  # MySQL's quotes, which DuckDB does not read
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except Exception:  # noqa: BLE001 - sqlglot raises several error types; the query runs as written
        return sql
    headers = [c.name for c in rel.wide]
    known = {"row_no", "row_name"} | {h.lower() for h in headers}
    aliases = {a.alias for a in tree.find_all(exp.Alias)} | {t.alias for t in tree.find_all(exp.TableAlias) if t.name}
    changed = False
    for col in list(tree.find_all(exp.Column)):
        name = col.name
        if not name or name.lower() in known or name in aliases:
            continue
        linked = closest_name(name, headers)
        if linked is not None:
            col.set("this", exp.to_identifier(linked, quoted=True))
            changed = True
    changed = _link_literals(tree, {"row_name": rel.rows}) or changed
    return tree.sql(dialect="duckdb") if changed else sql


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
            f"({_sql_literal(r)}, {_sql_literal(h)}, {_fmt(n)})" for _, r, h, _, n, *_ in examples),
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
    changed = _link_literals(tree, {"row_name": rel.rows, "column_name": rel.headers})
    return tree.sql(dialect="duckdb") if changed else sql


def _link_literals(tree: Any, names: dict[str, list[str]]) -> bool:
    """Replace, in the parsed query ``tree``, each string literal compared (=, <>, IN) with a column
    of ``names`` by the listed name it means (:func:`closest_name`); True when one changed."""
    from sqlglot import exp

    changed = False

    def target(node: Any) -> str | None:
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
    return changed


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
    wide = current().table_form == "wide" and bool(rel.wide)
    prompt = wide_prompt if wide else relation_prompt
    note = ""
    result = SqlResult("", [], [])
    for _ in range(2):
        reply = llm.chat([{"role": "user", "content": prompt(question, answer_format, rel, note)}],
                         json_schema=SQL_SCHEMA, max_tokens=220)
        result.replies.append(reply)
        sql = _extract_sql(reply.text)
        result.sql = sql
        if not sql.strip():
            note = "the reply held no SELECT query"
            result.error = note
            continue
        sql = link_wide_names(sql, rel) if wide else link_names(sql, rel)
        result.sql = sql
        result.bound = bound_wide_sql(sql, rel) if wide else bound_sql(sql, rel.table_id)
        try:
            res = env.run_sql(result.bound, max_rows=MAX_RESULT_ROWS)
        except NeusymError as exc:
            result.error = str(exc).splitlines()[0][:300]
            note = f"{sql} -- {result.error} (the only table is {'t' if wide else 'cells'})"
            continue
        result.columns, result.rows, result.error = list(res.columns), list(res.rows), None
        if result.rows and any(v is not None for row in result.rows for v in row):
            return result
        note = f"{sql} -- returned no rows: copy " + ("column and row names" if wide else "row_name and column_name values") + " exactly as listed"
        result.error = "no rows"
    return result


def verify_sql(result: SqlResult, rel: TableRelation, env: Any) -> bool:
    """Re-run the query and compare: True when it gives the same rows again (a query over a
    published, read-only corpus version is deterministic unless it is not: ``random()``)."""
    try:
        again = env.run_sql(result.bound or bound_sql(result.sql, rel.table_id), max_rows=MAX_RESULT_ROWS)
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
        out = " ".join(re.sub(r"(?<!\s)\s*\([^()]*\)", " ", out).split()) or out
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
    (:func:`neusym.query.answer.answer_format.shape_of`): a list of N elements from one row of N
    columns or N rows of one column; a list of any length from the rows of one column; one number
    from a one-row result with exactly one numeric column (the row's name beside it is the query
    saying which row it read); one string from a one-by-one result. A result wider than the list
    asked for first loses its :data:`ECHO_COLUMNS` (``SELECT row_name, column_name, value`` for
    "[name, value]"). Row names in the answer are spelled as a reader would write them
    (:func:`answer_label`: ligatures, "without the year"). None
    otherwise (a yes/no question, more rows than asked for, words where a number is asked): the rows
    are then evidence for the answer call."""
    from neusym.query.answer.answer_format import shape_of

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
