"""The Judge protocol and answer-token resolution shared by every backend."""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from harness.errors import JudgeInputError
from harness.types import PairRequest, PairScore


@runtime_checkable
class Judge(Protocol):
    """A pairwise judge: one batch method, results in request order."""

    identity: str
    """Model + revision + dtype + backend + chat template + answer-token ids: part of cache keys."""

    def score_pairs(self, requests: Sequence[PairRequest]) -> list[PairScore]: ...


def supports_progress(judge: Any) -> bool:
    """Whether `judge.score_pairs` takes a `progress` bar (the caching and chunking wrappers do).

    Decided from the signature, never by calling and catching TypeError (which would re-run a
    whole scoring when a real TypeError happens inside it)."""
    try:
        return "progress" in inspect.signature(judge.score_pairs).parameters
    except (TypeError, ValueError):
        return False


def check_requests(judge: Any, requests: Sequence[PairRequest]) -> None:
    """Refuse (JudgeInputError) requests the model behind `judge` cannot read (a prompt over its
    context, an empty prompt), without scoring anything. Backends that tokenize locally offer
    `check_requests`; for the others this is a no-op.

    Run over every request, cache hits included: a context too short for a prompt must be refused
    even when an earlier run with a longer context cached the answer."""
    check = getattr(innermost(judge), "check_requests", None)
    if check is not None and requests:
        check(requests)


def innermost(judge: Any) -> Any:
    """The judge that calls the model, under every wrapper (CachedJudge, PreemptibleJudge, ...)
    that exposes what it wraps as `.judge`."""
    seen: set[int] = set()
    while getattr(judge, "judge", None) is not None and id(judge) not in seen:
        seen.add(id(judge))
        judge = judge.judge
    return judge


@dataclass(frozen=True)
class AnswerTokens:
    """The token ids that spell each answer label at the answer position.

    `variants[label]` is a tuple of (token_text, token_id): e.g. for Llama-3 'A' -> (('A', 32),
    (' A', 362)). A label's probability is the sum over its variants, as the ZEPO code does.
    """

    labels: tuple[str, ...]
    variants: dict[str, tuple[tuple[str, int], ...]]

    @property
    def all_ids(self) -> list[int]:
        return [tid for label in self.labels for _, tid in self.variants[label]]

    @property
    def keys(self) -> list[str]:
        """Keys of PairScore.token_logprobs, aligned with `all_ids`."""
        return [f"{label}:{text}" for label in self.labels for text, _ in self.variants[label]]

    def describe(self) -> str:
        return ";".join(f"{k}={i}" for k, i in zip(self.keys, self.all_ids))

    def score(self, logprobs: Sequence[float]) -> PairScore:
        """Turn logprobs aligned with `all_ids` into a PairScore (first label is 'A')."""
        values = [float(x) for x in logprobs]
        token_logprobs = dict(zip(self.keys, values))
        per_label = []
        pos = 0
        for label in self.labels:
            n = len(self.variants[label])
            per_label.append(logsumexp(values[pos : pos + n]))
            pos += n
        return PairScore(token_logprobs=token_logprobs, p_a=renormalise(per_label[0], per_label[1:]))


def logsumexp(xs: Sequence[float]) -> float:
    m = max(xs)
    if m == -math.inf:
        return -math.inf
    return m + math.log(sum(math.exp(x - m) for x in xs))


def renormalise(lp_a: float, lp_others: Sequence[float]) -> float:
    """P(A) / (P(A) + sum P(others)) from log-probabilities; 0.5 when all are -inf."""
    allv = [lp_a, *lp_others]
    m = max(allv)
    if m == -math.inf:
        return 0.5
    num = math.exp(lp_a - m)
    return num / sum(math.exp(x - m) for x in allv)


def resolve_answer_tokens(tokenizer: Any, labels: Sequence[str] = ("A", "B")) -> AnswerTokens:
    """Find the single-token spellings of each label ('A' and ' A' style variants).

    A variant counts when encoding it (without special tokens) gives exactly one token that
    decodes back to the same text. The bare label must be one token: otherwise the judge could
    not read its probability at one position, and we refuse with a clear error.
    """
    if len(labels) < 2 or len(set(labels)) != len(labels):
        raise JudgeInputError(f"answer labels must be at least two distinct strings, got {list(labels)}")
    variants: dict[str, tuple[tuple[str, int], ...]] = {}
    seen: dict[int, str] = {}
    for label in labels:
        found: list[tuple[str, int]] = []
        for text in (label, " " + label):
            ids = tokenizer.encode(text, add_special_tokens=False)
            if len(ids) == 1 and tokenizer.decode(ids) == text and ids[0] not in (i for _, i in found):
                found.append((text, int(ids[0])))
        if not found or found[0][0] != label:
            ids = tokenizer.encode(label, add_special_tokens=False)
            raise JudgeInputError(
                f"answer label {label!r} is not a single token for this tokenizer "
                f"(encodes to {len(ids)} tokens {ids}); choose single-token labels"
            )
        for _, tid in found:
            if tid in seen:
                raise JudgeInputError(f"answer labels {seen[tid]!r} and {label!r} share token id {tid}")
            seen[tid] = label
        variants[label] = tuple(found)
    return AnswerTokens(labels=tuple(labels), variants=variants)


def template_fingerprint(template: str | None) -> str:
    """Short hash of a chat template, so a changed template changes the judge identity."""
    return hashlib.sha256((template or "").encode()).hexdigest()[:12]
