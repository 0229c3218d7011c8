"""The Judge protocol, the streaming helpers and the request checks shared by every backend
(answer tokens: harness.judges.answers; the local-chat base: harness.judges.chat)."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

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

    def stream_scores(
        self, requests: Sequence[PairRequest], needed: Collection[int] | None = None
    ) -> Iterator[list[tuple[int, PairScore]]]:
        """(i, score) lists for `requests[i]`, i in `needed` (all by default), each list as soon as
        the forwards that finish it have run; the scores must not depend on `needed`."""
        ...


def stream_window(judge: Any, default: int) -> int | None:
    """Requests per streamed call that `judge`, or the judge it wraps (a CachedJudge's), asks for
    with a `stream_window` attribute (None: the whole call); else `default`."""
    for j in (judge, getattr(judge, "judge", None)):
        if j is not None and hasattr(j, "stream_window"):
            return j.stream_window
    return default


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
    even when an earlier run with a longer context cached the answer. The first judge down the
    wrappers that checks (the request cache, which checks a hit by its stored length; else the
    model judge) does it."""
    seen: set[int] = set()
    while judge is not None and id(judge) not in seen:
        seen.add(id(judge))
        check = getattr(judge, "check_requests", None)
        if check is not None:
            if requests:
                check(requests)
            return
        judge = getattr(judge, "judge", None)


def innermost(judge: Any) -> Any:
    """The judge that calls the model, under every wrapper (CachedJudge, PreemptibleJudge, ...)
    that exposes what it wraps as `.judge`."""
    seen: set[int] = set()
    while getattr(judge, "judge", None) is not None and id(judge) not in seen:
        seen.add(id(judge))
        judge = judge.judge
    return judge


def template_fingerprint(template: str | None) -> str:
    """Short hash of a chat template, so a changed template changes the judge identity."""
    return hashlib.sha256((template or "").encode()).hexdigest()[:12]
