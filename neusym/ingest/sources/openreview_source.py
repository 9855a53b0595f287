"""OpenReview (API v2) metadata through ``openreview-py``.

Library calls: ``openreview.api.OpenReviewClient(baseurl=...)``, ``client.login_user(username, password)``
when credentials are given (``POST /login``), and ``client.get_all_notes(...)``, which pages through
``GET /notes`` itself: the first request has ``count=true&sort=id&limit=1000``, each next one adds
``after=<last note id>``, until a page comes back empty.

- accepted papers (default): ``get_all_notes(content={"venueid": venue_id})``
  -> ``GET /notes?content.venueid=ICLR.cc/2024/Conference``; after decisions, accepted papers carry
  exactly the venue id, rejected/withdrawn ones ``<venue>/Rejected_Submission`` etc.
- all submissions: ``get_all_notes(invitation=f"{venue_id}/-/Submission")``; the decision is read
  from ``content.venueid`` / ``content.venue``.

Retries: openreview-py's own urllib3 policy retries 429/5xx with backoff and honours ``Retry-After``;
here every request also gets a timeout, and a whole listing is retried on a transport failure or a
truncated JSON body. API v2 wraps every content field as ``{"value": ...}``; plain values (API v1
shape) are accepted too. The watermark is the note's ``tmdate`` (last modification, e.g. the decision).
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timezone
from typing import Any

import requests
from pydantic import BaseModel, ConfigDict

from neusym.ingest.sources import _http
from neusym.ingest.sources.base import SourceError, SourcePaper, bibtex_key, format_bibtex, watermark_before_skipped

log = logging.getLogger(__name__)

SOURCE = "openreview"
OPENREVIEW_API_URL = "https://api2.openreview.net"
OPENREVIEW_SITE_URL = "https://openreview.net"

#: Full names of venues whose OpenReview group prefix is known (prefix before the first "/").
VENUE_NAMES = {
    "ICLR": "International Conference on Learning Representations",
    "NeurIPS": "Conference on Neural Information Processing Systems",
    "ICML": "International Conference on Machine Learning",
    "COLM": "Conference on Language Modeling",
    "TMLR": "Transactions on Machine Learning Research",
    "AISTATS": "International Conference on Artificial Intelligence and Statistics",
    "UAI": "Conference on Uncertainty in Artificial Intelligence",
    "CoRL": "Conference on Robot Learning",
    "MIDL": "Medical Imaging with Deep Learning",
    "LoG": "Learning on Graphs Conference",
}
_TIERS = ("oral", "spotlight", "poster")


def _value(content: dict[str, Any], key: str) -> Any:
    """A content field: API v2 ``{"value": x}`` -> x; a plain (API v1) value as is; None if absent."""
    field = content.get(key)
    if isinstance(field, dict):
        return field.get("value")
    return field


def _ms_to_utc(ms: Any) -> datetime | None:
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(int(ms) / 1000, tz=timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def venue_names(venue_id: str) -> tuple[str | None, str, int | None]:
    """(conference_full, conference_abbreviation, year) of an OpenReview venue id.

    ``ICLR.cc/2024/Conference`` -> ("International Conference on Learning Representations", "ICLR", 2024);
    ``thecvf.com/ECCV/2024/Conference`` -> (None, "ECCV", 2024): the group before the year, without
    domain suffix, names the venue; the full name is known only for :data:`VENUE_NAMES`.
    """
    parts = [p for p in venue_id.split("/") if p]
    year_at = next((i for i, p in enumerate(parts) if re.fullmatch(r"(19|20)\d\d", p)), None)
    year = int(parts[year_at]) if year_at is not None else None
    # the group just before the year names the venue (ICLR.cc/2024/..., thecvf.com/ECCV/2024/...)
    head = parts[year_at - 1] if year_at else (parts[0] if parts else venue_id)
    abbreviation = re.sub(r"\.(cc|org|net|com|ai)$", "", head)
    return VENUE_NAMES.get(abbreviation), abbreviation, year


def decision_of(venue_id: str, venueid_value: str | None, venue_value: str | None) -> tuple[bool, str | None, str | None]:
    """(accepted, decision, presentation tier) from the note's ``content.venueid`` and ``content.venue``.

    ``venueid == venue_id`` -> accepted, decision "Accept (Poster)" from ``venue`` "ICLR 2025 Poster";
    ``.../Rejected_Submission`` -> "Reject"; ``Withdrawn_Submission`` -> "Withdrawn";
    ``Desk_Rejected_Submission`` -> "Desk Reject"; ``.../Submission`` -> "Pending"; else None.
    """
    venue_text = (venue_value or "").strip()
    tier = next((t for t in _TIERS if re.search(rf"\b{t}\b", venue_text, re.I)), None)
    if venueid_value and venueid_value == venue_id:
        return True, f"Accept ({tier.capitalize()})" if tier else "Accept", tier
    suffix = (venueid_value or "").rsplit("/", 1)[-1]
    if suffix == "Rejected_Submission":
        return False, "Reject", None
    if suffix == "Desk_Rejected_Submission":
        return False, "Desk Reject", None
    if suffix == "Withdrawn_Submission":
        return False, "Withdrawn", None
    if suffix == "Submission":
        return False, "Pending", None
    return False, None, None


def resolve_pdf_url(pdf: str | None, forum: str, site_url: str = OPENREVIEW_SITE_URL) -> str:
    """Public PDF URL: ``/pdf/<sha1>.pdf`` -> ``<site_url>/pdf/<sha1>.pdf``; absolute URLs kept;
    no ``content.pdf`` -> ``<site_url>/pdf?id=<forum>`` (served by OpenReview for every forum with a PDF).
    """
    if pdf and re.match(r"^https?://", pdf):
        return pdf
    if pdf:
        return site_url.rstrip("/") + "/" + pdf.lstrip("/")
    return f"{site_url.rstrip('/')}/pdf?id={forum}"


def _getter(note: Any) -> Any:
    """Field access for a note given as an ``openreview.api.Note`` or as its JSON dict."""
    return note.get if isinstance(note, dict) else lambda k: getattr(note, k, None)


def _note_updated(note: Any) -> datetime | None:
    """A note's last modification (``tmdate``, else ``mdate``/``tcdate``/``cdate``) in UTC: its watermark date."""
    get = _getter(note)
    return _ms_to_utc(get("tmdate") or get("mdate") or get("tcdate") or get("cdate"))


def note_to_paper(note: Any, venue_id: str, site_url: str = OPENREVIEW_SITE_URL) -> SourcePaper:
    """Map one API v2 note (an ``openreview.api.Note`` or its JSON dict) to a SourcePaper.

    Venue fields (conference_*, pub_year, volume) are set only for accepted papers; ``decision`` always
    when derivable. Errors: :class:`SourceError` naming the forum id (also as ``record_id``, with the
    note's date as ``updated``) when the note has no id or title or its authors are not a list.
    """
    get = _getter(note)
    note_id = get("id")
    forum = get("forum") or note_id
    content = get("content") or {}
    updated = _note_updated(note)
    if not forum:
        raise SourceError(SOURCE, f"{venue_id} note without id", "record missing id",
                          record_id="note without id", updated=updated)
    title = _value(content, "title")
    if not isinstance(title, str) or not title.strip():
        raise SourceError(SOURCE, f"{venue_id} forum {forum}", "record missing title", record_id=forum, updated=updated)
    authors = _value(content, "authors") or []
    if not isinstance(authors, list):
        raise SourceError(SOURCE, f"{venue_id} forum {forum}", f"authors is not a list: {authors!r}",
                          record_id=forum, updated=updated)
    authors = [" ".join(str(a).split()) for a in authors if str(a).strip()]
    venueid_value = _value(content, "venueid")
    venue_value = _value(content, "venue")
    accepted, decision, tier = decision_of(venue_id, venueid_value, venue_value)
    full, abbreviation, year = venue_names(venue_id)
    published = _ms_to_utc(get("pdate") or get("odate") or get("cdate") or get("tcdate"))
    keywords = _value(content, "keywords") or []
    if isinstance(keywords, str):
        keywords = [k.strip() for k in keywords.split(";") if k.strip()]
    title = " ".join(title.split())
    pdf_url = resolve_pdf_url(_value(content, "pdf"), forum, site_url)
    bibtex = _value(content, "_bibtex")
    if not bibtex and accepted:
        bibtex = format_bibtex(
            "inproceedings",
            bibtex_key(authors, year, title),
            {
                "title": title,
                "author": authors,
                "booktitle": f"{full or abbreviation} ({abbreviation} {year})" if year else full or abbreviation,
                "year": year,
                "url": f"{site_url.rstrip('/')}/forum?id={forum}",
            },
        )
    return SourcePaper(
        source=SOURCE,
        external_id=forum,
        title=title,
        authors=authors,
        abstract=" ".join(str(_value(content, "abstract") or "").split()) or None,
        pub_year=year if accepted else None,
        published=published,
        updated=updated,
        conference_full=full if accepted else None,
        conference_abbreviation=abbreviation if accepted else None,
        volume=tier if accepted else None,
        booktitle=venue_value if isinstance(venue_value, str) else None,
        bibtex=bibtex or None,
        pdf_url=pdf_url,
        openreview_id=forum,
        decision=decision,
        keywords=[str(k) for k in keywords],
    )


def fetch_openreview(
    venue_id: str,
    *,
    accepted_only: bool = True,
    since: datetime | None = None,
    baseurl: str = OPENREVIEW_API_URL,
    site_url: str = OPENREVIEW_SITE_URL,
    username: str | None = None,
    password: str | None = None,
    timeout: float = 60.0,
    num_retries: int = 3,
    backoff_seconds: float = 5.0,
    errors: list[SourceError] | None = None,
) -> tuple[list[SourcePaper], datetime | None]:
    """Fetch the papers of one OpenReview venue, modified after ``since``.

    Inputs: ``venue_id`` e.g. ``ICLR.cc/2024/Conference``; ``accepted_only`` (default) lists notes whose
    ``content.venueid`` is the venue id, else every note of ``<venue_id>/-/Submission``; ``since`` the
    stored watermark (UTC; compared with each note's ``tmdate``); ``baseurl`` the API v2 server
    (tests: a loopback server); ``site_url`` resolves relative PDF paths; ``username``/``password``
    optional (public venues need none; note openreview-py also reads ``OPENREVIEW_USERNAME`` /
    ``OPENREVIEW_PASSWORD`` from the environment); ``timeout`` seconds per request; ``num_retries``
    retries of the whole listing after a transport failure or truncated JSON (429/5xx are retried per
    request by openreview-py itself); ``errors``: if a list, bad notes are appended (as
    :class:`SourceError` with ``record_id`` = forum id and ``updated`` = the note's date) and skipped,
    otherwise the first raises.

    Output: ``(papers, watermark)``: one SourcePaper per forum, ordered by note id; ``watermark`` the
    largest ``tmdate`` seen, or ``since`` when nothing is newer; with bad notes skipped, never at or
    past the earliest of them (:func:`~neusym.ingest.sources.base.watermark_before_skipped`).

    Errors: :class:`SourceError` naming the venue (login refused, HTTP errors left after the library's
    retries, transport failures or truncated JSON after ``num_retries`` retries, a bad note).
    """
    import openreview  # imported here: the package is heavy and only needed for this source

    record = f"venue {venue_id}" + ("" if accepted_only else " (all submissions)")
    client = _make_client(openreview, baseurl, username, password, timeout, record)
    if accepted_only:
        query: dict[str, Any] = {"content": {"venueid": venue_id}}
    else:
        query = {"invitation": f"{venue_id}/-/Submission"}

    attempt = 0
    while True:
        try:
            notes = client.get_all_notes(**query)
            break
        except openreview.OpenReviewException as exc:
            raise SourceError(SOURCE, record, f"API error: {_api_message(exc)}") from exc
        except ValueError as exc:  # requests' JSONDecodeError: a truncated or non-JSON body
            reason = f"truncated or invalid JSON from {baseurl}/notes: {exc}"
        except (KeyError, TypeError, IndexError) as exc:  # JSON of an unexpected shape
            raise SourceError(SOURCE, record, f"unexpected /notes response shape: {exc!r}") from exc
        except _http.TRANSIENT_ERRORS as exc:
            reason = f"{type(exc).__name__}: {exc}"
        except requests.RequestException as exc:
            raise SourceError(SOURCE, record, f"{type(exc).__name__}: {exc}") from exc
        if attempt >= num_retries:
            raise SourceError(SOURCE, record, f"{reason} (gave up after {attempt + 1} attempts)")
        attempt += 1
        wait = _http.retry_wait(attempt, backoff_seconds)
        log.warning("openreview %s: %s; retry %d/%d in %.1fs", record, reason, attempt, num_retries, wait)
        _http.sleep(wait)

    papers: list[SourcePaper] = []
    seen: set[str] = set()
    skipped: list[datetime | None] = []
    for note in notes:
        try:
            paper = note_to_paper(note, venue_id, site_url)
        except SourceError as exc:
            _handle_bad(exc, errors)
            skipped.append(exc.updated)
            continue
        except ValueError as exc:  # pydantic validation of a malformed field
            get = _getter(note)
            forum = str(get("forum") or get("id") or "?")
            _handle_bad(SourceError(SOURCE, f"{venue_id} forum {forum}", "bad record: " + " ".join(str(exc).split()),
                                    record_id=forum, updated=_note_updated(note)), errors)
            skipped.append(_note_updated(note))
            continue
        if paper.external_id in seen:
            continue
        if since is not None and paper.updated is not None and paper.updated <= since:
            continue
        seen.add(paper.external_id)
        papers.append(paper)
    return papers, watermark_before_skipped(since, (p.updated for p in papers), skipped)


def _make_client(openreview: Any, baseurl: str, username: str | None, password: str | None, timeout: float, record: str) -> Any:
    """An ``OpenReviewClient`` with a per-request timeout, logged in when credentials are given."""
    try:
        client = openreview.api.OpenReviewClient(baseurl=baseurl)
        _http.mount_timeouts(client.session, timeout)
        if username or password:
            client.login_user(username, password)
    except openreview.OpenReviewException as exc:
        raise SourceError(SOURCE, record, f"login/setup failed: {_api_message(exc)}") from exc
    except requests.RequestException as exc:
        raise SourceError(SOURCE, record, f"login/setup failed: {type(exc).__name__}: {exc}") from exc
    return client


def _api_message(exc: Exception) -> str:
    """The ``message`` of an OpenReviewException's error dict (with its name/status when present)."""
    arg = exc.args[0] if exc.args else exc
    if isinstance(arg, dict):
        parts = [str(arg.get(k)) for k in ("status", "name", "message") if arg.get(k) is not None]
        return ": ".join(parts) or str(arg)
    return str(arg)


def _handle_bad(error: SourceError, errors: list[SourceError] | None) -> None:
    if errors is None:
        raise error
    log.warning("%s", error)
    errors.append(error)


class OpenReviewOptions(BaseModel):
    """A crawl of OpenReview: the ``venue_id`` (``ICLR.cc/2024/Conference``); ``accepted_only``."""

    model_config = ConfigDict(extra="forbid")

    venue_id: str | None = None
    accepted_only: bool = True


class OpenReviewSource:
    """OpenReview API v2 through ``openreview-py`` (:func:`fetch_openreview`); settings
    ``openreview_baseurl``, ``openreview_username``, ``openreview_password``, ``source_timeout_s``,
    ``source_retries``, ``source_backoff_s``."""

    name = "openreview"
    options = OpenReviewOptions

    def scope(self, options: OpenReviewOptions) -> str:
        return f"{options.venue_id}{'' if options.accepted_only else ' (all submissions)'}"

    def fetch(self, options: OpenReviewOptions, settings: Any, since: datetime | None,
              errors: list[SourceError] | None) -> tuple[list[SourcePaper], datetime | None]:
        if not options.venue_id:
            raise SourceError("openreview", "<config>", "venue_id is required")
        return fetch_openreview(options.venue_id, accepted_only=options.accepted_only, since=since,
                                baseurl=settings.openreview_baseurl, username=settings.openreview_username,
                                password=settings.openreview_password, backoff_seconds=settings.source_backoff_s,
                                timeout=settings.source_timeout_s, num_retries=settings.source_retries, errors=errors)


CRAWL_SOURCE = OpenReviewSource()

