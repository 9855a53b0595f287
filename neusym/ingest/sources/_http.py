"""HTTP plumbing shared by the source clients: default timeouts, retry waits, plain downloads.

Nothing here talks to a particular service; ``arxiv_source``, ``openreview_source`` and
``acl_source`` use these helpers so that every request has a timeout and every retry waits.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import requests
from requests.adapters import HTTPAdapter

from neusym.ingest.sources.base import SourceError

log = logging.getLogger(__name__)

#: Statuses worth retrying: rate limiting and server-side failures.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Upper bound of one wait, whatever a ``Retry-After`` header asks for.
MAX_WAIT_SECONDS = 300.0
#: Transport failures worth retrying (dropped connection, timeout, body cut short).
TRANSIENT_ERRORS = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ContentDecodingError,
)

# Indirection so tests (and callers) can observe or skip the waits.
sleep = time.sleep


class TimeoutHTTPAdapter(HTTPAdapter):
    """A ``requests`` adapter that applies ``timeout`` (seconds) to every request without one.

    The ``arxiv`` and ``openreview-py`` clients call ``session.get`` without a timeout; mounting this
    adapter on their session makes a silent server fail after ``timeout`` seconds instead of hanging.
    ``max_retries`` is passed through unchanged (openreview-py's urllib3 ``Retry`` policy is kept).
    """

    def __init__(self, timeout: float, **kwargs):
        self.timeout = timeout
        super().__init__(**kwargs)

    def send(self, request, **kwargs):
        """``HTTPAdapter.send`` with ``timeout`` filled in when the caller gave none."""
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self.timeout
        return super().send(request, **kwargs)


def mount_timeouts(session: requests.Session, timeout: float) -> None:
    """Replace the ``http://`` and ``https://`` adapters of ``session`` by :class:`TimeoutHTTPAdapter`.

    The retry policy (``max_retries``) of the adapter being replaced is kept.
    """
    for prefix in ("https://", "http://"):
        old = session.get_adapter(prefix + "example.org")
        session.mount(prefix, TimeoutHTTPAdapter(timeout, max_retries=old.max_retries))


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date); None if absent/invalid."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def retry_wait(attempt: int, backoff_seconds: float, retry_after: float | None = None) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based).

    ``Retry-After`` from the server wins when given; otherwise exponential backoff
    ``backoff_seconds * 2**(attempt-1)``. Always capped at :data:`MAX_WAIT_SECONDS`.
    """
    if retry_after is not None:
        return min(retry_after, MAX_WAIT_SECONDS)
    return min(backoff_seconds * (2 ** (attempt - 1)), MAX_WAIT_SECONDS)


def get_bytes(
    url: str,
    *,
    source: str,
    record: str,
    timeout: float,
    num_retries: int,
    backoff_seconds: float,
    session: requests.Session | None = None,
    cache_dir: Path | None = None,
) -> bytes:
    """GET ``url`` and return the whole body, retrying 429/5xx and transport failures.

    Inputs: ``source``/``record`` only name the request in errors; ``timeout`` per request in seconds;
    up to ``num_retries`` retries, waiting :func:`retry_wait` between them. With ``cache_dir``, the
    body and its validators (``ETag``, ``Last-Modified``) are kept there and the next GET is
    conditional (``If-None-Match`` / ``If-Modified-Since``): a ``304 Not Modified`` answer returns
    the cached body without transferring it again.
    Output: the response body (bytes) of a 200 answer (or the cached body on 304).
    Errors: :class:`SourceError` for any other status (4xx at once, 429/5xx after the retries), or a
    transport failure (timeout, refused or dropped connection, body shorter than Content-Length)
    after the retries.
    """
    if session is None:
        with requests.Session() as own:
            return get_bytes(url, source=source, record=record, timeout=timeout, num_retries=num_retries,
                             backoff_seconds=backoff_seconds, session=own, cache_dir=cache_dir)
    sess = session
    headers = {"User-Agent": "neusym-corpus-refresh"}
    cached = _cache_lookup(cache_dir, url)
    if cached:
        if cached.get("etag"):
            headers["If-None-Match"] = cached["etag"]
        if cached.get("last_modified"):
            headers["If-Modified-Since"] = cached["last_modified"]
    attempt = 0
    while True:
        retry_after = None
        try:
            resp = sess.get(url, timeout=timeout, headers=headers)
            if resp.status_code == 304 and cached:
                return Path(cached["body_file"]).read_bytes()
            if resp.status_code == 200:
                if cache_dir is not None:
                    _cache_store(cache_dir, url, resp)
                return resp.content
            if resp.status_code not in RETRY_STATUSES:
                raise SourceError(source, record, f"HTTP {resp.status_code} from {url}")
            retry_after = parse_retry_after(resp.headers.get("Retry-After"))
            reason = f"HTTP {resp.status_code} from {url}"
        except TRANSIENT_ERRORS as exc:
            reason = f"{type(exc).__name__} for {url}: {exc}"
        if attempt >= num_retries:
            raise SourceError(source, record, f"{reason} (gave up after {attempt + 1} attempts)")
        attempt += 1
        wait = retry_wait(attempt, backoff_seconds, retry_after)
        log.warning("%s %s: %s; retry %d/%d in %.1fs", source, record, reason, attempt, num_retries, wait)
        sleep(wait)


def _cache_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:32]


def _cache_lookup(cache_dir: Path | None, url: str) -> dict | None:
    """The cached validators + body file of ``url`` (only when both files are intact), else None."""
    if cache_dir is None:
        return None
    meta = Path(cache_dir) / f"{_cache_key(url)}.json"
    try:
        entry = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    body = Path(entry.get("body_file", ""))
    if entry.get("url") != url or not body.is_file() or body.stat().st_size != entry.get("bytes"):
        return None
    return entry


def _cache_store(cache_dir: Path, url: str, resp: requests.Response) -> None:
    """Keep the body and validators of a 200 answer (body first, both renamed into place)."""
    etag, modified = resp.headers.get("ETag"), resp.headers.get("Last-Modified")
    if not etag and not modified:
        return
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = _cache_key(url)
    body = cache_dir / f"{key}.body"
    tmp = body.with_suffix(".body.tmp")
    tmp.write_bytes(resp.content)
    os.replace(tmp, body)
    meta = cache_dir / f"{key}.json"
    tmp = meta.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"url": url, "etag": etag, "last_modified": modified, "body_file": str(body),
                               "bytes": len(resp.content)}), encoding="utf-8")
    os.replace(tmp, meta)
