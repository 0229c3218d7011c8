"""What a judge run holds per judgment grows with its prompts' tokens at a few bytes each, not at a
list of Python ints' 36: the peak traced allocation (tracemalloc) of `run_judge` (the judging
path through the request cache and the preemption wrapper, then the work report, judgments.jsonl
and the metrics) at two sizes, per token of the added prompts. The judge is the tiny Llama's real
tokenizer and chat template with its forwards replaced by the bench's seeded answers
(harness.bench.phases.stub_steps: the memory measured is the harness's, not the model's), and its
stream window cut to 64 requests and its tokenizer calls to 16 prompts, so what it holds per window
and per call stays the same at both sizes, as it does in a 24,000-judgment run (4,096 and 1,024);
what grows is what the whole run holds.
`harness-bench scale --modes stub` measures the same path's peak RSS at 24,000 and 100,000
judgments (docs/benchmarks.md)."""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest

from harness.bench.phases import stub_steps
from harness.experiments.judge import run_judge
from harness.judges import chat
from harness.judges.cache import CachedJudge, ScoreCache
from harness.judges.chat import ChatPrompts
from harness.judges.hf import HFJudge
from harness.judges.wrappers import PreemptibleJudge
from harness.metrics.settings import MetricsSettings
from harness.records import Candidate, Document

PER_TOKEN = 16
"""Bytes per prompt token the run may hold at its peak: its prompts' text (about 4 bytes a token),
the kept int32 ids (4) and the trie minimum's bytes of them (4); measured 6.4 (2026-12-06). The
ids as lists of ints (the control) measured 26."""


def documents(n: int, seed: int = 0) -> list[Document]:
    """`n` documents of about 300 words, 6 candidates of about 40 words each (30 ordered pairs)."""
    rng = random.Random(seed)
    words = [f"w{k}" for k in range(3000)]

    def text(k: int) -> str:
        return " ".join(rng.choice(words) for _ in range(k))

    return [
        Document(
            f"d{d}",
            text(300),
            tuple(Candidate(f"c{c}", text(40), {"coherence": float(rng.randint(1, 5))}) for c in range(6)),
        )
        for d in range(n)
    ]


def judged(judge: HFJudge, n: int, tmp_path) -> None:
    """`run_judge` of `n` documents through the request cache and the preemption wrapper."""
    judge.forget_ids()
    run_judge(
        PreemptibleJudge(CachedJudge(judge, ScoreCache(tmp_path / f"cache-{n}.sqlite"))),
        documents(n, seed=n),
        task="synthetic",
        aspect="coherence",
        instruction="Which summary is more coherent?",
        family="summarization",
        out_dir=tmp_path / f"run-{n}",
        shuffles=2,
        progress=False,
        metrics=MetricsSettings(bootstrap=0),  # no intervals: their cost is not this test's
    )


def peak_per_token(judge: HFJudge, tmp_path, sizes=(2, 8)) -> float:
    """(peak at the larger size - peak at the smaller) / (prompt tokens added), after an untraced
    warm-up run of one document (the tokenizer, the metrics and what they import loaded first)."""
    judged(judge, 1, tmp_path)
    peaks, tokens = [], []
    for n in sizes:
        gc.collect()
        tracemalloc.start()
        try:
            judged(judge, n, tmp_path)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        tokens.append(judge._kept_ids().tokens)
    return (peaks[1] - peaks[0]) / (tokens[1] - tokens[0])


@pytest.fixture
def stub_judge(tiny_llama, monkeypatch):
    monkeypatch.setattr(HFJudge, "_logprob_steps", stub_steps)
    monkeypatch.setattr(chat, "ENCODE_CHUNK", 16)
    judge = HFJudge(tiny_llama, batch_size=4, device="cpu")
    judge.stream_window = 64
    return judge


def test_a_run_holds_a_few_bytes_per_prompt_token(stub_judge, tmp_path, monkeypatch):
    """Negative control: the work report's trie minimum over `encode`'s lists of ints (as before
    `token_rows`) holds every prompt's ids as lists at once, and the slope shows it."""
    slope = peak_per_token(stub_judge, tmp_path / "rows")
    assert slope < PER_TOKEN, f"{slope:.1f} bytes per prompt token at the run's peak"
    monkeypatch.delattr(ChatPrompts, "token_rows")
    lists = peak_per_token(stub_judge, tmp_path / "lists")
    assert lists > 1.25 * PER_TOKEN, f"control: {lists:.1f} bytes per prompt token"
