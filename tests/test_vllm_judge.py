"""The vLLM backend: a clear error where vLLM is missing; on a CUDA machine, HFJudge's numbers."""

from __future__ import annotations

import importlib.util

import pytest

from harness.errors import ConfigError
from harness.prompts import load_zepo_instructions, render
from harness.types import Candidate, Document, PairRequest


def _requests(instructions: list[str]) -> list[PairRequest]:
    docs = [
        Document("d1", "The council approved the new bridge on Monday after a two-year debate about costs.",
                 (Candidate("x", "The council approved a bridge."), Candidate("y", "A bridge debate ended."),
                  Candidate("z", "Monday costs council two-year."))),
        Document("d2", "Heavy rain flooded the river valley, and hundreds of residents were evacuated overnight.",
                 (Candidate("x", "Floods forced hundreds to evacuate."), Candidate("y", "It rained."))),
    ]
    return [PairRequest(d.id, a.id, b.id, render(d, a, b, ins, "summarization"))
            for d in docs for a in d.candidates for b in d.candidates if a.id != b.id for ins in instructions]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_missing_vllm_is_a_config_error(tiny_llama):
    from harness.judges.vllm import VLLMJudge

    with pytest.raises(ConfigError, match="vllm"):
        VLLMJudge(tiny_llama)


@pytest.mark.gpu
def test_vllm_matches_hf_judge(smollm2_path, shared_data):
    pytest.importorskip("vllm", reason="vllm is an optional extra (pip install 'harness[vllm]', CUDA only)")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU; none is available here")
    from harness.judges.hf import HFJudge
    from harness.judges.vllm import VLLMJudge

    zepo = load_zepo_instructions(shared_data / "zepo" / "init_prompts.json")
    reqs = _requests([zepo["coherence"], zepo["fluency"]])
    hf = HFJudge(smollm2_path, device="cuda", dtype="bfloat16", batch_size=8)
    vj = VLLMJudge(smollm2_path, dtype="bfloat16", max_model_len=2048, gpu_memory_utilization=0.3,
                   enforce_eager=True)
    assert vj.encode(reqs) == hf.encode(reqs)  # identical token ids: same template, no extra BOS
    assert vj.answers.all_ids == hf.answers.all_ids
    expected, got = hf.score_pairs(reqs), vj.score_pairs(reqs)
    assert [s.token_logprobs.keys() for s in got] == [s.token_logprobs.keys() for s in expected]
    # bf16 kernels differ between engines: compare within bf16 noise, and the decisions.
    worst = max(abs(e.p_a - g.p_a) for e, g in zip(expected, got))
    assert worst < 0.03, worst
    agree = sum((e.p_a > 0.5) == (g.p_a > 0.5) for e, g in zip(expected, got) if abs(e.p_a - 0.5) > 0.03)
    decided = sum(abs(e.p_a - 0.5) > 0.03 for e in expected)
    assert agree == decided
