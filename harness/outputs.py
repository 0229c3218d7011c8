"""Where the tools around the results write (harness-report --out, harness-collect table/merge
--out, harness-paper-tables --out, harness-bench page --out and gpu --json), checked before any
work, each refusal one line:

- the location must be a folder (or a file path whose folder is one) that this process can write:
  a file where a folder is wanted, or a read-only place, was a traceback after the work;
- a folder that holds a run (its results.json, config.json, judgments.jsonl, ZEPO's state.json,
  A-BB's abb.json, a sweep's multirun.yaml) is not written into unless it holds this tool's own
  earlier output of the same sources (`same`): the new files would replace the run's while its
  other files stay and contradict them. `harness.run` refuses a folder holding another run the
  same way (harness.runtime.rundirs.check_same_experiment).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness.errors import ConfigError

RUN_FILES = ("results.json", "config.json", "judgments.jsonl", "state.json", "abb.json", "multirun.yaml")
"""The files that make a folder a run (or a sweep)."""


def writable_folder(path: str | Path, flag: str = "--out") -> Path:
    """`path` made (with its parents) and probed with a real write; a file there, or a folder this
    process cannot write, is one line naming `flag`."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{flag} {p} is a file, not a folder: give a folder (a new one is made)")
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p, prefix=".write-check-"):
            pass
    except OSError as e:
        raise ConfigError(
            f"{flag} {p} cannot be written ({e.strerror or e}): give a folder you can write to"
        ) from None
    return p


def writable_file(path: str | Path, flag: str) -> Path:
    """A file path whose folder can be written (made if absent) and that is not a folder itself."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag} {p} is a folder: give a file path")
    writable_folder(p.parent, flag)
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(f"{flag} {p} cannot be written (read-only): give a file you can write to")
    return p


def refuse_other_run(out: Path, flag: str = "--out", same: Callable[[Path], bool] | None = None) -> None:
    """One line when `out` holds a run that is not this tool's own output of the same sources."""
    held = [name for name in RUN_FILES if (out / name).exists()]
    if held and not (same is not None and same(out)):
        raise ConfigError(
            f"{flag} {out} holds another run ({', '.join(held)}): writing there would replace its "
            "files and leave the rest contradicting them; give a new or empty folder"
        )
