"""Table operations: the extremum and threshold questions a small model misreads, computed instead.

"Which field does ScienceParse extract with the lowest F1?" asks for an argmin over one column of a
table the focused route already retrieved. A 1.5B model reading six rows of numbers picks the wrong
row about as often as the right one; picking *which column and which operation* is a much easier,
closed choice. So, NeuSym-style, the model only chooses, under a JSON schema whose enums are the
table's own column names and the operations (:func:`choose_operation`), and Python computes
(:func:`apply_operation`): the row with the highest / lowest value of that column, the rows whose
value is above / below a threshold, or the row where two columns differ most / least ("in which
setting is the gap between COARSE and FINE smallest?"). When the answer format's shape follows from the selected rows
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
from dataclasses import dataclass, field
from typing import Any

from neusym.errors import NeusymError
from neusym.ingest.parse.cells import ParsedTable, cell_number, parse_table
from neusym.query.agent.cues import (
    ABLATION_CUE as _ABLATION_CUE,
    AVERAGE_WORDS as _AVERAGE_WORDS,
    DOWN_WORDS as _DOWN_WORDS,
    GAP_CUE,
    GAP_WORDS as _GAP_WORDS,
    TABLE_OPERATION as OPERATION_CUE,
    WITHOUT_YEAR as _WITHOUT_YEAR,
)


OPERATIONS = ("highest", "lowest", "above", "below", "largest_gap", "smallest_gap", "none")
GAP_OPERATIONS = ("largest_gap", "smallest_gap")
_AVERAGE_COLUMN = re.compile(r"\b(?:avg|average|mean)\b", re.I)
MAX_COLUMNS = 40


@dataclass
class TableResult:
    """What an operation selected: the ``operation``, the ``column`` name (gap operations: both
    names, "A − B"), the selected ``rows`` as (row label, value; for a gap the absolute difference;
    for an extremum measured against a ``reference`` row, the difference to that row), ``text``, one
    evidence sentence saying so, and ``parts``: the cells of a multi-column label of the one selected
    row (:func:`label_parts`)."""

    operation: str
    column: str
    rows: list[tuple[str, float]]
    text: str
    reference: str | None = None
    parts: dict[str, str] = field(default_factory=dict)


def _lead_columns(table: ParsedTable) -> int:
    """How many columns at the left hold text rather than numbers (the row labels)."""
    lead = 0
    for j in range(len(table.columns)):
        texts = sum(1 for r in table.rows if r[j].strip() and cell_number(r[j]) is None)
        numbers = sum(1 for r in table.rows if cell_number(r[j]) is not None)
        if numbers > texts:
            break
        lead += 1
    return lead


def label_parts(table: ParsedTable, label: str) -> dict[str, str]:
    """The cells of the text columns that make up a multi-column row ``label`` ("CS, SciERC, Luan et
    al. (2018), REL" -> {"Domain": "CS", "Dataset": "SciERC", "Reference": ..., "Task": "REL"});
    cells left empty under a spanning label are filled from the rows above. {} for one-column labels."""
    lead = _lead_columns(table)
    if lead <= 1:
        return {}
    above = [""] * lead
    for row, row_label in zip(table.rows, row_labels(table)):
        above = [c.strip() or above[j] for j, c in enumerate(row[:lead])]
        if row_label == label:
            return {table.columns[j]: above[j] for j in range(lead) if above[j]}
    return {}


def row_labels(table: ParsedTable) -> list[str]:
    """A label per data row: its first cell; when the table starts with several text columns
    (S2ORC's "Domain | Dataset | Reference | Task"), their non-empty cells joined with ", "; "row N"
    when there is no text."""
    lead = _lead_columns(table)
    labels = []
    for i, row in enumerate(table.rows):
        cells = [c.strip() for c in row[:max(lead, 1)] if c.strip()]
        label = row[0].strip() if lead <= 1 else ", ".join(cells)
        labels.append(label or f"row {i + 1}")
    return labels


def asks_beyond(question: str, result: TableResult) -> bool:
    """Whether ``question`` asks to compute more than ``result`` did: its compute words
    (:func:`neusym.query.agent.verify.asks_to_compute`) left once those a gap operation answers
    ("difference", "gain", "by how many" ...) and, for a column named like an average ("Avg."),
    "average" / "mean" are taken out."""
    from neusym.query.agent.verify import asks_to_compute

    rest = question or ""
    if result.operation in GAP_OPERATIONS or result.reference:
        rest = _GAP_WORDS.sub(" ", rest)
    if _AVERAGE_COLUMN.search(result.column):
        rest = _AVERAGE_WORDS.sub(" ", rest)
    return asks_to_compute(rest)


def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _decimals(text: str) -> int:
    m = re.search(r"\d[.,](\d+)", text or "")
    return len(m.group(1)) if m else 0


def apply_operation(table: ParsedTable, column: int, operation: str, threshold: float | None = None,
                    other: int | None = None) -> TableResult | None:
    """The rows ``operation`` selects by the numbers of ``column`` (ties of an extremum all count);
    ``smallest_gap``: the row whose absolute difference between ``column`` and ``other`` is smallest;
    ``largest_gap``: the row whose difference is largest, oriented the way most rows go (so "gains
    the most" and "loses the most" do not depend on the order the two columns were chosen in);
    differences are rounded to the cells' decimals. None when the column holds no
    number, the operation is ``none``, a threshold operation has no threshold or a gap operation no
    second column."""
    labels = row_labels(table)
    name = table.columns[column]
    fmt = lambda v: f"{v:g}"  # noqa: E731
    if operation in GAP_OPERATIONS:
        if other is None or other == column:
            return None
        gaps = []
        for label, row in zip(labels, table.rows):
            a, b = cell_number(row[column]), cell_number(row[other])
            if a is not None and b is not None:
                places = max(_decimals(row[column]), _decimals(row[other]))
                gaps.append((label, round(a - b, places), a, b))
        if not gaps:
            return None
        if operation == "smallest_gap":  # "where is the gap between A and B smallest": either way round
            gaps = [(label, abs(g), a, b) for label, g, a, b in gaps]
        elif sum(1 for _, g, _, _ in gaps if g < 0) > sum(1 for _, g, _, _ in gaps if g > 0):
            # "gains the most over B" / "loses the most": the difference oriented the way most rows go,
            # whichever order the two columns were named in
            gaps = [(label, -g, b, a) for label, g, a, b in gaps]
            name, other = table.columns[other], column
        top = (max if operation == "largest_gap" else min)(g for _, g, _, _ in gaps)
        best = [g for g in gaps if g[1] == top]
        other_name = table.columns[other]
        size = "largest" if operation == "largest_gap" else "smallest"
        return TableResult(operation, f"{name} − {other_name}", [(label, g) for label, g, _, _ in best],
                           f"the {size} difference between '{name}' and '{other_name}' is {fmt(top)}, in row "
                           + " and ".join(f"{label} ({fmt(a)} vs {fmt(b)})" for label, _, a, b in best))
    values = [(label, cell_number(row[column])) for label, row in zip(labels, table.rows)]
    values = [(label, v) for label, v in values if v is not None]
    if not values or operation not in OPERATIONS or operation == "none":
        return None
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


_ABLATED = re.compile(r"^\s*(?:[-−–+]\s*|w/o\b|without\b|no\b|minus\b)", re.I)


def _label_key(label: str) -> str:
    """A row label as a question names it: "SGC (2019a)" -> "SGC", "- Same Row" -> "Same Row"."""
    key = re.sub(r"\s*\([^)]*\)", " ", label)
    key = re.sub(r"^\s*[-−–+]\s*", "", key)
    return " ".join(key.split())


def reference_rows(question: str, table: ParsedTable, exclude: str) -> list[int]:
    """The rows ``question`` measures an extremum against ("by how many points does it beat SPECTER",
    "than the better of the two Grobid variants"): rows whose label (without its parenthesised
    year or note) the question names, or whose label starts with a word of the question (4+ letters,
    "Grobid" -> GrobidCRF, GrobidNN). Failing that, for an ablation question ("removing which bias
    causes the largest drop") the full model: the first row not marked as ablated ("- Same Row",
    "w/o FFN", "+ venue") when most rows are. ``exclude``: the selected row's label."""
    labels = row_labels(table)
    named = []
    for i, label in enumerate(labels):
        key = _label_key(label)
        if label == exclude or len(key) < 3:
            continue
        if re.search(r"(?<![\w-])" + re.escape(key) + r"(?![\w-])", question, re.I):
            named.append(i)
    if not named:
        words = {w.lower() for w in re.findall(r"[A-Za-z][\w-]{3,}", question)}
        named = [i for i, label in enumerate(labels) if label != exclude and any(
            _label_key(label).lower().startswith(w) and _label_key(label).lower() != w for w in words)]
    if named:
        return named
    marked = [i for i, label in enumerate(labels) if _ABLATED.match(label)]
    if _ABLATION_CUE.search(question) and 2 * len(marked) >= len(labels) - 1:
        full = [i for i in range(len(labels)) if i not in marked and labels[i] != exclude]
        return full[:1]
    return []


def against_reference(question: str, table: ParsedTable, column: int, result: TableResult) -> TableResult:
    """``result`` (one highest / lowest row) measured against the row(s) the question compares it with
    (:func:`reference_rows`; several rows: the best of them in the operation's direction, "the better
    of the two Grobid variants"), when the question asks by how much ("beat", "drop", "by how many"
    ...): the row's value becomes the absolute difference. ``result`` unchanged otherwise."""
    if result.operation not in ("highest", "lowest") or len(result.rows) != 1 or not _GAP_WORDS.search(question):
        return result
    label, value = result.rows[0]
    refs = reference_rows(question, table, label)
    numbers = [(row_labels(table)[i], cell_number(table.rows[i][column]), table.rows[i][column]) for i in refs]
    numbers = [n for n in numbers if n[1] is not None]
    if not numbers:
        return result
    ref_label, ref_value, ref_text = (max if result.operation == "highest" else min)(numbers, key=lambda n: n[1])
    if ref_value == value:
        return result
    selected = next(r[column] for lab, r in zip(row_labels(table), table.rows) if lab == label)
    margin = round(abs(value - ref_value), max(_decimals(selected), _decimals(ref_text)))
    text = (f"{result.text}; against {ref_label} ({ref_value:g}) the difference is {margin:g}")
    return TableResult(result.operation, result.column, [(label, margin)], text, reference=ref_label)


def _parts_answer(result: TableResult, answer_format: str, length: int) -> list | None:
    """``[part, ..., value]`` for a format listing N elements of which the first N-1 each name one of
    the row label's columns ("[dataset name, task abbreviation as written in the table, gain as a
    float]" over a table whose labels are Domain | Dataset | Reference | Task), else None."""
    m = re.search(r"\[([^\[\]]+)\]", answer_format)
    items = [i.strip() for i in m.group(1).split(",")] if m else []
    if len(items) != length:
        return None
    picked = []
    for item in items[:-1]:
        match = [c for c in result.parts if re.search(r"(?<!\w)" + re.escape(c.lower()) + r"(?!\w)", item.lower())]
        if len(match) != 1:
            return None
        picked.append(result.parts[match[0]])
    return picked + [_plain(result.rows[0][1])]


_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st"})


def answer_label(label: str, question: str = "", answer_format: str | None = None) -> str:
    """A row label as an answer: typographic ligatures spelled out ("Oﬀ-the-shelf" -> "Off-the-shelf"),
    the parenthesised year or citation dropped when the format says "without the year" ("SGC (2019a)"
    -> "SGC"), the "-" / "w/o" that marks an ablated row dropped when the question asks what is removed
    ("removing which bias type ...": "- Same Row" -> "Same Row"), and the one option of a format that
    lists them ("'bias', 'FFN' or 'classification head'") that the label names, spelled as listed."""
    out = label.translate(_LIGATURES)
    if _WITHOUT_YEAR.search(answer_format or ""):
        out = " ".join(re.sub(r"\s*\([^)]*\)", " ", out).split()) or out
    if re.search(r"\b(?:remov\w*|without|delet\w*|leav\w+\s+out)\b", question or "", re.I):
        out = re.sub(r"^\s*(?:[-−–]\s*|w/o\s+|without\s+)", "", out) or out
    options = re.findall(r"'([^']{1,60})'", answer_format or "")
    if len(options) >= 2:  # "one string: 'bias', 'FFN' or 'classification head'": the option the label is
        inside = [o for o in options if re.search(r"(?<!\w)" + re.escape(o.lower()) + r"(?!\w)", out.lower())]
        if len(inside) == 1:
            out = inside[0]
    return out


def shaped_answer(result: TableResult, answer_format: str | None, question: str = "") -> Any:
    """The answer ``result`` gives in the shape ``answer_format`` asks for, or None when the shape does
    not follow from it (free text, or a list whose length is not what was selected): a single
    extremum row gives its label (a string), its value (a number) or ``[label, value]`` (a list of
    two); threshold rows give the list of their labels."""
    from neusym.query.agent.answer_format import shape_of

    shape = shape_of(answer_format)
    if not result.rows:
        return None
    if result.operation in ("highest", "lowest") + GAP_OPERATIONS:
        if len(result.rows) != 1:
            return None
        label, value = result.rows[0]
        label = answer_label(label, question, answer_format)
        if shape.kind == "str":
            return label
        if shape.kind == "int" and float(value).is_integer():
            return int(value)
        if shape.kind == "float":
            return value
        if shape.kind == "list" and shape.length == 2:
            return [label, _plain(value)]
        if shape.kind == "list" and shape.length and shape.length > 2 and result.parts:
            return _parts_answer(result, answer_format or "", shape.length)
        return None
    if shape.kind == "list" and shape.length in (None, len(result.rows)):
        return [answer_label(label, question, answer_format) for label, _ in result.rows]
    return None


def _numeric(table: ParsedTable, column: int) -> bool:
    """Whether at least half of the column's non-empty cells are numbers (only those can be compared)."""
    cells = [r[column] for r in table.rows if r[column].strip()]
    return bool(cells) and 2 * sum(1 for c in cells if cell_number(c) is not None) >= len(cells)


def operation_schema(tables: list[tuple[int, ParsedTable]], *, gaps: bool = True) -> dict:
    """JSON schema of the model's choice: ``column`` (one of those tables' numeric column names, as
    ``"[n] name"`` with n the evidence number), ``operation`` (:data:`OPERATIONS`, without the gap
    operations unless ``gaps``), ``threshold``, ``other_column`` (the second column of a gap, or "none")."""
    names = [f"[{n}] {c}" for n, t in tables for j, c in enumerate(t.columns[:MAX_COLUMNS]) if j and _numeric(t, j)]
    operations = [op for op in OPERATIONS if gaps or op not in GAP_OPERATIONS]
    return {"type": "object",
            "properties": {"operation": {"type": "string", "enum": operations},
                           "column": {"type": "string", "enum": names or ["none"]},
                           "other_column": {"type": "string", "enum": names + ["none"]},
                           "threshold": {"type": "number"}},
            "required": ["operation", "column", "other_column", "threshold"], "additionalProperties": False}


CHOOSE_SYSTEM = (
    "Decide whether the question asks for the row of a table with the highest or lowest value of one column, "
    "for the rows whose value is above or below a number, or for the row where the difference between two "
    "columns is largest or smallest. Reply with JSON: \"operation\" (highest, lowest, above, below, "
    "largest_gap, smallest_gap, or none when the question asks something else), \"column\": the table column "
    "it is about, \"other_column\": the second column of a gap (none otherwise), \"threshold\": the number "
    "for above/below (0 otherwise)."
)


def _leaf(column: str) -> str:
    return re.sub(r"\s*\(\d+\)$", "", column.rsplit(" / ", 1)[-1]).strip().lower()


def _header_words(column: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z][a-z0-9-]{2,}", column.lower())}


def _sibling_the_question_names(question: str, table: ParsedTable, column: int) -> int:
    """``column``, or the one other numeric column the question names instead: the chosen column's own
    header words ("source" of "|source| (words)") are all absent from the question while another
    column's own words are there ("|summary| (words)" for "an average summary length above 500
    words"). The small model picks the neighbouring column of a pair like this about half the time."""
    words = set(re.findall(r"[a-z][a-z0-9-]{2,}", (question or "").lower()))
    words |= {w.rstrip("s") for w in words}
    mine = _header_words(table.columns[column])
    alternatives = []
    for j, name in enumerate(table.columns):
        if j == 0 or j == column or not _numeric(table, j):
            continue
        theirs = _header_words(name)
        if mine - theirs and not (mine - theirs) & words and (theirs - mine) and (theirs - mine) <= words:
            alternatives.append(j)
    return alternatives[0] if len(alternatives) == 1 else column


def _names_column(question: str, column: str) -> bool:
    """Whether ``question`` names ``column``: one of its header parts ("Before Perturb", "SEQ") as words."""
    parts = [re.sub(r"\s*\(\d+\)$", "", p).strip() for p in column.split(" / ")]
    return any(len(p) >= 2 and re.search(r"(?<!\w)" + re.escape(p) + r"(?!\w)", question, re.I) for p in parts)


def _twin_column(table: ParsedTable, column: int) -> int | None:
    """The one other column with the same lowest header under another group ("Before Perturb / ALL"
    and "After Perturb / ALL"): the second column of a gap the model left out. None unless exactly one."""
    twins = [j for j, c in enumerate(table.columns) if j not in (0, column) and _leaf(c) == _leaf(table.columns[column])]
    return twins[0] if len(twins) == 1 else None


def choose_operation(question: str, tables: list[tuple[int, ParsedTable]], llm: Any
                     ) -> tuple[tuple[int, TableResult] | None, Any]:
    """One constrained LLM call choosing the operation on one of ``tables`` (evidence number, table):
    ((the chosen table's evidence number, its :class:`TableResult`) or None, the LLM reply or None).
    LLM errors, the choice ``none`` and unusable choices give None: the answer call then reads the
    table itself."""
    if not tables:
        return None, None
    listing = "\n".join(f"[{n}] columns: " + " | ".join(t.columns[1:MAX_COLUMNS]) +
                        "; rows: " + ", ".join(row_labels(t)[:12]) for n, t in tables)
    user = f"[Question]: {question.strip()}\n[Tables]:\n{listing}"
    try:
        reply = llm.chat([{"role": "system", "content": CHOOSE_SYSTEM}, {"role": "user", "content": user}],
                         json_schema=operation_schema(tables, gaps=bool(GAP_CUE.search(question or ""))),
                         max_tokens=60)
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
    other = re.match(r"^\[(\d+)\] (.*)$", str(data.get("other_column", "")))
    other_index = (table.columns.index(other.group(2)) if other and int(other.group(1)) == number
                   and other.group(2) in table.columns else None)
    column = _sibling_the_question_names(question, table, table.columns.index(name))
    operation = data["operation"]
    if (other_index is not None and operation in GAP_OPERATIONS and other_index != _twin_column(table, column)
            and not _names_column(question, table.columns[other_index])):
        other_index = None  # a second column the question does not name ("largest drop in ALL", not ALL − SEQ)
    if other_index is None and operation in GAP_OPERATIONS:
        other_index = _twin_column(table, column)
    if other_index is None and operation == "largest_gap":
        # one column and "by how much does the best beat X" / "which removal drops the most": the
        # extremum of that column measured against the row(s) the question compares it with
        extremum = "lowest" if _DOWN_WORDS.search(question) else "highest"
        best = apply_operation(table, column, extremum)
        result = against_reference(question, table, column, best) if best else None
        return ((number, result) if result is not None and result.reference else None), reply
    result = apply_operation(table, column, operation,
                             float(threshold) if isinstance(threshold, (int, float)) else None, other_index)
    if result is not None:
        result = against_reference(question, table, column, result)
    if result is not None and len(result.rows) == 1:
        result.parts = label_parts(table, result.rows[0][0])
    return ((number, result) if result else None), reply


__all__ = ["GAP_CUE", "GAP_OPERATIONS", "OPERATIONS", "OPERATION_CUE", "ParsedTable", "TableResult", "against_reference",
           "answer_label", "apply_operation", "asks_beyond", "cell_number", "choose_operation", "operation_schema", "parse_table", "row_labels",
           "label_parts", "reference_rows", "shaped_answer"]
