"""Stage functions of the corpus refresh, shared by the Airflow DAG and the ``neusym`` CLI.

    discover_pdfs ─► parse_stage (one per PDF, parallel) ─► encode_stage (one per PDF, parallel)
                          │                                        │ (staged vectors)
                          └──► materialize_stage (the single DuckDB writer) ─► publish (new corpus version)

Parallel stages only read their PDF and write per-PDF staging files (:mod:`neusym.ingest.staging`); the
single writer loads them into ``corpus.duckdb`` and :func:`neusym.ingest.publish.publish` turns that into
the next corpus version (DuckDB snapshot + cell collection + paper index) that readers switch to
atomically. Stage inputs/outputs are small JSON-serialisable models (they travel through Airflow
XCom). Every stage is idempotent: an unchanged PDF is not parsed or encoded again, re-loading it
writes identical rows, and publishing unchanged papers writes no point.

Workers on several hosts (``NEUSYM_STORAGE_URL``): staging results are pushed to the shared storage
and pulled by the stage that needs them on another host (:mod:`neusym.ingest.staging`); input PDFs are put
in the shared content-addressed PDF store by :func:`input_items` (the task that finds them), so a
parse on any host can fetch them. Every parsed PDF is kept in the content-addressed PDF store
(:mod:`neusym.store.pdfs`) and ``metadata.pdf_path`` is its store key (``pdfs/sha256/<sha256>.pdf``),
never a host's path; where the PDF was found is in the staging manifest (``source_path``) and the
run's report.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Callable, Iterable, Literal

from pydantic import BaseModel, Field

from neusym.encode import encode_cells, encoder_version
from neusym.errors import NoInputError, UnparseablePDF
from neusym.ids import airqa_paper_id
from neusym.ingest import parse as parse_module
from neusym.ingest.materialize import MaterializeReport, materialize
from neusym.ingest.publish import PublishReport, publish
from neusym.ingest.stages import run_stages
from neusym.ingest.staging import (
    drop_quarantine,
    load_parsed_table,
    parsed_dir,
    pull_staged_parse,
    stage_parsed,
    stage_quarantine,
    stage_vectors,
    staged_for_materialize,
    staged_manifest,
    staged_parse_source,
    vectors_dir,
)
from neusym.records import TABLE_RECORDS
from neusym.settings import Settings, usable_cores
from neusym.store.pdfs import share_pdf, store_dir, store_pdf
from neusym.store.storage import StorageError, is_url, local_input


logger = logging.getLogger(__name__)


def parser_version(settings: Settings) -> str:
    """Version tag of a staged parse: the parser's own version plus the settings that shape its output."""
    return f"{parse_module.parser_version(settings)}/chunk{settings.chunk_tokens}"


class ParseResult(BaseModel):
    """Outcome of parsing one PDF (``parsed`` now, ``reused`` from staging, or ``quarantined``)."""

    pdf_path: str
    pdf_sha256: str
    status: Literal["parsed", "reused", "quarantined"]
    paper_id: str | None = None
    title: str | None = None
    num_pages: int = 0
    staged_dir: str | None = None
    quarantine_file: str | None = None
    reason: str | None = None
    download: dict | None = None
    seconds: float = 0.0
    parts: dict[str, float] = Field(default_factory=dict)
    """Of ``seconds``: the parser's own steps (``open_text``, ``chunks``, ``floats_equations``,
    ``pymupdf4llm_tables``, ``table_structure``, ``rapid_layout``, ``references``, ...)."""


class EncodeResult(BaseModel):
    """Outcome of encoding one parsed PDF into staged vectors (``points``: ``{"cells": n, "dense": n}``)."""

    pdf_sha256: str
    paper_id: str | None = None
    status: Literal["encoded", "reused", "skipped"]
    vectors_dir: str | None = None
    points: dict[str, int] = Field(default_factory=dict)
    seconds: float = 0.0


class IngestPlan(BaseModel):
    """What a run is about to do (the ``"plan"`` event of :func:`ingest`): ``downloads`` to fetch and
    ``pdfs`` to parse (before the downloads: local PDFs plus every download; then the exact list)."""

    pdfs: int = 0
    downloads: int = 0


class IngestReport(BaseModel):
    """Summary of one ``ingest`` run (CLI) — the same stages as one DAG run."""

    parsed: list[ParseResult]
    encoded: list[EncodeResult]
    row_counts: dict[str, int]
    publish: PublishReport
    pages: int
    seconds: dict[str, float]
    """Wall time per step (crawl, download, parse+encode, materialize, publish); they add up to the run."""
    item_seconds: dict[str, float] = Field(default_factory=dict)
    """Sum over PDFs of the parse and encode stages' own time (they overlap in ``parse+encode``)."""
    stages: dict[str, float] = Field(default_factory=dict)
    """Seconds per stage (:mod:`neusym.ingest.stages`), as recorded in the published version's manifest."""
    crawled: list = Field(default_factory=list)
    downloads: list[dict] = Field(default_factory=list)
    held: list[dict] = Field(default_factory=list)
    """PDFs parsed but not loaded (lower quality than the stored paper, or the same work as another)."""
    same_files: list[dict] = Field(default_factory=list)
    """Input files with the same bytes as another input (``{pdf_path, same_as}``), parsed once."""
    refused: list[dict] = Field(default_factory=list)
    """Input files not read (``{pdf_path, reason}``): symbolic links out of their folder."""


# --------------------------------------------------------------------------------- discover
def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def discover_pdfs(paths: Iterable[str | Path], *, exclude: Iterable[str | Path] = (),
                  refused: list[dict] | None = None) -> list[str]:
    """PDF files named by ``paths`` (files, or folders searched recursively for ``*.pdf``), sorted, unique.

    A symbolic link is followed only while its target stays inside the folder it was found in (the
    folder given, or the folder of a file given): a link out of it (``x.pdf -> /etc/passwd``) is not
    read, and ``{"pdf_path", "reason"}`` is added to ``refused`` (logged as a warning when no list is given). Files under
    ``exclude`` (the home's PDF store) are skipped. Paths are absolute, with the folder as given
    (the link's name, not its target). Raises FileNotFoundError naming a path that does not exist.
    """
    skip = [Path(e).resolve() for e in exclude]
    found: set[Path] = set()

    def consider(candidate: Path, root: Path) -> None:
        target = candidate.resolve()
        if any(target.is_relative_to(e) for e in skip):
            return
        if not target.is_relative_to(root.resolve()):
            reason = (f"symbolic link to a file outside {root}: not read (give the file's real path, or put the "
                      "file itself in the folder)")
            if refused is not None:
                refused.append({"pdf_path": str(candidate), "reason": reason})
            else:
                logger.warning("%s: %s", candidate, reason)
            return
        found.add(candidate.absolute())

    for p in map(Path, paths):
        if p.is_dir():
            for q in p.rglob("*"):
                if q.suffix.lower() == ".pdf" and q.is_file():
                    consider(q, p)
        elif p.is_file():
            consider(p, p.absolute().parent)
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    return [str(p) for p in sorted(found)]


# ------------------------------------------------------------------------------------ parse
def parse_stage(
    pdf_path: str | Path, settings: Settings, *, paper_id: str | None = None, download: dict | None = None,
    source: str | None = None,
) -> ParseResult:
    """Parse one PDF into staging (or reuse an up-to-date staged parse, or quarantine it).

    ``pdf_path``: a local path or a URL (fetched through the shared storage / fsspec); ``source``:
    the PDF's URL in the shared PDF store, read when ``pdf_path`` is not a file on this host (see
    :func:`input_items`). ``paper_id``: the id of the crawled paper a downloaded PDF belongs to
    (default: from the PDF's title); ``download``: its ``downloads`` row, passed through to the
    materialize stage. Never raises for a bad PDF: an unreadable, unfetchable or unparseable file is
    quarantined with its reason.
    """
    start = time.perf_counter()
    name = str(pdf_path) if is_url(pdf_path) else str(Path(pdf_path))  # what metadata.pdf_path records
    try:
        path = local_input(name, settings, source)
        sha = sha256_file(path)
    except (OSError, StorageError) as exc:
        reason = f"unreadable: {exc.strerror or exc}" if isinstance(exc, OSError) else f"unreadable: {exc}"
        sha = hashlib.sha256(name.encode()).hexdigest()
        qf = stage_quarantine(settings, name, sha, reason)
        return ParseResult(pdf_path=name, pdf_sha256=sha, status="quarantined", quarantine_file=str(qf),
                           reason=reason, seconds=time.perf_counter() - start)
    staged = parsed_dir(settings, sha)
    manifest = staged_manifest(settings, staged)
    if (manifest and manifest.get("parser_version") == parser_version(settings)
            and paper_id in (None, manifest["paper_id"])):
        store_pdf(settings, path, sha)  # the bytes readers use; a no-op when stored already
        return ParseResult(pdf_path=name, pdf_sha256=sha, status="reused", paper_id=manifest["paper_id"],
                           title=manifest.get("title"), num_pages=manifest["counts"]["pages"],
                           staged_dir=str(staged), download=download, seconds=time.perf_counter() - start)
    timings: dict[str, float] = {}
    try:
        paper = parse_module.parse_pdf(path, settings, paper_id=paper_id, timings=timings)
    except UnparseablePDF as exc:
        qf = stage_quarantine(settings, name, sha, exc.reason)
        return ParseResult(pdf_path=name, pdf_sha256=sha, status="quarantined", quarantine_file=str(qf),
                           reason=exc.reason, seconds=time.perf_counter() - start)
    md = paper.metadata
    md.pdf_path = store_pdf(settings, path, sha)  # the store key, never a host's path (neusym.store.pdfs)
    md.airqa_paper_id = airqa_paper_id(md.title, md.conference_abbreviation, md.pub_year)
    staged = stage_parsed(paper, settings, parser_version(settings), source_path=name)
    drop_quarantine(settings, sha)
    return ParseResult(pdf_path=name, pdf_sha256=sha, status="parsed", paper_id=paper.paper_id,
                       title=paper.metadata.title, num_pages=len(paper.pages), staged_dir=str(staged),
                       download=download, seconds=time.perf_counter() - start,
                       parts={k: round(v, 3) for k, v in timings.items() if not k.startswith("pages_")})


# ----------------------------------------------------------------------------------- encode
def encode_stage(parsed: ParseResult | dict, settings: Settings) -> EncodeResult:
    """Encode every encodable cell of one staged paper (staged as ``staging/vectors/<sha>/cells.parquet``).

    The vectors are :func:`neusym.encode.encode_cells` of the staged rows (BM25 and dense per cell,
    the abstract's span of the paper text pass, page and section means of their chunks). Reuses
    staged vectors made by the same encoder from the same staged parse. The publish stage takes
    vectors from here when they match the cell.
    """
    parsed = ParseResult.model_validate(parsed)
    start = time.perf_counter()
    if parsed.status == "quarantined" or not parsed.staged_dir:
        return EncodeResult(pdf_sha256=parsed.pdf_sha256, status="skipped")
    tag = encoder_version(settings.dense_backend)
    src, src_manifest = staged_parse_source(settings, parsed.pdf_sha256, parsed.staged_dir)
    out = vectors_dir(settings, parsed.pdf_sha256)
    manifest = staged_manifest(settings, out)
    if (manifest and manifest.get("encoder_version") == tag
            and manifest.get("parse_staged_at") == src_manifest.get("staged_at")):
        return EncodeResult(pdf_sha256=parsed.pdf_sha256, paper_id=parsed.paper_id, status="reused",
                            vectors_dir=str(out), points=manifest["points"], seconds=time.perf_counter() - start)
    src_manifest = pull_staged_parse(settings, parsed.pdf_sha256, src, parsed.pdf_path)
    rows = {table: load_parsed_table(src, table) for table in TABLE_RECORDS}
    out, points = stage_vectors(settings, parsed.pdf_sha256, encode_cells(rows, settings=settings),
                                paper_id=parsed.paper_id, encoder_version=tag,
                                parse_staged_at=src_manifest.get("staged_at"))
    return EncodeResult(pdf_sha256=parsed.pdf_sha256, paper_id=parsed.paper_id, status="encoded",
                        vectors_dir=str(out), points=points, seconds=time.perf_counter() - start)


# ------------------------------------------------------------------------------ materialize
def materialize_stage(parsed: list[ParseResult | dict], settings: Settings, *, force: bool = False) -> MaterializeReport:
    """Load this run's staged papers and quarantine records into DuckDB (the single writer).

    Staged parses that would replace a stored paper with a copy that lost content, or add a second
    paper for the same work, are held in quarantine (``report.held``; see :mod:`neusym.ingest.admission`);
    ``force`` loads lower-quality copies anyway; PDFs the crawl downloaded for a known paper (a new
    version, decided by provenance) are not compared with the stored copy."""
    results = [ParseResult.model_validate(p) for p in parsed]
    dirs, qfiles = staged_for_materialize(settings, results)
    downloads = [r.download for r in results if r.download and r.staged_dir]
    new_versions = {r.pdf_sha256 for r in results if r.download and r.paper_id}
    return materialize(settings, dirs, qfiles, downloads, force=force, new_versions=new_versions)


# ----------------------------------------------------------------------------------- ingest
class ParseItem(BaseModel):
    """One PDF to parse: a local file, or a crawled paper's download."""

    pdf_path: str
    paper_id: str | None = None
    download: dict | None = None
    source: str | None = None
    """The PDF's URL in the shared PDF store (workers on several hosts), read where ``pdf_path`` is not."""


def unique_files(pdfs: list[str]) -> tuple[list[str], list[dict], dict[str, str]]:
    """Drop input files whose bytes equal an earlier one's (same sha256): ``(kept, same, sha256)``
    where ``same`` lists ``{"pdf_path", "same_as"}`` and ``sha256`` maps each kept local path to
    its digest. ``pdfs`` in order (the first path of a file is kept). URLs and unreadable paths are
    kept as they are (the parse stage reports them)."""
    kept: list[str] = []
    digests: dict[str, str] = {}
    same: list[dict] = []
    first: dict[str, str] = {}
    for p in pdfs:
        if is_url(p):
            kept.append(p)
            continue
        try:
            sha = sha256_file(Path(p))
        except OSError:
            kept.append(p)
            continue
        if sha in first:
            same.append({"pdf_path": str(p), "same_as": first[sha]})
        else:
            first[sha] = str(p)
            digests[str(p)] = sha
            kept.append(p)
    return kept, same, digests


def input_items(pdfs: list[str], settings: Settings) -> list[dict]:
    """Parse items (:class:`ParseItem` dicts) of found PDFs. With a shared storage each PDF is also
    put in the content-addressed PDF store (``pdfs/sha256/<sha256>.pdf``, uploaded only when not
    there yet) and its URL given as ``source``, so a parse task on a host that cannot see
    ``pdf_path`` reads it from there. URLs are passed through (every host can fetch them). A file
    with the same bytes as an earlier one is parsed once (:func:`unique_files`).
    Raises :class:`neusym.store.storage.StorageError` when the storage cannot be written."""
    items = []
    pdfs, _, digests = unique_files(pdfs)
    for p in pdfs:
        item = ParseItem(pdf_path=str(p))
        if not is_url(p) and str(p) in digests:
            item.source = share_pdf(settings, Path(p), digests[str(p)])
        items.append(item.model_dump())
    return items


def parse_items(local_pdfs: list[str | dict], downloads: list[dict]) -> list[dict]:
    """The parse work list of a run: local PDFs (paths, or :func:`input_items` dicts) plus successful
    downloads (as :class:`ParseItem` dicts)."""
    from neusym.ingest.crawl import DownloadResult, download_row

    items = [ParseItem.model_validate(p if isinstance(p, dict) else {"pdf_path": p}).model_dump() for p in local_pdfs]
    for d in downloads:
        d = DownloadResult.model_validate(d)
        row = download_row(d)
        if row:
            items.append(ParseItem(pdf_path=d.pdf_path, paper_id=d.paper_id, download=row).model_dump())
    return items


def _parse_item(item: dict, settings: Settings) -> ParseResult:
    return parse_stage(item["pdf_path"], settings, paper_id=item["paper_id"], download=item["download"],
                       source=item.get("source"))


def parse_worker_count(settings: Settings, items: int) -> int:
    """Parse worker processes for ``items`` PDFs: ``settings.parse_workers``, or one per usable core
    (at most 4) when it is 0; never more than the PDFs."""
    return max(1, min(settings.parse_workers or min(usable_cores(), 4), items))


def _init_parse_worker() -> None:
    import os

    from neusym.ingest.parse.layout import single_threaded_models
    from neusym.telemetry import ENV, configure

    if os.environ.get(ENV):  # the parent's --verbose / NEUSYM_LOG_LEVEL (spawned workers start unconfigured)
        configure()

    single_threaded_models()


def _page_count(path: str) -> int:
    """Pages of a PDF for scheduling (0 when it cannot be opened: its parse reports why)."""
    import pymupdf

    try:
        with pymupdf.open(path) as doc:
            return doc.page_count
    except Exception:  # noqa: BLE001 - any unreadable PDF only loses its place in the queue; its parse says why
        return 0


def parse_and_encode(items: list[dict], settings: Settings,
                     on_event: Callable[[str, BaseModel], None] | None = None) -> tuple[list[ParseResult], list[EncodeResult]]:
    """Parse and encode ``items`` (:func:`parse_items`), overlapping the two on the machine's cores.

    With several PDFs the parses run in :func:`parse_worker_count` worker processes (each runs the
    layout models on one thread: :func:`neusym.ingest.parse.layout.single_threaded_models`), longest PDF
    first so no long parse is left for the end, while this process encodes each parse as soon as it
    finishes. A single PDF is parsed and encoded here. Returns (parse results, encode results), both
    in the order of ``items``; ``on_event`` sees them in the order they finish.
    """
    parsed: list[ParseResult | None] = [None] * len(items)
    encoded: list[EncodeResult | None] = [None] * len(items)

    def done(i: int, r: ParseResult) -> None:
        parsed[i] = r
        if on_event:
            on_event("parse", r)
        e = encode_stage(r, settings)
        encoded[i] = e
        if on_event:
            on_event("encode", e)

    if len(items) <= 1:
        for i, item in enumerate(items):
            done(i, _parse_item(item, settings))
        return parsed, encoded  # type: ignore[return-value]
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    pages = [_page_count(item["pdf_path"]) for item in items]
    order = sorted(range(len(items)), key=lambda i: -pages[i])
    rank = {i: r for r, i in enumerate(order)}  # submission rank of each item
    with ProcessPoolExecutor(max_workers=parse_worker_count(settings, len(items)),
                             mp_context=multiprocessing.get_context("spawn"), initializer=_init_parse_worker) as pool:
        pending = {pool.submit(_parse_item, items[i], settings): i for i in order}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=lambda f: rank[pending[f]]):
                done(pending.pop(fut), fut.result())
    return parsed, encoded  # type: ignore[return-value]


def ingest(
    paths: Iterable[str | Path],
    settings: Settings,
    on_event: Callable[[str, BaseModel], None] | None = None,
    *,
    crawl_specs: list[dict] | None = None,
    download: bool | None = None,
    force: bool = False,
) -> IngestReport:
    """Run every stage in this process (what ``neusym ingest`` / ``neusym crawl`` do).

    ``paths``: local PDF files/folders; ``crawl_specs``: sources to crawl first (see
    :class:`neusym.ingest.crawl.CrawlSpec`), whose new PDFs are downloaded (unless ``download`` is False)
    and parsed with the local ones. Ends by publishing a new corpus version (DuckDB snapshot, cell
    collection and paper index; :func:`neusym.ingest.publish.publish`). Produces the same corpus as a
    ``corpus_refresh`` DAG run over the same inputs. ``on_event(stage, result)`` sees ``"crawl"``,
    ``"plan"`` (:class:`IngestPlan`), ``"download"``, ``"parse"`` and ``"encode"`` results as they come.
    """
    from neusym.ingest.crawl import crawl_stage, download_stage, load_crawl_stage

    timings: dict[str, float] = {}
    t = time.perf_counter()
    paths = list(paths)
    refused: list[dict] = []
    pdfs, same_files, _ = unique_files(discover_pdfs(paths, exclude=[store_dir(settings)], refused=refused))
    if paths and not pdfs and not crawl_specs:
        where = ", ".join(str(p) for p in paths)
        why = "; ".join(f"{r['pdf_path']}: {r['reason']}" for r in refused[:3])
        raise NoInputError(f"no PDF files found in {where} (folders are searched recursively for *.pdf)"
                           + (f"; refused: {why}" if why else ""))
    downloads: list[dict] = []
    crawled: list = []
    load_seconds = None
    if crawl_specs:
        crawled = [crawl_stage(spec, settings) for spec in crawl_specs]
        for c in crawled:
            if on_event:
                on_event("crawl", c)
        loaded = load_crawl_stage(crawled, settings, download=download)
        load_seconds = loaded.seconds
        timings["crawl"] = time.perf_counter() - t
        t = time.perf_counter()
        if on_event:
            on_event("plan", IngestPlan(pdfs=len(pdfs) + len(loaded.downloads), downloads=len(loaded.downloads)))
        for job in loaded.downloads:
            d = download_stage(job, settings)
            downloads.append(d.model_dump())
            if on_event:
                on_event("download", d)
        timings["download"] = time.perf_counter() - t
        t = time.perf_counter()
    items = parse_items(pdfs, downloads)
    if on_event:
        on_event("plan", IngestPlan(pdfs=len(items), downloads=len(downloads)))
    parsed, encoded = parse_and_encode(items, settings, on_event)
    timings["parse+encode"] = time.perf_counter() - t
    t = time.perf_counter()
    mat = materialize_stage(parsed, settings, force=force)
    timings["materialize"] = time.perf_counter() - t
    t = time.perf_counter()
    stages = run_stages(crawled=crawled, load_seconds=load_seconds, downloads=downloads, parsed=parsed,
                        encoded=encoded, materialized=mat.seconds)
    pub = publish(settings, stages=stages)
    timings["publish"] = time.perf_counter() - t
    item_seconds = {k: pub.stages.get(k, 0.0) for k in ("parse", "encode")}
    return IngestReport(parsed=parsed, encoded=encoded, row_counts=mat.row_counts, publish=pub,
                        pages=sum(r.num_pages for r in parsed), seconds=timings, item_seconds=item_seconds,
                        stages=pub.stages,
                        crawled=crawled, downloads=downloads, held=mat.held, same_files=same_files, refused=refused)
