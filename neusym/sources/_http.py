"""HTTP plumbing shared by the source clients: default timeouts, retry waits, plain downloads.

Nothing here talks to a particular service; ``arxiv_source``, ``openreview_source`` and
``acl_source`` use these helpers so that every request has a timeout and every retry waits.
"""

from __future__ import annotations

import email.utils
import logging
import time
from datetime import datetime, timezone

import requests
from requests.adapters import HTTPAdapter

from neusym.sources.base import SourceError

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
) -> bytes:
    """GET ``url`` and return the whole body, retrying 429/5xx and transport failures.

    Inputs: ``source``/``record`` only name the request in errors; ``timeout`` per request in seconds;
    up to ``num_retries`` retries, waiting :func:`retry_wait` between them.
    Output: the response body (bytes) of a 200 answer.
    Errors: :class:`SourceError` for any other status (4xx at once, 429/5xx after the retries), or a
    transport failure (timeout, refused or dropped connection, body shorter than Content-Length)
    after the retries.
    """
    if session is None:
        with requests.Session() as own:
            return get_bytes(url, source=source, record=record, timeout=timeout, num_retries=num_retries,
                             backoff_seconds=backoff_seconds, session=own)
    sess = session
    attempt = 0
    while True:
        retry_after = None
        try:
            resp = sess.get(url, timeout=timeout, headers={"User-Agent": "neusym-corpus-refresh"})
            if resp.status_code == 200:
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
