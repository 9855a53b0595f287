"""Saved searches ("watches") and the papers each one found, per corpus version: the one way into that store.

Stored in ``$NEUSYM_HOME/watches.sqlite`` (SQLite in WAL mode), beside the corpus rather than in
the writer's DuckDB file: a watch is user state that must be writable while a refresh holds the
writer's database for an hour, and readable by the service, which only opens immutable corpus
versions. WAL lets the service read while the evaluation task writes; every write is one short
transaction. Tables::

    watches(name PK, query, venue, year, author, created_at, evaluated_version)
    watch_matches(name, paper_id, version, rank, score, title, authors JSON, venue, year, snippet,
                  matched_at, initial)      PRIMARY KEY (name, paper_id)
    watch_runs(name, version, pool, new_matches, seconds, ran_at)   PRIMARY KEY (name, version)
    corpus_papers(paper_id PK, first_version)   when each paper was first seen by an evaluation

A paper is recorded for a watch at most once (the version that first matched it), so re-running an
evaluation adds nothing.
"""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from neusym.errors import NeusymError

FILE_NAME = "watches.sqlite"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
"""Watch names: lower-case letters, digits, ``.``, ``_``, ``-``; at most 64 characters (they are URL path parts)."""
MAX_QUERY_CHARS = 1000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS watches (
    name TEXT PRIMARY KEY, query TEXT NOT NULL, venue TEXT, year INTEGER, author TEXT,
    created_at TEXT NOT NULL, evaluated_version INTEGER);
CREATE TABLE IF NOT EXISTS watch_matches (
    name TEXT NOT NULL, paper_id TEXT NOT NULL, version INTEGER NOT NULL, rank INTEGER NOT NULL,
    score REAL NOT NULL, title TEXT NOT NULL, authors TEXT NOT NULL, venue TEXT, year INTEGER, snippet TEXT,
    matched_at TEXT NOT NULL, initial INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (name, paper_id));
CREATE INDEX IF NOT EXISTS watch_matches_by_version ON watch_matches (name, version);
CREATE TABLE IF NOT EXISTS watch_runs (
    name TEXT NOT NULL, version INTEGER NOT NULL, pool INTEGER NOT NULL, new_matches INTEGER NOT NULL,
    seconds REAL NOT NULL, ran_at TEXT NOT NULL, PRIMARY KEY (name, version));
CREATE TABLE IF NOT EXISTS corpus_papers (paper_id TEXT PRIMARY KEY, first_version INTEGER NOT NULL);
"""


class WatchError(NeusymError, ValueError):
    """A bad watch (name, query, filters) or an unknown one; the message names it and the reason."""


@dataclass
class Watch:
    """One saved search: ``query`` with optional filters, as :func:`neusym.query.paper_search.search_papers` takes them."""

    name: str
    query: str
    venue: str | None = None
    year: int | None = None
    author: str | None = None
    created_at: str = ""
    evaluated_version: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Match:
    """A paper a watch found: ``version`` is the corpus version that first matched it, ``rank`` its
    rank (from 1) in that version's result list, ``initial`` whether it came from the watch's first
    evaluation (papers already in the corpus when the watch was added)."""

    name: str
    paper_id: str
    version: int
    rank: int
    score: float
    title: str
    authors: list[str]
    venue: str | None
    year: int | None
    snippet: str | None
    matched_at: str
    initial: bool

    def to_dict(self) -> dict:
        return asdict(self)


def _utcnow() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def store_path(settings: Any) -> Path:
    """``$NEUSYM_HOME/watches.sqlite``."""
    return Path(settings.home) / FILE_NAME


def check_watch(name: str, query: str, venue: str | None = None, year: int | None = None,
                author: str | None = None) -> Watch:
    """A validated :class:`Watch`. Raises :class:`WatchError` naming the bad field and why."""
    name = (name or "").strip()
    if not NAME_PATTERN.match(name):
        raise WatchError(f"bad watch name {name[:80]!r}: use 1-64 lower-case letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit")
    query = (query or "").strip()
    if not query:
        raise WatchError(f"watch {name!r}: the query is blank")
    for field_name, value in (("query", query), ("venue", venue), ("author", author)):
        bad = next((c for c in value or "" if _is_control(c)), None)
        if bad is not None:
            raise WatchError(f"watch {name!r}: the {field_name} holds the control character U+{ord(bad):04X} "
                             f"at position {(value or '').index(bad) + 1}; remove it")
    if len(query) > MAX_QUERY_CHARS:
        raise WatchError(f"watch {name!r}: the query has {len(query)} characters, at most {MAX_QUERY_CHARS}")
    if year is not None and not 1900 <= int(year) <= 2100:
        raise WatchError(f"watch {name!r}: year {year} is not between 1900 and 2100")
    return Watch(name, query, (venue or "").strip() or None, int(year) if year is not None else None,
                 (author or "").strip() or None)


def _is_control(ch: str) -> bool:
    """A control or non-character code point a saved search must not hold (tab, newline and return aside):
    C0/C1 controls, lone surrogates, U+FFFE/U+FFFF (they cannot be written to an Atom feed)."""
    import unicodedata

    return ch not in "\t\n\r" and (unicodedata.category(ch) in ("Cc", "Cs") or ch in "\ufffe\uffff")


def default_name(query: str) -> str:
    """A watch name made from a query: its first words, lower case, joined by ``-`` (``"RAG for tables"`` → ``rag-for-tables``)."""
    words = re.findall(r"[a-z0-9]+", query.lower())
    name = "-".join(words)[:48].strip("-")
    return name or "watch"


class WatchStore:
    """The watch database of one home. ``readonly`` opens it for reading only (the service); a missing
    file then reads as empty. Use as a context manager or call :meth:`close`."""

    def __init__(self, settings: Any, *, readonly: bool = False):
        self.path = store_path(settings)
        self.readonly = readonly
        self._con: sqlite3.Connection | None = None
        if readonly:
            if self.path.is_file():
                self._con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10,
                                            check_same_thread=False)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._con = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            self._con.execute("PRAGMA journal_mode=WAL")
            self._con.executescript(_SCHEMA)
            self._con.commit()

    def __enter__(self) -> "WatchStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``: concurrent writers wait up to 30 s)."""
        if self._con is None or self.readonly:
            raise WatchError(f"{self.path} is open read-only")
        self._con.execute("BEGIN IMMEDIATE")
        try:
            yield self._con
        except BaseException:
            self._con.rollback()
            raise
        self._con.commit()

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        if self._con is None:
            return []
        try:
            return self._con.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # created read-only before any watch existed
                return []
            raise

    # -- watches -------------------------------------------------------------------------------
    def add(self, watch: Watch, *, replace: bool = False) -> Watch:
        """Store ``watch``. Raises :class:`WatchError` when the name exists (unless ``replace``: a changed
        query or filter then starts its matches afresh)."""
        with self.transaction() as con:
            old = con.execute("SELECT query, venue, year, author FROM watches WHERE name = ?", [watch.name]).fetchone()
            if old is not None and not replace:
                raise WatchError(f"a watch named {watch.name!r} exists (query {old[0]!r}); remove it first or "
                                 "choose another --name")
            if old is not None and tuple(old) == (watch.query, watch.venue, watch.year, watch.author):
                return self.get(watch.name)  # the same watch again: nothing to do
            con.execute("DELETE FROM watch_matches WHERE name = ?", [watch.name])
            con.execute("DELETE FROM watch_runs WHERE name = ?", [watch.name])
            watch.created_at = _utcnow()
            con.execute("INSERT OR REPLACE INTO watches VALUES (?, ?, ?, ?, ?, ?, NULL)",
                        [watch.name, watch.query, watch.venue, watch.year, watch.author, watch.created_at])
        return self.get(watch.name)

    def remove(self, name: str) -> None:
        """Delete a watch with its matches. Raises :class:`WatchError` for an unknown name."""
        with self.transaction() as con:
            if con.execute("DELETE FROM watches WHERE name = ?", [name]).rowcount == 0:
                raise WatchError(f"no watch named {name[:80]!r} (see `neusym watch list`)")
            con.execute("DELETE FROM watch_matches WHERE name = ?", [name])
            con.execute("DELETE FROM watch_runs WHERE name = ?", [name])

    def list(self) -> list[Watch]:
        """Every watch, by name."""
        return [Watch(*r) for r in self._rows(
            "SELECT name, query, venue, year, author, created_at, evaluated_version FROM watches ORDER BY name")]

    def get(self, name: str) -> Watch:
        """One watch. Raises :class:`WatchError` for an unknown name."""
        rows = self._rows("SELECT name, query, venue, year, author, created_at, evaluated_version FROM watches "
                          "WHERE name = ?", (name,))
        if not rows:
            raise WatchError(f"no watch named {name[:80]!r}")
        return Watch(*rows[0])

    # -- matches -------------------------------------------------------------------------------
    def matches(self, name: str, *, limit: int = 50, include_initial: bool = True) -> list[Match]:
        """The papers ``name`` found, newest version first, then by rank."""
        sql = ("SELECT name, paper_id, version, rank, score, title, authors, venue, year, snippet, matched_at, initial "
               "FROM watch_matches WHERE name = ?" + ("" if include_initial else " AND initial = 0") +
               " ORDER BY version DESC, rank LIMIT ?")
        return [Match(*r[:6], json.loads(r[6]), *r[7:11], bool(r[11])) for r in self._rows(sql, (name, limit))]

    def counts(self) -> dict[str, dict[str, Any]]:
        """Per watch: ``{"matches", "new", "last_version"}`` — ``new`` counts the papers matched by the
        newest version that matched anything, not counting the first evaluation's."""
        out: dict[str, dict[str, Any]] = {}
        for name, n, last in self._rows("SELECT name, count(*), max(version) FROM watch_matches GROUP BY name"):
            out[name] = {"matches": n, "last_version": last, "new": 0}
        for name, n in self._rows(
                "SELECT m.name, count(*) FROM watch_matches m JOIN (SELECT name, max(version) AS v FROM watch_matches "
                "WHERE initial = 0 GROUP BY name) l ON l.name = m.name AND m.version = l.v WHERE m.initial = 0 "
                "GROUP BY m.name"):
            out[name]["new"] = n
        return out

    def record_papers(self, version: int, paper_ids: list[str]) -> None:
        """Remember the first version each of ``paper_ids`` was seen in (existing rows are kept)."""
        with self.transaction() as con:
            con.executemany("INSERT OR IGNORE INTO corpus_papers VALUES (?, ?)", [(p, version) for p in paper_ids])

    def first_versions(self, paper_ids: list[str]) -> dict[str, int]:
        """paper id -> the version :meth:`record_papers` first saw it in (ids never seen are absent)."""
        out: dict[str, int] = {}
        for start in range(0, len(paper_ids), 500):
            part = paper_ids[start:start + 500]
            out.update(self._rows(f"SELECT paper_id, first_version FROM corpus_papers WHERE paper_id IN "
                                  f"({','.join('?' * len(part))})", tuple(part)))
        return out

    def record_run(self, watch: Watch, version: int, found: list[dict], pool: int, seconds: float,
                   *, initial: bool) -> int:
        """Record one evaluation of ``watch`` against ``version``: ``found`` are hit dicts (paper_id, rank,
        score, title, authors, venue, year, snippet) to add. Papers the watch already has are ignored;
        returns how many were added. Nothing is recorded (0 is returned) when the stored watch is no
        longer the definition that was evaluated: removed meanwhile, or replaced (``add(...,
        replace=True)`` with another query or filter: its ``created_at`` or fields differ), so the new
        definition keeps ``evaluated_version`` NULL and is evaluated afresh. Idempotent per (watch,
        version): two evaluations racing on one version add each paper once and keep the first run's
        record."""
        now = _utcnow()
        with self.transaction() as con:
            stored = con.execute("SELECT query, venue, year, author, created_at FROM watches WHERE name = ?",
                                 [watch.name]).fetchone()
            if stored is None or tuple(stored) != (watch.query, watch.venue, watch.year, watch.author,
                                                   watch.created_at):
                return 0  # removed or redefined while it was being evaluated: record nothing
            before = con.total_changes
            con.executemany(
                "INSERT OR IGNORE INTO watch_matches VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(watch.name, h["paper_id"], version, h["rank"], float(h["score"]), h["title"],
                  json.dumps(list(h.get("authors") or []), ensure_ascii=False), h.get("venue"), h.get("year"),
                  h.get("snippet"), now, int(initial)) for h in found])
            added = con.total_changes - before
            con.execute("INSERT OR IGNORE INTO watch_runs VALUES (?, ?, ?, ?, ?, ?)",  # a concurrent run's stays
                        [watch.name, version, pool, added, round(seconds, 4), now])
            con.execute("UPDATE watches SET evaluated_version = ? WHERE name = ?", [version, watch.name])
        return added

    def version_seconds(self, version: int) -> float | None:
        """Seconds the watches' evaluations against ``version`` took (summed over watches; the
        ``watches`` stage of :mod:`neusym.ingest.stages`), None when no watch was evaluated against it."""
        rows = self._rows("SELECT sum(seconds), count(*) FROM watch_runs WHERE version = ?", (version,))
        return round(rows[0][0], 3) if rows and rows[0][1] else None

    def runs(self, name: str) -> list[dict]:
        """The evaluations of ``name``, newest first: version, pool, new_matches, seconds, ran_at."""
        return [dict(zip(("version", "pool", "new_matches", "seconds", "ran_at"), r)) for r in self._rows(
            "SELECT version, pool, new_matches, seconds, ran_at FROM watch_runs WHERE name = ? ORDER BY version DESC",
            (name,))]
