"""ruff formats and lints the project ([tool.ruff] in pyproject.toml): the suite fails on a file that
`ruff format` would change or that `ruff check` flags."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_ruff_check_passes():
    got = ruff("check", "--no-cache", ".")
    assert got.returncode == 0, got.stdout + got.stderr


def test_ruff_format_check_passes():
    got = ruff("format", "--check", "--no-cache", ".")
    assert got.returncode == 0, got.stdout + got.stderr


def test_ruff_catches_an_unformatted_file_and_an_unused_import(tmp_path):
    """Negative control: the project's own settings flag a folded line and an unused import."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\nx = {  'a':1 }\n")
    assert ruff("format", "--check", "--no-cache", ".", cwd=tmp_path).returncode == 1
    got = ruff("check", "--no-cache", ".", cwd=tmp_path)
    assert got.returncode == 1 and "F401" in got.stdout
