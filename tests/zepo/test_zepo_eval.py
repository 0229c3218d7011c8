"""A ZEPO run's final evaluation judges the initial and the best instruction in ONE judge call
(harness.zepo.run.evaluate -> harness.judging.judge_instructions), search and evaluation documents
together, with what the previous path gave: one `judge_documents` call per instruction.

The reference is that previous path, run on the real tiny Llama judge from a copy of the request
cache taken when the search ended (the state the evaluation started from), so both judge the
held-out pairs afresh and read the search documents' pairs from the same cache. The run is the
shipped `experiment=zepo` with test_zepo's loopback optimizer, tiny sizes and
`heldout_spearman=false` (as the paper configs ship it: the evaluation is the only judging of the
held-out documents) and `objective=fairness_prob` (the tiny judge answers B to every pair, so no
paraphrase beats the initial instruction on the argmax rate). Kill/resume of whole runs: tests/zepo/test_zepo_kill.py and test_zepo.py.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from helpers.compose import compose
from helpers.results import assert_close
from helpers.scripted import CallLog, e2e_overrides, scripted_completion

from harness.judges.cache import CachedJudge, ScoreCache
from harness.judging import judge_documents, load_judgments, model_judge
from harness.metrics import summarize
from harness.metrics.bootstrap import NO_INTERVAL
from harness.metrics.interval import METHOD


class CallSpy:
    """Records every call reaching the run's judge (a spy over the real wrapped judge): its
    requests and the model's tokens_processed and prompts during the call."""

    def __init__(self, judge):
        self.judge, self.identity, self.log = judge, judge.identity, []

    @property
    def calls(self):
        return self.judge.calls

    def score_pairs(self, requests, progress=None):
        model = model_judge(self.judge)
        before = (model.tokens_processed, model.prompts)
        out = self.judge.score_pairs(requests, progress=progress)
        self.log.append(
            {
                "requests": list(requests),
                "tokens": model.tokens_processed - before[0],
                "prompts": model.prompts - before[1],
            }
        )
        return out


def _run(tmp, url, data, *extra):
    """The shipped zepo experiment through prepare/run_zepo, the judge under a CallSpy; the request
    cache copied when the last epoch is recorded (before the evaluation)."""
    from harness.experiments import zepo as zexp
    from harness.runtime.context import RunContext
    from harness.zepo.run import run_zepo

    cfg = compose(
        e2e_overrides(
            tmp, url, data, "experiment.heldout_spearman=false", "experiment.objective=fairness_prob", *extra
        )
    )
    parts = zexp.prepare(RunContext(cfg, tmp / "run"))
    spy = parts["judge"] = CallSpy(parts["judge"])
    cache, snapshot = tmp / "cache" / "requests.sqlite", tmp / "before_eval.sqlite"

    def snap(epoch):
        if epoch == cfg.experiment.epochs - 1:
            with sqlite3.connect(cache) as src, sqlite3.connect(snapshot) as dst:
                src.backup(dst)

    res = run_zepo(**parts, out_dir=tmp / "run", after_epoch=snap)
    return res, spy, parts, snapshot, cfg.experiment.epochs


def _previous_path(parts, snapshot, texts):
    """The evaluation as it was: one judge_documents call per instruction, from the cache the
    evaluation started from; (judgments and content-free P(A) per text, model calls, tokens)."""
    model = model_judge(parts["judge"])
    log = CallLog(model)
    judge = CachedJudge(log, ScoreCache(snapshot), chunk=16)
    evaluated = {d.id for d in parts["eval_docs"]}
    judged = [*(d for d in parts["search_docs"] if d.id not in evaluated), *parts["eval_docs"]]
    before = model.tokens_processed
    out = {
        t: judge_documents(
            judge,
            judged,
            aspect=parts["aspect"],
            instruction=t,
            family=parts["family"],
            max_candidates=parts["settings"].max_candidates,
            progress=False,
        )
        for t in texts
    }
    return out, log.sizes, model.tokens_processed - before


@pytest.fixture(scope="module")
def improved(tmp_path_factory, shared_data, tiny_llama):
    from helpers.servers import OpenAIServer

    tmp = tmp_path_factory.mktemp("zepo_eval")
    with OpenAIServer(script=scripted_completion) as srv:
        # batch_size 2: the judge groups documents until a group ends 4 batches' worth of prompts
        # (harness.judges.prefix GROUP_PROMPTS), so each of these 12-prompt documents is its own
        # group, as SummEval's 480-prompt documents are at the shipped 32 (4 x 32 = 128 < 480).
        return tmp, *_run(tmp, srv.url, shared_data, "backend.batch_size=2")


def test_initial_and_best_are_evaluated_in_one_call_as_the_separate_calls_did(improved):
    tmp, res, spy, parts, snapshot, epochs = improved
    out = tmp / "run"
    initial, best = res["initial"]["instruction"], res["best"]["instruction"]
    assert res["improved"] and initial != best  # two instructions to share the call
    # ONE call for the evaluation, after one per epoch, holding both instructions on both sets.
    assert len(spy.log) == epochs + 1
    ev = spy.log[-1]["requests"]
    n_pairs = res["initial"]["n_judgments"]
    assert len(ev) == 2 * (n_pairs + 1) and sum(initial in r.prompt for r in ev) == n_pairs + 1
    assert {r.doc_id for r in ev} >= set(res["search_doc_ids"]) | set(res["eval_doc_ids"])

    ref, sizes, ref_tokens = _previous_path(parts, snapshot, [initial, best])
    # Negative control: the previous path reaches the model once per instruction; the run, once.
    held_out = set(res["eval_doc_ids"]) - set(res["search_doc_ids"])
    held_pairs = sum(r.doc_id in held_out for r in ev) // 2  # search pairs and content-free: cached
    assert sizes == [held_pairs, held_pairs]
    assert spy.log[-1]["prompts"] == 2 * held_pairs
    # Each held-out pair's content computed once for both instructions, only the instruction and
    # what follows it twice (measured here: 2,005 tokens against 2,792; 2,501 when the cache still
    # handed the judge 16 requests per call).
    assert 0 < spy.log[-1]["tokens"] < 0.95 * ref_tokens
    for label, text in (("initial", initial), ("best", best)):
        judgments, p_cf = ref[text]
        got, got_cf = load_judgments(out / f"eval_{label}" / "judgments.jsonl")
        assert [(j.doc_id, j.a_id, j.b_id, j.flags, j.p_a > 0.5) for j in got] == [
            (j.doc_id, j.a_id, j.b_id, j.flags, j.p_a > 0.5) for j in judgments
        ]
        assert_close(
            [[j.p_a, j.token_logprobs] for j in got], [[j.p_a, j.token_logprobs] for j in judgments], label
        )
        assert got_cf == p_cf
        held = [j for j in judgments if j.doc_id not in res["search_doc_ids"]]
        got_held, _ = load_judgments(out / f"eval_{label}" / "heldout" / "judgments.jsonl")
        assert [(j.doc_id, j.a_id, j.b_id) for j in got_held] == [(j.doc_id, j.a_id, j.b_id) for j in held]
        shuffles, seed = res["settings"]["shuffles"], res["settings"]["seed"]
        assert_close(
            res[label]["metrics_leaky"], summarize(judgments, p_cf=p_cf, shuffles=shuffles, seed=seed), label
        )
        assert_close(
            res[label]["metrics_heldout"], summarize(held, p_cf=p_cf, shuffles=shuffles, seed=seed), label
        )
        assert res[label]["metrics"] == res[label]["metrics_heldout"]
    # The two instructions judged differently (else sharing or mixing them up would go unseen).
    assert [j.p_a for j in ref[initial][0]] != [j.p_a for j in ref[best][0]]
    assert json.loads((out / "results.json").read_text())["judge_calls"] == len(
        ScoreCache(tmp / "cache" / "requests.sqlite")
    )


def test_shipped_zepo_results_carry_intervals_and_the_paired_heldout_gain(improved):
    """The shipped config's metrics.bootstrap: every estimated metric of both sets has an interval
    entry and, beside it, its documents and method; the paired best - initial held-out gain is in
    results.json and in summary.md as one sentence: on this 1 held-out document "too few documents
    to tell", never "distinguishable" (nor on the leaky ones: 2 documents)."""
    tmp, res, *_ = improved
    saved = json.loads((tmp / "run" / "results.json").read_text())
    for label in ("initial", "best"):
        meta = saved[label]["interval"]["heldout"]
        assert meta["rounds"] == 1000 and meta["unit"] == "document" and meta["level"] == 0.95
        for kind in ("leaky", "heldout"):
            metrics, intervals = saved[label][f"metrics_{kind}"], saved[label][f"intervals_{kind}"]
            assert set(intervals) == set(metrics) == set(saved[label][f"interval_basis_{kind}"])
            assert set(intervals["none"]) == {k for k in metrics["none"] if k not in NO_INTERVAL}
        assert saved[label]["interval_basis_heldout"]["none"]["a_rate"]["note"] == "too few documents to tell"
    gain = saved["gains"]["heldout"]["none"]["spearman_pairs"]
    want = (
        saved["best"]["metrics_heldout"]["none"]["spearman_pairs"]
        - saved["initial"]["metrics_heldout"]["none"]["spearman_pairs"]
    )
    assert gain["diff"] == pytest.approx(want) and gain["interval"] is None
    assert gain["note"] == "too few documents to tell"
    leaky = saved["gains"]["leaky"]["none"]["a_rate"]
    assert leaky["n_documents"] == 2 and leaky["interval"] is None and leaky["method"] == METHOD
    table = (tmp / "run" / "summary.md").read_text()
    assert "- held-out Spearman (PairS) " in table and "(1 document: too few documents to tell)" in table
    assert "The held-out part (1 document) is too small to tell" in table
    assert ": distinguishable" not in table
    assert saved["gains"]["leaky"]["none"]["a_rate"]["sentence"].startswith("leaky a_rate ")


def test_best_equal_to_initial_is_judged_once_with_identical_outputs(tmp_path, shared_data, tiny_llama):
    """population 1 x 1 epoch: the best is the initial. The evaluation sends its requests once
    (not twice, as two jobs of one text would), and eval_best/ equals eval_initial/ file for file."""
    from helpers.servers import OpenAIServer

    with OpenAIServer(script=scripted_completion) as srv:
        res, spy, parts, snapshot, _ = _run(
            tmp_path, srv.url, shared_data, "experiment.population=1", "experiment.epochs=1"
        )
    assert not res["improved"] and res["initial"]["instruction"] == res["best"]["instruction"]
    assert len(spy.log) == 2 and len(spy.log[-1]["requests"]) == res["initial"]["n_judgments"] + 1
    out = tmp_path / "run"
    for name in ("judgments.jsonl", "set.json", "heldout/judgments.jsonl", "heldout/set.json"):
        assert (out / "eval_best" / name).read_bytes() == (out / "eval_initial" / name).read_bytes(), name
    keys = (
        "instruction",
        "p_content_free",
        "n_judgments",
        "metrics",
        "metrics_leaky",
        "metrics_heldout",
        "n_heldout_docs",
    )
    assert {k: res["best"][k] for k in keys} == {k: res["initial"][k] for k in keys}
    ref, sizes, _ = _previous_path(parts, snapshot, [res["initial"]["instruction"]])
    got, _ = load_judgments(out / "eval_best" / "judgments.jsonl")
    assert_close([j.p_a for j in got], [j.p_a for j in ref[res["initial"]["instruction"]][0]], "eval_best")


class Killed(Exception):
    pass


class KillOnCall:
    """Raises Killed (a stand-in for a kill) on the model call numbered `at` once armed; the calls
    before it reach the real judge, and the cache commits them."""

    def __init__(self, judge, at):
        self.judge, self.identity, self.at, self.armed, self.seen = judge, judge.identity, at, False, 0

    def score_pairs(self, requests):
        if self.armed:
            self.seen += 1
            if self.seen == self.at:
                raise Killed
        return self.judge.score_pairs(requests)


def test_run_interrupted_inside_the_evaluation_resumes_to_the_unbroken_outputs(
    tmp_path, shared_data, tiny_llama
):
    """cache.chunk=4 cuts the evaluation's 12 held-out prompts into 3 model calls; a run stopped at
    the second (one chunk committed) and rerun into its directory ends with the unbroken run's
    files byte for byte, and judges no prompt twice."""
    from helpers.results import results_only
    from helpers.servers import OpenAIServer

    from harness.experiments import zepo as zexp
    from harness.runtime.context import RunContext
    from harness.zepo.run import run_zepo

    def start(tmp, kill_at=None):
        cfg = compose(
            e2e_overrides(
                tmp,
                srv.url,
                shared_data,
                "experiment.heldout_spearman=false",
                "experiment.objective=fairness_prob",
                "cache.chunk=4",
            )
        )
        parts = zexp.prepare(RunContext(cfg, tmp / "run"))
        cached = parts["judge"].judge
        killer = cached.judge = KillOnCall(cached.judge, kill_at or 0)

        def arm(epoch):
            killer.armed = kill_at is not None and epoch == cfg.experiment.epochs - 1

        return parts, cached, arm

    with OpenAIServer(script=scripted_completion) as srv:
        ref, killed = tmp_path / "unbroken", tmp_path / "killed"
        parts, _, arm = start(ref)
        want = run_zepo(**parts, out_dir=ref / "run", after_epoch=arm)
        parts, cached, arm = start(killed, kill_at=2)
        with pytest.raises(Killed):
            run_zepo(**parts, out_dir=killed / "run", after_epoch=arm)
        calls_1 = cached.calls
        assert (
            not (killed / "run" / "results.json").exists()
            and (killed / "run" / "best_instruction.txt").exists()
        )
        parts, cached, arm = start(killed)
        got = run_zepo(**parts, out_dir=killed / "run", after_epoch=arm)
        calls_2 = cached.calls
    assert want["improved"]
    # Exact (NaN included); optimizer_rejections counts this process's, as judge_calls its calls.
    same = [{k: v for k, v in results_only(r).items() if k != "optimizer_rejections"} for r in (got, want)]
    assert json.dumps(same[0], sort_keys=True) == json.dumps(same[1], sort_keys=True)
    names = ["history.jsonl", "summary.md", "best_instruction.txt", "state.json"] + [
        f"eval_{label}/{f}"
        for label in ("initial", "best")
        for f in ("judgments.jsonl", "heldout/judgments.jsonl")
    ]
    for name in names:
        assert (killed / "run" / name).read_bytes() == (ref / "run" / name).read_bytes(), name
    n = len(ScoreCache(ref / "cache" / "requests.sqlite"))
    assert calls_2 == 12 - 4 and calls_1 + calls_2 == n == len(
        ScoreCache(killed / "cache" / "requests.sqlite")
    )
