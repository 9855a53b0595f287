"""``neusym serve``: one long-lived uvicorn process serving :func:`neusym.service.app.create_app`."""

from __future__ import annotations

import copy
import logging

from ..settings import Settings


def main(host: str = "127.0.0.1", port: int = 8000, *, settings: Settings | None = None,
         log_level: str = "info", workers: int = 1) -> None:
    """Serve the API and the web page on ``host``:``port`` until interrupted (Ctrl-C / SIGTERM).

    One process per worker (``workers``, default 1), each with one event loop; blocking work runs in
    the app's thread pools. Search is CPU-bound Python, so one process serves at most one core:
    ``workers`` = cores spreads concurrent clients over the cores, at the cost of one query encoder
    and one opened version per process (``benchmarks/service_load.py --workers``). With ``workers`` > 1 each process reads its
    settings from the environment (``NEUSYM_HOME`` ...), not from ``settings``. The current corpus
    version of ``settings.home`` is opened and the query encoder warmed before the port accepts
    requests, so the first request is as fast as the others; new versions are followed without a
    restart. Raises ``OSError`` when the port cannot be bound (uvicorn exits with a message).
    """
    import uvicorn

    from .app import create_app

    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if workers > 1:  # worker processes are spawned: they log through uvicorn's config, so neusym's logger joins it
        log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
        log_config["loggers"]["neusym"] = {"handlers": ["default"], "level": log_level.upper(), "propagate": False}
        uvicorn.run("neusym.service.app:create_app", factory=True, workers=workers, host=host, port=port,
                    log_level=log_level, log_config=log_config, access_log=False, timeout_graceful_shutdown=5,
                    server_header=False)
        return
    app = create_app(settings or Settings())
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False, timeout_graceful_shutdown=5,
                server_header=False)
