"""Model rankings from item scores, and how much of the ranking signal a bounded score keeps.

Scores are per (model, item) in raw units on a scale (lo, hi) where HIGHER means the model's
answer is better than the baseline's (Arena-Hard's "A = baseline, B = model" verdicts mapped
A>>B=1 ... B>>A=5 have this orientation). A score becomes a pseudo-battle against the baseline
whose outcome is the win probability (s - lo) / (hi - lo); Bradley-Terry ratings are fitted by
Newton's method on the soft-label logistic likelihood and reported on the Elo scale, anchored at
the baseline. Bootstrap intervals resample groups (questions) with a seeded generator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import ConfigError, located

ELO_SCALE = 400 / math.log(10)
"""Elo points per natural-log unit of odds."""


def model_means(scores: Sequence[float], models: Sequence[str]) -> dict[str, float]:
    """Mean score per model, models in order of first appearance."""
    s = np.asarray(scores, dtype=float)
    names = list(models)
    if s.shape[0] != len(names):
        raise ConfigError(
            f"{s.shape[0]} scores for {len(names)} model labels", where=located("ranking", field="models")
        )
    out: dict[str, list[float]] = {}
    for name, v in zip(names, s):
        out.setdefault(name, []).append(float(v))
    return {k: float(np.mean(v)) for k, v in out.items()}


def order(values: dict[str, float]) -> list[str]:
    """Names from best to worst."""
    return sorted(values, key=lambda k: -values[k])


@dataclass(frozen=True)
class Battles:
    """Weighted soft-outcome battles: Pr(a beats b) observed as y."""

    names: tuple[str, ...]
    a: np.ndarray
    """Index into names of the first player of each battle."""
    b: np.ndarray
    y: np.ndarray
    """Outcome in [0, 1] for player a (1 = a won; fractional = a win probability)."""
    groups: np.ndarray
    """Bootstrap unit of each battle (e.g. the question index)."""
    weight: np.ndarray


def make_battles(
    a: Sequence[str], b: Sequence[str], y: Sequence[float], groups: Sequence[object] | None = None
) -> Battles:
    """Battles from name pairs and outcomes; each battle its own group unless groups are given."""
    names = tuple(dict.fromkeys(list(a) + list(b)))
    idx = {n: i for i, n in enumerate(names)}
    yy = np.asarray(y, dtype=float)
    if not (len(a) == len(b) == yy.size) or np.any((yy < 0) | (yy > 1)):
        raise ConfigError(
            "battles need equal-length a, b, y with y in [0, 1]", where=located("ranking", field="y")
        )
    g = (
        np.arange(yy.size)
        if groups is None
        else np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)[1]
    )
    return Battles(
        names,
        np.array([idx[n] for n in a]),
        np.array([idx[n] for n in b]),
        yy,
        np.asarray(g),
        np.ones(yy.size),
    )


def pseudo_battles(
    scores: Sequence[float],
    models: Sequence[str],
    baseline: str,
    scale: tuple[float, float],
    groups: Sequence[object] | None = None,
) -> Battles:
    """One battle per (model, item) score against the baseline, outcome (s - lo) / (hi - lo)."""
    lo, hi = scale
    s = np.asarray(scores, dtype=float)
    p = np.clip((s - lo) / (hi - lo), 0.0, 1.0)  # noise may push a bounded score off the scale
    keep = [i for i, m in enumerate(models) if m != baseline]
    return make_battles(
        [models[i] for i in keep],
        [baseline] * len(keep),
        p[keep],
        None if groups is None else [groups[i] for i in keep],
    )


def fit_bradley_terry(
    battles: Battles,
    anchor: str,
    *,
    anchor_rating: float = 1000.0,
    weight: np.ndarray | None = None,
    ridge: float = 1e-4,
    max_iter: int = 100,
) -> dict[str, float]:
    """Elo ratings by Newton's method on the weighted soft-label BT log-likelihood (+ small ridge)."""
    if anchor not in battles.names:
        raise ConfigError(f"anchor {anchor!r} is in no battle", where=located("ranking", field="baseline"))
    k = len(battles.names)
    ai = battles.names.index(anchor)
    w = battles.weight if weight is None else weight
    x = np.zeros((battles.y.size, k))
    x[np.arange(battles.y.size), battles.a] += 1.0
    x[np.arange(battles.y.size), battles.b] -= 1.0
    x = np.delete(x, ai, axis=1)  # the anchor's rating is fixed at 0 log-odds
    theta = np.zeros(k - 1)
    for _ in range(max_iter):
        p = 1 / (1 + np.exp(-(x @ theta)))
        grad = x.T @ (w * (battles.y - p)) - ridge * theta
        hess = (x * (w * p * (1 - p))[:, None]).T @ x + ridge * np.eye(k - 1)
        step = np.linalg.solve(hess, grad)
        theta += step
        if np.max(np.abs(step)) < 1e-10:
            break
    full = np.insert(theta, ai, 0.0)
    return {n: float(anchor_rating + ELO_SCALE * t) for n, t in zip(battles.names, full)}


def bootstrap_elo(
    battles: Battles, anchor: str, *, rounds: int = 100, seed: int = 0, confidence: float = 0.95, **fit
) -> dict[str, dict[str, float]]:
    """Point Elo plus percentile intervals from `rounds` group-bootstrap refits (seeded)."""
    rng = np.random.default_rng(seed)
    point = fit_bradley_terry(battles, anchor, **fit)
    n_groups = int(battles.groups.max()) + 1
    draws = []
    for _ in range(rounds):
        counts = np.bincount(rng.integers(0, n_groups, n_groups), minlength=n_groups)
        draws.append(
            fit_bradley_terry(battles, anchor, weight=battles.weight * counts[battles.groups], **fit)
        )
    tail = (1 - confidence) / 2 * 100
    out = {}
    for n in battles.names:
        vals = np.array([dr[n] for dr in draws])
        out[n] = {
            "elo": point[n],
            "lo": float(np.percentile(vals, tail)),
            "hi": float(np.percentile(vals, 100 - tail)),
        }
    return out


def win_rates(elo: dict[str, float], baseline: str) -> dict[str, float]:
    """Expected win rate of each model against the baseline from Elo ratings."""
    return {n: 1 / (1 + 10 ** ((elo[baseline] - r) / 400)) for n, r in elo.items()}


def retained_signal(original: Sequence[float], bounded: Sequence[float]) -> dict[str, float]:
    """Pearson, Spearman, Kendall between original and bounded values, and the variance change."""
    from scipy.stats import kendalltau, spearmanr

    x, y = np.asarray(original, dtype=float), np.asarray(bounded, dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise ConfigError(
            f"need two equal-length vectors of >= 2 values, got {x.shape} and {y.shape}",
            where=located("ranking", field="bounded"),
        )
    flat = np.std(x) == 0 or np.std(y) == 0
    var_x = float(np.var(x))
    ratio = float(np.var(y) / var_x) if var_x > 0 else math.nan
    return {
        "pearson": math.nan if flat else float(np.corrcoef(x, y)[0, 1]),
        "spearman": math.nan if flat else float(spearmanr(x, y).statistic),
        "kendall": math.nan if flat else float(kendalltau(x, y).statistic),
        "variance_ratio": ratio,
        "variance_reduction": 1 - ratio if math.isfinite(ratio) else math.nan,
        "n": int(x.size),
    }


def signal_report(
    original: Sequence[float], bounded: Sequence[float], models: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Retained signal per model (means over items) and per item."""
    mo, mb = model_means(original, models), model_means(bounded, models)
    names = list(mo)
    return {
        "per_model": retained_signal([mo[n] for n in names], [mb[n] for n in names]),
        "per_item": retained_signal(original, bounded),
    }
