"""Calibration of P(A) against human preferences: ECE (equal-width bins), Brier, NLL, accuracy."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from harness.errors import ConfigError
from harness.metrics.views import EPS, finite
from harness.records import Judgment


def calibration_pairs(judgments: Sequence[Judgment]) -> tuple[np.ndarray, np.ndarray]:
    """(P(A), label) for judgments with a human preference: gold_a when present, otherwise
    human_a > human_b (1) or < (0); ties, missing humans and NaN P(A) are left out."""
    ps, ys = [], []
    for j in judgments:
        if not finite(j.p_a):
            continue
        if j.gold_a is not None:
            label = 1.0 if j.gold_a else 0.0
        elif finite(j.human_a) and finite(j.human_b) and j.human_a != j.human_b:
            label = 1.0 if j.human_a > j.human_b else 0.0  # type: ignore[operator]
        else:
            continue
        ps.append(j.p_a)
        ys.append(label)
    return np.array(ps, dtype=float), np.array(ys, dtype=float)


def calibration(judgments: Sequence[Judgment], bins: int = 10) -> dict[str, float | int]:
    """ECE (equal-width bins on P(A), bin k = [k/B, (k+1)/B), last bin closed, weighted by
    count), Brier, NLL (p clipped to [EPS, 1-EPS]), accuracy (P(A) = 0.5 scores half) and n."""
    if not isinstance(bins, int) or bins < 1:
        raise ConfigError(f"calibration bins must be a positive integer, got {bins!r}")
    return calibration_arrays(*calibration_pairs(judgments), bins=bins)


def calibration_arrays(p: np.ndarray, y: np.ndarray, bins: int = 10) -> dict[str, float | int]:
    """`calibration` of aligned P(A) and label arrays (pairs without a label already left out)."""
    if not isinstance(bins, int) or bins < 1:
        raise ConfigError(f"calibration bins must be a positive integer, got {bins!r}")
    n = int(p.size)
    if n == 0:
        return {"ece": math.nan, "brier": math.nan, "nll": math.nan, "accuracy": math.nan, "n": 0}
    idx = np.minimum((p * bins).astype(int), bins - 1)
    ece = 0.0
    for b in np.unique(idx):
        sel = idx == b
        ece += sel.sum() / n * abs(y[sel].mean() - p[sel].mean())
    pc = np.clip(p, EPS, 1 - EPS)
    nll = -(y * np.log(pc) + (1 - y) * np.log(1 - pc)).mean()
    # A 0.5 answer picks neither side: it earns the expected score of a coin flip.
    correct = np.where(p == 0.5, 0.5, ((p > 0.5) == (y == 1)).astype(float))
    brier = float(((p - y) ** 2).mean())
    return {"ece": float(ece), "brier": brier, "nll": float(nll), "accuracy": float(correct.mean()), "n": n}
