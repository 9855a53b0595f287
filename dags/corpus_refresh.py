"""corpus_refresh — the nightly NeuSym corpus refresh (Airflow 3, TaskFlow, ``airflow.sdk``).

Thin wiring only: every task calls a stage function of :mod:`neusym.ingest.pipeline` / :mod:`neusym.ingest.crawl`,
the same functions behind ``neusym ingest`` and ``neusym crawl``, so both produce identical databases.

    crawl (mapped, one task per source) ─► load_metadata (single writer) ─► download (mapped, one per new PDF) ─┐
    discover (local PDFs) ─────────────────────────────────────────────────────────────────────────────────────┴► collect
    collect ─► parse (mapped, one per PDF) ─► encode (mapped, one per PDF)
                  └──► materialize (single DuckDB writer) ──────────────► publish (new corpus version)

Parallel tasks only write per-item staging files under $NEUSYM_HOME/staging (and downloaded PDFs
under $NEUSYM_HOME/pdfs); ``load_metadata``, ``materialize`` and ``publish`` are the only writers
(of corpus.duckdb, and of the next corpus version: DuckDB snapshot + cell vectors + paper index,
switched atomically for readers). A failing source is recorded in ``crawl_state`` and does not block
the others. ``publish`` updates the ``neusym://corpus`` asset, so downstream DAGs
(``corpus_enrich``) are triggered by data, not by time.
Run params: ``paths`` (PDF files/folders or URLs; default NEUSYM_PDF_DIRS) and ``sources`` (crawl
specs; default NEUSYM_CRAWL_SOURCES).

On a cluster (CeleryExecutor, docs/cluster.md): the single writers run on the ``writer`` queue
(NEUSYM_WRITER_QUEUE), which exactly one worker serves; everything else fans out on the default
queue. With NEUSYM_STORAGE_URL the hand-offs (staging, PDFs, versions) go through the shared
storage, so any worker may run any mapped task. Every task is retried (NEUSYM_TASK_RETRIES), so a
lost worker's task runs again elsewhere; all of them are idempotent. An empty NEUSYM_REFRESH_CRON
means: no schedule, runs are triggered (REST API, UI, CLI).
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pendulum
from airflow.sdk import Asset, Param, dag, get_current_context, task

from neusym.assets import CORPUS_ASSET_URI
from neusym.settings import Settings

log = logging.getLogger(__name__)

CORPUS_ASSET = Asset(CORPUS_ASSET_URI)
_settings = Settings()
WRITER = _settings.writer_queue  # the single-writer tasks: one worker serves this queue


@dag(
    dag_id="corpus_refresh",
    schedule=_settings.refresh_cron or None,
    default_args={"retries": _settings.task_retries, "retry_delay": timedelta(seconds=_settings.task_retry_delay_s)},
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["neusym"],
    params={
        "paths": Param([], type="array", description="PDF files or folders; empty = NEUSYM_PDF_DIRS"),
        "sources": Param([], type="array", description="crawl specs; empty = NEUSYM_CRAWL_SOURCES"),
        "force": Param(False, type="boolean", description="let a lower-quality PDF replace the stored copy of its paper"),
    },
    doc_md=__doc__,
)
def corpus_refresh():
    @task
    def discover() -> list[dict]:
        from neusym.ingest.pipeline import discover_pdfs, input_items

        paths = get_current_context()["params"].get("paths")
        if not paths:  # configured inputs; a missing default inbox just means "nothing to do"
            paths = [p for p in Settings().input_paths if p.exists()]
        from neusym.store.pdfs import store_dir

        settings = Settings()
        return input_items(discover_pdfs(paths, exclude=[store_dir(settings)]), settings)

    @task
    def sources() -> list[dict]:
        return list(get_current_context()["params"].get("sources") or Settings().crawl_sources)

    @task(map_index_template="{{ task.op_kwargs['spec']['source'] }}")
    def crawl(spec: dict) -> dict:
        from neusym.ingest.crawl import crawl_stage

        result = crawl_stage(spec, Settings())
        log.info("fetch %s: %.1f s, %d records", result.source, result.seconds, result.papers)
        return result.model_dump(mode="json")

    @task(trigger_rule="all_done", queue=WRITER)
    def load_metadata(crawled: list[dict]) -> list[dict]:
        from neusym.ingest.crawl import load_crawl_stage

        report = load_crawl_stage([c for c in crawled if c], Settings())
        log.info("load_metadata: %.1f s, %d new papers, %d downloads", report.seconds, report.papers_new,
                 len(report.downloads))
        get_current_context()["ti"].xcom_push(key="seconds", value=report.seconds)
        return [j.model_dump() for j in report.downloads]

    @task(map_index_template="{{ task.op_kwargs['job']['download_url'] }}")
    def download(job: dict) -> dict:
        from neusym.ingest.crawl import download_stage

        result = download_stage(job, Settings())
        log.info("download: %.1f s, %s, %d bytes", result.seconds, result.status, result.bytes)
        return result.model_dump(mode="json")

    @task(trigger_rule="none_failed")
    def collect(local: list[dict], downloaded: list[dict]) -> list[dict]:
        from neusym.ingest.pipeline import parse_items

        return parse_items(list(local), list(downloaded or []))

    @task(map_index_template="{{ task.op_kwargs['item']['pdf_path'].split('/')[-1] }}")
    def parse(item: dict) -> dict:
        from neusym.ingest.pipeline import parse_stage

        result = parse_stage(item["pdf_path"], Settings(), paper_id=item.get("paper_id"),
                             download=item.get("download"), source=item.get("source"))
        log.info("parse: %.1f s, %s, %d pages", result.seconds, result.status, result.num_pages)
        return result.model_dump()

    @task
    def encode(parsed: dict) -> dict:
        from neusym.ingest.pipeline import encode_stage

        result = encode_stage(parsed, Settings())
        log.info("encode: %.1f s, %s, %s", result.seconds, result.status, result.points)
        return result.model_dump()

    @task(trigger_rule="none_failed", queue=WRITER)  # also runs when no PDF needed parsing (metadata-only crawl)
    def materialize(parsed: list[dict]) -> dict:
        from neusym.ingest.pipeline import materialize_stage

        force = bool(get_current_context()["params"].get("force"))
        report = materialize_stage(list(parsed or []), Settings(), force=force)
        log.info("materialize: %.1f s (table_cells %.1f s), %d papers loaded", report.seconds["materialize"],
                 report.seconds["table_cells"], report.papers_loaded)
        return {"papers_loaded": report.papers_loaded, "quarantined": report.quarantined,
                "held": report.held, "row_counts": report.row_counts, "seconds": report.seconds}

    @task(outlets=[CORPUS_ASSET], trigger_rule="none_failed", queue=WRITER)
    def publish(encoded: list[dict]) -> dict:
        from neusym.ingest.publish import publish as publish_version
        from neusym.ingest.stages import run_stages, summary_line

        ti = get_current_context()["ti"]

        def pulled(task_id: str, key: str = "return_value") -> list:
            return [x for x in ti.xcom_pull(task_ids=[task_id], key=key) or [] if x is not None]

        materialized = pulled("materialize")
        load_seconds = pulled("load_metadata", key="seconds")
        stages = run_stages(crawled=pulled("crawl"), load_seconds=load_seconds[0] if load_seconds else None,
                            downloads=pulled("download"), parsed=pulled("parse"), encoded=[e for e in encoded if e],
                            materialized=materialized[0].get("seconds") if materialized else None)
        report = publish_version(Settings(), stages=stages)
        log.info("published version %d; stages: %s", report.version, summary_line(report.stages))
        return report.model_dump(mode="json")

    jobs = load_metadata(crawl.expand(spec=sources()))
    items = collect(discover(), download.expand(job=jobs))
    parsed = parse.expand(item=items)
    encoded = encode.expand(parsed=parsed)
    loaded = materialize(parsed)
    published = publish(encoded)
    loaded >> published


corpus_refresh()
