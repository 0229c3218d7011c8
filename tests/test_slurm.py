"""SLURM: launcher/sweep configs, and against a real SLURM cluster on localhost (slurm-local.sh):
(a) a Hydra multirun through hydra/launcher=slurm_local_ci gives the same table as the basic launcher;
(b) a job signalled for preemption requeues into the same directory and resumes from the request
    cache, losing and repeating nothing; (c) judge.sbatch over 4 array tasks + merge.sbatch equals
    the unsharded run exactly.

The cluster tests are marked `slurm`; without sbatch they start ../shared/tools/slurm-local.sh
(as root) and skip with the reason when that cannot run. CI starts it before pytest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.runtime.attempts import read_attempts

REPO = Path(__file__).resolve().parents[1]
SLURM_TOOL = Path(os.environ.get("HARNESS_SLURM_LOCAL", REPO.parent / "shared" / "tools" / "slurm-local.sh"))
CONF = REPO / "conf"
TINY = ["experiment=judge", "model=tiny_llama", "task=summeval", "progress=false", "experiment.shuffles=10"]


# ---------------------------------------------------------------- configs (no cluster needed)
def _compose(overrides: list[str], hydra_section: bool = True):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=hydra_section)


@pytest.mark.parametrize("name,target", [("slurm", "SlurmLauncher"), ("slurm_local_ci", "SlurmLauncher"),
                                         ("local", "LocalLauncher")])
def test_launcher_configs_compose_and_every_key_is_commented(name, target):
    from omegaconf import OmegaConf

    cfg = _compose([f"hydra/launcher={name}"])
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"].endswith(target)
    assert launcher["submitit_folder"].endswith("/.submitit/%j")
    assert launcher["name"] == ("harness-ci-judge" if name == "slurm_local_ci" else "harness-judge")
    if name == "slurm":
        assert launcher["gpus_per_node"] == 1 and launcher["max_num_timeout"] > 0
        # The shell sees ${SLURM_CPUS_PER_TASK:-1}, not an OmegaConf interpolation.
        assert "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}" in launcher["setup"]
    if name == "slurm_local_ci":
        assert launcher["partition"] == "debug" and launcher["gpus_per_node"] is None
        assert launcher["max_num_timeout"] >= 1  # short limits: submitit counts a preemption as a timeout
    for line in (CONF / "hydra" / "launcher" / f"{name}.yaml").read_text().splitlines():
        if re.match(r"^[a-z_]+:", line):
            assert "#" in line, f"{name}.yaml: uncommented key: {line}"


def test_sweep_configs_compose_with_their_grid_and_wandb_group():
    from omegaconf import OmegaConf

    missing = []
    for path in sorted((CONF / "sweep").glob("*.yaml")):
        raw = OmegaConf.load(path)
        experiment = next(str(v) for d in raw.defaults for k, v in d.items() if k == "override /experiment")
        if not (CONF / "experiment" / f"{experiment}.yaml").is_file():
            missing.append(f"{path.stem} (experiment {experiment} not written yet)")
            continue
        cfg = _compose([f"+sweep={path.stem}"])
        assert cfg.sweep.name == path.stem and cfg.wandb.group == path.stem
        assert cfg.wandb.job_type == cfg.experiment.name
        assert str(cfg.hydra.sweep.dir).startswith(f"multirun/{path.stem}/")
        params = dict(cfg.hydra.sweeper.params)
        assert params and all("," in str(v) for v in params.values()), path.stem
    if missing:
        print("sweep configs not composed:", "; ".join(missing))


def test_wandb_sweep_yaml_reproduces_the_hydra_grid(tmp_path):
    out = tmp_path / "sweep.yaml"
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "wandb_sweep.py"), "--sweep", "zepo_table3_dialogue",
                        "--out", str(out)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    sweep = yaml.safe_load(out.read_text())
    assert sweep["program"] == "harness/run.py" and sweep["method"] == "grid"
    assert sweep["command"][-1] == "${args_no_hyphens}" and "+sweep=zepo_table3_dialogue" in sweep["command"]
    assert sweep["parameters"]["task.aspect"]["values"] == ["naturalness", "engagingness", "overall"]
    assert sweep["parameters"]["task"]["values"] == ["usr_zepo", "topicalchat"]

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from wandb_sweep import build_sweep
    finally:
        sys.path.pop(0)
    s = build_sweep({"x": "range(1,4)", "lr": "tag(log,interval(0.001,0.1))"}, method="random", metric="none/spearman")
    assert s["parameters"]["x"] == {"values": ["1", "2", "3"]}
    assert s["parameters"]["lr"] == {"distribution": "log_uniform_values", "min": 0.001, "max": 0.1}
    with pytest.raises(SystemExit, match="interval cannot be a grid"):
        build_sweep({"lr": "interval(0,1)"})


def test_sbatch_templates_parse():
    for name in ("judge.sbatch", "merge.sbatch"):
        r = subprocess.run(["bash", "-n", str(REPO / "slurm" / name)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- the cluster
def _cluster_problem() -> str | None:
    """None when a SLURM node answers idle/mixed/allocated, else why not."""
    if not shutil.which("sinfo") or not shutil.which("sbatch"):
        return "sbatch/sinfo not installed"
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo timed out"
    usable = ("idle", "mixed", "allocated", "completing")
    if r.returncode == 0 and any(s.rstrip("*~#") in usable for s in r.stdout.split()):
        return None
    return f"sinfo: {(r.stderr or r.stdout).strip()[:200] or 'no usable node'}"


@pytest.fixture(scope="session")
def slurm_cluster():
    if SLURM_TOOL.is_file() and "SLURM_CONF" not in os.environ and not Path("/etc/slurm/slurm.conf").exists():
        env_line = subprocess.run(["bash", str(SLURM_TOOL), "env"], capture_output=True, text=True).stdout
        m = re.search(r"SLURM_CONF=(\S+)", env_line)
        if m and Path(m.group(1)).is_file():
            os.environ["SLURM_CONF"] = m.group(1)
    problem, started = _cluster_problem(), False
    if problem is not None:
        if not SLURM_TOOL.is_file():
            pytest.skip(f"no SLURM cluster ({problem}) and no {SLURM_TOOL} to start one")
        r = subprocess.run(["bash", str(SLURM_TOOL), "start"], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            pytest.skip(f"no SLURM cluster ({problem}); slurm-local.sh start failed: {r.stderr.strip()[-300:]}")
        m = re.search(r"SLURM_CONF=(\S+)", subprocess.run(["bash", str(SLURM_TOOL), "env"], capture_output=True,
                                                         text=True).stdout)
        if m:
            os.environ["SLURM_CONF"] = m.group(1)
        started, problem = True, _cluster_problem()
        if problem is not None:
            pytest.skip(f"slurm-local.sh started but the cluster is not usable: {problem}")
    yield
    if started and not os.environ.get("HARNESS_KEEP_SLURM"):
        subprocess.run(["bash", str(SLURM_TOOL), "stop"], capture_output=True, timeout=300)


@pytest.fixture
def job_env(tmp_path, tiny_llama, shared_data) -> dict[str, str]:
    """Environment for jobs: per-test request cache and data dir, data pre-fetched (as on a login node)."""
    from harness.data.fetch import ensure_data

    data = tmp_path / "data"
    ensure_data(data, mirror=shared_data, only=["summeval"])
    return {**os.environ, "HARNESS_CACHE": str(tmp_path / "cache"), "HARNESS_DATA_DIR": str(data),
            "HARNESS_DATA_MIRROR": str(shared_data), "HARNESS_MODEL_CACHE": str(Path(tiny_llama).parents[1]),
            "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1", "PYTHON": sys.executable,
            "HYDRA_FULL_ERROR": "1"}


def _harness(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.run", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen, what: str, timeout: int = 240) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"{what} did not finish in {timeout}s:\n{out[-3000:]}")
    assert proc.returncode == 0, f"{what} failed:\n{out[-3000:]}"
    return out


def _reference_run(overrides: list[str], env: dict[str, str], out: Path, monkeypatch) -> dict:
    """The same config run in-process on one thread (as the jobs) with its own fresh cache."""
    import torch

    from harness.runtime.entry import run

    for key in ("HARNESS_DATA_DIR", "HARNESS_DATA_MIRROR", "HARNESS_MODEL_CACHE"):
        monkeypatch.setenv(key, env[key])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run(_compose([*overrides, f"cache.path={out}.sqlite", "wandb.mode=disabled"], False), out)
    finally:
        torch.set_num_threads(threads)


def _without_calls(results: dict) -> dict:
    return {k: v for k, v in results.items() if k not in ("judge_calls", "judge_work")}  # facts about the run


@pytest.mark.slurm
def test_slurm_multirun_table_equals_local_multirun(slurm_cluster, job_env, tmp_path):
    from harness.runtime.collect import collect

    grid = [*TINY, "task.docs=1", "task.max_candidates=3", "task.aspect=coherence,fluency"]
    slurm = _harness(["-m", "hydra/launcher=slurm_local_ci", *grid, f"cache.path={tmp_path}/slurm.sqlite",
                      f"hydra.sweep.dir={tmp_path}/slurm"], job_env)
    local = _harness(["-m", *grid, f"cache.path={tmp_path}/local.sqlite", f"hydra.sweep.dir={tmp_path}/local"], job_env)
    _finish(local, "local multirun")
    log = _finish(slurm, "SLURM multirun")
    assert "Submitit 'slurm' sweep output dir" in log
    # Both jobs really ran as SLURM array tasks (submitit keeps each task's log and result).
    assert len(list((tmp_path / "slurm" / ".submitit").glob("*_[01]/*_result.pkl"))) == 2
    t_slurm = collect(tmp_path / "slurm", tmp_path / "t_slurm")
    t_local = collect(tmp_path / "local", tmp_path / "t_local")
    assert [r[0] for r in t_slurm.rows] == ["coherence", "fluency"]
    assert (tmp_path / "t_slurm" / "table.csv").read_text() == (tmp_path / "t_local" / "table.csv").read_text()
    assert (t_slurm.columns, t_slurm.rows) == (t_local.columns, t_local.rows)
    assert "task.docs=1" in t_slurm.caption  # shared overrides go under the table
    assert (tmp_path / "t_slurm" / "figures" / "none_spearman.png").stat().st_size > 0
    for job in ("0", "1"):
        assert (tmp_path / "slurm" / job / "judgments.jsonl").read_bytes() == \
            (tmp_path / "local" / job / "judgments.jsonl").read_bytes()
        assert list((tmp_path / "slurm" / job / "wandb").glob("offline-run-*")), "W&B offline run missing"


def _cache_rows(path: Path) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]
    except sqlite3.Error:  # not created yet
        return 0


@pytest.mark.slurm
def test_preempted_job_requeues_and_resumes_from_its_cache(slurm_cluster, job_env, tmp_path, monkeypatch):
    # 3 docs x 20 ordered pairs + the content-free prompt = 61 requests, committed 2 at a time.
    cfg = [*TINY, "task.docs=3", "task.max_candidates=5", "backend.batch_size=1", "cache.chunk=2"]
    cache, sweep = tmp_path / "pre.sqlite", tmp_path / "pre"
    proc = _harness(["-m", "hydra/launcher=slurm_local_ci", *cfg, f"cache.path={cache}", f"hydra.sweep.dir={sweep}",
                     "wandb.mode=disabled"], job_env)
    deadline = time.time() + 180
    while _cache_rows(cache) < 2:  # the first chunk is committed: the job is mid-run
        if proc.poll() is not None or time.time() > deadline:
            pytest.fail(f"job never started scoring:\n{_finish(proc, 'preemption run')}")
        time.sleep(0.05)
    job = next(d.name for d in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", d.name))
    r = subprocess.run(["scancel", "--signal=USR2", job], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows_at_signal = _cache_rows(cache)
    _finish(proc, "preempted multirun")

    attempts = read_attempts(sweep / "0")
    assert [a["status"] for a in attempts] == ["interrupted", "completed"], attempts
    assert [a["restart_count"] for a in attempts] == [0, 1]  # SLURM requeued it; same run directory
    assert rows_at_signal <= attempts[0]["calls"] < 61  # stopped mid-run, at a chunk boundary
    # Repeating nothing: every model call over both attempts was a distinct request.
    assert sum(a["calls"] for a in attempts) == 61 == _cache_rows(cache)
    # Losing nothing: the resumed run wrote what an uninterrupted run writes.
    ref = _reference_run(cfg, job_env, tmp_path / "ref", monkeypatch)
    assert (sweep / "0" / "judgments.jsonl").read_bytes() == (tmp_path / "ref" / "judgments.jsonl").read_bytes()
    assert _without_calls(json.loads((sweep / "0" / "results.json").read_text())) == _without_calls(ref)


@pytest.mark.slurm
def test_sharded_array_job_merges_to_the_unsharded_run(slurm_cluster, job_env, tmp_path, monkeypatch):
    # batch_size=1: a prompt's score cannot depend on its batch neighbours, which differ by shard.
    cfg = [*TINY, "task.docs=4", "task.max_candidates=3", "backend.batch_size=1"]
    out, logs = tmp_path / "sharded", tmp_path / "logs"
    logs.mkdir()
    env = {**job_env, "OUT": str(out), "WANDB_MODE": "disabled"}
    small = ["--partition=debug", "--cpus-per-task=1", "--mem=2G", "--time=10"]
    r = subprocess.run(["sbatch", "--parsable", "--array=0-3", *small, f"--output={logs}/judge-%A_%a.out",
                        str(REPO / "slurm" / "judge.sbatch"), *cfg], cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    array = r.stdout.strip().split(";")[0]
    try:
        m = subprocess.run(["sbatch", "--parsable", "--wait", f"--dependency=afterok:{array}",
                            "--kill-on-invalid-dep=yes", *small, f"--output={logs}/merge-%j.out",
                            str(REPO / "slurm" / "merge.sbatch"), str(out)],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", array])
        pytest.fail("sharded run + merge did not finish in 300 s")
    logs_text = "\n".join(p.read_text()[-1500:] for p in sorted(logs.iterdir()))
    assert m.returncode == 0, f"merge job failed ({m.stderr.strip()}):\n{logs_text}"
    for i in range(4):
        shard_cfg = json.loads((out / f"shard-{i}" / "config.json").read_text())
        assert (shard_cfg["task"]["shard_index"], shard_cfg["task"]["num_shards"]) == (i, 4)
        assert json.loads((out / f"shard-{i}" / "results.json").read_text())["n_docs"] == 1
    ref = _reference_run(cfg, job_env, tmp_path / "ref", monkeypatch)
    assert (out / "merged" / "judgments.jsonl").read_bytes() == (tmp_path / "ref" / "judgments.jsonl").read_bytes()
    merged = json.loads((out / "merged" / "results.json").read_text())
    assert _without_calls(merged) == _without_calls(ref)
    assert merged["metrics"] == ref["metrics"] and merged["n_judgments"] == 24
