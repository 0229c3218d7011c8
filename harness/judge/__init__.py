"""Judges behind one interface: `score_pairs(requests) -> list[PairScore]` (same order).

Backends import their heavy libraries lazily: `harness.judge.hf_judge` (transformers),
`harness.judge.vllm_judge` (vLLM, optional extra), `harness.judge.api_judge` (OpenAI-compatible).
"""

from harness.judge.base import AnswerTokens, Judge, renormalise

__all__ = ["AnswerTokens", "Judge", "renormalise"]
