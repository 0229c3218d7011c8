"""Judge wrappers that change how requests reach the judge, not what it answers.

`PreemptibleJudge` feeds a (cached) judge one cache chunk at a time, or a streaming one (the
transformers judge: `stream_scores`) all requests in one call, and holds SIGUSR1/SIGUSR2
(submitit's preemption and timeout signals) until each chunk or streamed step is committed, so
a requeued SLURM job finds every request it paid for in the cache and re-scores none. The caching
wrapper itself is `harness.judges.cache.CachedJudge`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from harness.errors import ConfigError
from harness.judges.base import check_requests, gather, stream_window, streams, supports_progress
from harness.judges.settings import CacheSettings
from harness.records import PairRequest, PairScore

PREEMPT_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
"""submitit's timeout/preemption signals (SUBMITIT_PREEMPT_SIGNAL picks one; USR2 by default)."""


@contextlib.contextmanager
def deferred_signals(signums: Sequence[int] = PREEMPT_SIGNALS) -> Iterator[list[int]]:
    """Hold `signums` for the duration of the block, then deliver them to the original handlers.

    submitit's handler checkpoints, requeues and raises SystemExit wherever Python happens to be;
    inside a chunk that throws away scores not yet committed. Held until the block ends, the
    handler runs after the commit. Only the main thread can install handlers: elsewhere a no-op.
    """
    pending: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    previous = {s: signal.getsignal(s) for s in signums}
    previous = {s: h for s, h in previous.items() if h is not None}  # None: installed from C, leave it
    for s in previous:
        signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield pending
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        for s in dict.fromkeys(pending):
            signal.raise_signal(s)


@contextlib.contextmanager
def held_in_children(signums: Sequence[int] = PREEMPT_SIGNALS) -> Iterator[None]:
    """Processes started inside the block never act on `signums`; this process acts on them after it.

    vLLM starts its engine core (and, on GPUs, its workers) as child processes. Forked, they inherit
    submitit's handler; spawned, the default action (terminate). SLURM signals every process of the
    job, so a child would requeue the job itself, racing this process's requeue at its next commit,
    or die. Blocked (`pthread_sigmask`) in this thread while the children start, the signals stay
    blocked in every child: a signal mask survives fork and exec, and vLLM never unblocks them.
    Here they are held (`deferred_signals`) and delivered when the block ends. Only the main thread
    can do this: elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with deferred_signals(signums):
        before = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)  # what arrived is recorded, then delivered


def _held(steps: Iterator[Any], progress: Any = None) -> Iterator[Any]:
    """`steps`, each one computed (and committed) with the preemption signals held."""
    while True:
        with deferred_signals():
            done = next(steps, None)
        if done is None:
            return
        if progress is not None:
            progress.update(len(done))
        yield done


class PreemptibleJudge:
    """A cached judge scored one cache chunk (or one streamed step) at a time, preemption
    signals held until it is committed."""

    STREAM_WINDOW = 4096
    """Requests per streamed call at most, unless the judge names its own (`stream_window`; None:
    the whole call): bounds the prefix tree and token ids the transformers judge holds at once (a
    document's pairs split across two windows recompute its prefix once more)."""

    def __init__(self, judge: Any, chunk: int | None = None) -> None:
        chunk = CacheSettings.chunk if chunk is None else chunk
        if chunk < 1:
            raise ConfigError(f"cache.chunk must be >= 1, got {chunk}")
        self.judge = judge
        self.chunk = int(chunk)
        self.identity = judge.identity
        self.numerics = getattr(judge, "numerics", None)
        self._takes_progress = supports_progress(judge)

    @property
    def calls(self) -> int | None:
        """Requests the wrapped CachedJudge sent to the model (None without a cache)."""
        return getattr(self.judge, "calls", None)

    def score_pairs(self, requests: Sequence[PairRequest], progress: Any = None) -> list[PairScore]:
        check_requests(self.judge, requests)  # every prompt, before the first chunk reaches the model
        if streams(self.judge):
            return self._score_stream(requests, progress)
        return self._score_chunks(requests, progress)

    def _score_stream(self, requests: Sequence[PairRequest], progress: Any) -> list[PairScore]:
        """One call per window of requests (STREAM_WINDOW, or the judge's own; shared prefixes
        computed once across each), the signals held per step: the forwards up to one that finishes
        prompts, and the cache commit of what it finished."""
        takes_progress = supports_progress(self.judge, "stream_scores")
        out: list[PairScore] = []
        window = stream_window(self.judge, self.STREAM_WINDOW) or max(1, len(requests))
        for at in range(0, len(requests), window):
            part = requests[at : at + window]
            steps = (
                self.judge.stream_scores(part, progress=progress)
                if takes_progress
                else self.judge.stream_scores(part)
            )
            try:
                out.extend(gather(_held(steps, None if takes_progress else progress), len(part)))
            finally:
                steps.close()  # preempted (SystemExit) or interrupted: the model's tree goes now
        return out

    def _score_chunks(self, requests: Sequence[PairRequest], progress: Any) -> list[PairScore]:
        out: list[PairScore] = []
        for i in range(0, len(requests), self.chunk):
            part = requests[i : i + self.chunk]
            with deferred_signals():
                if self._takes_progress:
                    out.extend(self.judge.score_pairs(part, progress=progress))
                else:
                    out.extend(self.judge.score_pairs(part))
                    if progress is not None:
                        progress.update(len(part))
        return out
