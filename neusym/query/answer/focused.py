"""Method ``auto``: what its routes answer with — the question's cheap features, paper search,
focused reading (evidence, the answer call, table operations), verification and citations. The
routes themselves, as objects in one registry, and the router are :mod:`neusym.query.answer.router`.

SymRAG's adaptive routing: cheap features of the question (:func:`features`: length, named
entities, cue words such as *how many*, *which paper*, *table*, *figure*), the
papers it is about and, only when those leave it open, one constrained LLM call, choose a path:

- ``symbolic`` — metadata and aggregate questions compiled to SQL templates over the section tree
  (:mod:`neusym.query.answer.symbolic`); no LLM;
- ``paper_search`` — "which paper / find the work that ..." answered by the paper index with
  venue/year/author filters parsed from the question and the AirQA ``conference`` scope; no LLM;
- ``focused`` — a question about the text, tables, figures or formulas of one paper or of several
  given or named papers (each paper searched on its own): BM25 and dense hits over their chunks,
  table contents and captions, figure captions and OCR text and equations, fused by reciprocal rank (SR-RAG), each chunk labelled with its enclosing section and cut around
  the sentences the question asks about, tables shown whole (caption + rows), figures with their
  OCR text; then ONE LLM call with a
  compact prompt, its answer typed by the answer format (:func:`answer_schema`). When the evidence
  points at a table, the model first writes one SQL query over that table's cells
  (:mod:`neusym.query.answer.table_query`) and DuckDB computes it;
- ``agent`` — the full NeuSym-RAG loop, for questions that name no paper and do not ask for one
  (open-ended questions over the collection). Questions about several named papers went to the
  agent before: 1 of the 12 dev items that took it was right, 3 of 12 with the focused reading of
  each paper, in one LLM call instead of a median 57 s loop.

Every answer is checked by :func:`neusym.query.answer.verify.verify`; a failed check triggers one repair
round (the focused prompt with the failed claims named). Every answer carries the cells it used
as :class:`neusym.query.answer.citations.Citation`. Each decision is logged with its features.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Callable

from neusym.telemetry import phase
from neusym.encode import BM25_COLLECTION, DENSE_COLLECTION, PRIMARY_KEYS
from neusym.errors import NeusymError
from neusym.ingest.parse.cells import html_rows
from neusym.query.answer.authorblock import ABSTRACT_HEADING, PUBLICATION_LINE
from neusym.query.answer.citations import citations_for, word_tokens
from neusym.query.answer.config import current
from neusym.query.answer.results import Step
from neusym.query.answer.verify import Check, Verification, asks_to_compute, verify
from neusym.query.answer.cues import (
    ASSIGNMENT as _ASSIGNMENT,
    ELEMENT_NUMBER_BEFORE as _ELEMENT_NUMBER,
    WORKED_ASK as _WORKED_ASK,
)

logger = logging.getLogger(__name__)



# -------------------------------------------------------------------------------- focused reading
FOCUS_VIEWS = [  # (table, column, collections, modality)
    ("chunks", "text_content", (BM25_COLLECTION, DENSE_COLLECTION), "text"),
    ("tables", "table_content", (BM25_COLLECTION, DENSE_COLLECTION), "table"),
    ("tables", "table_caption", (BM25_COLLECTION,), "table"),
    ("images", "image_caption", (BM25_COLLECTION, DENSE_COLLECTION), "figure"),
    ("images", "image_ocr_text", (BM25_COLLECTION,), "figure"),
    ("equations", "equation_content", (BM25_COLLECTION,), "formula"),
]
#: The tunable parts of focused reading (hits per list, fusion weights, excerpts kept and their length,
#: front matter, tables from text, the table query's gate) are one typed configuration,
#: :class:`neusym.query.answer.config.FocusedConfig`, read with :func:`~neusym.query.answer.config.current`.


def front_matter(page_text: str) -> str:
    """The front matter of a paper's page 1 text: everything before the abstract heading (title,
    authors with their marks, affiliations, e-mails; at most ``config.front_matter_chars`` characters)
    and, after it, the lines that name the proceedings or a copyright (one line each, at most 300
    characters, in page order). Empty when ``page_text`` is empty."""
    text = page_text or ""
    parts = ABSTRACT_HEADING.split(text, maxsplit=1)
    head = parts[0].strip()[:current().front_matter_chars]
    rest = parts[1] if len(parts) > 1 else ""
    lines = [" ".join(line.split()) for line in rest.splitlines()]
    notes = list(dict.fromkeys(line for line in lines if line and len(line) <= 300 and PUBLICATION_LINE.search(line)))
    return "\n".join([head] + notes).strip()


def front_matter_cells(papers: list[tuple[str, str]], env: Any) -> list[dict]:
    """One evidence cell per paper of ``papers`` (in order) holding :func:`front_matter` of its page 1
    (``pages`` row; a paper without parsed pages gets none): ``table_name`` "pages", ``column_name``
    "page_content", ``primary_key`` the page id, ``page_number`` 1, ``text`` = ``context`` = the front
    matter (kept on its lines in the prompt)."""
    ids = [pid for pid, _ in papers]
    if not ids:
        return []
    rows = env.query(
        "SELECT ref_paper_id::VARCHAR, page_id::VARCHAR, page_content FROM pages WHERE page_number = 1 AND "
        f"ref_paper_id::VARCHAR IN ({', '.join('?' for _ in ids)})", ids)
    found = {pid: (page_id, front_matter(text)) for pid, page_id, text in rows}
    return [{"table_name": "pages", "column_name": "page_content", "primary_key": found[pid][0], "paper_id": pid,
             "page_number": 1, "text": found[pid][1], "context": found[pid][1]}
            for pid in ids if pid in found and found[pid][1]]


def focused_evidence(question: str, papers: list[tuple[str, str]], env: Any, *, modality: list[str],
                     k: int | None = None, ensure_table: bool = False, trace: list | None = None) -> list[dict]:
    """The ``k`` (default ``config.evidence_items``) best cells of the papers for the question: every
    (view, collection) list of :data:`FOCUS_VIEWS` (``config.list_hits`` each, filtered to the papers), fused by weighted reciprocal
    rank (w / (``config.rrf_k`` + rank)): text lists w = 1, table / figure / formula lists w = 1 when the question
    names that modality, else ``config.off_modality_weight`` (a paper's few figure captions would
    otherwise top every question); a MiniLM list has ``config.dense_list_weight`` times the weight of
    the BM25 list of its view.

    A text chunk among the ``k`` that is a table's body read as running text gives its place to the
    stored table (:func:`_tables_the_chunks_read`, ``config.table_from_text``).

    Several papers (a question comparing or joining them): each paper is searched on its own and
    gets ``config.evidence_per_paper`` cells (the first ``config.max_focused_papers`` papers), in the order
    the papers are given, so one well-matching paper cannot take every excerpt; after them comes each
    paper's front matter (:func:`front_matter_cells`, ``config.front_matter``): what papers are joined on
    — their authors, affiliations, proceedings — is printed there, where no query of the text finds it.

    ``ensure_table`` (the question may ask for a table operation): when no table is among the ``k``,
    one table is added as one more cell — of the ``config.table_candidates`` best-ranked tables, the one
    whose numbers a text excerpt quotes, else the best-ranked —, so the operation has a table to work on without
    displacing the text excerpts (raising the table weight instead lost as many text and formula
    answers on the dev set as it gained tables). ``trace``: see :func:`focused_context`."""
    cfg = current()
    if len(papers) > 1:
        out: list[dict] = []
        for paper in papers[:cfg.max_focused_papers]:
            out.extend(focused_evidence(question, [paper], env, modality=modality, k=cfg.evidence_per_paper,
                                        ensure_table=ensure_table, trace=trace))
        if cfg.front_matter:
            out.extend(front_matter_cells(papers[:cfg.max_focused_papers], env))
        return out
    k = cfg.evidence_items if k is None else k
    ids = ", ".join(f"'{pid}'" for pid, _ in papers)
    flt = f"paper_id in [{ids}]"
    fused: dict[tuple[str, str], float] = {}
    cells: dict[tuple[str, str], dict] = {}
    for table, column, collections, kind in FOCUS_VIEWS:
        view_weight = 1.0 if kind == "text" or kind in modality else cfg.off_modality_weight
        for collection in collections:
            weight = view_weight * (cfg.dense_list_weight if collection == DENSE_COLLECTION else 1.0)
            try:
                hits = env.search(question, collection, table, column, flt, cfg.list_hits)
            except NeusymError:
                continue
            if trace is not None:
                trace.append({"view": f"{table}.{column}", "collection": collection, "hits": hits})
            for rank, hit in enumerate(hits):
                key = (hit["table_name"], str(hit["primary_key"]))
                fused[key] = fused.get(key, 0.0) + weight / (cfg.rrf_k + rank + 1)
                cells.setdefault(key, hit)
    order = sorted(fused, key=lambda key: -fused[key])
    ranked = order[:k]
    if cfg.table_from_text:
        ranked = _tables_the_chunks_read(ranked, cells, papers, env)
    if ensure_table and not any(table == "tables" for table, _ in ranked):
        candidates = [key for key in order[k:] if key[0] == "tables"][:cfg.table_candidates]
        ranked += [_table_the_excerpts_quote(candidates, [cells[key] for key in ranked], env)] if candidates else []
    return [dict(cells[key], rrf=round(fused.get(key, 0.0), 5)) for key in ranked]


_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
_CHUNK_TOKEN = re.compile(r"[^\W\d_]+|\d+(?:\.\d+)?")


def _decimals(text: Any) -> set[str]:
    """The distinct decimal numbers written in ``text`` ("84.2"), as written."""
    return {n for n in _NUMBER.findall(str(text or "")) if "." in n}


def _tables_the_chunks_read(ranked: list[tuple[str, str]], cells: dict, papers: list[tuple[str, str]],
                            env: Any) -> list[tuple[str, str]]:
    """``ranked`` (cell keys in rank order) with each text chunk that reads a stored table of
    ``papers`` replaced by that table at its rank. A chunk reads a table when at least
    ``config.table_text_density`` of its words and numbers are numbers and at least 3 distinct
    decimals — and ``config.table_text_share`` of the decimals of the smaller of chunk and table — are
    common to both; of the tables it reads that are not ranked yet, the one sharing the most wins
    (ties: page order); a chunk whose tables are all ranked stays. The table's cell
    (``table_content``, its page) joins ``cells``."""
    chunks = [key for key in ranked if key[0] == "chunks"]
    ids = [pid for pid, _ in papers]
    if not chunks or not ids:
        return ranked
    stored = env.query(
        "SELECT table_id::VARCHAR, ref_paper_id::VARCHAR, page_number, table_content FROM tables WHERE "
        f"ref_paper_id::VARCHAR IN ({', '.join('?' for _ in ids)}) ORDER BY page_number", ids)
    decimals = {tid: _decimals(content) for tid, _, _, content in stored}
    out = list(ranked)
    for key in chunks:
        text = str(cells[key].get("text") or "")
        numbers = _NUMBER.findall(text)
        quoted = {n for n in numbers if "." in n}
        if len(quoted) < 3 or len(numbers) < current().table_text_density * len(_CHUNK_TOKEN.findall(text)):
            continue
        best, best_shared = None, 2
        for tid, paper_id, page, content in stored:
            shared = len(quoted & decimals[tid])
            reads = shared >= current().table_text_share * min(len(quoted), len(decimals[tid]))
            if reads and shared > best_shared and ("tables", tid) not in out:
                best, best_shared = (tid, paper_id, page, content), shared
        if best is None:
            continue
        tid, paper_id, page, content = best
        table_key = ("tables", tid)
        cells.setdefault(table_key, {"table_name": "tables", "column_name": "table_content", "primary_key": tid,
                                     "paper_id": paper_id, "page_number": str(page), "text": content or "",
                                     "score": 0.0})
        out[out.index(key)] = table_key
    return out




def _table_the_excerpts_quote(candidates: list[tuple[str, str]], excerpts: list[dict], env: Any) -> tuple[str, str]:
    """The table (of ``candidates``, keys in rank order) whose cells the text ``excerpts`` quote: a
    chunk that is a table's body read as text ("- Same Row 32.1 2.8 - Same Column 62.1 ...") shares
    its numbers (at least 3 distinct decimals). The best-ranked candidate when no excerpt quotes one."""
    quoted = {n for cell in excerpts if cell.get("table_name") == "chunks" for n in _decimals(cell.get("text"))}
    if len(quoted) < 3:
        return candidates[0]
    ids = [key[1] for key in candidates]
    contents = dict(env.query("SELECT table_id::VARCHAR, table_content FROM tables WHERE table_id::VARCHAR IN "
                              f"({', '.join('?' for _ in ids)})", ids))
    best, best_shared = candidates[0], 0
    for key in candidates:
        shared = len(quoted & _decimals(contents.get(key[1])))
        if shared >= 3 and shared > best_shared:
            best, best_shared = key, shared
    return best


def _rows_text(rows: list[list[str]]) -> str:
    return "\n".join(" | ".join(row) for row in rows if any(row))


def table_rows_text(html_table: str) -> str:
    """An HTML table (``tables.table_content``) as one line per row, cells joined by `` | ``
    (column spans repeated, so columns line up); the input unchanged when it holds no table row.
    A third of the characters of the HTML for the same rows, which lets a whole table into the
    focused prompt."""
    return _rows_text(html_rows(html_table)) or html_table


def element_contexts(cells: list[dict], env: Any) -> None:
    """Set ``context`` on table and figure cells: the whole element as a reader sees it, whichever of
    its columns matched. Tables: caption, then the rows (:func:`table_rows_text`); figures: caption,
    then the text OCR read inside the figure. Other cells are left as they are."""
    for table, columns in (("tables", "table_caption, table_content"), ("images", "image_caption, image_ocr_text")):
        pk = PRIMARY_KEYS[table]
        keys = [str(c["primary_key"]) for c in cells if c["table_name"] == table]
        if not keys:
            continue
        rows = env.query(f"SELECT {pk}::VARCHAR, {columns} FROM {table} WHERE {pk}::VARCHAR IN "
                         f"({', '.join('?' for _ in keys)})", keys)
        found = {key: (caption or "", body or "") for key, caption, body in rows}
        for c in cells:
            if c["table_name"] != table or str(c["primary_key"]) not in found:
                continue
            caption, body = found[str(c["primary_key"])]
            caption = " ".join(caption.split())
            if table == "tables":
                c["context"] = (caption + "\n" if caption else "") + (_rows_text(html_rows(body)) or body)
            else:
                ocr = " ".join(body.split())
                c["context"] = caption + (f"\n[text inside the figure, read by OCR]: {ocr}" if ocr else "")


_STOP = frozenset("a an the of in on at to for from by with and or is are was were be been does do did what which who "
                  "whom how many much this that these those it its their there than as into over under when where why "
                  "paper papers authors author use used using".split())
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")


def _terms(text: str) -> set[str]:
    return {t for t in word_tokens(text) if t not in _STOP and (len(t) > 2 or t.isdigit())}


def focus_text(text: str, question: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters around what the question asks: the run of whole
    sentences sharing the most words with the question (ties: the earliest), with `` ... `` where
    text was left out. A retrieved chunk is longer than the prompt can hold for each of several
    excerpts, and its answer sentence is often past the first ``limit`` characters."""
    text = " ".join((text or "").split())
    if len(text) <= limit:
        return text
    sentences = _SENTENCE_END.split(text)
    want = _terms(question)
    scores = [len(_terms(s_) & want) for s_ in sentences]
    best, best_score = (0, 0), -1
    for i in range(len(sentences)):
        size, score, j = 0, 0, i
        while j < len(sentences) and size + len(sentences[j]) + 1 <= limit:
            size += len(sentences[j]) + 1
            score += scores[j]
            j += 1
        if j > i and score > best_score:
            best, best_score = (i, j), score
    i, j = best
    if j <= i:  # one sentence longer than the limit: its beginning
        return text[:limit] + " ..."
    return ("... " if i > 0 else "") + " ".join(sentences[i:j]) + (" ..." if j < len(sentences) else "")


def short_title(title: str) -> str:
    """How a reader names a paper in running text: the part of the title before its colon when that
    is short ("SPECTER: Document-level ..." -> "SPECTER"), else its first six words."""
    title = " ".join((title or "").split())
    head = title.split(":", 1)[0]
    if ":" in title and len(head) <= 40:
        return head
    words = title.split()
    return " ".join(words[:6]) + (" ..." if len(words) > 6 else "")


def _evidence_block(cells: list[dict], env: Any, question: str = "",
                    papers: list[tuple[str, str]] | None = None) -> list[str]:
    """The numbered evidence lines of the focused prompt; with several ``papers`` each line names
    its paper (:func:`short_title`)."""
    names = {pid: short_title(title) for pid, title in papers or []} if len(papers or []) > 1 else {}
    chunk_ids = [c["primary_key"] for c in cells if c["table_name"] == "chunks"]
    sections = {}
    if chunk_ids:
        for cid, title in env.query(
                "SELECT c.chunk_id::VARCHAR, s.section_title FROM chunks c LEFT JOIN sections s "
                f"ON s.section_id = c.ref_section_id WHERE c.chunk_id::VARCHAR IN ({', '.join('?' for _ in chunk_ids)})",
                chunk_ids):
            sections[cid] = title
    out = []
    for i, c in enumerate(cells, start=1):
        where = f"page {c.get('page_number')}"
        if names.get(str(c.get("paper_id"))):
            where = f"{names[str(c['paper_id'])]}, {where}"
        if c["table_name"] == "chunks" and sections.get(c["primary_key"]):
            where += f", section '{sections[c['primary_key']]}'"
        elif c["table_name"] == "pages" and c.get("context"):
            where += ", front matter"
        elif c["table_name"] in ("tables", "images") and c.get("context"):
            where += ", table" if c["table_name"] == "tables" else ", figure"
        elif c["table_name"] != "chunks":
            where += f", {c['table_name']}.{c['column_name']}"
        if c.get("context"):  # a table or figure: keep its rows on their lines
            text = "\n".join(" ".join(line.split()) for line in c["context"].splitlines() if line.strip())
            limit = current().element_evidence_chars
        else:
            chars = current().evidence_chars
            text, limit = focus_text(c.get("text") or "", question, chars), chars + 8
        if len(text) > limit:
            text = text[:limit] + " ..."
        out.append(f"[{i}] ({where}) {text}")
    return out


_EVIDENCE_NUMBERS = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 15}, "maxItems": 4}
_TEXT = {"type": "string", "maxLength": 500}
_ELEMENT = {"anyOf": [{"type": "string", "maxLength": 300}, {"type": "number"}, {"type": "boolean"}]}


_LITERAL = re.compile(r"(?<![\w.@])(?<!\w-)\d+(?:\.\d+)?%?(?![\w.])")


def worked_computation(question: str) -> bool:
    """Whether ``question`` gives the numbers to compute with ("... what is the loss for a triple whose
    distances are 0.8 and 1.5?", "If J = 0.5 and C = 0.8 ...", "given its 24 layers and 16 heads"): an
    assignment such as ``R = 1``, or two numbers or more (not years, not "Table 2" / "recall@1") with a
    compute or condition word. Such answers are written as an expression and computed."""
    q = question or ""
    if _ASSIGNMENT.search(q):
        return True
    literals = [m for m in _LITERAL.finditer(q)
                if not re.fullmatch(r"(?:19|20)\d\d", m.group(0)) and not _ELEMENT_NUMBER.search(q[:m.start()])]
    return len(literals) >= 2 and (asks_to_compute(q) or bool(_WORKED_ASK.search(q)))


def answer_schema(answer_format: str | None, *, compute: bool = False, worked: bool = False) -> dict:
    """The JSON schema of the focused answer: ``{"answer": <value>, "evidence": [excerpt numbers]}``
    with ``<value>`` typed as the answer format asks (:func:`neusym.query.answer.answer_format.shape_of`):
    a JSON array of exactly N strings / numbers / booleans for "a Python list of N elements", an
    integer, a number, a boolean, else a string. Constraining a small model to a string when the
    format asks for a list or a number made it write fragments such as ``:[`` or ``,27``.
    ``compute``: the question asks for a computed number, so a number may also be a string holding
    an arithmetic expression (list elements always may), computed afterwards by CalculateExpr.
    ``worked`` (:func:`worked_computation`): a number must be such an expression: answering the number
    directly, the 1.5B model got none of the dev set's seven worked computations right."""
    from neusym.query.answer.answer_format import shape_of

    shape = shape_of(answer_format)
    expression = {"type": "string", "maxLength": 200}
    value: dict = _TEXT
    if shape.kind == "list":
        value = {"type": "array", "items": _ELEMENT}
        if shape.length:
            value.update(minItems=shape.length, maxItems=shape.length)
        else:
            value["maxItems"] = 20
    elif shape.kind in ("int", "float"):
        number = {"type": "integer" if shape.kind == "int" else "number"}
        value = expression if worked else ({"anyOf": [number, expression]} if compute else number)
    elif shape.kind == "bool":
        value = {"type": "boolean"}
    if worked:  # the formula written out first, then the expression that evaluates it
        return {"type": "object", "properties": {"formula": {"type": "string", "maxLength": 300}, "answer": value,
                                                 "evidence": _EVIDENCE_NUMBERS},
                "required": ["formula", "answer", "evidence"], "additionalProperties": False}
    return {"type": "object", "properties": {"answer": value, "evidence": _EVIDENCE_NUMBERS},
            "required": ["answer", "evidence"], "additionalProperties": False}


FOCUSED_SYSTEM = (
    "You answer a question about research papers using only the numbered evidence excerpts. "
    "Reply with JSON: \"answer\" in exactly the required answer format, and \"evidence\": the numbers of the "
    "excerpts that support it. Copy names and numbers exactly as written in the evidence."
)
#: Added to :data:`FOCUSED_SYSTEM` only when the question asks for a computed value (difference, ratio,
#: total, ...): otherwise the small model starts writing code for numbers it should copy. It names no
#: numbers: with an example such as "(85.2 - 80.1) / 80.1 * 100" the model answered that example.
COMPUTE_HINT = (
    " When the answer is a number computed from numbers in the evidence, you may write it as a string holding "
    "the arithmetic expression over the numbers copied from the evidence (operators + - * / ** and exp, log, "
    "sqrt); it is computed for you."
)

#: Replaces :data:`COMPUTE_HINT` when the question gives the numbers (:func:`worked_computation`).
WORKED_HINT = (
    " The question gives numbers to compute with. First write \"formula\": the formula or rule from the evidence "
    "with the question's numbers put in. Then write each number of \"answer\" as a string holding that arithmetic "
    "expression (operators + - * / ** ( ) and functions max, min, sum, exp, log, sqrt); it is computed for you."
)


def focused_answer(question: str, answer_format: str | None, papers: list[tuple[str, str]], cells: list[dict],
                   env: Any, llm: Any, *, note: str = "") -> tuple[Any, list[dict], Any]:
    """One LLM call over the evidence ``cells``, its reply constrained by :func:`answer_schema`: (the answer
    as the model wrote it — a string, or a list / number / boolean when the format asks for one —, the
    cells it cites, the LLM reply)."""
    lines = _evidence_block(cells, env, question, papers)
    titles = "; ".join(t for _, t in papers)
    user = (f"[Question]: {question.strip()}\n[Answer Format]: {(answer_format or 'A concise answer.').strip()}\n"
            f"[Paper]: {titles}\n[Evidence]:\n" + "\n".join(lines))
    if note:
        user += f"\n[Check]: {note}"
    worked = worked_computation(question)
    compute = asks_to_compute(question) or worked
    system = FOCUSED_SYSTEM + (WORKED_HINT if worked else COMPUTE_HINT if compute else "")
    reply = llm.chat([{"role": "system", "content": system}, {"role": "user", "content": user}],
                     json_schema=answer_schema(answer_format, compute=compute, worked=worked), max_tokens=200)
    try:
        data = json.loads(reply.text)
        answer = data.get("answer", "")
        answer = answer.strip() if isinstance(answer, str) else answer
        used = [cells[i - 1] for i in data.get("evidence", []) if isinstance(i, int) and 1 <= i <= len(cells)]
        if worked and not isinstance(answer, list):
            answer = formula_expression(data.get("formula")) or answer
    except (ValueError, TypeError, AttributeError):
        answer, used = reply.text.strip(), []
    return answer, used, reply


def formula_expression(formula: Any) -> str | None:
    """The arithmetic in the model's written-out ``formula`` ("13 * 24 * 16", "L = max(0.8 - 1.5 + 1, 0)"):
    the right-most ``=``-separated part that has an operator and evaluates to a number
    (:func:`neusym.query.calc.calculate`), else None. The small model writes the right arithmetic and then a
    wrong result ("13 * 24 * 16" and answer 5184): the arithmetic is what gets computed."""
    from neusym.query.calc import calculate

    if not isinstance(formula, str):
        return None
    for part in reversed(formula.split("=")):
        part = part.strip().rstrip(".")
        if not re.search(r"\d\s*[-+*/]\s*[\d(]|\w\(", part):
            continue
        try:
            value = calculate(part)
        except NeusymError:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return part
    return None


# ------------------------------------------------------------------------------------ orchestration
def tables_the_question_names(question: str, papers: list[tuple[str, str]], env: Any) -> list[str]:
    """The stored tables of ``papers`` whose structure the question names: ids (``tables.table_id``,
    as strings) of the tables whose rows and columns each share a content word with the question,
    ``config.named_table_words`` distinct shared words at least (``table_cells``). The rows are named
    by a row header or by the header of the first column, which says what the rows are ("the
    co-citation F1 of SciBERT": row "SciBERT", header "Co-Cite / F1"; "which field has the lowest
    F1": first column "Field", header "F1"); the columns by a column header path. Best first (most
    shared words; ties: page order). Reads the table's own labels, not the question's wording: no
    word list decides it. ``[]`` when the corpus has no ``table_cells`` (a version before them)."""
    ids = [pid for pid, _ in papers]
    terms = _label_terms(question)
    if not ids or not terms:
        return []
    try:
        rows = env.query(
            "SELECT c.ref_table_id::VARCHAR, string_agg(DISTINCT c.row_header, ' ') || ' ' || "
            "coalesce(string_agg(DISTINCT CASE WHEN c.column_index = 0 THEN c.column_header_path END, ' '), ''), "
            "string_agg(DISTINCT c.column_header_path, ' '), min(t.page_number) FROM table_cells c "
            "JOIN tables t ON t.table_id = c.ref_table_id WHERE c.ref_paper_id::VARCHAR IN "
            f"({', '.join('?' for _ in ids)}) GROUP BY 1", ids)
    except NeusymError:
        return []
    named = []
    for table_id, row_headers, header_paths, page in rows:
        in_rows, in_headers = terms & _label_terms(row_headers or ""), terms & _label_terms(header_paths or "")
        if in_rows and in_headers and len(in_rows | in_headers) >= current().named_table_words:
            named.append((-len(in_rows | in_headers), page or 0, table_id))
    return [table_id for *_, table_id in sorted(named)]


def _label_terms(text: str) -> set[str]:
    """Content words of a question or of table labels: :func:`_terms`, plus the two-character names
    of metrics and settings that hold a digit ("F1", "R2", "P5")."""
    return {t for t in word_tokens(text) if t not in _STOP and (len(t) > 2 or (len(t) == 2 and not t.isdigit()
                                                                               and any(ch.isdigit() for ch in t)))}




def focused_context(question: str, papers: list[tuple[str, str]], route_features: dict, env: Any,
                    trace: list | None = None) -> tuple[list[dict], str]:
    """What the focused route's reader sees: (the evidence cells, the evidence text of its prompt).

    The cells are :func:`focused_evidence`, with a table slot when the question names a stored
    table's rows and columns (:func:`tables_the_question_names`), each table and figure with its
    context (:func:`element_contexts`). ``trace``: a list that receives one ``{"view", "collection", "hits"}``
    per retrieval list (``benchmarks/evidence_recall.py`` measures each stage with it)."""
    cells = focused_evidence(question, papers, env, modality=route_features.get("modality", []),
                             ensure_table=bool(tables_the_question_names(question, papers, env)), trace=trace)
    element_contexts(cells, env)
    return cells, "\n".join(_evidence_block(cells, env, question, papers))


def answer_focused(question: str, answer_format: str | None, papers: list[tuple[str, str]], route_features: dict,
                   env: Any, llm: Any, result: Any, add_step: Callable) -> Any:
    """The ``focused`` route: the best excerpts of each of ``papers`` (:func:`focused_evidence`, table
    and figure contexts); when the evidence points at a table, one SQL query over its cells
    (:func:`_table_sql`), whose rows are the answer when they have the format's shape; else one LLM
    call typed by the answer format, verified, repaired once when a check fails, cited."""
    with phase("retrieval"):
        cells, observation = focused_context(question, papers, route_features, env)
    add_step(Step(thought="hybrid retrieval (BM25 + MiniLM, reciprocal-rank fusion) within the paper",
                  action="RetrieveFromVectorstore", arguments={"query": question, "papers": [p for p, _ in papers]},
                  observation=observation, fixed=True))
    compute = asks_to_compute(question) or worked_computation(question)
    with phase("table_query", owns_llm=True):
        cells, sql_result = _table_sql(question, answer_format, cells, route_features, env, llm, result, add_step)
    direct = sql_result[2] if sql_result else None
    if direct is not None:  # the query's rows have the shape the format asks for: they are the answer
        result.answer = direct
        result.verification = Verification("pass" if sql_result[1] else "fail", [_sql_check(sql_result)],
                                           basis="queried").to_dict()
        result.citations = [c.to_dict() for c in citations_for(env, cells[:1], direct)]
        return result
    answer, used, reply = focused_answer(question, answer_format, papers, cells, env, llm)
    _count(result, reply)
    add_step(Step(thought="answer from the evidence", action="GenerateAnswer", arguments={"answer": answer},
                  observation="", raw=reply.text, prompt_tokens=reply.prompt_tokens,
                  completion_tokens=reply.completion_tokens, cached_tokens=reply.cached_tokens))
    cited = used or cells[:2]
    with phase("verification"):
        shaped = _conform(answer, answer_format, add_step, compute)
        check = verify(answer, _texts(used or cells), question=question, conformed=shaped)
    if check.status == "fail":
        with phase("repair", owns_llm=True):
            note = "; ".join(f"'{c.claim}' {c.detail}" for c in check.failed) + ". Answer again from the evidence only."
            again, used2, reply2 = focused_answer(question, answer_format, papers, cells, env, llm, note=note)
            _count(result, reply2)
            add_step(Step(thought="repair: " + note, action="GenerateAnswer", arguments={"answer": again},
                          observation="", raw=reply2.text, prompt_tokens=reply2.prompt_tokens,
                          completion_tokens=reply2.completion_tokens, cached_tokens=reply2.cached_tokens))
            shaped2 = _conform(again, answer_format, add_step, compute)
            check2 = verify(again, _texts(used2 or cells), question=question, conformed=shaped2)
            if check2.status != "fail" or len(check2.failed) < len(check.failed):
                answer, cited, check, shaped = again, used2 or cells[:2], check2, shaped2
            check.repaired = True
    if shaped.ok:
        answer = shaped.value
    if sql_result is not None:  # the answer rests on a query the verifier re-ran
        check.checks.insert(0, _sql_check(sql_result))
        if check.status == "unverifiable":
            check.status = "pass" if sql_result[1] else "fail"
        cited = [cells[0]] + [c for c in cited if c is not cells[0]]
    result.answer = answer
    result.verification = check.to_dict()
    result.citations = [c.to_dict() for c in citations_for(env, cited, answer)]
    return result


def _texts(cells: list[dict]) -> list[str]:
    """What the verifier checks an answer against: a table's or figure's whole context, else the cell text."""
    return [c.get("context") or c["text"] for c in cells]


def _table_sql(question: str, answer_format: str | None, cells: list[dict], route_features: dict, env: Any,
               llm: Any, result: Any, add_step: Callable) -> tuple[list[dict], Any]:
    """Answer over a retrieved table with SQL (:mod:`neusym.query.answer.table_query`) when the evidence
    points at a table: the best-ranked excerpt is a table or the question names tables (router
    modality) — unless the question gives the numbers to compute with (:func:`worked_computation`).
    A question that only shares words with a table's rows and columns
    (:func:`tables_the_question_names`) gets the table in its evidence, not a query: opening the
    query on that test sent text questions to SQL and lost answers on the blind set
    (``benchmarks/results/table_menu_removal.json``). The query
    runs over the first table among ``cells``. Its rows become the first evidence cell
    (citing the table); returns (cells, (SqlResult, re-run agreed, the rows as the answer when their
    shape is the format's — :func:`neusym.query.answer.table_query.shaped_result` — else None)) or
    (cells, None) when no query gave rows."""
    from neusym.query.answer.table_query import load_relation, query_table, shaped_result, verify_sql

    tables = [c for c in cells if c.get("table_name") == "tables"]
    if not tables or worked_computation(question):  # it gives the numbers to compute with: nothing to look up
        return cells, None
    strong = cells[0].get("table_name") == "tables" or "table" in route_features.get("modality", [])
    if current().table_query_gate == "top" and not strong:
        return cells, None
    source = tables[0]
    rel = load_relation(env, str(source["primary_key"]))
    if rel is None:
        return cells, None
    res = query_table(question, answer_format, rel, env, llm)
    for reply in res.replies:
        _count(result, reply)
    caption = rel.caption.split("\n", 1)[0][:120] or "the table"
    add_step(Step(thought="the evidence holds a table: query its cells", action="RetrieveFromDatabase",
                  arguments={"sql": res.sql, "table_id": rel.table_id}, observation=res.text(), fixed=True,
                  raw=res.replies[-1].text if res.replies else ""))
    if not res.ok:
        return cells, None
    agreed = verify_sql(res, rel, env)
    computed = dict(source)
    computed["context"] = f"Computed by SQL over {caption}: {res.text()}"
    shaped = shaped_result(res, answer_format) if strong or current().table_query_gate == "any" else None
    return [computed] + cells, (res, agreed, shaped)




def _sql_check(sql_result: tuple) -> Check:
    """The verifier's check of an answer resting on a table query: the query re-run gave the same rows."""
    res, agreed = sql_result[0], sql_result[1]
    return Check(res.sql, "sql", agreed, "the query over the table's cells, re-run: " +
                 ("same rows" if agreed else "different rows or an error"))


def _conform(answer: Any, answer_format: str | None, add_step: Callable, compute: bool = False) -> Any:
    """:func:`neusym.query.answer.answer_format.conform`, recording each computed expression as a
    CalculateExpr step."""
    from neusym.query.answer.answer_format import conform

    shaped = conform(answer, answer_format, compute_strings=compute)
    for expr, value in shaped.computed:
        add_step(Step(thought="the answer is an expression: compute it", action="CalculateExpr",
                      arguments={"expr": expr}, observation=f"Result: {value!r}", fixed=True))
    return shaped


def _count(result: Any, reply: Any) -> None:
    result.turns += 1
    result.prompt_tokens += reply.prompt_tokens
    result.completion_tokens += reply.completion_tokens
    result.cached_tokens += reply.cached_tokens


__all__ = ["answer_focused", "answer_paper_search", "focused_context", "answer_schema", "element_contexts",
           "features", "focused_evidence", "llm_route", "search_filters", "short_title", "table_rows_text",
           "tables_the_question_names",
           "worked_computation"]
