"""A-BB guarantee logic, checked against a SCRIPTED judge whose bias under a neighbour is known.

The scripted judge is not a model: it is a designed ground truth (STYLE.md allows this for
guarantee logic). Every random draw is seeded, so each assertion is deterministic.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from harness import abb
from harness.errors import ConfigError

SCALE = (1.0, 5.0)


class ScriptedBiasJudge:
    """SCRIPTED judge with a known bias: f(D') = f(D) + a designed perturbation.

    one_item: one uniformly chosen item moves; w.p. p_big its score is reflected on the scale
    (lo + hi - s, a shift of up to the whole range), else it moves by +-small (clipped).
    whole_set: every item moves by a common shift c ~ N(0, common^2) plus N(0, small^2), clipped.
    """

    def __init__(self, d: int, seed: int = 0, p_big: float = 0.02, small: float = 0.3, common: float = 0.0):
        self.rng = np.random.default_rng(seed)
        self.baseline = self.rng.integers(1, 6, size=d).astype(float)
        self.p_big, self.small, self.common = p_big, small, common

    def neighbour(self, rng: np.random.Generator, mode: str) -> np.ndarray:
        f = self.baseline.copy()
        if mode == "one_item":
            i = int(rng.integers(f.size))
            if rng.random() < self.p_big:
                f[i] = SCALE[0] + SCALE[1] - f[i]
            else:
                f[i] = np.clip(f[i] + self.small * rng.choice([-1.0, 1.0]), *SCALE)
            return f
        shift = self.common * rng.standard_normal() + self.small * rng.standard_normal(f.size)
        return np.clip(f + shift, *SCALE)

    def neighbours(self, m: int, mode: str, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return np.stack([self.neighbour(rng, mode) for _ in range(m)])

    def true_msq(self) -> float:
        """Delta*^2 = E||f(D) - f(D')||^2 for one_item, in closed form (the item is uniform)."""
        f = self.baseline
        big = (SCALE[0] + SCALE[1] - 2 * f) ** 2
        small = self.small**2 * np.where((f > SCALE[0]) & (f < SCALE[1]), 1.0, 0.5)  # clipped half the time
        return float(np.mean(self.p_big * big + (1 - self.p_big) * small))


def _run(judge, mode, tau, delta, *, m, method="bernstein", alpha_frac=1.0, fresh_n=3000, mu="fixed", seed=1):
    split = abb.split_delta(delta, noise_fraction=0.45, est_fraction=0.1 if method != "none" else 0.0)
    f = judge.baseline
    sq, par = abb.squared_distances(f, judge.neighbours(m, mode, seed=seed))
    b, b_par = abb.distance_bounds(mode, f.size, SCALE)
    sens = abb.estimate_sensitivity(sq, bound=b, method=method, delta_est=split.est,
                                    parallel_sq=par if mu == "data" else None, parallel_bound=b_par)
    first = abb.calibrate(sens, tau=tau, split=split, d=f.size, scale=SCALE, mu=mu)
    params = abb.calibrate(sens, tau=tau, split=split, d=f.size, scale=SCALE, mu=mu,
                           alpha=first.alpha * alpha_frac, sigma_mode="max")
    fresh = judge.neighbours(fresh_n, mode, seed=seed + 1000)
    return params, abb.verify(f, fresh, params, np.random.default_rng(seed + 7))


# (a) the guarantee holds on fresh neighbours and fresh noise across a (tau, delta) grid


@pytest.mark.parametrize("tau", [0.25, 0.5, 1.0])
@pytest.mark.parametrize("delta", [0.01, 0.05, 0.2])
@pytest.mark.parametrize("alpha_frac", [1.0, 0.5])
def test_guarantee_holds_one_item(tau, delta, alpha_frac):
    judge = ScriptedBiasJudge(d=200, p_big=0.03)
    params, check = _run(judge, "one_item", tau, delta, m=300, alpha_frac=alpha_frac)
    assert params.markov_term + params.noise_term <= tau * (1 + 1e-9)
    if alpha_frac < 1:
        assert params.sigma > 0  # the noise room is used, so the noise part is exercised too
    assert check.pass_point and check.rate <= delta
    assert check.pass_upper, (check.violations, check.n_trials, check.cp_high)


@pytest.mark.parametrize("tau,delta", [(1.0, 0.05), (2.0, 0.1)])
def test_guarantee_holds_whole_set_with_data_mu(tau, delta):
    # Plug-in on many light-tailed neighbours: with the worst-case bound B = d r^2 a whole-set
    # UCB is vacuous at this m (see test_whole_set_ucb_is_vacuous_at_small_m).
    judge = ScriptedBiasJudge(d=30, small=0.1, common=0.02)
    params, check = _run(judge, "whole_set", tau, delta, m=400, method="none", mu="data", alpha_frac=0.5,
                         fresh_n=1000)
    assert params.mu_mode == "data" and params.sigma > 0
    assert check.pass_upper, (check.violations, check.n_trials)


def test_whole_set_ucb_is_vacuous_at_small_m():
    judge = ScriptedBiasJudge(d=30, small=0.1, common=0.02)
    with pytest.raises(ConfigError, match="escapes"):
        _run(judge, "whole_set", 1.0, 0.05, m=400, mu="data")
    params, check = _run(judge, "whole_set", 1.0, 0.05, m=400)  # fixed mu: valid, very small alpha
    assert params.alpha < 0.1 * math.sqrt(0.045) / params.sensitivity.plugin and check.pass_upper


# (b) few neighbours + heavy tail: the plug-in underestimates and fails; the UCB holds


def test_plugin_underestimates_and_fails_ucb_holds():
    tau, delta = 0.5, 0.01
    judge = ScriptedBiasJudge(d=100, p_big=0.05, small=0.0)
    true_rms = math.sqrt(judge.true_msq())
    failing = None
    for seed in range(20):
        p_plug, c_plug = _run(judge, "one_item", tau, delta, m=3, method="none", seed=seed, fresh_n=2000)
        if p_plug.sensitivity.plugin < true_rms and c_plug.cp_low > delta:
            failing = seed
            break
    assert failing is not None, "expected some seed where the plug-in underestimates Delta* and fails"
    assert c_plug.rate > delta and not c_plug.pass_upper
    for seed in (failing, failing + 1, failing + 2):
        p_ucb, c_ucb = _run(judge, "one_item", tau, delta, m=3, method="hoeffding", seed=seed, fresh_n=2000)
        assert p_ucb.sensitivity.ucb >= true_rms
        assert c_ucb.violations == 0 and c_ucb.pass_upper


def test_closed_form_sensitivity_matches_simulation():
    judge = ScriptedBiasJudge(d=40, p_big=0.1, small=0.3)
    sq, _ = abb.squared_distances(judge.baseline, judge.neighbours(20_000, "one_item", seed=4))
    assert sq.mean() == pytest.approx(judge.true_msq(), rel=0.05)


# (c) refusals


def _sens(ucb: float, par: float | None = None) -> abb.Sensitivity:
    return abb.Sensitivity(n=10, method="none", bound=16.0, delta_est=0.0, plugin=ucb, intrinsic=None,
                           ctx=ucb, ucb=ucb, parallel_plugin=par, parallel_ucb=par)


def test_refusals():
    split = abb.split_delta(0.01, noise_fraction=0.5, est_fraction=0.0)
    with pytest.raises(ConfigError, match="alpha_min"):
        abb.calibrate(_sens(2.5), tau=0.5, split=split, d=100, scale=SCALE, alpha_min=0.1)
    with pytest.raises(ConfigError, match="escapes"):
        abb.calibrate(_sens(2.5, par=1.0), tau=0.5, split=split, d=100, mu="data")
    with pytest.raises(ConfigError, match="alpha"):
        abb.calibrate(_sens(2.5), tau=0.5, split=split, d=100, scale=SCALE, alpha=0.5)
    with pytest.raises(ConfigError, match="delta_split"):
        abb.split_delta(0.01, noise_fraction=0.6, est_fraction=0.5)
    with pytest.raises(ConfigError, match="delta"):
        abb.split_delta(1.5)
    with pytest.raises(ConfigError, match="tau"):
        abb.calibrate(_sens(1.0), tau=0.0, split=split, d=10, scale=SCALE)
    with pytest.raises(ConfigError, match="sigma_mode"):
        abb.calibrate(_sens(1.0), tau=0.5, split=split, d=10, scale=SCALE, sigma_mode="loud")
    with pytest.raises(ConfigError, match="mu_value"):
        abb.calibrate(_sens(1.0), tau=0.5, split=split, d=10)
    spent = dataclasses.replace(_sens(1.0), method="hoeffding", delta_est=0.005)
    with pytest.raises(ConfigError, match="delta_est"):
        abb.calibrate(spent, tau=0.5, split=split, d=10, scale=SCALE)


# (d) formulas on hand-checked numbers


def test_alpha_sigma_hand_checked():
    # Delta = 2, tau = 0.5, delta = 0.02 split 1/2 - 1/2: delta_markov = 0.01, sqrt = 0.1.
    split = abb.split_delta(0.02, noise_fraction=0.5, est_fraction=0.0)
    p = abb.calibrate(_sens(2.0), tau=0.5, split=split, d=100, scale=SCALE)
    assert p.alpha == pytest.approx(0.025)  # 0.5 * 0.1 / 2
    assert p.sigma_max == pytest.approx(0.0, abs=1e-12) and p.sigma == 0.0
    assert p.c_d == pytest.approx(17.443030751, rel=1e-9)  # sqrt(2(100 + 2 sqrt(100 ln 100) + 2 ln 100))
    half = abb.calibrate(_sens(2.0), tau=0.5, split=split, d=100, scale=SCALE, alpha=0.0125, sigma_mode="fraction",
                         sigma_fraction=0.5)
    assert half.markov_term == pytest.approx(0.25)
    assert half.sigma_max == pytest.approx(0.25 / 17.443030751)
    assert half.sigma == pytest.approx(0.5 * 0.25 / 17.443030751)
    assert half.mu_value == 3.0  # midpoint of the scale
    small = abb.calibrate(_sens(0.01), tau=0.5, split=split, d=100, scale=SCALE)
    assert small.alpha == 1.0  # capped


def test_confidence_bounds_hand_checked():
    x = np.array([0.0, 1.0, 2.0, 3.0])
    assert abb.mean_bound(x, 4.0, 0.1, "hoeffding") == pytest.approx(3.645966026, rel=1e-8)
    assert abb.mean_bound(x, 4.0, 0.1, "none") == 1.5
    y = np.linspace(0, 3, 100)
    assert abb.mean_bound(y, 4.0, 0.1, "bernstein") == pytest.approx(1.997616204, rel=1e-8)
    assert abb.mean_bound(y, 4.0, 0.1, "bernstein", side="lower") == pytest.approx(1.002383796, rel=1e-8)
    assert abb.mean_bound(x, 4.0, 0.1, "bernstein") == 4.0  # clipped to the bound
    assert abb.distance_bounds("one_item", 50, SCALE) == (16.0, 16.0 / 50)
    assert abb.distance_bounds("whole_set", 50, SCALE) == (800.0, 800.0)
    assert abb.remove_jitter(2.485, 1.405) == pytest.approx(math.sqrt(2.485**2 - 1.405**2))
    assert abb.remove_jitter(1.0, 2.0) == 0.0


def test_jitter_removal_spends_a_lower_bound():
    rng = np.random.default_rng(0)
    sq = rng.uniform(0, 4, 200)
    jit = rng.uniform(0, 1, 200)
    s = abb.estimate_sensitivity(sq, bound=16, method="bernstein", delta_est=0.01, intrinsic_sq=jit)
    assert s.ctx < s.plugin and s.intrinsic == pytest.approx(math.sqrt(jit.mean()))
    upper_only = abb.mean_bound(sq, 16, 0.005, "bernstein")
    lower_jit = abb.mean_bound(jit, 16, 0.005, "bernstein", side="lower")
    assert s.ucb == pytest.approx(math.sqrt(max(0.0, upper_only - lower_jit)))


# (e) a data-dependent mu: exact decomposition and why it must be bounded


def test_data_mu_decomposition():
    rng = np.random.default_rng(3)
    x, xp = rng.normal(3, 1, 40), rng.normal(3.2, 1, 40)
    v = x - xp
    par = v.sum() ** 2 / v.size
    for alpha in (0.0, 0.1, 0.7, 1.0):
        p = abb.AbbParams(1.0, abb.split_delta(0.1), 40, alpha, 1.0, "data", None, 0.0, 0.0, "zero", 0.0, 1.0,
                          None, _sens(1.0))
        gdiff = abb.contract(x, p) - abb.contract(xp, p)
        exact = alpha**2 * (v @ v) + (1 - alpha**2) * par
        assert gdiff @ gdiff == pytest.approx(exact)
        triangle = alpha * np.linalg.norm(v) + (1 - alpha) * math.sqrt(par)
        assert np.linalg.norm(gdiff) <= triangle + 1e-12


def test_data_mu_needs_its_bound():
    """A common shift survives contraction toward the data mean; ignoring it breaks the claim."""
    judge = ScriptedBiasJudge(d=50, small=0.05, common=0.3)
    tau, delta = 0.5, 0.05
    fixed, check_fixed = _run(judge, "whole_set", tau, delta, m=400, method="none", fresh_n=500)
    assert check_fixed.pass_upper
    ignoring = dataclasses.replace(fixed, mu_mode="data", mu_value=None)  # what the official code does
    fresh = judge.neighbours(500, "whole_set", seed=77)
    bad = abb.verify(judge.baseline, fresh, ignoring, np.random.default_rng(0))
    assert bad.cp_low > delta
    with pytest.raises(ConfigError, match="escapes"):
        _run(judge, "whole_set", tau, delta, m=400, method="none", mu="data")


# (f) the DP-style variant


def test_dp_sigma_formula():
    split = abb.split_delta(0.02, noise_fraction=0.5, est_fraction=0.0)  # delta_markov = delta_noise = 0.01
    p = abb.calibrate(_sens(2.0), tau=0.5, split=split, d=100, scale=SCALE, dp_epsilon=0.5)
    # alpha = 1, sensitivity bound 2 / sqrt(0.01) = 20, sigma = 20 sqrt(2 ln 125) / 0.5
    assert p.alpha == 1.0 and p.markov_term == pytest.approx(20.0)
    assert p.sigma == pytest.approx(124.3004584037, rel=1e-9)
    assert p.sigma_mode == "dp" and p.sigma_max is None
    assert abb.calibrate(_sens(2.0), tau=0.5, split=split, d=100, scale=SCALE, dp_epsilon=0.5,
                         alpha=0.1).sigma == pytest.approx(12.43004584037)
    with pytest.raises(ConfigError, match="epsilon"):
        abb.calibrate(_sens(2.0), tau=0.5, split=split, d=100, scale=SCALE, dp_epsilon=2.0)


# verification statistics and the JSON record


def test_clopper_pearson():
    lo, hi = abb.clopper_pearson(0, 368, 0.95)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 368)) and hi < 0.01
    lo, hi = abb.clopper_pearson(5, 100, 0.95)
    assert 0.016 < lo < 0.017 and 0.112 < hi < 0.113


def test_run_abb_writes_complete_json(tmp_path):
    judge = ScriptedBiasJudge(d=120, p_big=0.02)
    rng = np.random.default_rng(5)
    split = abb.split_delta(0.05)
    result, scores = abb.run_abb(
        judge.baseline, judge.neighbours(100, "one_item", 1), tau=0.5, split=split, mode="one_item",
        scale=SCALE, rng=rng, fresh=judge.neighbours(500, "one_item", 2), intrinsic=judge.baseline[None, :] + 0.0,
        sigma_mode="fraction", sigma_fraction=0.5, alpha=0.01,
    )
    assert scores.shape == judge.baseline.shape
    # alpha = 0.01 contracts the spread by 100x; the noise is sigma
    assert np.std(scores - abb.contract(judge.baseline, result.params)) == pytest.approx(result.params.sigma, rel=0.2)
    out = tmp_path / "abb.json"
    abb.write_json(out, result.to_json())
    data = json.loads(out.read_text())
    for key in ("tau", "delta", "d", "mode", "n_neighbours", "sensitivity", "alpha", "mu", "sigma", "sigma_max",
                "guarantee", "verification"):
        assert key in data
    assert data["delta"]["est"] == pytest.approx(0.005)
    assert set(data["sensitivity"]) >= {"plugin", "intrinsic", "ctx", "ucb", "method"}
    assert data["guarantee"]["holds"] is True and data["verification"]["pass_point"] is True
    assert [q.name for q in tmp_path.iterdir()] == ["abb.json"]  # no temporary left behind


def test_published_numbers_script_prints_alpha_sigma_and_differences():
    """Issue must-show: the published sensitivities give alpha ~0.01-0.04 and the script explains
    each difference from the official code's numbers."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "abb_published.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if re.match(r"^(GPT-4o-mini|GPT-3.5-Turbo|QwQ-32B)\s+\d", line)]
    assert len(rows) == 6
    for row in rows:
        ours_alpha = float(row.split("|")[1].split()[0])
        assert 0.01 < ours_alpha < 0.04, row
    assert "Differences" in out.stdout and "sigma" in out.stdout and "data mu" in out.stdout
