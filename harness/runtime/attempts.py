"""attempts.jsonl: every (re)start of a run and the model calls it makes, recorded as they happen.

A SLURM job can be preempted, requeued and resumed several times, and a process can be SIGKILLed
(OOM killer, `scancel --signal=KILL`, a node failure) without running any `finally`. So an attempt
is not written once at its end: it appends
- a `start` line when it begins (calls 0);
- a `progress` line before requests go to the model (`in_flight`: a cache chunk's requests, or
  every request of the transformers judge's streamed call) and another after each commit to the
  request cache (`calls` grows, `in_flight` what is still to come: 0 after a chunk);
- an `end` line with its status (completed | interrupted | failed) when it ends normally.
Every line carries the attempt's id and its cumulative `calls`. `read_attempts` keeps each
attempt's last line: a killed attempt ends on a progress line (status "running" when read back,
"killed" once a later attempt has started) and still counts every commit it made; `in_flight`
> 0 there means requests were sent and not committed when the process died (a chunk, or the rest
of a streamed call, of which only the step running at the kill had been computed). Summing
`calls` over attempts gives every committed model call; adding `in_flight` gives every call sent.

Lines are appended with one `os.write` on an O_APPEND descriptor, so concurrent writers (two
attempts sharing a run directory) never interleave within a line, and a kill never leaves half a
line. The one window: a kill between a chunk's (or step's) cache commit and its progress line
(microseconds, but a kill timed on seeing a commit can land there: tests/zepo/test_zepo_kill.py) shows
that chunk as in flight rather than committed; the cache, not this file, says what was judged.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.errors import DataError
from harness.files import read_text

ATTEMPTS = "attempts.jsonl"
"""Per-run-directory log: the lines of every attempt of the run."""


def _slurm_ids() -> dict[str, Any]:
    env = os.environ
    job = env.get("SLURM_JOB_ID")
    if env.get("SLURM_ARRAY_JOB_ID"):
        job = f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID')}"
    return {"job_id": job, "restart_count": int(env.get("SLURM_RESTART_COUNT", 0) or 0)}


def append_line(path: str | Path, row: dict[str, Any]) -> None:
    """One JSON line appended with a single write (O_APPEND): never interleaved, never half-written."""
    data = (json.dumps(row) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
        except OSError:
            written = -1
            raise
        finally:
            if written != len(data):  # a full disk took part of the line: take it back
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
        if written != len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    finally:
        os.close(fd)


class Attempt:
    """One attempt of a run, appending its lines to out_dir/attempts.jsonl as it goes."""

    def __init__(self, out_dir: str | Path, counter: Any = None) -> None:
        self.path = Path(out_dir) / ATTEMPTS
        self.counter = counter
        """Anything with `.calls` (the run context): read for the end line."""
        self.id = uuid.uuid4().hex[:12]
        self.started = time.time()
        self.calls = 0

    def _write(self, event: str, status: str, in_flight: int = 0, **extra: Any) -> None:
        append_line(
            self.path,
            {
                "attempt": self.id,
                **_slurm_ids(),
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "event": event,
                "status": status,
                "calls": self.calls,
                "in_flight": in_flight,
                "started": round(self.started, 3),
                **extra,
            },
        )

    def start(self) -> None:
        self._write("start", "running")

    def progress(self, calls: int, in_flight: int = 0) -> None:
        """`calls` requests committed so far by this attempt; `in_flight` sent and not yet committed."""
        self.calls = int(calls)
        self._write("progress", "running", int(in_flight))

    def end(self, status: str) -> None:
        calls = getattr(self.counter, "calls", None)
        if calls is not None:
            self.calls = int(calls)
        self._write("end", status, seconds=round(time.time() - self.started, 3))


@contextlib.contextmanager
def record_attempt(out_dir: str | Path, counter: Any = None) -> Iterator[Attempt]:
    """An Attempt: its start line now, its end line when the block ends (not after SIGKILL).

    status: completed | interrupted (SystemExit/KeyboardInterrupt: preempted, requeued) | failed.
    """
    attempt = Attempt(out_dir, counter)
    attempt.start()
    status = "failed"
    try:
        yield attempt
        status = "completed"
    except (SystemExit, KeyboardInterrupt):
        status = "interrupted"
        raise
    finally:
        attempt.end(status)


def read_attempts(out_dir: str | Path) -> list[dict[str, Any]]:
    """Each attempt's last line, in order of start. An attempt without an end line is "running"
    if it is the last one started, else "killed" (it ended without writing one)."""
    path = Path(out_dir) / ATTEMPTS
    last: dict[str, dict[str, Any]] = {}
    # read as input files are: not UTF-8, unreadable, or a line that is not an object: one line
    for n, line in enumerate(read_text(path).splitlines() if path.is_file() else [], 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError:  # half a line from a crash of an older version: not an attempt
                continue
            if not isinstance(row, dict):
                raise DataError(
                    "not an attempt's line (a JSON object): move the file aside to start the record afresh",
                    where=f"{path}, line {n}",
                )
            last[str(row.get("attempt") or f"line-{len(last)}")] = row
    rows = sorted(last.values(), key=lambda r: r["started"] if _number(r.get("started")) else 0)
    for i, row in enumerate(rows):
        if row.get("event") not in (None, "end"):  # None: a line of the older one-line-per-attempt format
            row["status"] = "running" if i == len(rows) - 1 and alive(row) else "killed"
    return rows


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def alive(row: dict[str, Any]) -> bool:
    """Whether the process an attempt line names may still run: a line written on this host whose
    pid is gone (SIGKILL, OOM) is not; one from another host, or without host and pid, cannot be
    checked from here and is taken as running."""
    pid = row.get("pid")
    if row.get("host") != socket.gethostname() or not _number(pid) or int(pid) <= 0:
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: a process of another user holds that pid
        return True
    return True


def completed_here(out_dir: str | Path, since: float) -> bool:
    """Whether the last attempt this process started in `out_dir` at or after `since` (time.time())
    ended `completed`: every file of the run written."""
    mine = [
        r for r in read_attempts(out_dir) if r.get("pid") == os.getpid() and (r.get("started") or 0) >= since
    ]
    return bool(mine) and mine[-1].get("status") == "completed"


def summed_calls(out_dir: str | Path) -> dict[str, int]:
    """{calls: committed by every attempt, in_flight: sent and not committed by a killed attempt, attempts}."""
    rows = read_attempts(out_dir)
    return {
        "calls": sum(int(r.get("calls") or 0) for r in rows),
        "in_flight": sum(int(r.get("in_flight") or 0) for r in rows),
        "attempts": len(rows),
    }
