"""The corpus version a long-lived service reads, and the switch to the next one.

:class:`VersionHolder` keeps one opened :class:`~neusym.store.versions.CorpusVersion` (its paper
index, a read-only DuckDB connection and the schema texts, all prepared once per version: a
:class:`ServedVersion`) and hands it to requests with :meth:`VersionHolder.use`. A refresh never
blocks a request:

- every ``watch_interval_s`` a watcher thread asks the version whether it is still current (a
  ``readlink`` and a small JSON read; with a shared storage, the sync of :mod:`neusym.store.versions`)
  — never a request, so a slow check cannot delay one;
- when it is not, a background thread opens and prepares the new version while requests keep being
  answered from the old one, then swaps it in;
- the old version is closed (its reader lock released, so the next publish may prune it) once the
  last request using it has finished — a streamed ``/ask`` keeps its version until it ends.

Every DuckDB connection of the service is opened with :data:`neusym.store.db.READONLY_CONFIG`
(the configuration :func:`neusym.query.sqlsafe.run_readonly_sql` uses): DuckDB refuses a second
connection to the same file with another configuration in one process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple

from neusym.settings import Settings
from neusym.store.versions import CorpusVersion, NoCorpusVersion, open_version

logger = logging.getLogger(__name__)


class QueryVectorCache:
    """The last ``size`` query vectors by query text (the encoder does not change between versions):
    a facet click or a page reload searches the same text again without encoding it again."""

    def __init__(self, size: int = 2048):
        self.size = size
        self._vectors: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str, settings: Settings) -> list[float]:
        """The unit 384-d all-MiniLM-L6-v2 vector of ``text`` (:func:`neusym.encode.encode_query`)."""
        from neusym.encode import encode_query

        key = (settings.dense_backend, text)
        with self._lock:
            vector = self._vectors.get(key)
            if vector is not None:
                self._vectors.move_to_end(key)
                return vector
        vector = encode_query(text, settings=settings)
        with self._lock:
            self._vectors[key] = vector
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return vector


_QUERY_VECTORS = QueryVectorCache()


@dataclass
class ServedVersion:
    """One opened corpus version with what requests need, prepared before it is served.

    ``version``: the opened version (reader lock held); ``index``: its paper index
    (:class:`neusym.store.paper_index.PaperIndex`); ``con``: a read-only DuckDB connection kept open for the
    version's lifetime (requests use ``con.cursor()``; it also keeps DuckDB's instance cache warm,
    so each ``/sql`` connection opens in well under a millisecond); ``schema``: table/view
    descriptions (:func:`neusym.store.schema_docs.corpus_schema`); ``schema_markdown``: the same as
    Markdown; ``agent_schema``: the agent's [Database Schema] text; ``papers``: rows of
    ``metadata``; ``opened_at``: UNIX time it was opened; ``labels``: venue and year of every paper
    of the index by point id (:func:`pool_labels`), what the search facets count; ``citation_graph``:
    whether the version has the in-corpus citation graph (view ``paper_citations``).
    """

    version: CorpusVersion
    index: Any
    con: Any
    schema: list[dict]
    schema_markdown: str
    agent_schema: str
    papers: int
    opened_at: float
    labels: dict[str, "PoolPaper"] = field(default_factory=dict)
    citation_graph: bool = False
    users: int = 0
    retired: bool = False
    _environment: Any = None
    _environment_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def number(self) -> int:
        """The corpus version number."""
        return self.version.number

    def search(self, query: str, *, with_citations: bool = True, **options: Any) -> tuple[Any, list["PoolPaper"]]:
        """:func:`neusym.query.paper_search.search` on this version — its cached query vector, and with
        ``with_citations`` its database for the hits' ``cited_by`` counts and citation ordering — and
        the venue and year labels of the outcome's pool (from :attr:`labels`: no second scan, no
        read-back, no snippets). ``options``: the search's filters, limit, sort, mode and pool. Raises
        ValueError like the search."""
        from neusym.query.paper_search import search

        vector = self.query_vector(query) if options.get("mode", "default") == "default" else None
        outcome = search(query, index=self.index, cursor=self.cursor if with_citations else None,
                         citation_graph=self.citation_graph, query_vector=vector, version=self.number, **options)
        labels = self.labels
        return outcome, [labels.get(point, _UNLABELLED) for point in outcome.pool_points]

    def query_vector(self, query: str) -> list[float] | None:
        """The all-MiniLM-L6-v2 vector :meth:`neusym.store.paper_index.PaperIndex.search` would compute for
        ``query`` (scaffolding stripped), computed once per request for both the hits and the facet
        pool; None for a blank query (the search then raises its own ValueError)."""
        from neusym.store.paper_index import strip_question

        if not isinstance(query, str) or not query.strip():
            return None
        return _QUERY_VECTORS.get(strip_question(query), self.index.settings)

    def cursor(self) -> Any:
        """A DuckDB cursor of the version's read-only connection (one per thread/request)."""
        return self.con.cursor()

    def environment(self) -> Any:
        """The agent's :class:`neusym.query.agent.actions.Environment` on this version, shared by the
        tool calls of every client (opened on first use, its cell collection too; thread-safe;
        closed with the version). Agent runs (``/ask``) open their own."""
        from neusym.query.agent.actions import Environment

        with self._environment_lock:
            if self._environment is None:
                settings = self.index.settings
                self._environment = Environment(settings, version=self.version, db_schema=self.agent_schema)
            return self._environment

    def close(self) -> None:
        """Close the DuckDB connection and the shared environment, and release the version (its reader lock)."""
        try:
            with self._environment_lock:
                env, self._environment = self._environment, None
            if env is not None:
                env.close()
            self.con.close()
        finally:
            self.version.close()


class PoolPaper(NamedTuple):
    """Venue and year of one paper of the version's paper index: what a facet counts."""

    venue: str | None
    year: int | None


_UNLABELLED = PoolPaper(None, None)


def pool_labels(index: Any) -> dict[str, PoolPaper]:
    """Point id -> :class:`PoolPaper` for every paper of ``index`` (a :class:`neusym.store.paper_index.PaperIndex`),
    read once per served version (one scroll of two payload fields; the version never changes)."""
    if not index.backend.exists():
        return {}
    return {r.id: PoolPaper(r.payload.get("venue"), r.payload.get("year"))
            for r in index.backend.scroll(payload=["venue", "year"])}


def prepare_version(settings: Settings, version: CorpusVersion, *, warm: bool = True) -> ServedVersion:
    """Open everything a request needs on ``version``: the paper index (and, with ``warm``, one
    search so the query encoder and the shard are loaded), a read-only DuckDB connection and the
    schema texts. Closes ``version`` and re-raises when any of it fails."""
    from neusym.store.schema import describe, schema_text
    from neusym.store.schema_docs import corpus_schema, schema_markdown
    from neusym.store.paper_index import PaperIndex
    from neusym.store.db import connect_readonly

    con = None
    try:
        index = PaperIndex.of_version(version, settings)
        con = connect_readonly(version.db_path)
        schema = corpus_schema(con)
        markdown = schema_markdown(schema)
        agent_schema = schema_text(describe(con))
        papers = int(con.execute("SELECT count(*) FROM metadata").fetchone()[0])
        labels = pool_labels(index)
        from neusym.query.paper_search import has_citation_graph

        graph = has_citation_graph(con)
        if warm:
            index.search("warm up the query encoder", limit=1)
        return ServedVersion(version=version, index=index, con=con, schema=schema, schema_markdown=markdown,
                             agent_schema=agent_schema, papers=papers, opened_at=time.time(), labels=labels,
                             citation_graph=graph)
    except BaseException:
        if con is not None:
            con.close()
        version.close()
        raise


class VersionHolder:
    """The corpus version a service process reads (see the module docstring).

    ``settings``: whose ``$NEUSYM_HOME`` to follow; ``watch_interval_s``: how often the watcher
    thread (started with the first opened version, or by :meth:`start_watcher`) asks whether a
    newer version exists (0 = never: call :meth:`check` yourself). Thread-safe.
    """

    def __init__(self, settings: Settings, *, watch_interval_s: float = 0.5):
        self.settings = settings
        self.watch_interval_s = watch_interval_s
        self._lock = threading.Lock()
        self._open_lock = threading.Lock()  # one opener at a time (first open or a switch)
        self._served: ServedVersion | None = None
        self._switching = False
        self._closed = False
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()
        self.last_error: str | None = None
        self.switches = 0

    # -- serving ------------------------------------------------------------------------------
    @contextmanager
    def use(self) -> Iterator[ServedVersion]:
        """The served version for the duration of one request (it is not closed meanwhile).

        Opens the current version on first use (blocking: nothing is served yet). Raises
        :class:`~neusym.store.versions.NoCorpusVersion` when nothing has been published.
        """
        served = self.acquire()
        try:
            yield served
        finally:
            self.release(served)

    def acquire(self) -> ServedVersion:
        """Take the served version (pair with :meth:`release`); see :meth:`use`. Never waits for a
        refresh: the check for a newer version runs in the watcher thread."""
        with self._lock:
            served = self._served
            if served is not None:
                served.users += 1
                return served
        return self._open_first(take=True)

    def release(self, served: ServedVersion) -> None:
        """Give back a version taken with :meth:`acquire`; closes it when it was retired and unused."""
        close = False
        with self._lock:
            served.users -= 1
            close = served.retired and served.users <= 0
        if close:
            self._close(served)

    def _open_first(self, *, take: bool = False) -> ServedVersion:
        with self._open_lock:
            with self._lock:
                if self._served is not None:
                    self._served.users += take
                    return self._served
                if self._closed:
                    raise NoCorpusVersion("the service is shutting down")
            version = open_version(self.settings)
            served = prepare_version(self.settings, version)
            with self._lock:
                self._served = served
                served.users += take
            logger.info("serving corpus version %d (%d papers)", served.number, served.papers)
        self.start_watcher()
        return served

    def current(self) -> ServedVersion | None:
        """The served version without taking it (None before the first open)."""
        with self._lock:
            return self._served

    # -- following new versions -------------------------------------------------------------
    def check(self, *, wait: bool = False) -> bool:
        """Ask whether the served version is still current; when it is not, open the new one in a
        background thread (``wait``: in this thread) and swap it in. Returns True when a switch
        was started (or done). Never raises: a failed open is logged and kept in ``last_error``,
        and the old version keeps serving."""
        with self._lock:
            served = self._served
            if served is None or self._switching or self._closed:
                return False
        try:
            if served.version.is_current():
                return False
        except Exception as exc:  # noqa: BLE001 - e.g. a shared storage that cannot be reached now
            self.last_error = f"cannot check for a newer corpus version: {type(exc).__name__}: {exc}"
            logger.warning("%s", self.last_error)
            return False
        with self._lock:
            if self._switching:
                return False
            self._switching = True
        if wait:
            self._switch()
        else:
            threading.Thread(target=self._switch, name="neusym-version-switch", daemon=True).start()
        return True

    def _switch(self) -> None:
        try:
            with self._open_lock:
                try:
                    version = open_version(self.settings)
                except Exception as exc:  # noqa: BLE001 - link being replaced, home emptied, storage down
                    self.last_error = f"cannot open the current corpus version: {exc}"
                    return
                with self._lock:
                    old = self._served
                if old is not None and version.number == old.number:
                    version.close()
                    return
                try:
                    served = prepare_version(self.settings, version)
                except Exception as exc:  # noqa: BLE001 - keep serving the old version
                    self.last_error = f"cannot open corpus version {version.number}: {type(exc).__name__}: {exc}"
                    logger.error("%s; still serving version %s", self.last_error, old.number if old else None)
                    return
                close_old = False
                with self._lock:
                    if self._closed:
                        close_old, old = True, served  # shut down meanwhile: drop the new one
                    else:
                        self._served = served
                        self.switches += 1
                        self.last_error = None
                        if old is not None:
                            old.retired = True
                            close_old = old.users <= 0
                logger.info("switched to corpus version %d", served.number)
                if close_old and old is not None:
                    self._close(old)
        finally:
            with self._lock:
                self._switching = False

    def start_watcher(self) -> None:
        """Start the daemon thread that calls :meth:`check` every ``watch_interval_s`` (idempotent),
        so a new version is opened (and the old one released) even while no request comes."""
        if self.watch_interval_s <= 0:
            return
        with self._lock:
            if self._watcher is not None or self._closed:
                return
            self._watcher = threading.Thread(target=self._watch, name="neusym-version-watcher", daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.watch_interval_s):
            try:
                if self.current() is None:
                    self._open_first()
                else:
                    self.check(wait=True)
            except NoCorpusVersion:
                pass
            except Exception:  # noqa: BLE001 - the watcher must survive anything
                logger.exception("version watcher")

    # -- shutdown ------------------------------------------------------------------------------
    def _close(self, served: ServedVersion) -> None:
        try:
            served.close()
        except Exception:  # noqa: BLE001 - closing must not fail a request
            logger.exception("closing corpus version %s", served.number)

    def close(self) -> None:
        """Stop the watcher and close the served version once no request uses it."""
        self._stop.set()
        with self._lock:
            self._closed = True
            served, self._served = self._served, None
            if served is not None:
                served.retired = True
                close = served.users <= 0
            else:
                close = False
        if close and served is not None:
            self._close(served)
