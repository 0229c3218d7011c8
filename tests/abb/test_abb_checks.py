"""A-BB verdicts (issue 19): one tolerance for bounds and verdicts, claim-aware checks, the sure
bound's assumption checked on every fresh neighbour, and abb.json's one-sentence summary.

Score vectors here are SCRIPTED (harness/abb/scenarios.py, or a full-range flip built inline): designed
ground truth, so each verdict can be predicted. Every check that exists to catch a failure is shown
catching one.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from harness import abb
from harness.abb import scenarios as sc

SCALES = [(0.0, 1.0), (1.0, 5.0), (1.0, 7.0), (1.0, 10.0), (0.0, 10.0), (0.0, 100.0)]
TAU_FRACTIONS = [0.03125, 0.0625, 0.1, 0.125]


def _flips(f, lo, hi, n, rng):
    """n one-item neighbours, each moving one score by the FULL range (lo <-> hi): ||v|| = sqrt(B) exactly."""
    out = np.repeat(f[None, :], n, axis=0)
    idx = rng.integers(f.size, size=n)
    out[np.arange(n), idx] = np.where(f[idx] == lo, hi, lo)
    return out


def _flip_run(lo, hi, frac, n_fresh=30):
    f = np.where(np.arange(30) % 2 == 0, hi, lo)
    rng = np.random.default_rng(0)
    return f, abb.run_abb(
        f,
        _flips(f, lo, hi, 40, rng),
        tau=frac * (hi - lo),
        rng=rng,
        mode="one_item",
        split=abb.split_delta(0.05, noise_fraction=0),
        scale=(lo, hi),
        fresh=_flips(f, lo, hi, n_fresh, rng),
        coords_allowed=1,
    )[0]


@pytest.mark.parametrize("scale", SCALES, ids=lambda s: f"{s[0]:g}-{s[1]:g}")
@pytest.mark.parametrize("frac", TAU_FRACTIONS)
def test_full_range_flip_is_confirmed_surely(scale, frac):
    """The certain cap holds with probability 1; a neighbour at exactly alpha sqrt(B) = tau, whose
    distance float rounding puts a few ulps above tau, is not a violation (same tolerance as the bounds)."""
    _, result = _flip_run(*scale, frac)
    v, g = result.verification, result.to_json()["guarantee"]
    assert g["certified_by"] == "certain_cap" and g["statement"].startswith("surely") and g["claimed"]
    assert v.violations == 0 and v.verdict == "confirmed" and v.tests == "sure" and v.assumption["held"]
    assert v.max_distance == pytest.approx(frac * (scale[1] - scale[0]), rel=1e-12)


def test_whole_set_cap_holds_by_construction_not_confirmed():
    """Issue 31 (A-BB review): whole-set neighbours may move every coordinate and B = d r^2, so the cap's
    sure check cannot fail for in-range scores: abb.json, the summary and the console say "holds by
    construction (scores in [0, 1])", not `confirmed`. Negative controls: out-of-range fresh scores
    are checked (and fail), and a one-item sure check (which can fail) still says `confirmed`."""
    from harness.abb.retained import flat_metrics
    from harness.abb.run import report

    rng = np.random.default_rng(0)
    f = rng.random(6)
    whole = lambda n: rng.random((n, 6))  # noqa: E731 - any in-range whole-set neighbour
    kw = dict(tau=0.125, split=abb.split_delta(0.05, noise_fraction=0), mode="whole_set", scale=(0.0, 1.0))
    result, _ = abb.run_abb(f, whole(10), rng=rng, fresh=whole(30), coords_allowed=6, **kw)
    v, bj = result.verification, result.to_json()
    assert result.params.B == 6 and result.params.alpha == pytest.approx(0.125 / math.sqrt(6))
    assert v.tests == "sure" and v.verdict == "by_construction" and v.violations == 0
    assert v.verdict_text == "holds by construction (scores in [0, 1])"
    assert bj["verification"]["verdict_text"] == v.verdict_text and "confirmed" not in bj["summary"]
    assert "says holds by construction (scores in [0, 1])" in bj["summary"]
    assert "change of units" in bj["summary"] and "exactly that of the raw scores" in bj["summary"]
    line = report({"metrics": flat_metrics(bj, {}, None)})
    assert "fresh check 0/30 > tau: holds by construction (scores in [0, 1]) (sure check)" in line
    # With noise (sigma > 0) the mechanism is more than a change of units, and the summary does not say it is.
    noisy, _ = abb.run_abb(
        f,
        whole(10),
        tau=0.125,
        split=abb.split_delta(0.05, noise_fraction=0.45),
        mode="whole_set",
        scale=(0.0, 1.0),
        rng=rng,
        fresh=whole(30),
        coords_allowed=6,
        alpha_fraction=0.5,
        sigma_mode="max",
    )
    assert noisy.params.sigma > 0 and "change of units" not in noisy.summary()
    assert noisy.verification.tests == "rate" and noisy.verification.verdict != "by_construction"
    # Out-of-range fresh scores (a broken scale): not by construction, the check runs and catches them.
    bad = abb.verify(f, f[None, :] + 2.0, result.params, rng, coords_allowed=6, scale=(0.0, 1.0))
    assert bad.verdict == "violated" and not bad.assumption["held"]
    # A one-item sure check can fail (a neighbour moving 2 coordinates), so its pass stays `confirmed`.
    one = _flip_run(0.0, 1.0, 0.125)[1].verification
    assert one.verdict == "confirmed" and one.verdict_text == "confirmed"


def test_the_flip_grid_has_rounding_above_tau():
    """What the tolerance is for: on 1-10 at tau_fraction 0.1 the full flip's distance is computed as
    0.9000000000000004 > tau = 0.9 with a strict comparison, which used to read 'refuted: 30/30'."""
    _, result = _flip_run(1.0, 10.0, 0.1)
    assert result.verification.max_distance > result.params.tau  # strictly, in floats
    assert not abb.bounds.exceeds(result.verification.max_distance, result.params.tau, 10.0)
    assert abb.bounds.exceeds(0.9 * (1 + 1e-9), 0.9, 10.0)  # a real excess still counts


def test_a_real_excess_refutes_the_sure_claim():
    """Negative controls of the sure check: alpha above the cap, and a neighbour that moves two
    coordinates (an uncached judge re-judging its untouched neighbour item), both refute it."""
    f, result = _flip_run(1.0, 10.0, 0.1)
    p = result.params
    rng = np.random.default_rng(1)
    fresh = _flips(f, 1.0, 10.0, 30, rng)
    over = abb.verify(f, fresh, sc.with_alpha(p, p.alpha * 1.001), rng, coords_allowed=1)
    assert over.verdict == "violated" and over.violations == 30
    two = np.repeat(f[None, :], 3, axis=0)
    two[0, [1, 3]] += 0.01  # one neighbour moves two coordinates a little (scores 1 -> 1.01: in the scale)
    moved = abb.verify(f, two, p, rng, coords_allowed=1)
    assert (
        moved.violations == 0 and moved.verdict == "violated"
    )  # no distance above tau, still a broken assumption
    assert moved.assumption["too_many_coords"] == 1 and not moved.assumption["held"]
    refuted = dataclasses.replace(result, verification=moved).to_json()["guarantee"]
    assert refuted["claimed"] is False and "assumption broke" in refuted["status"]


def test_the_assumption_is_checked_even_for_rate_claims():
    """A quantile-certified run (a rate claim) whose fresh neighbours move beyond sqrt(B) (scores out of
    the scale): violated, though the rate of distances above tau alone would not refute it."""
    judge = sc.JitterJudge(docs=10, per_doc=12, jitter=0.0, seed=2)
    rng = np.random.default_rng(0)
    tame = judge.one_item(300, rng)
    result, _ = abb.run_abb(
        judge.f,
        tame,
        tau=0.3,
        split=abb.split_delta(0.1, noise_fraction=0),
        mode="one_item",
        scale=(0.0, 1.0),
        rng=rng,
        fresh=judge.one_item(100, rng),
        coords_allowed=1,
    )
    p = result.params
    assert p.choice.winner.name == "quantile" and result.verification.verdict == "confirmed"
    out_of_scale = judge.one_item(100, rng)
    out_of_scale[0, 0] = judge.f[0] + 1.5  # a score outside [0, 1]: ||v|| > sqrt(B)
    check = abb.verify(judge.f, out_of_scale, p, rng, coords_allowed=1)
    assert check.tests == "rate" and check.assumption["beyond_radius"] == 1 and check.verdict == "violated"
    assert abb.verdict(check.violations, check.trials, check.delta_claimed, check.worst_case)[0] != "violated"


def test_context_claim_is_not_refuted_by_raw_rejudgments():
    """Jitter removed: the claim is about the judge's MEAN score. Raw re-judgments of a jittery judge
    exceed tau far more often than delta (the rate check WOULD say violated), yet that is a check of a
    different claim: the verdict is not_applicable and the run keeps its certificate."""
    judge = sc.JitterJudge(docs=10, per_doc=10, jitter=0.3, shift=0.0, seed=0)
    rng = np.random.default_rng(0)
    v = sc.sq_dist(judge.f, judge.one_item(30_000, rng))
    j = sc.sq_dist(judge.f, judge.jitter_matched(30_000, rng))
    ctx = sc.params(
        0.1,
        1.0,
        v,
        d=judge.d,
        delta=0.1,
        jitter_sq=j,
        jitter_coords=1,
        neighbour_coords=1,
        allowed=("markov",),
    )
    assert ctx.choice.claim == "context" and ctx.alpha > 0.1  # above the cap: the jitter was subtracted
    check = abb.verify(judge.f, judge.one_item(300, rng), ctx, rng, coords_allowed=1)
    assert abb.verdict(check.violations, check.trials, check.delta_claimed, check.worst_case)[0] == "violated"
    assert check.tests == "context" and check.verdict == "not_applicable" and check.assumption["held"]
    result = abb.AbbResult(ctx, "one_item", v.size, (0.0, 1.0), check)
    assert result.status() == (True, "certified by markov_best")
    assert "MEAN score" in result.summary() and "not_applicable" in result.summary()


def test_summary_says_what_was_proven_and_what_the_check_could_show():
    _, cap = _flip_run(1.0, 5.0, 0.125)
    s = cap.to_json()["summary"]
    assert s.startswith("proven without data by the certain cap") and "surely" in s
    assert "no rate of bias is estimated" in s and s.count(".") >= 1
    judge = sc.JitterJudge(docs=10, per_doc=12, jitter=0.0, seed=2)
    rng = np.random.default_rng(0)
    q, _ = abb.run_abb(
        judge.f,
        judge.one_item(300, rng),
        tau=0.3,
        split=abb.split_delta(0.1, noise_fraction=0),
        mode="one_item",
        scale=(0.0, 1.0),
        rng=rng,
        fresh=judge.one_item(100, rng),
    )
    s = q.summary()
    assert (
        s.startswith("proven from 300 estimation neighbours by the quantile bound") and "Clopper-Pearson" in s
    )
    plug, _ = abb.run_abb(
        judge.f,
        judge.one_item(50, rng),
        tau=0.3,
        split=abb.split_delta(0.1, noise_fraction=0, est_fraction=0),
        mode="one_item",
        scale=(0.0, 1.0),
        rng=rng,
        allowed=("plugin",),
    )
    s = plug.summary()
    assert s.startswith("nothing is proven: the plug-in is an estimate") and "no fresh check" in s


def _three_item_fresh_file(path):
    """The review's case: 40 one-item estimation rows, 30 FRESH neighbours that each flip 3 items of a
    1-10 score file by the full range (outside a one-item claim)."""
    rng = np.random.default_rng(0)
    items = [(f"q{q}", m) for q in range(10) for m in ("m1", "m2", "m3")]
    base = {it: (1.0 if k % 2 else 10.0) for k, it in enumerate(items)}
    rows = [{"item": q, "model": m, "score": s} for (q, m), s in base.items()]
    for j in range(40):
        q, m = items[rng.integers(len(items))]
        rows.append(
            {"item": q, "model": m, "score": 11.0 - base[(q, m)], "neighbour": f"e{j}", "split": "estimate"}
        )
    for j in range(30):
        for k in rng.choice(len(items), size=3, replace=False):
            q, m = items[k]
            rows.append(
                {"item": q, "model": m, "score": 11.0 - base[(q, m)], "neighbour": f"v{j}", "split": "verify"}
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_fresh_rows_outside_the_claims_edit_budget_are_refused_not_used_to_resize_it(tmp_path):
    """Issue 31 (A-BB review): fresh rows editing 3 items used to set B (81 -> 243), alpha (0.125 ->
    0.072) and the coordinates allowed to move, turning a 30/30 refutation into `confirmed`. B and
    alpha now come from the estimation rows and the config; the fresh rows outside that budget are
    refused in one line naming the file, the record and the field."""
    from helpers.compose import compose

    from harness.abb.scores import load_file_scores
    from harness.errors import DataError
    from harness.runtime.entry import run

    path = _three_item_fresh_file(tmp_path / "likert.jsonl")
    ov = [
        "experiment=abb",
        "experiment.scores=file",
        f"experiment.file.path={path}",
        "experiment.file.scale=[1,10]",
        "experiment.bootstrap=10",
        "wandb.mode=disabled",
    ]
    cfg = compose(ov)
    with pytest.raises(
        DataError,
        match=r"likert\.jsonl, record line 71, field 'neighbour': fresh neighbour 'v0' "
        r"\(split=verify\) lists 3 items \(and 29 more\), outside the claim's edit "
        r"budget of 1 item",
    ):
        run(cfg, tmp_path / "out")
    assert not (tmp_path / "out" / "abb.json").exists()  # nothing claimed, nothing confirmed
    fs = load_file_scores(path, [1, 10])
    assert fs.items_changed() == 1 and len(fs.outside_budget(1)) == 30
    f, est, fresh = fs.vector.values, fs.rows("estimate"), fs.rows("verify")
    split, tau = abb.split_delta(0.05, noise_fraction=0), 0.125 * 9
    # What the fresh rows say about the claim (B = 81, alpha = 0.125, one coordinate): refuted, 30/30.
    claim, _ = abb.run_abb(
        f,
        est,
        tau=tau,
        split=split,
        mode="one_item",
        scale=(1.0, 10.0),
        rng=np.random.default_rng(0),
        fresh=fresh,
        coords_allowed=1,
    )
    assert claim.params.B == 81 and claim.params.alpha == pytest.approx(0.125)
    assert claim.verification.verdict == "violated" and claim.verification.violations == 30
    # Negative control, the old sizing (k = the most items ANY neighbour lists, fresh rows included):
    # B 243, alpha 0.072 and `confirmed` -- the bug the refusal above prevents.
    old_k = max(len(c) for rows in fs.neighbours.values() for _, c in rows)
    bounds = abb.distance_bounds("whole_set", f.size, (1.0, 10.0), items_changed=old_k)
    old, _ = abb.run_abb(
        f,
        est,
        tau=tau,
        split=split,
        mode="whole_set",
        scale=(1.0, 10.0),
        rng=np.random.default_rng(0),
        fresh=fresh,
        bounds=bounds,
        coords_allowed=old_k,
    )
    assert old.params.B == 243 and old.params.alpha == pytest.approx(0.0722, abs=1e-4)
    assert old.verification.verdict == "confirmed"


def test_full_flip_score_file_through_hydra_is_confirmed(tmp_path):
    """The issue's case as a user types it: a 1-10 score file, experiment.tau_fraction=0.1, every fresh
    neighbour flips one score by the full range: 'confirmed' (surely), not 'refuted: 30/30'."""
    from helpers.compose import compose

    from harness.runtime.entry import run

    rows, rng = [], np.random.default_rng(0)
    items = [(f"q{q}", m) for q in range(10) for m in ("m1", "m2", "m3")]
    base = {it: (1.0 if k % 2 else 10.0) for k, it in enumerate(items)}
    rows += [{"item": q, "model": m, "score": s} for (q, m), s in base.items()]
    for split, n in (("estimate", 40), ("verify", 30)):
        for j in range(n):
            q, m = items[rng.integers(len(items))]
            rows.append(
                {
                    "item": q,
                    "model": m,
                    "score": 11.0 - base[(q, m)],
                    "neighbour": f"{split}{j}",
                    "split": split,
                }
            )
    path = tmp_path / "likert.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ov = [
        "experiment=abb",
        "experiment.scores=file",
        f"experiment.file.path={path}",
        "experiment.file.scale=[1,10]",
        "experiment.tau_fraction=0.1",
        "experiment.bootstrap=10",
        "wandb.mode=disabled",
    ]
    cfg = compose(ov)
    results = run(cfg, tmp_path / "out")
    v = json.loads((tmp_path / "out" / "abb.json").read_text())["verification"]
    assert (
        v["trials"] == 30 and v["max_distance"] > 0.9 and v["violations"] == 0
    )  # 0.9000000000000004: rounding
    assert results["verdict"] == "confirmed" and results["guarantee"]["statement"].startswith("surely")
    assert results["guarantee"]["claimed"] and results["summary"].startswith(
        "proven without data by the certain cap"
    )


def test_a_file_claim_with_three_of_thirty_items_is_labelled_hamming_3(tmp_path):
    """A score file whose estimation neighbours each edit 3 of its 30 items is a Hamming-3 claim
    (B = 3 r^2 = 243 on a 1-10 scale): abb.json's mode says `hamming_3`, not `whole_set` (what it
    said before: every k > 1 was called the whole set). One item is `one_item`, all 30 `whole_set`."""
    from helpers.compose import compose

    from harness.runtime.entry import run

    rng = np.random.default_rng(1)
    items = [(f"q{q}", m) for q in range(10) for m in ("m1", "m2", "m3")]
    base = {it: (1.0 if k % 2 else 10.0) for k, it in enumerate(items)}
    rows = [{"item": q, "model": m, "score": s} for (q, m), s in base.items()]
    for j in range(40):
        for k in rng.choice(len(items), size=3, replace=False):
            q, m = items[k]
            rows.append(
                {
                    "item": q,
                    "model": m,
                    "score": base[(q, m)] + (-0.5 if base[(q, m)] > 5 else 0.5),
                    "neighbour": f"e{j}",
                    "split": "estimate",
                }
            )
    path = tmp_path / "likert.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ov = [
        "experiment=abb",
        "experiment.scores=file",
        f"experiment.file.path={path}",
        "experiment.file.scale=[1,10]",
        "experiment.bootstrap=10",
        "wandb.mode=disabled",
    ]
    cfg = compose(ov)
    run(cfg, tmp_path / "out")
    bj = json.loads((tmp_path / "out" / "abb.json").read_text())
    assert bj["mode"] == "hamming_3" and bj["d"] == 30 and bj["scores"]["items_changed"] == 3
    assert bj["bounds"]["B"] == pytest.approx(3 * 81)
    assert [abb.neighbour_mode(k, 30) for k in (1, 3, 30)] == ["one_item", "hamming_3", "whole_set"]
    with pytest.raises(Exception, match="bad mode 'hamming_3' or items_changed 4"):
        abb.distance_bounds("hamming_3", 30, (1.0, 10.0), items_changed=4)
