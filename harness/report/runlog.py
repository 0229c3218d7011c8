"""What the console warned about a run, read back from its run.log for the page.

A run logs through Hydra's job logging: every record goes to the console and to <run dir>/run.log
as `[time][logger][LEVEL] - message` (Hydra's default job_logging format; a record's further lines,
a traceback's, follow it unprefixed). The page shows the WARNING, ERROR and CRITICAL records, the
same text the console printed (run.log is redacted as the console is: harness.redaction), each
message once with how many times it came.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

RUN_LOG = "run.log"
"""The job's log file in its run directory (conf/config.yaml: hydra.job.name)."""
RECORD = re.compile(r"^\[(?P<time>[^\]]*)\]\[(?P<name>[^\]]*)\]\[(?P<level>[A-Z]+)\] - (?P<message>.*)$")
"""The first line of one record in Hydra's job_logging format."""
LEVELS = ("WARNING", "ERROR", "CRITICAL")
MAX_SHOWN = 100
"""Distinct warnings shown; the rest are counted."""
MAX_CHARS = 4000
"""One warning's text is cut here (a long traceback stays in run.log)."""


@dataclass(frozen=True)
class Warned:
    """One distinct warning of the run."""

    level: str
    logger: str
    message: str
    count: int
    first: str
    """When it was first logged (run.log's time stamp)."""


@dataclass(frozen=True)
class RunWarnings:
    """The run's warnings as run.log holds them."""

    warnings: list[Warned]
    missing: str | None = None
    """Why there are none to show: no run.log, or one that cannot be read (None: it was read)."""
    more: int = 0
    """Distinct warnings beyond MAX_SHOWN, not shown."""


def read_warnings(run_dir: Path) -> RunWarnings:
    """The WARNING and worse records of run_dir/run.log, each distinct message once, in order."""
    path = Path(run_dir) / RUN_LOG
    if not path.is_file():
        return RunWarnings([], f"no {RUN_LOG} in the run directory: the console's warnings are not shown")
    try:  # a log cut mid-character by a killed job still shows its warnings
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        return RunWarnings(
            [], f"{RUN_LOG} could not be read ({e.strerror}): the console's warnings are not shown"
        )
    records: list[list[str]] = []
    keep = False
    for line in text.splitlines():
        m = RECORD.match(line)
        if m:
            keep = m["level"] in LEVELS
            if keep:
                records.append([m["level"], m["name"], m["message"], m["time"]])
        elif keep and records:
            records[-1][2] += "\n" + line
    seen: dict[tuple[str, str, str], Warned] = {}
    for level, name, message, time in records:
        message = (
            message if len(message) <= MAX_CHARS else message[:MAX_CHARS] + " …(cut; the rest is in run.log)"
        )
        key = (level, name, message)
        old = seen.get(key)
        seen[key] = Warned(level, name, message, 1 + (old.count if old else 0), old.first if old else time)
    shown = list(seen.values())
    return RunWarnings(shown[:MAX_SHOWN], None, max(0, len(shown) - MAX_SHOWN))
