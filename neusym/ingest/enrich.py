"""Enrichment: LLM summaries (pages, sections, tables, figures), per-paper tldr + tags, and OCR of figures.

Never blocks the corpus: ``corpus_refresh`` publishes parsed papers first; enrichment is a separate
stage (the ``corpus_enrich`` DAG, triggered by the ``neusym://corpus`` asset, or ``neusym enrich``):

    plan_enrichment (reads the published snapshot)  ─►  run_unit (mapped, capped)  ─►  apply_enrichment (single writer)

- **What is read** is defined once, in SQL: the view ``enrichment_inputs`` of
  ``sql/materialize/25_enrichment_inputs.sql`` (kind, element_id, paper_id, input_text).
- **Cache**: results are rows of the ``enrichments`` table keyed by (kind, sha256(input_text),
  model, prompt_version) — the prompt version is the sha256 prefix of the prompt file — so nothing
  is summarized twice, and ``materialize`` gives a re-parsed paper its cached summaries back
  (``sql/materialize/30_apply_enrichments.sql``).
- **Budget**: a run plans at most ``enrich_budget_tokens`` estimated LLM tokens (and
  ``enrich_ocr_budget`` figures), in the priority order of ``enrich_kinds``; the rest waits for the
  next run. A mapped task stops starting items after ``enrich_task_seconds``.
- **Resume**: a task appends each result to its own JSONL file under
  ``$NEUSYM_HOME/staging/enrich/`` as soon as it has it; ``apply_enrichment`` loads every such file
  (also those of an interrupted run), so finished work is never lost.
- **Failures** of one element are recorded in ``enrichment_failures`` and retried by later runs up
  to ``enrich_max_attempts``; they never fail the task or the DAG run.
- **Figures**: a vision LLM (``NEUSYM_LLM_VISION``) also gets the figure region as a PNG
  (:func:`figure_png`); a text-only LLM summarizes caption + OCR text.
- **Vectors**: the filled columns (``page_summary``, ``section_summary``, ``table_summary``,
  ``image_summary``, ``image_ocr_text``, ``metadata.tldr``) are encodable: ``apply_enrichment``
  ends by publishing a new corpus version (:func:`neusym.ingest.publish.publish`), which encodes exactly
  the new or changed cells and re-syncs the paper index (tldr and tags are paper-search views).
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Literal

import duckdb
from pydantic import BaseModel, Field

from neusym.settings import Settings
from neusym.ingest.stages import total_seconds
from neusym.store.sqlfiles import sql_dir
from neusym.store.db import connect_plain_readonly, writer
from neusym.store.storage import is_url, storage
from neusym.llm.chat import CHARS_PER_TOKEN as _CHARS_PER_TOKEN

LLM_KINDS = ("paper_tldr_tags", "table_summary", "image_summary", "section_summary", "page_summary")
OCR_KIND = "image_ocr_text"
KINDS = LLM_KINDS + (OCR_KIND,)
PROMPT_FILES = {
    "page_summary": "summary_page.md",
    "section_summary": "summary_section.md",
    "table_summary": "summary_table.md",
    "image_summary": "summary_image.md",
    "paper_tldr_tags": "summary_paper.md",
}
ENRICHED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("metadata", "tldr"),
    ("pages", "page_summary"),
    ("sections", "section_summary"),
    ("tables", "table_summary"),
    ("images", "image_summary"),
    ("images", "image_ocr_text"),
)
"""Encodable columns filled by this stage; their points are synced here, not by ``publish_stage``."""
ENRICHED_COLUMN_NAMES = tuple(sorted({c for _, c in ENRICHED_COLUMNS}))
TLDR_TAGS_SCHEMA = {
    "type": "object",
    "properties": {"tldr": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["tldr", "tags"],
    "additionalProperties": False,
}


class EnrichError(Exception):
    """An enrichment item failed (recorded, retried by a later run)."""


class EnrichItem(BaseModel):
    """One element to enrich (only ids travel between tasks; texts are re-read from the snapshot)."""

    kind: str
    element_id: str
    content_sha256: str
    est_tokens: int = 0


class EnrichUnit(BaseModel):
    """The work of one mapped task: items of one paper (or a few), in priority order."""

    unit_id: str
    stage: Literal["ocr", "summaries"]
    paper_id: str
    items: list[EnrichItem]


class UnitResult(BaseModel):
    unit_id: str
    done: int = 0
    failed: int = 0
    cached: int = 0
    left_for_next_run: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    results_file: str | None = None


class ApplyReport(BaseModel):
    """What one apply did: results and failures loaded, cells filled per column, and the corpus
    version it published (``version`` None when nothing changed) with its cell-point changes."""

    results_loaded: int = 0
    failures_recorded: int = 0
    filled: dict[str, int] = Field(default_factory=dict)
    points_upserted: int = 0
    points_deleted: int = 0
    version: int | None = None
    seconds: float = 0.0


# ------------------------------------------------------------------------------------ helpers
def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


@lru_cache(maxsize=None)
def prompt_template(kind: str) -> str:
    """The prompt file text of an LLM enrichment kind (package data ``neusym/prompts/``)."""
    return resources.files("neusym").joinpath("prompts", PROMPT_FILES[kind]).read_text(encoding="utf-8").rstrip()


def prompt_version(kind: str) -> str:
    """Version of a kind's prompt: sha256 prefix of its prompt file (OCR: render resolution and the
    version of how pieces are joined into text)."""
    if kind == OCR_KIND:
        from neusym.ingest.parse.ocr import OCR_DPI, OCR_LAYOUT_VERSION

        return f"dpi{OCR_DPI}-layout{OCR_LAYOUT_VERSION}"
    return hashlib.sha256(prompt_template(kind).encode()).hexdigest()[:12]


def model_name(settings: Settings, kind: str) -> str:
    """The model recorded for a kind: the configured LLM's name, or the OCR engine and version."""
    if kind == OCR_KIND:
        from importlib.metadata import version

        return f"rapidocr-{version('rapidocr')}"
    return settings.llm_model


def _inputs_connection(db: Path) -> duckdb.DuckDBPyConnection:
    con = connect_plain_readonly(db)
    con.execute((sql_dir() / "materialize" / "25_enrichment_inputs.sql").read_text(encoding="utf-8"))
    return con


def _snapshot(settings: Settings, db_path: Path | None) -> Path:
    if db_path is not None:
        return Path(db_path)
    from neusym.store.versions import current_db

    return current_db(settings)


def results_dir(settings: Settings) -> Path:
    """Where mapped tasks append their results (JSONL), read and emptied by :func:`apply_enrichment`."""
    return settings.staging_dir / "enrich"


# --------------------------------------------------------------------------------------- plan
def plan_enrichment(settings: Settings, stage: Literal["ocr", "summaries"], *, db_path: Path | None = None,
                    budget_tokens: int | None = None) -> list[EnrichUnit]:
    """The work units of this run for one stage, within the budget, read from the published snapshot.

    Pending = an ``enrichment_inputs`` row (kind in ``settings.enrich_kinds``) without a cached value
    for the current model + prompt version, and not failed ``enrich_max_attempts`` times already.
    Summaries: items are taken in the priority order of ``enrich_kinds`` (parsed papers before
    metadata-only ones), each costing an estimated ``len(input)/4`` (capped at
    ``enrich_input_chars/4``) + ``enrich_max_tokens`` tokens, until ``budget_tokens`` (default
    ``settings.enrich_budget_tokens``) is spent. OCR: at most ``settings.enrich_ocr_budget`` figures.
    Units hold at most ``enrich_unit_size`` items of one paper. ``db_path`` overrides the snapshot.
    Raises ``NoSnapshotError`` when nothing was published yet.
    """
    kinds = [k for k in settings.enrich_kinds if (k == OCR_KIND) == (stage == "ocr")]
    if not kinds:
        return []
    budget = settings.enrich_budget_tokens if budget_tokens is None else budget_tokens
    con = _inputs_connection(_snapshot(settings, db_path))
    try:
        rows = []
        for rank, kind in enumerate(kinds):
            model, version = model_name(settings, kind), prompt_version(kind)
            rows += con.execute(
                """
                SELECT ?::INTEGER AS rank, i.kind, i.element_id, i.paper_id, sha256(i.input_text) AS sha,
                       length(i.input_text) AS chars, m.num_pages IS NOT NULL AS parsed, i.page_number
                FROM enrichment_inputs i JOIN metadata m ON m.paper_id::VARCHAR = i.paper_id
                WHERE i.kind = ?
                  AND NOT EXISTS (SELECT 1 FROM enrichments e WHERE e.kind = i.kind
                                  AND e.content_sha256 = sha256(i.input_text) AND e.model = ? AND e.prompt_version = ?)
                  AND NOT EXISTS (SELECT 1 FROM enrichment_failures f WHERE f.kind = i.kind
                                  AND f.content_sha256 = sha256(i.input_text) AND f.model = ? AND f.prompt_version = ?
                                  AND f.attempts >= ?)
                """,
                [rank, kind, model, version, model, version, settings.enrich_max_attempts],
            ).fetchall()
    finally:
        con.close()
    rows.sort(key=lambda r: (not r[6], r[0], r[3], r[7] or 0, r[2]))
    picked: list[tuple[str, EnrichItem]] = []
    seen: set[tuple[str, str]] = set()
    spent = 0
    for _rank, kind, element_id, paper_id, sha, chars, _parsed, _page in rows:
        if (kind, sha) in seen:  # identical inputs (e.g. a paper listed twice) are computed once
            continue
        if stage == "ocr":
            if len(picked) >= settings.enrich_ocr_budget:
                break
            cost = 0
        else:
            cost = min(chars, settings.enrich_input_chars) // _CHARS_PER_TOKEN + 200 + settings.enrich_max_tokens
            if spent + cost > budget:
                continue  # a smaller item may still fit
        spent += cost
        seen.add((kind, sha))
        picked.append((paper_id, EnrichItem(kind=kind, element_id=element_id, content_sha256=sha, est_tokens=cost)))
    units: dict[str, list[list[EnrichItem]]] = {}
    for paper_id, item in picked:
        groups = units.setdefault(paper_id, [[]])
        if len(groups[-1]) >= settings.enrich_unit_size:
            groups.append([])
        groups[-1].append(item)
    out = []
    for paper_id, groups in units.items():
        for items in groups:
            key = "|".join(f"{i.kind}:{i.content_sha256}" for i in items)
            uid = f"{stage}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
            out.append(EnrichUnit(unit_id=uid, stage=stage, paper_id=paper_id, items=items))
    return out


# ---------------------------------------------------------------------------------------- run
FIGURE_DPI = 144
"""Resolution of the figure crop sent to a vision LLM (the agent's ViewImage resolution)."""


def figure_png(pdf_path: Path, page_number: int, bbox: list[float], dpi: int = FIGURE_DPI) -> bytes:
    """PNG of the region ``bbox`` (``[x0, y0, width, height]``, PDF points) of page ``page_number`` (from 1)."""
    import pymupdf

    with pymupdf.open(str(pdf_path)) as doc:
        page = doc[page_number - 1]
        x0, y0, w, h = bbox
        clip = pymupdf.Rect(x0, y0, x0 + w, y0 + h) & page.rect
        return page.get_pixmap(dpi=dpi, clip=clip).tobytes("png")


def _llm_value(kind: str, text: str, llm: Any, settings: Settings,
               image_png: bytes | None = None) -> tuple[str, int, int]:
    """One LLM enrichment of ``text`` (and, for a vision LLM, the figure image): (value,
    prompt_tokens, completion_tokens). Raises EnrichError."""
    import base64

    from neusym.llm.chat import LLMError

    body = text[: settings.enrich_input_chars]
    prompt = prompt_template(kind).replace("{text}", body)
    content: Any = prompt
    if image_png is not None:
        url = "data:image/png;base64," + base64.b64encode(image_png).decode("ascii")
        content = [{"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": url}}]
    schema = TLDR_TAGS_SCHEMA if kind == "paper_tldr_tags" else None
    try:
        reply = llm.chat([{"role": "user", "content": content}], json_schema=schema,
                         max_tokens=settings.enrich_max_tokens if schema is None else settings.enrich_max_tokens + 80)
    except LLMError as exc:
        raise EnrichError(str(exc)) from exc
    value = (reply.text or "").strip()
    if kind == "paper_tldr_tags":
        try:
            data = json.loads(value[value.index("{"): value.rindex("}") + 1])
        except ValueError as exc:
            raise EnrichError(f"tldr/tags reply is not a JSON object: {value[:200]!r}") from exc
        tldr = data.get("tldr") if isinstance(data, dict) else None
        tags = data.get("tags") if isinstance(data, dict) else None
        if not isinstance(tldr, str) or not tldr.strip() or not isinstance(tags, list):
            raise EnrichError(f"tldr/tags reply lacks a tldr string and a tags list: {value[:200]!r}")
        tags = list(dict.fromkeys(str(t).strip().lower() for t in tags if str(t).strip()))[:8]
        value = json.dumps({"tldr": " ".join(tldr.split()), "tags": tags}, ensure_ascii=False)
    elif not value:
        raise EnrichError("the LLM returned an empty summary")
    elif reply.finish_reason == "length":
        value = value.rsplit(".", 1)[0] + "." if "." in value else value  # drop a cut-off last sentence
    return value, reply.prompt_tokens, reply.completion_tokens


def _ocr_value(row: tuple, pdf_for: Callable[[str], Path], ocr: Callable[..., str]) -> str:
    _kind, _element_id, paper_id, page_number, bbox, _text = row
    try:
        return ocr(pdf_for(paper_id), int(page_number), list(bbox))
    except Exception as exc:  # noqa: BLE001 — any OCR failure is one item's failure
        raise EnrichError(f"OCR of page {page_number} region {list(bbox)}: {type(exc).__name__}: {exc}") from exc


def run_unit(unit: EnrichUnit | dict, settings: Settings, *, llm: Any = None, ocr: Callable[..., str] | None = None,
             db_path: Path | None = None) -> UnitResult:
    """Compute the items of one unit, appending each result (or failure) to the unit's JSONL file.

    Inputs are re-read from the snapshot (``db_path`` overrides): if an element changed since
    planning, its current text is used under its current hash. Items already cached (e.g. by an
    interrupted earlier attempt of this task, whose file is kept) are skipped. ``llm``: an object
    with the :class:`neusym.llm.chat.LLM` protocol (default: ``make_llm(settings)``); ``ocr``:
    ``(pdf_path, page_number, bbox) -> str`` (default :func:`neusym.ingest.parse.ocr.ocr_image_text`).
    Never raises for an item: failures are recorded. Stops starting items after
    ``settings.enrich_task_seconds``.
    """
    unit = EnrichUnit.model_validate(unit)
    start = time.perf_counter()
    out_dir = results_dir(settings)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{unit.unit_id}.jsonl"
    st = storage(settings)
    st.refresh_file(path)  # shared storage: an interrupted attempt may have run on another host
    done_keys = set()
    if path.exists():  # resume an interrupted attempt of this very unit
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash
            if "value" in rec:
                done_keys.add((rec["kind"], rec["element_id"]))
    result = UnitResult(unit_id=unit.unit_id, results_file=str(path))
    con = _inputs_connection(_snapshot(settings, db_path))
    try:
        ids = [i.element_id for i in unit.items]
        rows = {(r[0], r[1]): r for r in con.execute(
            "SELECT kind, element_id, paper_id, page_number, bounding_box, input_text FROM enrichment_inputs "
            "WHERE element_id IN (SELECT unnest(?::VARCHAR[]))", [ids]).fetchall()}
        pdfs = dict(con.execute("SELECT paper_id::VARCHAR, pdf_path FROM metadata WHERE paper_id = ?::UUID",
                                [unit.paper_id]).fetchall())
    finally:
        con.close()

    def pdf_for(paper_id: str) -> Path:
        from neusym.store.pdfs import pdf_file

        if not pdfs.get(paper_id):
            raise EnrichError(f"paper {paper_id} has no stored PDF")
        if is_url(pdfs[paper_id]):  # a corpus from before the PDF store held URLs: this host's copy
            return st.fetch_url(pdfs[paper_id])
        path = pdf_file(settings, pdfs[paper_id])
        if path is None:
            raise EnrichError(f"the PDF of paper {paper_id} ({Path(pdfs[paper_id]).name}) is not on this host")
        return path

    if unit.stage == "summaries" and llm is None:
        from neusym.llm.chat import make_llm

        llm = make_llm(settings)
    if unit.stage == "ocr" and ocr is None:
        from neusym.ingest.parse.ocr import ocr_image_text as ocr
    with open(path, "a", encoding="utf-8") as fh:
        for n, item in enumerate(unit.items):
            if time.perf_counter() - start > settings.enrich_task_seconds:
                result.left_for_next_run = len(unit.items) - n
                break
            row = rows.get((item.kind, item.element_id))
            if row is None:  # the element disappeared (paper re-parsed since planning)
                continue
            if (item.kind, item.element_id) in done_keys:
                result.cached += 1
                continue
            sha = hashlib.sha256(row[5].encode("utf-8")).hexdigest()
            rec: dict[str, Any] = {"kind": item.kind, "element_id": item.element_id, "content_sha256": sha,
                                   "model": model_name(settings, item.kind), "prompt_version": prompt_version(item.kind)}
            t0 = time.perf_counter()
            try:
                if item.kind == OCR_KIND:
                    rec["value"] = _ocr_value(row, pdf_for, ocr)
                else:
                    png = None
                    if item.kind == "image_summary" and getattr(llm, "supports_images", False) and row[4] is not None:
                        try:
                            png = figure_png(pdf_for(row[2]), int(row[3]), list(row[4]))
                        except EnrichError:
                            png = None  # no stored PDF: summarize from caption and OCR text alone
                    rec["value"], p, c = _llm_value(item.kind, row[5], llm, settings, png)
                    rec.update(prompt_tokens=p, completion_tokens=c)
                    result.prompt_tokens += p
                    result.completion_tokens += c
                result.done += 1
            except EnrichError as exc:
                rec["error"] = str(exc)[:2000]
                result.failed += 1
            rec.update(seconds=round(time.perf_counter() - t0, 3), created_at=_utcnow().isoformat())
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            fh.flush()
            st.push(path)  # the writer may run on another host
    result.seconds = time.perf_counter() - start
    return result


# -------------------------------------------------------------------------------------- apply
def _read_results(settings: Settings) -> tuple[list[Path], list[dict]]:
    st = storage(settings)
    for key in st.list_keys(st.key_of(results_dir(settings))):  # written by tasks on other hosts
        if key.endswith(".jsonl"):
            st.get_file(key, st.local_path(key))
    files = sorted(results_dir(settings).glob("*.jsonl"))
    records = []
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # the last line of a crashed task may be cut
            if isinstance(rec, dict) and {"kind", "content_sha256", "model", "prompt_version"} <= set(rec):
                records.append(rec)
    return files, records


def apply_enrichment(settings: Settings, *, publish: bool = True, stages: dict[str, float] | None = None) -> ApplyReport:
    """Load every staged enrichment result into DuckDB and fill the columns (the single writer).

    In one transaction: results go to ``enrichments`` (a success also clears the item's failure
    row), failures increment ``enrichment_failures.attempts``, then ``25_enrichment_inputs.sql`` +
    ``30_apply_enrichments.sql`` fill the columns. After the commit the consumed result files are
    removed and, when anything was loaded (``publish``), a new corpus version is published: the
    enriched cells get their points and the paper index its tldr/tags. Idempotent; with no new
    results it changes and publishes nothing. Raises duckdb.Error after rolling back (result files
    are then kept for the next try), :class:`neusym.store.db.WriterBusyError` when another writer
    holds the home longer than ``writer_wait_s``. ``stages``: seconds of the units applied (``{"ocr": s}``
    or ``{"summaries": s}``, summed over units), recorded in the published version's manifest.
    """
    from neusym.store.db import writer_lock

    t0 = time.perf_counter()
    report = ApplyReport()
    with writer_lock(settings):  # held through the publish, so no other writer slips in between
        _apply(settings, report, publish, stages)
    report.seconds = time.perf_counter() - t0
    return report


def _apply(settings: Settings, report: ApplyReport, publish: bool, stages: dict[str, float] | None) -> None:
    files, records = _read_results(settings)
    ok = [r for r in records if "value" in r]
    bad = [r for r in records if "value" not in r]
    with writer(settings) as con:
        before = _filled_counts(con)
        con.execute("BEGIN TRANSACTION")
        try:
            now = _utcnow()
            if ok:
                con.executemany(
                    "INSERT OR REPLACE INTO enrichments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [[r["kind"], r["content_sha256"], r["model"], r["prompt_version"], r["value"],
                      r.get("prompt_tokens"), r.get("completion_tokens"), r.get("seconds"),
                      r.get("created_at") or now] for r in ok])
                con.executemany(
                    "DELETE FROM enrichment_failures WHERE kind = ? AND content_sha256 = ? AND model = ? "
                    "AND prompt_version = ?",
                    [[r["kind"], r["content_sha256"], r["model"], r["prompt_version"]] for r in ok])
            for r in bad:
                con.execute(
                    "INSERT INTO enrichment_failures VALUES (?, ?, ?, ?, ?, ?, 1, ?) "
                    "ON CONFLICT (kind, content_sha256, model, prompt_version) DO UPDATE SET "
                    "attempts = enrichment_failures.attempts + 1, error = excluded.error, "
                    "element_id = excluded.element_id, last_attempt_at = excluded.last_attempt_at",
                    [r["kind"], r["content_sha256"], r["model"], r["prompt_version"], r["element_id"],
                     r["error"], r.get("created_at") or now])
            for name in ("25_enrichment_inputs.sql", "30_apply_enrichments.sql"):
                con.execute((sql_dir() / "materialize" / name).read_text(encoding="utf-8"))
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        after = _filled_counts(con)
    st = storage(settings)
    for f in files:
        f.unlink(missing_ok=True)
        if st.shared:
            st.delete(st.key_of(f))
    report.results_loaded, report.failures_recorded = len(ok), len(bad)
    report.filled = {k: after[k] - before.get(k, 0) for k in after}
    if publish and records:
        from neusym.ingest.publish import publish as publish_version

        published = publish_version(settings, stages=stages)
        report.version = published.version
        report.points_upserted, report.points_deleted = published.upserted, published.deleted


def _filled_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Non-NULL cells per enriched column, ``{"table.column": n}`` (plus metadata.tags non-empty)."""
    out = {f"{t}.{c}": con.execute(f"SELECT count({c}) FROM {t}").fetchone()[0] for t, c in ENRICHED_COLUMNS}
    out["metadata.tags"] = con.execute("SELECT count(*) FROM metadata WHERE len(tags) > 0").fetchone()[0]
    return out


# ------------------------------------------------------------------------------- in-process run
class EnrichReport(BaseModel):
    """What one in-process enrichment run did (``neusym enrich``)."""

    ocr_units: list[UnitResult] = Field(default_factory=list)
    summary_units: list[UnitResult] = Field(default_factory=list)
    applied: list[ApplyReport] = Field(default_factory=list)
    pending_after: int = 0
    seconds: float = 0.0


def enrich(settings: Settings, *, stages: tuple[str, ...] = ("ocr", "summaries"), llm: Any = None,
           ocr: Callable[..., str] | None = None, budget_tokens: int | None = None,
           on_unit: Callable[[UnitResult], None] | None = None) -> EnrichReport:
    """Run the enrichment stages in this process, as the ``corpus_enrich`` DAG does with mapped tasks:
    for each stage, plan (within the budget) → run every unit → apply (OCR is applied before the
    summaries are planned, so figure summaries see the OCR text). Arguments as in
    :func:`plan_enrichment` / :func:`run_unit`. Raises ``NoSnapshotError`` before any corpus exists.
    """
    t0 = time.perf_counter()
    report = EnrichReport()
    for stage in stages:
        units = plan_enrichment(settings, stage, budget_tokens=budget_tokens)  # type: ignore[arg-type]
        for unit in units:
            res = run_unit(unit, settings, llm=llm, ocr=ocr)
            (report.ocr_units if stage == "ocr" else report.summary_units).append(res)
            if on_unit:
                on_unit(res)
        done = report.ocr_units if stage == "ocr" else report.summary_units
        report.applied.append(apply_enrichment(settings, stages={stage: total_seconds(done)}))
    report.pending_after = sum(len(u.items) for st in stages
                               for u in plan_enrichment(settings, st, budget_tokens=10**12))  # type: ignore[arg-type]
    report.seconds = time.perf_counter() - t0
    return report
