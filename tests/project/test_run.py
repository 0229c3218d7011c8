"""`python -m harness.run experiment=judge` end to end: real Hydra, real data, real models."""

from __future__ import annotations

import base64
import hashlib
import json
import math
from pathlib import Path

import pytest
from helpers.cli import cache_rows, killed_after_commits, run_harness, run_in_process
from helpers.wandb_offline import wandb_records

from harness.judging import load_judgments
from harness.metrics import recompute
from harness.runtime.attempts import read_attempts, summed_calls


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-12)
    return a == b


def _nan_to_none(d):
    if isinstance(d, dict):
        return {k: _nan_to_none(v) for k, v in d.items()}
    return None if isinstance(d, float) and math.isnan(d) else d


def _check_run_dir(out: Path, n_docs: int, n_cands: int) -> dict:
    results = json.loads((out / "results.json").read_text())
    judgments, p_cf = load_judgments(out / "judgments.jsonl")
    assert len(judgments) == n_docs * n_cands * (n_cands - 1)
    assert p_cf is not None and 0 <= p_cf <= 1
    row = json.loads((out / "judgments.jsonl").read_text().splitlines()[0])
    assert {"doc_id", "a_id", "b_id", "token_logprobs", "p_a", "human_a", "human_b"} <= row.keys()
    # Metrics recomputed from judgments.jsonl alone equal those in results.json.
    assert _same(_nan_to_none(recompute(out)), results["metrics"])
    assert {"none", "permutation", "batch", "contextual"} <= results["metrics"].keys()
    return results


TINY_KERNELS = "torch (head size 16 not run by vLLM's CPU attention)"
"""The packed engine's kernels on tiny_llama (head size 16), on every machine (harness.judges.cpu_kernels)."""


def test_judge_run_tiny_model(tmp_path):
    out = tmp_path / "run"
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task.docs=2",
            "task.max_candidates=3",
            f"hydra.run.dir={out}",
            "experiment.shuffles=10",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    results = _check_run_dir(out, 2, 3)
    assert results["judge"].startswith("hf|tiny-llama|")
    # The run says its numerics (issue #28): results.json, card.md and the console's first lines.
    assert results["numerics"] == {
        "dtype": "float32",
        "dtype_source": "auto",
        "engine": "transformers",
        "device": "cpu",
        "answer_logits": "float32",
        "kernels": TINY_KERNELS,
    }
    line = "float32 (auto), transformers on cpu, answer logits float32"
    assert f"numerics      {line}" in (out / "card.md").read_text()
    assert f"numerics: {line}" in r.stdout + r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["task"]["aspect"] == "coherence"
    assert list((out / "wandb").glob("offline-run-*")), "W&B offline run missing"
    # The offline W&B run, read back from its transaction log: the run's files are one artifact
    # whose entries are byte-for-byte the files in the run directory.
    arts = [
        r["artifact"]
        for r in wandb_records(out)
        if r.get("type") == "artifact" and r["artifact"]["type"] == "run-outputs"
    ]
    run_id = next(r["run"]["run_id"] for r in wandb_records(out) if r.get("type") == "run")
    assert len(arts) == 1 and arts[0]["name"] == f"judge-summeval-coherence-tiny-llama-outputs-{run_id}"
    entries = {e["path"]: e["digest"] for e in arts[0]["manifest"]["contents"]}
    assert {"results.json", "judgments.jsonl", "config.json"} <= entries.keys()
    for name in ("results.json", "judgments.jsonl"):
        assert entries[name] == base64.b64encode(hashlib.md5((out / name).read_bytes()).digest()).decode()
    history = [r["history"]["item"] for r in wandb_records(out) if r.get("type") == "history"]
    assert any(h.get("none/a_rate") == results["metrics"]["none"]["a_rate"] for h in history)
    # bf16 set in the config: its source says so, and its answer logits are still float32.
    bf16 = tmp_path / "bf16"
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "backend.dtype=bfloat16",
            "task.docs=1",
            "task.max_candidates=2",
            f"hydra.run.dir={bf16}",
            "experiment.shuffles=2",
            "wandb.mode=disabled",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads((bf16 / "results.json").read_text())
    assert got["numerics"] == {
        "dtype": "bfloat16",
        "dtype_source": "config",
        "engine": "transformers",
        "device": "cpu",
        "answer_logits": "float32",
        "kernels": TINY_KERNELS,
    }
    assert "|bfloat16|" in got["judge"] and "|logits=float32|" in got["judge"]
    assert "numerics      bfloat16 (config), transformers on cpu" in (bf16 / "card.md").read_text()


def test_judge_run_records_its_work_within_5pc_of_the_trie(tmp_path):
    """results.json's judge_work: the prompts the model scored, the tokens it ran, the trie minimum
    of the run's prompts, prompts/s and its share of the judging time. With the shipped config
    (cache.chunk 16 < the run's 31 requests) the transformers judge takes them in one streamed
    call and the tokens stay within 5% of the trie minimum. Negative control: without prefix reuse
    (backend.prefix_reuse=false) every prompt runs whole and the check fails."""
    work = {}
    for reuse in (None, "false"):
        out = tmp_path / f"reuse{reuse}"
        args = [
            "experiment=judge",
            "model=tiny_llama",
            "task.docs=1",
            "task.max_candidates=6",
            "backend.threads=1",
            f"hydra.run.dir={out}",
            "experiment.shuffles=10",
            "wandb.mode=disabled",
        ]
        r = run_in_process(
            [*args, *([] if reuse is None else [f"backend.prefix_reuse={reuse}"])],
            out,
            env={"HARNESS_DATA_DIR": str(tmp_path / "data")},
        )  # fetched once, own caches
        assert r.returncode == 0, r.stderr[-3000:]
        results = json.loads((out / "results.json").read_text())
        work[reuse] = w = results["judge_work"]
        assert w["prompts"] == results["judge_calls"] == 31  # 30 ordered pairs + the content-free prompt
        assert w["prompts_per_s"] == pytest.approx(w["prompts"] / w["seconds"])
        assert 0 < w["seconds"] <= w["judging_s"] and w["judge_share"] == pytest.approx(
            w["seconds"] / w["judging_s"]
        )
    shipped, control = work[None], work["false"]
    assert shipped["trie_minimum"] == control["trie_minimum"] > 0
    assert shipped["trie_minimum"] <= shipped["tokens_processed"] <= 1.05 * shipped["trie_minimum"]
    assert control["tokens_processed"] > 1.05 * control["trie_minimum"]


@pytest.mark.slow
def test_judge_run_smollm2_summeval(tmp_path):
    """The issue's must-show: SmolLM2 on SummEval coherence over 2 documents."""
    out = tmp_path / "run"
    # Documents 85-86: two short articles (162 and 180 words; the first two have 364 and 494).
    r = run_in_process(
        [
            "experiment=judge",
            "task=summeval",
            "task.aspect=coherence",
            "task.offset=85",
            "task.docs=2",
            "task.max_candidates=4",
            f"hydra.run.dir={out}",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    results = _check_run_dir(out, 2, 4)
    assert results["judge"].startswith("hf|SmolLM2-135M-Instruct|")
    # A real (weak) judge: probabilities are not degenerate.
    judgments, _ = load_judgments(out / "judgments.jsonl")
    assert all(0 < j.p_a < 1 for j in judgments)


@pytest.mark.slow
def test_killed_run_resumes_without_rescoring(tmp_path, smollm2_path):
    """Kill a SmolLM2 run half-way (SIGKILL), restart: nothing scored twice, and every score bit
    for bit the unbroken run's (the streamed call plans its forwards over all requests, cached
    ones included; tests/judges/test_prefix.py shows a subset's own call would differ)."""
    args = [
        "experiment=judge",
        "task.offset=85",
        "task.docs=1",
        "task.max_candidates=4",
        "cache.chunk=2",
        "backend.batch_size=2",
        "experiment.shuffles=10",
        "wandb.mode=disabled",
    ]
    cache = tmp_path / "cache" / "requests.sqlite"
    proc, done_before = killed_after_commits(
        [*args, f"hydra.run.dir={tmp_path / 'a'}"], tmp_path, 2, timeout=300
    )
    total = 4 * 3 + 1  # ordered pairs + the content-free prompt
    assert 0 < done_before < total, "the kill did not land half-way"

    r = run_harness([*args, f"hydra.run.dir={tmp_path / 'b'}"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    resumed = json.loads((tmp_path / "b" / "results.json").read_text())
    assert resumed["judge_calls"] == total - done_before  # nothing scored twice
    assert cache_rows(cache) == total
    # attempts.jsonl counted the killed attempt's calls as it made them: summed, they are the real calls.
    [killed] = read_attempts(tmp_path / "a")
    [completed] = read_attempts(tmp_path / "b")
    assert killed["event"] == "progress" and killed["pid"] == proc.pid
    # attempts.py's one window: a kill between a commit and its progress line reads that step as
    # in flight, not committed (tests/zepo/test_zepo_kill.py, which kills right after a commit, hit it).
    trailing = done_before - killed["calls"]
    assert 0 <= trailing <= min(killed["in_flight"], 2)  # one step: at most backend.batch_size=2 prompts
    assert completed["status"] == "completed" and completed["calls"] == total - done_before
    summed = summed_calls(tmp_path / "a")["calls"] + summed_calls(tmp_path / "b")["calls"]
    assert summed + trailing == total == cache_rows(cache)

    # Identical to an unbroken run with a fresh cache (the same entry in this process: the
    # reference needs no process boundary of its own).
    fresh = tmp_path / "fresh"
    r = run_in_process([*args, f"hydra.run.dir={fresh / 'c'}"], fresh)
    assert r.returncode == 0, r.stderr[-3000:]
    unbroken = json.loads((fresh / "c" / "results.json").read_text())
    assert unbroken["judge_calls"] == total
    assert _same(resumed["metrics"], unbroken["metrics"])
    a = [(j.p_a, j.token_logprobs) for j in load_judgments(tmp_path / "b" / "judgments.jsonl")[0]]
    b = [(j.p_a, j.token_logprobs) for j in load_judgments(fresh / "c" / "judgments.jsonl")[0]]
    assert a == b
