"""A multirun's jobs, the ones that failed, and where each job keeps its request cache.

- `sweep_jobs(cfg)`: every job's overrides, expanded from `hydra.sweeper.params` and the command
  line as Hydra's basic sweeper expands them: the jobs a sweep (its multirun.yaml) stands for.
  harness.runtime.collect checks a table against them; harness.runtime.sweep_end finds the shards.
- A job that fails is one line naming it (`fail_job`): its number, its swept settings, the error.
  Under Hydra's basic launcher the next job still runs; a submitit job exits 2 (SLURM: FAILED) and
  the login node records it (harness.runtime.launchers). When the sweep ends, `failure_summary`
  names every failed job in one line and the process exits 2.
- `job_cache_path`: under hydra/launcher=slurm each job writes its own SQLite request cache
  (cache.per_job): several nodes writing one SQLite file over NFS is unsafe (docs/slurm.md). Its
  name comes from the sweep's name and the job's own overrides, so rerunning the same command
  finds it and judges only what is missing; harness.runtime.sweep_end folds them into cache.path.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from harness.errors import DataError, HarnessError
from harness.files import read_text
from harness.runtime.attempts import read_attempts

JOB_NUM_SUBDIR = "${hydra.job.num}"
"""conf/config.yaml's hydra.sweep.subdir: job k writes <sweep dir>/k."""


class JobFailed(HarnessError):
    """A job of a multirun failed; the message is its one line."""


class SweepStopped(BaseException):
    """A sweep's start or end went wrong (harness.runtime.sweep_end); the message is its one line.
    A BaseException, like SystemExit: Hydra turns an Exception raised in a callback into a warning
    and carries on, which would end a sweep that was refused, or whose merge failed, with exit 0."""


_FAILED: dict[int, str] = {}
"""Job number -> its one failure line, for the sweep running in this process."""
_SWEEP: dict[str, Any] = {}
"""The sweep running in this process: its jobs (override lists), set when it starts."""


# ---------------------------------------------------------------- the jobs
def override_key(override: str) -> str:
    """The key an override sets: `+task.x=1`, `++task.x=1`, `~task.x` -> `task.x`."""
    return override.partition("=")[0].lstrip("+~")


def sweep_jobs(cfg: Any) -> list[list[str]]:
    """Each job's overrides (`key=value` strings, the job's hydra.overrides.task) for a multirun
    config: hydra.sweeper.params first, then the command line, crossed as BasicSweeper crosses them."""
    params = OmegaConf.select(cfg, "hydra.sweeper.params")
    params = OmegaConf.to_container(params, resolve=False) if isinstance(params, DictConfig) else {}
    task = OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False)
    args = [f"{k}={v}" for k, v in params.items()] + [str(a) for a in task]
    overrides = OverridesParser.create().parse_overrides(args)
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def varying(jobs: Sequence[Sequence[str]]) -> set[str]:
    """The override keys whose value differs between jobs (the swept ones)."""
    values: dict[str, set[str]] = {}
    for job in jobs:
        for o in job:
            values.setdefault(override_key(o), set()).add(o.partition("=")[2])
    return {k for k, v in values.items() if len(v) > 1 or any(k not in _keys(job) for job in jobs)}


def _keys(job: Sequence[str]) -> set[str]:
    return {override_key(o) for o in job}


def job_name(
    num: int,
    overrides: Sequence[str] | None = None,
    jobs: Sequence[Sequence[str]] | None = None,
    swept: set[str] | None = None,
) -> str:
    """`job 1 (task.path=bad.jsonl)`: the number and the settings that tell it from the sweep's other
    `jobs` (default: the sweep running here; all its overrides when no sweep is known); `swept`:
    their varying keys, when the caller has them (naming every job of a sweep stays linear)."""
    jobs = _SWEEP.get("jobs") or [] if jobs is None else jobs
    if overrides is None:
        overrides = jobs[num] if 0 <= num < len(jobs) else []
    if swept is None:
        swept = varying(jobs) if len(jobs) > 1 else set()
    shown = [o for o in overrides if override_key(o) in swept] or list(overrides)
    return f"job {num}" + (f" ({' '.join(shown)})" if shown else "")


def swept_overrides(overrides: Sequence[str], sweep_dir: Path | None = None) -> list[str]:
    """The job's `overrides` whose key the sweep varies (the sweep running here, else the jobs its
    `sweep_dir`/multirun.yaml lists); [] outside a sweep of more than one job."""
    jobs = _SWEEP.get("jobs") or []
    if not jobs and sweep_dir is not None and (sweep_dir / "multirun.yaml").is_file():
        try:
            jobs = sweep_jobs(OmegaConf.load(sweep_dir / "multirun.yaml"))
        except Exception:  # noqa: BLE001 - a sweeper of another kind: nothing is known to vary
            jobs = []
    swept = varying(jobs) if len(jobs) > 1 else set()
    return [str(o) for o in overrides if override_key(str(o)) in swept]


def job_status(run_dir: Path | None) -> str:
    """ "completed", or what else a job's run directory says: its last attempt's status
    (attempts.jsonl: failed, interrupted, killed, running), no results.json, or no directory."""
    if run_dir is None or not run_dir.is_dir():
        return "never started (no run directory)"
    attempts = read_attempts(run_dir)
    if attempts and attempts[-1].get("status") != "completed":
        return f"{attempts[-1].get('status')} (its attempts.jsonl)"
    if not (run_dir / "results.json").is_file():
        return f"no results.json in {run_dir}"
    return "completed"


def listed_jobs(root: Path) -> list[tuple[str, list[str], Path | None]]:
    """The jobs `root/multirun.yaml` lists, in job order: (name: `job_name`, overrides, run directory
    or None); [] when root holds no multirun.yaml."""
    path = root / "multirun.yaml"
    if not path.is_file():
        return []
    cfg, jobs = read_multirun(path)
    subdir = OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("subdir")
    swept = varying(jobs) if len(jobs) > 1 else set()
    return [
        (job_name(num, job, jobs, swept), list(job), run_dir)
        for num, (job, run_dir) in enumerate(zip(jobs, job_dirs(root, jobs, subdir)))
    ]


def read_multirun(path: Path) -> tuple[DictConfig, list[list[str]]]:
    """multirun.yaml and its jobs, read as input files are: not UTF-8, not YAML, not the mapping
    Hydra writes (a list, no hydra.sweep or hydra.overrides.task) or overrides Hydra cannot parse
    are one DataError naming the file."""
    fix = "not the multirun.yaml Hydra writes: restore it, or move it aside to collect the jobs found below"
    text = read_text(path)
    try:
        cfg = OmegaConf.create(text)
    except Exception as e:  # noqa: BLE001 - yaml's and omegaconf's errors: the first line says where
        raise DataError(
            f"not YAML ({str(e).splitlines()[0] if str(e) else type(e).__name__}); {fix}", where=str(path)
        ) from None
    if not isinstance(cfg, DictConfig) or not isinstance(OmegaConf.select(cfg, "hydra.sweep"), DictConfig):
        raise DataError(f"holds no hydra.sweep mapping; {fix}", where=str(path))
    try:
        return cfg, sweep_jobs(cfg)
    except Exception as e:  # noqa: BLE001 - a missing or unparsable hydra.overrides.task
        raise DataError(
            f"its jobs cannot be read ({' '.join(str(e).split())[:200]}); {fix}", where=str(path)
        ) from None


def sweep_gaps(root: Path) -> list[str]:
    """The jobs that `root/multirun.yaml` lists and that did not complete, one line each ([] when
    every job did, or when root holds no multirun.yaml)."""
    return [
        f"{name}: {status}"
        for name, _, run_dir in listed_jobs(root)
        if (status := job_status(run_dir)) != "completed"
    ]


# ---------------------------------------------------------------- failures
def start(cfg: Any) -> None:
    """A sweep begins in this process: no failures yet; its jobs, when Hydra's basic sweeper
    can expand them (another sweeper's jobs are named by their overrides alone)."""
    _FAILED.clear()
    _SWEEP.clear()
    try:
        _SWEEP["jobs"] = sweep_jobs(cfg)
    except Exception:  # noqa: BLE001 - a sweeper of another kind: the jobs stay unknown here
        _SWEEP["jobs"] = []


def record_failure(num: int, line: str) -> JobFailed:
    """Remember job `num`'s failure line; the JobFailed to hand Hydra for it."""
    _FAILED[num] = line
    return JobFailed(line)


def failures() -> dict[int, str]:
    return dict(sorted(_FAILED.items()))


def failure_summary() -> str:
    """One line for the end of a sweep with failed jobs: how many, each one's line, what to do."""
    failed, total = failures(), len(_SWEEP.get("jobs") or [])
    of = f" of {total}" if total >= len(failed) else ""
    return (
        f"{len(failed)}{of} jobs failed: {'; '.join(failed.values())}. The other jobs' results are in "
        "place; fix the cause and rerun the same command: what was judged comes from the request cache"
    )


def fail_job(num: int, overrides: Sequence[str], message: str, sweep_dir: Path | None = None) -> NoReturn:
    """A job of a multirun failed with a one-line `message`: print it with the job's name; in a
    submitit job exit 2 (SLURM marks it FAILED); in this process raise JobFailed, which Hydra's
    launcher records, so the next job runs. A job on another machine learns the sweep's other
    jobs from `sweep_dir`/multirun.yaml (written before any job starts)."""
    jobs = None
    if not _SWEEP.get("jobs") and sweep_dir is not None and (sweep_dir / "multirun.yaml").is_file():
        try:
            jobs = read_multirun(sweep_dir / "multirun.yaml")[1]
        except HarnessError:  # noqa: BLE001 - the job is named by all its overrides instead
            jobs = None
    line = f"{job_name(num, overrides, jobs)}: {message}"
    print(f"error: {line}", file=sys.stderr, flush=True)
    if os.environ.get("SUBMITIT_EXECUTOR"):
        sys.exit(2)
    raise record_failure(num, line)


# ---------------------------------------------------------------- per-job request caches
def per_job_cache(setting: Any, multirun: bool, launcher: str) -> bool:
    """Whether a job writes its own cache file: cache.per_job (`setting`), or when that is null,
    under the slurm launcher (`launcher`: hydra.launcher._target_). Never in a single run."""
    if not multirun:
        return False
    return bool(setting) if setting is not None else str(launcher).endswith("SlurmLauncher")


def job_cache_path(path: Path, sweep: str, overrides: Sequence[str]) -> Path:
    """`<cache.path's folder>/sweeps/<sweep>/[shard-<i>-of-<n>-]<hash of the job's overrides>/<name>`."""
    values = {override_key(o): o.partition("=")[2] for o in overrides}
    shard = values.get("task.shard_index"), values.get("task.num_shards")
    label = f"shard-{shard[0]}-of-{shard[1]}-" if all(shard) else ""
    digest = hashlib.sha256("\n".join(sorted(overrides)).encode()).hexdigest()[:12]
    return path.parent / "sweeps" / _safe(sweep) / f"{label}{digest}" / path.name


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "sweep"


def sweep_name(cfg: Any) -> str:
    """The sweep's name: sweep.name (a conf/sweep config), else the experiment's."""
    return str(OmegaConf.select(cfg, "sweep.name", default=None) or OmegaConf.select(cfg, "experiment.name"))


def cache_file(cfg: Any, path: Path) -> Path:
    """The request cache this job uses: `path` (cache.path), or its own file (per_job_cache)."""
    if not HydraConfig.initialized():
        return path
    hc = HydraConfig.get()
    if not per_job_cache(
        cfg.cache.get("per_job"), hc.mode == RunMode.MULTIRUN, hc.launcher.get("_target_", "")
    ):
        return path
    return job_cache_path(path, sweep_name(cfg), list(hc.overrides.task))


def job_dirs(root: Path, jobs: Sequence[Sequence[str]], subdir: Any = JOB_NUM_SUBDIR) -> list[Path | None]:
    """Each job's run directory: `<root>/<job number>` under the shipped hydra.sweep.subdir (`subdir`
    as written, unresolved), else the folder below `root` whose overrides.json lists exactly the job's
    overrides (None where there is none)."""
    if str(subdir) == JOB_NUM_SUBDIR:
        return [root / str(num) for num in range(len(jobs))]
    if "${" not in str(subdir).replace(JOB_NUM_SUBDIR, ""):  # e.g. ../x_${hydra.job.num}, /abs/x_N
        return [
            Path(os.path.normpath(root / str(subdir).replace(JOB_NUM_SUBDIR, str(num))))
            for num in range(len(jobs))
        ]
    found: dict[tuple[str, ...], Path] = {}
    for path in sorted(root.rglob("overrides.json")):
        try:
            found.setdefault(tuple(json.loads(path.read_text())), path.parent)
        except (OSError, ValueError, TypeError):
            continue
    return [found.get(tuple(job)) for job in jobs]
