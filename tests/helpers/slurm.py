"""The localhost SLURM cluster test_slurm starts (../shared/tools/slurm-local.sh) and its stop."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from helpers import REPO

SLURM_TOOL = Path(os.environ.get("HARNESS_SLURM_LOCAL", REPO.parent / "shared" / "tools" / "slurm-local.sh"))
SLURM_STARTED = Path(tempfile.gettempdir()) / "harness-slurm-tests.started"
"""Present while a localhost SLURM cluster that test_slurm's `slurm_cluster` started runs."""


def stop_started_slurm() -> None:
    """Stop the localhost SLURM cluster if a test session started it (and HARNESS_KEEP_SLURM is unset)."""
    import subprocess

    if SLURM_STARTED.exists() and not os.environ.get("HARNESS_KEEP_SLURM"):
        subprocess.run(["bash", str(SLURM_TOOL), "stop"], capture_output=True, timeout=300)
        SLURM_STARTED.unlink(missing_ok=True)
