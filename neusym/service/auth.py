"""Optional API keys of the standalone service (``NEUSYM_API_KEYS``, a JSON list).

When keys are configured, every endpoint but ``/healthz``, the web page and its static files, and
the OpenAPI documents needs one, as ``X-API-Key: KEY`` or ``Authorization: Bearer KEY``. Keys are
compared in constant time. Inside Airflow the plugin uses Airflow's own authentication instead
(``plugins/neusym_plugin.py``).
"""

from __future__ import annotations

import hmac
from typing import Callable

from fastapi import HTTPException, Security, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

API_KEY_HEADER = "X-API-Key"
_api_key_header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False,
                               description="One of the keys in NEUSYM_API_KEYS (when keys are configured).")
_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <one of the keys in NEUSYM_API_KEYS>.")


def api_key_dependency(keys: list[str] | tuple[str, ...]) -> Callable:
    """A FastAPI dependency that accepts a request carrying one of ``keys`` (``X-API-Key`` header or
    ``Authorization: Bearer``) and raises HTTP 401 with a clear message otherwise. With no keys
    every request is accepted (the service is then open, as documented)."""
    wanted = [k.encode("utf-8") for k in keys if k]

    async def require_api_key(header: str | None = Security(_api_key_header),
                              bearer: HTTPAuthorizationCredentials | None = Security(_bearer)) -> None:
        if not wanted:
            return
        presented = header or (bearer.credentials if bearer is not None else None)
        if not presented:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                detail=f"an API key is required: send it as '{API_KEY_HEADER}: KEY' or 'Authorization: Bearer KEY'",
                headers={"WWW-Authenticate": "Bearer"},
            )
        given = presented.encode("utf-8")
        if not any(hmac.compare_digest(given, key) for key in wanted):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="the API key is not valid",
                                headers={"WWW-Authenticate": "Bearer"})

    return require_api_key
