"""corpus_refresh — the nightly NeuSym corpus refresh (Airflow 3, TaskFlow, ``airflow.sdk``).

Thin wiring only: every task calls a stage function of :mod:`neusym.pipeline`, the same functions
behind ``neusym ingest``, so both produce identical databases.

    discover ─► parse (mapped, one task per PDF) ─► encode (mapped, one task per PDF)
                   └──────────► materialize (single DuckDB writer) ──► publish_vectors (single Qdrant writer)

Parallel tasks only write per-PDF staging files under $NEUSYM_HOME/staging; ``materialize`` and
``publish_vectors`` are the only writers of corpus.duckdb and the vector store. ``publish_vectors``
updates the ``neusym://corpus`` asset, so downstream DAGs are triggered by data, not by time.
Run params: ``paths`` (list of PDF files/folders; default: settings.input_paths).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Asset, Param, dag, get_current_context, task

from neusym.settings import Settings

CORPUS_ASSET = Asset("neusym://corpus")
_settings = Settings()


@dag(
    dag_id="corpus_refresh",
    schedule=_settings.refresh_cron,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["neusym"],
    params={"paths": Param([], type="array", description="PDF files or folders; empty = NEUSYM_PDF_DIRS")},
    doc_md=__doc__,
)
def corpus_refresh():
    @task
    def discover() -> list[str]:
        from neusym.pipeline import discover_pdfs

        paths = get_current_context()["params"].get("paths")
        if not paths:  # configured inputs; a missing default inbox just means "nothing to do"
            paths = [p for p in Settings().input_paths if p.exists()]
        return discover_pdfs(paths)

    @task(map_index_template="{{ task.op_kwargs['pdf_path'] | replace('/', ' ') | truncate(60) }}")
    def parse(pdf_path: str) -> dict:
        from neusym.pipeline import parse_stage

        return parse_stage(pdf_path, Settings()).model_dump()

    @task
    def encode(parsed: dict) -> dict:
        from neusym.pipeline import encode_stage

        return encode_stage(parsed, Settings()).model_dump()

    @task
    def materialize(parsed: list[dict]) -> dict:
        from neusym.pipeline import materialize_stage

        report = materialize_stage(list(parsed), Settings())
        return {"papers_loaded": report.papers_loaded, "quarantined": report.quarantined,
                "row_counts": report.row_counts}

    @task(outlets=[CORPUS_ASSET])
    def publish_vectors(encoded: list[dict]) -> dict:
        from neusym.pipeline import publish_stage

        return publish_stage(list(encoded), Settings()).model_dump()

    parsed = parse.expand(pdf_path=discover())
    encoded = encode.expand(parsed=parsed)
    loaded = materialize(parsed)
    published = publish_vectors(encoded)
    loaded >> published


corpus_refresh()
