"""The harness commands as a user types them: in a subprocess (`run_harness`, `run_bench`,
`killed_after_commits`) or in this process (`run_in_process`: the same entry, command line,
environment and return value, helpers/inprocess.py), each with an isolated cache, data dir and W&B
dir per test; and what a bad input must give (`assert_one_line_error`)."""

from __future__ import annotations

import os
from pathlib import Path

from helpers import REPO, SHARED_DATA


def run_env(tmp: Path, env: dict | None) -> dict:
    """The environment of one run: an isolated cache, data dir and W&B data dir per test."""
    full_env = {
        **os.environ,
        "HARNESS_DATA_MIRROR": str(SHARED_DATA),
        "WANDB_MODE": "offline",
        "HARNESS_DATA_DIR": str(tmp / "data"),
        "HARNESS_CACHE": str(tmp / "cache"),
        "HYDRA_FULL_ERROR": "0",
        "WANDB_DATA_DIR": str(tmp / "wandb-data"),
        **(env or {}),
    }
    # Tiny models and converted SmolLM2 live in the shared model cache, not the per-test cache.
    full_env.setdefault("HARNESS_MODEL_CACHE", str(Path.home() / ".cache" / "harness"))
    return full_env


def run_harness(args: list[str], tmp: Path, *, env: dict | None = None, timeout: int = 600, cwd: Path = REPO):
    """Run `python -m harness.run` in a subprocess with an isolated cache and data dir: for tests of
    a door a user walks through as a process (README commands, signals, SLURM, disk faults). `cwd`:
    the folder it is typed in (the repository unless a test watches what lands in its own)."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "harness.run", *args],
        cwd=cwd,
        env=run_env(tmp, env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_in_process(args: list[str], tmp: Path, *, env: dict | None = None, timeout: int = 600):
    """run_harness's twin without the interpreter: the same entry (harness.runtime.entry.main), the
    same command line, environment and return value, in this process (helpers/inprocess.py)."""
    from helpers.inprocess import run_in_process as run

    return run(args, tmp, timeout=timeout, repo=REPO, base_env=run_env(tmp, env))


def run_bench(args: list[str], tmp: Path, *, timeout: int = 600):
    """`python -m harness.bench ARGS` (the `harness-bench` command) as a user types it, isolated as
    run_harness; the stdout's last line is its JSON (`bench_json`)."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "harness.bench", *args],
        cwd=REPO,
        env=run_env(tmp, None),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def bench_json(proc) -> dict:
    """The one JSON line a benchmark prints last."""
    import json

    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cache_rows(cache: Path) -> int:
    """Scores committed to a request cache file (0 before it exists)."""
    import sqlite3

    try:
        with sqlite3.connect(cache, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def killed_after_commits(args: list[str], tmp: Path, rows: int, timeout: int = 600):
    """`python -m harness.run *args` with run_harness's isolated cache, SIGKILLed as soon as its
    request cache holds `rows` scores (or it ended, or `timeout` passed): the killed process and the
    rows committed then."""
    import signal
    import subprocess
    import sys
    import time

    cache = tmp / "cache" / "requests.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.run", *args],
        cwd=REPO,
        env=run_env(tmp, None),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + timeout
    while cache_rows(cache) < rows and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc, cache_rows(cache)


def assert_one_line_error(r, *needles):
    """A bad input's answer: exit 2, no traceback, exactly one `error:` line, holding every needle."""
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, r.stderr[-2000:]
    for n in needles:
        assert n in errors[0], errors[0]
