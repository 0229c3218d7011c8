"""harness: a research harness for LLM judges (pairwise A/B logprob judging, ZEPO, A-BB)."""

__version__ = "0.1.0"
