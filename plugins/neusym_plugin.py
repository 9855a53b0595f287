"""Airflow 3 plugin: the neusym service (paper search, Ask, SQL, page images) inside Airflow's api-server.

- ``fastapi_apps`` mounts :func:`neusym.interfaces.service.create_app` at ``/neusym`` in the api-server (the
  same app ``neusym serve`` runs; it follows new corpus versions published by the DAGs of this
  deployment's ``NEUSYM_HOME`` without a restart).
- ``external_views`` adds "Paper search" to the Airflow UI's Browse menu; the page opens inside
  the UI (an iframe on ``/neusym/``, same origin).
- Protection: Airflow mounts plugin apps with ``app.mount()``, and a mounted app inherits none of
  the core API's authentication. So every route of this app but ``/healthz`` and the static
  JS/CSS requires Airflow's own dependency ``requires_access_view(AccessView.PLUGINS)``: the
  caller must present Airflow's JWT — ``Authorization: Bearer <token from POST /auth/token>`` or
  the UI's ``_token`` session cookie (which the iframe sends) — and the auth manager must allow the
  user to see plugin views (SimpleAuthManager: the viewer role and up). Missing or expired
  credentials are 401, an invalid token or a user without that permission 403. If Airflow's
  security module cannot be imported, the app fails closed (every protected route answers 503).

Enable it with ``AIRFLOW__CORE__PLUGINS_FOLDER=<repo>/plugins`` (or copy this file into the deployment's
plugins folder); the api-server needs the same ``NEUSYM_HOME`` (and settings) as the DAGs.
"""

from __future__ import annotations

import logging

from airflow.plugins_manager import AirflowPlugin

log = logging.getLogger(__name__)

URL_PREFIX = "/neusym"


def _airflow_auth():
    """Airflow's authentication + authorization dependency for the plugin's routes (fails closed)."""
    try:
        from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
        from airflow.api_fastapi.core_api.security import requires_access_view

        return requires_access_view(AccessView.PLUGINS)
    except Exception as exc:  # noqa: BLE001 - an Airflow without these APIs must not expose the app
        log.error("neusym plugin: Airflow's authentication is unavailable (%s); the paper search is disabled", exc)
        reason = f"{type(exc).__name__}: {exc}"

        def deny() -> None:
            from fastapi import HTTPException

            raise HTTPException(503, detail=f"paper search disabled: Airflow authentication unavailable ({reason})")

        return deny


def _service_app():
    from neusym.interfaces.service import create_app

    # no lifespan inside a mounted app: the corpus version is opened by the first request
    return create_app(auth=_airflow_auth(), protect_page=True, warm_on_start=False)


class NeusymPlugin(AirflowPlugin):
    """Paper search over the current corpus version, inside the Airflow api-server and UI."""

    name = "neusym"
    fastapi_apps = [{"app": _service_app(), "url_prefix": URL_PREFIX, "name": "neusym paper search"}]
    external_views = [{
        "name": "Paper search",
        "href": URL_PREFIX.lstrip("/") + "/",  # relative to the UI's <base href>, so a base_url sub-path works
        "destination": "nav",
        "category": "browse",
        "url_route": "paper-search",
    }]
