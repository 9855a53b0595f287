"""The query layer as a service: ``neusym serve`` (FastAPI + uvicorn), a web page, and the same app
mounted in Airflow's api-server by ``plugins/neusym_plugin.py``. See ``docs/service.md``."""

from __future__ import annotations

from .app import create_app
from .runner import main

__all__ = ["create_app", "main"]
