"""The end of a multirun, on the machine that launched it (a Hydra callback: conf/config.yaml's
hydra.callbacks.sweep_end).

When every job has finished:
- document shards are merged. The jobs of a sweep over `task.shard_index` (with task.num_shards=N)
  become one run in `<sweep dir>/merged/` (`merged/<k>/` for the k-th grid point of a sweep over
  other keys too), as the unsharded run writes it (harness.runtime.merged: judgments, every
  metric recomputed, config.json, overrides.json, the card, report.html with every prompt, and a
  W&B run of its own in the sweep's group);
- the jobs' own request caches (cache.per_job, harness.runtime.sweep) are folded into cache.path
  (and completions.sqlite beside it), so any later run finds what the sweep judged.
A sweep with a failed job never gets here: Hydra stops at the failure and the process exits 2 with
one line naming each failed job (harness.runtime.entry), so no merged run that looks complete is
written; rerunning the same command judges only what is missing (each job's cache).
Before the first job, a sweep that shards an experiment whose shards cannot be merged is refused.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from harness.errors import ConfigError, HarnessError
from harness.runtime import sweep
from harness.runtime.context import cache_path
from harness.runtime.merged import SHARD_KEYS, merge_run
from harness.runtime.shard import check_shardable

log = logging.getLogger("harness.sweep")


class SweepEnd(Callback):
    """Hydra callback: the sweep's jobs known and checked at its start; merges and folds at its end.
    Its errors leave as SweepStopped (one line, exit 2: harness.runtime.entry), never as a warning."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        with stopping("refused before any job"):
            sweep.start(config)
            check_shardable(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        with stopping("every job finished, but"):
            jobs = sweep.sweep_jobs(config)
            root = Path(str(config.hydra.sweep.dir))
            merge_sweep(root, jobs, config)
            fold_caches(config, jobs)


@contextlib.contextmanager
def stopping(when: str) -> Iterator[None]:
    """A HarnessError as SweepStopped (its one line); any other error too, after its traceback."""
    try:
        yield
    except HarnessError as e:
        raise sweep.SweepStopped(f"{when}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a bug: its traceback, then still a failed sweep
        traceback.print_exc()
        raise sweep.SweepStopped(f"{when}: {type(e).__name__}: {e} (traceback above)") from None


# ---------------------------------------------------------------- shards
@dataclass(frozen=True)
class Member:
    """One job of a shard sweep."""

    num: int
    """Its job number."""
    index: int
    """task.shard_index."""
    count: int
    """task.num_shards."""


def _value(job: Sequence[str], key: str, master: Any) -> Any:
    for o in reversed(job):
        if sweep.override_key(o) == key:
            return o.partition("=")[2]
    return OmegaConf.select(master, key, default=None)


def shard_groups(jobs: Sequence[Sequence[str]], master: Any) -> dict[tuple[str, ...], list[Member]]:
    """The sweep's sharded jobs by grid point (their overrides without the shard keys)."""
    groups: dict[tuple[str, ...], list[Member]] = {}
    for num, job in enumerate(jobs):
        count = int(_value(job, "task.num_shards", master) or 1)
        if count > 1:
            rest = tuple(o for o in job if sweep.override_key(o) not in SHARD_KEYS)
            groups.setdefault(rest, []).append(
                Member(num, int(_value(job, "task.shard_index", master) or 0), count)
            )
    return groups


def merge_sweep(root: Path, jobs: Sequence[Sequence[str]], master: Any) -> list[Path]:
    """Merge every complete shard group of the sweep in `root`; the merged run directories."""
    groups = shard_groups(jobs, master)
    subdir = (
        OmegaConf.to_container(master.hydra.sweep, resolve=False).get("subdir")
        if isinstance(master, DictConfig)
        else master["hydra"]["sweep"]["subdir"]
    )
    dirs = sweep.job_dirs(root, jobs, subdir)
    merged = []
    for g, members in enumerate(groups.values()):
        count = members[0].count
        if sorted(m.index for m in members) != list(range(count)):
            log.warning(
                "not merged: jobs %s hold shards %s of %d, not each shard 0..%d once",
                [m.num for m in members],
                sorted(m.index for m in members),
                count,
                count - 1,
            )
            continue
        members = sorted(members, key=lambda m: m.index)
        shard_dirs = [dirs[m.num] for m in members]
        if any(d is None for d in shard_dirs):
            raise ConfigError(
                f"the run directories of jobs {[m.num for m in members]} are not all found below {root}"
            )
        out = root / "merged" if len(groups) == 1 else root / "merged" / str(g)
        results = merge_run(shard_dirs, out, root)
        log.info(
            "merged shards 0..%d (jobs %s): %d documents, %d judgments -> %s",
            count - 1,
            ",".join(str(m.num) for m in members),
            results["n_docs"],
            results["n_judgments"],
            out,
        )
        merged.append(out)
    return merged


# ---------------------------------------------------------------- per-job caches
def fold_caches(master: Any, jobs: Sequence[Sequence[str]]) -> int:
    """Fold each job's own cache files (requests, completions) into cache.path's; the rows added."""
    cache = master.cache
    if not cache.enabled or not sweep.per_job_cache(
        cache.get("per_job"), True, OmegaConf.select(master, "hydra.launcher._target_") or ""
    ):
        return 0
    user = cache_path(cache)
    added, folded = 0, 0
    for job in jobs:
        own = sweep.job_cache_path(user, sweep.sweep_name(master), job)
        for part, into in (
            (own, user),
            (own.with_name("completions.sqlite"), user.with_name("completions.sqlite")),
        ):
            if part.is_file():
                try:
                    added += fold_sqlite(into, part)
                    folded += 1
                except sqlite3.Error as e:
                    log.warning(
                        "%s not folded into %s (%s); a rerun of the same command still reads it",
                        part,
                        into,
                        e,
                    )
    if folded:
        log.info("folded %d job cache files into %s: %d new rows", folded, user.parent, added)
    return added


def fold_sqlite(into: Path, part: Path) -> int:
    """Copy every table's rows of the SQLite file `part` into `into` (tables created as needed; a
    key `into` holds already keeps its row). One writer, on this machine. Returns the rows added."""
    into.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(into, timeout=60)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("ATTACH DATABASE ? AS part", (str(part),))
        before = db.total_changes
        with db:
            tables = db.execute("SELECT name, sql FROM part.sqlite_master WHERE type = 'table'").fetchall()
            for name, sql in tables:
                if name.startswith("sqlite_") or not sql:
                    continue
                db.execute(sql.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))
                db.execute(f'INSERT OR IGNORE INTO main."{name}" SELECT * FROM part."{name}"')
        return db.total_changes - before
    finally:
        db.close()
