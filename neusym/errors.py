"""Exceptions with a clear message naming the file or record and the reason."""

from __future__ import annotations

from pathlib import Path


class NeusymError(Exception):
    """Base class of all errors raised on purpose by neusym."""


class UnparseablePDF(NeusymError):
    """A PDF that cannot be parsed (corrupt, encrypted, no text layer...). The run quarantines it and continues."""

    def __init__(self, path: Path | str, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class NoInputError(NeusymError):
    """The inputs given to a run hold nothing to process (a folder without PDFs, a file without records)."""


class StagingError(NeusymError):
    """A staged per-paper result is missing or malformed."""


class UnsafeSQLError(NeusymError):
    """A SQL statement that is not a read-only query (write, ATTACH, COPY, INSTALL/LOAD, PRAGMA, file access...)."""


class SQLError(NeusymError):
    """A read-only query that DuckDB rejected (syntax error, unknown table or column, type error...)."""


class SQLTimeoutError(NeusymError):
    """A SQL statement ran longer than the configured limit and was interrupted."""


class SQLResourceError(SQLError):
    """A read-only query that needed more memory or temporary disk space than its budget; it was stopped."""


class BusyError(NeusymError):
    """Every slot of a bounded resource (SQL workers, the LLM) is taken and the wait for one ran out.

    ``retry_after_s``: when a client should try again (the service sends it as ``Retry-After``)."""

    def __init__(self, message: str, retry_after_s: int = 5):
        super().__init__(message)
        self.retry_after_s = int(retry_after_s)


class ModelFileError(NeusymError):
    """An offline model file is missing or fails its checksum."""


class ActionError(NeusymError):
    """An agent action with invalid arguments; the message becomes the observation."""
