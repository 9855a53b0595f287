"""Log lines on the terminal: neusym's own and the libraries' it loads, one level for both.

The level comes from ``--verbose`` (INFO), or ``NEUSYM_LOG_LEVEL`` (``DEBUG``, ``INFO``, ``WARNING``
— the default — or ``ERROR``). Below INFO, third-party libraries that attach their own handlers when a
model loads (rapid-table's and rapid-layout's coloured "File exists and is valid: ..." lines, onnxruntime's
hints) stay quiet; ``--verbose`` brings them back. The level is also put in the environment so the
parse worker processes (spawned, not forked) log at the same level.
"""

from __future__ import annotations

import logging
import os
import sys

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
ENV = "NEUSYM_LOG_LEVEL"


def level_name(level: str | None = None) -> str:
    """The level in force: ``level``, else ``$NEUSYM_LOG_LEVEL``, else ``WARNING``. Raises ValueError
    naming the setting for anything else than :data:`LEVELS` (case-insensitive)."""
    name = (level or os.environ.get(ENV) or "WARNING").strip().upper()
    if name not in LEVELS:
        raise ValueError(f"{ENV}={name!r}: not a log level (use one of {', '.join(LEVELS)})")
    return name


def configure(level: str | None = None) -> str:
    """Send log records at ``level`` (:func:`level_name`) and above to stderr as ``LEVEL name: message``,
    once per process (a handler already on the root logger is kept), and export the level in
    ``$NEUSYM_LOG_LEVEL`` for child processes. Returns the level's name."""
    name = level_name(level)
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(name)
    os.environ[ENV] = name
    return name


def verbose() -> bool:
    """True when INFO lines are wanted (``--verbose`` or ``NEUSYM_LOG_LEVEL`` INFO/DEBUG)."""
    try:
        return LEVELS.index(level_name()) <= LEVELS.index("INFO")
    except ValueError:
        return False


__all__ = ["ENV", "LEVELS", "configure", "level_name", "verbose"]
