"""Judges behind one interface: `score_pairs(requests) -> list[PairScore]` (same order).

Backends import their heavy libraries lazily: `harness.judges.hf` (transformers),
`harness.judges.vllm` (vLLM, optional extra), `harness.judges.api` (OpenAI-compatible).
"""

from harness.judges.answers import AnswerTokens, renormalise
from harness.judges.base import Judge

__all__ = ["AnswerTokens", "Judge", "renormalise"]
