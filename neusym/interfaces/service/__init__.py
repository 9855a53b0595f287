"""The query layer as a service: ``neusym serve`` (FastAPI + uvicorn), a web page, and the same app
mounted in Airflow's api-server by ``plugins/neusym_plugin.py``. See ``docs/service.md``."""

from __future__ import annotations

from neusym.interfaces.service.app import create_app
from neusym.interfaces.service.runner import main

__all__ = ["create_app", "main"]
