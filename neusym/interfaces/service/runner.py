"""``neusym serve``: long-lived uvicorn process(es) serving :func:`neusym.interfaces.service.app.create_app`.

With one worker (the default) the server is a single uvicorn process. With ``workers`` > 1 this
module runs its own small supervisor instead of uvicorn's: each worker process binds its *own*
listening socket on the same port with ``SO_REUSEPORT``, so the kernel spreads incoming connections
over the workers. (uvicorn's supervisor shares one listening socket between its workers, and
whichever worker wakes first accepts a whole burst of connections: 8 keep-alive clients all landed
on one worker while the other stayed idle, measured with ``benchmarks/service_load.py``.)
"""

from __future__ import annotations

import copy
import logging
import multiprocessing
import signal
import socket
import time
from typing import Any

from neusym.settings import Settings

logger = logging.getLogger(__name__)

APP_FACTORY = "neusym.interfaces.service.app:create_app"
MAX_HEADER_BYTES = 64 * 1024
"""Largest request line + headers accepted; a larger request is answered 400 by uvicorn."""


def uvicorn_options() -> dict:
    """The uvicorn settings of every neusym server (``neusym serve``, its workers, the tests' servers):
    the h11 parser, which bounds the request line and headers at :data:`MAX_HEADER_BYTES` (httptools
    buffers headers of any size), no access log, no ``Server`` header, 5 s graceful shutdown."""
    return {"http": "h11", "h11_max_incomplete_event_size": MAX_HEADER_BYTES, "access_log": False,
            "server_header": False, "timeout_graceful_shutdown": 5}

BACKLOG = 2048
STOP_WAIT_S = 10.0


def main(host: str = "127.0.0.1", port: int = 8000, *, settings: Settings | None = None,
         log_level: str = "info", workers: int = 1) -> None:
    """Serve the API and the web page on ``host``:``port`` until interrupted (Ctrl-C / SIGTERM).

    One process per worker (``workers``, default 1), each with one event loop; blocking work runs in
    the app's thread pools. Search is CPU-bound Python, so one process serves at most one core:
    ``workers`` = cores spreads concurrent clients over the cores, at the cost of one query encoder
    and one opened version per process (``benchmarks/service_load.py --workers``). With ``workers``
    > 1 each worker binds its own ``SO_REUSEPORT`` socket (see the module docstring), reads its
    settings from the environment (``NEUSYM_HOME`` ...), not from ``settings``, and a worker that
    dies after it started is restarted. The current corpus version of ``settings.home`` is opened
    and the query encoder warmed before the port accepts requests, so the first request is as fast
    as the others; new versions are followed without a restart. Raises ``OSError`` when the port
    cannot be bound (already in use, permission); raises ``SystemExit(1)`` when a worker process
    exits before it accepted requests (e.g. its app failed to start; the other workers are stopped).
    """
    import uvicorn

    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO),  # the server's own level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)  # not the CLI's
    if workers > 1:
        _supervise(host, port, workers, log_level)
        return
    from neusym.interfaces.service.app import create_app

    app = create_app(settings or Settings())
    uvicorn.run(app, host=host, port=port, log_level=log_level, **uvicorn_options())


def listening_socket(host: str, port: int, *, backlog: int | None = BACKLOG, reuse_port: bool = True) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` with ``SO_REUSEADDR`` and (``reuse_port``)
    ``SO_REUSEPORT`` set, listening (IPv6 when ``host`` contains a colon); ``backlog=None``: bound
    only, not listening. Every worker makes its own; the kernel balances new connections across
    them. Raises ``OSError`` (e.g. the port is held by a process that did not set ``SO_REUSEPORT``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        if backlog is not None:
            sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def _log_config(log_level: str) -> dict:
    """uvicorn's logging config with neusym's logger attached (spawned workers log through it)."""
    import uvicorn

    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["loggers"]["neusym"] = {"handlers": ["default"], "level": log_level.upper(), "propagate": False}
    return config


def _worker(host: str, port: int, log_level: str, ready: Any) -> None:
    """One worker process: its own SO_REUSEPORT socket, one uvicorn server on the app factory;
    ``ready`` (an Event) is set once the server accepts requests (the version is open by then)."""
    import threading

    import uvicorn

    sock = listening_socket(host, port)
    config = uvicorn.Config(APP_FACTORY, factory=True, host=host, port=port, log_level=log_level,
                            log_config=_log_config(log_level), **uvicorn_options())
    server = uvicorn.Server(config)

    def report_ready() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.05)
        if server.started:
            ready.set()

    threading.Thread(target=report_ready, daemon=True).start()
    # uvicorn handles SIGINT (Ctrl-C reaches the whole process group) and SIGTERM (what the
    # supervisor sends) the same way: finish open requests, then exit
    server.run(sockets=[sock])


def _supervise(host: str, port: int, workers: int, log_level: str) -> None:
    # fail fast and clearly when anything listens on the port, another `neusym serve --workers` too:
    # a plain bind (no SO_REUSEPORT) fails then, where the workers' SO_REUSEPORT binds would join it
    listening_socket(host, port, backlog=None, reuse_port=False).close()
    ctx = multiprocessing.get_context("spawn")
    stopping = False

    def stop(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    procs: list[tuple[Any, Any]] = []

    def start() -> tuple[Any, Any]:
        ready = ctx.Event()
        p = ctx.Process(target=_worker, args=(host, port, log_level, ready), name="neusym-serve-worker",
                        daemon=False)
        p.start()
        logger.info("started worker process %s", p.pid)
        return p, ready

    failed = False
    try:
        procs = [start() for _ in range(workers)]
        logger.info("supervisor %s: %d workers on http://%s:%d (SO_REUSEPORT)", multiprocessing.current_process().pid,
                    workers, host, port)
        while not stopping:
            time.sleep(0.2)
            for i, (p, ready) in enumerate(procs):
                if p.is_alive() or stopping:
                    continue
                if not ready.is_set():
                    logger.error("worker process %s exited during start-up (exit code %s); stopping", p.pid,
                                 p.exitcode)
                    failed = stopping = True
                    break
                logger.warning("worker process %s exited (exit code %s); starting a new one", p.pid, p.exitcode)
                procs[i] = start()
    finally:
        for p, _ in procs:
            if p.is_alive():
                p.terminate()  # SIGTERM: uvicorn finishes open requests (timeout_graceful_shutdown)
        deadline = time.monotonic() + STOP_WAIT_S
        for p, _ in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                logger.warning("worker process %s did not stop in %.0f s; killing it", p.pid, STOP_WAIT_S)
                p.kill()
                p.join()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if failed:
        raise SystemExit(1)
