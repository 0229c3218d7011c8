"""User-facing errors: one line that names the file, record and field, and a non-zero exit.

Everything the user can get wrong (a path, a schema, a config value) raises `HarnessError`;
entry points print `error: <message>` and exit 2 instead of a traceback.
"""

from __future__ import annotations


class HarnessError(Exception):
    """An error caused by input or configuration, reported as one line."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class DataError(HarnessError):
    """A dataset file is missing, corrupt, or does not match its schema."""


class ConfigError(HarnessError):
    """A configuration value is invalid (unknown aspect, bad label, impossible tau/delta...)."""


class CacheError(HarnessError):
    """A SQLite cache cannot be used as it is (corrupt, read-only, unopenable); says what to do."""


class JudgeInputError(HarnessError):
    """A request cannot be judged as asked (prompt longer than the context, label not one token)."""


class JudgeOutputError(HarnessError):
    """A judge returned no usable number (every answer NaN/inf): the run stops rather than report
    metrics of nothing."""


def located(path: object, record: object | None = None, field: str | None = None) -> str:
    """Format a location as 'file[, record R][, field F]' for error messages."""
    parts = [str(path)]
    if record is not None:
        parts.append(f"record {record}")
    if field is not None:
        parts.append(f"field {field!r}")
    return ", ".join(parts)
