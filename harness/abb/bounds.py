"""Distribution-free bounds for calibrating A-BB (derivations: docs/abb.md, "Bounds").

v = f(D) - f(D') for a neighbour D' ~ T(D), re-judged (the judge's own jitter is part of v).
Every certified bound below is a threshold t with Pr[||v|| > t] <= delta_m (on an event of
probability >= 1 - delta_est over the estimation neighbours); with W = Z - Z' ~ N(0, 2 sigma^2 I_d),
exactly (no triangle inequality):

    Pr[||alpha v + W|| > tau] <= delta_m + noise_tail(alpha t)          (Lemma 0 in docs/abb.md)

- the certain cap: t = sqrt(B), B the largest ||v||^2 the score scale allows (delta_m = 0, no data);
- an upper quantile of ||v|| from an order statistic (`quantile_ucb`) or DKW (`dkw_quantile_ucb`);
- Markov on an upper confidence bound U of E||v||^2: t = sqrt(U / delta_m) (`mean_ucb`: Hoeffding,
  empirical Bernstein, or `best`, a rule fixed before the data that costs no extra union bound).
Everything is in the judge's raw score units; samples must be i.i.d. draws from T(D).
"""

from __future__ import annotations

import math

import numpy as np

from harness.errors import ConfigError, located

MEAN_METHODS = ("hoeffding", "bernstein", "best")
_WHERE = "A-BB settings (experiment.*)"


def config_error(msg: str, field: str) -> ConfigError:
    """A one-line ConfigError located at the A-BB settings, field `field` (refusals and bad settings)."""
    return ConfigError(msg, where=located(_WHERE, field=field))


_err = config_error


class Refusal(ConfigError):
    """A (tau, delta, mu, bound, alpha_min) that no data, or the measured data, can meet: the run
    makes no claim. A single run exits 2 on it; a sweep records the cell as refused and goes on."""


def refusal(msg: str, field: str) -> Refusal:
    """A one-line Refusal located at the A-BB settings, field `field`."""
    return Refusal(msg, where=located(_WHERE, field=field))


REL_TOL = 1e-12
"""The ONE float tolerance of every bound and verdict: x exceeds a limit only beyond rounding."""


def exceeds(x, limit: float, magnitude: float = 0.0):
    """x > limit beyond float rounding (elementwise): the tolerance scales with the limit and with
    the magnitude of the numbers that were subtracted to get x (scores on a 1-10 scale: ~10), so a
    full-range move computed as 0.9000000000000004 does not exceed tau = 0.9."""
    return np.asarray(x) > limit + REL_TOL * max(abs(float(limit)), abs(float(magnitude)))


# --- distances and their sure bounds -------------------------------------------------------------


def squared_distances(baseline: np.ndarray, neighbours: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per neighbour: ||f(D) - f(D')||^2 and its all-ones part ||Pv||^2 = (sum v)^2 / d."""
    f = np.asarray(baseline, dtype=float)
    v = np.atleast_2d(np.asarray(neighbours, dtype=float)) - f
    if v.shape[1] != f.shape[0]:
        raise _err(f"neighbour vectors have {v.shape[1]} items, the baseline {f.shape[0]}", "neighbours")
    return np.sum(v * v, axis=1), np.sum(v, axis=1) ** 2 / f.shape[0]


def neighbour_mode(k: int, d: int) -> str:
    """The name of a claim whose neighbours each change at most k of d items: one_item (k = 1),
    whole_set (k = d), else hamming_<k> (Hamming-k, as a score file's estimation rows can size it)."""
    return "one_item" if k == 1 else "whole_set" if k == d else f"hamming_{k}"


def distance_bounds(
    mode: str, d: int, scale: tuple[float, float], items_changed: int | None = None
) -> tuple[float, float]:
    """(B, B_par): sure bounds on ||v||^2 and ||Pv||^2 for scores in [lo, hi], r = hi - lo.

    A neighbour changes k items (k = 1 for one_item, k = d for whole_set, k for hamming_<k>), each
    by at most r: ||v||^2 <= k r^2 and ||Pv||^2 = (sum v)^2 / d <= (k r)^2 / d.
    """
    lo, hi = float(scale[0]), float(scale[1])
    if not hi > lo:
        raise _err(f"score scale must have hi > lo, got {scale}", "scale")
    named = {"one_item": 1, "whole_set": d}.get(mode)
    if named is None and mode.startswith("hamming_") and mode[len("hamming_") :].isdigit():
        named = int(mode[len("hamming_") :])
    k = items_changed if items_changed is not None else named
    if named is None or k is None or not 1 <= k <= d or (mode.startswith("hamming_") and k != named):
        raise _err(f"bad mode {mode!r} or items_changed {k} for d={d}", "mode")
    r2 = (hi - lo) ** 2
    return k * r2, k * k * r2 / d


# --- the noise: exact worst case over ||u|| <= r of Pr[||u + W|| > tau] ------------------------------


def noise_tail(radius: float, sigma: float, d: int, tau: float) -> float:
    """sup_{||u|| <= radius} Pr[||u + W|| > tau], W ~ N(0, 2 sigma^2 I_d): a noncentral chi-square tail.

    ||u + W||^2 / (2 sigma^2) ~ chi'^2_d(||u||^2 / 2 sigma^2), stochastically increasing in ||u||, so the
    sup sits at ||u|| = radius. sigma = 0: the indicator radius > tau.
    """
    if sigma <= 0:
        return float(exceeds(radius, tau))
    from scipy import stats

    s2 = 2.0 * sigma * sigma
    lam, x = radius * radius / s2, tau * tau / s2
    return float(stats.chi2.sf(x, d) if lam == 0 else stats.ncx2.sf(x, d, lam))


def radius_budget(tau: float, sigma: float, d: int, delta_b: float) -> float | None:
    """r* = the largest ||g(f(D)) - g(f(D'))|| with noise_tail(r*) <= delta_b; None if the noise alone fails."""
    if sigma <= 0:
        return float(tau)
    if noise_tail(0.0, sigma, d, tau) > delta_b:
        return None
    lo, hi = 0.0, float(tau)
    for _ in range(60):  # bisection: the tail is monotone in the radius
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if noise_tail(mid, sigma, d, tau) <= delta_b else (lo, mid)
    return lo


def sigma_room(radius: float, tau: float, d: int, delta_b: float) -> float:
    """The largest sigma with noise_tail(radius, sigma) <= delta_b (0 when radius >= tau or delta_b = 0).

    Monotone in sigma: for ||u|| < tau the set {w : ||u + w|| <= tau} is convex and contains 0, so
    shrinking the noise only enlarges the scaled set it must hit.
    """
    if delta_b <= 0 or radius >= tau:
        return 0.0
    lo, hi = 0.0, float(tau)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if noise_tail(radius, mid, d, tau) <= delta_b else (lo, mid)
    return lo


# --- quantile bounds on ||v|| -------------------------------------------------------------------------


def quantile_min_samples(delta_m: float, delta_est: float) -> int:
    """Smallest m for which an order statistic bounds the (1 - delta_m)-quantile: (1 - delta_m)^m <= delta_est."""
    return int(math.ceil(math.log(delta_est) / math.log1p(-delta_m) - 1e-12))


def quantile_rank(m: int, delta_m: float, delta_est: float) -> int | None:
    """Smallest k with Pr[Binomial(m, 1 - delta_m) >= k] <= delta_est, or None when even k = m fails.

    Pr[X_(k) < q_{1-delta_m}] <= Pr[Bin(m, 1 - delta_m) >= k] for i.i.d. X (atoms included).
    """
    if not (0 < delta_m < 1 and 0 < delta_est < 1) or m < 1:
        raise _err(
            f"need 0 < delta_m, delta_est < 1 and m >= 1, got {delta_m}, {delta_est}, {m}", "delta_split"
        )
    from scipy import stats

    ks = np.arange(1, m + 1)
    ok = stats.binom.sf(ks - 1, m, 1.0 - delta_m) <= delta_est  # sf(k - 1) = Pr[Bin >= k]
    return int(ks[np.argmax(ok)]) if ok.any() else None


def quantile_ucb(norms: np.ndarray, delta_m: float, delta_est: float) -> tuple[float, int] | None:
    """(q_hat, k): X_(k) with Pr[||v|| > q_hat] <= delta_m w.p. >= 1 - delta_est; None if m is too small."""
    x = np.sort(np.asarray(norms, dtype=float))
    k = quantile_rank(x.size, delta_m, delta_est)
    return None if k is None else (float(x[k - 1]), k)


def dkw_quantile_ucb(norms: np.ndarray, delta_m: float, delta_est: float) -> tuple[float, int] | None:
    """DKW (Massart 1990, one-sided): F >= F_m - eps everywhere, eps = sqrt(ln(1/delta_est) / 2m).

    q_hat = X_(k), k = ceil(m (1 - delta_m + eps)); None when k > m (m <= ln(1/delta_est) / (2 delta_m^2)).
    Uniform over all quantiles (delta_m could be picked after the data), hence looser for one.
    """
    x = np.sort(np.asarray(norms, dtype=float))
    m = x.size
    if m < 1 or not 0 < delta_est <= 0.5:  # Massart's one-sided form needs exp(-2 m eps^2) <= 1/2
        return None
    eps = math.sqrt(math.log(1.0 / delta_est) / (2.0 * m))
    k = int(math.ceil(m * (1.0 - delta_m + eps) - 1e-12))
    return None if k > m else (float(x[max(k, 1) - 1]), max(k, 1))


# --- confidence bounds on a mean of X in [0, bound] -------------------------------------------------


def hoeffding_ucb(mean: float, n: int, bound: float, delta: float, side: str = "upper") -> float:
    """mean +- bound sqrt(ln(1/delta) / 2n), clipped to [0, bound]."""
    w = bound * math.sqrt(math.log(1.0 / delta) / (2.0 * n))
    return float(np.clip(mean + w if side == "upper" else mean - w, 0.0, bound))


def bernstein_ucb(mean: float, var: float, n: int, bound: float, delta: float, side: str = "upper") -> float:
    """Maurer & Pontil (2009, Thm 4) scaled to [0, bound]:
    mean +- sqrt(2 V ln(2/delta) / n) + 7 bound ln(2/delta) / (3 (n - 1)), V the unbiased sample variance."""
    if n < 2:
        return float(bound) if side == "upper" else 0.0
    log = math.log(2.0 / delta)
    w = math.sqrt(2.0 * var * log / n) + 7.0 * bound * log / (3.0 * (n - 1))
    return float(np.clip(mean + w if side == "upper" else mean - w, 0.0, bound))


def bernstein_can_win(n: int, delta: float) -> bool:
    """Pre-data rule for `best`: can Bernstein at delta/2 beat Hoeffding at delta for ANY sample?

    Bernstein's width is smallest at V = 0; if even that exceeds Hoeffding's width at the full delta,
    Hoeffding alone with the whole budget dominates. Depends on (n, delta) only: no union-bound cost.
    """
    return n >= 2 and 7.0 * math.log(4.0 / delta) / (3.0 * (n - 1)) < math.sqrt(
        math.log(1.0 / delta) / (2.0 * n)
    )


def mean_ucb(
    x: np.ndarray, bound: float, delta: float, method: str = "best", side: str = "upper"
) -> tuple[float, str]:
    """(value, what was used): a (1 - delta) one-sided confidence bound on E[X], X in [0, bound] i.i.d.

    best: Hoeffding at delta when Bernstein cannot win for any data (`bernstein_can_win`), else the
    tighter of Hoeffding and Bernstein at delta/2 each (a union bound over the two).
    """
    x = np.asarray(x, dtype=float)
    n = x.size
    if n == 0 or not 0 < delta < 1:
        raise _err(f"need samples and 0 < delta < 1, got n={n}, delta={delta}", "delta_split")
    if np.any(x < -1e-12) or np.any(exceeds(x, bound)):
        raise _err(
            f"samples must lie in [0, B={bound:g}] (B bounds one neighbour surely): found "
            f"[{x.min():.4g}, {x.max():.4g}]",
            "neighbours",
        )
    mean, var = float(x.mean()), float(x.var(ddof=1)) if n > 1 else 0.0
    if method in ("hoeffding", "bernstein"):
        f = (
            hoeffding_ucb(mean, n, bound, delta, side)
            if method == "hoeffding"
            else bernstein_ucb(mean, var, n, bound, delta, side)
        )
        return f, f"{method}@{delta:.3g}"
    if method != "best":
        raise _err(f"mean_ucb must be one of {MEAN_METHODS}, got {method!r}", "mean_ucb")
    if not bernstein_can_win(n, delta):
        return hoeffding_ucb(
            mean, n, bound, delta, side
        ), f"hoeffding@{delta:.3g} (bernstein cannot win at n={n})"
    h = hoeffding_ucb(mean, n, bound, delta / 2, side)
    b = bernstein_ucb(mean, var, n, bound, delta / 2, side)
    pick = min(h, b) if side == "upper" else max(h, b)
    return pick, ("hoeffding" if pick == h else "bernstein") + f"@{delta / 2:.3g} of 2"


# --- verification statistics ---------------------------------------------------------------------


def clopper_pearson(k: int, n: int, confidence: float = 0.95, sided: str = "two") -> tuple[float, float]:
    """Exact binomial interval for k of n; sided='one' gives each end at one-sided level `confidence`."""
    if not 0 <= k <= n or n < 1:
        raise _err(f"need 0 <= k <= n, n >= 1, got k={k}, n={n}", "verify")
    from scipy import stats

    tail = (1 - confidence) / 2 if sided == "two" else 1 - confidence
    lo = 0.0 if k == 0 else float(stats.beta.ppf(tail, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - tail, k + 1, n - k))
    return lo, hi


def min_trials_to_confirm(delta: float, confidence: float = 0.95) -> int | None:
    """Fewest fresh trials whose one-sided CP upper bound can fall to delta (zero violations); None at delta 0."""
    if delta <= 0:
        return None
    return int(math.ceil(math.log(1 - confidence) / math.log1p(-delta) - 1e-12))
