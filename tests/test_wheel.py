"""The install a cluster user makes: the built wheel, in a fresh venv, from an empty folder.

The wheel is built from this checkout (`pip wheel --no-deps --no-build-isolation`), installed with
`--no-deps` into a venv made with `--system-site-packages` (torch, transformers, vLLM come from the
system; the project itself must come from the wheel, not from the editable install), and the two
commands a user types first run from an empty directory: `harness-run experiment=judge
model=tiny_llama ...`, `harness-bench --help` (every subcommand listed) and
`python -m harness.judges.serve MODEL --print`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import REPO, _run_env

from harness import confdir
from harness.confdir import conf_dir


def test_conf_dir_is_the_checkouts_conf():
    assert conf_dir() == REPO / "conf"


def test_conf_dir_refuses_a_tree_without_conf(tmp_path, monkeypatch):
    """Negative control of conf_dir(): a package folder with no conf/ beside or inside it."""
    (tmp_path / "harness").mkdir()
    monkeypatch.setattr(confdir, "_HERE", tmp_path / "harness")
    with pytest.raises(FileNotFoundError, match="no conf/config.yaml"):
        conf_dir()


def test_pyproject_lists_every_package():
    """pyproject lists the packages by hand (a mapped harness.conf hides them from `find`): every
    folder of harness/ with Python files must be in the list, or the wheel silently lacks it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(project["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "harness").rglob("*.py")
             if "__pycache__" not in p.parts}
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert project["tool"]["setuptools"]["package-dir"]["harness.conf"] == "conf"
    assert project["project"]["name"] != "harness"  # PyPI's `harness` is another project


@pytest.mark.slow
def test_wheel_installs_and_runs_from_an_empty_directory(tmp_path):
    src, wheels, venv, empty = tmp_path / "src", tmp_path / "wheels", tmp_path / "venv", tmp_path / "empty"
    empty.mkdir()
    # Built from a copy of what the build reads, so the checkout gets no build/ or *.egg-info (an egg-info
    # on PYTHONPATH makes pip believe the distribution is installed and skip the wheel).
    for name in ("harness", "conf"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    env = _run_env(tmp_path, None)
    env.pop("PYTHONPATH", None)  # the tests' checkout must not shadow the wheel
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(wheels), str(src)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = wheels.glob("zepo_abb_harness-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    r = subprocess.run([str(py), "-c", "import harness.confdir as c; print(c.__file__); print(c.conf_dir())"],
                       cwd=empty, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    module, conf = r.stdout.split()
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert Path(module) == site / "harness" / "confdir.py", "the venv imports the checkout, not the wheel"
    assert Path(conf) == site / "harness" / "conf" and (Path(conf) / "model" / "tiny_llama.yaml").is_file()

    out = tmp_path / "run"
    r = subprocess.run(["harness-run", "experiment=judge", "model=tiny_llama", "task.docs=1",
                        "task.max_candidates=3", "experiment.shuffles=2", f"hydra.run.dir={out}"],
                       cwd=empty, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "results.json").is_file() and (out / "config.json").is_file()
    assert list(empty.iterdir()) == [], "the run wrote into the current folder"

    # The benchmarks ship too: the console script lists every subcommand (harness.bench.cli).
    from harness.bench.cli import SUBCOMMANDS

    r = subprocess.run(["harness-bench", "--help"], cwd=empty, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("    ") and line.split()}
    assert set(SUBCOMMANDS) <= listed, r.stdout
    r = subprocess.run([str(py), "-c", "import harness.bench.cli as c; print(c.__file__)"], cwd=empty, env=env,
                       capture_output=True, text=True, timeout=120)
    assert Path(r.stdout.strip()) == site / "harness" / "bench" / "cli.py", "harness-bench runs the checkout's copy"

    pytest.importorskip("vllm")
    r = subprocess.run([str(py), "-m", "harness.judges.serve", "tiny_mistral7b", "--print"],
                       cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    cmd = r.stdout.split()
    assert cmd[:3] == [str(py), "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--served-model-name") + 1] == "tiny_mistral7b"
