"""Table operations: the extremum and threshold questions a small model misreads, computed instead.

"Which field does ScienceParse extract with the lowest F1?" asks for an argmin over one column of a
table the focused route already retrieved. A 1.5B model reading six rows of numbers picks the wrong
row about as often as the right one; picking *which column and which operation* is a much easier,
closed choice. So, NeuSym-style, the model only chooses, under a JSON schema whose enums are the
table's own column names and the operations (:func:`choose_operation`), and Python computes
(:func:`apply_operation`): the row with the highest / lowest value of that column, or the rows whose
value is above / below a threshold. When the answer format's shape follows from the selected rows
(a name, a number, ``[name, number]``, a list of names: :func:`shaped_answer`) that is the answer;
otherwise the result becomes the first evidence line of the answer call. Either way it cites the
table.

Tables come from ``tables.table_content`` (HTML): :func:`parse_table` takes the leading rows whose
cells are mostly not numbers as the header (several header rows are joined per column, e.g.
``"Cite / MAP"``) and the first cell of each data row as its label.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from neusym.errors import NeusymError
from neusym.evaluation.parsing import coerce_number

OPERATION_CUE = re.compile(
    r"\b(highest|lowest|best|worst|largest|smallest|fewest|least|maximum|minimum|biggest|greatest|"
    r"most|top|above|below|more than|less than|greater than|fewer than|exceed\w*|at least|at most|over|under)\b",
    re.I)
"""Words of a question that may ask for an extremum or a threshold over a table column."""

OPERATIONS = ("highest", "lowest", "above", "below", "none")
MAX_COLUMNS = 40


@dataclass
class ParsedTable:
    """A table as ``columns`` (one name per column; header rows joined with " / ") and data ``rows``
    (lists of cell texts, each as long as ``columns``)."""

    columns: list[str]
    rows: list[list[str]]


def cell_number(text: str) -> float | None:
    """The number a table cell shows ("85.5", "62%", "−0.3", "1,284", "84.2±0.3" → 84.2, "91.6*"),
    read by :func:`neusym.evaluation.parsing.coerce_number` after the cell's annotations (± spread,
    a parenthesised aside, significance marks) are cut; None for empty cells, words and cells with
    several numbers ("36.9 80.0")."""
    t = re.split(r"\s*(?:±|\+/-|\()", (text or "").strip(), maxsplit=1)[0].strip().rstrip("*†‡").strip()
    value = coerce_number(t, extract=False) if t else None
    return None if value is None or isinstance(value, bool) else float(value)


def parse_table(rows: list[list[str]]) -> ParsedTable | None:
    """Split ``rows`` (cell texts, first row first) into header and data: header rows are the
    leading rows where at most a third of the cells after the first hold a number. None when no
    data row or fewer than two columns remain."""
    rows = [r for r in rows if any(c.strip() for c in r)]
    width = max((len(r) for r in rows), default=0)
    if width < 2:
        return None
    rows = [r + [""] * (width - len(r)) for r in rows]
    n_header = 0
    for row in rows:
        numeric = sum(1 for c in row[1:] if cell_number(c) is not None)
        if numeric > (len(row) - 1) / 3:
            break
        n_header += 1
    header, data = rows[:n_header], rows[n_header:]
    if not data:
        return None
    columns = []
    for j in range(width):
        parts: list[str] = []
        for row in header:
            text = " ".join(row[j].split())
            if text and text not in parts:
                parts.append(text)
        columns.append(" / ".join(parts) or f"column {j + 1}")
    seen: dict[str, int] = {}
    for j, name in enumerate(columns):  # enum values must be unique
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            columns[j] = f"{name} ({seen[name]})"
    return ParsedTable(columns, data)


@dataclass
class TableResult:
    """What an operation selected: the ``operation``, the ``column`` name, the selected ``rows`` as
    (row label = first cell, value) and ``text``, one evidence sentence saying so."""

    operation: str
    column: str
    rows: list[tuple[str, float]]
    text: str


def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def apply_operation(table: ParsedTable, column: int, operation: str, threshold: float | None = None
                    ) -> TableResult | None:
    """The rows ``operation`` selects by the numbers of ``column`` (ties of an extremum all count);
    None when the column holds no number, the operation is ``none`` or a threshold operation has no
    threshold."""
    values = [(row[0].strip() or f"row {i + 1}", cell_number(row[column])) for i, row in enumerate(table.rows)]
    values = [(label, v) for label, v in values if v is not None]
    name = table.columns[column]
    if not values or operation not in OPERATIONS or operation == "none":
        return None
    fmt = lambda v: f"{v:g}"  # noqa: E731
    if operation in ("highest", "lowest"):
        top = (max if operation == "highest" else min)(v for _, v in values)
        best = [(label, v) for label, v in values if v == top]
        # only the selected row(s): naming the runner-up too made the small model answer with it
        return TableResult(operation, name, best, f"the {operation} '{name}' is {fmt(top)}, in row "
                           + " and ".join(label for label, _ in best))
    if threshold is None:
        return None
    keep = [(label, v) for label, v in values if (v > threshold if operation == "above" else v < threshold)]
    listed = ", ".join(f"{label} ({fmt(v)})" for label, v in keep) or "none"
    return TableResult(operation, name, keep, f"rows with '{name}' {operation} {fmt(threshold)}: {listed}")


def shaped_answer(result: TableResult, answer_format: str | None) -> Any:
    """The answer ``result`` gives in the shape ``answer_format`` asks for, or None when the shape does
    not follow from it (free text, or a list whose length is not what was selected): a single
    extremum row gives its label (a string), its value (a number) or ``[label, value]`` (a list of
    two); threshold rows give the list of their labels."""
    from neusym.agent.answer_format import shape_of

    shape = shape_of(answer_format)
    if not result.rows:
        return None
    if result.operation in ("highest", "lowest"):
        if len(result.rows) != 1:
            return None
        label, value = result.rows[0]
        if shape.kind == "str":
            return label
        if shape.kind == "int" and float(value).is_integer():
            return int(value)
        if shape.kind == "float":
            return value
        if shape.kind == "list" and shape.length == 2:
            return [label, _plain(value)]
        return None
    if shape.kind == "list" and shape.length in (None, len(result.rows)):
        return [label for label, _ in result.rows]
    return None


def operation_schema(tables: list[tuple[int, ParsedTable]]) -> dict:
    """JSON schema of the model's choice: ``table`` (an evidence number), ``column`` (one of those
    tables' column names, as ``"[n] name"``), ``operation`` (:data:`OPERATIONS`), ``threshold``."""
    names = [f"[{n}] {c}" for n, t in tables for c in t.columns[1:MAX_COLUMNS]]
    return {"type": "object",
            "properties": {"operation": {"type": "string", "enum": list(OPERATIONS)},
                           "column": {"type": "string", "enum": names or ["none"]},
                           "threshold": {"type": "number"}},
            "required": ["operation", "column", "threshold"], "additionalProperties": False}


CHOOSE_SYSTEM = (
    "Decide whether the question asks for the row of a table with the highest or lowest value of one column, "
    "or for the rows whose value is above or below a number. Reply with JSON: \"operation\" (highest, lowest, "
    "above, below, or none when the question asks something else), \"column\": the table column it is about, "
    "\"threshold\": the number for above/below (0 otherwise)."
)


def choose_operation(question: str, tables: list[tuple[int, ParsedTable]], llm: Any
                     ) -> tuple[tuple[int, TableResult] | None, Any]:
    """One constrained LLM call choosing the operation on one of ``tables`` (evidence number, table):
    ((the chosen table's evidence number, its :class:`TableResult`) or None, the LLM reply or None).
    LLM errors, the choice ``none`` and unusable choices give None: the answer call then reads the
    table itself."""
    if not tables:
        return None, None
    listing = "\n".join(f"[{n}] columns: " + " | ".join(t.columns[1:MAX_COLUMNS]) +
                        "; rows: " + ", ".join(r[0] for r in t.rows[:12]) for n, t in tables)
    user = f"[Question]: {question.strip()}\n[Tables]:\n{listing}"
    try:
        reply = llm.chat([{"role": "system", "content": CHOOSE_SYSTEM}, {"role": "user", "content": user}],
                         json_schema=operation_schema(tables), max_tokens=60)
        data = json.loads(reply.text)
    except (NeusymError, ValueError, TypeError, AttributeError):
        return None, None
    m = re.match(r"^\[(\d+)\] (.*)$", str(data.get("column", "")))
    if not m or data.get("operation") not in OPERATIONS:
        return None, reply
    number, name = int(m.group(1)), m.group(2)
    table = dict(tables).get(number)
    if table is None or name not in table.columns:
        return None, reply
    threshold = data.get("threshold")
    result = apply_operation(table, table.columns.index(name), data["operation"],
                             float(threshold) if isinstance(threshold, (int, float)) else None)
    return ((number, result) if result else None), reply


__all__ = ["OPERATIONS", "OPERATION_CUE", "ParsedTable", "TableResult", "apply_operation", "cell_number",
           "choose_operation", "operation_schema", "parse_table", "shaped_answer"]
