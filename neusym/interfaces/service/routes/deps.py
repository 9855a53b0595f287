"""What several routers share: the app's :class:`ServiceState` as a FastAPI dependency and the
documented error responses."""

from __future__ import annotations

from typing import Any

from fastapi import Request

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


def service_state(request: Request) -> ServiceState:
    """The :class:`ServiceState` of the app answering ``request`` (``app.state.neusym``; inside
    another app, e.g. Airflow's api-server, the mounted app's own)."""
    return request.app.state.neusym
