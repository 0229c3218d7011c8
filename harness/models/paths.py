"""Where converted and tiny models live, and how a model folder is built without half-written states."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness.heap import release_freed_memory


def cache_dir() -> Path:
    """$HARNESS_MODEL_CACHE, else $HARNESS_CACHE, else ~/.cache/harness."""
    env = os.environ.get("HARNESS_MODEL_CACHE") or os.environ.get("HARNESS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "harness"


def build_atomically(out: Path, build: Callable[[Path], object]) -> Path:
    """`out` if it already holds a model (config.json), else build into a temporary folder beside
    it and rename: a killed build leaves no half folder, and a concurrent builder's result wins."""
    if (out / "config.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".tmp-"))
    try:
        build(tmp)
        try:
            tmp.rename(out)
        except OSError:  # another process finished first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        release_freed_memory()  # what building took (a tiny model: its vocabulary's conversion)
    return out


def broken_weight_file(path: str | Path) -> Path | None:
    """The first *.safetensors file in folder `path` whose header cannot be read (truncated, a
    corrupt header), so a load error names the file and not only the folder (safetensors' own
    message names neither)."""
    from safetensors import safe_open

    folder = Path(path)
    for f in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        try:
            with safe_open(str(f), framework="pt"):
                pass
        except Exception:  # SafetensorError, OSError: either way this file is the broken one
            return f
    return None
