"""Seconds per stage of a corpus refresh: what a run spent where, recorded in the version it publishes.

One vocabulary for the CLI (``neusym ingest`` / ``crawl`` / ``publish`` / ``enrich``), the DAGs and the
published manifest (``manifest.json`` key ``stages``, shown by ``neusym status`` and ``GET /overview``):

=============  ==========================================================================================
stage          what it times
=============  ==========================================================================================
fetch          crawling the metadata sources (sum over sources: each crawl task's own time)
load_metadata  upserting the crawled records into ``metadata``/``provenance`` (the single writer)
download       downloading new PDFs (sum over PDFs)
parse          parsing PDFs into staged views, table structure included (sum over PDFs)
encode         encoding the staged cells (sum over PDFs)
materialize    loading the staged parses into DuckDB, ``table_cells`` included
table_cells    of which: reading every staged table's grid into ``table_cells``
ocr            OCR of pages without a text layer (``neusym enrich``)
summaries      LLM summaries (``neusym enrich``)
citations      resolving references into ``citation_links`` (before the build)
cells          syncing the cell collection (vectors encoded at publish included)
paper_index    syncing the paper index
publish        the rest of the build: copies, fingerprints, checks, optimize, the atomic switch
watches        evaluating the saved searches against the new version (after the switch; from the watch store)
=============  ==========================================================================================

A stage's parts follow it as ``stage/part``: ``parse/table_structure``, ``parse/pymupdf4llm_tables``, ...
(:attr:`neusym.ingest.pipeline.ParseResult.parts`, summed over PDFs).

Parallel stages (fetch, download, parse, encode, ocr, summaries) add up the time of their items, so
on several cores they can exceed the run's wall time; ``wall`` of a CLI run is its total elapsed time.
All values are seconds (floats, rounded to milliseconds).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

STAGES = ("fetch", "load_metadata", "download", "parse", "encode", "materialize", "table_cells", "ocr", "summaries",
          "citations", "cells", "paper_index", "publish", "watches")
"""Stage names in the order a refresh runs them."""

_PUBLISH_PARTS = ("citations", "cells", "paper_index")


def total_seconds(items: Iterable[Any]) -> float:
    """The ``seconds`` of ``items`` (pydantic models or their dicts; None items skipped) added up: the
    time of a parallel stage, e.g. OCR or summary units (:class:`neusym.ingest.enrich.UnitResult`)."""
    total = 0.0
    for item in items:
        if item is None:
            continue
        value = item.get("seconds") if isinstance(item, Mapping) else getattr(item, "seconds", 0.0)
        total += float(value or 0.0)
    return round(total, 3)


def ordered(stages: Mapping[str, float]) -> dict[str, float]:
    """``stages`` in :data:`STAGES` order, each followed by its ``stage/part`` entries (unknown names
    last, as given), rounded to milliseconds."""
    names: list[str] = []
    for s in STAGES:
        if s in stages:
            names.append(s)
        names += [k for k in stages if k.startswith(s + "/")]
    names += [k for k in stages if k not in names]
    return {s: round(float(stages[s]), 3) for s in names}


def run_stages(*, crawled: Iterable[Any] = (), load_seconds: float | None = None, downloads: Iterable[Any] = (),
               parsed: Iterable[Any] = (), encoded: Iterable[Any] = (),
               materialized: Mapping[str, float] | None = None) -> dict[str, float]:
    """Seconds per stage of the steps before publish, from their results (pydantic models or their
    dicts, each with a ``seconds`` field: :class:`neusym.ingest.crawl.CrawlResult`, ``DownloadResult``,
    :class:`neusym.ingest.pipeline.ParseResult`, ``EncodeResult``); ``materialized``: the
    materialize report's ``seconds`` (``materialize``, ``table_cells``). A stage without items is left out."""
    crawled, downloads, parsed, encoded = list(crawled), list(downloads), list(parsed), list(encoded)
    out: dict[str, float] = {}
    if crawled:
        out["fetch"] = total_seconds(crawled)
    if load_seconds is not None:
        out["load_metadata"] = load_seconds
    if downloads:
        out["download"] = total_seconds(downloads)
    if parsed:
        out["parse"] = total_seconds(parsed)
        parts: dict[str, float] = {}
        for item in parsed:
            got = (item.get("parts") if isinstance(item, Mapping) else getattr(item, "parts", None)) or {}
            for key, value in got.items():
                parts[f"parse/{key}"] = parts.get(f"parse/{key}", 0.0) + float(value)
        out.update(parts)
    if encoded:
        out["encode"] = total_seconds(encoded)
    for key, value in (materialized or {}).items():
        out[key] = value
    return ordered(out)


def publish_stages(seconds: Mapping[str, float], total: float) -> dict[str, float]:
    """The publish step split into ``citations``, ``cells``, ``paper_index`` and ``publish`` (the rest of
    ``total``), from :class:`neusym.ingest.publish.PublishReport` ``seconds``."""
    out = {k: float(seconds.get(k, 0.0)) for k in _PUBLISH_PARTS}
    out["publish"] = max(0.0, total - sum(out.values()))
    return ordered(out)


def recorded(settings: Any, manifest: Mapping[str, Any], number: int) -> dict[str, float]:
    """Seconds per stage of the run that published version ``number``: its manifest's ``stages`` (empty
    for a version published before they were recorded) plus ``watches``, read from the watch store
    (evaluated after the switch; absent while no watch has been evaluated against it)."""
    out = dict(manifest.get("stages") or {})
    import sqlite3

    from neusym.store.watches import WatchStore, store_path

    if store_path(settings).is_file():
        try:
            with WatchStore(settings, readonly=True) as store:
                seconds = store.version_seconds(number)
        except sqlite3.Error:  # a busy or damaged watch store only hides this one figure
            seconds = None
        if seconds is not None:
            out["watches"] = seconds
    return ordered(out)


def is_part(name: str) -> bool:
    """True for a part of another stage (``parse/table_structure``, and ``table_cells`` of ``materialize``)."""
    return "/" in name or name == "table_cells"


def summary_line(stages: Mapping[str, float]) -> str:
    """``parse 12.3 s, encode 4.0 s, ...`` (the stages in run order, without their parts (:func:`is_part`);
    empty string when none)."""
    return ", ".join(f"{k} {v:.1f} s" for k, v in ordered(stages).items() if not is_part(k))


__all__ = ["STAGES", "is_part", "ordered", "publish_stages", "recorded", "run_stages", "summary_line", "total_seconds"]
