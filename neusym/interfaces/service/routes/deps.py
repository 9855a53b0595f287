"""What several routers share: the app's :class:`ServiceState` as a FastAPI dependency and the
documented error responses."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request

from neusym.interfaces.service.models import ErrorResponse
from neusym.interfaces.service.state import ServiceState

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Malformed or refused input."},
    401: {"model": ErrorResponse, "description": "API key (or Airflow login) missing or not valid."},
    404: {"model": ErrorResponse, "description": "Unknown paper or page."},
    422: {"model": ErrorResponse, "description": "Invalid parameter or body field."},
    503: {"model": ErrorResponse, "description": "No corpus version published yet."},
}
"""The error responses every endpoint documents (the app's ``responses``)."""


QueryText = Annotated[str, Query(min_length=1, max_length=1000, description="A question or keywords.")]
Venue = Annotated[str | None, Query(max_length=64, description="Conference abbreviation (acl, emnlp, ...) "
                                    "or 'findings' (Findings volumes of any conference).")]
Year = Annotated[int | None, Query(ge=1900, le=2100, description="Publication year.")]
Author = Annotated[str | None, Query(max_length=200, description="Author full name or last name.")]
Limit = Annotated[int, Query(ge=1, le=100, description="Papers returned.")]
"""The query parameters ``GET /search`` and its exports share (one declaration, one OpenAPI text)."""


def service_state(request: Request) -> ServiceState:
    """The :class:`ServiceState` of the app answering ``request`` (``app.state.neusym``; inside
    another app, e.g. Airflow's api-server, the mounted app's own)."""
    return request.app.state.neusym
