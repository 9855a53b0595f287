"""The publish stage: turn the writer's database into the next corpus version (single writer).

Every path that changes the corpus ends here — ``neusym ingest``, ``neusym crawl``, ``neusym
enrich``, ``neusym publish`` and the DAGs' ``publish`` tasks. :func:`publish` builds the new version
with :class:`neusym.store.versions.VersionBuilder`:

0. in the writer's database, resolve new references and newly arrived papers into the in-corpus
   citation graph (``citation_links``, :mod:`neusym.ingest.citations`) and re-create the views;
1. copy and check the writer's database (the version's ``corpus.duckdb``);
2. cell collection: compare each paper's *fingerprint* (hash of all its encodable cells and the
   encoder version, :func:`paper_fingerprints`) with the previous version's; for new and changed
   papers compare their points cell by cell (``text_sha``) and upsert exactly the new or changed
   cells, delete the points of cells and papers that are gone. Vectors come from the paper's staged
   encoding (``staging/vectors/<pdf sha256>/``, made by the parallel encode tasks) when it matches
   the cell text and encoder, otherwise they are encoded here in batches (crawled metadata-only
   papers, enrichment results, older staging); ``pages.page_content`` and
   ``sections.section_content`` get the mean of their chunks' vectors (:data:`neusym.encode.DERIVED_DENSE`);
3. paper index: :func:`neusym.store.paper_index.sync_paper_index` from the new database (new/changed papers only);
4. check that the cell collection holds exactly one point per non-empty encodable cell of the
   database, per (table, column), and the paper index one point per titled paper;
5. commit: the version directory is renamed into place and ``current`` switches atomically.

A failure anywhere leaves the previous version serving and nothing half-written (the build
directory is deleted); re-running publishes the same content. Papers whose fingerprint did not
change cost nothing but the comparison.
"""

from __future__ import annotations

import io
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from neusym.encode import (
    BM25_B,
    BM25_K1,
    DERIVED_DENSE,
    ENCODABLE_COLUMNS,
    PRIMARY_KEYS,
    bm25_document_vector,
    dense_vectors,
    encoder_version,
    mean_vector,
    paper_text_vectors,
    text_sha,
)
from neusym.ids import point_id
from neusym.ingest.citations import CitationReport, update_citation_links
from neusym.ingest.stages import ordered, publish_stages
from neusym.settings import Settings
from neusym.store.cells import CELL_SCHEMA
from neusym.store.db import connect_plain_readonly, writer
from neusym.store.views import create_views
from neusym.store.vectors import Filter, Match, Point, VectorBackend
from neusym.store.versions import PublishError, VersionBuilder, VersionInfo

PAPER_BATCH = 64
MANIFEST_ADDED = 200
"""The manifest lists the ids of at most this many papers a publish added (``changes.added``; the landing page shows them)."""


class PublishReport(BaseModel):
    """What one publish did (small and JSON-ready: travels through Airflow XCom).

    ``version``/``parent``: the new version and the one it replaced; ``papers``: papers in the
    database; ``papers_changed`` / ``papers_removed`` / ``papers_unchanged``: by fingerprint;
    ``points``: cell points in the new version; ``upserted`` / ``deleted``: cell points written
    and removed; ``vectors_staged`` / ``vectors_encoded`` / ``vectors_derived``: where the dense
    vectors of upserted cells came from; ``paper_index``: the paper-index sync report;
    ``paper_encoder``: the version tag of the encoder the paper index was built with (``"4/retriever-<id>"``
    for a corpus-adapted one); ``citations``: what the citation resolution before the build did
    (:class:`neusym.ingest.citations.CitationReport`); ``rows``: rows per table; ``seconds``: wall time per step;
    ``stages``: seconds per stage of the whole run (:mod:`neusym.ingest.stages`: the stages given to
    :func:`publish` plus ``citations``, ``cells``, ``paper_index`` and ``publish``), as the manifest records them (written before the commit,
    so ``publish`` leaves out the final fsync and switch: ``seconds["switch"]``).
    """

    version: int
    parent: int | None = None
    papers: int = 0
    papers_changed: int = 0
    papers_removed: int = 0
    papers_unchanged: int = 0
    points: int = 0
    upserted: int = 0
    deleted: int = 0
    vectors_staged: int = 0
    vectors_encoded: int = 0
    vectors_derived: int = 0
    paper_index: dict = Field(default_factory=dict)
    paper_encoder: str | None = None
    citations: dict = Field(default_factory=dict)
    rows: dict[str, int] = Field(default_factory=dict)
    seconds: dict[str, float] = Field(default_factory=dict)
    stages: dict[str, float] = Field(default_factory=dict)


# ------------------------------------------------------------------------------- cells in SQL
def _cell_select(table: str, column: str, page_field: str | None, where: str = "") -> str:
    paper = "paper_id" if table == "metadata" else "ref_paper_id"
    page = "NULL::INTEGER" if page_field is None else ("page_numbers[1]" if page_field == "page_numbers" else page_field)
    cond = f"{column} IS NOT NULL AND regexp_matches({column}, '\\S')"
    if where:
        cond += f" AND {paper} IN (SELECT paper_id FROM _wanted)"
    return (f"SELECT {paper}::VARCHAR AS paper_id, '{table}' AS table_name, '{column}' AS column_name, "
            f"{PRIMARY_KEYS[table]}::VARCHAR AS primary_key, {page} AS page_number, {column} AS text "
            f"FROM {table} WHERE {cond}")


def cells_sql(restricted: bool = False) -> str:
    """SQL listing every non-empty encodable cell (paper_id, table_name, column_name, primary_key,
    page_number, text); ``restricted``: only papers in the temporary table ``_wanted(paper_id)``.
    A cell is non-empty when its text has a non-whitespace character."""
    return "\nUNION ALL\n".join(_cell_select(t, c, p, "w" if restricted else "")
                                for (t, c), p in ENCODABLE_COLUMNS.items())


def paper_fingerprints(con: Any, version_tag: str) -> dict[str, tuple[str, int]]:
    """``{paper_id: (fingerprint, cells)}`` of every paper with encodable cells: md5 over its cells'
    (table.column, primary key, md5 of text) and the encoder version ``version_tag``."""
    rows = con.execute(
        f"SELECT paper_id, md5('{version_tag}|' || string_agg(table_name || '.' || column_name || ':' || primary_key "
        f"|| ':' || md5(text), '|' ORDER BY table_name, column_name, primary_key)), count(*) "
        f"FROM ({cells_sql()}) GROUP BY paper_id").fetchall()
    return {pid: (fp, n) for pid, fp, n in rows}


def cell_counts(con: Any) -> dict[str, int]:
    """Non-empty encodable cells per ``table.column`` (what the cell collection must hold)."""
    rows = con.execute(f"SELECT table_name || '.' || column_name, count(*) FROM ({cells_sql()}) GROUP BY 1").fetchall()
    return {k: n for k, n in rows}


def _read_fingerprints(info: VersionInfo | None) -> dict[str, str]:
    if info is None:
        return {}
    path = info.path / "fingerprints.parquet"
    if not path.is_file():
        return {}
    t = pq.read_table(path)
    return dict(zip(t.column("paper_id").to_pylist(), t.column("fingerprint").to_pylist()))


def _fingerprint_bytes(fps: dict[str, tuple[str, int]]) -> bytes:
    table = pa.table({"paper_id": list(fps), "fingerprint": [v[0] for v in fps.values()],
                      "cells": [v[1] for v in fps.values()]})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


# ---------------------------------------------------------------------------- staged vectors
def staged_vectors(settings: Settings, pdf_sha256: str | None, version_tag: str) -> dict[str, dict]:
    """Vectors staged by :func:`neusym.ingest.pipeline.encode_stage` for one PDF, by point id:
    ``{point_id: {"text_sha", "dense" (list or None), "indices", "values"}}``; empty when none were
    staged or they were made by another encoder."""
    if not pdf_sha256:
        return {}
    from neusym.ingest.staging import fetch_vectors, vectors_dir
    from neusym.store.storage import storage

    if storage(settings).shared:  # encoded on another host: pull them into this home first
        fetch_vectors(settings, pdf_sha256)
    path = vectors_dir(settings, pdf_sha256) / "cells.parquet"
    if not path.is_file():
        return {}
    t = pq.read_table(path)
    if t.num_rows == 0 or set(t.column("encoder_version").unique().to_pylist()) != {version_tag}:
        return {}
    cols = {name: t.column(name).to_pylist() for name in ("point_id", "text_sha", "dense", "indices", "values")}
    return {pid: {"text_sha": cols["text_sha"][i], "dense": cols["dense"][i], "indices": cols["indices"][i],
                  "values": cols["values"][i]} for i, pid in enumerate(cols["point_id"])}


# -------------------------------------------------------------------------------- cell sync
class _CellSync:
    def __init__(self, settings: Settings, con: Any, backend: VectorBackend, report: PublishReport):
        self.settings = settings
        self.con = con
        self.backend = backend
        self.report = report
        self.tag = encoder_version(settings.dense_backend)

    def remove_papers(self, paper_ids: list[str]) -> None:
        for start in range(0, len(paper_ids), 256):
            batch = paper_ids[start:start + 256]
            ids = [r.id for r in self.backend.scroll(Filter(must=(Match("paper_id", any=tuple(batch)),)), payload=False)]
            self.backend.delete(ids)
            self.report.deleted += len(ids)

    def sync_papers(self, paper_ids: list[str]) -> None:
        self.con.execute("CREATE OR REPLACE TEMP TABLE _wanted (paper_id UUID)")
        self.con.executemany("INSERT INTO _wanted VALUES (?)", [[p] for p in paper_ids])
        rows = self.con.execute(cells_sql(restricted=True)).fetchall()
        chunk_parent = {}
        for cid, page_id, section_id in self.con.execute(
                "SELECT chunk_id::VARCHAR, ref_page_id::VARCHAR, ref_section_id::VARCHAR FROM chunks "
                "WHERE ref_paper_id IN (SELECT paper_id FROM _wanted)").fetchall():
            chunk_parent[cid] = {"ref_page_id": page_id, "ref_section_id": section_id}
        shas = dict(self.con.execute(
            "SELECT paper_id::VARCHAR, pdf_sha256 FROM metadata WHERE paper_id IN (SELECT paper_id FROM _wanted)"
        ).fetchall())
        wanted: dict[str, dict] = {}
        for paper_id, table, column, pk, page, text in rows:
            pid = point_id(table, column, pk)
            wanted[pid] = {"paper_id": paper_id, "table_name": table, "column_name": column, "primary_key": pk,
                           "page_number": page, "text": text, "text_sha": text_sha(text)}
        existing = {r.id: (r.payload.get("text_sha"), r.payload.get("encoder_version"))
                    for r in self.backend.scroll(Filter(must=(Match("paper_id", any=tuple(paper_ids)),)),
                                                 payload=["text_sha", "encoder_version"])}
        stale = [i for i in existing if i not in wanted]
        todo = {i: c for i, c in wanted.items() if existing.get(i) != (c["text_sha"], self.tag)}
        if todo:
            self._upsert(todo, wanted, existing, chunk_parent, shas)
        self.backend.delete(stale)
        self.report.deleted += len(stale)

    def _upsert(self, todo: dict[str, dict], wanted: dict[str, dict], existing: dict, chunk_parent: dict,
                shas: dict[str, str | None]) -> None:
        settings = self.settings
        staged: dict[str, dict] = {}
        for paper_id in {c["paper_id"] for c in todo.values()}:
            staged.update(staged_vectors(settings, shas.get(paper_id), self.tag))
        dense: dict[str, list[float] | None] = {}
        sparse: dict[str, tuple[list[int], list[float]]] = {}
        to_encode: list[str] = []
        abstracts: list[str] = []
        derived_ids = []
        for pid, cell in todo.items():
            s = staged.get(pid)
            derived = (cell["table_name"], cell["column_name"]) in DERIVED_DENSE
            if s is not None and s["text_sha"] == cell["text_sha"] and s["dense"] is not None:
                sparse[pid] = (list(s["indices"] or []), list(s["values"] or []))
                dense[pid] = s["dense"]  # derived cells too: the encode stage averaged the same parse's chunks
                self.report.vectors_staged += 1
                continue
            if derived:
                derived_ids.append(pid)
            sparse[pid] = bm25_document_vector(cell["text"], k1=BM25_K1, b=BM25_B,
                                               avg_len=settings.bm25_avg_doc_tokens)
            if (cell["table_name"], cell["column_name"]) == ("metadata", "abstract"):
                abstracts.append(pid)
            elif not derived:
                to_encode.append(pid)
        if abstracts:  # one pass over "title. abstract. tldr" per paper, shared with the paper index
            fields = {}
            for c in wanted.values():
                if c["table_name"] == "metadata":
                    fields.setdefault(c["paper_id"], {})[c["column_name"]] = c["text"]
            ptvs = paper_text_vectors([(fields[todo[p]["paper_id"]].get("title"), todo[p]["text"],
                                        fields[todo[p]["paper_id"]].get("tldr")) for p in abstracts], settings=settings)
            for pid, ptv in zip(abstracts, ptvs):
                dense[pid] = ptv.abstract
            self.report.vectors_encoded += len(abstracts)
        if to_encode:
            vecs = dense_vectors([todo[p]["text"] for p in to_encode], settings=settings)
            for pid, v in zip(to_encode, vecs):
                dense[pid] = v.tolist()
            self.report.vectors_encoded += len(to_encode)
        if derived_ids:
            self._derive(derived_ids, todo, wanted, existing, chunk_parent, dense)
        points = []
        for pid, cell in todo.items():
            payload = {k: cell[k] for k in ("text", "table_name", "column_name", "primary_key", "paper_id",
                                            "page_number", "text_sha")}
            payload["encoder_version"] = self.tag
            points.append(Point(pid, {"minilm": dense.get(pid), "bm25": sparse.get(pid)}, payload))
        step = settings.qdrant_upsert_batch
        for start in range(0, len(points), step):
            self.backend.upsert(points[start:start + step])
        self.report.upserted += len(points)

    def _derive(self, derived_ids: list[str], todo: dict, wanted: dict, existing: dict, chunk_parent: dict,
                dense: dict) -> None:
        """Mean of the chunk vectors of each derived page/section cell (chunks of this batch)."""
        chunk_vec: dict[str, Any] = {}
        need_from_store = []
        for pid, cell in wanted.items():
            if (cell["table_name"], cell["column_name"]) != ("chunks", "text_content"):
                continue
            if pid in dense and dense[pid] is not None:
                chunk_vec[cell["primary_key"]] = dense[pid]
            elif pid in existing:
                need_from_store.append(pid)
        for start in range(0, len(need_from_store), 512):
            for rec in self.backend.retrieve(need_from_store[start:start + 512], payload=["primary_key"],
                                             vectors=["minilm"]):
                if rec.vectors.get("minilm") is not None:
                    chunk_vec[rec.payload.get("primary_key")] = rec.vectors["minilm"]
        members: dict[tuple[str, str], list] = defaultdict(list)
        for chunk_key, parents in chunk_parent.items():
            vec = chunk_vec.get(chunk_key)
            if vec is None:
                continue
            for field, parent in parents.items():
                if parent:
                    members[(field, parent)].append(vec)
        fallback = []
        for pid in derived_ids:
            cell = todo[pid]
            field = DERIVED_DENSE[(cell["table_name"], cell["column_name"])]
            vec = mean_vector(members.get((field, cell["primary_key"]), []))
            if vec is None:
                fallback.append(pid)  # a page or section without chunks: encode its own text
            else:
                dense[pid] = vec
                self.report.vectors_derived += 1
        if fallback:
            vecs = dense_vectors([todo[p]["text"] for p in fallback], settings=self.settings)
            for pid, v in zip(fallback, vecs):
                dense[pid] = v.tolist()
            self.report.vectors_encoded += len(fallback)


# ------------------------------------------------------------------------------------- publish
def link_citations(settings: Settings, *, wait_s: float | None = None, full: bool = False) -> CitationReport:
    """Resolve the writer database's new references and new papers into ``citation_links`` and (re)create the
    documented views (:mod:`neusym.ingest.citations`), under the writer lock. A home without a corpus
    database yet gets nothing (an empty report). Raises :class:`neusym.store.db.WriterBusyError`,
    :class:`neusym.store.versions.PublishError` (another process holds the database file), duckdb.Error."""
    import duckdb

    if not Path(settings.db_path).is_file():
        return CitationReport()
    try:
        with writer(settings, wait_s=wait_s) as con:
            report = update_citation_links(con, full=full)
            create_views(con)
    except duckdb.IOException as exc:  # another process (not a neusym writer) holds the file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PublishError(f"cannot open {settings.db_path} to link citations before publishing: {first}") from None
    return report


def publish(settings: Settings, *, on_step: Callable[[str, dict], None] | None = None,
            wait_s: float | None = None, retriever: "Path | str" = "keep",
            stages: dict[str, float] | None = None) -> PublishReport:
    """Publish the writer's database as the next corpus version (see the module docstring).

    ``on_step``: called with (step name, details) as the build advances (progress output).
    ``wait_s``: how long to wait for another writer of the home. ``retriever``: the paper encoder
    of the new version — ``"keep"`` (the previous version's: the packaged encoder or its
    corpus-adapted one), ``"base"`` (back to the packaged encoder) or the directory of a
    corpus-adapted encoder (:mod:`neusym.ingest.retriever`); a change re-encodes every paper of the
    paper index (the cell collection never changes encoder). ``stages``: seconds per stage of the
    run that led here (:func:`neusym.ingest.stages.run_stages`), recorded with the publish's own in the
    manifest's ``stages``. Returns a :class:`PublishReport`.
    Raises :class:`neusym.store.versions.PublishError` (nothing to publish, failed checks; the
    previous version keeps serving), :class:`neusym.store.db.WriterBusyError`.
    """
    from neusym.store.paper_index import PAPER_SCHEMA, sync_paper_index

    seconds: dict[str, float] = {}
    started = time.perf_counter()
    citations = link_citations(settings, wait_s=wait_s)
    seconds["citations"] = citations.seconds
    with VersionBuilder(settings, wait_s=wait_s) as build:
        report = PublishReport(version=build.number, parent=build.previous.number if build.previous else None,
                               rows=build.rows, citations=citations.to_dict())
        con = connect_plain_readonly(build.db_path)
        try:
            t = time.perf_counter()
            tag = encoder_version(settings.dense_backend)
            fps = paper_fingerprints(con, tag)
            previous = _read_fingerprints(build.previous)
            changed = sorted(p for p, (fp, _) in fps.items() if previous.get(p) != fp)
            removed = sorted(p for p in previous if p not in fps)
            added = [p for p in changed if p not in previous]
            report.papers = con.execute("SELECT count(*) FROM metadata").fetchone()[0]
            report.papers_changed, report.papers_removed = len(changed), len(removed)
            report.papers_unchanged = len(fps) - len(changed)
            seconds["fingerprints"] = round(time.perf_counter() - t, 3)
            cells = build.open_collection("cells", CELL_SCHEMA)
            if on_step:
                on_step("cells", {"changed": len(changed), "removed": len(removed)})
            t = time.perf_counter()
            sync = _CellSync(settings, con, cells, report)
            sync.remove_papers(removed)
            for start in range(0, len(changed), PAPER_BATCH):
                sync.sync_papers(changed[start:start + PAPER_BATCH])
                if on_step:
                    on_step("cells", {"done": min(start + PAPER_BATCH, len(changed)), "of": len(changed)})
            seconds["cells"] = round(time.perf_counter() - t, 3)
            t = time.perf_counter()
            if changed or removed:
                cells.optimize()
            seconds["optimize"] = round(time.perf_counter() - t, 3)
            expected = cell_counts(con)
        finally:
            con.close()
        _check_cells(cells, expected)
        report.points = sum(expected.values())
        t = time.perf_counter()
        if retriever == "base":
            build.set_retriever(None)
        elif retriever != "keep":
            build.set_retriever(Path(retriever))
        paper_encoder = build.paper_encoder()
        papers = build.open_collection("papers", PAPER_SCHEMA)
        index = sync_paper_index(settings, backend=papers, db_path=build.db_path, body_vectors=_chunk_vectors(cells),
                                 encoder=paper_encoder)
        report.paper_index = index.model_dump(mode="json")
        report.paper_encoder = paper_encoder.version if paper_encoder is not None else tag
        seconds["paper_index"] = round(time.perf_counter() - t, 3)
        if papers.count() != index.papers:
            raise PublishError(f"paper index holds {papers.count()} papers, the database {index.papers}; not published")
        run = dict(stages or {})
        run.update(publish_stages(seconds, time.perf_counter() - started))
        report.stages = ordered(run)
        info = build.commit(
            {"encoder_version": tag, "paper_encoder": report.paper_encoder,
             "points": {"cells": report.points, "papers": index.papers},
             "cells": expected, "papers": report.papers, "timings": seconds,
             "changes": {"papers_changed": len(changed), "papers_removed": len(removed),
                         "papers_added": len(added), "added": added[:MANIFEST_ADDED],
                         "upserted": report.upserted, "deleted": report.deleted},
             "citations": report.citations, "stages": report.stages},
            files={"fingerprints.parquet": _fingerprint_bytes(fps)},
        )
        seconds.update({k: v for k, v in info.manifest["timings"].items() if k not in seconds})
    report.seconds = seconds
    return report


def _chunk_vectors(cells: VectorBackend) -> Callable[[Any], dict[str, list[list[float]]]]:
    """paper ids -> their chunks' dense vectors in reading order (page, then chunk key), from ``cells``."""

    def read(paper_ids: Any) -> dict[str, list[list[float]]]:
        found: dict[str, list[tuple]] = defaultdict(list)
        ids = list(paper_ids)
        for start in range(0, len(ids), 64):
            flt = Filter.all(Match("table_name", "chunks"), Match("column_name", "text_content"),
                             Match("paper_id", any=tuple(ids[start:start + 64])))
            for rec in cells.scroll(flt, payload=["paper_id", "page_number", "primary_key"], vectors=["minilm"]):
                vec = rec.vectors.get("minilm")
                if vec is not None:
                    p = rec.payload
                    found[p["paper_id"]].append((p.get("page_number") or 0, p.get("primary_key"), vec))
        return {pid: [v for *_, v in sorted(items, key=lambda x: (x[0], x[1]))] for pid, items in found.items()}

    return read


def _check_cells(backend: VectorBackend, expected: dict[str, int]) -> None:
    total = backend.count()
    want = sum(expected.values())
    if total != want:
        per = {}
        for key, n in expected.items():
            table, column = key.split(".")
            got = backend.count(Filter.all(Match("table_name", table), Match("column_name", column)))
            if got != n:
                per[key] = (got, n)
        raise PublishError(f"the cell collection holds {total} points for {want} encodable cells "
                           f"(points, cells per column that differ: {per}); not published")


__all__ = ["PublishReport", "cell_counts", "cells_sql", "paper_fingerprints", "publish", "staged_vectors"]

