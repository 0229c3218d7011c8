"""A-BB mechanism: split delta, calibrate (alpha, sigma) for (tau, delta), apply M(D) = g(f(D)) + Z.

Guarantee (docs/abb.md): A(alpha) + sigma c_d <= tau with
A(alpha) = sqrt((alpha^2 U + (1 - alpha^2) U_par) / delta_markov); U_par = 0 for a fixed mu.
`preflight` refuses a (tau, delta) that no neighbour data could meet, before anything is judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.abb.bounds import Sensitivity, mean_bound
from harness.abb.bounds import config_error as _err

SIGMA_MODES = ("zero", "max", "fraction")


@dataclass(frozen=True)
class DeltaSplit:
    """How the failure probability delta is spent (union bound: markov + noise + est <= total)."""

    total: float
    markov: float
    """delta_Delta: Markov on ||g(f(D)) - g(f(D'))||^2."""
    noise: float
    """delta_B: the chi-square tail of ||Z - Z'||; 0 is allowed when sigma = 0 is used."""
    est: float
    """delta_est: the sensitivity confidence bounds (0 for the plug-in)."""


def split_delta(delta: float, *, noise_fraction: float = 0.45, est_fraction: float = 0.1) -> DeltaSplit:
    """Split delta; delta_markov gets the rest. The official code uses (1/2, 1/2, 0)."""
    if not 0 < delta < 1:
        raise _err(f"delta must be in (0, 1), got {delta}", "delta")
    if not (0 <= noise_fraction <= 1 and 0 <= est_fraction <= 1 and noise_fraction + est_fraction < 1):
        raise _err(f"fractions noise={noise_fraction}, est={est_fraction} leave nothing for Markov", "delta_split")
    noise, est = delta * noise_fraction, delta * est_fraction
    return DeltaSplit(total=delta, markov=delta - noise - est, noise=noise, est=est)


def chi_radius(d: int, delta_noise: float) -> float:
    """c_d: ||Z - Z'|| <= sigma c_d w.p. >= 1 - delta_noise (Laurent-Massart, Z - Z' ~ N(0, 2 sigma^2 I_d))."""
    if delta_noise <= 0:
        return math.inf
    x = math.log(1 / delta_noise)
    return math.sqrt(2 * (d + 2 * math.sqrt(d * x) + 2 * x))


@dataclass(frozen=True)
class AbbParams:
    """A calibrated mechanism and the terms of its guarantee (raw score units)."""

    tau: float
    split: DeltaSplit
    d: int
    alpha: float
    """Contraction used (<= alpha_max)."""
    alpha_max: float
    """Largest alpha with A(alpha) <= tau."""
    mu_mode: str
    """"fixed" (mu_value) or "data" (mean of the vector being contracted)."""
    mu_value: float | None
    sigma: float
    """Noise standard deviation actually used."""
    sigma_max: float | None
    """(tau - A(alpha)) / c_d; None in the DP variant."""
    sigma_mode: str
    """"zero" | "max" | "fraction" | "dp"."""
    markov_term: float
    """A(alpha): w.p. >= 1 - delta_markov, ||g(f(D)) - g(f(D'))|| <= A(alpha)."""
    c_d: float
    dp_epsilon: float | None
    sensitivity: Sensitivity

    @property
    def noise_term(self) -> float:
        return 0.0 if self.sigma == 0 else self.sigma * self.c_d


def _markov_term(alpha: float, u: float, u_par: float, delta_markov: float) -> float:
    return math.sqrt((alpha * alpha * u + (1 - alpha * alpha) * u_par) / delta_markov)


def max_alpha(tau: float, delta_markov: float, u: float, u_par: float = 0.0) -> float:
    """Largest alpha in [0, 1] with alpha^2 U + (1 - alpha^2) U_par <= tau^2 delta_markov; -1 if none."""
    t = tau * tau * delta_markov
    if u <= t:
        return 1.0
    if u_par >= t:
        return -1.0
    return math.sqrt((t - u_par) / (u - u_par))


def calibrate(
    sens: Sensitivity,
    *,
    tau: float,
    split: DeltaSplit,
    d: int,
    scale: tuple[float, float] | None = None,
    mu: str = "fixed",
    mu_value: float | None = None,
    alpha: float | None = None,
    alpha_fraction: float | None = None,
    alpha_min: float = 0.0,
    sigma_mode: str = "zero",
    sigma_fraction: float = 0.5,
    dp_epsilon: float | None = None,
) -> AbbParams:
    """Choose alpha and sigma for (tau, delta); raise ConfigError when (tau, delta) cannot be met.

    alpha defaults to alpha_max (then sigma_max = 0); pass a smaller alpha, or alpha_fraction f for
    alpha = f * alpha_max (a sweepable choice, since alpha_max depends on the data), to leave
    room for noise.
    dp_epsilon switches to the DP-style reading: sigma = A(alpha) sqrt(2 ln(1.25/delta_noise)) / eps
    with alpha = 1 unless given; the tau-distance claim is then not made.
    """
    if not tau > 0:
        raise _err(f"tau must be > 0 (raw score units), got {tau}", "tau")
    if d < 1:
        raise _err(f"d must be >= 1, got {d}", "d")
    if split.markov <= 0 or min(split.noise, split.est) < 0 or split.markov + split.noise + split.est > split.total * (1 + 1e-9):
        raise _err(f"invalid delta split {split}", "delta_split")
    if sens.method != "none" and sens.delta_est > split.est * (1 + 1e-9):
        raise _err(f"the sensitivity bound spent delta_est={sens.delta_est}, the split allots {split.est}", "delta_split")
    mu_value, u_par = _resolve_mu(sens, mu, mu_value, scale)
    u = sens.ucb**2
    c_d = chi_radius(d, split.noise)
    if dp_epsilon is not None:
        return _calibrate_dp(sens, tau, split, d, mu, mu_value, u, u_par, c_d, alpha, dp_epsilon)
    a_max = max_alpha(tau, split.markov, u, u_par)
    if a_max < 0:
        raise _err(
            f"no alpha meets tau={tau}: the all-ones part of the bias (sqrt U_par={math.sqrt(u_par):.4g}) "
            f"escapes a data-dependent mu and alone exceeds tau*sqrt(delta_markov); use mu='fixed'", "tau")
    if a_max < alpha_min:
        raise _err(
            f"(tau={tau}, delta={split.total}) needs alpha <= {a_max:.4g} (sensitivity bound "
            f"{sens.ucb:.4g}, delta_markov={split.markov:.3g}), below alpha_min={alpha_min}", "alpha_min")
    if alpha is None and alpha_fraction is not None:
        if not 0 < alpha_fraction <= 1:
            raise _err(f"alpha_fraction must be in (0, 1], got {alpha_fraction}", "alpha_fraction")
        alpha = alpha_fraction * a_max
    if alpha is None:
        alpha = a_max
    elif not (max(alpha_min, 0.0) <= alpha <= a_max * (1 + 1e-12) and alpha <= 1):
        raise _err(f"alpha={alpha} must lie in [alpha_min={alpha_min}, alpha_max={a_max:.4g}]", "alpha")
    markov = _markov_term(alpha, u, u_par, split.markov)
    sigma_max = 0.0 if math.isinf(c_d) else max(0.0, (tau - markov) / c_d)
    sigma = _choose_sigma(sigma_mode, sigma_fraction, sigma_max)
    return AbbParams(tau, split, d, float(alpha), a_max, mu, mu_value, sigma, sigma_max, sigma_mode, markov, c_d, None, sens)


def preflight(
    *,
    tau: float,
    split: DeltaSplit,
    d: int,
    n: int,
    bound: float,
    parallel_bound: float,
    method: str,
    mu: str = "fixed",
    alpha_min: float = 0.0,
    jitter_removed: bool = False,
) -> float:
    """The best alpha_max any neighbour data could give; refuse (tau, delta) before judging.

    A confidence bound from n neighbours is at least its width at all-zero distances, so even a
    judge that no neighbour moves cannot beat it. Returns 1.0 (no refusal possible) for the
    plug-in (method "none") and when jitter removal may subtract from U.
    """
    if not tau > 0:
        raise _err(f"tau must be > 0 (raw score units), got {tau}", "tau")
    if method == "none" or jitter_removed or n < 1:
        return 1.0
    n_bounds = 1 + (mu == "data")
    share = split.est / n_bounds
    zeros = np.zeros(n)
    u = mean_bound(zeros, bound, share, method)
    u_par = mean_bound(zeros, parallel_bound, share, method) if mu == "data" else 0.0
    best = max_alpha(tau, split.markov, u, u_par)
    why = (f"even if no neighbour moved any score, the {method} bound from {n} neighbours is "
           f"sqrt(U)={math.sqrt(u):.4g}" + (f", sqrt(U_par)={math.sqrt(u_par):.4g}" if mu == "data" else ""))
    if best < 0:
        raise _err(f"no alpha meets tau={tau}, delta={split.total} with mu='data': {why}; "
                   "use mu='fixed', more neighbours, or a larger tau/delta", "tau")
    if best < alpha_min:
        raise _err(f"(tau={tau}, delta={split.total}) allows alpha <= {best:.4g} < alpha_min={alpha_min}: {why}; "
                   "use more neighbours or a larger tau/delta", "alpha_min")
    return best


def _resolve_mu(sens: Sensitivity, mu: str, mu_value: float | None, scale) -> tuple[float | None, float]:
    """(mu_value, U_par): a fixed mu does not move (U_par = 0); a data mu moves by ||Pv||."""
    if mu == "fixed":
        if mu_value is None:
            if scale is None:
                raise _err("a fixed mu needs mu_value or the score scale (midpoint)", "mu_value")
            mu_value = (float(scale[0]) + float(scale[1])) / 2
        return float(mu_value), 0.0
    if mu == "data":
        if sens.parallel_ucb is None:
            raise _err("mu='data' needs the all-ones parts ||Pv||^2 of the neighbour distances", "mu")
        return None, sens.parallel_ucb**2
    raise _err(f"mu must be 'fixed' or 'data', got {mu!r}", "mu")


def _choose_sigma(mode: str, fraction: float, sigma_max: float) -> float:
    if mode == "zero":
        return 0.0
    if mode == "max":
        return sigma_max
    if mode == "fraction":
        if not 0 <= fraction <= 1:
            raise _err(f"sigma_fraction must be in [0, 1], got {fraction}", "sigma_fraction")
        return fraction * sigma_max
    raise _err(f"sigma_mode must be one of {SIGMA_MODES}, got {mode!r}", "sigma_mode")


def _calibrate_dp(sens, tau, split, d, mu, mu_value, u, u_par, c_d, alpha, eps) -> AbbParams:
    if not 0 < eps < 1:
        raise _err(f"the classical Gaussian mechanism needs 0 < epsilon < 1, got {eps}", "dp_epsilon")
    if split.noise <= 0:
        raise _err("the DP variant needs delta_noise > 0", "delta_split")
    alpha = 1.0 if alpha is None else float(alpha)
    if not 0 < alpha <= 1:
        raise _err(f"alpha must be in (0, 1], got {alpha}", "alpha")
    markov = _markov_term(alpha, u, u_par, split.markov)
    sigma = markov * math.sqrt(2 * math.log(1.25 / split.noise)) / eps
    a_max = max_alpha(tau, split.markov, u, u_par)
    return AbbParams(tau, split, d, alpha, a_max, mu, mu_value, sigma, None, "dp", markov, c_d, float(eps), sens)


# --- the mechanism ---------------------------------------------------------------------------


def contract(f: np.ndarray, params: AbbParams) -> np.ndarray:
    """g(f) = alpha f + (1 - alpha) mu, mu fixed or the mean of f itself."""
    f = np.asarray(f, dtype=float)
    mu = float(np.mean(f)) if params.mu_mode == "data" else float(params.mu_value)
    return params.alpha * f + (1 - params.alpha) * mu


def bounded_scores(
    f: np.ndarray, params: AbbParams, rng: np.random.Generator, clip: tuple[float, float] | None = None
) -> np.ndarray:
    """M(D) = g(f(D)) + Z. Clipping to a box is a projection (non-expansive), so it keeps the claim."""
    out = contract(f, params) + params.sigma * rng.standard_normal(np.shape(f))
    return np.clip(out, clip[0], clip[1]) if clip is not None else out
