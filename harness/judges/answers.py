"""Answer tokens and their read-out: the token ids that spell each answer label, and P(A) renormalised
from their log-probabilities (shared by every backend: transformers, vLLM, API)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import JudgeInputError
from harness.records import PairScore


@dataclass(frozen=True)
class AnswerTokens:
    """The token ids that spell each answer label at the answer position.

    `variants[label]` is a tuple of (token_text, token_id), the text being the vocabulary entry
    with its word-start marker shown as a space: Llama-3 'A' -> (('A', 32), (' A', 362)),
    Mistral-7B 'A' -> (('A', 28741), (' A', 330)). A label's probability is the sum over its
    variants, as the ZEPO code does.
    """

    labels: tuple[str, ...]
    variants: dict[str, tuple[tuple[str, int], ...]]
    tie: str | None = None
    """A label that counts in P(A)'s denominator and, when it is more likely than every other
    label, makes the pair a tie (P(A) = 0.5): the official ZEPO read-out's 'C'. None: no such rule."""
    vocab_size: int | None = None
    """The size of the distribution the log-probs come from (a local model's vocabulary), so a
    uniform one is recognised (`uniform`); None (an API judge): not checked."""

    @property
    def all_ids(self) -> list[int]:
        return [tid for label in self.labels for _, tid in self.variants[label]]

    @property
    def trigger_ids(self) -> set[int]:
        """Ids whose generation marks the answer step (every label but the tie label), for the
        generate-then-read read-out."""
        return {tid for label in self.labels if label != self.tie for _, tid in self.variants[label]}

    @property
    def keys(self) -> list[str]:
        """Keys of PairScore.token_logprobs, aligned with `all_ids`."""
        return [f"{label}:{text}" for label in self.labels for text, _ in self.variants[label]]

    def describe(self) -> str:
        return ";".join(f"{k}={i}" for k, i in zip(self.keys, self.all_ids)) + (
            f";tie={self.tie}" if self.tie else ""
        )

    def label_logprobs(self, logprobs: Sequence[float]) -> list[float]:
        """Per-label log-probability (log of the summed variant probabilities), in label order."""
        values = [float(x) for x in logprobs]
        out, pos = [], 0
        for label in self.labels:
            n = len(self.variants[label])
            out.append(logsumexp(values[pos : pos + n]))
            pos += n
        return out

    def score(self, logprobs: Sequence[float]) -> PairScore:
        """Turn logprobs aligned with `all_ids` into a PairScore (first label is 'A'):
        P(A) over every label (a tie label included); 0.5 when the tie label wins."""
        values = [float(x) for x in logprobs]
        if not readable_logprobs(values):
            return unreadable()
        token_logprobs = dict(zip(self.keys, values))
        if self.vocab_size and uniform(values, self.vocab_size):
            return PairScore(token_logprobs=token_logprobs, p_a=math.nan, flags=("unreadable", UNIFORM))
        per_label = self.label_logprobs(values)
        if self.tie is not None:
            t = per_label[self.labels.index(self.tie)]
            if all(t > x for label, x in zip(self.labels, per_label) if label != self.tie):
                return PairScore(token_logprobs=token_logprobs, p_a=0.5)
        return PairScore(token_logprobs=token_logprobs, p_a=renormalise(per_label[0], per_label[1:]))


def readable_logprobs(values: Sequence[float]) -> bool:
    """Whether answer log-probs hold a probability: none NaN or +inf (NaN/inf logits, e.g.
    broken weights or an fp16 overflow) and not every one -inf (no answer mass at all). Anything
    else would be renormalised into a made-up P(A) (0.5, or exactly 0 or 1)."""
    return (
        bool(values)
        and not any(math.isnan(x) or x == math.inf for x in values)
        and any(x > -math.inf for x in values)
    )


UNIFORM = "uniform_logits"
"""Flag (with `unreadable`) of a pair whose answer tokens each hold exactly 1/vocabulary: every
logit equal, e.g. activations that overflowed without a NaN. P(A) would be 0.5 whatever was asked."""
UNIFORM_TOLERANCE = 1e-4
"""How near -log(vocabulary) every answer log-prob must be to count as uniform (equal logits give
it to float rounding; a model that read its prompt is nowhere near it on every answer token)."""


def uniform(values: Sequence[float], vocab_size: int) -> bool:
    """Whether every answer log-prob is -log(vocab_size): the next-token distribution is uniform."""
    return all(abs(x + math.log(vocab_size)) <= UNIFORM_TOLERANCE for x in values)


def unreadable() -> PairScore:
    """The score of a pair whose answer holds no usable probability: P(A) NaN, flagged, so it is
    counted in results.json's n_unreadable, left out of every metric and never cached."""
    return PairScore(token_logprobs={}, p_a=math.nan, flags=("unreadable",))


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


def resolve_answer_tokens(
    tokenizer: Any, labels: Sequence[str] = ("A", "B"), tie: str | None = None, vocab_size: int | None = None
) -> AnswerTokens:
    """Find the single-token spellings of each label: the label as a vocabulary entry ('A') and
    with a word-start marker (' A': 'ĠA' in byte-level BPE, '▁A' in SentencePiece).

    Variants come from two places, so that both tokenizer families give what the ZEPO code reads
    with `convert_tokens_to_ids(["A", "▁A"])`: encoding 'A' and ' A' (kept when one token that
    decodes back to the text), and looking the label up in the vocabulary with and without a
    marker. Mistral-7B needs the lookup: its SentencePiece encodes 'A' as '▁A' (330), so the bare
    'A' (28741), which the model also writes, is found only there; its digits ('1' = 28740) encode
    to two tokens and exist only as vocabulary entries. A label with no single-token spelling is
    refused with a clear error: the judge could not read its probability at one position.
    `vocab_size`: the model's output size, for the uniform check (AnswerTokens.vocab_size).
    """
    if len(labels) < 2 or len(set(labels)) != len(labels):
        raise JudgeInputError(f"answer labels must be at least two distinct strings, got {list(labels)}")
    if tie is not None and tie not in labels:
        raise JudgeInputError(f"tie label {tie!r} must be one of the answer labels {list(labels)}")
    variants: dict[str, tuple[tuple[str, int], ...]] = {}
    seen: dict[int, str] = {}
    for label in labels:
        ids = _single_token_ids(tokenizer, label)
        if not ids:
            raise JudgeInputError(_not_one_token(tokenizer, label))
        for tid in ids:
            if tid in seen:
                raise JudgeInputError(f"answer labels {seen[tid]!r} and {label!r} share token id {tid}")
            seen[tid] = label
        variants[label] = tuple(
            sorted(((_token_text(tokenizer, tid), tid) for tid in ids), key=lambda v: (v[0] != label, v[1]))
        )
    return AnswerTokens(labels=tuple(labels), variants=variants, tie=tie, vocab_size=vocab_size)


def _not_one_token(tokenizer: Any, label: str) -> str:
    """Why `label` has no single-token spelling, in words that do not contradict themselves."""
    if label != label.strip():
        return (
            f"answer label {label!r} has surrounding whitespace; each label is read with and without a "
            f"leading space already, so use {label.strip()!r}"
        )
    enc = tokenizer.encode(label, add_special_tokens=False)
    if len(enc) == 1:
        return (
            f"answer label {label!r} is not a vocabulary entry of its own (it encodes to token {enc[0]}, "
            f"which decodes to {tokenizer.decode(enc)!r}); choose labels that are single tokens"
        )
    return (
        f"answer label {label!r} is not a single token for this tokenizer (it encodes to {len(enc)} tokens "
        f"{enc}); choose single-token labels"
    )


_MARKERS = ("\u0120", "\u2581")  # 'Ġ' (byte-level BPE) and '▁' (SentencePiece): a word-start space


def _single_token_ids(tokenizer: Any, label: str) -> list[int]:
    """Ids of the one-token spellings of `label` (bare or after a space), in discovery order."""
    found: list[int] = []
    for text in (label, " " + label):
        ids = tokenizer.encode(text, add_special_tokens=False)
        if (
            len(ids) == 1
            and tokenizer.decode(ids).strip() == label
            and (text == label or _token_text(tokenizer, ids[0]) == text)
        ):
            found.append(int(ids[0]))
    unk = getattr(tokenizer, "unk_token_id", None)
    for entry in (label, *(m + label for m in _MARKERS)):
        tid = tokenizer.convert_tokens_to_ids(entry)
        if isinstance(tid, int) and tid != unk and tokenizer.convert_ids_to_tokens(tid) == entry:
            found.append(tid)
    return list(dict.fromkeys(found))


def _token_text(tokenizer: Any, tid: int) -> str:
    """A vocabulary entry as text: a leading word-start marker becomes a space."""
    entry = tokenizer.convert_ids_to_tokens(int(tid))
    return " " + entry[1:] if entry[:1] in _MARKERS else entry
