"""retriever_refresh — adapt the paper-search encoder to the corpus it serves (weekly, or on demand).

One task, on the writer queue (it publishes): :func:`neusym.ingest.retriever.refresh_retriever`
fine-tunes all-MiniLM-L6-v2 on pairs the current corpus version provides (title -> abstract, an
abstract sentence -> the rest of its paper, tldr -> abstract), within
``NEUSYM_RETRIEVER_TRAIN_MINUTES``, checks it on held-out papers against the serving encoder, and
publishes a corpus version whose paper index is re-encoded with it only when it is at least as good.
Readers switch atomically, as after any publish, and later publishes (corpus_refresh, corpus_enrich)
keep the encoder. The same as ``neusym train-retriever``; ``neusym train-retriever --reset`` goes back.

Trigger by hand with a budget: ``airflow dags trigger retriever_refresh -c '{"minutes": 10}'``.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Asset, Param, dag, get_current_context, task

from neusym.assets import CORPUS_ASSET_URI
from neusym.settings import Settings

CORPUS_ASSET = Asset(CORPUS_ASSET_URI)
_settings = Settings()


@dag(
    dag_id="retriever_refresh",
    schedule="@weekly",
    default_args={"retries": 0},
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=3),
    tags=["neusym"],
    params={"minutes": Param(None, type=["null", "number"], minimum=0.1,
                             description="training budget in minutes; empty = NEUSYM_RETRIEVER_TRAIN_MINUTES")},
    doc_md=__doc__,
)
def retriever_refresh():
    @task(queue=_settings.writer_queue, outlets=[CORPUS_ASSET])
    def train_and_publish() -> dict:
        from neusym.ingest.retriever import refresh_retriever

        minutes = get_current_context()["params"].get("minutes")
        return refresh_retriever(Settings(), budget_minutes=float(minutes) if minutes else None).model_dump(mode="json")

    train_and_publish()


retriever_refresh()
