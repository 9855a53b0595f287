"""Names of the data assets the pipeline produces (Airflow assets; importable without Airflow).

``CORPUS_ASSET_URI``: updated by ``corpus_refresh.publish`` after a new corpus version (snapshot, vectors
are published; ``corpus_enrich`` is scheduled on it. Kept in a tiny module so DAG files import it
at parse time without loading the pipeline's heavy dependencies.
"""

CORPUS_ASSET_URI = "neusym://corpus"
