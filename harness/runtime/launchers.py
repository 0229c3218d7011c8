"""What the login node shows while Hydra's submitit launchers (hydra/launcher=slurm, local) wait.

The plugin (hydra-submitit-launcher 1.2.0) submits the sweep with submitit's `map_array` and then
blocks in `job.results()`, printing nothing for the whole run. `python -m harness.run` (entry.main)
runs Hydra inside `watching()`, which gives submitit.AutoExecutor, for that call only, a
`map_array` that adds (the plugin's own launch is unchanged; Hydra only instantiates launchers from
the hydra_plugins package, so this is not a launcher class of ours):

- while the login-node process waits, one line per job whenever its state changes (PENDING,
  RUNNING, COMPLETED, FAILED, ... as submitit reads them from sacct; the local executor's own
  states), naming its log file (`<sweep dir>/.submitit/<id>/<id>_0_log.err`) and the last line
  written there (a progress bar's latest state), and, while it runs, the latest line again every
  PROGRESS_S seconds when it changed;
- a refused `sbatch` is one `error:` line (a ConfigError, printed by harness.runtime.entry) with
  sbatch's own message and the launcher setting to change, instead of a traceback.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

log = logging.getLogger("harness.launcher")

POLL_S = 2.0
"""Seconds between looks at the jobs' states (submitit itself asks sacct at most every few seconds)."""
PROGRESS_S = float(os.environ.get("HARNESS_LAUNCHER_PROGRESS_S", "30"))
"""Seconds between repeats of a running job's latest log line (state changes print at once)."""
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
         "FINISHED", "INTERRUPTED"}

_HINTS = (
    (r"generic resource|gres|gpu", "the partition has no such GPUs: set hydra.launcher.gpus_per_node=null (a GPU-less "
     "partition), hydra.launcher.partition=<a GPU partition> (`sinfo -o '%P %G'` lists them) or hydra.launcher.gres"),
    (r"partition", "set hydra.launcher.partition=<one of `sinfo -s`>"),
    (r"account|association", "set hydra.launcher.account=<your project> (`sacctmgr show assoc user=$USER`)"),
    (r"qos", "set hydra.launcher.qos=<one of `sacctmgr show qos`> (or null)"),
    (r"time limit", "lower hydra.launcher.timeout_min below the partition's limit (`sinfo -s`)"),
    (r"node configuration|memory|cpu", "lower hydra.launcher.mem_gb / cpus_per_task / gpus_per_node to what one node "
     "of the partition has (`sinfo -o '%P %c %m %G'`)"),
)


def sbatch_error(message: str, folder: str) -> str:
    """One line for a refused submission: sbatch's words, the launcher setting to change, where the script is."""
    said = " ".join(line.strip() for line in message.strip().splitlines() if line.strip()) or "no message"
    hint = next((h for pattern, h in _HINTS if re.search(pattern, said, re.IGNORECASE)),
                "fix the hydra.launcher.* setting it names (conf/hydra/launcher/slurm.yaml, or your site's launcher)")
    return f"sbatch refused the job array ({said}): {hint}; the submitted script is under {folder}"


def last_line(path: Path, tail: int = 4096) -> str:
    """The last non-empty line of a log (a tqdm bar's latest redraw: the text after its last \\r)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [s.strip() for s in re.split(r"[\r\n]", text) if s.strip()]
    return lines[-1][:200] if lines else ""


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


def watch(jobs: Sequence[Any], *, poll_s: float = POLL_S, progress_s: float = PROGRESS_S) -> None:
    """Log each job's state as it changes, with its log path and latest log line, until all are done."""
    shown: dict[int, tuple[str, str, float]] = {}
    while True:
        done = [job.done() for job in jobs]
        for i, job in enumerate(jobs):
            state = _state(job)
            if done[i] and state not in FINAL:  # the result is written; sacct may not have caught up
                state = _outcome(job) or f"DONE (sacct: {state})"
            elif state == "UNKNOWN" and i not in shown:
                state = "SUBMITTED"  # not in sacct yet
            line = last_line(job.paths.stderr)
            before = shown.get(i)
            now = time.monotonic()
            if before is None or before[0] != state or (line != before[1] and now - before[2] >= progress_s):
                log.info("[job %s #%d] %s  log: %s%s", job.job_id, i, state, job.paths.stderr,
                         f"  | {line}" if line else "")
                shown[i] = (state, line, now)
        if all(done):
            return
        time.sleep(poll_s)


@contextlib.contextmanager
def watching(multirun: bool = True) -> Iterator[None]:
    """submitit.AutoExecutor replaced, inside the block, by one whose map_array turns a refused
    sbatch into a ConfigError and watches the jobs it submitted (nothing for a single run, or
    without submitit)."""
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
            said, refused = io.StringIO(), None
            try:
                with contextlib.redirect_stderr(said):  # submitit prints sbatch's stderr before raising
                    jobs = super().map_array(fn, *iterable)
            except (FailedJobError, FailedSubmissionError) as e:
                refused = sbatch_error(str(e) or said.getvalue(), str(Path(str(self.folder)).parent))
            if refused:  # raised outside the except: no chained CalledProcessError in the one line
                raise ConfigError(refused)
            print(said.getvalue(), end="", file=sys.stderr)
            watch(jobs)
            return jobs

    submitit.AutoExecutor = WatchedExecutor
    try:
        yield
    finally:
        submitit.AutoExecutor = original
