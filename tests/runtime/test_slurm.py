"""SLURM: launcher/sweep configs, and against a real SLURM cluster on localhost (slurm-local.sh),
always through the shipped conf/hydra/launcher/slurm.yaml with site overrides only (partition,
no GPUs, memory, CPUs):
(a) judge, ZEPO and A-BB multiruns through hydra/launcher=slurm give the same collected table as
    the basic launcher (the same command line in the test's process: helpers.cli.run_in_process), and
    the sbatch script submitit wrote sets OMP_NUM_THREADS and SRUN_CPUS_PER_TASK as intended;
(b) a job signalled for preemption requeues into the same directory and resumes from the request
    cache, losing and repeating nothing; (c) a 3-shard sweep: a failed shard is one line and named
    at the end (no merged run), the rerun judges only that shard, and the merge equals the unsharded
    run; a cache file per job; (d) jobs that need other resources go out as arrays of their own;
(e) site configs (--config-dir), and slurm/node.sbatch's shards side by side in one job.

The cluster tests are marked `slurm`; without sbatch they start ../shared/tools/slurm-local.sh
(as root) and skip with the reason when that cannot run. CI starts it before pytest. They share
the cluster, never each other's jobs: each submits and waits for its own (`slurm_cluster` keeps
one session from starting or stopping the cluster under another's feet).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers.abb import SLICE as ABB_SLICE
from helpers.cli import run_in_process
from helpers.compose import compose
from helpers.inprocess import environment
from helpers.results import results_only
from helpers.slurm import SLURM_STARTED, SLURM_TOOL, stop_started_slurm

from harness.errors import ConfigError
from harness.runtime.attempts import read_attempts
from harness.runtime.resolvers import per_gpu

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
TINY = ["experiment=judge", "model=tiny_llama", "task=summeval", "progress=false", "experiment.shuffles=10"]
# conf/hydra/launcher/slurm.yaml as shipped, with this cluster's site settings (1 node, 2 CPUs, no GPUs).
SLURM = [
    "hydra/launcher=slurm",
    "hydra.launcher.partition=debug",
    "hydra.launcher.gpus_per_node=null",
    "hydra.launcher.mem_gb=2",
    "hydra.launcher.cpus_per_task=1",
]
OMP_LINE = "export OMP_NUM_THREADS=$((SLURM_CPUS_PER_TASK > 0 ? SLURM_CPUS_PER_TASK : 1))"
SRUN_LINE = 'if [ -n "$SLURM_CPUS_PER_TASK" ]; then export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi'


# ---------------------------------------------------------------- configs (no cluster needed)
@pytest.mark.parametrize("name,target", [("slurm", "SlurmLauncher"), ("local", "LocalLauncher")])
def test_launcher_configs_compose_and_every_key_is_commented(name, target):
    from omegaconf import OmegaConf

    cfg = compose([f"hydra/launcher={name}"], hydra=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"].endswith(target)
    assert launcher["submitit_folder"].endswith("/.submitit/%j")
    assert launcher["name"] == "harness-judge"
    if name == "slurm":
        assert launcher["gpus_per_node"] == 1 and launcher["max_num_timeout"] > 0
        assert launcher["setup"][0] == OMP_LINE
    for line in (CONF / "hydra" / "launcher" / f"{name}.yaml").read_text().splitlines():
        if re.match(r"^[a-z_]+:", line):
            assert "#" in line, f"{name}.yaml: uncommented key: {line}"


def test_slurm_setup_survives_hydras_instantiation_and_the_old_escape_does_not():
    """Hydra resolves the launcher node when it instantiates it, and the launcher resolves its
    `setup:` list again: the shipped line must come out as the shell line it is. The escaped
    `\\${SLURM_CPUS_PER_TASK:-1}` it replaced loses its escape in the first pass and fails the second
    (negative control: that is the error every `hydra/launcher=slurm` sweep stopped at)."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import UnsupportedInterpolationType

    cfg = compose(["hydra/launcher=slurm"], hydra=True)
    assert instantiate(cfg.hydra.launcher).params["setup"][0] == OMP_LINE
    with open_dict(cfg):
        cfg.hydra.launcher.setup = OmegaConf.create("- export OMP_NUM_THREADS=\\${SLURM_CPUS_PER_TASK:-1}\n")
    with pytest.raises(UnsupportedInterpolationType, match="SLURM_CPUS_PER_TASK"):
        instantiate(cfg.hydra.launcher)


def test_sweep_configs_compose_with_their_grid_and_wandb_group():
    from omegaconf import OmegaConf

    missing = []
    for path in sorted((CONF / "sweep").glob("*.yaml")):
        raw = OmegaConf.load(path)
        experiment = next(str(v) for d in raw.defaults for k, v in d.items() if k == "override /experiment")
        if not (CONF / "experiment" / f"{experiment}.yaml").is_file():
            missing.append(f"{path.stem} (experiment {experiment} not written yet)")
            continue
        cfg = compose([f"+sweep={path.stem}"], hydra=True)
        assert cfg.sweep.name == path.stem and cfg.wandb.group == path.stem
        assert cfg.wandb.job_type == cfg.experiment.name
        assert str(cfg.hydra.sweep.dir).startswith(f"multirun/{path.stem}/")
        params = dict(cfg.hydra.sweeper.params)
        assert params and all("," in str(v) for v in params.values()), path.stem
    if missing:
        print("sweep configs not composed:", "; ".join(missing))


@pytest.mark.parametrize(
    "overrides,gpus",
    [
        (["backend=vllm"], 1),
        (["backend=vllm", "backend.tensor_parallel_size=2"], 2),
        (["backend=vllm", "backend.tensor_parallel_size=8"], 8),
        (["backend=hf"], 1),
        (["backend=api"], None),
        (["backend=vllm", "backend.tensor_parallel_size=8", "hydra.launcher.gpus_per_node=null"], None),
    ],
)
def test_slurm_launcher_gpus_follow_tensor_parallelism(overrides, gpus):
    """The launcher as instantiated (its sbatch parameters): GPUs per node = the engine's tensor
    parallel size (none for the API backend, whose model runs behind a server), and 8 CPUs / 64 GB of
    host memory per GPU (8 / 64 for a job without GPUs)."""
    from hydra.utils import instantiate

    params = instantiate(compose(["hydra/launcher=slurm", *overrides], hydra=True).hydra.launcher).params
    assert params["gpus_per_node"] == gpus
    assert (params["cpus_per_task"], params["mem_gb"]) == (8 * (gpus or 1), 64 * (gpus or 1))


def test_per_gpu_resolver_refuses_what_is_not_a_count():
    assert (per_gpu(8, 2), per_gpu("64", None), per_gpu(8, 0)) == (16, 64, 8)
    with pytest.raises(ConfigError, match="whole numbers"):
        per_gpu(8, "two")


def _job_requests(overrides: list[str]) -> list[tuple[dict, list[int]]]:
    """What the login node submits for `-m <overrides>` under the shipped slurm launcher: the real
    launcher Hydra instantiates for the sweep, and each job's request resolved in its own config."""
    from hydra import initialize_config_dir
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.plugins import Plugins
    from hydra.types import HydraContext, RunMode

    from harness.runtime.launchers import job_requests
    from harness.runtime.sweep import sweep_jobs

    with initialize_config_dir(str(CONF), version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        cfg = hydra.compose_config("config", ["hydra/launcher=slurm", *overrides], run_mode=RunMode.MULTIRUN)
        launcher = Plugins.instance().instantiate_launcher(
            hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=Callbacks(cfg)),
            task_function=lambda c: None,
            config=cfg,
        )
        return job_requests(launcher, sweep_jobs(cfg))


def test_launcher_asks_each_job_for_its_own_gpus():
    """The launcher config is resolved once per sweep by the plugin; the login node resolves it per
    job, so a sweep over tensor parallelism or over backends asks each job for what it needs, one job
    array per request. Control: a sweep whose jobs need the same goes out as one array."""
    tp = _job_requests(["experiment=judge", "backend=vllm", "backend.tensor_parallel_size=1,2"])
    assert [(r["gpus_per_node"], r["cpus_per_task"], r["mem_gb"], jobs) for r, jobs in tp] == [
        (1, 8, 64, [0]),
        (2, 16, 128, [1]),
    ]
    backends = _job_requests(["experiment=judge", "backend=api,vllm"])
    assert [(r["gpus_per_node"], jobs) for r, jobs in backends] == [(None, [0]), (1, [1])]
    shards = _job_requests(
        [
            "experiment=judge",
            "backend=vllm",
            "task.num_shards=3",
            "task.shard_index=range(3)",
            "task.aspect=coherence,fluency",
        ]
    )
    assert [(r["gpus_per_node"], jobs) for r, jobs in shards] == [(1, [0, 1, 2, 3, 4, 5])]


def hf_cli() -> str | None:
    """The `hf` command of this Python's huggingface_hub: beside sys.executable (a venv's bin/, on
    PATH or not), else on PATH."""
    beside = Path(sys.executable).parent / "hf"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("hf")


def test_the_hf_cli_is_found_beside_the_interpreter(tmp_path, monkeypatch):
    """A venv that is not on PATH still has its `hf` found (PATH emptied: only the interpreter's
    folder can give it); control: with no `hf` beside the interpreter nor on PATH, none is found."""
    beside = Path(sys.executable).parent / "hf"
    if not beside.is_file():
        pytest.skip(f"no hf beside {sys.executable} (huggingface_hub's CLI not installed here)")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert hf_cli() == str(beside)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert hf_cli() is None


def test_docs_hub_commands_are_the_installed_hf_cli():
    """docs/slurm.md's login-node commands for weights: the `hf` CLI of the huggingface_hub the
    extras install (2.x has no `huggingface-cli`): each subcommand exists and takes the options the
    doc gives it (`hf <sub> --help`; downloading needs the network and a token)."""
    hf = hf_cli()
    if hf is None:
        pytest.skip("the hf CLI (huggingface_hub) is not installed")
    doc = (REPO / "docs" / "slurm.md").read_text()
    lines = [
        line.split("#")[0].split() for line in doc.splitlines() if re.match(r"^(hf|huggingface-cli) ", line)
    ]
    assert lines and all(words[0] == "hf" for words in lines), lines
    assert "huggingface-cli" not in doc.replace("no `huggingface-cli`", "")
    for words in lines:
        sub = [w for w in words[1:3] if not w.startswith("-") and "/" not in w]
        r = subprocess.run([hf, *sub, "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (words, r.stderr[-500:])
        for flag in (w for w in words if w.startswith("--")):
            assert flag in r.stdout, (words, flag)


def test_sbatch_templates_parse():
    for name in ("node.sbatch",):
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


CLUSTER_LOCK = Path(tempfile.gettempdir()) / "harness-slurm-tests.lock"
"""flock'ed by a test session while it checks and starts the cluster. Under pytest-xdist both workers
ran slurm-local.sh start at once (the second slurmctld killed the first), and the worker that had
started the cluster stopped it when its own session ended while the other still submitted. A
cluster a session started is now stopped once, after every worker (conftest.pytest_sessionfinish)."""
START_ENV_DROPPED = ("OMP_NUM_THREADS", "OMP_THREAD_LIMIT")
"""Left out of slurm-local.sh start's environment: its node advertises `nproc` CPUs, and GNU nproc
obeys OMP_NUM_THREADS, which conftest sets to each xdist worker's share (1 of 2 cores). A cluster
started from a worker had a 1-CPU node, on which node.sbatch's 2 tasks are "Requested node
configuration is not available" (alone, without xdist, the node had both cores and it passed)."""


def _slurm_conf_from_tool() -> None:
    m = re.search(
        r"SLURM_CONF=(\S+)",
        subprocess.run(["bash", str(SLURM_TOOL), "env"], capture_output=True, text=True).stdout,
    )
    if m and Path(m.group(1)).is_file():
        os.environ["SLURM_CONF"] = m.group(1)


@pytest.fixture(scope="session")
def slurm_cluster():
    if SLURM_TOOL.is_file() and "SLURM_CONF" not in os.environ and not Path("/etc/slurm/slurm.conf").exists():
        _slurm_conf_from_tool()
    with open(CLUSTER_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one session at a time checks and starts the cluster
        problem = _cluster_problem()
        if problem is not None:
            if not SLURM_TOOL.is_file():
                pytest.skip(f"no SLURM cluster ({problem}) and no {SLURM_TOOL} to start one")
            env = {k: v for k, v in os.environ.items() if k not in START_ENV_DROPPED}
            r = subprocess.run(
                ["bash", str(SLURM_TOOL), "start"], capture_output=True, text=True, timeout=900, env=env
            )
            if r.returncode != 0:
                pytest.skip(
                    f"no SLURM cluster ({problem}); slurm-local.sh start failed: {r.stderr.strip()[-300:]}"
                )
            SLURM_STARTED.write_text("started by a test session\n")
            _slurm_conf_from_tool()
            problem = _cluster_problem()
            if problem is not None:
                pytest.skip(f"slurm-local.sh started but the cluster is not usable: {problem}")
    yield
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # one process ran the session: it is the last user
        stop_started_slurm()


@pytest.fixture
def job_env(tmp_path, tiny_llama, shared_data) -> dict[str, str]:
    """Environment for jobs: per-test request cache and data dir, data pre-fetched (as on a login node)."""
    from harness.data.fetch import ensure_data

    data = tmp_path / "data"
    ensure_data(data, mirror=shared_data, only=["summeval"])
    return {
        **os.environ,
        "HARNESS_CACHE": str(tmp_path / "cache"),
        "HARNESS_DATA_DIR": str(data),
        "HARNESS_DATA_MIRROR": str(shared_data),
        "HARNESS_MODEL_CACHE": str(Path(tiny_llama).parents[1]),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "OMP_NUM_THREADS": "1",
        "PYTHON": sys.executable,
        "HYDRA_FULL_ERROR": "1",
    }


def _harness(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.run", *args],
        cwd=REPO,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


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
    """The same config run in-process on one thread (as the jobs: cpus_per_task=1) with its own fresh
    cache. backend.threads=1, since the judge sets its thread count while it computes (bits follow it)."""
    from harness.runtime.entry import run

    for key in ("HARNESS_DATA_DIR", "HARNESS_DATA_MIRROR", "HARNESS_MODEL_CACHE"):
        monkeypatch.setenv(key, env[key])
    return run(
        compose([*overrides, "backend.threads=1", f"cache.path={out}.sqlite", "wandb.mode=disabled"]),
        out,
    )


def _cancel(sweep: Path, *procs: subprocess.Popen) -> None:
    """Stop what a failed test left running: its login-node processes and its SLURM arrays."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    folder = sweep / ".submitit"
    arrays = sorted(d.name for d in folder.iterdir() if d.name.isdigit()) if folder.is_dir() else []
    if arrays:
        subprocess.run(["scancel", *arrays], capture_output=True, timeout=60)


def _sweeps(
    grid: list[str], job_env: dict[str, str], tmp_path: Path, timeout: int = 600
) -> tuple[Path, Path]:
    """The same multirun through hydra/launcher=slurm and through the basic launcher, side by side,
    each with its own request cache (by environment, so both runs' overrides are the same). The SLURM
    multirun is a login-node process, as a user starts it; the basic launcher's is the same command
    line through the CLI's entry in this process (helpers.cli.run_in_process) while the jobs run."""
    dirs = {name: tmp_path / name for name in ("slurm", "local")}
    env = {name: {**job_env, "HARNESS_CACHE": str(tmp_path / f"cache-{name}")} for name in dirs}
    slurm = _harness(["-m", *SLURM, *grid, f"hydra.sweep.dir={dirs['slurm']}"], env["slurm"])
    try:
        local = run_in_process(
            ["-m", *grid, f"hydra.sweep.dir={dirs['local']}"],
            tmp_path / "local-process",
            env=env["local"],
            timeout=timeout,
        )
        assert local.returncode == 0, f"local multirun failed:\n{(local.stdout + local.stderr)[-3000:]}"
        log = _finish(slurm, "SLURM multirun", timeout)
    finally:
        _cancel(dirs["slurm"], slurm)
    assert "Submitit 'slurm' sweep output dir" in log
    # Both jobs really ran as SLURM array tasks (submitit keeps each task's log and result).
    assert len(list((dirs["slurm"] / ".submitit").glob("*_[01]/*_result.pkl"))) == 2
    return dirs["slurm"], dirs["local"]


def _sbatch_wait(args: list[str], env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    """`sbatch --parsable <args>`, then wait for the job to end; returns what `sbatch --wait` would
    (returncode: the job's exit code, 1 when it ended otherwise; stderr: its state). `sbatch --wait`
    itself polls after 2, 10 and then every 32 s (slurm's sbatch.c, MinJobAge 300 s): a 9 s job cost
    the test 10 s, a 12 s one 42 s. This polls `scontrol show job` every 0.25 s. A timeout cancels the
    job and raises subprocess.TimeoutExpired, as subprocess.run(timeout=...) did."""
    r = subprocess.run(
        ["sbatch", "--parsable", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    if r.returncode != 0:
        return r
    job = r.stdout.strip().split(";")[0]
    deadline = time.time() + timeout
    while True:
        state, code = _job_state(job)
        if state in _ENDED:
            rc = int(code.split(":")[0]) if state == "COMPLETED" else (int(code.split(":")[0]) or 1)
            return subprocess.CompletedProcess(r.args, rc, r.stdout, f"job {job} {state} (exit code {code})")
        if time.time() > deadline:
            subprocess.run(["scancel", job], capture_output=True, timeout=60)
            raise subprocess.TimeoutExpired(r.args, timeout)
        time.sleep(0.25)


_ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
}


def _job_state(job: str) -> tuple[str, str]:
    """(JobState, ExitCode) from slurmctld; from accounting once slurmctld has forgotten the job."""
    r = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=60)
    fields = dict(f.split("=", 1) for f in r.stdout.split() if "=" in f) if r.returncode == 0 else {}
    if "JobState" in fields:
        return fields["JobState"], fields.get("ExitCode", "0:0")
    r = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job, "-o", "State,ExitCode"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = r.stdout.strip().splitlines()[:1]
    state, _, code = line[0].partition("|") if line else ("UNKNOWN", "", "0:0")
    return state.split()[0] if state else "UNKNOWN", code or "0:0"


def _tool(module: str, args: list[str], env: dict[str, str]) -> None:
    """`python -m <module> <args>` as its main(argv) in this process (the collect steps only read the
    sweeps' folders; the tools' own command lines are run as processes by test_readme and test_collect)."""
    import importlib

    with environment(env):
        assert importlib.import_module(module).main(args) == 0


def _collected(sweep: Path, env: dict[str, str]) -> str:
    """`python -m harness.runtime.collect table <sweep> --out ...` (its main, in this process)."""
    _tool("harness.runtime.collect", ["table", str(sweep), "--out", str(sweep / "collect")], env)
    return (sweep / "collect" / "table.md").read_text()


def _shell_threads(setup: str, **env: str) -> str:
    """OMP_NUM_THREADS and SRUN_CPUS_PER_TASK after the setup lines, in bash with `env`."""
    r = subprocess.run(
        ["bash", "-c", f"{setup}\necho $OMP_NUM_THREADS ${{SRUN_CPUS_PER_TASK:-unset}}"],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.slow
@pytest.mark.slurm
def test_judge_sweep_on_slurm_equals_the_local_sweep(slurm_cluster, job_env, tmp_path):
    slurm, local = _sweeps(
        [*TINY, "task.docs=1", "task.max_candidates=3", "task.aspect=coherence,fluency"], job_env, tmp_path
    )
    table = _collected(slurm, job_env)
    assert table == _collected(local, job_env)
    assert [line.split("|")[1].strip() for line in table.splitlines()[2:4]] == ["coherence", "fluency"]
    assert "task.docs=1" in table  # shared overrides go under the table
    assert (slurm / "collect" / "table.csv").read_text() == (local / "collect" / "table.csv").read_text()
    assert (slurm / "collect" / "figures" / "none_spearman.png").stat().st_size > 0
    for job in ("0", "1"):
        assert (slurm / job / "judgments.jsonl").read_bytes() == (
            local / job / "judgments.jsonl"
        ).read_bytes()
        assert list((slurm / job / "wandb").glob("offline-run-*")), "W&B offline run missing"
    # The sbatch script submitit wrote: the setup line as slurm.yaml has it, which the job's shell
    # expands to the CPUs SLURM gave the job (1 when it sets none).
    (script,) = (slurm / ".submitit").glob("*/*_submission.sh")
    text = script.read_text()
    assert "#SBATCH --cpus-per-task=1" in text and "#SBATCH --partition=debug" in text
    setup = text.split("# setup\n", 1)[1].split("\n# command", 1)[0]
    assert setup.splitlines()[:2] == [OMP_LINE, SRUN_LINE]
    assert [_shell_threads(setup, SLURM_CPUS_PER_TASK=n) for n in ("1", "6")] == ["1 1", "6 6"]
    assert _shell_threads(setup) == "1 unset"  # srun then takes its own default
    assert text.index(SRUN_LINE) < text.index("\nsrun ")  # exported before the srun line that starts the job


@pytest.mark.slow
@pytest.mark.slurm
def test_zepo_sweep_on_slurm_equals_the_local_sweep(slurm_cluster, job_env, tmp_path):
    # The default optimizer (local: the judge's own weights) paraphrases; the tiny random model's
    # paraphrases are rejected, which still exercises sampling, validation and the search's state.
    slurm, local = _sweeps(
        [
            "experiment=zepo",
            "model=tiny_llama",
            "task=summeval",
            "task.docs=2",
            "task.max_candidates=3",
            "experiment.search_docs=1",
            "experiment.population=2",
            "experiment.epochs=1",
            "experiment.shuffles=5",
            "progress=false",
            "task.aspect=coherence,fluency",
        ],
        job_env,
        tmp_path,
    )
    table = _collected(slurm, job_env)
    assert table == _collected(local, job_env) and "initial/none/a_rate" in table.splitlines()[0]
    for job in ("0", "1"):
        for name in ("best_instruction.txt", "rejections.jsonl", "eval_best/judgments.jsonl"):
            assert (slurm / job / name).read_bytes() == (local / job / name).read_bytes(), name


@pytest.mark.slow
@pytest.mark.slurm
def test_abb_sweep_on_slurm_equals_the_local_sweep(slurm_cluster, job_env, tmp_path, shared_data):
    from harness.data.fetch import ensure_data

    ensure_data(job_env["HARNESS_DATA_DIR"], mirror=shared_data, only=["arena_bench"])  # as on a login node
    slurm, local = _sweeps(
        [*ABB_SLICE, "experiment.tau_fraction=0.0625,0.125"],
        job_env,
        tmp_path,
    )
    for sweep in (slurm, local):  # the A-BB collect step, as docs/abb.md runs it
        _tool("harness.runtime.abb_sweep", [str(sweep)], job_env)
    table = (slurm / "collect" / "table.md").read_text()
    assert table == (local / "collect" / "table.md").read_text()
    assert table.startswith("| experiment.tau_fraction |")
    assert [line.split("|")[1].strip() for line in table.splitlines()[2:4]] == ["0.0625", "0.125"]
    for job in (
        "0",
        "1",
    ):  # judge_calls differ: local job 1 finds job 0's requests in its cache, SLURM's ran alongside
        assert results_only(json.loads((slurm / job / "abb.json").read_text())) == results_only(
            json.loads((local / job / "abb.json").read_text())
        )


def _cache_rows(path: Path) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]
    except sqlite3.Error:  # not created yet
        return 0


def _job_cache(args: list[str], cache: Path, job: int = 0) -> Path:
    """The request cache file job `job` of `python -m harness.run <args>` writes under the slurm
    launcher (cache.per_job): its overrides as Hydra's basic sweeper expands the command line."""
    from omegaconf import OmegaConf

    from harness.runtime.sweep import job_cache_path, sweep_jobs

    task = [a for a in args if a != "-m" and not a.startswith(("hydra.", "hydra/"))]
    return job_cache_path(
        cache, "judge", sweep_jobs(OmegaConf.create({"hydra": {"overrides": {"task": task}}}))[job]
    )


def _preempt_mid_run(
    args: list[str],
    env: dict[str, str],
    cache: Path,
    sweep: Path,
    what: str,
    start_s: int,
    finish_s: int = 240,
) -> int:
    """Launch a multirun, send its SLURM job USR2 once its first chunk is committed to the job's own
    cache file beside `cache` (mid-run), let it finish; that file's rows at the signal. (The sweep's
    end folds it into `cache`.)"""
    cache = _job_cache(args, cache)
    proc = _harness(args, env)
    try:
        deadline = time.time() + start_s
        while _cache_rows(cache) < 2:  # the first chunk is committed: the job is mid-run
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"job never started scoring:\n{_finish(proc, what)}")
            time.sleep(0.05)
        job = next(d.name for d in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", d.name))
        r = subprocess.run(["scancel", "--signal=USR2", job], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        rows_at_signal = _cache_rows(cache)
        _finish(proc, f"preempted {what}", finish_s)
    finally:
        _cancel(sweep, proc)
    return rows_at_signal


@pytest.mark.slow
@pytest.mark.slurm
def test_preempted_job_requeues_and_resumes_from_its_cache(slurm_cluster, job_env, tmp_path, monkeypatch):
    # 3 docs x 20 ordered pairs + the content-free prompt = 61 requests, committed 2 at a time.
    cfg = [*TINY, "task.docs=3", "task.max_candidates=5", "backend.batch_size=1", "cache.chunk=2"]
    cache, sweep = tmp_path / "pre.sqlite", tmp_path / "pre"
    rows_at_signal = _preempt_mid_run(
        ["-m", *SLURM, *cfg, f"cache.path={cache}", f"hydra.sweep.dir={sweep}", "wandb.mode=disabled"],
        job_env,
        cache,
        sweep,
        "multirun",
        180,
    )

    attempts = read_attempts(sweep / "0")
    assert [a["status"] for a in attempts] == ["interrupted", "completed"], attempts
    assert [a["restart_count"] for a in attempts] == [0, 1]  # SLURM requeued it; same run directory
    assert rows_at_signal <= attempts[0]["calls"] < 61  # stopped mid-run, at a chunk boundary
    # Repeating nothing: every model call over both attempts was a distinct request.
    assert sum(a["calls"] for a in attempts) == 61 == _cache_rows(cache)  # folded from the job's own file
    # Losing nothing: the resumed run wrote what an uninterrupted run writes.
    ref = _reference_run(cfg, job_env, tmp_path / "ref", monkeypatch)
    assert (sweep / "0" / "judgments.jsonl").read_bytes() == (
        tmp_path / "ref" / "judgments.jsonl"
    ).read_bytes()
    assert results_only(json.loads((sweep / "0" / "results.json").read_text())) == results_only(ref)


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.vllm
def test_preempted_vllm_job_requeues_once_and_resumes_equal(slurm_cluster, job_env, tmp_path, monkeypatch):
    """backend=vllm with its engine core in a child process (as on a GPU; forked here): SLURM's
    USR2 reaches every process of the job, yet only the parent acts on it (the child was started
    with the signal blocked: harness.judges.wrappers.held_in_children), at an engine step's commit. One
    requeue; the resumed run equals an unbroken one within the float32 cross-run bound (the
    resumed engine starts with an empty prefix cache, so a few prompts are computed whole)."""
    pytest.importorskip("vllm", reason="vLLM is not installed (README: Installs)")
    from helpers.engines import P_A_BOUND

    from harness.judging import load_judgments
    from harness.models.tiny import ensure_tiny_model
    from harness.runtime.entry import run

    ensure_tiny_model("llama3")  # head size 32 (vLLM's CPU attention); built here, as on a login node
    # 6 docs x 30 ordered pairs + the content-free prompt (fewer distinct: equal candidate texts); the
    # judge hands the engine all of them, which schedules one a step and 32 of its tokens (chunked
    # prefill), so the run takes many steps and the signal lands mid-run.
    cfg = [
        *(o if not o.startswith("model=") else "model=tiny_llama3" for o in TINY),
        "backend=vllm",
        "backend.in_process=false",
        "task.docs=6",
        "task.max_candidates=6",
        "backend.engine_args.max_num_seqs=1",
        "backend.engine_args.max_num_batched_tokens=32",
    ]
    cache, sweep = tmp_path / "pre.sqlite", tmp_path / "pre"
    rows_at_signal = _preempt_mid_run(
        [
            "-m",
            *SLURM,
            "hydra.launcher.mem_gb=4",
            *cfg,
            f"cache.path={cache}",
            f"hydra.sweep.dir={sweep}",
            "wandb.mode=disabled",
        ],
        job_env,
        cache,
        sweep,
        "vLLM multirun",
        300,
        420,
    )

    attempts = read_attempts(sweep / "0")
    assert [a["status"] for a in attempts] == ["interrupted", "completed"], attempts
    assert [a["restart_count"] for a in attempts] == [
        0,
        1,
    ]  # ONE requeue: the engine core did not requeue too
    assert rows_at_signal <= attempts[0]["calls"] < _cache_rows(cache)
    assert sum(a["calls"] for a in attempts) == _cache_rows(cache)  # nothing scored twice
    for key in ("HARNESS_DATA_DIR", "HARNESS_DATA_MIRROR", "HARNESS_MODEL_CACHE"):
        monkeypatch.setenv(key, job_env[key])
    ref_dir = tmp_path / "ref"
    # The unbroken run in this process with the engine in it too (the same model, dtype and settings
    # but where the engine runs: the same numbers, without the two engine processes' ~30 s start).
    ref = run(
        compose(
            [*cfg, "backend.in_process=true", f"cache.path={tmp_path / 'ref.sqlite'}", "wandb.mode=disabled"]
        ),
        ref_dir,
    )
    assert ref["judge_calls"] == _cache_rows(cache)  # the unbroken run's distinct requests, all scored
    (got, got_cf), (want, want_cf) = (
        load_judgments(sweep / "0" / "judgments.jsonl"),
        load_judgments(ref_dir / "judgments.jsonl"),
    )
    assert [(j.doc_id, j.a_id, j.b_id) for j in got] == [(j.doc_id, j.a_id, j.b_id) for j in want]
    worst = max(abs(g.p_a - w.p_a) for g, w in zip(got, want))
    assert worst < P_A_BOUND["float32"] and abs(got_cf - want_cf) < P_A_BOUND["float32"], worst
    assert [g.p_a > 0.5 for g in got] == [w.p_a > 0.5 for w in want]
    resumed = json.loads((sweep / "0" / "results.json").read_text())
    assert resumed["numerics"]["engine"] == ref["numerics"]["engine"] == "vllm"
    for mode, metrics in ref["metrics"].items():
        for name, value in metrics.items():
            if isinstance(value, float):
                assert resumed["metrics"][mode][name] == pytest.approx(value, abs=1e-3, nan_ok=True), (
                    mode,
                    name,
                )


def _cache_files(cache: Path) -> list[Path]:
    return sorted((cache / "sweeps").glob("*/*/requests.sqlite"))


@pytest.mark.slow
@pytest.mark.slurm
def test_shard_sweep_names_a_failed_shard_reruns_only_it_and_merges_to_the_unsharded_run(
    slurm_cluster, job_env, tmp_path, monkeypatch
):
    """The one command: a 3-shard sweep on the shipped launcher. Shard 1's own cache file is blocked
    (a folder where the file goes): its job FAILED, one line naming the job, its log and its error;
    the sweep ends with one line naming it, exit 2, no traceback, no merged run. With the folder
    gone, the same command judges only shard 1 (the others' cache files serve them whole) and the
    sweep merges itself into <sweep dir>/merged/, equal to the unsharded run."""
    cfg = [*TINY, "task.docs=3", "task.max_candidates=3", "backend.batch_size=1", "wandb.mode=disabled"]
    sweep, cache = tmp_path / "sweep", Path(job_env["HARNESS_CACHE"])
    args = ["-m", *SLURM, *cfg, "task.num_shards=3", "task.shard_index=range(3)", f"hydra.sweep.dir={sweep}"]
    blocker = _job_cache(args, cache / "requests.sqlite", 1)
    blocker.mkdir(parents=True)
    proc = _harness(args, {**job_env, "HYDRA_FULL_ERROR": "0"})  # as a user has it
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        _cancel(sweep, proc)
    assert proc.returncode == 2 and "Traceback" not in out, out[-3000:]
    failed = [line for line in out.splitlines() if re.search(r"\[job \d+_1 #1\] FAILED", line)]
    assert failed and failed[-1].endswith(
        f"| error: job 1 (task.shard_index=1): {blocker}: is a folder, not a "
        "SQLite file; set cache.path=... to a file path"
    ), out[-3000:]
    log = re.search(r"log: (\S+)", failed[-1]).group(1)
    summary = out.rstrip().splitlines()[-1]
    assert summary.startswith("error: 1 of 3 jobs failed: job 1 (task.shard_index=1) FAILED (job ")
    assert f"{blocker}: is a folder" in summary and f"; log: {log}." in summary and Path(log).is_file()
    assert not (sweep / "merged").exists()

    blocker.rmdir()
    proc = _harness(args, job_env)
    try:
        _finish(proc, "rerun of the shard sweep")
    finally:
        _cancel(sweep, proc)
    calls = {i: [a["calls"] for a in read_attempts(sweep / str(i))] for i in range(3)}
    assert calls == {0: [7, 0], 1: [0, 7], 2: [7, 0]}, calls  # 6 pairs + the content-free prompt a shard
    files = _cache_files(cache)
    assert len(files) == 3 and [f.parent.name.split("-")[1] for f in files] == ["0", "1", "2"]
    assert _cache_rows(cache / "requests.sqlite") == 19  # folded at the sweep's end (one content-free row)
    ref = _reference_run(cfg, job_env, tmp_path / "ref", monkeypatch)
    merged = sweep / "merged"
    assert (merged / "judgments.jsonl").read_bytes() == (tmp_path / "ref" / "judgments.jsonl").read_bytes()
    results = json.loads((merged / "results.json").read_text())
    assert results_only(results) == results_only(ref) and results["metrics"] == ref["metrics"]
    assert results["n_docs"] == 3 and results["n_judgments"] == 18


@pytest.mark.slow
@pytest.mark.slurm
def test_jobs_that_need_other_resources_go_out_as_arrays_of_their_own(slurm_cluster, job_env, tmp_path):
    """A site whose CPUs follow the judge's threads (`hydra.launcher.cpus_per_task=${backend.threads}`,
    as the shipped GPUs follow tensor parallelism): `backend.threads=1,2` submits two arrays, one
    per request, and both jobs run."""
    sweep = tmp_path / "sweep"
    site = [o for o in SLURM if not o.startswith("hydra.launcher.cpus_per_task")]
    proc = _harness(
        [
            "-m",
            *site,
            "hydra.launcher.cpus_per_task=${backend.threads}",
            *TINY,
            "task.docs=1",
            "task.max_candidates=2",
            "backend.threads=1,2",
            "wandb.mode=disabled",
            f"hydra.sweep.dir={sweep}",
        ],
        job_env,
    )
    try:
        _finish(proc, "sweep over backend.threads")
    finally:
        _cancel(sweep, proc)
    scripts = sorted((sweep / ".submitit").glob("*/*_submission.sh"))
    asked = sorted(re.search(r"#SBATCH --cpus-per-task=(\d+)", p.read_text()).group(1) for p in scripts)
    assert asked == ["1", "2"], [p.name for p in scripts]  # two arrays (one script each), one request each
    assert all((sweep / job / "results.json").is_file() for job in ("0", "1"))


# ---------------------------------------------------------------- site configs (--config-dir)
def _site_dir(root: Path, model_folder: Path) -> Path:
    """A user's site directory as docs/slurm.md ("Site configs") writes it: a launcher that inherits
    the shipped slurm launcher with this cluster's values, and a model of their own folder."""
    site = root / "site"
    (site / "hydra" / "launcher").mkdir(parents=True)
    (site / "model").mkdir()
    (site / "hydra" / "launcher" / "mysite.yaml").write_text(
        "defaults:\n  - slurm        # the shipped conf/hydra/launcher/slurm.yaml\n  - _self_\n"
        "partition: debug\ngpus_per_node: null\nmem_gb: 2\ncpus_per_task: 1\ncomment: mysite\n"
    )
    (site / "model" / "mymodel.yaml").write_text(
        f"defaults:\n  - tiny_llama   # the shipped conf/model/tiny_llama.yaml\n  - _self_\n"
        f"name: my-model\npath: {model_folder}\n"
    )
    return site


def test_site_config_dir_adds_a_launcher_and_a_model(tmp_path):
    """Composed as `--config-dir SITE` composes (Hydra's searchpath): the site's launcher keeps the
    shipped keys it does not set. Negative control: without the site directory the names are unknown."""
    from hydra.errors import MissingConfigException
    from omegaconf import OmegaConf

    site = _site_dir(tmp_path, tmp_path / "weights")
    overrides = ["hydra/launcher=mysite", "model=mymodel"]
    cfg = compose([*overrides, f"hydra.searchpath=[file://{site}]"], hydra=True)
    with pytest.raises(MissingConfigException, match="mymodel|mysite"):
        compose(overrides, hydra=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"].endswith("SlurmLauncher") and launcher["partition"] == "debug"
    assert launcher["comment"] == "mysite" and launcher["gpus_per_node"] is None
    assert launcher["setup"][0] == OMP_LINE and launcher["max_num_timeout"] == 5  # the shipped values
    assert cfg.model.name == "my-model" and cfg.model.path == str(tmp_path / "weights")
    assert cfg.model.labels == ["A", "B"]  # from the shipped tiny_llama


@pytest.mark.slow
@pytest.mark.slurm
def test_site_config_dir_runs_a_sweep_on_slurm(slurm_cluster, job_env, tmp_path, tiny_llama):
    site = _site_dir(tmp_path, Path(tiny_llama))
    sweep = tmp_path / "sweep"
    # Each job stays RUNNING 6 s before its run (an srun task prolog that sleeps): the login node looks
    # every 2 s and sacct lags, so a tiny run alone (~5 s) could end between two looks, RUNNING unseen.
    prolog = tmp_path / "prolog.sh"
    prolog.write_text("#!/bin/sh\nsleep 6\n")
    prolog.chmod(0o755)
    proc = _harness(
        [
            "--config-dir",
            str(site),
            "-m",
            "hydra/launcher=mysite",
            *TINY,
            "model=mymodel,tiny_llama",
            "task.docs=1",
            "task.max_candidates=3",
            f"hydra.sweep.dir={sweep}",
            "wandb.mode=disabled",
            f"+hydra.launcher.srun_args=['--task-prolog={prolog}']",
        ],
        job_env,
    )
    try:
        log = _finish(proc, "site-config SLURM multirun", 300)
    finally:
        _cancel(sweep, proc)
    assert len(list((sweep / ".submitit").glob("*_[01]/*_result.pkl"))) == 2  # both ran as SLURM array tasks
    # The login node's job-state lines (harness/runtime/launchers.py): each job's state as it changes,
    # its log file and its last log line; the last state is COMPLETED.
    # RUNNING is seen for one job at least (a job that waited PENDING behind the other can run its
    # 6 s between two of sacct's lagging looks).
    seen = set()
    for i in (0, 1):
        states = re.findall(rf"\[job (\d+_{i}) #{i}\] (\S+)  log: (\S+)", log)
        assert states and states[-1][1] == "COMPLETED", log[-3000:]
        job = states[-1][0]
        assert states[-1][2] == str(sweep / ".submitit" / job / f"{job}_0_log.err")
        seen |= {s for _, s, _ in states}
    assert "RUNNING" in seen, log[-3000:]
    assert re.search(r"\] COMPLETED  log: \S+  \| \S", log), "no last log line shown"
    judges = [json.loads((sweep / job / "results.json").read_text())["judge"] for job in ("0", "1")]
    assert judges[0].startswith("hf|my-model|") and judges[1].startswith("hf|tiny-llama|")
    scripts = list((sweep / ".submitit").glob("*/*_submission.sh"))
    assert scripts and all("#SBATCH --comment=mysite" in s.read_text() for s in scripts)
    # Same weights, same prompts: the two jobs' judgments agree (only the model's name differs).
    rows = [(sweep / job / "judgments.jsonl").read_text().splitlines() for job in ("0", "1")]
    assert [json.loads(r)["p_a"] for r in rows[0]] == [json.loads(r)["p_a"] for r in rows[1]]


PER_GPU_LINES = ("#SBATCH --cpus-per-gpu=", "#SBATCH --mem-per-gpu=")


def gpu_less_node_script(tmp_path: Path) -> Path:
    """slurm/node.sbatch as a GPU-less site edits it: without its per-GPU CPU and memory lines
    (sbatch 22.05 lets no command-line --mem / --mem-per-cpu replace a script's --mem-per-gpu:
    "mutually exclusive"), so --cpus-per-task / --mem-per-cpu go on the command line."""
    text = (REPO / "slurm" / "node.sbatch").read_text()
    kept = [line for line in text.splitlines(keepends=True) if not line.startswith(PER_GPU_LINES)]
    assert len(kept) == len(text.splitlines()) - len(PER_GPU_LINES)
    script = tmp_path / "node.sbatch"
    script.write_text("".join(kept))
    return script


@pytest.mark.slurm
def test_node_sbatch_requests_gpus(slurm_cluster, tmp_path):
    """On this GPU-less cluster the shipped script is refused for its GPU request (so it makes one),
    and the same script without its GPU request (the GPU request set to 0, CPUs and memory asked per
    task) is accepted (`sbatch --test-only`, which needs the node up: `slurm_cluster` keeps other
    sessions from stopping it meanwhile)."""
    base = [
        "sbatch",
        "--test-only",
        "--partition=debug",
        f"--output={tmp_path}/%j.out",
        "--ntasks-per-node=2",
    ]
    r = subprocess.run(
        [*base, str(REPO / "slurm" / "node.sbatch")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode != 0 and "Invalid generic resource" in r.stderr, r.stderr
    r = subprocess.run(
        [
            *base,
            "--gpus-per-task=0",
            "--cpus-per-task=1",
            "--mem-per-cpu=1G",
            str(gpu_less_node_script(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    cpus = subprocess.run(
        ["sinfo", "-h", "-o", "%c"], capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert r.returncode == 0 and "to start at" in r.stderr, (
        f"{r.stderr.strip()} (node CPUs: {cpus}; 2 tasks need 2)"
    )


@pytest.mark.slow
@pytest.mark.slurm
def test_node_job_runs_its_shards_side_by_side_and_merges(slurm_cluster, job_env, tmp_path, monkeypatch):
    """slurm/node.sbatch with 2 tasks (one per GPU on a GPU node; here --gpus-per-task=0): both shards
    run as steps of one job and the job's merge equals the unsharded run."""
    cfg = [*TINY, "task.docs=2", "task.max_candidates=3", "backend.batch_size=1"]
    out, log = tmp_path / "node", tmp_path / "node.out"
    env = {**job_env, "OUT": str(out), "WANDB_MODE": "disabled"}
    try:
        r = _sbatch_wait(
            [
                "--partition=debug",
                "--ntasks-per-node=2",
                "--cpus-per-task=1",
                "--mem-per-cpu=1G",
                "--gpus-per-task=0",
                "--time=10",
                f"--output={log}",
                str(gpu_less_node_script(tmp_path)),
                *cfg,
            ],
            env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("node.sbatch did not finish in 300 s")
    text = log.read_text() if log.is_file() else ""
    assert r.returncode == 0, f"{r.stderr.strip()}\n{text[-3000:]}"
    assert "0: [node.sbatch] shard 0 of 2" in text and "1: [node.sbatch] shard 1 of 2" in text
    assert "(SRUN_CPUS_PER_TASK=1)" in text  # exported before srun starts the shards (--cpus-per-task=1)
    for i in range(2):
        shard_cfg = json.loads((out / f"shard-{i}" / "config.json").read_text())
        assert (shard_cfg["task"]["shard_index"], shard_cfg["task"]["num_shards"]) == (i, 2)
    ref = _reference_run(cfg, job_env, tmp_path / "ref", monkeypatch)
    assert (out / "merged" / "judgments.jsonl").read_bytes() == (
        tmp_path / "ref" / "judgments.jsonl"
    ).read_bytes()
    assert results_only(json.loads((out / "merged" / "results.json").read_text())) == results_only(ref)


@pytest.mark.slurm
@pytest.mark.parametrize(
    "site,said,advice",
    [
        (
            ["hydra.launcher.partition=debug"],
            "Invalid generic resource",
            "partition debug has no GPUs for gpus_per_node=1: set hydra.launcher.partition=<a GPU partition>",
        ),
        (
            ["hydra.launcher.gpus_per_node=null"],
            "invalid partition",  # the shipped `gpu`, not a partition here
            "hydra.launcher.partition=gpu is not a partition here: set hydra.launcher.partition=<one of `sinfo -s`>",
        ),
    ],
    ids=["no-gpus", "no-such-partition"],
)
def test_refused_sbatch_is_one_error_line_naming_the_setting(
    slurm_cluster, job_env, tmp_path, site, said, advice
):
    """sbatch refuses the array (the shipped GPU request on this GPU-less partition; a partition
    that does not exist): the login node prints one `error:` line (no traceback) with sbatch's words
    and the launcher setting to change, naming the value in use and never advising what is already
    set (gpus_per_node=null for a wrong partition name)."""
    proc = _harness(
        ["-m", "hydra/launcher=slurm", *site, *TINY, "task.docs=1", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        {**job_env, "HYDRA_FULL_ERROR": "0"},
    )  # as a user has it
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and out.rstrip().endswith(errors[0]), out[-3000:]
    assert errors[0].startswith("error: sbatch refused the job array (sbatch: error: ") and said in errors[0]
    assert advice in errors[0] and str(tmp_path / "sweep" / ".submitit") in errors[0]
    assert ("gpus_per_node=null" in errors[0]) == ("gpus_per_node=1" in errors[0])
