"""A single run's intervals (results.json "intervals", the card): `intervals` picks each metric's
method from harness/metrics/interval.py, and adds what that module has no room for: a skewed
statistic's interval (NLL), ECE's upper bound on few labels, and the note a run gets when its
documents' candidate counts differ widely.

NLL (per judgment -log P(correct), unbounded above, a long right tail) takes its t interval on the
log scale with the jackknife's acceleration (Efron's BCa correction without a bootstrap):

    a = sum_i u_i^3 / (6 (sum_i u_i^2)^(3/2)),   u_i = mean_j theta_(j) - theta_(i)  (log scale)
    [lo, hi] = exp(theta -/+ se * t / (1 +/- a t))

so a right-skewed sample stretches the upper end and pulls in the lower (a = 0: the plain t); the
t takes Kish's effective number of documents less 1 as its df (documents of 12 and 240 labelled
pairs are not equal evidence), as a pooled ratio's paired difference does.
Measured through a run's path: docs/report_card.md, "How often the intervals cover".

Candidate counts: when documents' counts differ more than UNEQUAL-fold (2 vs 30), the pooled
metrics (order consistency, order_gap, max_prob, entropy, ECE, Brier, NLL, accuracy) weigh a large
document by its pairs, m (m - 1), while the A-rate and the per-document correlations weigh every
document equally; `unequal_note` says so, in results.json ("candidates_per_document") and on the card.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from harness.metrics.bootstrap import BOOTSTRAPPED
from harness.metrics.interval import (
    BOUNDED,
    FROM_RATE,
    METHOD,
    MIN_LABELLED,
    NO_SPREAD,
    PER_DOCUMENT,
    RATES,
    SCORE_METHOD,
    SKEW_METHOD,
    TOO_FEW,
    Interval,
    at_the_bound,
    bootstrap_interval,
    fairness_of,
    jackknife_interval,
    kish_df,
    min_documents,
    rate_interval,
    t_quantile,
    too_few_labelled,
)

SKEWED = frozenset({"nll"})
"""Metrics whose interval is the log-scale t with the jackknife's acceleration (module docstring)."""
DECISIONS = {
    "a_rate": ("judged", 1.0, False),
    "a_rate_prob": ("judged", 1.0, False),
    "a_rate_upper": ("judged", 0.5, False),
    "order_consistency": ("order_n", 1.0, True),
    "accuracy": ("cal_n", 1.0, True),
    "answer_mass_low_share": ("mass_n", 1.0, True),
    "order_gap": ("order_n", 1.0, True),
    "max_prob": ("judged", 1.0, True),
    "entropy": ("judged", 1.0, True),
    "brier": ("cal_n", 1.0, True),
    "ece": ("cal_n", 1.0, True),
    **{k: ("judged", 0.5, False) for k in ("spearman", "kendall", "spearman_pairs", "kendall_pairs")},
}
"""Each rate or bounded mean -> (the per-document count of its decisions in DocStats.sums, its share
of that count, whether it is pooled over decisions (else a mean of per-document values)): a
document counts at most min(PER_DOCUMENT, its decisions) in the score interval (`cap`). A pair's
value in [0, 1] counts as one decision (a Bernoulli has the largest variance of any value in
[0, 1] with its mean); a per-document correlation as its document's unordered pairs (a
2-candidate document's +/-1 is one decision)."""
UNEQUAL = 5
"""Candidates per document more than this many times apart: the run says how each number weighs them."""


def skewed_interval(
    point: float, loo: Sequence[float] | np.ndarray, level: float, metric: str, df: float | None = None
) -> Interval:
    """The interval of a positive, right-skewed metric (SKEWED) from its n leave-one-document-out
    values: t x jackknife RMSE on the log scale, each end moved by the jackknife's acceleration;
    `df`: the t's degrees of freedom (default n - 1; a run: Kish's, `interval.kish_df`)."""
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
    t = t_quantile(level, n - 1 if df is None else df)
    hi = q + se * t / (1 - a * t) if a * t < 1 else math.inf
    lo = q - se * t / (1 + a * t) if -a * t < 1 else -math.inf
    return Interval((math.exp(lo), math.exp(hi)), n, None, SKEW_METHOD)


def candidate_counts(sizes: Iterable[int]) -> dict[str, object]:
    """results.json "candidates_per_document": the fewest and most candidates in a document, and
    `unequal_note` (None when they are within UNEQUAL-fold)."""
    got = [int(s) for s in sizes]
    lo, hi = min(got, default=0), max(got, default=0)
    return {"min": lo, "max": hi, "note": unequal_note(lo, hi)}


def unequal(lo: int, hi: int) -> bool:
    """Documents' candidate counts, fewest `lo` and most `hi`, more than UNEQUAL-fold apart."""
    return bool(lo) and hi > UNEQUAL * lo


def unequal_note(lo: int, hi: int) -> str | None:
    """One sentence when documents' candidate counts differ more than UNEQUAL-fold, else None."""
    if not unequal(lo, hi):
        return None
    return (
        f"{lo} to {hi} candidates per document (more than {UNEQUAL}x apart): the pooled metrics (order "
        f"consistency, order_gap, max_prob, entropy, ECE, Brier, NLL, accuracy) weigh a {hi}-candidate "
        f"document {hi * (hi - 1) // max(lo * (lo - 1), 1)}x a {lo}-candidate one; the A-rate and the "
        "per-document Spearman/Kendall weigh documents equally"
    )


UNEQUAL_PAIRED = ("spearman", "kendall", "spearman_pairs", "kendall_pairs", "spearman_whole", "kendall_whole")
"""The correlations whose paired B - A interval under-covers a true difference on candidate counts
more than UNEQUAL-fold apart (docs/report_card.md, "Two runs"): withheld there."""


def unequal_withheld(lo: int, hi: int) -> dict[str, str]:
    """metric -> why `Summary.versus` gives no paired interval: the correlations (UNEQUAL_PAIRED) when
    documents' candidate counts (over both runs) differ more than UNEQUAL-fold, else {}."""
    if not unequal(lo, hi):
        return {}
    why = (
        f"{lo} to {hi} candidates per document (more than {UNEQUAL}x apart): no paired interval, a "
        "correlation's held a true difference in only 60-95% of simulated such mixes"
    )
    return dict.fromkeys(UNEQUAL_PAIRED, why)


def upper_only(
    ivs: Mapping[str, Interval | None],
    point: Mapping[str, float | int],
    reps: Mapping[str, np.ndarray],
    masks: Mapping[str, np.ndarray],
    level: float,
) -> dict[str, Interval]:
    """The intervals of `ivs` that interval.MIN_LABELLED cuts to an upper bound: on fewer labelled
    judgments than it asks, ECE's binned estimate runs high (P(A) 0.5, 2-candidate documents, about
    20 labelled pairs at 12 documents: the two-sided score interval covered 73%, its lower end above
    the truth), so only [range low, the one-sided `level` upper bound] is told."""
    out = {}
    for k, need in MIN_LABELLED.items():
        iv, why = ivs.get(k), too_few_labelled(k, point.get("n_calibration"))
        if iv is None or iv.bounds is None or not why or k not in reps:
            continue
        kept = np.asarray(reps[k], dtype=float)[masks[k]]
        hi = rate_interval(float(point[k]), kept, 2 * level - 1, k).bounds
        low = BOUNDED.get(k, (0.0, 1.0))[0]
        labelled = int(point.get("n_calibration") or 0)
        note = f"upper bound only: {labelled} labelled pairs, {k} needs {need} for a lower end"
        out[k] = Interval(None if hi is None else (low, hi[1]), iv.n, note, iv.method)
    return out


def decisions(sums: Mapping[str, np.ndarray], where: np.ndarray, rows: int) -> dict[str, np.ndarray]:
    """{rate: (rows,) decisions per document} in the leave-one-out rows' document order (`where`:
    each frame document's row), from DocStats.sums (DECISIONS)."""
    return {k: np.bincount(where, sums[c] * f, rows) for k, (c, f, _) in DECISIONS.items() if c in sums}


def cap(key: str, counts: np.ndarray | None) -> float:
    """The most effective decisions per document a rate's score interval counts, on average:
    (sum w)^2 / sum (w^2 / e) / n with e = min(PER_DOCUMENT, a document's decisions) and w its
    weight (its decisions where the rate is pooled, else 1). Documents of 10 or more decisions give
    PER_DOCUMENT; a 2-candidate document's upper-triangle rate, one decision, counts as one."""
    if counts is None or key not in DECISIONS or not len(counts):
        return PER_DOCUMENT
    c = np.maximum(np.asarray(counts, dtype=float), 1.0)
    w = c if DECISIONS[key][2] else np.ones_like(c)
    return float(w.sum() ** 2 / (w**2 / np.minimum(PER_DOCUMENT, c)).sum() / len(c))


def interval_of(
    key: str,
    value: float | int | None,
    rows: np.ndarray,
    mask: np.ndarray,
    level: float,
    boot: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    counts: np.ndarray | None = None,
) -> Interval | None:
    """The interval of one metric from its leave-one-out rows over the documents `mask` keeps (its
    bootstrap rounds `boot` for BOOTSTRAPPED; `weights`, the judgments each document gives it: a
    SKEWED metric's t takes Kish's df from them; `counts`: a rate's decisions per document, `cap`);
    None where the value itself is undefined."""
    if value is None or not math.isfinite(float(value)):
        return None
    if key in BOOTSTRAPPED and boot is not None:
        return bootstrap_interval(float(value), boot, int(np.sum(mask)), level, key)
    kept = np.asarray(rows, dtype=float)[mask]
    if len(kept) < min_documents(key):  # too few: the method named is the metric's usual one
        method = SCORE_METHOD if key in RATES else SKEW_METHOD if key in SKEWED else METHOD
        return Interval(None, len(kept), TOO_FEW, method)
    if key in RATES or at_the_bound(key, float(value), kept):
        per = cap(key, None if counts is None else np.asarray(counts, dtype=float)[mask])
        return rate_interval(float(value), kept, level, key, per)
    if key in SKEWED:
        df = None if weights is None else kish_df(np.asarray(weights, dtype=float)[mask])
        return skewed_interval(float(value), kept, level, key, df)
    return jackknife_interval(float(value), kept, level, key)


def intervals(
    point: Mapping[str, float | int],
    reps: Mapping[str, np.ndarray],
    masks: Mapping[str, np.ndarray],
    level: float,
    boot: Mapping[str, np.ndarray] | None = None,
    weights: Mapping[str, np.ndarray] | None = None,
    counts: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Interval | None]:
    """{metric: Interval} for every replicated metric (a run's results.json and card); None where
    the value itself is undefined. Fairness takes the image of its rate's interval
    (interval.FROM_RATE); ECE on too few labels its upper bound (`upper_only`)."""
    out = {
        k: interval_of(
            k,
            point.get(k),
            r,
            masks[k],
            level,
            (boot or {}).get(k),
            (weights or {}).get(k),
            (counts or {}).get(k),
        )
        for k, r in reps.items()
    }
    out.update(upper_only(out, point, reps, masks, level))
    for k, rate in FROM_RATE.items():
        if out.get(k) is not None and out.get(rate) is not None:
            out[k] = fairness_of(out[rate])  # type: ignore[arg-type]
    return out
