"""Datasets as Documents: `load_task(name)` for the pinned benchmarks, `load_jsonl(path)` for yours.

    from harness.data import load_task, TASKS
    docs = load_task("summeval", limit=2)        # reads $HARNESS_DATA_DIR or ~/.cache/harness/data
    TASKS["summeval"].aspects                     # ('coherence', 'consistency', 'fluency', 'relevance')
    docs = load_task("jsonl", path="mine.jsonl")  # == load_jsonl("mine.jsonl")

Files are fetched (sha256-verified) by `python -m harness.data.fetch`; see harness/data/fetch.py.
"""

from __future__ import annotations

from pathlib import Path

from harness.data.jsonl import load_jsonl
from harness.data.manifest import default_data_dir
from harness.data.tasks import JSONL, TASKS, TaskSpec, task_spec
from harness.errors import ConfigError, DataError
from harness.records import Document

__all__ = ["JSONL", "TASKS", "TaskSpec", "default_data_dir", "load_jsonl", "load_task", "task_spec"]


def load_task(
    name: str,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    *,
    path: str | Path | None = None,
    fmt: str = "default",
) -> list[Document]:
    """The documents of task `name` in file order, the first `limit` of them when given.

    data_dir: where the pinned files are (layout = sources.tsv `file` column); default
    $HARNESS_DATA_DIR, else ~/.cache/harness/data. path: the file for task "jsonl" only.
    fmt: "default", or "zepo" (texts and human scores as the official ZEPO loaders read them;
    summeval, newsroom and usr_zepo only).
    Every file is validated in full even with a limit, so a corrupt copy never half-loads.
    """
    spec = task_spec(name)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be a positive integer or None, got {limit!r}")
    if fmt not in spec.formats:
        raise ConfigError(
            f"task {name!r} has no {fmt!r} format (it has {', '.join(spec.formats)}); set task.format=default"
        )
    if name == JSONL:
        docs = spec.loader(None, path=path)
    else:
        if path is not None:
            raise ConfigError(
                f"path is only for task {JSONL!r}; task {name!r} reads its pinned files from data_dir"
            )
        root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
        _check_files(spec, root)
        docs = spec.loader(root) if fmt == "default" else spec.loader(root, fmt=fmt)
    return docs if limit is None else docs[:limit]


def _check_files(spec: TaskSpec, root: Path) -> None:
    """All of a task's files present, else one line saying how to get them."""
    missing = [f for f in spec.files if not (root / f).is_file()]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise DataError(
            f"{root / missing[0]} not found{more} (task {spec.name}); get the pinned files with "
            f"`python -m harness.data.fetch --only {spec.name} --dest {root}` (downloads from GitHub), "
            f"or add `--mirror DIR` to copy them from an offline mirror"
        )
