"""The template base of the local judges (transformers, vLLM), as lm-eval's `TemplateLM` is of its
models: the base owns the requests (their chat encoding, `ChatPrompts`; the answer tokens and the
context check; `score_pairs` and `stream_scores`, with the answer log-probs turned into scores),
and each backend implements one token-level method, `answer_logprob_steps`: the token ids of the
wanted prompts in, the answer tokens' full-vocabulary log-probs out, a list per engine step.

Each backend still loads its own tokenizer and config (the transformers judge reads GGUF files and
remembers tokenizer classes: harness.judges.weights; vLLM reads a Hugging Face folder), and keeps
its own work counters; neither imports the other.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from harness.errors import ConfigError
from harness.judges.answers import resolve_answer_tokens
from harness.judges.base import gather, ticked
from harness.judges.chat import ChatPrompts, context_length, model_vocab_size, no_answer
from harness.judges.settings import ModelSettings
from harness.records import PairRequest, PairScore


class LocalJudge(ChatPrompts):
    """A pairwise judge on a local model: requests -> token ids -> (backend) answer log-probs -> scores."""

    def set_inputs(self, tokenizer: Any, config: Any, settings: ModelSettings, where: str) -> int:
        """Keep `tokenizer` and the answer tokens (`settings.labels`, `tie_label`, checked against the
        model's vocabulary in `config`); the context length, model.max_length checked against the
        weights' positions (harness.judges.chat.context_length: one ConfigError before any scoring)."""
        self.tokenizer = tokenizer
        self.answers = resolve_answer_tokens(
            tokenizer, settings.labels, settings.tie_label, model_vocab_size(config)
        )
        self.check_answers()
        return context_length(settings.max_length, config, where)

    def check_answers(self) -> None:
        """A backend's limit on the answer tokens (vLLM's per-request count), checked at set-up."""

    CALL_READOUTS: tuple[str, ...] = ()
    """The read-outs the backend scores in calls (`score_in_calls`), not in `stream_scores`."""

    @property
    def streaming(self) -> bool:
        """Whether `stream_scores` serves this judge: its read-out is not one of CALL_READOUTS."""
        return self.readout not in self.CALL_READOUTS

    def score_pairs(self, requests: Sequence[PairRequest], progress: Any = None) -> list[PairScore]:
        """Scores in request order; `progress` (a tqdm bar) is ticked once per request as it is
        scored: after each engine step that finishes some (or as `score_in_calls` settles them)."""
        if self.readout in self.CALL_READOUTS:
            return self.score_in_calls(requests, progress)
        return gather(ticked(self.stream_scores(requests), progress), len(requests))

    def stream_scores(
        self, requests: Sequence[PairRequest], needed: Collection[int] | None = None
    ) -> Iterator[list[tuple[int, PairScore]]]:
        """The scores of `requests[i]` for i in `needed` (all by default), as (i, score) lists, one
        after every engine step that finishes any. The backend plans its steps over ALL the
        requests, so a request scores bit for bit alike whichever others are needed: a request
        cache that commits each list and, after a kill, asks only for what it lacks gets exactly
        the unbroken run's scores. A fully cached call (nothing needed) loads no model."""
        if self.readout in self.CALL_READOUTS:
            raise ConfigError(
                f"stream_scores needs the next-token read-out (readout: {self.readout} is scored in calls)"
            )
        want = list(range(len(requests))) if needed is None else sorted(set(needed))
        if not requests or not want:
            return  # every request cached: no engine, no weights, nothing tokenized
        ids = self.call_ids(requests, want)
        steps = self.answer_logprob_steps(requests, ids, want)
        try:
            for done in steps:
                yield [
                    (i, self.answers.score(row) if row is not None else no_answer(self.answers))
                    for i, row in done
                ]
        finally:
            steps.close()  # an abandoned call (preempted, interrupted) frees the backend's state now

    def call_ids(
        self, requests: Sequence[PairRequest], want: list[int]
    ) -> Mapping[int, list[int]] | list[list[int]]:
        """The token ids a scoring call plans over, by request index: every request's by default (a
        backend that plans over all of them, e.g. the prefix plan); a backend that computes only
        `want` may tokenize only those (`encode`; it may count the time)."""
        return self.encode(requests)

    def answer_logprob_steps(
        self, requests: Sequence[PairRequest], ids: Mapping[int, list[int]] | list[list[int]], want: list[int]
    ) -> Iterator[list[tuple[int, list[float] | None]]]:
        """THE backend's method: for each i in `want` (sorted), the full-vocabulary log-probs of
        `self.answers.all_ids` where the model's answer goes after `ids[i]` (None: the read-out found
        no answer token), as (i, log-probs) lists, one per engine step. `requests` name a row in an
        error and may order the work; `ids` holds every request's row (plan over all of them)."""
        raise NotImplementedError

    def score_in_calls(self, requests: Sequence[PairRequest], progress: Any = None) -> list[PairScore]:
        """Scores of a read-out that does not stream (a backend's greedy generation in calls)."""
        raise NotImplementedError(f"{type(self).__name__} scores every read-out in stream_scores")
