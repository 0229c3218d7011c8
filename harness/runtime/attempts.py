"""attempts.jsonl: one line per (re)start of a run, so the calls of every attempt can be summed.

A SLURM job can be preempted, requeued and resumed several times; each attempt appends
{job_id, restart_count, pid, status, calls, started, seconds}. Summing `calls` over the lines
counts every model call the run ever paid for.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ATTEMPTS = "attempts.jsonl"
"""Per-run-directory log: one JSON line per (re)start of the job."""


def _slurm_ids() -> dict[str, Any]:
    env = os.environ
    job = env.get("SLURM_JOB_ID")
    if env.get("SLURM_ARRAY_JOB_ID"):
        job = f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID')}"
    return {"job_id": job, "restart_count": int(env.get("SLURM_RESTART_COUNT", 0) or 0)}


@contextlib.contextmanager
def record_attempt(out_dir: str | Path, judge: Any) -> Iterator[None]:
    """Append {job_id, restart_count, calls, status} to out_dir/attempts.jsonl when the block ends.

    status: completed | interrupted (SystemExit/KeyboardInterrupt: preempted, requeued) | failed.
    Summing `calls` over the lines counts every model call the run ever paid for.
    """
    started, status = time.time(), "failed"
    try:
        yield
        status = "completed"
    except (SystemExit, KeyboardInterrupt):
        status = "interrupted"
        raise
    finally:
        row = {**_slurm_ids(), "pid": os.getpid(), "status": status, "calls": getattr(judge, "calls", None),
               "started": round(started, 3), "seconds": round(time.time() - started, 3)}
        path = Path(out_dir) / ATTEMPTS
        with path.open("a") as f:  # one short line per write: appends do not interleave
            f.write(json.dumps(row) + "\n")
