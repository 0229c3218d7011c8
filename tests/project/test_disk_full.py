"""The run directory's disk filling mid-run: one `error:` line and exit 2 wherever it fills, nothing
half-written (no `.NAME.tmp-PID` left, every file whole), and a rerun after freeing space equals an
uninterrupted run without asking the model again (the judged pairs are in the request cache, which
lives on another disk).

A real full disk: a small tmpfs mounted for the test (`mount -t tmpfs -o size=1m`) holding the run
directory, filled with a filler file until N KB are left. The tiny judge run writes about 106 KB;
the levels stop it before the first model call (8 KB left: attempts.jsonl's progress line), after
results.json (32) and at the report card's last picture (96). Negative control: the same run on the
same kind of mount with room to spare completes (exit 0), so the failures come from the space.
The full-disk runs are `python -m harness.run` processes (the door: the exit code and stderr of a
process that hit ENOSPC, whatever it flushes on its way out); the reruns and the uninterrupted run are
the same command through the same entry in the test's process (helpers.cli.run_in_process): what they
compute and write is checked, not how a process ends.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from helpers.cli import assert_one_line_error, run_harness, run_in_process
from helpers.results import results_only

pytestmark = pytest.mark.slow

RUN = [
    "experiment=judge",
    "model=tiny_llama",
    "task.docs=1",
    "task.max_candidates=3",
    "wandb.mode=disabled",
    "progress=false",
]


def _mount(where: Path, size: str) -> None:
    where.mkdir(parents=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount rights): {r.stderr.strip()}")


def _umount(where: Path) -> None:
    subprocess.run(["umount", str(where)], check=False, capture_output=True)


def _fill(mount: Path, free_kb: int) -> Path:
    """A filler file leaving `free_kb` KB available on the mount."""
    avail = shutil.disk_usage(mount).free // 1024
    filler = mount / "filler"
    with filler.open("wb") as f:
        f.write(b"\0" * ((avail - free_kb) * 1024))
    assert abs(shutil.disk_usage(mount).free // 1024 - free_kb) <= 4
    return filler


def _outcome(run: Path) -> tuple[dict, str, str]:
    results = json.loads((run / "results.json").read_text())
    return results_only(results), (run / "judgments.jsonl").read_text(), (run / "card.md").read_text()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The uninterrupted run, on the same kind of mount with room to spare (the negative control)."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    mount = tmp / "disk"
    _mount(mount, "1m")
    try:
        r = run_in_process([*RUN, f"hydra.run.dir={mount / 'run'}"], tmp, timeout=300)
        outcome = _outcome(mount / "run") if r.returncode == 0 else None
        calls = json.loads((mount / "run" / "results.json").read_text())["judge_calls"] if outcome else None
    finally:
        _umount(mount)
    return r, outcome, calls


def _cached_rows(tmp: Path) -> int:
    path = tmp / "cache" / "requests.sqlite"
    if not path.is_file():  # the disk filled before the cache was opened
        return 0
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]


@pytest.mark.parametrize("free_kb", [8, 32, 96])
def test_a_full_disk_is_one_line_and_a_rerun_equals_an_uninterrupted_run(tmp_path, free_kb, uninterrupted):
    mount = tmp_path / "disk"
    _mount(mount, "1m")
    try:
        filler = _fill(mount, free_kb)
        run = mount / "run"
        full = run_harness([*RUN, f"hydra.run.dir={run}"], tmp_path, timeout=300)
        assert_one_line_error(full, "no space left", str(run), "rerun")
        assert not [p.name for p in run.rglob("*") if ".tmp-" in p.name or p.suffix == ".part"]
        for p in run.rglob("*.json"):  # every file there is whole
            json.loads(p.read_text())
        for p in run.rglob("*.jsonl"):
            [json.loads(line) for line in p.read_text().splitlines()]
        kept = _cached_rows(tmp_path)
        filler.unlink()  # free the space, run the same command again
        again = run_in_process([*RUN, f"hydra.run.dir={run}"], tmp_path, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        _, outcome, calls = uninterrupted
        # the finished work was kept: the rerun asks only what the first attempt had not judged
        assert json.loads((run / "results.json").read_text())["judge_calls"] == calls - kept
        assert _outcome(run) == outcome
    finally:
        _umount(mount)


def test_negative_control_the_same_mount_with_room_runs_to_the_end(uninterrupted):
    r, outcome, calls = uninterrupted
    assert r.returncode == 0 and outcome is not None and calls > 0, r.stderr[-3000:]
