"""Tables as relations: the cells of a parsed table, each with its row header, header path and number.

The parse stores each table as an HTML grid (``tables.table_content``: the table-structure model's
cells, pymupdf4llm's table engine, PyMuPDF's ruled-line finder or the word grid of
:func:`neusym.ingest.parse.elements.table_html`; :mod:`neusym.ingest.parse.tables` picks one).
This module reads that grid back as cells (:func:`table_cells`), which materialization stores in
``table_cells`` so that a table can be asked about with SQL, by the agent and by analysts:

- ``colspan``/``rowspan`` are expanded to a full grid (the text repeated over the cells it covers);
  a cell spanning a whole body row is a divider written in its first cell;
- narrow tables printed **side by side** under one repeated header ("Method | EM | Method | EM") are
  stacked into one table under the first header (:func:`side_by_side`);
- **header rows** are the leading rows where at most a third of the cells after the first hold a
  number or a placeholder ("-"), or the ``<th>`` rows when the source marked more (numbers as column
  names: "Labels | 250 | 500"), or a first row of column numbers ("Dataset | 1 | 2 | ... | 21"); a labelled row
  of numbers filling only the first value columns is data (the first of stacked sub-tables of different
  widths); a divider row ends the header (in a table of words, where every row is so, the rows before the first number in a
  mostly numeric column, else the first row); a line break inside a cell (``<br>``) separates
  words; several header rows give each column a *header path*, top row first, joined with " / "
  ("MNLI / Acc."). A sparse upper header row (group labels the PDF centres over their columns,
  extracted as one cell each) has each label copied to the columns it is nearest to, so a spanning
  header is part of the path of every column it covers; an HTML ``colspan`` is repeated the same way.
- a column the extraction merged ("98.4 712" under "prec. yield") is split in two;
- the **row header** is the text of the leftmost label column(s) (the first column and the columns
  after it that hold more words than numbers, or have no header at all, or hold the short numbers that
  tell repeated labels apart: "PaLM | 62B"), joined with " / " when there are several; a text column
  with a header of its own ("Methods | Modality | SER") is not a label column when the columns left of
  it already name every row apart; a label cell
  left empty under a label spanning several rows takes that label from the row above. A row whose only
  non-empty cell is its first (a full-width "Baselines" divider) is not a data row; when the same
  labels repeat under several dividers, the divider prefixes them ("ACE 2004 / Our model");
- a row of spreads under a row of values ("±0.55%") is joined to it;
- each cell's **number** is read by :func:`parse_number` (a "±" that the PDF's font maps to a breve
  restored first): "98.4±0.3" → 98.4 with spread 0.3,
  "62.1%" → 62.1 with unit "%", "1.2k" → 1200, "−0.5" → −0.5, "91.6*" → 91.6 with marks "*".
  Cells with several numbers ("36.9 80.0") or none keep ``number`` NULL.

Bold type is not in the stored grid, so the relation does not say which value is bold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser


__all__ = ["TableCell", "html_rows", "parse_number", "split_grid",
           "table_cells"]


# ----------------------------------------------------------------------------------------- HTML


class _TableRows(HTMLParser):
    """Rows of an HTML table as lists of cell texts on a full grid: a cell spanning n columns is
    repeated n times and a cell spanning m rows is repeated in the m rows (``colspan``/``rowspan``,
    each at most 20), so the columns of every row stay aligned with the header. ``header_rows``: how
    many leading rows are made of ``<th>`` cells only (a source that knows its header says so)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.th_rows: list[bool] = []
        self._cell: list[str] | None = None
        self._span = 1
        self._rowspan = 1
        self._th = False
        self._pending: dict[tuple[int, int], str] = {}  # (row, column) -> text of a rowspan from above

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "tr":
            self._start_row()
        elif tag == "br" and self._cell is not None:
            self._cell.append("\n")
        elif tag in ("td", "th"):
            self._cell = []
            found = dict(attrs)
            self._span = _span_of(found.get("colspan"))
            self._rowspan = _span_of(found.get("rowspan"))
            self._th = tag == "th"

    def _start_row(self) -> None:
        self.rows.append([])
        self.th_rows.append(True)
        self._fill_pending()

    def _fill_pending(self) -> None:
        """Put the rowspan cells from above that cover the next columns of the current row."""
        i = len(self.rows) - 1
        while (i, len(self.rows[i])) in self._pending:
            self.rows[i].append(self._pending.pop((i, len(self.rows[i]))))

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        if tag == "br" and self._cell is not None:
            self._cell.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            if not self.rows:
                self._start_row()
            # a line break ends a word, except after a hyphen ("S2ORC-<br>SciBERT")
            text = " ".join(re.sub(r"(?<=\w-)\n(?=\w)", "", "".join(self._cell)).replace("\n", " ").split())
            i = len(self.rows) - 1
            self._fill_pending()
            start = len(self.rows[i])
            self.rows[i].extend([text] * self._span)
            for below in range(1, self._rowspan):
                for k in range(start, start + self._span):
                    self._pending[(i + below, k)] = text
            self.th_rows[i] = self.th_rows[i] and self._th
            self._fill_pending()
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def close(self) -> None:
        super().close()
        if self._cell is not None:  # cut HTML: keep the cell that was being read
            self.handle_endtag("td")
        while any(r >= len(self.rows) for r, _ in self._pending):  # rowspans past the last <tr>
            self._start_row()
            if not self.rows[-1]:
                break

    @property
    def header_rows(self) -> int:
        n = 0
        for row, th in zip(self.rows, self.th_rows):
            if not (th and row):
                break
            n += 1
        return n


def _span_of(value: str | None) -> int:
    text = (value or "1").strip()
    return min(int(text), 20) if text.isdigit() and int(text) > 0 else 1


def html_grid(html_table: str | None) -> tuple[list[list[str]], int]:
    """``(rows, header rows)``: :func:`html_rows` and how many leading rows are all ``<th>`` (0 when the
    source did not mark its header)."""
    parser = _TableRows()
    try:
        parser.feed(html_table or "")
        parser.close()
    except (ValueError, AssertionError):
        return [], 0
    width = max((len(r) for r in parser.rows), default=0)
    rows = []
    for i, row in enumerate(parser.rows):
        # one cell spanning the whole width of a body row: a divider ("ACE 2004"), written in its first cell
        if width >= 3 and len(row) == width and row[0].strip() and len(set(row)) == 1 and i >= parser.header_rows:
            row = [row[0]] + [""] * (width - 1)
        rows.append(row)
    return rows, parser.header_rows


def html_rows(html_table: str | None) -> list[list[str]]:
    """The rows of an HTML table (``tables.table_content``) as lists of cell texts, whitespace
    collapsed, a ``colspan`` cell repeated over its columns; ``[]`` for empty or unreadable HTML."""
    parser = _TableRows()
    try:
        parser.feed(html_table or "")
        parser.close()
    except (ValueError, AssertionError):
        return []
    return parser.rows


# -------------------------------------------------------------------------------------- numbers

_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u2014": "-", "\u2010": "-", "\u2011": "-",
                        "\u00a0": " ", "\u2009": " ", "\u202f": " "})
_MARKS = "*∗†‡§¶#⋆★♣♠♦♥"
_NUMBER_CELL = re.compile(  # on whitespace-collapsed text: " ?" where blanks may stand (linear, unlike runs of \s*)
    r"(?P<lead>[" + _MARKS + r"]*) ?"
    r"(?P<sign>[+-])? ?(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
    r"(?P<scale>[kKMB](?![a-zA-Z]))?"
    r" ?(?P<unit>%|×|x(?![a-zA-Z])|ms(?![a-zA-Z])|s(?![a-zA-Z])|[KMGT]B(?![a-zA-Z]))?"
    r" ?(?P<marks1>[" + _MARKS + r"]*|[a-z](?![a-zA-Z])|\^\d+(?:,\d+)*)"
    r" ?(?:(?:±|\+/-|\+-) ?(?P<pm>\d*\.?\d+) ?%?)?"
    r" ?(?P<paren>\([^()]*\))?"
    r" ?(?P<marks2>[" + _MARKS + r"]*|[a-z](?![a-zA-Z]))"
)
_SCALE = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9}
_POWER = re.compile(r"(?:(?P<mantissa>\d+(?:\.\d+)?) ?[×x] ?)?10\^(?P<exponent>-?\d{1,3})")


@dataclass(frozen=True)
class Number:
    """A cell's number: ``value``, the ``plus_minus`` spread printed after it (or None), the ``unit``
    printed with it ("%", "×", "ms", "s", "GB"; None), and the footnote/significance ``marks``
    ("*", "†", a superscript letter; None)."""

    value: float
    plus_minus: float | None = None
    unit: str | None = None
    marks: str | None = None


def parse_number(text: str | None) -> Number | None:
    """The one number a table cell shows, or None (empty cells, words, "-", several numbers).

    "98.4±0.3" → 98.4 ± 0.3; "62.1%" → 62.1, unit "%"; "1,284" → 1284; "1.2k" → 1200 ("k", "M",
    "B" scale the value); "−0.5" → −0.5; "91.6*" / "85.5†" / "84.2a" → marks; "84.2 (0.3)" → 84.2
    (the parenthesised aside is left in the text); "28.15^34" (a superscript, :func:`neusym.ingest.parse.tables.script_fixes`)
    → 28.15 with marks "^34"; "10^5" / "3×10^-4" → 1e5 / 3e-4."""
    t = " ".join((text or "").translate(_MINUS).split())
    if not t or len(t) > 40:
        return None
    power = _POWER.fullmatch(t)
    if power is not None:
        return Number(value=float(f"{power.group('mantissa') or 1}e{power.group('exponent')}"))
    m = _NUMBER_CELL.fullmatch(t)
    if m is None:
        return None
    value = float(m.group("num").replace(",", ""))
    if m.group("scale"):
        value *= _SCALE[m.group("scale")]
    if m.group("sign") == "-":
        value = -value
    marks = "".join(g for g in (m.group("lead"), m.group("marks1"), m.group("marks2")) if g) or None
    pm = float(m.group("pm")) if m.group("pm") else None
    return Number(value=value, plus_minus=pm, unit=m.group("unit"), marks=marks)


# --------------------------------------------------------------------------------------- header


def _spread_groups(row: list[str]) -> list[str]:
    """A sparse upper header row (group labels such as "Before Perturb | After Perturb" that the PDF
    centres over their columns, extracted as one cell each without a span) with each label copied to
    the columns it is nearest to (ties go to the right label: a label centred over an even number of
    columns lands on the right one of the middle two). Column 0 (the row labels) is left alone; a
    row with labels in half of its columns or more is returned as it is."""
    labelled = [j for j in range(1, len(row)) if row[j].strip()]
    if not labelled or len(labelled) * 2 > len(row) - 1:
        return row
    out = list(row)
    for j in range(1, len(row)):
        if not row[j].strip():
            nearest = min(labelled, key=lambda k: (abs(k - j), -k))
            out[j] = row[nearest]
    return out


_NUMBER_TOKEN = re.compile(r"^[−-]?\d[\d,]*(?:\.\d+)?%?$")


def _split_merged_columns(columns: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """Columns the extraction merged: every non-empty cell holds the same number k ≥ 2 of numbers
    ("98.4 712") and the column's lowest header has k words ("CS / prec. yield") -> k columns
    ("CS / prec.", "CS / yield"). Other columns are kept as they are."""
    out_cols: list[str] = []
    out_rows: list[list[str]] = [[] for _ in rows]
    for j, name in enumerate(columns):
        head, _, leaf = name.rpartition(" / ")
        words = leaf.split()
        cells = [r[j].split() for r in rows]
        filled = [c for c in cells if c]
        k = len(words)
        if (j and k >= 2 and filled and all(len(c) == k and all(_NUMBER_TOKEN.match(t) for t in c) for c in filled)):
            out_cols += [f"{head} / {w}" if head else w for w in words]
            for r, c in zip(out_rows, cells):
                r.extend(c if c else [""] * k)
            continue
        out_cols.append(name)
        for r, row in zip(out_rows, rows):
            r.append(row[j])
    return out_cols, out_rows


def _equal_groups(row: list[str], start: int) -> list[str] | None:
    """An upper header row whose group labels (each in one run of columns, gaps left empty by the
    extraction: "A | A | _ | B | B | _", or a label centred in its group: "_ | A | _ | _ | B | _")
    split the columns from ``start`` on into equal groups, each label inside its own group: the row
    with every group filled with its label. None when the labels do not fit such a split."""
    cells = row[start:]
    labels: list[str] = []
    for j, text in enumerate(cells):
        if text.strip() and (not labels or labels[-1] != text):
            if text in labels:
                return None  # a label in two runs: not one group each
            labels.append(text)
    n = len(cells)
    if len(labels) < 2 or n % len(labels) or all(c.strip() for c in cells):
        return None
    width = n // len(labels)
    for j, text in enumerate(cells):
        if text.strip() and labels.index(text) != j // width:
            return None
    return row[:start] + [labels[j // width] for j in range(n)]


def _nest_spans(header: list[list[str]], start: int = 1) -> list[list[str]]:
    """Upper header rows with the gaps of spanning labels closed. A row whose labels split the
    columns from ``start`` (the first non-label column) into equal groups gets each group filled
    (:func:`_equal_groups`); otherwise an empty cell whose column shares its label in the row below
    with a neighbouring column takes that neighbour's label in this row (a header below a span is
    covered by one span: "Citation prediction" over "Cite | Cite | Co-Cite" extracted over three of
    the four columns). Bottom-up, so nested spans close level by level."""
    out = [list(r) for r in header]
    for i in range(len(out) - 2, -1, -1):
        grouped = _equal_groups(out[i], max(start, 1))
        if grouped is not None:
            out[i] = grouped
            continue
        row, below = out[i], out[i + 1]
        for j in range(1, len(row)):
            if row[j].strip() or not below[j].strip():
                continue
            for k in (j - 1, j + 1):
                if 1 <= k < len(row) and row[k].strip() and below[k] == below[j]:
                    row[j] = row[k]
                    break
    return out


def _text_table_header(rows: list[list[str]], number) -> int:
    """Header rows of a table whose every row is mostly words (a comparison of corpora: "8.1M | full
    text | yes | PubMed"): the leading rows before the first row with a number in a column that holds
    numbers in most rows; one row when no column does."""
    width = len(rows[0])
    numeric_columns = [j for j in range(1, width)
                       if sum(1 for r in rows if number(r[j]) is not None) * 2 > len(rows)]
    for i, row in enumerate(rows):
        if any(number(row[j]) is not None for j in numeric_columns):
            return max(i, 1)
    return 1


_WHOLE = re.compile(r"^\d{1,6}$")


def _narrow_data_row(row: list[str]) -> bool:
    """A labelled row of values narrower than the grid (the first of stacked sub-tables of different
    widths: "AMDCN | 290.82 | _ | _ | _" above "Method | GAME (L=0) | ... | GAME (L=3)"): a label first,
    then only numbers, filled from the second column on without a gap, and not a row of column numbers
    (:func:`_index_row`). Rows with gaps or an empty first cell are left to the count of numbers."""
    values = [c.strip() for c in row[1:]]
    filled = [c for c in values if c]
    if not row[0].strip() or not filled or "" in values[:len(filled)]:
        return False
    return all(parse_number(c) is not None for c in filled) and not _index_row(row)


def _index_row(row: list[str]) -> bool:
    """Whether a first row of numbers names the columns instead of holding values: a word or nothing over
    the label column, then at least three whole numbers, strictly increasing from left to right, and
    nothing else ("Dataset | 1 | 2 | ... | 21" over a table of settings; "Labels | 250 | 500 | 1000")."""
    first, rest = row[0].strip(), [c.strip() for c in row[1:]]
    if (first and parse_number(first) is not None) or len(rest) < 3 or not all(_WHOLE.match(c) for c in rest):
        return False
    numbers = [int(c) for c in rest]
    return all(a < b for a, b in zip(numbers, numbers[1:]))


_SPREAD = re.compile(r"^\(?(?:±|\+/-|\+-)\s*\d*\.?\d+\s*%?\)?$")


def _join_spread_rows(data: list[list[str]]) -> list[list[str]]:
    """A row whose every filled cell after the first is a spread ("±0.55%") and whose first cell is empty
    or repeats the first cell above (a label spanning both lines) continues the row above (the spread
    printed on its own line under the value): its spreads are appended to that row's cells
    ("56.52% ±0.55%")."""
    out: list[list[str]] = []
    for row in data:
        filled = [c for c in row[1:] if c.strip()]
        if (out and filled and (not row[0].strip() or row[0] == out[-1][0])
                and all(_SPREAD.match(c.strip()) for c in filled)):
            out[-1] = [out[-1][0]] + [(a + " " + b).strip() if b.strip() else a for a, b in zip(out[-1][1:], row[1:])]
            continue
        out.append(list(row))
    return out


def split_grid(rows: list[list[str]], header_rows: int = 0) -> tuple[int, list[str], list[list[str]]] | None:
    """Split a grid (cell texts, first row first) into ``(header row count, header path per column,
    data rows)``: header rows are the leading rows where at most a third of the cells after the
    first hold a number (:func:`parse_number`; when every row is so, :func:`_text_table_header`); a column's path is its
    header texts top first, joined with " / " ("" when it has none); merged numeric columns are
    split (see module docstring); the gaps of spanning labels are closed
    (:func:`_nest_spans`). Empty rows are dropped first. None when no data row or fewer than two
    columns remain."""
    rows = [r for r in rows if any(c.strip() for c in r)]
    width = max((len(r) for r in rows), default=0)
    if width < 2:
        return None
    rows = [r + [""] * (width - len(r)) for r in rows]
    n_header = 0
    for row in rows:  # placeholders ("-", "n/a") stand where values are: they make a row a data row
        numeric = sum(1 for c in row[1:] if parse_number(c) is not None or _PLACEHOLDER.match(c))
        if numeric > (len(row) - 1) / 3 or _narrow_data_row(row):
            break
        if n_header and row[0].strip() and not any(c.strip() for c in row[1:]):
            break  # a divider under the header ("ACE 2004" above its rows) starts the body
        n_header += 1
    if n_header == len(rows) and len(rows) >= 3:
        n_header = _text_table_header(rows, parse_number)
    if n_header == 0 and len(rows) >= 3 and _index_row(rows[0]):
        n_header = 1
    if 0 < header_rows < len(rows) and header_rows > n_header:
        n_header = header_rows  # the source's own header (numbers as column names: "250 | 500 | 1000")
    header, data = rows[:n_header], _join_spread_rows(rows[n_header:])
    if not data:
        return None
    header = _nest_spans(header, _label_columns(data, parse_number))
    header = [_spread_groups(row) if i < len(header) - 1 else row for i, row in enumerate(header)]
    paths = []
    for j in range(width):
        parts: list[str] = []
        for row in header:
            text = " ".join(row[j].split())
            if text and text not in parts:
                parts.append(text)
        paths.append(" / ".join(parts))
    paths, data = _split_merged_columns(paths, data)
    return n_header, paths, data


# ---------------------------------------------------------------------------------------- cells


@dataclass(frozen=True)
class TableCell:
    """One non-empty cell of a table (a row of ``table_cells``).

    ``row_index`` / ``column_index``: 0-based position in the table (header rows first; columns after
    merged columns are split); ``row_header``: the row's label, on every cell of the row, its label
    cells too (None for header cells, divider rows and rows without a label); ``column_header_path``: the column's header path (None when it has
    none); ``text``: the cell as printed; ``number`` / ``plus_minus`` / ``unit`` / ``marks``: see
    :class:`Number`; ``is_header``: the cell belongs to a header row."""

    row_index: int
    column_index: int
    row_header: str | None
    column_header_path: str | None
    text: str
    number: float | None
    plus_minus: float | None
    unit: str | None
    marks: str | None
    is_header: bool


_PLACEHOLDER = re.compile(r"^\s*(?:[-\u2013\u2014\u2212]+|n/?a|N/?A|\u2717|\u00d7|oom|OOM)\s*$")


def _label_columns(data: list[list[str]], number=None, paths: list[str] | None = None) -> int:
    """How many columns at the left label the rows: the first, and the columns after it that hold more
    words than numbers; placeholders ("-", "n/a", "OOM") count as neither. With the header ``paths``, a column right of
    those that has no header at all while later columns have one is a label column too (model sizes
    "7B | 13B" printed beside the model's name under no header)."""
    number = number or parse_number
    width = len(data[0]) if data else 0
    if width < 2:
        return width
    lead = 1  # the first column labels its rows, whatever it holds ("3.5 | Context", "1 | Ours")
    for j in range(1, width):
        texts = sum(1 for r in data if r[j].strip() and not _PLACEHOLDER.match(r[j]) and number(r[j]) is None)
        numbers = sum(1 for r in data if number(r[j]) is not None)
        if numbers >= texts or texts == 0:
            break
        if paths is not None and _attribute_column(data, paths, j):
            break
        lead += 1
    if paths is not None:
        while lead < width - 1 and not paths[lead].strip() and any(p.strip() for p in paths[lead + 1:]):
            lead += 1
    return lead


def _attribute_column(data: list[list[str]], paths: list[str], j: int) -> bool:
    """Whether text column ``j`` describes the rows rather than naming them: it has a header of its own
    ("Methods | Modality | SER": not empty, not the header the columns left of it share) and the columns
    left of it already name every data row apart ("BERT [7]", "RoBERTa [6]", ...)."""
    own = paths[j].strip()
    if not own or own == paths[j - 1].strip():
        return False
    labels = [label for label, row in zip(_row_headers(data, j), data)
              if label is not None or any(c.strip() for c in row[1:])]
    return bool(labels) and None not in labels and len(set(labels)) == len(labels)


def _row_headers(data: list[list[str]], lead: int) -> list[str | None]:
    """The label of each data row (see module docstring); None for divider rows and unlabelled rows.
    An outer label column whose first rows are empty holds labels centred on the rows they span: its
    first label also covers the rows above it."""
    labels: list[str | None] = []
    above = [""] * lead
    for j in range(lead - 1):
        above[j] = next((r[j].strip() for r in data if r[j].strip()), "")
    for row in data:
        cells = [c.strip() for c in row[:lead]]
        if not any(c.strip() for c in row[1:]):  # only the first cell: a divider row
            labels.append(None)
            above = [""] * lead
            continue
        filled = list(cells)
        if lead > 1 and cells[-1]:
            # a spanning label of an outer column is left empty on the rows it covers below its first
            filled = [c or (above[j] if j < lead - 1 else "") for j, c in enumerate(cells)]
        parts: list[str] = []
        for c in filled:  # a label the grid spread over two label columns is said once
            if c and not _PLACEHOLDER.match(c) and (not parts or parts[-1] != c):
                parts.append(c)
        label = " / ".join(parts)
        labels.append(label or None)
        above = [c or above[j] for j, c in enumerate(filled)]
    return labels


_KEY_NUMBER = re.compile(r"^\d{1,6}[kKMBT]?$|^\d{1,4}\.\d{1,2}[kKMBT]$")
"""A whole number or a size ("3", "10", "62B", "1.3B"): what a column that names rows holds."""


def _key_columns(data: list[list[str]], lead: int) -> int:
    """``lead``, or one more when the row labels repeat and the column after them tells the repeats apart
    with short whole numbers or sizes ("PaLM | 8B", "PaLM | 62B"; "R3 | 1", "R3 | 3" under "TOP-k"): rows are
    named by the label and that number together, which is then not a value of the table."""
    width = len(data[0]) if data else 0
    if lead >= width - 1:
        return lead
    labels = _row_headers(data, lead)
    rows = [(label, r[lead].strip()) for label, r in zip(labels, data) if label is not None]
    names = [label for label, _ in rows]
    if len(set(names)) == len(names) or not rows:
        return lead  # the labels already name every row
    if not all(_KEY_NUMBER.match(v) for _, v in rows) or len(set(rows)) != len(rows):
        return lead
    return lead + 1


def _divider_prefixes(data: list[list[str]], labels: list[str | None]) -> list[str | None]:
    """Row labels prefixed with the divider row above them ("ACE 2004 / Our model") when the same label
    occurs under two dividers: the dividers then name what the rows measure (one dataset each), and
    without them the rows could not be told apart."""
    groups: list[tuple[str | None, list[int]]] = [(None, [])]
    for i, row in enumerate(data):
        if labels[i] is None and row[0].strip() and not any(c.strip() for c in row[1:]):
            groups.append((" ".join(row[0].split()), []))
        elif labels[i] is not None:
            groups[-1][1].append(i)
    seen: dict[str, set[int]] = {}
    for g, (_, members) in enumerate(groups):
        for i in members:
            seen.setdefault(labels[i] or "", set()).add(g)
    if len(groups) < 3 or not any(len(gs) > 1 for gs in seen.values()):
        return labels
    out = list(labels)
    for divider, members in groups:
        if divider:
            for i in members:
                out[i] = f"{divider} / {labels[i]}"
    return out


_LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
                            "\ufb05": "st", "\ufb06": "st"})


_BREVE_PLUS_MINUS = re.compile(r"(?<=[\d%])\s*˘\s*(?=[\d.])")


def _plain(text: str) -> str:
    """A cell's text with typographic ligatures spelled out ("Classiﬁcation" -> "Classification") and a
    "±" that the PDF's font maps to a breve restored ("87.0 ˘ 3.0" -> "87.0±3.0": the breve between two
    numbers is a glyph-mapping fault of some LaTeX fonts, never an accent)."""
    return _BREVE_PLUS_MINUS.sub("±", text.translate(_LIGATURES))


def table_cells(html_table: str | None) -> list[TableCell]:
    """The non-empty cells of one stored table (``tables.table_content``), header rows first, each
    with its row header, header path and parsed number (see the module docstring). ``[]`` when the
    HTML holds no table of at least two columns and one data row. Never raises on bad HTML."""
    grid, th_rows = html_grid(html_table)
    rows, th_rows = side_by_side([[_plain(c) for c in r] for r in grid], th_rows)
    split = split_grid(rows, th_rows)
    if split is None:
        return []
    n_header, paths, data = split
    raw = [r for r in rows if any(c.strip() for c in r)]
    out: list[TableCell] = []
    width = len(paths)
    for i, row in enumerate(raw[:n_header]):
        for j, text in enumerate(row[:width]):
            if text.strip():
                out.append(TableCell(i, j, None, paths[j] or None, text.strip(), None, None, None, None, True))
    lead = _label_columns(data, paths=paths)
    lead = _key_columns(data, lead)
    labels = _divider_prefixes(data, _row_headers(data, lead))
    current = list(paths)
    for i, (row, label) in enumerate(zip(data, labels), start=n_header):
        block = _header_block(data, i - n_header, lead)
        if block is not None:  # a second header part-way down: the rows below it take its names
            current = [b or p for b, p in zip(block, paths)]
            for j, text in enumerate(row):
                if text.strip():
                    out.append(TableCell(i, j, None, current[j] or None, text.strip(), None, None, None, None, True))
            continue
        for j, text in enumerate(row):
            text = text.strip()
            if not text:
                continue
            n = parse_number(text) if j >= lead or label is None else None
            out.append(TableCell(i, j, label, current[j] or None, text,
                                 n.value if n else None, n.plus_minus if n else None, n.unit if n else None,
                                 n.marks if n else None, False))
    return out


def side_by_side(rows: list[list[str]], th_rows: int = 0) -> tuple[list[list[str]], int]:
    """A grid printed as several narrow tables side by side ("Method | EM | Method | EM") as one table:
    when one of the first three rows repeats the same run of ``p`` distinct, non-empty names ``k`` ≥ 2
    times across the whole width (and every row above it repeats with the same period), the columns of
    each repeat are stacked under the first repeat's header rows, in order; rows a repeat leaves empty
    are dropped. The first column of every repeat must name its rows (text in most of its filled
    cells). Returns ``(rows, header row count)``; the grid unchanged when it is not so."""
    width = max((len(r) for r in rows), default=0)
    rows = [r + [""] * (width - len(r)) for r in rows]
    for i in range(min(3, len(rows) - 1)):
        row = [c.strip() for c in rows[i]]
        period = next((p for p in range(2, width // 2 + 1) if width % p == 0 and all(row[j] == row[j % p]
                       for j in range(width)) and all(row[:p]) and len(set(row[:p])) == p), None)
        if period is None:
            continue
        if any(r[j].strip() != r[j % period].strip() for r in rows[:i] for j in range(width)):
            return rows, th_rows
        body = rows[i + 1:]
        starts = range(0, width, period)
        for b in starts:
            names = [r[b].strip() for r in body if r[b].strip()]
            if not names or sum(1 for c in names if parse_number(c) is None) * 2 <= len(names):
                return rows, th_rows
        stacked = [list(r[:period]) for r in rows[:i + 1]]
        for b in starts:
            stacked += [list(r[b:b + period]) for r in body if any(c.strip() for c in r[b:b + period])]
        return stacked, min(th_rows, i + 1)
    return rows, th_rows


def _header_block(data: list[list[str]], i: int, lead: int) -> list[str] | None:
    """The column names of data row ``i`` when it is a header repeated part-way down the table (stacked
    blocks, each with its own header): no number in it, words over at least half of the value columns,
    and numbers in the row below. None otherwise."""
    if i + 1 >= len(data):
        return None
    row, below = data[i], data[i + 1]
    values = row[lead:]
    if not values or any(parse_number(c) is not None for c in values):
        return None
    named = [c for c in values if c.strip() and not _PLACEHOLDER.match(c)]
    if len(named) * 2 < len(values) or len(named) < 2:
        return None
    if not any(parse_number(c) is not None for c in below[lead:]):
        return None
    return [""] * lead + [" ".join(c.split()) for c in values]
