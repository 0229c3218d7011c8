"""A-BB (average bias-bounded) scores: certified contraction, noise, and a check that can fail.

M(D) = g(f(D)) + Z,  g(x) = alpha x + (1 - alpha) mu 1,  Z ~ N(0, sigma^2 I_d).
Claim: Pr_{D', Z, Z'}[ ||M(D) - M(D')|| > tau ] <= delta_claimed, for D' ~ T(D) (docs/abb.md).

ONE unit system: f, tau, mu, sigma and every threshold are in the judge's raw score units. The
score scale (lo, hi) enters through B, the sure bound on ||f(D) - f(D')||^2, and the default mu.

Every candidate bound is a threshold t with Pr[||v|| > t] <= delta_m (v = f(D) - f(D'), re-judged):
the certain cap t = sqrt(B) (no data, delta_m = 0), an order-statistic quantile of ||v|| (or DKW),
Markov on a Hoeffding/Bernstein UCB of E||v||^2. `choose_alpha` takes the largest certified alpha
and names the winner; the plug-in (the official code) is an estimate and certifies nothing.
The exact noncentral chi-square tail of the noise replaces Laurent-Massart + triangle.

Modules: `bounds` (distances, confidence and quantile bounds, noise tail, Clopper-Pearson),
`certify` (Bound, Choice, choose_alpha), `mechanism` (delta split, calibrate, preflight, contract,
bounded_scores), `verify` (Verification with a verdict, AbbResult/abb.json, run_abb). `edits`,
`neighbours`, `scores`, `ranking`, `retained`, `plots` and `run` are the experiment's parts.
"""

from harness.abb.bounds import (
    MEAN_METHODS,
    REL_TOL,
    Refusal,
    bernstein_can_win,
    bernstein_ucb,
    clopper_pearson,
    distance_bounds,
    dkw_quantile_ucb,
    exceeds,
    hoeffding_ucb,
    mean_ucb,
    min_trials_to_confirm,
    neighbour_mode,
    noise_tail,
    quantile_min_samples,
    quantile_rank,
    quantile_ucb,
    radius_budget,
    sigma_room,
    squared_distances,
)
from harness.abb.certify import BOUNDS, CHOICES, Bound, Choice, choose_alpha
from harness.abb.mechanism import (
    SIGMA_MODES,
    AbbParams,
    DeltaSplit,
    bounded_scores,
    calibrate,
    contract,
    preflight,
    split_delta,
)
from harness.abb.verify import (
    TESTS,
    VERDICTS,
    AbbResult,
    Verification,
    run_abb,
    verdict,
    verify,
    write_json,
)

__all__ = [
    "BOUNDS",
    "CHOICES",
    "MEAN_METHODS",
    "REL_TOL",
    "SIGMA_MODES",
    "TESTS",
    "VERDICTS",
    "AbbParams",
    "AbbResult",
    "Bound",
    "Choice",
    "DeltaSplit",
    "Refusal",
    "Verification",
    "bernstein_can_win",
    "bernstein_ucb",
    "bounded_scores",
    "calibrate",
    "choose_alpha",
    "clopper_pearson",
    "contract",
    "distance_bounds",
    "dkw_quantile_ucb",
    "exceeds",
    "hoeffding_ucb",
    "mean_ucb",
    "min_trials_to_confirm",
    "neighbour_mode",
    "noise_tail",
    "preflight",
    "quantile_min_samples",
    "quantile_rank",
    "quantile_ucb",
    "radius_budget",
    "run_abb",
    "sigma_room",
    "split_delta",
    "squared_distances",
    "verdict",
    "verify",
    "write_json",
]
