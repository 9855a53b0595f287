"""Optional API keys of the standalone service (``NEUSYM_API_KEYS``, a JSON list).

When keys are configured, every endpoint but ``/healthz``, the web page and its static files, and
the OpenAPI documents (``/openapi.json``, ``/docs``) needs one, as ``X-API-Key: KEY``,
``Authorization: Bearer KEY``, or HTTP Basic authentication with the key as the password (feed
readers subscribing to ``/feeds/NAME.atom``); ``/healthz`` then leaves out the server's process id unless the
caller sends a valid key. With no keys every endpoint is open (bind to 127.0.0.1). Keys are compared
in constant time. Settings fail closed: an empty key, or one with leading or trailing whitespace,
stops the server at start with a message naming ``NEUSYM_API_KEYS`` (an empty key would otherwise
leave the service open, and a padded one could never match). Inside Airflow the plugin uses
Airflow's own authentication instead (``plugins/neusym_plugin.py``).
"""

from __future__ import annotations

import hmac
from typing import Callable, Mapping

from fastapi import HTTPException, Request, Security, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBasic, HTTPBasicCredentials, HTTPBearer

from neusym.errors import NeusymError

API_KEY_HEADER = "X-API-Key"
_api_key_header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False,
                               description="One of the keys in NEUSYM_API_KEYS (when keys are configured).")
_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <one of the keys in NEUSYM_API_KEYS>.")
_basic = HTTPBasic(auto_error=False, description="HTTP Basic with one of the keys in NEUSYM_API_KEYS as the "
                   "password (any user name): what feed readers send.")


class SettingsError(NeusymError):
    """A setting that would make the service less safe than asked for (the message names the variable)."""


def checked_keys(keys: list[str] | tuple[str, ...] | None) -> list[str]:
    """The API keys of ``NEUSYM_API_KEYS`` after checking them; raises :class:`SettingsError` for an
    entry that is not a string, empty, or has leading/trailing whitespace (keys are never printed)."""
    out = []
    for i, key in enumerate(keys or [], start=1):
        where = f"NEUSYM_API_KEYS: key {i} of {len(keys or [])}"
        if not isinstance(key, str):
            raise SettingsError(f"{where} is not a string")
        if not key.strip():
            raise SettingsError(f"{where} is empty or only whitespace; remove it or set a real key (an empty key "
                                "would leave the service open)")
        if key != key.strip():
            raise SettingsError(f"{where} has leading or trailing whitespace, which no client sends; remove it")
        out.append(key)
    return out


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request carries: ``X-API-Key``, else the token of ``Authorization: Bearer``, else the
    password of ``Authorization: Basic`` (what feed readers send for ``https://any:KEY@host/feeds/NAME.atom``;
    the user name is ignored). A malformed Basic value carries no key."""
    header = headers.get(API_KEY_HEADER.lower()) or headers.get(API_KEY_HEADER)
    if header:
        return header
    auth = headers.get("authorization") or headers.get("Authorization") or ""
    scheme, _, token = auth.partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        return token
    if scheme.lower() == "basic" and token:
        import base64
        import binascii

        try:
            _user, sep, password = base64.b64decode(token, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return password if sep and password else None
    return None


def key_is_valid(presented: str | None, keys: list[str]) -> bool:
    """Whether ``presented`` equals one of ``keys`` (constant-time comparison); True when there are no keys."""
    if not keys:
        return True
    if not presented:
        return False
    given = presented.encode("utf-8")
    return any(hmac.compare_digest(given, key.encode("utf-8")) for key in keys)


def api_key_dependency(keys: list[str] | tuple[str, ...]) -> Callable:
    """A FastAPI dependency that accepts a request carrying one of ``keys`` (``X-API-Key`` header,
    ``Authorization: Bearer``, or HTTP Basic with the key as password) and raises HTTP 401 with a clear
    message otherwise; the challenge is ``Bearer``, or ``Basic`` on the Atom feeds (``/feeds/...``), which
    makes a feed reader send the key of its subscription URL. With no keys every request is accepted (the
    service is then open, as documented). Raises :class:`SettingsError` for keys :func:`checked_keys` refuses."""
    wanted = checked_keys(list(keys))

    async def require_api_key(request: Request, header: str | None = Security(_api_key_header),
                              bearer: HTTPAuthorizationCredentials | None = Security(_bearer),
                              basic: HTTPBasicCredentials | None = Security(_basic)) -> None:
        if not wanted:
            return
        challenge = 'Basic realm="neusym feeds"' if "/feeds/" in request.url.path else "Bearer"
        presented = header or (bearer.credentials if bearer is not None else None) or (
            basic.password if basic is not None and basic.password else None)
        if not presented:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                detail=f"an API key is required: send it as '{API_KEY_HEADER}: KEY' or 'Authorization: Bearer KEY'"
                       + (" (feed readers: https://any:KEY@host/feeds/NAME.atom)" if challenge != "Bearer" else ""),
                headers={"WWW-Authenticate": challenge},
            )
        if not key_is_valid(presented, wanted):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="the API key is not valid",
                                headers={"WWW-Authenticate": challenge})

    return require_api_key
