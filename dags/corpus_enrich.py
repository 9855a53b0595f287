"""corpus_enrich — work that follows each corpus refresh, triggered by data (the ``neusym://corpus`` asset).

``corpus_refresh``'s ``publish`` task updates the asset after the new corpus version is published;
Airflow then queues this DAG (no schedule guessing, no sensor). Thin wiring around
:mod:`neusym.ingest.enrich`:

    plan_ocr ─► ocr (mapped, capped) ─► apply_ocr ─► plan_summaries ─► summarize (mapped, capped) ─► apply_summaries

- ``plan_*`` read the published snapshot and pick this run's work within the budget
  (``NEUSYM_ENRICH_BUDGET_TOKENS``, ``NEUSYM_ENRICH_OCR_BUDGET``); the rest waits for the next run.
- ``ocr`` / ``summarize`` run one task per unit (items of one paper), at most
  ``NEUSYM_ENRICH_CONCURRENCY`` at once (``max_active_tis_per_dag``); each result is appended to the
  unit's staging file at once, so a killed task loses nothing it finished. Item failures are
  recorded, never raised.
- ``apply_*`` are the single writers: cache rows into ``enrichments``, fill the columns, and publish
  a new corpus version (the filled cells get their vectors, the paper index its tldr/tags). They run
  even if some mapped tasks failed (``all_done``), loading whatever was finished.

Nothing here blocks the corpus: the version published by ``corpus_refresh`` keeps serving
throughout, and every step is idempotent and incremental.

On a cluster: ``apply_*`` run on the ``writer`` queue (NEUSYM_WRITER_QUEUE, one worker); ``ocr`` and
``summarize`` fan out on the default queue, and every ``summarize`` task takes a slot of the Airflow
pool NEUSYM_LLM_POOL (created by ``make cluster-up`` with NEUSYM_LLM_POOL_SLOTS), which caps
concurrent LLM calls across all runs and DAGs.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pendulum
from airflow.sdk import Asset, dag, task

from neusym.assets import CORPUS_ASSET_URI
from neusym.settings import Settings

log = logging.getLogger(__name__)

CORPUS_ASSET = Asset(CORPUS_ASSET_URI)
_settings = Settings()
WRITER = _settings.writer_queue  # the single-writer tasks: one worker serves this queue


@dag(
    dag_id="corpus_enrich",
    schedule=[CORPUS_ASSET],
    default_args={"retries": _settings.task_retries, "retry_delay": timedelta(seconds=_settings.task_retry_delay_s)},
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["neusym"],
    doc_md=__doc__,
)
def corpus_enrich():
    @task
    def plan_ocr() -> list[dict]:
        from neusym.ingest.enrich import plan_enrichment

        return [u.model_dump() for u in plan_enrichment(Settings(), "ocr")]

    @task(max_active_tis_per_dag=_settings.enrich_concurrency,
          map_index_template="{{ task.op_kwargs['unit']['unit_id'] }}")
    def ocr(unit: dict) -> dict:
        from neusym.ingest.enrich import run_unit

        return run_unit(unit, Settings()).model_dump()

    @task(trigger_rule="all_done", queue=WRITER)
    def apply_ocr(done: list[dict]) -> dict:
        from neusym.ingest.enrich import apply_enrichment
        from neusym.ingest.stages import total_seconds

        seconds = total_seconds(done or [])
        log.info("ocr: %.1f s over %d units", seconds, len(done or []))
        return apply_enrichment(Settings(), stages={"ocr": seconds}).model_dump()

    @task(trigger_rule="all_done")
    def plan_summaries() -> list[dict]:
        from neusym.ingest.enrich import plan_enrichment

        return [u.model_dump() for u in plan_enrichment(Settings(), "summaries")]

    @task(max_active_tis_per_dag=_settings.enrich_concurrency, pool=_settings.llm_pool,
          map_index_template="{{ task.op_kwargs['unit']['unit_id'] }}")
    def summarize(unit: dict) -> dict:
        from neusym.ingest.enrich import run_unit

        return run_unit(unit, Settings()).model_dump()

    @task(trigger_rule="all_done", queue=WRITER)
    def apply_summaries(done: list[dict]) -> dict:
        from neusym.ingest.enrich import apply_enrichment
        from neusym.ingest.stages import total_seconds

        seconds = total_seconds(done or [])
        log.info("summaries: %.1f s over %d units", seconds, len(done or []))
        return apply_enrichment(Settings(), stages={"summaries": seconds}).model_dump()

    ocr_applied = apply_ocr(ocr.expand(unit=plan_ocr()))
    summaries = plan_summaries()
    ocr_applied >> summaries
    apply_summaries(summarize.expand(unit=summaries))


corpus_enrich()
