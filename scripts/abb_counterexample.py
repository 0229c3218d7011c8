"""python scripts/abb_counterexample.py

The numbers docs/abb.md quotes for the jitter-units counterexample, the whole-set check that can
fail, and the negative controls: SCRIPTED judges (harness/abb/scenarios.py: designed ground truth,
not models) run through harness.abb.verify, the check every A-BB run uses.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]  # this checkout (not an installed copy)


def show(label: str, judge_f: np.ndarray, fresh: np.ndarray, params, seed: int) -> None:
    from harness import abb

    c = abb.verify(judge_f, fresh, params, np.random.default_rng(seed))
    print(
        f"  {label}: alpha {params.alpha:.4g}, sigma {params.sigma:.4g}: {c.violations}/{c.trials} > tau, "
        f"one-sided CP [{c.cp_low:.3f}, {c.cp_high:.3f}] vs delta_claimed {c.delta_claimed:.3g}: "
        f"{c.verdict} ({c.tests} check)"
    )


def counterexample() -> None:
    from harness.abb import scenarios as sc

    judge = sc.JitterJudge(seed=0)  # d = 800 = 50 docs x 16, jitter sd 0.05, edit shift 0.25
    rng = np.random.default_rng(1)
    v = sc.sq_dist(judge.f, judge.one_item(50, rng))
    j5 = sc.sq_dist(judge.f, judge.jitter_docs(5, 1, rng)[0])
    j50 = sc.sq_dist(judge.f, judge.jitter_docs(50, 20, rng)[0])
    fresh = judge.one_item(2000, np.random.default_rng(2))
    print(
        f"jitter counterexample (tau = 0.1, delta = 0.05): one_item mean ||v||^2 {v.mean():.4f}; old jitter over "
        f"5 whole docs (80 coordinates) {j5.mean():.4f}, 50 docs x 20 (800 coordinates) {j50.mean():.4f}"
    )
    good = sc.params(0.1, 1.0, v, d=judge.d, delta=0.05)
    show("old plug-in rule", judge.f, fresh, sc.with_alpha(good, sc.old_rule_plugin(v, j5, 0.1, 0.045)), 3)
    show(
        "old Bernstein rule",
        judge.f,
        fresh,
        sc.with_alpha(good, sc.old_rule_bernstein(v, j50, 1.0, 0.1, 0.045, 0.005)),
        3,
    )
    show(
        f"new ({good.choice.winner.name}; the uncertified plug-in says {good.choice.candidates[0].alpha:.4g})",
        judge.f,
        fresh,
        good,
        3,
    )
    matched = sc.sq_dist(judge.f, judge.jitter_matched(50, np.random.default_rng(4)))
    ctx = sc.params(
        0.1,
        1.0,
        v,
        d=judge.d,
        delta=0.05,
        jitter_sq=matched,
        jitter_coords=1,
        neighbour_coords=1,
        allowed=("markov",),
    )
    show(
        f"context claim, jitter in neighbour units (mean {matched.mean():.4f}), Markov",
        judge.f,
        fresh,
        ctx,
        5,
    )
    rng = np.random.default_rng(6)
    p = sc.params(
        0.1, float(judge.d), sc.sq_dist(judge.f, judge.whole_set(200, rng)), d=judge.d, delta=0.05 / 0.9
    )
    print(
        f"whole_set neighbours (B = d = {judge.d}; cap {0.1 / np.sqrt(judge.d):.4g}), m = 200, {p.choice.winner.name}:"
    )
    fw = judge.whole_set(2000, np.random.default_rng(7))
    show("certified", judge.f, fw, p, 8)
    show("negative control: 3x alpha", judge.f, fw, sc.with_alpha(p, 3 * p.alpha), 8)


def published_like() -> None:
    from harness.abb import scenarios as sc

    lj = sc.LikertJudge(d=12_000, rms=2.485, seed=0)
    rng = np.random.default_rng(0)
    p = sc.params(0.5, 16.0, sc.sq_dist(lj.f, lj.one_item(40, rng)), d=lj.d, delta=0.01, scale=(1.0, 5.0))
    fresh = lj.one_item(300, rng)
    a_off, s_off = sc.official_sigma(2.485)
    print(
        "published-like Likert judge (GPT-4o-mini RMS 2.485, d = 12,000, tau = 0.5, delta = 0.01), 300 trials:"
    )
    for label, q in (
        (f"calibrated ({p.choice.winner.name})", p),
        ("negative control: official alpha and raw-unit sigma", sc.with_alpha(p, a_off, s_off)),
        ("negative control: 3x the cap", sc.with_alpha(p, 0.375)),
        ("3x the Markov plug-in alpha (below the cap)", sc.with_alpha(p, 3 * 0.0201)),
    ):
        show(label, lj.f, fresh, q, 9)


if __name__ == "__main__":
    counterexample()
    published_like()
