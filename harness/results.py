"""A run's results.json as a typed, versioned record: every experiment writes and reads it here.

`RunResults.read(path)` checks the file's `version`: the current one is read as it is; a file
written before results.json carried one (version 1: no `version` key) is migrated (its keys are
those of version 2, which only added the key; `migrated_from` says so); a newer or malformed
version is refused in one line naming the file and the version. `write_results` stamps the
version. The keys every experiment shares are attributes; the rest stay keys of the record as
the experiment wrote them (`results["search"]`), and the record reads as the mapping it was, so
a reader can move to attributes one key at a time (Inspect's EvalLog and read_eval_log are the
shape).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import DataError, located
from harness.files import read_json_object, write_json_atomic

VERSION = 2
"""results.json's format. 1: no `version` key (every file before this record); 2: `version`."""

READABLE = (1, 2)
"""Versions `RunResults.read` reads (older ones migrated)."""


class RunResults(dict[str, Any]):
    """One run's results.json: its keys as written (the record is the dict it always was, so JSON,
    `isinstance(r, dict)` and `r["search"]` keep working), the shared keys as typed attributes, the
    version checked (and migrated) on read."""

    migrated_from: int | None = None
    """The version of the file as read, when it was migrated (None: read as written)."""

    @property
    def record(self) -> dict[str, Any]:
        """Every key the experiment wrote, `version` included."""
        return self

    @property
    def version(self) -> int:
        """The format version (VERSION once read)."""
        return int(self.record.get("version", VERSION))

    @property
    def experiment(self) -> str | None:
        """The experiment that wrote it (None: a judge run, which writes no such key)."""
        return self.record.get("experiment")

    @property
    def metrics(self) -> dict[str, Any]:
        """The numbers: variant -> metric -> value (judge, study) or the experiment's own tree."""
        return self.record.get("metrics") or {}

    @property
    def intervals(self) -> dict[str, Any] | None:
        """Beside `metrics`: each metric's [lo, hi] (None: no intervals, metrics.bootstrap=0 or an old file)."""
        return self.record.get("intervals")

    @property
    def interval_basis(self) -> dict[str, Any] | None:
        """Beside each interval: its documents (n), method and note (harness/metrics/interval.py)."""
        return self.record.get("interval_basis")

    @property
    def interval(self) -> dict[str, Any] | None:
        """How the intervals were made (level, bootstrap rounds)."""
        return self.record.get("interval")

    @property
    def task(self) -> str | None:
        """The dataset judged."""
        return self.record.get("task")

    @property
    def aspect(self) -> str | None:
        """The human score judged against."""
        return self.record.get("aspect")

    @property
    def judge(self) -> str | None:
        """The judge's identity (model, revision, dtype, backend)."""
        return self.record.get("judge")

    @property
    def n_docs(self) -> int | None:
        """Documents the metrics cover."""
        return self.record.get("n_docs")

    @property
    def numerics(self) -> dict[str, Any] | None:
        """The judge's dtype, its source, engine and device (harness.judges.cpu.numerics)."""
        return self.record.get("numerics")

    # -- files ----------------------------------------------------------------------------------
    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "results.json") -> RunResults:
        """The record of a parsed results.json: migrated when older, refused when not readable."""
        version = data.get("version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE:
            newer = isinstance(version, int) and not isinstance(version, bool) and version > VERSION
            raise DataError(
                f"version {version!r} "
                + (
                    f"is newer than this harness reads ({VERSION}): upgrade harness to read it"
                    if newer
                    else f"is not one this harness reads ({', '.join(map(str, READABLE))}): rerun the experiment"
                ),
                where=located(where, None, "version"),
            )
        out = cls({"version": VERSION, **{k: v for k, v in data.items() if k != "version"}})
        if version != VERSION:
            out.migrated_from = version
        return out

    @classmethod
    def read(cls, path: str | Path, fix: str = "give the results.json of a finished run") -> RunResults:
        """results.json at `path` (one DataError line naming it when unreadable, not an object (then
        saying `fix`), or of a version this harness cannot read)."""
        data = read_json_object(path, fix)
        return cls.from_json(data, where=str(path))

    def write(self, path: str | Path) -> None:
        write_json_atomic(
            path, {"version": VERSION, **{k: v for k, v in self.record.items() if k != "version"}}
        )


def write_results(path: str | Path, results: Mapping[str, Any]) -> RunResults:
    """Write an experiment's results (atomic) as results.json of the current VERSION."""
    record = RunResults({"version": VERSION, **{k: v for k, v in results.items() if k != "version"}})
    record.write(path)
    return record
