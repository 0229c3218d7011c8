"""A-BB (average bias-bounded) scores: sensitivity, contraction + noise, and a check.

M(D) = g(f(D)) + Z,  g(x) = alpha x + (1 - alpha) mu 1,  Z ~ N(0, sigma^2 I_d).
Claim: Pr_{D', Z, Z'}[ ||M(D) - M(D')|| > tau ] <= delta, for D' ~ T(D) (see docs/abb.md).

ONE unit system: f, tau, mu, sigma and every sensitivity are in the judge's raw score units
(e.g. Likert points). The score scale (lo, hi) is used only for the bound B on a squared
distance (UCB) and for the default fixed mu (the midpoint). The official code instead
compared a range-normalised sensitivity with a raw tau when sizing sigma; nothing here does.

Derivation (v = f(D) - f(D'), P = projection on the all-ones direction, ||Pv||^2 = d mean(v)^2):
  fixed mu:  g(f(D)) - g(f(D')) = alpha v                       -> E||.||^2 = alpha^2 E||v||^2
  data mu:   g(f(D)) - g(f(D')) = Pv + alpha (I - P) v           -> E||.||^2 = alpha^2 E||v||^2
             + (1 - alpha^2) E||Pv||^2  (exact; the mean moves with D' and escapes the contraction;
             the triangle bound alpha||v|| + (1 - alpha)||Pv|| is looser).
  Markov on the square (delta_markov), Laurent-Massart on ||Z - Z'||^2 / (2 sigma^2) ~ chi2_d
  (delta_noise), UCBs on E||v||^2, E||Pv||^2 (delta_est), union bound:
  A(alpha) + sigma c_d <= tau,  A(alpha) = sqrt((alpha^2 U + (1 - alpha^2) U_par) / delta_markov).
Noise never helps this distance claim: sigma = 0 has the most margin; sigma is a reported choice.

Modules: `bounds` (distances, confidence bounds, Sensitivity), `mechanism` (delta split, calibrate,
preflight, contract, bounded_scores), `verify` (Verification, AbbResult/abb.json, run_abb),
`signal` (rankings and retained signal before/after). Import the core from `harness.abb`; `edits`, `neighbours`, `scores`, `ranking`, `signal`, `plots`
and `run` are the experiment's parts.
"""

from harness.abb.bounds import (
    METHODS,
    Sensitivity,
    distance_bounds,
    estimate_sensitivity,
    mean_bound,
    remove_jitter,
    rms_sensitivity,
    squared_distances,
)
from harness.abb.mechanism import (
    SIGMA_MODES,
    AbbParams,
    DeltaSplit,
    bounded_scores,
    calibrate,
    chi_radius,
    contract,
    max_alpha,
    preflight,
    split_delta,
)
from harness.abb.verify import (
    AbbResult,
    Verification,
    clopper_pearson,
    run_abb,
    verify,
    write_json,
)

__all__ = [
    "METHODS", "SIGMA_MODES", "AbbParams", "AbbResult", "DeltaSplit", "Sensitivity", "Verification",
    "bounded_scores", "calibrate", "chi_radius", "clopper_pearson", "contract", "distance_bounds",
    "estimate_sensitivity", "max_alpha", "mean_bound", "preflight", "remove_jitter", "rms_sensitivity",
    "run_abb", "split_delta", "squared_distances", "verify", "write_json",
]
