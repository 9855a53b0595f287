"""corpus_enrich — work that follows each corpus refresh, triggered by data (the ``neusym://corpus`` asset).

``corpus_refresh``'s ``publish_vectors`` task updates the asset after the new snapshot and vectors
are published; Airflow then queues this DAG (no schedule guessing, no sensor). Thin wiring only:

    paper_index  — :func:`neusym.search.sync_paper_index`: re-encodes the paper-level search index
                   for new/changed papers of the published snapshot only, deletes removed ones.

Nothing here blocks the corpus: a failure leaves the published snapshot and vectors as they were,
and the next refresh triggers this DAG again (every step is idempotent and incremental).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Asset, dag, task

from neusym.assets import CORPUS_ASSET_URI

CORPUS_ASSET = Asset(CORPUS_ASSET_URI)


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
    def paper_index() -> dict:
        from neusym.search import sync_paper_index
        from neusym.settings import Settings

        return sync_paper_index(Settings()).model_dump(mode="json")

    paper_index()


corpus_enrich()
