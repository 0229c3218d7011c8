"""SCRIPTED judges with a designed bias and jitter: the ground truth for tests/abb/test_abb.py and
scripts/abb_counterexample.py.

Not models: each draws score vectors from a stated distribution, so every claim can be checked
against fresh draws. `old_rule_*` re-create what harness/abb once computed (jitter measured over
whole documents, subtracted from one-item moments; docs/abb.md), for the counterexample only.
`params` builds a real `AbbParams` so the checks run through `harness.abb.verify`, the code path
of the experiment.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from harness import abb


class JitterJudge:
    """Scores in [0, 1] for d = docs x per_doc items; a re-judgment adds N(0, jitter^2) (clipped).

    one_item neighbour: one uniform item is re-judged after an edit that shifts it by +-shift.
    whole_set neighbour: every item is re-judged; a `frac` of them also get the +-shift.
    """

    def __init__(self, docs=50, per_doc=16, jitter=0.05, shift=0.25, frac=0.05, seed=0):
        rng = np.random.default_rng(seed)
        self.docs, self.per_doc, self.d = docs, per_doc, docs * per_doc
        self.f = rng.uniform(0.05, 0.95, self.d)
        self.jitter, self.shift, self.frac = jitter, shift, frac

    def _rejudge(self, x, rng):
        return np.clip(x + self.jitter * rng.standard_normal(np.shape(x)), 0.0, 1.0)

    def one_item(self, m, rng):
        """(m, d) neighbour vectors f(D'), each differing from f(D) in one coordinate."""
        out = np.repeat(self.f[None, :], m, axis=0)
        idx = rng.integers(self.d, size=m)
        s = self.shift * rng.choice([-1.0, 1.0], size=m)
        out[np.arange(m), idx] = self._rejudge(self.f[idx] + s, rng)
        return out

    def whole_set(self, m, rng):
        s = self.shift * rng.choice([-1.0, 1.0], size=(m, self.d)) * (rng.random((m, self.d)) < self.frac)
        return self._rejudge(self.f[None, :] + s, rng)

    def jitter_docs(self, docs, repeats, rng):
        """The OLD jitter route: re-judge `docs` whole documents (docs x per_doc coordinates) `repeats` times."""
        chosen = rng.choice(self.docs, size=docs, replace=False)
        cols = (chosen[:, None] * self.per_doc + np.arange(self.per_doc)).ravel()
        out = np.repeat(self.f[None, :], repeats, axis=0)
        out[:, cols] = self._rejudge(out[:, cols], rng)
        return out, cols.size

    def jitter_matched(self, m, rng):
        """Matched jitter: re-judge ONE uniform item unchanged (what a one_item neighbour re-judges)."""
        out = np.repeat(self.f[None, :], m, axis=0)
        idx = rng.integers(self.d, size=m)
        out[np.arange(m), idx] = self._rejudge(self.f[idx], rng)
        return out


class LikertJudge:
    """Arena-Hard-like verdicts on 1..5 (d items); a one_item edit moves one verdict by
    +-Binomial(4, q) points (reflected into [1, 5]), q set so that E shift^2 = rms^2 before reflection."""

    def __init__(self, d=12_000, rms=2.485, seed=0):
        rng = np.random.default_rng(seed)
        self.d, self.f = d, rng.integers(1, 6, d).astype(float)
        self.q = (-4 + math.sqrt(16 + 48 * rms * rms)) / 24

    def moved(self, m, rng):
        """(idx, new value) of the edited coordinate for m neighbours."""
        idx = rng.integers(self.d, size=m)
        new = self.f[idx] + rng.choice([-1.0, 1.0], m) * rng.binomial(4, self.q, m)
        new = np.where(new > 5, 10 - new, np.where(new < 1, 2 - new, new))  # reflect into [1, 5]
        return idx, np.clip(new, 1, 5)

    def one_item(self, m, rng):
        idx, new = self.moved(m, rng)
        out = np.repeat(self.f[None, :], m, axis=0)
        out[np.arange(m), idx] = new
        return out


def sq_dist(f, rows):
    return np.sum((np.atleast_2d(rows) - f) ** 2, axis=1)


def old_rule_plugin(v_sq, j_sq, tau, delta_m):
    """Before the fix, plug-in: Delta_ctx = sqrt(max(0, mean v^2 - mean j^2)), alpha = tau sqrt(dm) / Delta_ctx."""
    ctx = math.sqrt(max(0.0, float(np.mean(v_sq)) - float(np.mean(j_sq))))
    return 1.0 if ctx == 0 else min(1.0, tau * math.sqrt(delta_m) / ctx)


def old_rule_bernstein(v_sq, j_sq, B, tau, delta_m, delta_est):
    """Before the fix, Bernstein: U = UCB(v^2) - LCB(j^2), each clipped to [0, B] though j^2 may exceed B."""
    share = delta_est / 2
    up = abb.bernstein_ucb(float(np.mean(v_sq)), float(np.var(v_sq, ddof=1)), v_sq.size, B, share)
    lo = abb.bernstein_ucb(
        float(np.mean(j_sq)), float(np.var(j_sq, ddof=1)), j_sq.size, B, share, side="lower"
    )
    u = max(0.0, up - lo)
    return 1.0 if u == 0 else min(1.0, tau * math.sqrt(delta_m / u))


def params(tau, B, sq, *, d, delta, noise=0.0, est=0.1, scale=(0.0, 1.0), **kw) -> abb.AbbParams:
    """A real calibrated mechanism: split delta, choose the bound, calibrate (fixed mu at the midpoint)."""
    split = abb.split_delta(delta, noise_fraction=noise, est_fraction=est)
    choice = abb.choose_alpha(
        tau,
        B,
        sq,
        delta_m=split.markov,
        delta_est=split.est,
        **{k: kw.pop(k) for k in ("allowed", "jitter_sq", "jitter_coords", "neighbour_coords") if k in kw},
    )
    return abb.calibrate(choice, tau=tau, split=split, d=d, B=B, scale=scale, **kw)


def with_alpha(p: abb.AbbParams, alpha: float, sigma: float | None = None) -> abb.AbbParams:
    """A MIS-calibrated copy (negative control): alpha (and sigma) forced, the claim left as it was."""
    return dataclasses.replace(p, alpha=alpha, sigma=p.sigma if sigma is None else sigma)


def official_sigma(rms, tau=0.5, delta=0.01, d=12_000, r=4.0):
    """(alpha, sigma in raw units) as the official code sizes them (scripts/abb_published.py)."""
    alpha = min(1.0, (tau / r) / ((rms / r) * math.sqrt(2 / delta)))
    x = math.log(2 / delta)
    c_d = math.sqrt(2 * (d + 2 * math.sqrt(d * x) + 2 * x))
    return alpha, r * (tau - alpha * (rms / r) * math.sqrt(2 / delta)) / c_d
