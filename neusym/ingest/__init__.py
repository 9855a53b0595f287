"""Ingest stages (layer 2, above :mod:`neusym.store`): crawl sources, PDF parsing, staging,
admission, materialize, enrichment, publish, and the pipeline that orchestrates them for the
DAGs and the CLI.
"""
