"""What the login node does while Hydra's submitit launchers (hydra/launcher=slurm, local) run a sweep.

The plugin (hydra-submitit-launcher 1.2.0) resolves its launcher config once, submits the sweep
with submitit's `map_array` and then blocks in `job.results()`, printing nothing for the whole run
and raising submitit's UncompletedJobError (a ~45-line traceback) at the first job that failed.
`python -m harness.run` (entry.main) runs Hydra inside `watching()`, which gives
submitit.AutoExecutor, for that call only, a `map_array` that (the plugin's own launch is
unchanged; Hydra only instantiates launchers from the hydra_plugins package, so this is not a
launcher class of ours):

- resolves the launcher config for each job (`job_requests`): jobs that need other resources (a
  sweep over backend.tensor_parallel_size, or backend=api,vllm: conf/hydra/launcher/slurm.yaml's
  GPUs follow the job's backend) go out as one job array per request;
- while the login-node process waits, prints one line per job whenever its state changes (PENDING,
  RUNNING, COMPLETED, FAILED, ... as submitit reads them from sacct; the local executor's own
  states), naming its log file (`<sweep dir>/.submitit/<id>/<id>_0_log.err`) and the last line
  written there (a progress bar's latest state; for a job that failed, its last error line), and,
  while it runs, the latest line again every PROGRESS_S seconds when it changed;
- hands Hydra each failed job as one line (job number, swept settings, state, log, last error
  line: harness.runtime.sweep), so the sweep ends with one `error:` line naming every failed job
  and exit 2 instead of a traceback;
- turns a refused `sbatch` into one `error:` line (a ConfigError, printed by harness.runtime.entry)
  with sbatch's own message and the launcher setting to change.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from harness.errors import ConfigError
from harness.runtime.sweep import job_name, override_key, record_failure

log = logging.getLogger("harness.launcher")

POLL_S = 2.0
"""Seconds between looks at the jobs' states (submitit itself asks sacct at most every few seconds)."""
PROGRESS_S = float(os.environ.get("HARNESS_LAUNCHER_PROGRESS_S", "30"))
"""Seconds between repeats of a running job's latest log line (state changes print at once)."""
FINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "BOOT_FAIL",
    "DEADLINE",
    "FINISHED",
    "INTERRUPTED",
}


def _hint(said: str, params: dict[str, Any]) -> str:
    """The launcher setting to change for sbatch's message `said`, naming the values in use and not
    advising what is already set."""
    partition = params.get("partition")
    if re.search(r"invalid partition|partition.*(not|n't) (exist|valid|available)", said, re.IGNORECASE):
        return (
            f"hydra.launcher.partition={partition} is not a partition here: set hydra.launcher.partition=<one "
            "of `sinfo -s`>"
        )
    if re.search(r"generic resource|gres", said, re.IGNORECASE):
        asked = {
            k: params.get(k) for k in ("gpus_per_node", "gpus_per_task", "gres") if params.get(k) is not None
        }
        where = f"partition {partition}" if partition else "the default partition"
        if asked:
            return (
                f"{where} has no GPUs for {' '.join(f'{k}={v}' for k, v in asked.items())}: set "
                "hydra.launcher.partition=<a GPU partition> (`sinfo -o '%P %G'` lists them), or "
                f"{' and '.join(f'hydra.launcher.{k}=null' for k in asked)} on a GPU-less partition"
            )
        return (
            f"{where} refuses the GPU request sbatch got from additional_parameters or setup; check them "
            "against `sinfo -o '%P %G'`"
        )
    for pattern, hint in _HINTS:
        if re.search(pattern, said, re.IGNORECASE):
            return hint
    return (
        "fix the hydra.launcher.* setting it names (conf/hydra/launcher/slurm.yaml, or your site's launcher)"
    )


_HINTS = (
    (r"account|association", "set hydra.launcher.account=<your project> (`sacctmgr show assoc user=$USER`)"),
    (r"qos", "set hydra.launcher.qos=<one of `sacctmgr show qos`> (or null)"),
    (r"time limit", "lower hydra.launcher.timeout_min below the partition's limit (`sinfo -s`)"),
    (
        r"node configuration|memory|cpu",
        "lower hydra.launcher.mem_gb / cpus_per_task / gpus_per_node to what one node "
        "of the partition has (`sinfo -o '%P %c %m %G'`)",
    ),
    (r"partition", "set hydra.launcher.partition=<one of `sinfo -s`>"),
)


def sbatch_error(message: str, folder: str, params: dict[str, Any] | None = None) -> str:
    """One line for a refused submission: sbatch's words, the launcher setting to change (`params`:
    the launcher's values for this array), where the script is."""
    said = " ".join(line.strip() for line in message.strip().splitlines() if line.strip()) or "no message"
    return f"sbatch refused the job array ({said}): {_hint(said, params or {})}; the submitted script is under {folder}"


def last_line(path: Path, tail: int = 4096) -> str:
    """The last non-empty line of a log (a tqdm bar's latest redraw: the text after its last \\r)."""
    lines = _tail_lines(path, tail)
    return lines[-1][:200] if lines else ""


def last_error_line(path: Path, tail: int = 16384) -> str:
    """The line of a failed job's log that says why: the harness's `error:` line, else the last line
    that reads as an error (a Python exception, slurmstepd's CANCELLED / oom-kill / time limit)
    other than srun's exit-code report, else the last line."""
    lines = _tail_lines(path, tail)
    errorish = re.compile(r"error|exception|killed|oom|cancelled|time limit", re.IGNORECASE)
    for pick in (
        lambda s: s.startswith("error:"),
        lambda s: errorish.search(s) and not s.startswith("srun:"),
        lambda s: True,
    ):
        found = [s for s in lines if pick(s)]
        if found:
            return found[-1][:1000]
    return ""


def _tail_lines(path: Path, tail: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [s.strip() for s in re.split(r"[\r\n]", text) if s.strip()]


def _state(job: Any) -> str:
    try:
        return str(job.state).split()[0].upper()  # sacct may say "CANCELLED by 0"
    except Exception as e:  # noqa: BLE001 - a state we cannot read is shown, never fatal
        return f"UNKNOWN ({type(e).__name__})"


def _outcome(job: Any) -> str | None:
    """COMPLETED/FAILED from the result submitit's job wrote (("success", value) or ("error", traceback))."""
    from submitit.core.utils import pickle_load

    try:
        outcome = pickle_load(job.paths.result_pickle)[0]
    except Exception:  # noqa: BLE001 - unreadable (still being written): say what sacct says
        return None
    return "COMPLETED" if outcome == "success" else "FAILED" if outcome == "error" else None


def watch(
    jobs: Sequence[Any],
    nums: Sequence[int] | None = None,
    *,
    poll_s: float = POLL_S,
    progress_s: float = PROGRESS_S,
) -> None:
    """Log each job's state as it changes, with its log path and latest log line (for a job that
    ended otherwise than COMPLETED, its last error line), until all are done."""
    nums = list(nums) if nums is not None else list(range(len(jobs)))
    shown: dict[int, tuple[str, str, float]] = {}
    while True:
        done = [job.done() for job in jobs]
        for i, job in enumerate(jobs):
            state = _state(job)
            if done[i] and state not in FINAL:  # the result is written; sacct may not have caught up
                state = _outcome(job) or f"DONE (sacct: {state})"
            elif state == "UNKNOWN" and i not in shown:
                state = "SUBMITTED"  # not in sacct yet
            failed = state in FINAL and state not in ("COMPLETED", "FINISHED")
            line = last_error_line(job.paths.stderr) if failed else last_line(job.paths.stderr)
            before = shown.get(i)
            now = time.monotonic()
            if before is None or before[0] != state or (line != before[1] and now - before[2] >= progress_s):
                log.info(
                    "[job %s #%d] %s  log: %s%s",
                    job.job_id,
                    nums[i],
                    state,
                    job.paths.stderr,
                    f"  | {line}" if line else "",
                )
                shown[i] = (state, line, now)
        if all(done):
            return
        time.sleep(poll_s)


# ---------------------------------------------------------------- per-job requests
def job_requests(launcher: Any, overrides: Sequence[Sequence[str]]) -> list[tuple[dict[str, Any], list[int]]]:
    """The launcher config resolved in each job's own config (its backend, tensor parallelism, ...),
    grouped by request: [(launcher parameters, positions of the jobs asking for them)], in job order.
    Jobs that differ only in task.shard_index share one composition (a sweep of many shards)."""
    loader = launcher.hydra_context.config_loader
    resolved: dict[tuple[str, ...], str] = {}
    groups: dict[str, tuple[dict[str, Any], list[int]]] = {}
    for i, job in enumerate(overrides):
        key = tuple(o for o in job if override_key(o) != "task.shard_index")
        if key not in resolved:
            node = loader.load_sweep_config(launcher.config, list(job)).hydra.launcher
            params = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if k != "_target_"}
            resolved[key] = json.dumps(params, sort_keys=True, default=str)
            groups.setdefault(resolved[key], (params, []))
        groups[resolved[key]][1].append(i)
    return list(groups.values())


def _executor_params(launcher: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Launcher parameters as submitit's update_parameters takes them (the plugin's own mapping)."""
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    base = set(OmegaConf.structured(BaseQueueConf).keys())
    return {
        k if k in base else f"{launcher._EXECUTOR}_{k}": v
        for k, v in params.items()
        if k not in ("submitit_folder", "max_num_timeout")
    }


# ---------------------------------------------------------------- failed jobs
class Finished:
    """A finished submitit job as the plugin reads it (`results()`): a failed one is never
    submitit's UncompletedJobError but a FAILED JobReturn whose value is the JobFailed line naming
    it (recorded for the sweep's last line: harness.runtime.sweep)."""

    def __init__(self, job: Any, num: int, overrides: Sequence[str]) -> None:
        self.job, self.num, self.overrides = job, num, list(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.job, name)

    def results(self) -> list[Any]:
        from submitit.core.utils import FailedJobError, UncompletedJobError

        state, why = _state(self.job), None
        if (
            state in FINAL
            and state not in ("COMPLETED", "FINISHED")
            and not self.job.paths.result_pickle.exists()
        ):
            why = last_error_line(self.job.paths.stderr) or "no log line"
        else:
            try:
                ret = self.job.results()[0]
                if ret.status != JobStatus.FAILED:
                    return [ret]
                state, why = "FAILED", f"{type(ret._return_value).__name__}: {ret._return_value}"
            except (UncompletedJobError, FailedJobError):
                state, why = _state(self.job), last_error_line(self.job.paths.stderr) or "no log line"
        why = re.sub(
            r"^error: (job \d+( \([^)]*\))?: )?", "", why
        )  # the job's own `error: job N (...):` line
        line = f"{job_name(self.num, self.overrides)} {state} (job {self.job.job_id}): {why}; log: {self.job.paths.stderr}"
        failed = JobReturn(overrides=self.overrides, status=JobStatus.FAILED)
        failed.return_value = record_failure(self.num, line)
        return [failed]


@contextlib.contextmanager
def watching(multirun: bool = True) -> Iterator[None]:
    """submitit.AutoExecutor replaced, inside the block, by one whose map_array submits one array
    per resource request, turns a refused sbatch into a ConfigError, watches the jobs it submitted
    and hands failed ones back as one line each (nothing for a single run, or without submitit)."""
    if not multirun:
        yield
        return
    try:
        import submitit
        from submitit.core.utils import FailedJobError, FailedSubmissionError
    except ImportError:  # the slurm extra is not installed: no submitit launcher can run either
        yield
        return

    original = submitit.AutoExecutor

    class WatchedExecutor(original):  # type: ignore[misc, valid-type]
        def map_array(self, fn: Any, *iterable: Any) -> list:
            # The plugin's per-job arguments: overrides, "hydra.sweep.dir", job number, job id, singletons.
            overrides, nums = list(iterable[0]), list(iterable[2])
            requests = job_requests(fn, overrides)
            jobs: list[Any] = [None] * len(overrides)
            for params, positions in requests:
                if len(requests) > 1 or params != fn.params:
                    self.update_parameters(**_executor_params(fn, params))
                for i, job in zip(
                    positions, self._submit(fn, params, [[it[i] for i in positions] for it in iterable])
                ):
                    jobs[i] = job
            watch(jobs, nums)
            return [
                Finished(job, num, job_overrides) for job, num, job_overrides in zip(jobs, nums, overrides)
            ]

        def _submit(self, fn: Any, params: dict[str, Any], args: list[list[Any]]) -> list:
            said, refused = io.StringIO(), None
            try:
                with contextlib.redirect_stderr(said):  # submitit prints sbatch's stderr before raising
                    jobs = super().map_array(fn, *args)
            except (FailedJobError, FailedSubmissionError) as e:
                refused = sbatch_error(str(e) or said.getvalue(), str(Path(str(self.folder)).parent), params)
            if refused:  # raised outside the except: no chained CalledProcessError in the one line
                raise ConfigError(refused)
            print(said.getvalue(), end="", file=sys.stderr)
            return jobs

    submitit.AutoExecutor = WatchedExecutor
    try:
        yield
    finally:
        submitit.AutoExecutor = original
