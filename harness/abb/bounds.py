"""A-BB sensitivity: how far a neighbour D' moves the score vector, with confidence bounds.

v = f(D) - f(D'). Plug-in Delta-hat = sqrt(mean ||v_i||^2) (the official code), an upper confidence
bound on E||v||^2 from the bounded scale (Hoeffding or empirical Bernstein), intrinsic-jitter
removal, and the all-ones part ||Pv||^2 that a data-dependent mu lets escape the contraction.
Everything in raw score units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.errors import ConfigError, located

METHODS = ("none", "hoeffding", "bernstein")
_WHERE = "A-BB settings (experiment.*)"


def config_error(msg: str, field: str) -> ConfigError:
    """A one-line ConfigError located at the A-BB settings, field `field` (refusals and bad settings)."""
    return ConfigError(msg, where=located(_WHERE, field=field))


_err = config_error

def squared_distances(baseline: np.ndarray, neighbours: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per neighbour: ||f(D) - f(D')||^2 and its all-ones part ||Pv||^2 = (sum v)^2 / d."""
    f = np.asarray(baseline, dtype=float)
    v = np.atleast_2d(np.asarray(neighbours, dtype=float)) - f
    if v.shape[1] != f.shape[0]:
        raise _err(f"neighbour vectors have {v.shape[1]} items, the baseline {f.shape[0]}", "neighbours")
    return np.sum(v * v, axis=1), np.sum(v, axis=1) ** 2 / f.shape[0]


def distance_bounds(mode: str, d: int, scale: tuple[float, float], items_changed: int | None = None) -> tuple[float, float]:
    """(B, B_par): bounds on ||v||^2 and ||Pv||^2 for scores in [lo, hi], r = hi - lo.

    A neighbour changes k items (k = 1 for one_item/Hamming-1, k = d for whole_set), each by at
    most r: ||v||^2 <= k r^2 and ||Pv||^2 = (sum v)^2 / d <= (k r)^2 / d.
    """
    lo, hi = float(scale[0]), float(scale[1])
    if not hi > lo:
        raise _err(f"score scale must have hi > lo, got {scale}", "scale")
    k = items_changed if items_changed is not None else (1 if mode == "one_item" else d)
    if mode not in ("one_item", "whole_set") or not 1 <= k <= d:
        raise _err(f"bad mode {mode!r} or items_changed {k} for d={d}", "mode")
    r2 = (hi - lo) ** 2
    return k * r2, k * k * r2 / d


def rms_sensitivity(diffs_sq: np.ndarray) -> float:
    """Plug-in Delta-hat = sqrt(mean ||f(D) - f(D'_i)||^2)."""
    x = np.asarray(diffs_sq, dtype=float)
    return float(math.sqrt(max(0.0, float(np.mean(x))))) if x.size else 0.0


def remove_jitter(delta: float, delta_intrinsic: float) -> float:
    """Delta_ctx = sqrt(max(0, Delta^2 - Delta_intrinsic^2)): the part due to the context change."""
    return float(math.sqrt(max(0.0, delta * delta - delta_intrinsic * delta_intrinsic)))


def mean_bound(x: np.ndarray, bound: float, delta: float, method: str, side: str = "upper") -> float:
    """A (1 - delta) confidence bound on E[X] for i.i.d. X in [0, bound].

    hoeffding: mean +- bound sqrt(ln(1/delta) / 2n).
    bernstein (Maurer & Pontil 2009, Thm 4, rescaled from [0, 1]): mean +- sqrt(2 V ln(2/delta) / n)
    + 7 bound ln(2/delta) / (3(n - 1)), V the unbiased sample variance (n >= 2).
    none: the plug-in mean. The result is clipped to [0, bound].
    """
    x = np.asarray(x, dtype=float)
    n = x.size
    if n == 0:
        return float(bound) if side == "upper" else 0.0
    mean = float(np.mean(x))
    if method == "none":
        return mean
    if not 0 < delta < 1:
        raise _err(f"the estimation budget must be in (0, 1) for a {method} bound, got {delta}", "delta_est")
    if method == "hoeffding":
        width = bound * math.sqrt(math.log(1 / delta) / (2 * n))
    elif method == "bernstein":
        if n < 2:
            return float(bound) if side == "upper" else 0.0
        log = math.log(2 / delta)
        width = math.sqrt(2 * float(np.var(x, ddof=1)) * log / n) + 7 * bound * log / (3 * (n - 1))
    else:
        raise _err(f"method must be one of {METHODS}, got {method!r}", "method")
    value = mean + width if side == "upper" else mean - width
    return float(min(max(value, 0.0), bound))


@dataclass(frozen=True)
class Sensitivity:
    """What the neighbours say about E||f(D) - f(D')||^2, in raw score units."""

    n: int
    """Neighbours used for estimation."""
    method: str
    """"none" (plug-in, as the official code), "hoeffding" or "bernstein"."""
    bound: float
    """B: the largest possible ||v||^2 (see distance_bounds)."""
    delta_est: float
    """Failure budget of the confidence bounds (shared equally among them)."""
    plugin: float
    """sqrt(mean ||v||^2)."""
    intrinsic: float | None
    """sqrt(mean ||f(D) - f(D)_rejudged||^2) when jitter was measured, else None."""
    ctx: float
    """Plug-in with jitter removed (equals plugin when no jitter was given)."""
    ucb: float
    """sqrt of the upper bound U on E||v||^2 that calibration uses (= ctx for method none)."""
    parallel_plugin: float | None
    """sqrt(mean ||Pv||^2) (all-ones part), needed only for a data-dependent mu."""
    parallel_ucb: float | None
    """sqrt of the upper bound U_par on E||Pv||^2."""


def estimate_sensitivity(
    diffs_sq: np.ndarray,
    *,
    bound: float,
    method: str = "bernstein",
    delta_est: float = 0.0,
    intrinsic_sq: np.ndarray | None = None,
    parallel_sq: np.ndarray | None = None,
    parallel_bound: float | None = None,
) -> Sensitivity:
    """Plug-in, jitter-removed and upper-confidence sensitivities from neighbour distances.

    With jitter, U = UCB(E||v||^2) - LCB(E||jitter||^2) (both at their share of delta_est), so
    the removal does not spend the guarantee.
    """
    if method not in METHODS:
        raise _err(f"method must be one of {METHODS}, got {method!r}", "method")
    x = np.asarray(diffs_sq, dtype=float)
    if x.size == 0 or np.any(~np.isfinite(x)) or np.any(x < 0):
        raise _err("need at least one finite, non-negative squared distance", "neighbours")
    n_bounds = 1 + (intrinsic_sq is not None) + (parallel_sq is not None)
    share = delta_est / n_bounds
    plugin = rms_sensitivity(x)
    upper = mean_bound(x, bound, share, method)
    intrinsic = None
    ctx = plugin
    if intrinsic_sq is not None:
        j = np.asarray(intrinsic_sq, dtype=float)
        intrinsic = rms_sensitivity(j)
        ctx = remove_jitter(plugin, intrinsic)
        upper = max(0.0, upper - mean_bound(j, bound, share, method, side="lower"))
    par_plug = par_ucb = None
    if parallel_sq is not None:
        p = np.asarray(parallel_sq, dtype=float)
        b_par = float(parallel_bound if parallel_bound is not None else bound)
        par_plug = rms_sensitivity(p)
        par_ucb = math.sqrt(mean_bound(p, b_par, share, method))
    return Sensitivity(
        n=int(x.size), method=method, bound=float(bound), delta_est=float(delta_est) if method != "none" else 0.0,
        plugin=plugin, intrinsic=intrinsic, ctx=ctx, ucb=math.sqrt(upper),
        parallel_plugin=par_plug, parallel_ucb=par_ucb,
    )
