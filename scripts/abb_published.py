"""python scripts/abb_published.py

Alpha for the paper's published formatting sensitivities (arXiv 2603.05485) under each bound of
harness.abb, next to what the official code (github.com/penfever/bias-bounded-evaluation)
computes. The official formulas were read from its differential_debiasing/core/utils.py
(calculate_effective_alpha, calculate_abb_noise_parameter) and core/debias.py:

  alpha_off   = (tau / r) / ((Delta / r) sqrt(2 / delta))          (r = score range; plug-in Delta)
  sigma_norm  = (tau - alpha_off (Delta / r) sqrt(2 / delta)) / c_d   <- raw tau, normalised Delta
  sigma_raw   = r * sigma_norm   (noise is added in [0, 1] units, then de-normalised)

Inputs: Likert points on 1..5 (r = 4, B = r^2 = 16 for one edited verdict), tau = 0.5, delta = 0.01,
d = 12,000, Hamming-1. Caveat (printed, `what_delta_is`): only GPT-4o-mini's Delta reads as a one-item
||v||; GPT-3.5-Turbo's and QwQ-32B's are RMS of per-neighbour mean |Delta| over 8-17 changed verdicts,
so the mean-bound columns treat a number of another kind as E||v||^2. No per-neighbour ||v|| data are
published: the mean bounds use the published RMS as the
sample mean (Bernstein with sample variance 0, its most favourable case), delta_m = 0.01 (sigma = 0,
the whole delta on the bound) and delta_est = 0.001.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import chi2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not an installed copy
from harness.abb import (  # noqa: E402
    bernstein_ucb,
    choose_alpha,
    hoeffding_ucb,
    mean_ucb,
    quantile_min_samples,
)

JUDGES = (("GPT-4o-mini", 2.485, 1.405), ("GPT-3.5-Turbo", 1.901, 1.332), ("QwQ-32B", 1.926, 1.690))
NEIGHBOUR_DIFFERENCES = {
    # `formatting_sensitivity.neighbor_differences` of the official
    # sensitivity_profiles/<judge>_sensitivity_profile.json
    # (20 sampled verdicts each). The official ABBSensitivity.get_neighbor_differences takes, per neighbour, the
    # MEAN |f(D)_i - f(D')_i| over the positions that changed (abs_diff > 0), and Delta = sqrt(mean of their squares).
    "GPT-4o-mini": [
        0,
        4,
        3,
        0,
        1,
        3,
        3,
        1,
        0,
        4,
        0,
        0,
        4,
        0,
        3,
        3,
        3,
        1,
        1,
        3,
        0,
        3,
        3,
        3,
        3,
        0,
        4,
        0,
        3,
        1,
        0,
        3,
        3,
        0,
        3,
        3,
        4,
        3,
        3,
        0,
    ],
    "GPT-3.5-Turbo": [1.7, 7 / 3, 2.1, 2.1, 15 / 11, 2.1, 14 / 9, 2.1, 1.8, 1.625],
    "QwQ-32B": [1.9375, 1.9375, 1.9375, 1.9375, 1.9375, 1.875, 1.9375, 32 / 17, 1.9375, 1.9375],
}
SAMPLED = 20
"""Verdicts each official profile judged (`original_judgment_shape`)."""
TAU, DELTA, D, R = 0.5, 0.01, 12_000, 4.0
B, DELTA_EST = R * R, 0.001


def c_d(d: int, delta_noise: float) -> float:
    """Laurent-Massart radius of ||Z - Z'|| / sigma (the official code's noise bound)."""
    x = math.log(1 / delta_noise)
    return math.sqrt(2 * (d + 2 * math.sqrt(d * x) + 2 * x))


def official(delta_sens: float) -> dict[str, float]:
    """What the official code computes (module docstring), in its own units."""
    sens_norm, tau_norm = delta_sens / R, TAU / R
    alpha = max(0.0, min(1.0, tau_norm / (sens_norm * math.sqrt(2 / DELTA))))
    sigma_raw = R * (TAU - alpha * sens_norm * math.sqrt(2 / DELTA)) / c_d(D, DELTA / 2)
    # ||Z - Z'||^2 / (2 sigma^2) ~ chi2_d: how often the noise ALONE moves M by more than tau.
    return {
        "alpha": alpha,
        "sigma_raw": sigma_raw,
        "noise_dist": sigma_raw * math.sqrt(2 * D),
        "p_noise_only": float(chi2.sf(TAU**2 / (2 * sigma_raw**2), D)),
    }


def markov_alpha(u: float) -> float:
    """alpha = tau sqrt(delta_m) / sqrt(U) at sigma = 0, delta_m = delta."""
    return min(1.0, TAU * math.sqrt(DELTA) / math.sqrt(u))


def row(name: str, rms: float, jitter: float) -> str:
    ctx = math.sqrt(rms * rms - jitter * jitter)
    mean = rms * rms
    cells = {
        "official": official(rms)["alpha"],
        "official_ctx": official(ctx)["alpha"],
        "plugin": markov_alpha(mean),
        "hoeff10": markov_alpha(hoeffding_ucb(mean, 10, B, DELTA_EST)),
        "hoeff40": markov_alpha(hoeffding_ucb(mean, 40, B, DELTA_EST)),
        "bern40": markov_alpha(bernstein_ucb(mean, 0.0, 40, B, DELTA_EST)),
        "best40": markov_alpha(mean_ucb(np.full(40, mean), B, DELTA_EST, "best")[0]),
    }
    cap = choose_alpha(TAU, B, np.full(10, mean), delta_m=DELTA, delta_est=DELTA_EST)
    assert cap.winner.name == "certain_cap"  # below m_min only the cap and Markov exist, and Markov loses
    q_min = quantile_min_samples(DELTA, DELTA_EST)
    dkw_min = math.ceil(math.log(1 / DELTA_EST) / (2 * DELTA * DELTA))
    return (
        f"| {name} | {rms:.3f} | "
        + " | ".join(f"{v:.5f}" for v in cells.values())
        + f" | {cap.alpha:.3f} | m >= {q_min} | m >= {dkw_min} |"
    )


def changed_items(value: float) -> int:
    """The fewest changed verdicts (<= SAMPLED) whose mean |Delta| of integer Likert moves is `value` (0: none)."""
    if value == 0:
        return 0
    return next(k for k in range(1, SAMPLED + 1) if abs(value * k - round(value * k)) < 1e-9)


def what_delta_is() -> None:
    """Each judge's Delta recomputed from its neighbour records, and how many verdicts each neighbour moved."""
    print(
        "\nWhat the official Delta is (recomputed from each profile's neighbor_differences: per neighbour the"
    )
    print("mean |Delta| over the verdicts that CHANGED; Delta = RMS of those means):")
    for name, rms, _ in JUDGES:
        vals = np.array(NEIGHBOUR_DIFFERENCES[name], dtype=float)
        assert abs(math.sqrt(float(np.mean(vals**2))) - rms) < 5e-4, name  # the published value
        ks = [changed_items(v) for v in vals]
        moved = [k for k in ks if k]
        low = max(v * math.sqrt(k) for v, k in zip(vals, ks) if k)
        kind = (
            "integer values 0-4, consistent with one changed verdict (or none) per neighbour: it reads as a "
            "one-item ||v||"
            if max(ks) <= 1
            else f"every neighbour moved >= {min(moved)} verdicts (the fewest k with k x value an integer: "
            f"{min(moved)}-{max(moved)}): a mean |Delta| per changed verdict, not a one-item ||v||; those "
            f"neighbours' own ||v|| >= mean|Delta| sqrt(k), up to {low:.2f} Likert points"
        )
        print(f"  {name:14} {len(vals)} neighbours, Delta {math.sqrt(float(np.mean(vals**2))):.4f}: {kind}")


def main() -> None:
    print(f"tau={TAU} Likert points, delta={DELTA}, d={D}, range r={R:g}, B=r^2={B:g}, delta_est={DELTA_EST}")
    print("alpha under each bound (sigma = 0; 'official' uses delta/2 and the plug-in, an ESTIMATE):\n")
    print(
        "| judge | RMS | official | official, jitter removed | plug-in (delta_m = delta) | Hoeffding m=10 | "
        "Hoeffding m=40 | Bernstein m=40 (V=0) | best m=40 | certain cap | quantile needs | DKW needs |"
    )
    print("|---" * 12 + "|")
    for judge in JUDGES:
        print(row(*judge))
    vac = next(m for m in range(2, 200) if bernstein_ucb(0.0, 0.0, m, B, DELTA_EST) < B)
    print(
        f"\nBernstein is vacuous (U = B, alpha = {markov_alpha(B):.4f}) for m <= {vac - 1} at delta_est={DELTA_EST}; "
        "Markov on any U <= B gives at most the cap when U >= delta_m B."
    )
    print("\nThe official sigma in raw units (total Delta):")
    for name, rms, _ in JUDGES:
        o = official(rms)
        print(
            f"  {name:14} alpha {o['alpha']:.5f}, sigma {o['sigma_raw']:.6f} Likert, typical ||Z-Z'|| "
            f"{o['noise_dist']:.3f} {'>' if o['noise_dist'] > TAU else '<='} tau, P(noise alone > tau) "
            f"{o['p_noise_only']:.4f}"
        )
    what_delta_is()
    print("""
Differences, one sentence each:
- certain cap: one edited verdict moves ||f(D) - f(D')|| by at most r = 4, so alpha = tau/r = 0.125
  makes ||M(D) - M(D')|| <= tau SURELY (sigma = 0): no data, no delta spent, 3-9x the official alpha.
- official alpha: Markov on the plug-in Delta at delta/2: an estimate, not a bound (a finite sample
  can underestimate Delta); in one unit system it equals tau sqrt(delta/2) / Delta.
- mean bounds: Hoeffding/Bernstein UCBs on E||v||^2 make Markov valid but smaller still; the
  quantile bound (order statistic of ||v||) needs m >= 688 neighbours here and ties the cap unless
  fewer than 1% of edits move a verdict by the full 4 points.
- sigma: the official code subtracts a range-normalised bias term from the RAW tau; over d = 12,000
  items its noise alone exceeds tau with the probability shown (a fresh check flags it as violated).""")


if __name__ == "__main__":
    main()
