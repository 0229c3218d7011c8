"""A-BB check and record: verify on fresh neighbours (Clopper-Pearson), abb.json, run_abb.

`verify` counts ||M(D) - M(D')|| > tau over neighbours NOT used for estimation, with fresh noise
per trial; `AbbResult.to_json` is abb.json's core; `run_abb` estimates, calibrates, applies, checks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness.abb.bounds import config_error as _err
from harness.abb.bounds import distance_bounds, estimate_sensitivity, squared_distances
from harness.abb.mechanism import (
    AbbParams,
    DeltaSplit,
    bounded_scores,
    calibrate,
    contract,
)
from harness.io import write_json_atomic


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided binomial interval for k successes in n trials."""
    from scipy.stats import beta

    tail = (1 - confidence) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - tail, k + 1, n - k))
    return lo, hi


@dataclass(frozen=True)
class Verification:
    """How often ||M(D) - M(D')|| > tau on neighbours NOT used for estimation, with fresh noise."""

    n_neighbours: int
    draws: int
    """Noise pairs (Z, Z') per neighbour; trials are independent only when draws == 1."""
    n_trials: int
    violations: int
    rate: float
    cp_low: float
    cp_high: float
    confidence: float
    delta: float
    pass_point: bool
    """rate <= delta."""
    pass_upper: bool
    """cp_high <= delta: the data rule out a rate above delta (needs enough trials)."""
    mean_distance: float
    max_distance: float


def verify(
    baseline: np.ndarray,
    fresh: np.ndarray,
    params: AbbParams,
    rng: np.random.Generator,
    *,
    draws: int = 1,
    confidence: float = 0.95,
) -> Verification:
    """Count ||g(f(D)) + Z - g(f(D')) - Z'|| > tau over fresh neighbours and fresh noise."""
    f = np.asarray(baseline, dtype=float)
    fresh = np.atleast_2d(np.asarray(fresh, dtype=float))
    if fresh.shape[1] != f.shape[0] or draws < 1:
        raise _err(f"fresh neighbours have shape {fresh.shape} for d={f.shape[0]}, draws={draws}", "fresh")
    gf = contract(f, params)
    chunks = []
    for start in range(0, fresh.shape[0], 512):  # bounded memory for d ~ 10^4
        rows = fresh[start : start + 512]
        mu = rows.mean(axis=1, keepdims=True) if params.mu_mode == "data" else params.mu_value
        diff = np.repeat(gf - (params.alpha * rows + (1 - params.alpha) * mu), draws, axis=0)
        if params.sigma > 0:
            diff = diff + params.sigma * (rng.standard_normal(diff.shape) - rng.standard_normal(diff.shape))
        chunks.append(np.linalg.norm(diff, axis=1))
    dist = np.concatenate(chunks)
    k, n = int(np.sum(dist > params.tau)), dist.size
    lo, hi = clopper_pearson(k, n, confidence)
    delta = params.split.total
    return Verification(
        n_neighbours=fresh.shape[0], draws=draws, n_trials=n, violations=k, rate=k / n,
        cp_low=lo, cp_high=hi, confidence=confidence, delta=delta,
        pass_point=k / n <= delta, pass_upper=hi <= delta,
        mean_distance=float(dist.mean()), max_distance=float(dist.max()),
    )


# --- result record ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AbbResult:
    """Everything abb.json records about one calibrated, applied and (optionally) checked run."""

    params: AbbParams
    mode: str
    """"one_item" (Hamming-1) or "whole_set"."""
    n_neighbours: int
    scale: tuple[float, float] | None
    verification: Verification | None = None

    def to_json(self) -> dict:
        p, s = self.params, self.params.sensitivity
        claimed = p.sigma_mode != "dp"
        total = p.markov_term + p.noise_term
        if claimed:
            statement = (f"w.p. >= 1 - {p.split.est:.3g} over the estimation neighbours, "
                         f"Pr[||M(D) - M(D')|| > {p.tau:g}] <= {p.split.markov + p.split.noise:.3g}")
        else:
            statement = (f"DP-style: sigma calibrated for epsilon={p.dp_epsilon} with sensitivity bound "
                         f"{p.markov_term:.4g}; the tau-distance claim is not made")
        return {
            "units": "raw judge score units throughout (tau, mu, sigma, sensitivities)",
            "tau": p.tau,
            "delta": asdict(p.split),
            "d": p.d,
            "mode": self.mode,
            "scale": list(self.scale) if self.scale else None,
            "n_neighbours": self.n_neighbours,
            "sensitivity": asdict(s),
            "alpha": p.alpha,
            "alpha_max": p.alpha_max,
            "mu": {"mode": p.mu_mode, "value": p.mu_value},
            "sigma": p.sigma,
            "sigma_max": p.sigma_max,
            "sigma_mode": p.sigma_mode,
            "guarantee": {
                "kind": "distance" if claimed else "dp",
                "markov_term": p.markov_term,
                "noise_term": p.noise_term,
                "c_d": p.c_d if math.isfinite(p.c_d) else None,
                "total": total,
                "holds": bool(claimed and total <= p.tau * (1 + 1e-9)),
                "dp_epsilon": p.dp_epsilon,
                "statement": statement,
                "noise_note": "noise never helps the distance claim; sigma = 0 has the most margin",
            },
            "verification": asdict(self.verification) if self.verification else None,
        }


def write_json(path: str | Path, data: dict) -> None:
    """Write abb.json atomically, creating the folder."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data)


def run_abb(
    baseline: np.ndarray,
    neighbours: np.ndarray,
    *,
    tau: float,
    split: DeltaSplit,
    mode: str,
    scale: tuple[float, float],
    rng: np.random.Generator,
    method: str = "bernstein",
    intrinsic: np.ndarray | None = None,
    fresh: np.ndarray | None = None,
    draws: int = 1,
    bounds: tuple[float, float] | None = None,
    clip: tuple[float, float] | None = None,
    **calibration,
) -> tuple[AbbResult, np.ndarray]:
    """The whole A-BB step: estimate, calibrate, apply M(D), verify on fresh neighbours.

    `neighbours` (m x d) are f(D'_i) for estimation; `intrinsic` (r x d) optional re-judgments of
    the UNCHANGED set (jitter); `fresh` (n x d) held-out neighbours for verification.
    `bounds` = (B, B_par) overrides `distance_bounds(mode, d, scale)` when the score function
    spreads one edited input over several coordinates (e.g. win rates within a document); `clip`
    projects M(D) onto a box (non-expansive, keeps the claim).
    `calibration` goes to `calibrate` (mu, mu_value, alpha, alpha_fraction, alpha_min, sigma_mode, ...).
    """
    f = np.asarray(baseline, dtype=float)
    d = f.shape[0]
    b, b_par = bounds if bounds is not None else distance_bounds(mode, d, scale)
    sq, par = squared_distances(f, neighbours)
    jitter = None if intrinsic is None else squared_distances(f, intrinsic)[0]
    sens = estimate_sensitivity(
        sq, bound=b, method=method, delta_est=split.est, intrinsic_sq=jitter,
        parallel_sq=par if calibration.get("mu") == "data" else None, parallel_bound=b_par,
    )
    params = calibrate(sens, tau=tau, split=split, d=d, scale=scale, **calibration)
    scores = bounded_scores(f, params, rng, clip=clip)
    check = verify(f, fresh, params, rng, draws=draws) if fresh is not None else None
    return AbbResult(params, mode, sens.n, tuple(scale), check), scores
