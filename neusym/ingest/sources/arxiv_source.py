"""arXiv metadata through the ``arxiv`` package (export.arxiv.org Atom API).

Library calls: ``arxiv.Client(page_size, delay_seconds, num_retries=0)`` with its ``query_url_format``
pointed at ``base_url`` when given, ``arxiv.Search(query, id_list, max_results, sort_by, sort_order)``
and ``Client.results(search, offset)``. The client enforces ``delay_seconds`` between requests (arXiv
asks for one request per ~3 s). Retries are done here, not by the library (which retries without
backoff and also retries an HTTP 400): a response hook on the client's ``requests`` session checks
every response first, so that

- HTTP 400 (arXiv's error feed, e.g. ``incorrect id format for abc``) fails at once with the feed's message;
- HTTP 429/5xx, timeouts, dropped connections and bodies that are not well-formed XML (a truncated
  feed, which the library's recovering parser would silently shorten) are retried with exponential
  backoff (or ``Retry-After``), resuming at the offset already consumed;
- entries without id/title/dates (which the library would silently skip) are reported.

Results are requested newest first (last-updated date by default) and paging stops at the first
entry not newer than the watermark ``since``. Versions of one paper (``2305.14314v1``/``v2``) collapse
to one :class:`~neusym.ingest.sources.base.SourcePaper` (highest version kept).
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

import arxiv
import requests
from lxml import etree
from pydantic import BaseModel, ConfigDict, Field

from neusym.ingest.sources import _http
from neusym.ingest.sources.base import SourceError, SourcePaper, bibtex_key, format_bibtex, watermark_before_skipped

log = logging.getLogger(__name__)

SOURCE = "arxiv"
#: arXiv's query endpoint (what ``arxiv.Client.query_url_format`` points at by default).
ARXIV_API_URL = "https://export.arxiv.org/api/query"
#: Ids per request when fetching an id list (keeps the GET URL short).
ID_BATCH = 100

_ATOM = "{http://www.w3.org/2005/Atom}"
_VERSION = re.compile(r"^(?P<id>.+?)(?P<version>v\d+)?$")
_ERROR_ID = re.compile(r"^https?://arxiv\.org/api/errors")


class _FeedFailure(Exception):
    """Raised by the response hook; ``retryable`` decides whether :func:`fetch_arxiv` tries again."""

    def __init__(self, reason: str, retryable: bool, retry_after: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after


def build_arxiv_query(categories: list[str] | None = None, terms: str | None = None) -> str:
    """An arXiv ``search_query`` from categories and/or free query terms.

    ``build_arxiv_query(["cs.CL", "cs.LG"])`` -> ``(cat:cs.CL OR cat:cs.LG)``; with ``terms="ti:retrieval"``
    -> ``(cat:cs.CL OR cat:cs.LG) AND (ti:retrieval)``. Errors: ValueError when both are empty.
    """
    parts = []
    if categories:
        parts.append("(" + " OR ".join(f"cat:{c.strip()}" for c in categories if c.strip()) + ")")
    if terms and terms.strip():
        parts.append(f"({terms.strip()})")
    if not parts:
        raise ValueError("an arXiv query needs categories or terms")
    return " AND ".join(parts)


def split_arxiv_id(short_id: str) -> tuple[str, str | None]:
    """``2305.14314v2`` -> (``2305.14314``, ``v2``); ``quant-ph/0201082`` -> (``quant-ph/0201082``, None)."""
    match = _VERSION.match(short_id.strip())
    assert match is not None  # the pattern matches any non-empty string
    return match.group("id"), match.group("version")


class _ResponseCheck:
    """``requests`` response hook: classifies failures and validates feeds before the library parses them."""

    def __init__(self) -> None:
        # entry label -> (reason, <updated>, <published>) of entries the library will skip
        self.bad_entries: dict[str, tuple[str, datetime | None, datetime | None]] = {}

    def __call__(self, resp: requests.Response, *args, **kwargs) -> requests.Response:
        body = resp.content  # read the whole body now (raises ChunkedEncodingError if cut short)
        status = resp.status_code
        if status == 400:
            raise _FeedFailure(f"HTTP 400: {_error_message(body) or resp.reason}", retryable=False)
        if status in _http.RETRY_STATUSES:
            raise _FeedFailure(
                f"HTTP {status}", retryable=True, retry_after=_http.parse_retry_after(resp.headers.get("Retry-After"))
            )
        if status != 200:
            raise _FeedFailure(f"HTTP {status}", retryable=False)
        try:
            root = etree.fromstring(body, parser=etree.XMLParser(resolve_entities=False, no_network=True))
        except etree.XMLSyntaxError as exc:
            raise _FeedFailure(
                f"truncated or ill-formed Atom feed ({len(body)} bytes) at line {exc.lineno}: "
                + re.sub(r",? line \d+, column \d+$", "", (exc.msg or "").strip()),
                retryable=True,
            ) from None
        if root.tag != f"{_ATOM}feed":
            raise _FeedFailure(f"not an Atom feed (root element {root.tag!r})", retryable=False)
        for pos, entry in enumerate(root.iterfind(f"{_ATOM}entry")):
            entry_id = (entry.findtext(f"{_ATOM}id") or "").strip()
            if _ERROR_ID.match(entry_id):
                message = (entry.findtext(f"{_ATOM}summary") or entry_id).strip()
                raise _FeedFailure(f"arXiv error feed: {message}", retryable=False)
            # the library silently skips such entries; a missing title is caught when mapping the result
            missing = [name for name in ("id", "published", "updated") if not (entry.findtext(f"{_ATOM}{name}") or "").strip()]
            if missing:
                label = entry_id or f"entry #{pos} of {resp.url}"
                self.bad_entries[label] = ("record missing " + ", ".join(missing),
                                           _atom_date(entry.findtext(f"{_ATOM}updated")),
                                           _atom_date(entry.findtext(f"{_ATOM}published")))
        return resp


def _atom_date(text: str | None) -> datetime | None:
    """An Atom date (``2021-04-20T16:07:14Z``) as a UTC datetime; None when absent or unreadable."""
    try:
        return datetime.fromisoformat((text or "").strip().replace("Z", "+00:00")).astimezone(timezone.utc)
    except ValueError:
        return None


def _entry_id(url: str) -> str:
    """``http://arxiv.org/abs/2104.12255v1`` -> ``2104.12255v1`` (the text itself when it is not such a URL)."""
    return re.sub(r"^https?://arxiv\.org/abs/", "", url.strip())


def _error_message(body: bytes) -> str | None:
    """The ``<summary>`` of arXiv's error feed (``incorrect id format for abc``), if the body is one."""
    try:
        root = etree.fromstring(body, parser=etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError:
        return None
    for entry in root.iterfind(f"{_ATOM}entry"):
        summary = entry.findtext(f"{_ATOM}summary")
        if summary:
            return summary.strip()
    return None


def _to_paper(result: arxiv.Result) -> SourcePaper:
    """Map one ``arxiv.Result`` to a SourcePaper (raises pydantic ValidationError on a bad record)."""
    base_id, version = split_arxiv_id(result.get_short_id())
    title = " ".join((result.title or "").split())
    authors = [" ".join(a.name.split()) for a in result.authors if a.name and a.name.strip()]
    year = result.published.year if result.published else None
    abs_url = f"https://arxiv.org/abs/{base_id}"
    bibtex = format_bibtex(
        "misc",
        bibtex_key(authors, year, title or base_id),
        {
            "title": title,
            "author": authors,
            "year": year,
            "eprint": base_id,
            "archivePrefix": "arXiv",
            "primaryClass": result.primary_category or None,
            "doi": result.doi,
            "url": abs_url,
        },
    )
    return SourcePaper(
        source=SOURCE,
        external_id=base_id,
        version=version,
        title=title,
        authors=authors,
        abstract=" ".join((result.summary or "").split()) or None,
        pub_year=year,
        published=result.published,
        updated=result.updated,
        doi=result.doi,
        bibtex=bibtex,
        pdf_url=result.pdf_url or f"https://arxiv.org/pdf/{base_id}{version or ''}",
        arxiv_id=base_id,
        categories=list(result.categories),
    )


def collapse_versions(papers: list[SourcePaper]) -> list[SourcePaper]:
    """One record per arXiv id: the highest version (ties: the latest ``updated``), in first-seen order."""
    best: dict[str, SourcePaper] = {}
    for paper in papers:
        old = best.get(paper.external_id)
        if old is None or _version_key(paper) > _version_key(old):
            best[paper.external_id] = paper
    return list(best.values())


def _version_key(paper: SourcePaper) -> tuple[int, float]:
    number = int(paper.version[1:]) if paper.version else 0
    return number, paper.updated.timestamp() if paper.updated else 0.0


def _handle_bad(error: SourceError, errors: list[SourceError] | None) -> None:
    if errors is None:
        raise error
    log.warning("%s", error)
    errors.append(error)


def fetch_arxiv(
    query: str | None = None,
    id_list: list[str] | None = None,
    *,
    since: datetime | None = None,
    page_size: int = 100,
    max_results: int | None = 1000,
    delay_seconds: float = 3.0,
    num_retries: int = 3,
    backoff_seconds: float | None = None,
    timeout: float = 60.0,
    base_url: str | None = None,
    sort_by: Literal["updated", "submitted"] = "updated",
    lookback: timedelta = timedelta(0),
    errors: list[SourceError] | None = None,
) -> tuple[list[SourcePaper], datetime | None]:
    """Fetch arXiv papers newer than ``since`` for a query and/or an id list.

    Inputs: ``query`` (arXiv ``search_query``, see :func:`build_arxiv_query`) and/or ``id_list`` (ids
    with or without version; sent in batches of :data:`ID_BATCH`); ``since`` the stored watermark
    (UTC); ``page_size`` results per request; ``max_results`` cap per search (None = until the
    watermark or the end); ``delay_seconds`` minimum gap between requests; ``num_retries`` retries per
    failing request, waiting ``backoff_seconds * 2**(n-1)`` (default ``max(delay_seconds, 1)``) or the
    server's ``Retry-After``; ``timeout`` seconds per request; ``base_url`` the query endpoint (default
    :data:`ARXIV_API_URL`; tests point it at a loopback server); ``sort_by`` which date drives the
    order and the watermark ("updated" = last updated, also catches new versions; "submitted" = first
    version); ``lookback`` re-reads that much before ``since``: arXiv dates are submission times, and
    a paper submitted before the watermark can be announced (become visible) a day or two later, so a
    nightly crawl should pass e.g. 3 days and rely on upserts by arXiv id (0 = exact resume);
    ``errors``: if a list, records with missing or malformed fields are appended to it as
    :class:`SourceError` with ``record_id`` (the entry id) and ``updated`` (its date, when readable)
    and skipped, otherwise the first one raises. Bad entries dated at or before the lookback cutoff
    are outside the window (like good ones there) and not reported.

    Output: ``(papers, watermark)``: one :class:`SourcePaper` per arXiv id (highest version), newest
    first; ``watermark`` = the largest date seen, or ``since`` when nothing newer was returned; with
    skipped records, never at or past the earliest of them (an undated one keeps ``since``), see
    :func:`~neusym.ingest.sources.base.watermark_before_skipped`.

    Errors: :class:`SourceError` naming the query/id list: HTTP 400 / arXiv error feed (at once),
    429/5xx, timeouts, connection failures or truncated feeds (after ``num_retries`` retries). Its
    ``partial`` holds the papers fetched before the failure (do not advance the watermark from them).
    """
    if not query and not id_list:
        raise ValueError("fetch_arxiv needs a query or an id_list")
    backoff = max(delay_seconds, 1.0) if backoff_seconds is None else backoff_seconds
    client = arxiv.Client(page_size=page_size, delay_seconds=delay_seconds, num_retries=0)
    if base_url:
        client.query_url_format = base_url.rstrip("?") + "?{}"
    session = client._session  # the library exposes no other handle on its requests session
    _http.mount_timeouts(session, timeout)
    check = _ResponseCheck()
    session.hooks["response"].append(check)

    criterion = arxiv.SortCriterion.LastUpdatedDate if sort_by == "updated" else arxiv.SortCriterion.SubmittedDate
    searches: list[tuple[str, arxiv.Search]] = []
    if id_list:
        ids = [i.strip() for i in id_list if i and i.strip()]
        for start in range(0, len(ids), ID_BATCH):
            batch = ids[start:start + ID_BATCH]
            shown = ",".join(batch[:5]) + (f",... (+{len(batch) - 5} more)" if len(batch) > 5 else "")
            label = f"query={query!r} id_list={shown}" if query else f"id_list={shown}"
            limit = max_results if query else len(batch)
            searches.append((label, arxiv.Search(query=query or "", id_list=batch, max_results=limit,
                                                 sort_by=criterion, sort_order=arxiv.SortOrder.Descending)))
    else:
        searches.append((f"query={query!r}", arxiv.Search(query=query or "", max_results=max_results,
                                                          sort_by=criterion, sort_order=arxiv.SortOrder.Descending)))

    collected: list[SourcePaper] = []
    skipped: list[datetime | None] = []  # watermark dates of the skipped records
    cutoff = since - lookback if since is not None else None

    def when(updated: datetime | None, published: datetime | None) -> datetime | None:
        return updated if sort_by == "updated" else published

    for label, search in searches:
        for result in _run_search(client, search, label, cutoff, sort_by, num_retries, backoff, collected):
            try:
                paper = _to_paper(result)
            except ValueError as exc:  # pydantic ValidationError is a ValueError
                date = when(result.updated, result.published)
                reason = "record missing title" if not (result.title or "").strip() else \
                    "bad record: " + " ".join(str(exc).split())
                _handle_bad(SourceError(SOURCE, f"{label} entry {result.entry_id}", reason,
                                        record_id=_entry_id(result.entry_id), updated=date), errors)
                skipped.append(date)
                continue
            collected.append(paper)
        for entry, (reason, updated, published) in check.bad_entries.items():
            date = when(updated, published)
            if cutoff is not None and date is not None and date <= cutoff:
                continue  # past the point where paging stopped: not part of this run
            _handle_bad(SourceError(SOURCE, f"{label} {entry}", reason, record_id=_entry_id(entry), updated=date),
                        errors)
            skipped.append(date)
        check.bad_entries.clear()
    watermark = watermark_before_skipped(since, (when(p.updated, p.published) for p in collected), skipped)
    return collapse_versions(collected), watermark


def _run_search(
    client: arxiv.Client,
    search: arxiv.Search,
    label: str,
    since: datetime | None,
    sort_by: str,
    num_retries: int,
    backoff: float,
    collected: list[SourcePaper],
) -> list[arxiv.Result]:
    """All results of one search newer than ``since``, retrying failed pages from the offset reached."""
    results: list[arxiv.Result] = []
    consumed = 0
    attempt = 0
    failed_at = -1
    while True:
        try:
            for result in client.results(search, offset=consumed):
                consumed += 1
                when = result.updated if sort_by == "updated" else result.published
                if since is not None and when <= since:
                    return results  # sorted newest first: everything after this is older
                results.append(result)
            return results
        except _FeedFailure as exc:
            reason, retryable, retry_after = exc.reason, exc.retryable, exc.retry_after
        except arxiv.UnexpectedEmptyPageError as exc:
            reason, retryable, retry_after = f"unexpectedly empty page {exc.url}", True, None
        except arxiv.HTTPError as exc:
            reason, retryable, retry_after = f"HTTP {exc.status} for {exc.url}", exc.status in _http.RETRY_STATUSES, None
        except _http.TRANSIENT_ERRORS as exc:
            reason, retryable, retry_after = f"{type(exc).__name__}: {exc}", True, None
        except requests.RequestException as exc:
            reason, retryable, retry_after = f"{type(exc).__name__}: {exc}", False, None
        if consumed != failed_at:  # a new page is failing: it gets its own num_retries
            attempt, failed_at = 0, consumed
        if not retryable or attempt >= num_retries:
            tries = f" (gave up after {attempt + 1} attempts)" if retryable else ""
            partial = collected + [p for p in (_safe_paper(r) for r in results) if p is not None]
            raise SourceError(SOURCE, label, f"{reason} at offset {consumed}{tries}", partial=partial)
        attempt += 1
        wait = _http.retry_wait(attempt, backoff, retry_after)
        log.warning("arxiv %s: %s at offset %d; retry %d/%d in %.1fs", label, reason, consumed, attempt, num_retries, wait)
        _http.sleep(wait)


def _safe_paper(result: arxiv.Result) -> SourcePaper | None:
    try:
        return _to_paper(result)
    except ValueError:
        return None


class ArxivOptions(BaseModel):
    """A crawl of arXiv: ``categories`` (``cs.CL``) and/or ``query`` terms, or an ``id_list``;
    ``max_results`` (default ``NEUSYM_ARXIV_MAX_RESULTS``)."""

    model_config = ConfigDict(extra="forbid")

    categories: list[str] = Field(default_factory=list)
    query: str | None = None
    id_list: list[str] = Field(default_factory=list)
    max_results: int | None = None


class ArxivSource:
    """arXiv through the ``arxiv`` client (:func:`fetch_arxiv`); settings ``arxiv_page_size``,
    ``arxiv_max_results``, ``arxiv_delay_s``, ``arxiv_api_url``, ``source_timeout_s``, ``source_retries``."""

    name = "arxiv"
    options = ArxivOptions

    def scope(self, options: ArxivOptions) -> str:
        parts = []
        if options.categories or options.query:
            parts.append(build_arxiv_query(options.categories, options.query))
        if options.id_list:
            parts.append("ids:" + ",".join(sorted(options.id_list)))
        return " | ".join(parts)

    def fetch(self, options: ArxivOptions, settings: Any, since: datetime | None,
              errors: list[SourceError] | None) -> tuple[list[SourcePaper], datetime | None]:
        query = build_arxiv_query(options.categories, options.query) if (options.categories or options.query) else None
        return fetch_arxiv(query, options.id_list or None, since=since, page_size=settings.arxiv_page_size,
                           max_results=options.max_results or settings.arxiv_max_results,
                           delay_seconds=settings.arxiv_delay_s, base_url=settings.arxiv_api_url,
                           timeout=settings.source_timeout_s, num_retries=settings.source_retries, errors=errors)


CRAWL_SOURCE = ArxivSource()

