"""``neusym serve``: one long-lived uvicorn process serving :func:`neusym.service.app.create_app`."""

from __future__ import annotations

import logging

from ..settings import Settings


def main(host: str = "127.0.0.1", port: int = 8000, *, settings: Settings | None = None,
         log_level: str = "info") -> None:
    """Serve the API and the web page on ``host``:``port`` until interrupted (Ctrl-C / SIGTERM).

    One process, one event loop; blocking work runs in the app's thread pools. The current corpus
    version of ``settings.home`` is opened and the query encoder warmed before the port accepts
    requests, so the first request is as fast as the others; new versions are followed without a
    restart. Raises ``OSError`` when the port cannot be bound (uvicorn exits with a message).
    """
    import uvicorn

    from .app import create_app

    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings or Settings())
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False, timeout_graceful_shutdown=5,
                server_header=False)
