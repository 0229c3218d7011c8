"""The optimizers' settings, each default written once: conf/optimizer/local.yaml (`LocalSettings`)
and conf/optimizer/api.yaml (`ApiOptimizerSettings`, the server's part: harness.api_client.HttpSettings).

The config schemas (harness.runtime.schema) extend these dataclasses, so a run's validated config
and an optimizer built in code (LocalOptimizer(path, max_new_tokens=8), a script, a test) take the
same defaults and the same `check()`.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.api_client import HttpSettings
from harness.checks import at_least, bad, check_device, one_of, within
from harness.judges.device import DTYPES
from harness.zepo.validation import META_PROMPTS


@dataclass
class SamplingSettings:
    """How every optimizer samples and validates a paraphrase."""

    temperature: float = 0.9
    """Sampling temperature of each paraphrase (the paper: 0.9)."""
    top_p: float = 1.0
    """Nucleus sampling mass (1: off)."""
    max_attempts: int = 4
    """Re-asks per slot when a paraphrase fails validation."""
    min_ratio: float = 0.1
    """Reject a reply shorter than this x the instruction (whitespace collapsed)."""
    max_ratio: float = 3.0
    """... or longer than this x."""
    meta_prompt: str = "default"
    """One of META_PROMPTS: default (this project's; replies cleaned and validated) | zepo (official, verbatim)."""

    def check(self) -> None:
        one_of("optimizer.meta_prompt", self.meta_prompt, META_PROMPTS)
        at_least("optimizer.temperature", self.temperature, 0)
        within("optimizer.top_p", self.top_p, 0, 1, open_low=True)
        at_least("optimizer.max_attempts", self.max_attempts, 1)
        if not 0 < self.min_ratio < 1 < self.max_ratio:
            raise bad(
                "optimizer.min_ratio/max_ratio", (self.min_ratio, self.max_ratio), "need 0 < min < 1 < max"
            )


@dataclass
class LocalSettings(SamplingSettings):
    """A local model's paraphrases (LocalOptimizer; VLLMOptimizer when it samples the judge's engine)."""

    gguf_file: str | None = None
    """A GGUF file inside the optimizer's path."""
    dtype: str = "auto"
    """auto: float32 on CPU, bfloat16 on GPU; or a dtype name."""
    device: str = "auto"
    """auto: cuda when torch sees a GPU, else cpu."""
    max_new_tokens: int = 160
    """Tokens per paraphrase at most."""

    def check(self) -> None:
        super().check()
        at_least("optimizer.max_new_tokens", self.max_new_tokens, 1)
        one_of("optimizer.dtype", self.dtype, DTYPES)
        check_device("optimizer.device", self.device)


@dataclass
class ApiOptimizerSettings(SamplingSettings, HttpSettings):
    """An OpenAI-compatible chat model's paraphrases (ApiOptimizer)."""

    base_url: str = "https://api.openai.com/v1"
    """OpenAI's API (the paper's optimizer)."""
    concurrency: int = 4
    """Requests in flight at once (a hosted API's rate limits)."""
    max_tokens: int = 512
    """Tokens per paraphrase at most."""

    def check(self) -> None:
        super().check()  # the sampling keys
        at_least("optimizer.max_tokens", self.max_tokens, 1)
        self.check_server("optimizer")
