"""corpus_enrich — work that follows each corpus refresh, triggered by data (the ``neusym://corpus`` asset).

``corpus_refresh``'s ``publish_vectors`` task updates the asset after the new snapshot and vectors
are published; Airflow then queues this DAG (no schedule guessing, no sensor). Thin wiring around
:mod:`neusym.enrich` and :mod:`neusym.search`:

    plan_ocr ─► ocr (mapped, capped) ─► apply_ocr ─► plan_summaries ─► summarize (mapped, capped) ─► apply_summaries ─► paper_index

- ``plan_*`` read the published snapshot and pick this run's work within the budget
  (``NEUSYM_ENRICH_BUDGET_TOKENS``, ``NEUSYM_ENRICH_OCR_BUDGET``); the rest waits for the next run.
- ``ocr`` / ``summarize`` run one task per unit (items of one paper), at most
  ``NEUSYM_ENRICH_CONCURRENCY`` at once (``max_active_tis_per_dag``); each result is appended to the
  unit's staging file at once, so a killed task loses nothing it finished. Item failures are
  recorded, never raised.
- ``apply_*`` are the single writers: cache rows into ``enrichments``, fill the columns, publish a
  snapshot, encode the filled cells into the vector store. They run even if some mapped tasks
  failed (``all_done``), loading whatever was finished.
- ``paper_index``: :func:`neusym.search.sync_paper_index` re-encodes the paper search index for
  new/changed papers only (tldr/tags included once they exist).

Nothing here blocks the corpus: the snapshot published by ``corpus_refresh`` stays usable
throughout, and every step is idempotent and incremental.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Asset, dag, task

from neusym.assets import CORPUS_ASSET_URI
from neusym.settings import Settings

CORPUS_ASSET = Asset(CORPUS_ASSET_URI)
_settings = Settings()


@dag(
    dag_id="corpus_enrich",
    schedule=[CORPUS_ASSET],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["neusym"],
    doc_md=__doc__,
)
def corpus_enrich():
    @task
    def plan_ocr() -> list[dict]:
        from neusym.enrich import plan_enrichment

        return [u.model_dump() for u in plan_enrichment(Settings(), "ocr")]

    @task(max_active_tis_per_dag=_settings.enrich_concurrency,
          map_index_template="{{ task.op_kwargs['unit']['unit_id'] }}")
    def ocr(unit: dict) -> dict:
        from neusym.enrich import run_unit

        return run_unit(unit, Settings()).model_dump()

    @task(trigger_rule="all_done")
    def apply_ocr(done: list[dict]) -> dict:
        from neusym.enrich import apply_enrichment

        return apply_enrichment(Settings()).model_dump()

    @task(trigger_rule="all_done")
    def plan_summaries() -> list[dict]:
        from neusym.enrich import plan_enrichment

        return [u.model_dump() for u in plan_enrichment(Settings(), "summaries")]

    @task(max_active_tis_per_dag=_settings.enrich_concurrency,
          map_index_template="{{ task.op_kwargs['unit']['unit_id'] }}")
    def summarize(unit: dict) -> dict:
        from neusym.enrich import run_unit

        return run_unit(unit, Settings()).model_dump()

    @task(trigger_rule="all_done")
    def apply_summaries(done: list[dict]) -> dict:
        from neusym.enrich import apply_enrichment

        return apply_enrichment(Settings()).model_dump()

    @task(trigger_rule="all_done")
    def paper_index() -> dict:
        from neusym.search import sync_paper_index

        return sync_paper_index(Settings()).model_dump(mode="json")

    ocr_applied = apply_ocr(ocr.expand(unit=plan_ocr()))
    summaries = plan_summaries()
    ocr_applied >> summaries
    summaries_applied = apply_summaries(summarize.expand(unit=summaries))
    summaries_applied >> paper_index()


corpus_enrich()
