"""The transformers judge: one forward pass, exact answer-token read-out, batching invariance."""

from __future__ import annotations

import math

import pytest
import torch

from harness.errors import JudgeInputError
from harness.judges.answers import renormalise, resolve_answer_tokens
from harness.judges.cache import CachedJudge, ScoreCache
from harness.judges.hf import HFJudge
from harness.records import PairRequest


def _requests(n: int = 7) -> list[PairRequest]:
    # Mixed lengths so batches need real left padding.
    return [
        PairRequest(
            "d",
            f"a{k}",
            f"b{k}",
            "Source text: " + "the summary is good . " * (1 + 3 * k) + f"Question: which one {k}? Answer: ",
        )
        for k in range(n)
    ]


def _plain_p_a(judge: HFJudge, req: PairRequest) -> float:
    """Reference: one unpadded full forward pass, softmax over the whole last-position row."""
    ids = judge.encode([req])[0]
    with torch.inference_mode():
        logits = judge.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    logp = torch.log_softmax(logits, -1)
    lp = {lab: torch.logsumexp(logp[[i for _, i in judge.answers.variants[lab]]], 0).item() for lab in "AB"}
    return math.exp(lp["A"]) / (math.exp(lp["A"]) + math.exp(lp["B"]))


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_mistral"])
def test_batched_equals_unbatched_plain_forward(arch, request):
    path = request.getfixturevalue(arch)
    judge = HFJudge(path, batch_size=3, device="cpu", dtype="float32")
    reqs = _requests()
    batched = judge.score_pairs(reqs)
    for r, s in zip(reqs, batched):
        assert abs(s.p_a - _plain_p_a(judge, r)) < 1e-4
    # Results come back in request order whatever the length sorting did.
    single = HFJudge(path, batch_size=1, device="cpu", model=judge.model, tokenizer=judge.tokenizer)
    assert [round(s.p_a, 5) for s in single.score_pairs(reqs)] == [round(s.p_a, 5) for s in batched]


@pytest.mark.slow
def test_smollm2_batched_equals_plain(smollm2_judge, shared_data):
    from harness.data import load_task
    from harness.judging import build_requests
    from harness.prompts import default_instruction

    docs = load_task("summeval", data_dir=shared_data, limit=86)[
        85:
    ]  # a short article (162 words; doc 0: 364)
    reqs, _ = build_requests(
        docs,
        default_instruction("coherence", "summarization"),
        "summarization",
        "coherence",
        max_candidates=3,
    )
    scores = smollm2_judge.score_pairs(reqs[:4])
    for r, s in zip(reqs[:4], scores):
        assert abs(s.p_a - _plain_p_a(smollm2_judge, r)) < 1e-4
    # SmolLM2 answers 'A' as token 49 and ' A' as 330 (ecosystem.md).
    assert smollm2_judge.answers.variants["A"] == (("A", 49), (" A", 330))


def test_answer_tokens_and_renormalise(tiny_judge):
    ans = tiny_judge.answers
    assert [t for t, _ in ans.variants["A"]][0] == "A"
    assert len(set(ans.all_ids)) == len(ans.all_ids)
    s = ans.score([math.log(0.2), math.log(0.1), math.log(0.05), math.log(0.05)])
    assert s.p_a == pytest.approx(0.3 / 0.4)
    assert renormalise(-math.inf, [-math.inf]) == 0.5


def test_label_that_is_not_one_token_is_refused(tiny_judge):
    with pytest.raises(JudgeInputError, match="not a single token"):
        resolve_answer_tokens(tiny_judge.tokenizer, ("Candidate-Alpha-Zulu", "B"))


def test_prompt_longer_than_context_is_refused(tiny_llama):
    judge = HFJudge(tiny_llama, device="cpu", max_length=32)
    with pytest.raises(JudgeInputError, match="longer than the model's context"):
        judge.score_pairs([PairRequest("doc7", "x", "y", "word " * 100)])


def test_cache_serves_repeats_and_separates_identities(tiny_judge, tmp_path):
    cache = ScoreCache(tmp_path / "c.sqlite")
    cj = CachedJudge(tiny_judge, cache, chunk=2)
    reqs = _requests(5)
    first = cj.score_pairs(reqs + reqs[:2])  # duplicates inside one batch are scored once
    assert cj.calls == 5
    again = CachedJudge(tiny_judge, ScoreCache(tmp_path / "c.sqlite")).score_pairs(reqs)
    assert [s.p_a for s in again] == [s.p_a for s in first[:5]]

    class Other:  # same prompts, another judge identity: never served the first judge's answers
        identity = tiny_judge.identity + "|other"

        def score_pairs(self, requests):
            return tiny_judge.score_pairs(requests)

    other = CachedJudge(Other(), cache)
    other.score_pairs(reqs)
    assert other.calls == 5


def test_innermost_reaches_the_model_judge_under_every_wrapper(tiny_judge, tmp_path):
    """The jitter route (uncached re-judging) and the local optimizer (reusing loaded weights)
    need the judge under the cache and the preemption wrapper, however many layers there are."""
    from harness.judges.base import innermost
    from harness.judges.cache import CachedJudge, ScoreCache
    from harness.judges.wrappers import PreemptibleJudge
    from harness.zepo.optimizers import loaded_judge

    wrapped = PreemptibleJudge(CachedJudge(tiny_judge, ScoreCache(tmp_path / "c.sqlite"), 4), 4)
    assert innermost(wrapped) is tiny_judge and innermost(tiny_judge) is tiny_judge
    assert loaded_judge(wrapped) is tiny_judge


def test_only_a_streaming_judge_is_streamed(tiny_judge, tiny_llama, tmp_path):
    """The wrappers stream a call only through a StreamingJudge whose `streaming` is on: the
    transformers judge with the next-token read-out, and the cache over it; not the same judge
    with the generate read-out, nor a judge that says `streaming` without `stream_scores`."""
    from harness.judges.base import StreamingJudge, streams

    class SaysSo:  # the negative control: the flag alone, no stream
        identity, streaming = "says-so", True

        def score_pairs(self, requests):
            return []

    cached = CachedJudge(tiny_judge, ScoreCache(tmp_path / "c.sqlite"), 4)
    assert isinstance(tiny_judge, StreamingJudge) and streams(tiny_judge) and streams(cached)
    assert not streams(SaysSo()) and not streams(CachedJudge(SaysSo(), ScoreCache(tmp_path / "d.sqlite"), 4))
    generate = HFJudge(tiny_llama, model=tiny_judge.model, tokenizer=tiny_judge.tokenizer, readout="generate")
    assert not streams(generate) and not streams(CachedJudge(generate, ScoreCache(tmp_path / "e.sqlite"), 4))


def test_flagged_scores_are_returned_but_never_cached(tmp_path):
    """An unreadable answer (flags) comes back as NaN and is asked again next time, not served."""
    import math

    from harness.records import PairScore

    class Flaky:
        identity = "flaky-judge"

        def __init__(self):
            self.seen = 0

        def score_pairs(self, requests):
            self.seen += len(requests)
            if self.seen <= len(requests):  # the first batch is unreadable
                return [PairScore({}, math.nan, ("unreadable",)) for _ in requests]
            return [PairScore({"A:A": math.log(0.8), "B:B": math.log(0.2)}, 0.8) for _ in requests]

    inner = Flaky()
    judge = CachedJudge(inner, ScoreCache(tmp_path / "c.sqlite"), chunk=8)
    reqs = [PairRequest("d", "a", "b", "p1"), PairRequest("d", "b", "a", "p2")]
    first = judge.score_pairs(reqs)
    assert all(math.isnan(s.p_a) and s.flags == ("unreadable",) for s in first)
    assert len(judge.cache) == 0
    second = judge.score_pairs(reqs)
    assert [s.p_a for s in second] == [0.8, 0.8] and inner.seen == 4 and len(judge.cache) == 2
    assert judge.score_pairs(reqs) == second and inner.seen == 4  # now served from the cache


def test_greedy_no_answer_pairs_are_cached_with_their_flag(tmp_path, tiny_llama):
    """Issue 31: deterministic `no_answer` pairs of the official generate read-out were never cached,
    so every rerun generated them again. A shipped judge run on tiny_llama (random weights: it
    rarely writes A or B), twice on one cache: the second makes 0 model calls and still reports the
    same pairs as no_answer (P(A) 0.5, flagged), never as an answer. Negative control (the old
    cache, without the no_answer rows): the same requests are generated again."""
    import json
    import sqlite3

    from helpers.cli import run_in_process

    from harness.judging import load_judgments

    args = [
        "experiment=judge",
        "model=tiny_llama",
        "model.readout=generate",
        "model.max_new_tokens=4",
        "task=summeval",
        "task.docs=1",
        "task.max_candidates=3",
        "experiment.shuffles=2",
        "wandb.mode=disabled",
        "progress=false",
    ]

    def run(name):
        r = run_in_process([*args, f"hydra.run.dir={tmp_path / name}"], tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        judged = load_judgments(tmp_path / name / "judgments.jsonl")[0]
        results = json.loads((tmp_path / name / "results.json").read_text())
        return results["judge_calls"], [j.p_a if "no_answer" not in j.flags else "no_answer" for j in judged]

    calls, first = run("a")
    silent = first.count("no_answer")
    assert calls == 7 and 0 < silent  # 6 ordered pairs + the content-free prompt; this model writes no A/B
    again, second = run("b")
    assert again == 0 and second == first  # served, flags and all
    cache = tmp_path / "cache" / "requests.sqlite"
    with sqlite3.connect(cache) as db:
        stored = db.execute("SELECT COUNT(*), MIN(p_a), MAX(p_a), MIN(flags) FROM flagged").fetchone()
        assert stored[0] >= silent and stored[1:] == (0.5, 0.5, '["no_answer"]')
        keys = [k for (k,) in db.execute("SELECT key FROM flagged")]
        db.execute("DELETE FROM flagged")
    # The old cache (no flagged rows): those keys are misses again, every other pair still a hit.
    plain = [k for (k,) in sqlite3.connect(cache).execute("SELECT key FROM scores")]
    held = ScoreCache(cache).get_many([*keys, *plain])
    assert not set(keys) & set(held) and len(held) == 7 - stored[0]


def test_only_no_answer_flags_are_cached():
    from harness.judges.cache import cacheable
    from harness.records import PairScore

    assert cacheable(PairScore({}, 0.5, ("no_answer",))) and cacheable(PairScore({"A:A": -0.1}, 0.9))
    assert not cacheable(PairScore({}, math.nan, ("unreadable",)))
    assert not cacheable(PairScore({}, 0.3, ("no_answer",)))  # not the official 0.5: not a no_answer score
