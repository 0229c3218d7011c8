"""What a single run's intervals need beyond harness/metrics/interval.py: a skewed statistic's
interval (NLL), and the note a run gets when its documents' candidate counts differ widely.

NLL (per judgment -log P(correct), unbounded above, a long right tail) takes its t interval on the
log scale with the jackknife's acceleration (Efron's BCa correction without a bootstrap):

    a = sum_i u_i^3 / (6 (sum_i u_i^2)^(3/2)),   u_i = mean_j theta_(j) - theta_(i)  (log scale)
    [lo, hi] = exp(theta -/+ se * t / (1 +/- a t))

so a right-skewed sample stretches the upper end and pulls in the lower (a = 0: the plain t).
Measured through a run's path: docs/report_card.md, "How often the intervals cover".

Candidate counts: when documents' counts differ more than UNEQUAL-fold (2 vs 30), the pooled
metrics (order consistency, order_gap, max_prob, entropy, ECE, Brier, NLL, accuracy) weigh a large
document by its pairs, m (m - 1), while the A-rate and the per-document correlations weigh every
document equally; `unequal_note` says so, in results.json ("candidates_per_document") and on the card.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from harness.metrics.interval import NO_SPREAD, TOO_FEW, Interval, min_documents, t_quantile

SKEWED = frozenset({"nll"})
"""Metrics whose interval is the log-scale t with the jackknife's acceleration (module docstring)."""
SKEW_METHOD = "t (n-1 df) x jackknife RMSE over documents, log scale, jackknife acceleration"
"""What a SKEWED metric's interval is (results.json "interval_basis")."""
SHORT_NAMES = {SKEW_METHOD: "log-t-jackknife, skew-corrected"}
UNEQUAL = 5
"""Candidates per document more than this many times apart: the run says how each number weighs them."""


def skewed_interval(point: float, loo: Sequence[float] | np.ndarray, level: float, metric: str) -> Interval:
    """The interval of a positive, right-skewed metric (SKEWED) from its n leave-one-document-out
    values: t x jackknife RMSE on the log scale, each end moved by the jackknife's acceleration."""
    v = np.asarray(loo, dtype=float).ravel()
    n = int(v.size)
    if n < min_documents(metric):
        return Interval(None, n, TOO_FEW, SKEW_METHOD)
    if not (math.isfinite(point) and point > 0 and np.isfinite(v).all() and (v > 0).all()):
        return Interval(None, n, "undefined with a document left out", SKEW_METHOD)
    q, logs = math.log(point), np.log(v)
    mean = float(logs.mean())
    se = math.sqrt((n - 1) / n * float(((logs - mean) ** 2).sum()) + ((n - 1) * (mean - q)) ** 2)
    if not se > 1e-12 * max(1.0, abs(q)):
        return Interval(None, n, NO_SPREAD, SKEW_METHOD)
    u = mean - logs
    a = float((u**3).sum() / (6 * float((u**2).sum()) ** 1.5)) if (u**2).sum() > 0 else 0.0
    t = t_quantile(level, n - 1)
    hi = q + se * t / (1 - a * t) if a * t < 1 else math.inf
    lo = q - se * t / (1 + a * t) if -a * t < 1 else -math.inf
    return Interval((math.exp(lo), math.exp(hi)), n, None, SKEW_METHOD)


def candidate_counts(sizes: Iterable[int]) -> dict[str, object]:
    """results.json "candidates_per_document": the fewest and most candidates in a document, and
    `unequal_note` (None when they are within UNEQUAL-fold)."""
    got = [int(s) for s in sizes]
    lo, hi = min(got, default=0), max(got, default=0)
    return {"min": lo, "max": hi, "note": unequal_note(lo, hi)}


def unequal_note(lo: int, hi: int) -> str | None:
    """One sentence when documents' candidate counts differ more than UNEQUAL-fold, else None."""
    if not lo or hi <= UNEQUAL * lo:
        return None
    return (
        f"{lo} to {hi} candidates per document (more than {UNEQUAL}x apart): the pooled metrics (order "
        f"consistency, order_gap, max_prob, entropy, ECE, Brier, NLL, accuracy) weigh a {hi}-candidate "
        f"document {hi * (hi - 1) // max(lo * (lo - 1), 1)}x a {lo}-candidate one; the A-rate and the "
        "per-document Spearman/Kendall weigh documents equally"
    )
