"""The one place for files the harness writes and reads back: atomic JSON/JSONL writes, located
JSON reads, and the SQLite opener behind the request and completion caches.

Atomic writes go through a temporary file and `os.replace`, so a crash or SIGKILL leaves the old
file or the new one, never half of one. Reads turn every problem into one DataError line naming
the file (and the line, for JSON errors).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import DataError


def jsonable(v: Any) -> Any:
    """`v` with NaN as null, +-inf as strings and numpy scalars as Python numbers (strict JSON)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else str(v)
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    if hasattr(v, "item"):
        return v.item()
    return v


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write JSON through a temporary file and os.replace: a crash leaves old or new, never half."""
    path = Path(path)
    tmp = _tmp(path)
    tmp.write_text(json.dumps(jsonable(obj), indent=2, sort_keys=False, allow_nan=False) + "\n")
    os.replace(tmp, path)


def write_jsonl_atomic(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """One JSON object per line, written atomically like write_json_atomic."""
    path = Path(path)
    tmp = _tmp(path)
    with tmp.open("w") as f:
        for r in rows:
            f.write(json.dumps(jsonable(r), allow_nan=False) + "\n")
    os.replace(tmp, path)


def write_text_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    tmp = _tmp(path)
    tmp.write_text(text)
    os.replace(tmp, path)


def read_json(path: str | Path) -> Any:
    """One JSON document; a missing, non-UTF-8 or invalid file is one DataError naming it."""
    path = Path(path)
    if not path.is_file():
        raise DataError("file not found", where=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"not UTF-8 text ({e.reason} at byte {e.start})", where=str(path)) from None
    except OSError as e:
        raise DataError(f"cannot read ({e.strerror})", where=str(path)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}", where=str(path)) from None


def open_sqlite(path: str | Path, schema: str) -> sqlite3.Connection:
    """A WAL-mode connection shared across threads (callers lock), with `schema` created.

    WAL keeps every committed transaction through a crash or SIGKILL, and lets a second process
    (a resumed or sharded job) read while another writes.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=60, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(schema)
    db.commit()
    return db
