"""Matplotlib without a display (Agg), and figures saved atomically as PNG files.

Every figure the harness draws (ZEPO's search and sensitivity figures, A-BB sweeps, collected
tables, run report cards) goes through `pyplot()` and `save()`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


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
    meta = {"Title": titles(fig), **savefig.pop("metadata", {})}
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
