"""Metadata sources of the nightly crawl: arXiv, OpenReview (API v2) and the ACL Anthology, each a
:class:`~neusym.ingest.sources.registry.CrawlSource` registered in :mod:`neusym.ingest.sources.registry`.

Each ``fetch_*`` function takes a watermark ``since`` and returns ``(papers, new_watermark)``, the
papers being :class:`SourcePaper` records; :func:`merge_sources` groups records of the same work and
:func:`merged_metadata` gives its ``metadata`` column values. The source modules are imported lazily
by their ``fetch_*`` names so that importing this package does not import ``openreview``.
"""

from __future__ import annotations

from neusym.ingest.sources.base import (
    SourceError,
    SourcePaper,
    Watermark,
    advance_watermark,
    dedup_key,
    dedup_keys,
    id_keys,
    merge_sources,
    merged_metadata,
    provenance_rows,
    title_key,
    watermark_before_skipped,
    watermark_key,
)

__all__ = [
    "SourceError",
    "SourcePaper",
    "Watermark",
    "advance_watermark",
    "dedup_key",
    "dedup_keys",
    "fetch_acl",
    "fetch_arxiv",
    "fetch_openreview",
    "id_keys",
    "merge_sources",
    "merged_metadata",
    "parse_acl_collection",
    "provenance_rows",
    "title_key",
    "watermark_before_skipped",
    "watermark_key",
]


def __getattr__(name: str):
    """Lazy access to the source functions (``neusym.ingest.sources.fetch_arxiv`` etc.)."""
    if name == "fetch_arxiv":
        from neusym.ingest.sources.arxiv_source import fetch_arxiv

        return fetch_arxiv
    if name == "fetch_openreview":
        from neusym.ingest.sources.openreview_source import fetch_openreview

        return fetch_openreview
    if name in ("fetch_acl", "parse_acl_collection"):
        from neusym.ingest.sources import acl_source

        return getattr(acl_source, name)
    raise AttributeError(f"module 'neusym.ingest.sources' has no attribute {name!r}")
