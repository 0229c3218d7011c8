"""Typed records that flow one way: data -> prompts -> judges -> judging -> metrics -> (zepo | abb),
and the Tracker protocol every library logs to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Candidate:
    """One text to be judged (a summary, a dialogue response, a model's answer)."""

    id: str
    """Unique within its document: a system name, a model name, or an index."""
    text: str
    """The candidate text exactly as shown to the judge."""
    scores: Mapping[str, float] = field(default_factory=dict)
    """Human (or reference-judge) scores per aspect, e.g. {"coherence": 3.67}. May be empty."""


@dataclass(frozen=True)
class Document:
    """A source (article, dialogue history, user question) with the candidates written for it."""

    id: str
    """Unique within its dataset."""
    source: str
    """The text every candidate responds to."""
    candidates: tuple[Candidate, ...]
    """At least two candidates; pairs are formed among them."""
    context: str = ""
    """Extra context shown with the source (a knowledge fact, a persona); empty when none."""
    gold: str | None = None
    """For gold-label pairwise data (LLMBar): the id of the candidate humans prefer."""

    def candidate(self, cid: str) -> Candidate:
        for c in self.candidates:
            if c.id == cid:
                return c
        raise KeyError(f"document {self.id!r} has no candidate {cid!r}")


@dataclass(frozen=True)
class PairRequest:
    """One ordered comparison: candidate `a_id` shown as A, `b_id` as B."""

    doc_id: str
    a_id: str
    b_id: str
    prompt: str
    """The user message (content first, instruction last); the judge applies its chat template."""


@dataclass(frozen=True)
class PairScore:
    """What a judge returns for one PairRequest: raw answer-token logprobs and renormalised P(A)."""

    token_logprobs: Mapping[str, float]
    """Log-probability over the full vocabulary of every answer-token variant, keyed by
    '<label>:<token text>' (e.g. 'A:A', 'A: A'), read at the first answer position."""
    p_a: float
    """P(A) / (P(A) + P(B)), each label's probability summed over its variants; NaN when the answer
    could not be read (then `flags` says why, and the pair counts as unjudged in every metric)."""
    flags: tuple[str, ...] = ()
    """What is wrong with this answer, if anything (e.g. "unreadable"); empty for a clean one.
    A flagged score is not cached, except a deterministic `no_answer` (harness.judges.cache)."""


@dataclass(frozen=True)
class Judgment:
    """One judged ordered pair with what metrics need: P(A) and both candidates' human scores."""

    doc_id: str
    a_id: str
    b_id: str
    p_a: float
    token_logprobs: Mapping[str, float]
    human_a: float | None = None
    """Human score of candidate A on the aspect judged (None when the data has none)."""
    human_b: float | None = None
    gold_a: bool | None = None
    """For gold-label data: True when humans prefer A, False when B; None otherwise."""
    flags: tuple[str, ...] = ()
    """The PairScore's flags, kept with the judgment (judgments.jsonl `flags`), plus
    "low_answer_mass" when the answer tokens held little probability (harness.judging.LOW_MASS:
    informative only, the pair still counts in every metric)."""


@runtime_checkable
class Tracker(Protocol):
    """Where a run logs numbers, tables and images (harness.runtime.tracking.Tracker: the run
    directory plus W&B). Libraries take this protocol, so they never import the runtime."""

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None: ...

    def log_table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None: ...

    def log_image(self, name: str, path: Any) -> None: ...

    def summary(self, values: Mapping[str, Any]) -> None: ...
