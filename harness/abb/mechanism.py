"""A-BB mechanism: split delta, calibrate (alpha, sigma) from a `Choice`, apply M(D) = g(f(D)) + Z.

The claim (docs/abb.md): Pr[||M(D) - M(D')|| > tau] <= delta_m + noise_tail(radius(alpha), sigma),
where the winning bound gives radius(alpha) (a bound on ||g(f(D)) - g(f(D'))|| except w.p. delta_m)
and noise_tail is the exact noncentral chi-square tail of ||u + Z - Z'|| (no Laurent-Massart, no
triangle inequality). sigma = 0 has the most margin: the noise never helps this distance claim.
`preflight` refuses a (tau, delta) that no neighbour data could meet, before anything is judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.abb.bounds import config_error as _err
from harness.abb.bounds import exceeds, noise_tail, refusal, sigma_room
from harness.abb.certify import BOUNDS, Choice, choose_alpha

SIGMA_MODES = ("zero", "max", "fraction")


@dataclass(frozen=True)
class DeltaSplit:
    """How delta is spent. The claim is about delta_m + delta_b; delta_est is the chance that the
    estimation neighbours were unrepresentative (averaged over them too: <= total)."""

    total: float
    markov: float
    """delta_m: the winning bound's tail Pr[||v|| > t] (the cap spends none of it)."""
    noise: float
    """delta_b: the chi-square tail of ||Z - Z'||; 0 when sigma = 0 is used."""
    est: float
    """delta_est: the confidence bounds on the estimation data (0 for the plug-in)."""


def split_delta(delta: float, *, noise_fraction: float = 0.45, est_fraction: float = 0.1) -> DeltaSplit:
    """Split delta; delta_m gets the rest. The official code uses (1/2 Markov, 1/2 noise, 0)."""
    if not 0 < delta < 1:
        raise _err(f"delta must be in (0, 1), got {delta}", "delta")
    if not (0 <= noise_fraction <= 1 and 0 <= est_fraction <= 1 and noise_fraction + est_fraction < 1):
        raise _err(
            f"fractions noise={noise_fraction}, est={est_fraction} leave nothing for the bound", "delta_split"
        )
    noise, est = delta * noise_fraction, delta * est_fraction
    return DeltaSplit(total=delta, markov=delta - noise - est, noise=noise, est=est)


@dataclass(frozen=True)
class AbbParams:
    """A calibrated mechanism and the terms of its claim (raw score units)."""

    tau: float
    split: DeltaSplit
    d: int
    alpha: float
    """Contraction used (<= alpha_max)."""
    alpha_max: float
    """Largest alpha the winning bound allows (choice.alpha)."""
    mu_mode: str
    """"fixed" (mu_value) or "data" (mean of the vector being contracted)."""
    mu_value: float | None
    sigma: float
    """Noise standard deviation actually used."""
    sigma_max: float | None
    """Largest sigma with noise_tail(radius) <= delta_b at this alpha; None in the DP variant."""
    sigma_mode: str
    """"zero" | "max" | "fraction" | "dp"."""
    choice: Choice
    """Which bound won, every candidate, what was spent."""
    radius: float
    """winner.radius(alpha): ||g(f(D)) - g(f(D'))|| <= radius except w.p. delta_m."""
    B: float
    """Sure bound on ||v||^2 (the score scale and the neighbour mode)."""
    B_parallel: float
    """Sure bound on ||Pv||^2 (used with a data mu)."""
    noise_tail: float = 0.0
    """Pr[the noise pushes a distance of `radius` beyond tau] (exact; 0 at sigma = 0, radius <= tau)."""
    delta_claimed: float | None = None
    """winner.delta_m + noise_tail: the violation probability claimed (None: DP, no tau claim). Fixed
    at calibration, so a mis-calibrated copy (dataclasses.replace) is still checked against it."""
    dp_epsilon: float | None = None

    @property
    def kind(self) -> str:
        """certified | estimate | none | dp."""
        return "dp" if self.dp_epsilon is not None else self.choice.kind

    def worst_radius(self, alpha: float | None = None) -> float:
        """The largest ||g(f(D)) - g(f(D'))|| ANY judge could cause (from B): the check's vacuity test."""
        a = self.alpha if alpha is None else alpha
        par = self.B_parallel if self.mu_mode == "data" else 0.0
        return math.sqrt(a * a * max(self.B - par, 0.0) + par) if par else a * math.sqrt(self.B)


def calibrate(
    choice: Choice,
    *,
    tau: float,
    split: DeltaSplit,
    d: int,
    B: float,
    B_parallel: float = 0.0,
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
    """alpha and sigma for (tau, delta) from the chosen bound; ConfigError when (tau, delta) cannot be met.

    alpha defaults to alpha_max (then the noise room is 0); alpha_fraction f gives f * alpha_max (a
    sweepable choice: alpha_max depends on the data), leaving room that sigma_mode max/fraction fills.
    dp_epsilon: the DP-style reading, sigma = radius(alpha) sqrt(2 ln(1.25/delta_b)) / eps, alpha = 1
    unless given; no tau claim is made.
    """
    if not tau > 0:
        raise _err(f"tau must be > 0 (raw score units), got {tau}", "tau")
    if d < 1:
        raise _err(f"d must be >= 1, got {d}", "d")
    mu_value = _resolve_mu(mu, mu_value, scale)
    win = choice.winner
    common = dict(
        tau=tau,
        split=split,
        d=d,
        mu_mode=mu,
        mu_value=mu_value,
        choice=choice,
        B=float(B),
        B_parallel=float(B_parallel),
    )
    if dp_epsilon is not None:
        return _calibrate_dp(common, win, alpha, float(dp_epsilon))
    if not win.feasible:
        raise refusal(
            f"no alpha meets tau={tau}: the all-ones part of the bias (t_par={win.threshold_parallel:.4g} "
            f"from {win.name}) escapes a data-dependent mu and alone exceeds tau; use mu=fixed",
            "tau",
        )
    a_max = choice.alpha
    if a_max < alpha_min:
        raise refusal(
            f"(tau={tau}, delta={split.total}) needs alpha <= {a_max:.4g} ({win.name}: t={win.threshold:.4g}, "
            f"delta_m={win.delta_m:.3g}), below alpha_min={alpha_min}",
            "alpha_min",
        )
    if alpha is None and alpha_fraction is not None:
        if not 0 < alpha_fraction <= 1:
            raise _err(f"alpha_fraction must be in (0, 1], got {alpha_fraction}", "alpha_fraction")
        alpha = alpha_fraction * a_max
    if alpha is None:
        alpha = a_max
    elif not (max(alpha_min, 0.0) <= alpha <= 1 and not exceeds(alpha, a_max)):
        raise _err(f"alpha={alpha} must lie in [alpha_min={alpha_min}, alpha_max={a_max:.4g}]", "alpha")
    radius = win.radius(alpha)
    sigma_max = sigma_room(radius, tau, d, split.noise)
    sigma = _choose_sigma(sigma_mode, sigma_fraction, sigma_max)
    tail = noise_tail(radius, sigma, d, tau)
    return AbbParams(
        alpha=float(alpha),
        alpha_max=a_max,
        sigma=sigma,
        sigma_max=sigma_max,
        sigma_mode=sigma_mode,
        radius=radius,
        noise_tail=tail,
        delta_claimed=win.delta_m + tail,
        **common,
    )


def _calibrate_dp(common: dict, win, alpha: float | None, eps: float) -> AbbParams:
    if not 0 < eps < 1:
        raise _err(f"the classical Gaussian mechanism needs 0 < epsilon < 1, got {eps}", "dp_epsilon")
    if common["split"].noise <= 0:
        raise _err("the DP variant needs delta_noise > 0 (experiment.delta_split.noise)", "delta_split")
    alpha = 1.0 if alpha is None else float(alpha)
    if not 0 < alpha <= 1:
        raise _err(f"alpha must be in (0, 1], got {alpha}", "alpha")
    radius = win.radius(alpha)
    sigma = radius * math.sqrt(2 * math.log(1.25 / common["split"].noise)) / eps
    return AbbParams(
        alpha=alpha,
        alpha_max=common["choice"].alpha,
        sigma=sigma,
        sigma_max=None,
        sigma_mode="dp",
        radius=radius,
        dp_epsilon=eps,
        **common,
    )


def preflight(
    *,
    tau: float,
    split: DeltaSplit,
    n: int,
    B: float,
    B_parallel: float,
    allowed: tuple[str, ...] = BOUNDS,
    method: str = "best",
    mu: str = "fixed",
    alpha_min: float = 0.0,
    context: bool = False,
) -> float:
    """The best alpha_max any neighbour data could give; refuse (tau, delta) before judging.

    Every bound is monotone in the distances, so all-zero distances (no neighbour moved anything)
    give the largest alpha a run with n neighbours could certify.
    """
    if not tau > 0:
        raise _err(f"tau must be > 0 (raw score units), got {tau}", "tau")
    zeros = np.zeros(max(n, 1))
    jitter = dict(jitter_sq=zeros[:1], jitter_coords=1, neighbour_coords=1) if context else {}
    c = choose_alpha(
        tau,
        B,
        zeros,
        delta_m=split.markov,
        delta_est=split.est,
        allowed=allowed,
        method=method,
        parallel_sq=zeros if mu == "data" else None,
        B_par=B_parallel,
        **jitter,
    )
    why = f"even if no neighbour moved any score, the best bound from {n} neighbours ({c.winner.name}) allows"
    if not c.winner.feasible:
        raise refusal(
            f"no alpha meets tau={tau}, delta={split.total} with mu='data': {why} none; use mu='fixed', "
            "more neighbours, or a larger tau/delta",
            "tau",
        )
    if c.alpha < alpha_min:
        raise refusal(
            f"(tau={tau}, delta={split.total}) allows alpha <= {c.alpha:.4g} < alpha_min={alpha_min}: {why} "
            f"alpha={c.alpha:.4g}; use more neighbours or a larger tau/delta",
            "alpha_min",
        )
    return c.alpha


def _resolve_mu(mu: str, mu_value: float | None, scale) -> float | None:
    """A fixed mu does not move with D'; a data mu (None here) moves by the mean shift."""
    if mu == "fixed":
        if mu_value is None:
            if scale is None:
                raise _err("a fixed mu needs mu_value or the score scale (midpoint)", "mu_value")
            mu_value = (float(scale[0]) + float(scale[1])) / 2
        return float(mu_value)
    if mu == "data":
        return None
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


# --- the mechanism ---------------------------------------------------------------------------


def contract(f: np.ndarray, params: AbbParams) -> np.ndarray:
    """g(f) = alpha f + (1 - alpha) mu, mu fixed or the mean of f itself."""
    f = np.asarray(f, dtype=float)
    mu = np.mean(f, axis=-1, keepdims=True) if params.mu_mode == "data" else float(params.mu_value)
    return params.alpha * f + (1 - params.alpha) * mu


def bounded_scores(
    f: np.ndarray, params: AbbParams, rng: np.random.Generator, clip: tuple[float, float] | None = None
) -> np.ndarray:
    """M(D) = g(f(D)) + Z. Clipping to a box is a projection (non-expansive), so it keeps the claim."""
    out = contract(f, params) + params.sigma * rng.standard_normal(np.shape(f))
    return np.clip(out, clip[0], clip[1]) if clip is not None else out
