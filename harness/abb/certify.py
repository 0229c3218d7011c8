"""Which contraction alpha the neighbour data certify, and which bound won (docs/abb.md, "Bounds").

Every candidate is a `Bound`: a threshold t on ||v|| (and t_par on the all-ones part ||Pv|| when mu
is data-dependent) that holds except with probability delta_m, on an event of probability
>= 1 - delta_est over the estimation neighbours. The contracted distance is then at most
radius(alpha) = sqrt(alpha^2 t^2 + (1 - alpha^2) t_par^2) (exact for g(x) = alpha x + (1 - alpha) mu:
||g(x) - g(x')||^2 = alpha^2 ||v||^2 + (1 - alpha^2) ||Pv||^2 for a data mu, alpha^2 ||v||^2 for a fixed one).

`choose_alpha` evaluates the certain cap (free), the order-statistic quantile, DKW and Markov on a
mean UCB, splits delta_est among the data-driven ones by a rule that looks at (m, B, deltas) only,
and returns the largest certified alpha. The plug-in (Markov on the sample mean, the official code)
is always reported and never certifies: a run asking for it gets an ESTIMATE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from harness.abb.bounds import (
    config_error,
    dkw_quantile_ucb,
    exceeds,
    mean_ucb,
    quantile_min_samples,
    quantile_rank,
    quantile_ucb,
    radius_budget,
    refusal,
)

BOUNDS = ("certain_cap", "quantile", "dkw", "markov")
"""Certified families `choose_alpha` can evaluate."""
CHOICES = ("auto", *BOUNDS, "plugin")
"""experiment.bound: auto (every certified family, the largest alpha wins), one family, or plugin."""
KINDS = ("certified", "estimate", "none")
"""certified: a bound holds; estimate: the plug-in (no confidence bound); none: nothing measured."""


@dataclass(frozen=True)
class Bound:
    """One candidate: Pr[||v|| > threshold] <= delta_m, valid w.p. >= 1 - delta_est over the data."""

    name: str
    """certain_cap | quantile | dkw | markov_<mean method> | plugin."""
    alpha: float
    """Largest contraction this bound certifies at sigma = 0 (0 when none works)."""
    threshold: float
    """t: ||v|| above t has probability <= delta_m (raw score units)."""
    threshold_parallel: float
    """t_par for the all-ones part ||Pv|| (0 for a fixed mu, which it cannot move)."""
    delta_m: float
    """Failure probability spent on the claim (0 for the certain cap)."""
    delta_est: float
    """Confidence budget spent on the estimation data (0 for the cap and the plug-in)."""
    certified: bool
    """False for the plug-in: an estimate, no guarantee."""
    feasible: bool = True
    """False when even alpha = 0 leaves radius > tau (a data mu whose movement alone exceeds tau)."""
    note: str = ""

    def radius(self, alpha: float) -> float:
        """Bound on ||g(f(D)) - g(f(D'))|| (except w.p. delta_m) at contraction alpha."""
        return math.sqrt(alpha * alpha * self.threshold**2 + (1 - alpha * alpha) * self.threshold_parallel**2)


@dataclass(frozen=True)
class Choice:
    """The alpha `choose_alpha` returns and why."""

    alpha: float
    """Largest alpha the winner allows at sigma = 0 (alpha_max of the run)."""
    winner: Bound
    candidates: tuple[Bound, ...]
    """Every bound evaluated (the plug-in included, marked uncertified)."""
    kind: str
    """certified | estimate (plug-in) | none (every estimation neighbour was a no-op)."""
    claim: str
    """total (realised re-judgments, jitter included) | context (the judge's MEAN score; check: not_applicable)."""
    delta_est: float
    """Confidence budget spent on the data (split equally among the data-driven bounds kept)."""
    m: int
    """Estimation neighbours."""
    allowed: tuple[str, ...] = field(default=BOUNDS)
    """Families allowed to win (experiment.bound)."""
    note: str = ""
    rms: float = math.nan
    """Plug-in Delta-hat = sqrt(mean ||v||^2) (the official code's sensitivity; an estimate)."""
    rms_ucb: float | None = None
    """sqrt of a (1 - delta_est) upper confidence bound on E||v||^2 (reported; it certifies only via Markov)."""


def family(name: str) -> str:
    """The experiment.bound family of a candidate's name (markov_best -> markov)."""
    return name if name == "certain_cap" else name.split("_")[0]


def alpha_for(threshold: float, threshold_par: float, r_star: float | None) -> tuple[float, bool]:
    """(alpha, feasible): the largest alpha in [0, 1] with radius(alpha) <= r*."""
    if r_star is None or threshold_par > r_star:
        return 0.0, False
    if threshold <= r_star:
        return 1.0, True
    return math.sqrt((r_star**2 - threshold_par**2) / (threshold**2 - threshold_par**2)), True


def _bound(name, t, t_par, r_star, delta_m, delta_est, certified=True, note="") -> Bound:
    a, ok = alpha_for(t, t_par, r_star)
    return Bound(name, a, float(t), float(t_par), float(delta_m), float(delta_est), certified, ok, note)


def _feasible(b: str, m: int, B: float, delta_m: float, share: float, method: str, beat_cap: bool) -> bool:
    """Can family b, at confidence budget `share`, be valid (and, next to the cap, beat it for SOME data)?"""
    if b == "quantile":
        return quantile_rank(m, delta_m, share) is not None  # m >= quantile_min_samples
    if b == "dkw":
        return share <= 0.5 and m > math.log(1 / share) / (2 * delta_m * delta_m)
    # all-zero data give the smallest UCB; if even that is >= delta_m B, alpha <= the certain cap
    return not beat_cap or mean_ucb(np.zeros(m), B, share, method)[0] < delta_m * B


def kept_bounds(
    allowed, m, B, delta_m, delta_est, method, *, data_mu=False, context=False
) -> tuple[list[str], float]:
    """Pre-data rule: which data-driven families share delta_est (a function of m, B and the deltas only).

    Greedy in the order quantile, markov, dkw: a family joins if every member stays feasible at
    delta_est / (members). No data are looked at, so the split needs no further union bound.
    Quantiles bound ||v|| only: not with a data mu, and they do not subtract jitter (context claim).
    """
    order = [
        b
        for b in ("quantile", "markov", "dkw")
        if b in allowed and not ((context or data_mu) and b != "markov")
    ]
    beat_cap = "certain_cap" in allowed
    kept: list[str] = []
    if delta_est <= 0:
        return kept, 0.0
    for b in order:
        trial = kept + [b]
        if all(_feasible(x, m, B, delta_m, delta_est / len(trial), method, beat_cap) for x in trial):
            kept = trial
    return kept, (delta_est / len(kept) if kept else 0.0)


def _markov(sq, par, B, B_par, delta_m, share, method, r_star, jitter_sq) -> Bound:
    """Markov on a UCB U of E||v||^2 (minus an LCB of matched jitter for the context claim)."""
    parts = 1 + (par is not None) + (jitter_sq is not None)
    u, how = mean_ucb(sq, B, share / parts, method)
    if jitter_sq is not None:
        lcb, h2 = mean_ucb(jitter_sq, B, share / parts, method, side="lower")
        u, how = max(0.0, u - lcb), f"{how} minus jitter LCB {lcb:.4g} ({h2})"
    u_par = mean_ucb(par, B_par, share / parts, method)[0] if par is not None else 0.0
    return _bound(
        f"markov_{method}",
        math.sqrt(u / delta_m),
        math.sqrt(u_par / delta_m),
        r_star,
        delta_m,
        share,
        note=f"U={u:.4g} ({how})" + (f", U_par={u_par:.4g}" if par is not None else ""),
    )


def choose_alpha(
    tau: float,
    B: float,
    norms_sq: np.ndarray,
    *,
    delta_m: float,
    delta_est: float,
    allowed: tuple[str, ...] = BOUNDS,
    method: str = "best",
    sigma: float = 0.0,
    d: int = 1,
    delta_b: float = 0.0,
    parallel_sq: np.ndarray | None = None,
    B_par: float | None = None,
    jitter_sq: np.ndarray | None = None,
    jitter_coords: int | None = None,
    neighbour_coords: int | None = None,
    all_noop: bool = False,
) -> Choice:
    """The largest certified alpha over the allowed families, and which bound won.

    norms_sq: ||f(D) - f(D'_i)||^2 of m i.i.d. estimation neighbours, each <= B surely.
    parallel_sq (with B_par): their all-ones parts, for a data-dependent mu.
    jitter_sq switches to the CONTEXT claim: ||f(D) - f(D)_rejudged||^2 of the SAME coordinates a
    neighbour re-judges (jitter_coords must equal neighbour_coords; Markov only).
    allowed=("plugin",): the official estimate, kind "estimate". all_noop: no edit changed any input,
    the data measured nothing: kind "none" (the cap's alpha is applied, nothing is claimed).
    """
    sq = np.asarray(norms_sq, dtype=float)
    if sq.size == 0 or not np.all(np.isfinite(sq)) or np.any(sq < 0) or np.any(exceeds(sq, B)):
        raise config_error(
            f"need finite squared distances in [0, B={B:g}] (B bounds every neighbour surely); "
            f"got {sq.size} in [{np.min(sq, initial=0):.4g}, {np.max(sq, initial=0):.4g}]",
            "neighbours",
        )
    bad = [b for b in allowed if b not in (*BOUNDS, "plugin")]
    if bad or not allowed:
        raise config_error(f"bound must be one of {CHOICES}, got {bad or allowed}", "bound")
    context, data_mu = jitter_sq is not None, parallel_sq is not None
    if context and (jitter_coords is None or jitter_coords != neighbour_coords):
        raise config_error(
            f"jitter re-judged {jitter_coords} coordinates per sample, a neighbour {neighbour_coords}: "
            "subtract only jitter measured on the coordinates a neighbour re-judges",
            "jitter",
        )
    if context and data_mu:
        raise config_error(
            "jitter removal (the context claim) is not supported with mu=data", "jitter.remove"
        )
    par = np.asarray(parallel_sq, dtype=float) if data_mu else None
    b_par = float(B_par if B_par is not None else B) if data_mu else 0.0
    r_star = radius_budget(tau, sigma, d, delta_b)
    mean_par = float(par.mean()) if data_mu else 0.0
    plug = _bound(
        "plugin",
        math.sqrt(sq.mean() / delta_m),
        math.sqrt(mean_par / delta_m),
        r_star,
        delta_m,
        0.0,
        certified=False,
        note="Markov on the plug-in mean: an estimate, not a bound",
    )
    cap = _bound("certain_cap", math.sqrt(B), math.sqrt(b_par), r_star, 0.0, 0.0, note="||v||^2 <= B surely")
    cands = [plug, cap]
    stats = {
        "m": int(sq.size),
        "allowed": tuple(allowed),
        "rms": math.sqrt(float(sq.mean())),
        "rms_ucb": math.sqrt(mean_ucb(sq, B, delta_est, method)[0]) if 0 < delta_est < 1 else None,
    }
    if all_noop:
        note = (
            f"all {sq.size} estimation neighbours left their inputs unchanged (e.g. swap with orders=both): "
            "they measured nothing, so nothing about T(D) is certified; the cap's alpha is applied"
        )
        return Choice(cap.alpha, cap, tuple(cands), "none", "total", 0.0, note=note, **stats)
    if tuple(allowed) == ("plugin",):
        return Choice(
            plug.alpha,
            plug,
            tuple(cands),
            "estimate",
            "context" if context else "total",
            0.0,
            note="estimate (no confidence bound)",
            **stats,
        )
    kept, share = kept_bounds(
        allowed, sq.size, B, delta_m, delta_est, method, data_mu=data_mu, context=context
    )
    norms = np.sqrt(sq)
    for b in kept:
        if b == "markov":
            cands.append(_markov(sq, par, B, b_par, delta_m, share, method, r_star, jitter_sq))
            continue
        q = (quantile_ucb if b == "quantile" else dkw_quantile_ucb)(norms, delta_m, share)
        cands.append(_bound(b, q[0], 0.0, r_star, delta_m, share, note=f"X_({q[1]}) of {sq.size}"))
    eligible = [c for c in cands if c.certified and family(c.name) in allowed]
    if not eligible:
        raise refusal(_why_none(allowed, sq.size, delta_m, delta_est, data_mu, context), "bound")
    # ties go to the bound that spends least (the cap: delta_m = 0)
    win = max(eligible, key=lambda c: (c.feasible, c.alpha, -c.delta_m, -c.delta_est, -c.threshold))
    # The cap subtracts nothing: it holds surely for realised re-judgments too, so its claim is "total".
    return Choice(
        win.alpha,
        win,
        tuple(cands),
        "certified",
        "context" if context and win is not cap else "total",
        delta_est if kept else 0.0,
        **stats,
    )


def _why_none(allowed, m, delta_m, delta_est, data_mu, context) -> str:
    if "quantile" in allowed and (data_mu or context):
        return "the quantile bound bounds ||v|| only: it works with mu=fixed and without jitter removal"
    if "quantile" in allowed and delta_est > 0:
        return (
            f"the quantile bound needs m >= {quantile_min_samples(delta_m, delta_est)} estimation neighbours "
            f"at delta_m={delta_m:.3g}, delta_est={delta_est:.3g}; got {m} (or use bound=auto)"
        )
    return f"no certified bound among {list(allowed)} at m={m}, delta_est={delta_est:.3g}; use bound=auto"


def choice_json(c: Choice) -> dict:
    """The record of a choice for abb.json (every candidate with what it spent)."""

    def one(b: Bound) -> dict:
        return {
            "name": b.name,
            "alpha": b.alpha,
            "threshold": b.threshold,
            "threshold_parallel": b.threshold_parallel,
            "delta_m": b.delta_m,
            "delta_est": b.delta_est,
            "certified": b.certified,
            "feasible": b.feasible,
            "note": b.note,
        }

    return {
        "kind": c.kind,
        "claim": c.claim,
        "winner": one(c.winner),
        "candidates": [one(b) for b in c.candidates],
        "allowed": list(c.allowed),
        "delta_est_spent": c.delta_est,
        "m": c.m,
        "note": c.note,
        "rms": c.rms,
        "rms_ucb": c.rms_ucb,
    }
