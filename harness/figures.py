"""Matplotlib without a display (Agg), and figures saved atomically as PNG files.

Every figure the harness draws (ZEPO's search and sensitivity figures, A-BB sweeps, collected
tables, run report cards) goes through `pyplot()` and `save()`.

A picture function wrapped in `@kept` is not drawn again when its PNG already holds what it would
draw: save() writes a "Key" text chunk, a hash of the function's arguments (all but the path),
the source of its module and of this one, and matplotlib's version; the next call with the same
key returns the file as it is. So `harness-report` over a finished sweep draws nothing it drew
before (docs/benchmarks.md: the report at scale); any change to the data, a title or the code
draws again.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])
_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("figure_key", default=None)


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (clusters have no display; set before the import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def titles(fig: Any) -> str:
    """The figure's title and its axes' titles, one string (" | " between): what a reader sees on top."""
    sup = getattr(fig, "_suptitle", None)
    parts = ([sup.get_text()] if sup is not None and sup.get_text() else []) + [
        ax.get_title() for ax in fig.axes if ax.get_title()
    ]
    return " | ".join("\n".join(" ".join(line.split()) for line in t.splitlines()) for t in parts)


def save(fig: Any, path: str | Path, **savefig: Any) -> Path:
    """Write `fig` to `path` through a temporary file (a crash never leaves half a PNG); closes it.
    The PNG's "Title" text chunk holds `titles(fig)`, so a title can be read back without OCR."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}.png")
    key = _KEY.get()
    meta = {"Title": titles(fig), **({"Key": key} if key else {}), **savefig.pop("metadata", {})}
    try:
        fig.savefig(
            tmp,
            dpi=savefig.pop("dpi", 120),
            bbox_inches=savefig.pop("bbox_inches", "tight"),
            metadata=meta,
            **savefig,
        )
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half PNG left behind
        tmp.unlink(missing_ok=True)
        raise
    finally:
        pyplot().close(fig)
    return path


@functools.cache
def _source_hash(module: str) -> str:
    """sha256 of a module's source file ("" when it has none)."""
    try:
        return hashlib.sha256(Path(inspect.getfile(sys.modules[module])).read_bytes()).hexdigest()
    except (OSError, TypeError, KeyError):
        return ""


def _feed(h: Any, value: Any) -> None:
    """Hash a picture argument by content: arrays by dtype, shape and bytes, containers item by
    item, anything else by type and repr."""
    if isinstance(value, np.ndarray):
        h.update(f"ndarray {value.dtype.str} {value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, list | tuple):
        h.update(f"{type(value).__name__} {len(value)}(".encode())
        for v in value:
            _feed(h, v)
        h.update(b")")
    elif isinstance(value, Mapping):
        h.update(f"map {len(value)}(".encode())
        for k, v in value.items():
            _feed(h, k)
            _feed(h, v)
        h.update(b")")
    else:
        h.update(f"{type(value).__qualname__} {value!r};".encode())


def picture_key(fn: Callable[..., Any], arguments: Mapping[str, Any]) -> str:
    """What a picture is drawn from: `fn`, its arguments (the path left out), the source of its
    module and of this one, and matplotlib's version."""
    import matplotlib

    h = hashlib.sha256(
        f"{fn.__module__}.{fn.__qualname__} {_source_hash(fn.__module__)} {_source_hash(__name__)} "
        f"matplotlib {matplotlib.__version__}".encode()
    )
    _feed(h, {k: v for k, v in arguments.items() if k != "path"})
    return h.hexdigest()


PNG = b"\x89PNG\r\n\x1a\n"


def stored_key(path: Path) -> str | None:
    """The "Key" text chunk of a PNG save() wrote (None: no file, no key, not a PNG), read from the
    chunks before the image data, where save() writes its text."""
    try:
        with open(path, "rb") as f:
            if f.read(8) != PNG:
                return None
            while True:
                head = f.read(8)
                if len(head) < 8 or head[4:] in (b"IDAT", b"IEND"):
                    return None
                data = f.read(int.from_bytes(head[:4], "big"))
                f.read(4)  # the chunk's CRC
                name, _, value = data.partition(b"\0")
                if head[4:] == b"tEXt" and name == b"Key":
                    return value.decode("latin-1")
    except OSError:
        return None


def kept(fn: F) -> F:
    """A picture function `fn(..., path, ...)`, whose PNG is returned as it is when it already holds
    this call's `picture_key`, else drawn with that key (module docstring)."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = picture_key(fn, bound.arguments)
        path = Path(bound.arguments["path"])
        if stored_key(path) == key:
            return path
        token = _KEY.set(key)
        try:
            return fn(*args, **kwargs)
        finally:
            _KEY.reset(token)

    return wrapper  # type: ignore[return-value]
