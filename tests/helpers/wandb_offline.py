"""An offline W&B run's records, read with W&B's own reader (`wandb leet inspect`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def wandb_records(run_dir: Path) -> list[dict]:
    """Every record of a run directory's offline W&B run, read with W&B's own log reader."""
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert offline, f"no offline W&B run under {run_dir}"
    r = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(offline[-1])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def run_record(run_dir: Path) -> dict:
    """The offline W&B run's own record: its display name, group, job type."""
    (rec,) = [r["run"] for r in wandb_records(run_dir) if r.get("type") == "run"]
    return rec
