"""corpus_watches — the saved searches evaluated against each new corpus version (the ``neusym://corpus`` asset).

Every publish of ``corpus_refresh`` (and of ``corpus_enrich``) updates the asset; Airflow then queues
this DAG. One task, :func:`neusym.query.watches.run_watches`: every watch not yet evaluated against the
current version records the papers that are new since it last looked (``neusym watch list``, the
feeds at ``GET /feeds/NAME.atom``). Idempotent — a watch already evaluated against the version adds
nothing — and read-only for the corpus: it writes only ``$NEUSYM_HOME/watches.sqlite``, so it never
waits for the corpus writer. On a cluster it runs on the writer queue, whose host keeps that file.
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


@dag(
    dag_id="corpus_watches",
    schedule=[CORPUS_ASSET],
    default_args={"retries": _settings.task_retries, "retry_delay": timedelta(seconds=_settings.task_retry_delay_s)},
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["neusym"],
    doc_md=__doc__,
)
def corpus_watches():
    @task(queue=_settings.writer_queue)
    def evaluate_watches() -> dict:
        from neusym.query.watches import run_watches

        report = run_watches(Settings())
        log.info("watches: %.1f s, %d of %d evaluated against version %d", report.seconds, report.evaluated,
                 report.watches, report.version)
        return report.to_dict()

    evaluate_watches()


corpus_watches()
