"""Stage functions of the corpus refresh, shared by the Airflow DAG and the ``neusym`` CLI.

    discover_pdfs ─► parse_stage (one per PDF, parallel) ─► encode_stage (one per PDF, parallel)
                          │                                        │
                          └──► materialize_stage (single DuckDB writer)
                                                                   └──► publish_stage (single Qdrant writer)

Parallel stages only read their PDF and write per-PDF staging files (:mod:`neusym.staging`); the
two single writers load them. Stage inputs/outputs are small JSON-serialisable models (they travel
through Airflow XCom). Every stage is idempotent: an unchanged PDF is not parsed, encoded or
re-published again, and re-loading it writes identical rows.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from . import parse as parse_module
from .encode import (
    BM25_COLLECTION,
    DENSE_COLLECTION,
    ENCODER_VERSION,
    bm25_document_vector,
    dense_vectors,
    encodable_cells,
)
from .enrich import ENRICHED_COLUMN_NAMES
from .errors import UnparseablePDF
from .ids import airqa_paper_id
from .materialize import MaterializeReport, materialize, select_staged
from .records import TABLE_RECORDS
from .settings import Settings
from .staging import (
    load_parsed_table,
    parsed_dir,
    quarantine_path,
    read_manifest,
    replace_dir_atomic,
    stage_parsed,
    stage_quarantine,
    vectors_dir,
    write_json_atomic,
)
from .vectorstore import VectorStore, batches_from_rows


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


class EncodeResult(BaseModel):
    """Outcome of encoding one parsed PDF into staged vectors."""

    pdf_sha256: str
    paper_id: str | None = None
    status: Literal["encoded", "reused", "skipped"]
    vectors_dir: str | None = None
    points: dict[str, int] = Field(default_factory=dict)
    seconds: float = 0.0


class PublishReport(BaseModel):
    """What publishing to the vector store did, per collection, and the resulting point counts."""

    papers_published: int = 0
    papers_unchanged: int = 0
    upserted: dict[str, int] = Field(default_factory=dict)
    deleted: dict[str, int] = Field(default_factory=dict)
    point_counts: dict[str, int] = Field(default_factory=dict)


class IngestReport(BaseModel):
    """Summary of one ``ingest`` run (CLI) — the same stages as one DAG run."""

    parsed: list[ParseResult]
    encoded: list[EncodeResult]
    row_counts: dict[str, int]
    publish: PublishReport
    pages: int
    seconds: dict[str, float]
    crawled: list = Field(default_factory=list)
    downloads: list[dict] = Field(default_factory=list)


# --------------------------------------------------------------------------------- discover
def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def discover_pdfs(paths: Iterable[str | Path]) -> list[str]:
    """PDF files named by ``paths`` (files, or folders searched recursively for ``*.pdf``), sorted, unique.

    Raises FileNotFoundError naming a path that does not exist.
    """
    found: set[Path] = set()
    for p in map(Path, paths):
        if p.is_dir():
            found.update(q.resolve() for q in p.rglob("*") if q.is_file() and q.suffix.lower() == ".pdf")
        elif p.is_file():
            found.add(p.resolve())
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    return [str(p) for p in sorted(found)]


# ------------------------------------------------------------------------------------ parse
def parse_stage(
    pdf_path: str | Path, settings: Settings, *, paper_id: str | None = None, download: dict | None = None
) -> ParseResult:
    """Parse one PDF into staging (or reuse an up-to-date staged parse, or quarantine it).

    ``paper_id``: the id of the crawled paper a downloaded PDF belongs to (default: from the PDF's
    title); ``download``: its ``downloads`` row, passed through to the materialize stage.
    Never raises for a bad PDF: an unreadable or unparseable file is quarantined with its reason.
    """
    start = time.perf_counter()
    path = Path(pdf_path)
    try:
        sha = sha256_file(path)
    except OSError as exc:
        sha = hashlib.sha256(str(path).encode()).hexdigest()
        qf = stage_quarantine(settings, path, sha, f"unreadable: {exc.strerror or exc}")
        return ParseResult(pdf_path=str(path), pdf_sha256=sha, status="quarantined", quarantine_file=str(qf),
                           reason=f"unreadable: {exc.strerror or exc}", seconds=time.perf_counter() - start)
    staged = parsed_dir(settings, sha)
    manifest = read_manifest(staged)
    if (manifest and manifest.get("parser_version") == parser_version(settings)
            and manifest.get("pdf_path") == str(path) and paper_id in (None, manifest["paper_id"])):
        return ParseResult(pdf_path=str(path), pdf_sha256=sha, status="reused", paper_id=manifest["paper_id"],
                           title=manifest.get("title"), num_pages=manifest["counts"]["pages"],
                           staged_dir=str(staged), download=download, seconds=time.perf_counter() - start)
    try:
        paper = parse_module.parse_pdf(path, settings, paper_id=paper_id)
    except UnparseablePDF as exc:
        qf = stage_quarantine(settings, path, sha, exc.reason)
        return ParseResult(pdf_path=str(path), pdf_sha256=sha, status="quarantined", quarantine_file=str(qf),
                           reason=exc.reason, seconds=time.perf_counter() - start)
    md = paper.metadata
    md.airqa_paper_id = airqa_paper_id(md.title, md.conference_abbreviation, md.pub_year)
    staged = stage_parsed(paper, settings, parser_version(settings))
    quarantine_path(settings, sha).unlink(missing_ok=True)
    return ParseResult(pdf_path=str(path), pdf_sha256=sha, status="parsed", paper_id=paper.paper_id,
                       title=paper.metadata.title, num_pages=len(paper.pages), staged_dir=str(staged),
                       download=download, seconds=time.perf_counter() - start)


# ----------------------------------------------------------------------------------- encode
_VECTOR_FIELDS = [
    ("point_id", pa.string()), ("text", pa.string()), ("table_name", pa.string()), ("column_name", pa.string()),
    ("primary_key", pa.string()), ("paper_id", pa.string()), ("page_number", pa.int64()),
    ("pdf_sha256", pa.string()), ("encoder_version", pa.string()),
]


def encode_stage(parsed: ParseResult | dict, settings: Settings) -> EncodeResult:
    """Encode every encodable cell of one staged paper into both collections' vectors (staged as Parquet).

    Reuses staged vectors made by the same encoder version from the same staged parse.
    """
    parsed = ParseResult.model_validate(parsed)
    start = time.perf_counter()
    if parsed.status == "quarantined" or not parsed.staged_dir:
        return EncodeResult(pdf_sha256=parsed.pdf_sha256, status="skipped")
    src = Path(parsed.staged_dir)
    src_manifest = read_manifest(src) or {}
    out = vectors_dir(settings, parsed.pdf_sha256)
    manifest = read_manifest(out)
    if (manifest and manifest.get("encoder_version") == ENCODER_VERSION
            and manifest.get("parse_staged_at") == src_manifest.get("staged_at")):
        return EncodeResult(pdf_sha256=parsed.pdf_sha256, paper_id=parsed.paper_id, status="reused",
                            vectors_dir=str(out), points=manifest["points"], seconds=time.perf_counter() - start)
    rows = {table: load_parsed_table(src, table) for table in TABLE_RECORDS}
    cells = encodable_cells(rows)
    base = [
        {"point_id": c.point_id, "text": c.text, "table_name": c.table_name, "column_name": c.column_name,
         "primary_key": c.primary_key, "paper_id": c.paper_id, "page_number": c.page_number,
         "pdf_sha256": parsed.pdf_sha256, "encoder_version": ENCODER_VERSION}
        for c in cells
    ]
    sparse = [bm25_document_vector(c.text, k1=settings.bm25_k1, b=settings.bm25_b,
                                   avg_len=settings.bm25_avg_doc_tokens) for c in cells]
    dense = dense_vectors([c.text for c in cells], batch_size=settings.dense_batch_size)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{parsed.pdf_sha256}."))
    bm25_rows = [dict(b, indices=i, values=v) for b, (i, v) in zip(base, sparse) if i]
    pq.write_table(pa.Table.from_pylist(bm25_rows, schema=pa.schema(
        _VECTOR_FIELDS + [("indices", pa.list_(pa.uint32())), ("values", pa.list_(pa.float32()))])),
        tmp / f"{BM25_COLLECTION}.parquet")
    dense_rows = [dict(b, dense=v) for b, v in zip(base, dense)]
    pq.write_table(pa.Table.from_pylist(dense_rows, schema=pa.schema(
        _VECTOR_FIELDS + [("dense", pa.list_(pa.float32()))])), tmp / f"{DENSE_COLLECTION}.parquet")
    points = {BM25_COLLECTION: len(bm25_rows), DENSE_COLLECTION: len(dense_rows)}
    write_json_atomic(tmp / "manifest.json", {
        "paper_id": parsed.paper_id, "pdf_sha256": parsed.pdf_sha256, "encoder_version": ENCODER_VERSION,
        "parse_staged_at": src_manifest.get("staged_at"), "points": points,
    })
    replace_dir_atomic(tmp, out)
    return EncodeResult(pdf_sha256=parsed.pdf_sha256, paper_id=parsed.paper_id, status="encoded",
                        vectors_dir=str(out), points=points, seconds=time.perf_counter() - start)


# ------------------------------------------------------------------------------ materialize
def materialize_stage(parsed: list[ParseResult | dict], settings: Settings) -> MaterializeReport:
    """Load this run's staged papers and quarantine records into DuckDB (the single writer)."""
    results = [ParseResult.model_validate(p) for p in parsed]
    dirs = [Path(r.staged_dir) for r in results if r.staged_dir]
    qfiles = [Path(r.quarantine_file) for r in results if r.quarantine_file and Path(r.quarantine_file).exists()]
    downloads = [r.download for r in results if r.download and r.staged_dir]
    return materialize(settings, dirs, qfiles, downloads)


# ---------------------------------------------------------------------------------- publish
def publish_stage(encoded: list[EncodeResult | dict], settings: Settings) -> PublishReport:
    """Make the vector store hold exactly the staged points of this run's papers (the single writer).

    A paper whose points already carry the same PDF sha256 and encoder version, with the same ids,
    is left alone. Points of the enriched columns (summaries, tldr, OCR text) belong to
    :mod:`neusym.enrich` and are not touched here. When several PDFs share a paper_id, the most recently staged parse wins (as in
    :func:`neusym.materialize.select_staged`).
    """
    results = [EncodeResult.model_validate(e) for e in encoded]
    results = [r for r in results if r.status != "skipped" and r.vectors_dir]
    chosen = {read_manifest(d)["pdf_sha256"] for d in select_staged([parsed_dir(settings, r.pdf_sha256) for r in results])}
    collections = (BM25_COLLECTION, DENSE_COLLECTION)
    report = PublishReport(upserted=dict.fromkeys(collections, 0), deleted=dict.fromkeys(collections, 0))
    with VectorStore(settings) as store:
        store.ensure_collections()
        for r in results:
            if r.pdf_sha256 not in chosen:
                continue
            changed = False
            for collection in collections:
                rows = pq.read_table(Path(r.vectors_dir) / f"{collection}.parquet").to_pylist()
                ids, versions = store.paper_state(collection, r.paper_id, ENRICHED_COLUMN_NAMES)
                if ids == {x["point_id"] for x in rows} and versions <= {(r.pdf_sha256, ENCODER_VERSION)}:
                    continue
                changed = True
                res = store.replace_paper_points(batches_from_rows(rows, collection), r.paper_id,
                                                 ENRICHED_COLUMN_NAMES)
                report.upserted[collection] += res["upserted"]
                report.deleted[collection] += res["deleted"]
            if changed:
                report.papers_published += 1
            else:
                report.papers_unchanged += 1
        report.point_counts = {c: store.count(c) for c in collections}
    return report


# ----------------------------------------------------------------------------------- ingest
class ParseItem(BaseModel):
    """One PDF to parse: a local file, or a crawled paper's download."""

    pdf_path: str
    paper_id: str | None = None
    download: dict | None = None


def parse_items(local_pdfs: list[str], downloads: list[dict]) -> list[dict]:
    """The parse work list of a run: local PDFs plus successful downloads (as :class:`ParseItem` dicts)."""
    from .crawl import DownloadResult, download_row

    items = [ParseItem(pdf_path=p).model_dump() for p in local_pdfs]
    for d in downloads:
        d = DownloadResult.model_validate(d)
        row = download_row(d)
        if row:
            items.append(ParseItem(pdf_path=d.pdf_path, paper_id=d.paper_id, download=row).model_dump())
    return items


def ingest(
    paths: Iterable[str | Path],
    settings: Settings,
    on_event: Callable[[str, BaseModel], None] | None = None,
    *,
    crawl_specs: list[dict] | None = None,
    download: bool | None = None,
) -> IngestReport:
    """Run every stage in this process (what ``neusym ingest`` / ``neusym crawl`` do).

    ``paths``: local PDF files/folders; ``crawl_specs``: sources to crawl first (see
    :class:`neusym.crawl.CrawlSpec`), whose new PDFs are downloaded (unless ``download`` is False)
    and parsed with the local ones. Produces the same database and vector store as a
    ``corpus_refresh`` DAG run over the same inputs.
    """
    from .crawl import crawl_stage, download_stage, load_crawl_stage

    timings: dict[str, float] = {}
    t = time.perf_counter()
    pdfs = discover_pdfs(paths)
    downloads: list[dict] = []
    crawled: list = []
    if crawl_specs:
        crawled = [crawl_stage(spec, settings) for spec in crawl_specs]
        for c in crawled:
            if on_event:
                on_event("crawl", c)
        loaded = load_crawl_stage(crawled, settings, download=download)
        timings["crawl"] = time.perf_counter() - t
        t = time.perf_counter()
        for job in loaded.downloads:
            d = download_stage(job, settings)
            downloads.append(d.model_dump())
            if on_event:
                on_event("download", d)
        timings["download"] = time.perf_counter() - t
        t = time.perf_counter()
    parsed = []
    for item in parse_items(pdfs, downloads):
        r = parse_stage(item["pdf_path"], settings, paper_id=item["paper_id"], download=item["download"])
        parsed.append(r)
        if on_event:
            on_event("parse", r)
    timings["parse"] = time.perf_counter() - t
    t = time.perf_counter()
    encoded = []
    for r in parsed:
        e = encode_stage(r, settings)
        encoded.append(e)
        if on_event:
            on_event("encode", e)
    timings["encode"] = time.perf_counter() - t
    t = time.perf_counter()
    mat = materialize_stage(parsed, settings)
    timings["materialize"] = time.perf_counter() - t
    t = time.perf_counter()
    pub = publish_stage(encoded, settings)
    timings["publish"] = time.perf_counter() - t
    return IngestReport(parsed=parsed, encoded=encoded, row_counts=mat.row_counts, publish=pub,
                        pages=sum(r.num_pages for r in parsed), seconds=timings, crawled=crawled,
                        downloads=downloads)
