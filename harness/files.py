"""The one place for files the harness writes and reads back: atomic JSON/JSONL writes, located
reads (text, JSON), and the SQLite opener behind the request and completion caches, with its
one-line errors (a corrupt cache is never trusted: the error prints the command that moves it aside).

Atomic writes go through a temporary file and `os.replace`, so a crash or SIGKILL leaves the old
file or the new one, never half of one; the file is fsynced before the rename and its folder after
(as SQLite and git do), so a node crash or power loss does too. Not fsynced: the per-chunk work
the request cache already makes resumable (its WAL commits, attempts.jsonl's lines) and figures.
Reads turn every problem into one DataError line naming the file (and the line, for JSON errors).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import math
import os
import re
import shlex
import sqlite3
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from harness.errors import CacheError, DataError, located

log = logging.getLogger(__name__)

DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""No space left, quota exceeded, file too large (RLIMIT_FSIZE): the disk is full for this run."""


def disk_full(exc: BaseException | None) -> OSError | None:
    """The OSError saying the disk is full behind `exc` (itself, or its cause/context), or None."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL:
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


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


@contextlib.contextmanager
def _atomic(path: str | Path) -> Iterator[TextIO]:
    """An open temporary file next to `path` that replaces it when the block ends; removed when the
    block fails (a full disk, a folder where the file should be), so no `.NAME.tmp-PID` is left
    behind. The data reaches the disk before the rename and the rename after it (fsync of the file,
    then of its folder), so a crash of the machine leaves the old file or the new one, never an
    empty one."""
    path = Path(path)
    tmp = _tmp(path)
    try:
        with tmp.open("w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_folder(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def fsync_folder(folder: str | Path) -> None:
    """Make a rename (or a new file) in `folder` durable; a filesystem that cannot fsync a folder
    (EINVAL on some network filesystems) orders its renames itself."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    finally:
        os.close(fd)


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write JSON through a temporary file and os.replace: a crash leaves old or new, never half."""
    with _atomic(path) as f:
        f.write(json.dumps(jsonable(obj), indent=2, sort_keys=False, allow_nan=False) + "\n")


def write_jsonl_atomic(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """One JSON object per line, written atomically like write_json_atomic."""
    with _atomic(path) as f:
        f.write("".join(_json_line(r) for r in rows))


_STRICT = json.JSONEncoder(allow_nan=False)
"""json.dumps(row, allow_nan=False) without building an encoder per row."""


def _json_line(row: Any) -> str:
    """One strict JSON line; `jsonable` (slow) only for a row json cannot write as it is (NaN,
    infinities, numpy integers): the same text either way, and plain rows skip its walk."""
    try:
        return _STRICT.encode(row) + "\n"
    except (TypeError, ValueError):
        return json.dumps(jsonable(row), allow_nan=False) + "\n"


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What a spreadsheet reads as the start of a formula in a CSV cell (OWASP, CSV injection)."""


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a string starting like a formula (`=`, `+`, `-`,
    `@`, tab, carriage return) and that is not a number gets a leading `'`, as OWASP advises
    (`+1+cmd|calc` -> `'+1+cmd|calc`); numbers (`-0.25`, `-inf`) and other values are unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        try:
            float(value)
        except ValueError:
            return "'" + value
    return value


def write_text_atomic(path: str | Path, text: str) -> None:
    with _atomic(path) as f:
        f.write(text)


MAX_INT_DIGITS = 300
"""Longer JSON integers are refused: past 308 digits float() overflows, past 4,300 int() refuses."""


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def loads_json(text: str) -> Any:
    """json.loads that turns every way a text can break it (bad syntax, an integer too long for a
    number, nesting deeper than Python's recursion limit) into a ValueError with one-line text."""
    try:
        obj = json.loads(text, parse_int=_int)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except RecursionError:
        raise ValueError("not usable JSON: nested too deeply") from None
    except ValueError as e:
        raise ValueError(f"not usable JSON: {e}") from None
    if _SURROGATE.search(text):  # valid JSON, but no text: a tokenizer fails on it with a traceback
        _refuse_lone_surrogates(obj)
    return obj


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""A \\uD800-\\uDFFF escape: half of a surrogate pair, or a lone one (which is not Unicode)."""


def _refuse_lone_surrogates(obj: Any, key: str | None = None) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _refuse_lone_surrogates(k, key)
            _refuse_lone_surrogates(v, str(k))
    elif isinstance(obj, list):
        for v in obj:
            _refuse_lone_surrogates(v, key)
    elif isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"a lone surrogate \\u{ord(obj[e.start]):04x} in "
                f"{'field ' + repr(key) if key else 'a string'} (half of a UTF-16 pair, not a character); "
                "remove it or write the whole character"
            ) from None


def check_readable(path: str | Path) -> Path:
    """`path` if it is a readable file, else one DataError naming it and what is wrong."""
    path = Path(path)
    if path.is_dir():
        raise DataError("is a folder, not a file; name the file itself", where=str(path))
    if not path.is_file():
        raise DataError("file not found", where=str(path))
    if not os.access(path, os.R_OK):
        raise DataError(
            "cannot read it (permission denied); make it readable (chmod u+r) or copy it somewhere readable",
            where=str(path),
        )
    return path


def read_text(path: str | Path) -> str:
    """A UTF-8 text file; missing, a folder, unreadable or not UTF-8 is one DataError naming it."""
    path = check_readable(path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"not UTF-8 text ({e.reason} at byte {e.start})", where=str(path)) from None
    except OSError as e:
        raise DataError(
            f"cannot read it ({e.strerror}); check the file and its disk", where=str(path)
        ) from None


def read_json(path: str | Path) -> Any:
    """One JSON document; a missing, unreadable, non-UTF-8 or invalid file is one DataError naming it."""
    text = read_text(path)
    try:
        return loads_json(text)
    except ValueError as e:
        raise DataError(str(e), where=str(path)) from None


def read_json_object(path: str | Path, fix: str) -> dict:
    """read_json of a file that must hold a JSON object (a run's results.json, config.json); an
    array or a number there is one DataError naming the file and saying `fix`."""
    obj = read_json(path)
    if not isinstance(obj, dict):
        got = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(obj), "a number"
        )
        raise DataError(f"holds {got}, not a JSON object; {fix}", where=str(path))
    bad = _non_finite(obj) if _any_non_finite(obj) else None
    if bad is not None:  # the harness writes NaN as null and infinities as strings (`jsonable`)
        raise DataError(
            f"holds {bad[1]}, which strict JSON has no number for (not written by the harness); {fix}",
            where=located(path, None, bad[0]),
        )
    return obj


def _any_non_finite(obj: Any) -> bool:
    """Whether a parsed JSON value holds a NaN or an infinity anywhere (no field names built: a
    sweep's results.json files are read hundreds of times)."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _non_finite(obj: Any, key: str = "") -> tuple[str, float] | None:
    """(dotted field, value) of the first NaN or infinity in a parsed JSON value, else None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return key, obj
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        found = _non_finite(v, f"{key}.{k}" if key else str(k))
        if found is not None:
            return found
    return None


def why_not_folder(folder: str | Path, e: OSError) -> str:
    """Why `folder` could not be created: the OS reason, or the file standing where a folder must be."""
    for parent in (Path(folder), *Path(folder).parents):
        if parent.exists() and not parent.is_dir():
            return f"{parent} is a file, not a folder"
    return e.strerror or str(e)


NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL}
"""What fcntl's lock calls raise on a filesystem without locking (Lustre mounted without flock, an
NFS without its lock daemon): SQLite's shared (WAL) mode cannot work there."""


def locks_work(folder: Path) -> bool:
    """Whether the filesystem of `folder` grants POSIX record locks (SQLite's locking, WAL's
    included), probed on a scratch file there. True when it cannot tell (the folder not writable:
    SQLite's own error says so)."""
    probe = folder / f".harness-lock-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return True
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_UN)
    except OSError as e:
        return e.errno not in NO_LOCKS
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            probe.unlink()
    return True


def open_sqlite(path: str | Path, schema: str, *, own_file: bool = False) -> sqlite3.Connection:
    """A WAL-mode connection shared across threads (callers lock), with `schema` created.

    WAL keeps every committed transaction through a crash or SIGKILL, and lets a second process
    (a resumed or sharded job) read while another writes. Before any row is trusted the file is
    checked: `PRAGMA quick_check` (docs/benchmarks.md times it) and a rolled-back write. A corrupt,
    read-only or unopenable cache is one CacheError naming the file and what to do — for a corrupt
    one, the command that moves it aside; nothing is deleted or replaced behind the user's back. So
    is a table whose columns are not `schema`'s (another harness version's layout), at once rather
    than at the first write.

    WAL needs file locks, probed first (`locks_work`). Where the filesystem refuses them, a file
    that is this process's alone (`own_file`: a sweep job's own cache) opens without locking and
    without WAL (`lockless`: a rollback journal, just as crash-safe, for one writer); a file others
    may share is one CacheError naming HARNESS_CACHE and node-local disk.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CacheError(
            f"cannot create its folder ({why_not_folder(path.parent, e)}); set cache.path=... to a "
            "writable place (or cache.enabled=false)",
            where=str(path),
        ) from None
    if path.is_dir():
        raise CacheError("is a folder, not a SQLite file; set cache.path=... to a file path", where=str(path))
    lockless = not locks_work(path.parent)
    if lockless and not own_file:
        raise CacheError(
            "is on a filesystem that refuses file locks (Lustre without flock, NFS without locking), which "
            "a cache shared between processes needs: set HARNESS_CACHE (or cache.path=...) to node-local "
            "disk (e.g. $TMPDIR), or run a sweep whose jobs each write their own file (cache.per_job=true)",
            where=str(path),
        )
    db = None
    try:
        if lockless:
            db = sqlite3.connect(
                f"file:{urllib.parse.quote(str(path.resolve()))}?vfs=unix-none",
                uri=True,
                timeout=60,
                check_same_thread=False,
            )
            db.execute("PRAGMA locking_mode=EXCLUSIVE")
            db.execute("PRAGMA journal_mode=DELETE")
            db.execute("PRAGMA synchronous=FULL")
            log.warning(
                "%s: this filesystem refuses file locks; the cache is this job's own, so it opens without "
                "locks and without WAL (a rollback journal: commits survive a kill as before)",
                path,
            )
        else:
            db = sqlite3.connect(path, timeout=60, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
        problems = [r[0] for r in db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise sqlite3.DatabaseError(f"integrity check failed: {problems[0].splitlines()[-1]}")
        db.execute(schema)
        db.commit()
        layout = _other_layout(db, schema)
        if layout:  # another version's table: its rows could not be written (or read) by this one
            db.close()
            raise CacheError(
                f"the cache {layout}: another version of the harness wrote it; set cache.path=... to "
                "another file (this one stays for the version that wrote it)",
                where=str(path),
            )
        # A read-only file opens and reads fine; find out now, not at the first commit hours later.
        db.execute("SAVEPOINT harness_write_probe")
        db.execute("CREATE TABLE harness_write_probe (x)")
        db.execute("ROLLBACK TO harness_write_probe")
        db.execute("RELEASE harness_write_probe")
    except sqlite3.Error as e:
        if db is not None:
            db.close()
        raise sqlite_error(path, e) from None
    return db


_CREATE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*)\)", re.DOTALL)


def _other_layout(db: sqlite3.Connection, schema: str) -> str | None:
    """How the table `schema` creates differs in the file (its columns), or None when it does not."""
    table, columns = _CREATE.match(schema).groups()  # type: ignore[union-attr]
    want = [c.split()[0] for c in columns.split(",")]
    got = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
    return None if got == want else f"table {table} has columns ({', '.join(got)}), not ({', '.join(want)})"


def move_aside_command(path: str | Path) -> str:
    """A shell command that moves a SQLite file and its -wal/-shm companions into <file>.corrupt/."""
    path = Path(path)
    files = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()] or [path]
    target = shlex.quote(f"{path}.corrupt")
    return f"mkdir -p {target} && mv {' '.join(shlex.quote(str(p)) for p in files)} {target}/"


def sqlite_error(path: str | Path, e: sqlite3.Error) -> CacheError:
    """One line for a SQLite failure on the cache at `path`: what went wrong and what to do."""
    name = getattr(e, "sqlite_errorname", "") or ""
    text = str(e)
    if (
        name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))
        or "malformed" in text
        or "not a database" in text
        or "integrity check" in text
    ):
        why = (
            f"is corrupt ({text}); its answers cannot be trusted. Move it aside and rerun (a new cache is "
            f"created): {move_aside_command(path)}"
        )
    elif name.startswith("SQLITE_READONLY") or "readonly" in text:
        why = (
            f"is read-only ({text}); make the file and its folder writable, or set cache.path=... elsewhere "
            "(or cache.enabled=false)"
        )
    elif name.startswith("SQLITE_CANTOPEN") or "unable to open" in text:
        why = f"cannot be opened ({text}); check the path and its folder's permissions, or set cache.path=..."
    elif name.startswith("SQLITE_FULL") or "disk is full" in text:
        why = f"cannot grow ({text}); free disk space or set cache.path=... on another disk"
    elif name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        why = (
            f"stayed locked for over 60 s ({text}); another process holds it — wait for it, or give this "
            "run its own cache.path=..."
        )
    else:
        why = f"failed ({name or type(e).__name__}: {text}); set cache.path=... to a fresh file to continue"
    return CacheError(f"the cache {why}", where=str(path))


@contextlib.contextmanager
def sqlite_errors(path: str | Path) -> Iterator[None]:
    """Turn any SQLite failure inside the block into sqlite_error's one line (for cache reads/writes)."""
    try:
        yield
    except sqlite3.Error as e:
        raise sqlite_error(path, e) from None
