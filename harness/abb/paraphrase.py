"""Answer (and question) paraphrase neighbours through an LLM: the paper's "light paraphrase" edit.

A neighbour that rewords a candidate's answer without changing its content should not change a
fair judge's verdict. The text comes from any `TextGenerator` (the project's optimizer models:
harness.zepo.optimizers' `generate`, wired in by the experiment main, since abb does not import
zepo); this module owns the prompt and the validation, and asks again (new sample indices, same
seed) when a rewrite is rejected. Samples are numbered, so a generator with a completion cache
repeats no call on a rerun.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from harness.errors import ConfigError, located

PROMPT = """\
Rewrite the text below in different words. Keep its meaning, every fact, step, number, name, code \
block and its conclusion exactly; do not add, remove, correct or improve anything; keep about the \
same length and the same format (lists stay lists, code stays code). Reply with the rewritten text \
only: no title, no quotation marks, no comment.

Text:
{text}"""

_PREFIX = re.compile(
    r"^\s*(?:(?:sure|certainly|of course)[!,.]?\s*)?(?:here(?:'s| is)[^:\n]{0,60}:|"
    r"(?:rewritten|paraphrased|new) (?:text|answer|version)\s*:)\s*",
    re.IGNORECASE,
)


@runtime_checkable
class TextGenerator(Protocol):
    """Raw completions for chat messages: one per sample index, reproducible per (seed, sample)."""

    def generate(self, messages: list[dict[str, str]], seed: int, samples: Sequence[int]) -> list[str]: ...


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def check_rewrite(
    text: str, original: str, *, min_ratio: float = 0.5, max_ratio: float = 2.0
) -> tuple[str, str | None]:
    """(cleaned text, None) when acceptable, else (cleaned text, why not)."""
    t = _PREFIX.sub("", text.strip(), count=1).strip()
    if not t:
        return t, "empty"
    if _norm(t) == _norm(original):
        return t, "same as the original"
    ratio = len(t) / max(1, len(original))
    if not min_ratio <= ratio <= max_ratio:
        return t, f"length {len(t)} chars is {ratio:.2f}x the original (allowed {min_ratio}..{max_ratio}x)"
    return t, None


class AnswerParaphraser:
    """`paraphrase(text, n, seed)` for answers and questions, from a TextGenerator."""

    def __init__(
        self,
        generator: TextGenerator,
        *,
        max_attempts: int = 4,
        min_ratio: float = 0.5,
        max_ratio: float = 2.0,
    ) -> None:
        if not isinstance(generator, TextGenerator):
            raise ConfigError(
                f"{type(generator).__name__} has no generate(messages, seed, samples): it cannot "
                "paraphrase answers",
                where=located("optimizer", field="_target_"),
            )
        self.generator, self.max_attempts = generator, int(max_attempts)
        self.min_ratio, self.max_ratio = float(min_ratio), float(max_ratio)
        self.identity = f"answer-paraphrase via {getattr(generator, 'identity', type(generator).__name__)}"

    def paraphrase(self, text: str, n: int, seed: int) -> list[str]:
        """n accepted rewrites; each slot is asked up to max_attempts times (sample indices in order)."""
        messages = [{"role": "user", "content": PROMPT.format(text=text.strip())}]
        out: list[str] = []
        reasons: list[str] = []
        sample, cut = 0, False
        while len(out) < n and sample < n * self.max_attempts:
            want = list(range(sample, sample + n - len(out)))
            sample += len(want)
            for raw in self.generator.generate(messages, seed, want):
                t, why = check_rewrite(raw, text, min_ratio=self.min_ratio, max_ratio=self.max_ratio)
                if why is None and all(_norm(t) != _norm(o) for o in out):
                    out.append(t)
                else:
                    reasons.append(why or "duplicate")
                    cut |= (
                        0 < len(t) < self.min_ratio * len(text)
                    )  # too short: probably cut at the token limit
        if len(out) < n:
            hint = (
                "; raise optimizer.max_tokens (api) or optimizer.max_new_tokens (local)"
                if cut
                else "; a stronger optimizer model (optimizer=api) may be needed"
            )
            raise ConfigError(
                f"the optimizer gave {len(out)} of {n} acceptable paraphrases in {sample} samples "
                f"({'; '.join(sorted(set(reasons)))}){hint}",
                where=located("neighbours", field="llm_paraphrase"),
            )
        return out[:n]
