"""Filesystem faults a test makes: a path made read-only."""

import contextlib
import os
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def read_only(path: Path):
    """`path` (file or folder) made read-only for this process, or the test skipped."""
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("running as root without chattr +i: cannot make a path read-only")
        undo = ["chattr", "-i", str(path)]
    else:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        undo = None
    try:
        yield path
    finally:
        if undo:
            subprocess.run(undo, check=True)
        else:
            path.chmod(mode)
