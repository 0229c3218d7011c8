"""`python -m harness.data.fetch` honours $HARNESS_DATA_MIRROR as setup.sh and the configs do;
an explicit --mirror wins. Downloads are pointed at a closed loopback port, so a run that tried
upstream fails here with the URL it tried, and the network is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.data.fetch import cli_mirror

REPO = Path(__file__).resolve().parents[2]
NOWHERE = [
    "--base-url",
    "http://127.0.0.1:9",
    "--retries",
    "1",
    "--timeout",
    "2",
]  # nothing listens on port 9


def _fetch(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.data.fetch", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_DATA_DIR", "HARNESS_DATA_MIRROR")}
    return {**env, "HOME": str(home), **extra}


def test_env_mirror_fills_an_empty_home_data_dir(shared_data, tmp_path):
    home = tmp_path / "home"
    r = _fetch(["--only", "llmbar_natural,zepo", *NOWHERE], _env(home, HARNESS_DATA_MIRROR=str(shared_data)))
    assert r.returncode == 0, r.stderr
    data = home / ".cache" / "harness" / "data"
    copied = [line.split()[1] for line in r.stdout.splitlines() if line.split()[:1] == ["copied"]]
    assert len(copied) == 2 and "downloaded" not in r.stdout
    for path in map(Path, copied):
        assert path.is_relative_to(data)
        assert path.read_bytes() == (shared_data / path.relative_to(data)).read_bytes()


def test_explicit_mirror_wins_over_the_env(shared_data, tmp_path):
    absent = tmp_path / "absent"
    env = _env(tmp_path / "home", HARNESS_DATA_MIRROR=str(absent))
    r = _fetch(["--dest", str(tmp_path / "d"), "--mirror", str(shared_data), "--only", "zepo", *NOWHERE], env)
    assert r.returncode == 0 and "copied" in r.stdout, r.stderr
    # The same command without --mirror reads the variable: its (missing) folder is the error.
    r = _fetch(["--dest", str(tmp_path / "d2"), "--only", "zepo", *NOWHERE], env)
    assert r.returncode == 2 and r.stderr == f"error: {absent}: mirror folder not found\n"


def test_without_a_mirror_it_goes_upstream(shared_data, tmp_path, monkeypatch):
    """Negative control: no variable (or `--mirror ''`) -> a download, which fails at the closed port."""
    monkeypatch.delenv("HARNESS_DATA_MIRROR", raising=False)
    assert cli_mirror(None) is None and cli_mirror(str(shared_data)) == str(shared_data)
    monkeypatch.setenv("HARNESS_DATA_MIRROR", str(shared_data))
    assert cli_mirror(None) == str(shared_data) and cli_mirror("") is None
    for args, env in (
        (["--only", "zepo"], _env(tmp_path / "home")),
        (["--only", "zepo", "--mirror", ""], _env(tmp_path / "home", HARNESS_DATA_MIRROR=str(shared_data))),
    ):
        r = _fetch([*args, *NOWHERE], env)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert (
            r.stderr.startswith("error: zepo/")
            and "download failed" in r.stderr
            and "http://127.0.0.1:9/" in r.stderr
        )
        assert "harness-fetch --mirror DIR or HARNESS_DATA_MIRROR" in r.stderr  # the way out, named
        assert not list((tmp_path / "home").rglob("init_prompts.json"))
