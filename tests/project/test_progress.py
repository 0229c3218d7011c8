"""No silent phase (issue #33): the generate read-out ticks its bar per prompt, inside the judge
call, and a local optimizer's paraphrasing shows samples done/total and its decoding step.

The bars are real tqdm bars on stderr, drawn at every update (mininterval=0) so the test sees
each state a user's terminal would show over minutes.
"""

from __future__ import annotations

import re

import pytest
from helpers.compose import compose
from tqdm import tqdm

from harness.judges.generate import AnswerTicker
from harness.judging import model_judge
from harness.records import PairRequest
from harness.runtime.context import RunContext
from harness.zepo.sampling import sample_tokens

pytestmark = pytest.mark.usefixtures("one_thread")


def counts(err: str, total: int) -> list[int]:
    """Every `done/total` a bar drew, in order."""
    return [int(n) for n in re.findall(rf"(\d+)/{total} \[", err)]


def per_prompt(err: str, total: int) -> bool:
    """Whether the bar showed every count from 0 to total (not 0, then total at the end)."""
    return set(range(total + 1)) <= set(counts(err, total))


def _bar(total: int) -> tqdm:
    return tqdm(total=total, desc="judging", unit="pair", mininterval=0, miniters=1)


class _OldHF:
    """The judge as before this change: score_pairs takes no bar, so the cache ticks per call."""

    def __init__(self, inner) -> None:
        self.inner, self.identity = inner, inner.identity

    def score_pairs(self, requests):
        return self.inner.score_pairs(requests)


def test_generate_readout_ticks_per_prompt(tiny_llama, tmp_path, capsys):
    """The official read-out (readout=generate) through the run's wrappers (PreemptibleJudge over
    CachedJudge, cache.chunk=16: all 4 requests in one call): the bar counts 0, 1, 2, 3, 4 and
    shows the decoding step; the old judge (negative control) drew 0 and then 4."""
    cfg = compose(
        [
            "experiment=judge",
            "model=tiny_llama",
            f"model.path={tiny_llama}",
            "backend.device=cpu",
            "model.readout=generate",
            "model.max_new_tokens=3",
            "backend.generate_batch_size=1",
            f"cache.path={tmp_path / 'requests.sqlite'}",
        ]
    )
    judge = RunContext(cfg, tmp_path / "run").judge
    reqs = [PairRequest("d", f"a{i}", "b", f"Summary {i}: " + "word " * (3 + i)) for i in range(4)]
    with _bar(4) as bar:
        scores = judge.score_pairs(reqs, progress=bar)
    err = capsys.readouterr().err
    assert len(scores) == 4 and per_prompt(err, 4), counts(err, 4)
    assert "step 3/3" in err and counts(err, 4)[-1] == 4

    from harness.judges.cache import CachedJudge, ScoreCache
    from harness.judges.wrappers import PreemptibleJudge

    inner = model_judge(judge)  # the HFJudge under PreemptibleJudge and CachedJudge
    old = PreemptibleJudge(CachedJudge(_OldHF(inner), ScoreCache(tmp_path / "old.sqlite"), chunk=16), 16)
    with _bar(4) as bar:
        old.score_pairs(reqs, progress=bar)
    err = capsys.readouterr().err
    assert not per_prompt(err, 4) and set(counts(err, 4)) == {0, 4}


def test_answer_ticker_settles_rows_inside_a_batch():
    """Within one generate batch a row ticks at its first trigger (or stop) token, not when the
    batch ends; rows with no answer within the budget tick at the end."""
    import torch

    got: list[int] = []

    class Tally:
        def update(self, n: int = 1) -> None:
            got.append(n)

    t = AnswerTicker(4, {7, 9}, Tally(), max_new_tokens=3)
    t.put(torch.zeros(4, 5, dtype=torch.long))  # the prompt
    t.put(torch.tensor([1, 7, 2, 3]))  # row 1 answers
    t.put(torch.tensor([9, 9, 7, 3]))  # rows 0 and 2 answer; row 1 is already settled
    t.end()  # row 3 never answered
    assert got == [1, 2, 1] and not t.open


def test_local_sampling_ticks_each_sample_as_it_stops(tiny_judge, capsys):
    """A local optimizer's samples (harness.zepo.sampling): the bar counts a sample when it
    stops, while the others go on, and shows the step; one that runs out of tokens counts at
    the end."""
    model, prompt = tiny_judge.model, tiny_judge.encode([PairRequest("d", "a", "b", "Rewrite this.")])[0]
    free = sample_tokens(model, prompt, [1, 2], max_new_tokens=8, temperature=0.9, top_p=1.0, stop_ids=set())
    k = next(k for k in range(1, 8) if free[1][k] not in free[0] and free[1][k] not in free[1][:k])
    with tqdm(total=2, desc="paraphrasing", unit="sample", mininterval=0, miniters=1) as bar:
        rows = sample_tokens(
            model,
            prompt,
            [1, 2],
            max_new_tokens=8,
            temperature=0.9,
            top_p=1.0,
            stop_ids={free[1][k]},
            progress=bar,
        )
    err = capsys.readouterr().err
    assert rows == [free[0], free[1][:k]]
    states = re.findall(r"(\d)/2 \[[^\]]*step (\d)/8\]", err)
    assert ("1", str(k + 1)) in states and ("0", str(k)) in states  # counted at its stop step
    assert ("1", "8") in states and counts(err, 2)[-1] == 2  # the other ran on to the end


def test_paraphraser_opens_a_bar_unless_progress_is_off(tiny_judge, capsys):
    """The shipped paraphraser's own bar (samples done/total, rate, step) around a call that
    generates; `show_progress(optimizer, False)` (the run's progress=false) turns it off."""
    from harness.zepo.optimizers import LocalOptimizer, show_progress

    opt = LocalOptimizer(
        "tiny-llama", model=tiny_judge.model, tokenizer=tiny_judge.tokenizer, device="cpu", max_new_tokens=4
    )
    msgs = [{"role": "user", "content": "Rewrite: be brief."}]
    assert len(opt.generate(msgs, 0, [0, 1, 2])) == 3
    err = capsys.readouterr().err
    assert "paraphrasing (tiny-llama)" in err and re.search(
        r"3/3 \[[^\]]*(sample/s|s/sample), step 4/4\]", err
    )
    show_progress(opt, False)
    opt.generate(msgs, 1, [0])
    assert "paraphrasing" not in capsys.readouterr().err


def test_heartbeat_redraws_a_bar_nothing_updates(capsys):
    """A long forward updates nothing: the heartbeat redraws the bar meanwhile (elapsed time
    moving); without it (negative control) the bar draws once until the block ends."""
    import time

    from harness.progress import heartbeat

    for beat, least, most in ((True, 5, None), (False, 2, 2)):  # 2: drawn when opened and when closed
        with tqdm(total=1, desc="judging") as bar:
            if beat:
                with heartbeat(bar, every=0.05):
                    time.sleep(0.4)
            else:
                time.sleep(0.4)
        draws = len(re.findall(r"0/1 \[", capsys.readouterr().err))
        assert draws >= least and (most is None or draws <= most), (beat, draws)


def test_generate_calls_hold_generate_batch_size_prompts_and_forwards_batch_size(tiny_llama, tmp_path):
    """The shipped backend=hf: `generate_batch_size` (8) sets the prompts of each `generate` call of the
    official read-out, `batch_size` (32) the rows of the next-token read-out's forwards. Counted on
    the model's own `generate` for 10 prompts: calls of 8 and 2 (one call of 10 when the read-out
    took batch_size: the negative control, run by hand)."""
    from harness.judges.settings import HFSettings

    cfg = compose(
        [
            "experiment=judge",
            "model=tiny_llama",
            f"model.path={tiny_llama}",
            "backend.device=cpu",
            "model.readout=generate",
            "model.max_new_tokens=2",
            f"cache.path={tmp_path / 'r.sqlite'}",
        ]
    )
    shipped = (HFSettings.batch_size, HFSettings.generate_batch_size)
    assert (cfg.backend.batch_size, cfg.backend.generate_batch_size) == shipped == (32, 8)
    judge = model_judge(RunContext(cfg, tmp_path / "run").judge)
    assert (judge.batch_size, judge.generate_batch_size) == (32, 8)  # what the built judge holds
    reqs = [PairRequest("d", f"a{i}", "b", f"Summary {i}: " + "word " * (3 + i)) for i in range(10)]
    model = judge.model
    sizes: list[int] = []
    generate = model.generate

    def counted(*args, **kwargs):
        sizes.append(len(kwargs["input_ids"]))
        return generate(*args, **kwargs)

    model.generate = counted
    try:
        judge.score_pairs(reqs)
    finally:
        del model.generate
    assert sizes == [8, 2]
