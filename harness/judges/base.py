"""The Judge protocol and answer-token resolution shared by every backend."""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from harness.errors import ConfigError, JudgeInputError
from harness.records import PairRequest, PairScore


@runtime_checkable
class Judge(Protocol):
    """A pairwise judge: one batch method, results in request order."""

    identity: str
    """Model + revision + dtype + backend + chat template + answer-token ids: part of cache keys."""

    def score_pairs(self, requests: Sequence[PairRequest]) -> list[PairScore]: ...


@runtime_checkable
class StreamingJudge(Judge, Protocol):
    """A judge that can also score a whole call as a stream (the transformers judge with the
    next-token read-out). The request cache (CachedJudge) hands such a judge every distinct
    request of a call with the indices it `needed`, and commits each yielded list before the
    next step runs. CachedJudge has the same two members over its cache (its `stream_scores`
    decides `needed` itself and takes a progress bar instead), so PreemptibleJudge streams through
    it; see `streams`."""

    @property
    def streaming(self) -> bool:
        """Whether `stream_scores` serves this judge as configured (False: call `score_pairs`)."""
        ...

    def stream_scores(self, requests: Sequence[PairRequest], needed: Collection[int] | None = None
                      ) -> Iterator[list[tuple[int, PairScore]]]:
        """(i, score) lists for `requests[i]`, i in `needed` (all by default), each list as soon as
        the forwards that finish it have run; the scores must not depend on `needed`."""
        ...


def streams(judge: Any) -> bool:
    """Whether `judge` is a StreamingJudge whose `streaming` is on."""
    return isinstance(judge, StreamingJudge) and bool(judge.streaming)


def gather(steps: Iterable[Iterable[tuple[int, Any]]], n: int) -> list[Any]:
    """A stream's (index, item) lists (`stream_scores`, `PrefixScorer.stream`) as one list of `n`
    items in index order."""
    out: list[Any] = [None] * n
    for done in steps:
        for i, item in done:
            out[i] = item
    return out


def ticked(steps: Iterable[list[Any]], progress: Any) -> Iterator[list[Any]]:
    """`steps` (lists of finished requests) passed on, `progress` ticked by each list's length."""
    for done in steps:
        if progress is not None:
            progress.update(len(done))
        yield done


def supports_progress(judge: Any, method: str = "score_pairs") -> bool:
    """Whether `judge.<method>` takes a `progress` bar (the caching and chunking wrappers and the
    transformers judge do: it ticks each request as it is scored, within the call).

    Decided from the signature, never by calling and catching TypeError (which would re-run a
    whole scoring when a real TypeError happens inside it)."""
    try:
        return "progress" in inspect.signature(getattr(judge, method)).parameters
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


_LONGEST: dict[int, int] = {}
"""longest_token_chars per tokenizer (read once: the whole vocabulary is walked)."""


def longest_token_chars(tokenizer: Any) -> int:
    """Characters in the tokenizer's longest vocabulary entry (byte-level and SentencePiece entries
    are at least as long as the text they decode to): no token covers more of a prompt."""
    key = hash((id(tokenizer), len(tokenizer)))  # the size too: an id may be reused by another tokenizer
    if key not in _LONGEST:
        _LONGEST[key] = max((len(t) for t in tokenizer.get_vocab()), default=1) or 1
    return _LONGEST[key]


def refuse_overlong_texts(tokenizer: Any, texts: Sequence[str], requests: Sequence[PairRequest],
                          max_length: int) -> None:
    """Refuse, before tokenizing, a prompt with more characters than `max_length` tokens of the
    longest vocabulary entry could cover: it cannot fit, and tokenizing a 20 MB text takes minutes
    and gigabytes."""
    most = max_length * longest_token_chars(tokenizer)
    for r, text in zip(requests, texts):
        if len(text) > most:
            raise JudgeInputError(
                f"prompt for document {r.doc_id!r} pair ({r.a_id}, {r.b_id}) is {len(text):,} characters, at least "
                f"{len(text) // (most // max_length):,} tokens, longer than the model's context of {max_length}; "
                "judge shorter texts (or raise model.max_length up to what the model supports)")


POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length")
"""Where a transformers config holds the number of positions the weights were trained for."""


def model_positions(config: Any) -> int | None:
    """The positions a model's config declares (its text config for a multimodal one), or None."""
    if not isinstance(config, Mapping):
        text = getattr(config, "get_text_config", lambda: config)()
        config = {k: getattr(text, k, None) for k in POSITION_KEYS}
    else:
        config = config.get("text_config") or config
    for key in POSITION_KEYS:
        v = config.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def context_length(max_length: int | None, config: Any, where: str) -> int:
    """model.max_length checked against the weights' positions (one ConfigError before any
    prompt is scored): a longer context would score prompts at positions the weights never saw
    (RoPE extrapolation), with plausible-looking numbers. Unset: the weights' positions (2048
    when the config declares none)."""
    positions = model_positions(config)
    if max_length is None:
        return positions or 2048
    if positions is not None and int(max_length) > positions:
        raise ConfigError(
            f"model.max_length={max_length} is more than the {positions} positions the weights in {where} "
            f"declare (max_position_embeddings in its config): prompts past them would be scored at positions "
            f"the model never saw; set model.max_length={positions} or less")
    return int(max_length)


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
        return ";".join(f"{k}={i}" for k, i in zip(self.keys, self.all_ids)) + (f";tie={self.tie}" if self.tie else "")

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
    return (bool(values) and not any(math.isnan(x) or x == math.inf for x in values)
            and any(x > -math.inf for x in values))


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


def resolve_answer_tokens(tokenizer: Any, labels: Sequence[str] = ("A", "B"),
                          tie: str | None = None) -> AnswerTokens:
    """Find the single-token spellings of each label: the label as a vocabulary entry ('A') and
    with a word-start marker (' A': 'ĠA' in byte-level BPE, '▁A' in SentencePiece).

    Variants come from two places, so that both tokenizer families give what the ZEPO code reads
    with `convert_tokens_to_ids(["A", "▁A"])`: encoding 'A' and ' A' (kept when one token that
    decodes back to the text), and looking the label up in the vocabulary with and without a
    marker. Mistral-7B needs the lookup: its SentencePiece encodes 'A' as '▁A' (330), so the bare
    'A' (28741), which the model also writes, is found only there; its digits ('1' = 28740) encode
    to two tokens and exist only as vocabulary entries. A label with no single-token spelling is
    refused with a clear error: the judge could not read its probability at one position.
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
        variants[label] = tuple(sorted(((_token_text(tokenizer, tid), tid) for tid in ids),
                                       key=lambda v: (v[0] != label, v[1])))
    return AnswerTokens(labels=tuple(labels), variants=variants, tie=tie)


def _not_one_token(tokenizer: Any, label: str) -> str:
    """Why `label` has no single-token spelling, in words that do not contradict themselves."""
    if label != label.strip():
        return (f"answer label {label!r} has surrounding whitespace; each label is read with and without a "
                f"leading space already, so use {label.strip()!r}")
    enc = tokenizer.encode(label, add_special_tokens=False)
    if len(enc) == 1:
        return (f"answer label {label!r} is not a vocabulary entry of its own (it encodes to token {enc[0]}, "
                f"which decodes to {tokenizer.decode(enc)!r}); choose labels that are single tokens")
    return (f"answer label {label!r} is not a single token for this tokenizer (it encodes to {len(enc)} tokens "
            f"{enc}); choose single-token labels")


_MARKERS = ("\u0120", "\u2581")  # 'Ġ' (byte-level BPE) and '▁' (SentencePiece): a word-start space


def _single_token_ids(tokenizer: Any, label: str) -> list[int]:
    """Ids of the one-token spellings of `label` (bare or after a space), in discovery order."""
    found: list[int] = []
    for text in (label, " " + label):
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) == 1 and tokenizer.decode(ids).strip() == label and (text == label or _token_text(
                tokenizer, ids[0]) == text):
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


def template_fingerprint(template: str | None) -> str:
    """Short hash of a chat template, so a changed template changes the judge identity."""
    return hashlib.sha256((template or "").encode()).hexdigest()[:12]
