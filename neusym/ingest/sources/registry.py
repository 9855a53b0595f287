"""The crawl sources, registered in one place: :data:`SOURCES` maps a source name to the object that
implements :class:`CrawlSource` in its module (imported on first use, so that ``openreview`` is
only imported by a crawl that asks for it).

Adding a source: a module under ``neusym/ingest/sources/`` with an options model (the fields a
crawl spec of that source may have) and an object with ``name``, ``options``, ``scope`` and
``fetch`` (see :class:`CrawlSource`); one line in :data:`SOURCES`. The crawl stage
(:mod:`neusym.ingest.crawl`), its watermark, the merge and the DAGs need no change.
"""

from __future__ import annotations

import importlib
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel

from neusym.ingest.sources.base import SourceError, SourcePaper


class CrawlSource(Protocol):
    """One metadata source of the crawl."""

    name: str
    """The ``source`` of a crawl spec and of its :class:`SourcePaper` records."""
    options: type[BaseModel]
    """What a crawl spec of this source may say besides ``source`` (validated when the spec is)."""

    def scope(self, options: Any) -> str:
        """What a crawl with these options covers: the second half of its watermark key."""

    def fetch(self, options: Any, settings: Any, since: datetime | None,
              errors: list[SourceError] | None) -> tuple[list[SourcePaper], datetime | None]:
        """The records newer than ``since`` and the new watermark; connection settings come from
        ``settings``. With ``errors`` a list, bad records are skipped and appended there; without
        it the first bad record raises :class:`SourceError`."""


SOURCES: dict[str, str] = {
    "arxiv": "neusym.ingest.sources.arxiv_source:CRAWL_SOURCE",
    "openreview": "neusym.ingest.sources.openreview_source:CRAWL_SOURCE",
    "acl": "neusym.ingest.sources.acl_source:CRAWL_SOURCE",
}
"""Every crawl source: name -> ``module:attribute`` of its :class:`CrawlSource`."""

_LOADED: dict[str, CrawlSource] = {}


def source_names() -> list[str]:
    """The names of the registered sources."""
    return list(SOURCES)


def get_source(name: str) -> CrawlSource:
    """The source registered as ``name``; raises ValueError naming the registered ones."""
    if name not in SOURCES:
        raise ValueError(f"unknown crawl source {name!r}; known sources: {', '.join(SOURCES)}")
    if name not in _LOADED:
        module, _, attribute = SOURCES[name].partition(":")
        _LOADED[name] = getattr(importlib.import_module(module), attribute)
    return _LOADED[name]


__all__ = ["CrawlSource", "SOURCES", "get_source", "source_names"]
