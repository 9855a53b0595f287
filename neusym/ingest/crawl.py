"""Crawl stages: metadata from arXiv / OpenReview / the ACL Anthology, then PDF downloads.

    crawl_stage (one per source, parallel) ─► load_crawl_stage (single DuckDB writer) ─► download_stage (one per PDF)

- ``crawl_stage`` reads the source's watermark (read-only), fetches what is newer, and stages the
  records as JSON under ``$NEUSYM_HOME/staging/crawl/``. A failing source is reported in its result
  (and later in ``crawl_state.last_error``); it does not fail the others.
- Bad records never cost good ones: a record the source client cannot map (an Anthology paper
  without ``<title>``, an arXiv entry without dates, an OpenReview note without title...) is skipped
  and listed in the result (``skipped``, ``skipped_count``) while the rest loads; the crawl stays
  "ok". Its id and reason go to ``crawl_state.last_error`` (``skipped N bad record(s): ...``; the
  schema has no column of its own for them) and the watermark does not pass it (see
  :func:`neusym.ingest.sources.base.watermark_before_skipped`), so the next run fetches it again. A crawl
  whose every record is bad, or that finds nothing at all, fails. A failing file among several
  (ACL) fails the crawl, but the papers of the other files are still loaded (watermark kept).
- ``load_crawl_stage`` merges the records of all sources into papers (one ``paper_id`` per work:
  known provenance ids first, then DOI/arXiv/Anthology/OpenReview ids, then normalized title +
  first author), upserts ``metadata`` and ``provenance`` and advances each successful source's
  watermark in the same transaction, then returns the PDFs not downloaded yet.
- ``download_stage`` fetches one PDF (size/time limits, retries with backoff, resumable with HTTP
  Range) into content-addressed storage ``$NEUSYM_HOME/pdfs/sha256/<sha256>.pdf``.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import duckdb
import pyarrow as pa
import requests
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from neusym.ids import PAPER_NS, airqa_paper_id, normalize_title, paper_id_for
from neusym.settings import Settings
from neusym.ingest.sources.registry import get_source
from neusym.ingest.sources.base import (
    SourceError,
    SourcePaper,
    first_author_surname,
    id_keys,
    merge_sources,
    merged_metadata,
    provenance_rows,
)
from neusym.ingest.staging import write_json_atomic
from neusym.store.db import writer
from neusym.store.pdfs import display_name, pdf_key
from neusym.store.storage import StorageError, storage

class CrawlSpec(BaseModel):
    """One configured crawl: a ``source`` (a name of :data:`neusym.ingest.sources.registry.SOURCES`)
    and what to ask it for, as the source's own options (flat fields beside ``source``, e.g.
    ``{"source": "acl", "paths": [...], "volumes": ["long"]}``), validated by the source's options
    model. Raises ValueError (pydantic's ValidationError) for an unknown source or option."""

    model_config = ConfigDict(extra="allow")

    source: str
    _options: Any = PrivateAttr(default=None)

    @field_validator("source")
    @classmethod
    def _known(cls, value: str) -> str:
        get_source(value)  # raises ValueError naming the registered sources
        return value

    @model_validator(mode="after")
    def _valid_options(self) -> "CrawlSpec":
        self._options = get_source(self.source).options.model_validate(dict(self.model_extra or {}))
        return self

    @property
    def options(self) -> BaseModel:
        """The validated options of the source (e.g. :class:`neusym.ingest.sources.acl_source.AclOptions`)."""
        return self._options

    @property
    def scope(self) -> str:
        """What this crawl covers, the second half of its watermark key."""
        return get_source(self.source).scope(self.options)

    @property
    def watermark_key(self) -> str:
        return f"{self.source}:{self.scope}"


class SkippedRecord(BaseModel):
    """One bad record a crawl skipped: its source id, why, and where it was read (file and line, query...)."""

    id: str
    reason: str
    where: str = ""


#: At most this many skipped records are listed in a :class:`CrawlResult` (``skipped_count`` has the total).
MAX_SKIPPED_LISTED = 200


class CrawlResult(BaseModel):
    """Outcome of one source crawl (small: travels through XCom).

    ``papers``: records staged for loading; ``skipped``: the bad records left out (the first
    :data:`MAX_SKIPPED_LISTED`), ``skipped_count``: how many there were; ``error``: why the crawl
    failed (``status == "failed"``), None when it is "ok" (skipped records alone do not fail it,
    unless no record at all was good).
    """

    source: str
    watermark_key: str
    status: Literal["ok", "failed"]
    papers: int = 0
    staged_file: str | None = None
    watermark: datetime | None = None
    previous_watermark: datetime | None = None
    error: str | None = None
    skipped: list[SkippedRecord] = Field(default_factory=list)
    skipped_count: int = 0
    seconds: float = 0.0

    def skipped_summary(self) -> str | None:
        """``skipped N bad record(s): <id> (<reason>); ...`` (what ``crawl_state.last_error`` gets), None if none."""
        if not self.skipped_count:
            return None
        listed = "; ".join(f"{r.id} ({r.reason})" for r in self.skipped)
        more = self.skipped_count - len(self.skipped)
        return f"skipped {self.skipped_count} bad record(s): {listed}" + (f"; and {more} more" if more > 0 else "")


class DownloadJob(BaseModel):
    paper_id: str
    download_url: str


class LoadCrawlReport(BaseModel):
    """What loading the crawled records changed."""

    papers_new: int = 0
    papers_known: int = 0
    provenance_rows: int = 0
    watermarks_advanced: list[str] = Field(default_factory=list)
    downloads: list[DownloadJob] = Field(default_factory=list)
    seconds: float = 0.0


class DownloadResult(BaseModel):
    """Outcome of one PDF download: the stored file, or the error."""

    paper_id: str
    download_url: str
    status: Literal["downloaded", "stored", "failed"]
    pdf_path: str | None = None
    pdf_sha256: str | None = None
    bytes: int = 0
    fetched_at: datetime | None = None
    error: str | None = None
    seconds: float = 0.0


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def read_watermark(settings: Settings, key: str) -> datetime | None:
    """The watermark of ``key`` (UTC) in the current corpus version, or None when never crawled or
    nothing is published yet (read from the version, so a running writer never blocks a crawl; a
    watermark committed but not yet published only means some records are fetched again, which is
    idempotent)."""
    from neusym.store.db import connect_plain_readonly
    from neusym.store.versions import NoCorpusVersion, current_db

    try:
        con = connect_plain_readonly(current_db(settings))
    except NoCorpusVersion:
        return None
    try:
        exists = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'crawl_state'").fetchone()[0]
        if not exists:
            return None
        row = con.execute("SELECT watermark FROM crawl_state WHERE watermark_key = ?", [key]).fetchone()
    finally:
        con.close()
    if not row or row[0] is None:
        return None
    return row[0].replace(tzinfo=timezone.utc)


def fetch(spec: CrawlSpec, settings: Settings, since: datetime | None,
          errors: list[SourceError] | None = None) -> tuple[list[SourcePaper], datetime | None]:
    """Run the source of ``spec`` (:func:`neusym.ingest.sources.registry.get_source`) with its
    options and the connection settings; raises SourceError.

    ``errors``: if a list, the client skips bad records (and, for ACL, failing files), appending a
    :class:`SourceError` for each (``record_id`` set for a record), and returns the rest; the
    watermark it returns never passes a skipped record. Without it the first bad record raises.
    """
    return get_source(spec.source).fetch(spec.options, settings, since, errors)


def crawl_stage(spec: CrawlSpec | dict, settings: Settings) -> CrawlResult:
    """Fetch one source's new records and stage them as JSON; never raises for a source failure.

    Bad records are skipped and listed in the result (``skipped``); the others are staged and the
    crawl is "ok" with the source's watermark, which stays below the earliest skipped record
    (:func:`neusym.ingest.sources.base.watermark_before_skipped`). The crawl is "failed" (watermark None:
    not advanced; the records read are still staged) when the source fails as a whole, when a file
    of several fails (ACL), or when records were found but every one of them was bad.
    """
    spec = CrawlSpec.model_validate(spec)
    start = time.perf_counter()
    key = spec.watermark_key
    since = read_watermark(settings, key)
    papers: list[SourcePaper]
    errors: list[SourceError] = []
    try:
        papers, watermark = fetch(spec, settings, since, errors)
        status, error = "ok", None
    except SourceError as exc:
        papers, watermark, status, error = list(exc.partial or []), None, "failed", str(exc)
    bad = [e for e in errors if e.record_id is not None]
    failed_parts = [e for e in errors if e.record_id is None]  # whole files (ACL) that could not be read
    if status == "ok" and failed_parts:
        watermark, status, error = None, "failed", "; ".join(str(e) for e in failed_parts)
    if status == "ok" and bad and not papers:
        watermark, status = None, "failed"
        error = f"{spec.source} {spec.scope}: all {len(bad)} record(s) found were bad, nothing loaded"
    skipped = [SkippedRecord(id=e.record_id or "?", reason=e.reason, where=e.record) for e in bad]
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    staged = settings.staging_dir / "crawl" / f"{spec.source}-{digest}.json"
    write_json_atomic(staged, {"watermark_key": key, "status": status, "error": error,
                               "skipped": [r.model_dump() for r in skipped],
                               "papers": [p.model_dump(mode="json") for p in papers]})
    storage(settings).push(staged)  # load_metadata may run on another host (shared storage)
    return CrawlResult(source=spec.source, watermark_key=key, status=status, papers=len(papers),
                       staged_file=str(staged), watermark=watermark, previous_watermark=since, error=error,
                       skipped=skipped[:MAX_SKIPPED_LISTED], skipped_count=len(skipped),
                       seconds=time.perf_counter() - start)


# ------------------------------------------------------------------------------ load (single writer)
def _existing_ids(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, str], dict[str, str]]:
    """(identity key -> paper_id) from provenance, (normalized title -> paper_id) from metadata."""
    by_key: dict[str, str] = {}
    for source, ext, pid, arxiv_id, or_id, anth_id, doi in con.execute(
        "SELECT source, external_id, ref_paper_id::VARCHAR, arxiv_id, openreview_id, anthology_id, doi FROM provenance"
    ).fetchall():
        probe = SourcePaper(source=source, external_id=ext, title="x", arxiv_id=arxiv_id, openreview_id=or_id,
                            anthology_id=anth_id, doi=doi)
        for k in id_keys(probe):
            by_key.setdefault(k, pid)
    by_title = {normalize_title(t): pid for pid, t in
                con.execute("SELECT paper_id::VARCHAR, title FROM metadata").fetchall()}
    return by_key, by_title


_META_COLS = ("title", "abstract", "authors", "conference_full", "conference_abbreviation", "pub_year", "volume",
              "download_url", "bibtex")
_META_ARROW = pa.schema([
    ("paper_id", pa.string()), ("title", pa.string()), ("abstract", pa.string()), ("authors", pa.list_(pa.string())),
    ("conference_full", pa.string()), ("conference_abbreviation", pa.string()), ("pub_year", pa.int32()),
    ("volume", pa.string()), ("download_url", pa.string()), ("bibtex", pa.string()), ("airqa_paper_id", pa.string()),
])
_PROV_ARROW = pa.schema([
    ("source", pa.string()), ("external_id", pa.string()), ("ref_paper_id", pa.string()), ("version", pa.string()),
    ("arxiv_id", pa.string()), ("openreview_id", pa.string()), ("anthology_id", pa.string()), ("doi", pa.string()),
    ("pdf_url", pa.string()), ("updated", pa.timestamp("us")), ("fetched_at", pa.timestamp("us")),
])


def _bulk_upsert(con: duckdb.DuckDBPyConnection) -> None:
    """Upsert the registered Arrow tables ``crawl_metadata`` / ``crawl_provenance`` (one statement each).

    Known papers keep a field when the crawl has no value for it (``coalesce(new, old)``); new papers
    are inserted; provenance rows replace the row with the same (source, external_id).
    """
    sets = ", ".join(f"{c} = coalesce(c.{c}, metadata.{c})" for c in _META_COLS if c != "authors")
    con.execute(f"""
        UPDATE metadata SET {sets},
               authors = CASE WHEN len(c.authors) > 0 THEN c.authors ELSE metadata.authors END,
               airqa_paper_id = c.airqa_paper_id::UUID
        FROM crawl_metadata c WHERE metadata.paper_id = c.paper_id::UUID""")
    cols = ", ".join(_META_COLS)
    con.execute(f"""
        INSERT INTO metadata (paper_id, {cols}, airqa_paper_id)
        SELECT c.paper_id::UUID, {", ".join("c." + x for x in _META_COLS)}, c.airqa_paper_id::UUID
        FROM crawl_metadata c ANTI JOIN metadata m ON m.paper_id = c.paper_id::UUID""")
    con.execute("""
        INSERT OR REPLACE INTO provenance
        SELECT source, external_id, ref_paper_id::UUID, version, arxiv_id, openreview_id, anthology_id, doi,
               pdf_url, updated, fetched_at
        FROM crawl_provenance""")


def load_crawl_stage(results: list[CrawlResult | dict], settings: Settings, *, download: bool | None = None) -> LoadCrawlReport:
    """Upsert the staged crawl records into ``metadata``/``provenance`` and advance watermarks, atomically.

    Returns the download jobs: papers with a PDF URL that was never downloaded (a new arXiv version
    has a new URL, so it is downloaded and re-parsed; unchanged papers give no job).
    Raises duckdb.Error after rolling back when the load fails (watermarks then stay where they were).
    ``seconds`` of the report: the load's wall time.
    """
    start = time.perf_counter()
    results = [CrawlResult.model_validate(r) for r in results]
    download = settings.crawl_download if download is None else download
    papers: list[SourcePaper] = []
    st = storage(settings)
    for r in results:
        staged = Path(r.staged_file) if r.staged_file else None
        if staged is not None and st.shared:  # crawled on another host: this home's copy of its file
            staged = settings.staging_dir / "crawl" / staged.name
            st.refresh_file(staged)
        if staged is not None and staged.exists():
            data = json.loads(staged.read_text(encoding="utf-8"))
            papers += [SourcePaper.model_validate(p) for p in data["papers"]]
    groups = merge_sources(papers)
    report = LoadCrawlReport()
    now = _utcnow().replace(tzinfo=None)
    with writer(settings) as con:
        by_key, by_title = _existing_ids(con)
        existing = {pid for (pid,) in con.execute("SELECT paper_id::VARCHAR FROM metadata").fetchall()}
        downloaded = {u for (u,) in con.execute("SELECT download_url FROM downloads").fetchall()}
        rows: dict[str, dict[str, Any]] = {}  # paper_id -> metadata row of this load
        prov: dict[tuple[str, str], dict[str, Any]] = {}  # (source, external_id) -> provenance row
        claimed: dict[str, str | None] = {}  # paper_id -> first-author surname of the group that took it
        for group in groups:
            meta = merged_metadata(group)
            surname = first_author_surname(meta["authors"])
            pid = next((by_key[k] for p in group for k in id_keys(p) if k in by_key), None)
            pid = pid or by_title.get(normalize_title(meta["title"]))
            if pid and pid in claimed and claimed[pid] != surname:
                pid = None  # same title, different authors: a different work
            if pid is None:
                pid = paper_id_for(meta["title"], "")
                if pid in claimed and claimed[pid] != surname:
                    first = group[0]
                    pid = str(uuid.uuid5(PAPER_NS, f"{first.source}:{first.external_id}"))
            claimed.setdefault(pid, surname)
            by_title.setdefault(normalize_title(meta["title"]), pid)
            row = {c: meta[c] or None for c in _META_COLS}
            row["authors"] = list(meta["authors"] or [])
            row["airqa_paper_id"] = airqa_paper_id(meta["title"], meta["conference_abbreviation"], meta["pub_year"])
            if pid in existing or pid in rows:
                report.papers_known += 1
            else:
                report.papers_new += 1
            if pid in rows:  # a second group resolved to the same paper: its non-empty fields win
                prev = rows[pid]
                row = {c: prev[c] if row[c] is None or (c == "authors" and not row[c]) else row[c] for c in row}
            rows[pid] = {"paper_id": pid, **row}
            for r in provenance_rows(group):
                prov[(r["source"], r["external_id"])] = {
                    **r, "ref_paper_id": pid, "fetched_at": now,
                    "updated": r["updated"].astimezone(timezone.utc).replace(tzinfo=None) if r["updated"] else None,
                }
                report.provenance_rows += 1
            url = meta["download_url"]
            if download and url and url not in downloaded:
                report.downloads.append(DownloadJob(paper_id=pid, download_url=url))
                downloaded.add(url)
        meta_table = pa.Table.from_pylist(list(rows.values()), schema=_META_ARROW)
        prov_table = pa.Table.from_pylist(list(prov.values()), schema=_PROV_ARROW)
        con.register("crawl_metadata", meta_table)
        con.register("crawl_provenance", prov_table)
        con.execute("BEGIN TRANSACTION")
        try:
            _bulk_upsert(con)
            for r in results:
                skipped = r.skipped_summary()
                if r.status == "ok":
                    # skipped records are not an error of the crawl but must stay visible: the schema has
                    # no column for them, so last_error carries "skipped N bad record(s): ..." (NULL if none)
                    con.execute(
                        "INSERT INTO crawl_state VALUES (?, ?, ?, ?, ?) ON CONFLICT (watermark_key) DO UPDATE "
                        "SET watermark = greatest(coalesce(crawl_state.watermark, excluded.watermark), "
                        "coalesce(excluded.watermark, crawl_state.watermark)), "
                        "last_success_at = excluded.last_success_at, last_error = excluded.last_error, "
                        "last_error_at = excluded.last_error_at",
                        [r.watermark_key, r.watermark.astimezone(timezone.utc).replace(tzinfo=None) if r.watermark else None,
                         now, skipped, now if skipped else None],
                    )
                    report.watermarks_advanced.append(r.watermark_key)
                else:
                    con.execute(
                        "INSERT INTO crawl_state VALUES (?, NULL, NULL, ?, ?) ON CONFLICT (watermark_key) DO UPDATE "
                        "SET last_error = excluded.last_error, last_error_at = excluded.last_error_at",
                        [r.watermark_key, "; ".join(x for x in (r.error, skipped) if x), now],
                    )
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    report.seconds = round(time.perf_counter() - start, 3)
    return report


# ------------------------------------------------------------------------------------- download
def _store_path(settings: Settings, sha: str) -> Path:
    return Path(settings.home) / pdf_key(sha)


def download_stage(job: DownloadJob | dict, settings: Settings) -> DownloadResult:
    """Download one PDF into content-addressed storage; never raises (failures are in the result).

    Limits: ``settings.download_max_mb``, ``settings.source_timeout_s`` per request; 429/5xx and
    transport errors are retried ``settings.source_retries`` times with exponential backoff, resuming
    a partial file with an HTTP Range request. The body must start with ``%PDF``. ``seconds`` of the
    result: the download's wall time, retries and backoff included.
    """
    start = time.perf_counter()
    result = _download(DownloadJob.model_validate(job), settings)
    result.seconds = round(time.perf_counter() - start, 3)
    return result


def _download(job: DownloadJob, settings: Settings) -> DownloadResult:
    url = job.download_url
    for prefix, target in settings.pdf_mirrors.items():
        if url.startswith(prefix):
            url = target + url[len(prefix):]
            break
    part_dir = settings.home / "pdfs" / "partial"
    part_dir.mkdir(parents=True, exist_ok=True)
    part = part_dir / (hashlib.sha256(job.download_url.encode()).hexdigest()[:32] + ".part")
    limit = int(settings.download_max_mb * 1024 * 1024)
    error = "no attempt made"
    for attempt in range(settings.source_retries + 1):
        if attempt:
            time.sleep(min(settings.source_backoff_s * 2 ** (attempt - 1), 60))
        have = part.stat().st_size if part.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        try:
            with requests.get(url, headers=headers, stream=True, timeout=settings.source_timeout_s) as resp:
                if resp.status_code in (429,) or resp.status_code >= 500:
                    error = f"HTTP {resp.status_code}"
                    continue
                if resp.status_code >= 400:
                    return DownloadResult(paper_id=job.paper_id, download_url=job.download_url, status="failed",
                                          error=f"HTTP {resp.status_code}")
                mode = "ab" if resp.status_code == 206 and have else "wb"
                size = have if mode == "ab" else 0
                with open(part, mode) as fh:
                    for block in resp.iter_content(1 << 16):
                        size += len(block)
                        if size > limit:
                            part.unlink(missing_ok=True)
                            return DownloadResult(paper_id=job.paper_id, download_url=job.download_url,
                                                  status="failed", error=f"larger than {settings.download_max_mb} MB")
                        fh.write(block)
                expected = resp.headers.get("Content-Length")
                if expected is not None and resp.status_code == 200 and size != int(expected):
                    error = f"truncated body: {size} of {expected} bytes"
                    continue
        except requests.RequestException as exc:
            error = f"{type(exc).__name__}: {exc}"
            continue
        data = part.read_bytes()
        if not data.startswith(b"%PDF"):
            part.unlink(missing_ok=True)
            return DownloadResult(paper_id=job.paper_id, download_url=job.download_url, status="failed",
                                  error="not a PDF (body does not start with %PDF)")
        sha = hashlib.sha256(data).hexdigest()
        final = _store_path(settings, sha)
        st = storage(settings)
        key = st.key_of(final) if st.shared else ""
        status = "stored" if final.exists() or (st.shared and st.exists(key)) else "downloaded"
        final.parent.mkdir(parents=True, exist_ok=True)
        part.replace(final)
        pdf_path = str(final)
        if st.shared:  # the shared PDF store: parse tasks on other hosts read it by URL
            try:
                if status == "downloaded":
                    st.put_file(final, key)
            except StorageError as exc:
                return DownloadResult(paper_id=job.paper_id, download_url=job.download_url, status="failed",
                                      error=str(exc))
            pdf_path = st.url_of(key)
        return DownloadResult(paper_id=job.paper_id, download_url=job.download_url, status=status,
                              pdf_path=pdf_path, pdf_sha256=sha, bytes=len(data), fetched_at=_utcnow())
    return DownloadResult(paper_id=job.paper_id, download_url=job.download_url, status="failed",
                          error=f"gave up after {settings.source_retries + 1} attempts: {error}")


def download_row(result: DownloadResult) -> dict[str, Any] | None:
    """The ``downloads`` table row of a successful download, else None; its ``pdf_path`` is the PDF
    store key (:mod:`neusym.store.pdfs`), where the download is kept."""
    if result.status == "failed" or not result.pdf_path:
        return None
    return {"download_url": result.download_url, "ref_paper_id": result.paper_id, "pdf_sha256": result.pdf_sha256,
            "pdf_path": pdf_key(result.pdf_sha256) if result.pdf_sha256 else display_name(result.pdf_path),
            "bytes": result.bytes,
            "fetched_at": (result.fetched_at or _utcnow()).astimezone(timezone.utc).replace(tzinfo=None).isoformat()}
