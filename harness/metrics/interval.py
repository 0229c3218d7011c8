"""Every interval the harness reports, and the one rule that says whether a difference is distinguishable.

The unit is the document (harness/metrics/bootstrap.py says why). An interval over n documents is
Student's t with n - 1 degrees of freedom times the jackknife's root-mean-square error:

    theta_(i)  the metric recomputed with document i left out (i = 1..n)
    se^2   = (n - 1)/n * sum_i (theta_(i) - mean_i theta_(i))^2
    bias   = (n - 1) * (mean_i theta_(i) - theta)
    [lo, hi] = theta -/+ t_{n-1, (1 + level)/2} * sqrt(se^2 + bias^2)

For a mean over documents the jackknife's se is s / sqrt(n) and its bias 0: the t interval; for a
pooled statistic the bias term widens it by the statistic's own small-sample bias. Correlations are
handled on Fisher's z scale (atanh) and mapped back (on the raw scale where a value is +/-1), NLL
on the log scale with a skew correction (harness/metrics/ranges.py). Bounds are clipped to the
metric's range (RANGES). Below MIN_DOCUMENTS (MIN_DOCUMENTS_OF for ECE) there is no interval and
every sentence says "too few documents to tell"; so does a metric undefined with a document left
out. A difference B - A on the same documents is the same interval of the differences
theta_B(i) - theta_A(i) (a paired jackknife), on the raw scale.

Rates (RATES: a share of decisions, 0 to 1, that a judge can pin at 0 or 1) take a score interval
instead, which holds its level near the bound where the t interval collapses to [1, 1]: Wilson's
interval with the t quantile, a continuity correction 1/(2 n_eff), and the effective number of
decisions n_eff = p (1 - p) / (se^2 + bias^2) from the same jackknife, at most PER_DOCUMENT per
document, fewer where it has fewer decisions (ranges.cap; a document's decisions move together;
the cap also gives documents that all show the same rate an interval). When every document sits at the bound (the rate is exactly 0 or 1 in each)
the bound is exact and one-sided: a value in [0, 1] with mean mu is 1 with probability at most mu,
so n documents all at 1 have probability at most mu^n, and [(1 - level)^(1/n), 1] holds mu with at
least `level` (12 documents all-A: [0.779, 1]). Fairness, -|rate - 0.5|, is the image of its
rate's interval. Any other metric, or a difference, whose documents all give the same value has no
interval: "no spread across documents: too little to tell" (NO_SPREAD), never a zero-width bracket.

How often each interval covers: `python -m harness.metrics.coverage` (docs/report_card.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

METHOD = "t (n-1 df) x jackknife RMSE over documents"
"""What every interval of a metric is (results.json "interval"."method")."""
BOOT_METHOD = "t (n-1 df) x bootstrap RMSE over documents"
"""What the interval of a statistic the jackknife cannot follow is (a rank statistic across
instructions, a median): the same t interval, its RMSE from percentile-bootstrap rounds."""
SCORE_METHOD = "Wilson score (t, n-1 df; continuity-corrected) with the jackknife's effective n, at most min(10, its decisions) per document"
"""What the interval of a rate (RATES) is."""
EXACT_METHOD = "exact one-sided bound: every document at the bound"
"""What the interval of a rate that is exactly 0 or 1 in every document is."""
SKEW_METHOD = "t (n-1 df) x jackknife RMSE over documents, log scale, jackknife acceleration"
"""What NLL's interval is (harness/metrics/ranges.py: its values have a long right tail)."""
SHORT = {
    METHOD: "t-jackknife",
    SKEW_METHOD: "log-t-jackknife, skew-corrected",
    BOOT_METHOD: "t-bootstrap",
    SCORE_METHOD: "Wilson-jackknife",
    EXACT_METHOD: "exact one-sided",
}
"""Each method's name in a sentence: "(12 documents, t-jackknife)"."""
RATES = frozenset(
    {"a_rate", "a_rate_prob", "a_rate_upper", "order_consistency", "accuracy", "answer_mass_low_share"}
)
"""Shares of decisions (0 to 1) a judge can pin at a bound: the score interval (module docstring)."""
BOUNDED = {
    "max_prob": (0.5, 1.0),
    "entropy": (0.0, math.log(2)),
    "order_gap": (0.0, 1.0),
    "brier": (0.0, 1.0),
    "ece": (0.0, 1.0),
    **{k: (-1.0, 1.0) for k in ("spearman", "kendall", "spearman_pairs", "kendall_pairs")},
}
"""Means of a bounded quantity a judge can pin at a bound (max_prob 1, entropy 0, a document's
correlation +/-1; ECE): the score interval of their value rescaled to [0, 1] (their t interval
covered 79-85% at 3-6 documents with P(A) 0.96 in every document; ECE's 89-90% at 12-30). The per-document correlations take it
only where a document's value is +/-1 (2 candidates give nothing else: `at_the_bound`); otherwise
Fisher's z t interval, which holds 93-96% on documents of 4-16 candidates."""
FROM_RATE = {"fairness": "a_rate", "fairness_prob": "a_rate_prob"}
"""-|rate - 0.5|: its interval is the image of its rate's."""
PER_DOCUMENT = 10.0
"""The most independent decisions one document counts as in a rate's score interval (measured:
docs/report_card.md, "How often the intervals cover")."""
NO_SPREAD = "no spread across documents: too little to tell"
"""Why a metric (not a rate) or a difference whose documents all give the same value has no interval."""
ZERO = 1e-12
"""Below this a value is printed as 0: rounding residue of sums that are 0 (a mean of +x and -x)."""
MIN_DOCUMENTS = 3
"""No interval below this many documents: with 2, leaving one out leaves one document."""
UNIT = (0.0, 1.0)
ACROSS = "rho_across_instructions"
"""Figure 3's statistic: a Spearman rho across instructions of their per-instruction values."""
MIN_DOCUMENTS_OF = {"ece": 8, ACROSS: 12}
"""Statistics that need more documents before their interval holds its level (the simulation:
harness/metrics/coverage.py; its numbers: docs/report_card.md): ECE's, and a rank across instructions."""
MIN_PAIRED_OF = {
    k: 8 for k in ("max_prob", "entropy", "order_gap", "order_consistency", "brier", "nll", "accuracy")
}
"""Paired B - A of pooled ratios: with n - 1 df 7-11% excluded 0 with no difference at 3-6 documents; with
Kish's df 1-6%, but a true one on 2-vs-30 mixes was held in 87-97% there (docs/report_card.md)."""
MIN_LABELLED = {"ece": 100}
"""Labelled judgments ECE needs for a lower end: its upward bias outruns its interval with fewer
(P(A) 0.5, 2-candidate documents, 12 documents, about 20 labelled pairs: 72% coverage); a run then
gives its upper bound only (ranges.upper_only), a paired difference nothing."""
TOO_FEW = "too few documents to tell"
FISHER = frozenset(
    {"spearman", "kendall", "spearman_pairs", "kendall_pairs", "spearman_whole", "kendall_whole", ACROSS}
)
"""Correlations: intervals on Fisher's z scale."""
RANGES: dict[str, tuple[float, float]] = {
    **{k: (-1.0, 1.0) for k in FISHER},
    **{
        k: UNIT
        for k in (
            "a_rate",
            "a_rate_prob",
            "a_rate_upper",
            "order_consistency",
            "order_gap",
            "answer_mass_median",
            "answer_mass_low_share",
            "max_prob",
            "ece",
            "brier",
            "accuracy",
            "prob_gap",
        )
    },
    "fairness": (-0.5, 0.0),
    "fairness_prob": (-0.5, 0.0),
    "entropy": (0.0, math.log(2)),
    "nll": (0.0, math.inf),
    "bc": (0.0, math.inf),
}
"""Each metric's possible values (bounds are clipped to them); a metric not listed is unbounded."""


def min_documents(metric: str | None, difference: bool = False) -> int:
    """The fewest documents `metric`'s interval (`difference`: its paired B - A's) is made from."""
    own = MIN_DOCUMENTS_OF.get(metric or "", MIN_DOCUMENTS)
    return max(own, MIN_PAIRED_OF.get(metric or "", MIN_DOCUMENTS)) if difference else own


@dataclass(frozen=True)
class Interval:
    """One interval, with the number of documents it rests on and how it was made."""

    bounds: tuple[float, float] | None
    n: int
    """Documents the metric rests on (those that contribute to it)."""
    note: str | None = None
    """Why there are no bounds (TOO_FEW, NO_SPREAD, undefined)."""
    method: str = METHOD

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> Interval | None:
        """The interval a results.json difference records ("interval", "n_documents", "method",
        "note"); None when it records none (no intervals at all)."""
        if "n_documents" not in record:
            return None
        bounds: Any = record.get("interval")
        n: Any = record["n_documents"]
        note: Any = record.get("note")
        return cls(
            None if bounds is None else (float(bounds[0]), float(bounds[1])),
            int(n),
            note,
            str(record.get("method") or METHOD),
        )

    def as_list(self) -> list[float] | None:
        return None if self.bounds is None else [self.bounds[0], self.bounds[1]]

    def basis(self) -> dict[str, object]:
        """results.json's record beside the interval: documents, method and note."""
        return {"n_documents": self.n, "method": self.method, "note": self.note}

    def about(self) -> str:
        """ "12 documents, t-jackknife" or "2 documents: too few documents to tell"."""
        docs = f"{self.n} document{'' if self.n == 1 else 's'}"
        if self.bounds is None:
            return f"{docs}: {self.note or 'no interval'}"
        return f"{docs}, {SHORT.get(self.method, self.method)}" + (f"; {self.note}" if self.note else "")


@functools.lru_cache(maxsize=256)
def t_quantile(level: float, df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf((1 + level) / 2, df))


def _scaled(point: np.ndarray, rows: np.ndarray, fisher: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z_ok, point, rows) on Fisher's z scale where `fisher` and every value lies inside (-1, 1)."""
    ok = fisher & (np.abs(point) < 1) & (np.abs(rows) < 1).all(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (
            ok,
            np.where(ok, np.arctanh(np.where(ok, point, 0.0)), point),
            np.where(ok[..., None], np.arctanh(np.where(ok[..., None], rows, 0.0)), rows),
        )


def _t_bounds(
    ok: np.ndarray,
    p: np.ndarray,
    se2: np.ndarray,
    bias: np.ndarray,
    n: int,
    level: float,
    value_range: tuple[float, float],
    df: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    half = t_quantile(level, n - 1 if df is None else df) * np.sqrt(se2 + bias**2)
    lo, hi = p - half, p + half
    lo, hi = np.where(ok, np.tanh(lo), lo), np.where(ok, np.tanh(hi), hi)
    return np.clip(lo, *value_range), np.clip(hi, *value_range)


def jackknife_bounds(
    point: np.ndarray,
    loo: np.ndarray,
    level: float,
    fisher: bool = False,
    value_range: tuple[float, float] = (-math.inf, math.inf),
    df: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised core: (lo, hi) of `point` (sets,) from its leave-one-out values `loo` (sets, n);
    NaN where a leave-one-out value is undefined; `df`: the t's degrees of freedom (default n - 1)."""
    point, loo = np.asarray(point, dtype=float), np.asarray(loo, dtype=float)
    n = loo.shape[-1]
    ok, p, v = _scaled(point, loo, fisher)
    mean = v.mean(axis=-1)
    se2 = (n - 1) / n * ((v - mean[..., None]) ** 2).sum(axis=-1)
    return _t_bounds(ok, p, se2, (n - 1) * (mean - p), n, level, value_range, df)


def bootstrap_bounds(
    point: np.ndarray,
    rounds: np.ndarray,
    n: int,
    level: float,
    fisher: bool = False,
    value_range: tuple[float, float] = (-math.inf, math.inf),
) -> tuple[np.ndarray, np.ndarray]:
    """The same t interval from percentile-bootstrap rounds (sets, rounds) over n documents: their
    spread (times sqrt(n / (n - 1)), which makes it the textbook standard error for a mean) and
    their mean's offset from `point` (the bias); rounds that are NaN are left out."""
    point, rounds = np.asarray(point, dtype=float), np.asarray(rounds, dtype=float)
    ok, p, v = _scaled(point, np.where(np.isfinite(rounds), rounds, 0.0), fisher)
    v = np.where(np.isfinite(rounds), v, np.nan)
    mean = np.nanmean(v, axis=-1)
    se2 = np.nanvar(v, axis=-1, ddof=1) * n / (n - 1)
    return _t_bounds(ok, p, se2, mean - p, n, level, value_range)


def jackknife_interval(
    point: float,
    loo: Sequence[float] | np.ndarray,
    level: float,
    metric: str | None = None,
    *,
    difference: bool = False,
    fisher: bool | None = None,
    value_range: tuple[float, float] | None = None,
    df: float | None = None,
) -> Interval:
    """The interval of `point` from its n leave-one-document-out values (module docstring). `metric`
    names a metric_set key: it picks the scale (FISHER), the range (RANGES) and the minimum
    (MIN_DOCUMENTS_OF); `difference`: `point` is B - A of that metric (raw scale, range hi - lo
    either way); `fisher` and `value_range` override both; `df`: the t's degrees of freedom
    (default n - 1; a pooled ratio's paired difference: its documents' effective number, `kish_df`)."""
    loo = np.asarray(loo, dtype=float).ravel()
    n = int(loo.size)
    if n < min_documents(metric, difference):
        return Interval(None, n, TOO_FEW)
    if not math.isfinite(point) or not np.isfinite(loo).all():
        return Interval(None, n, "undefined with a document left out")
    fisher, rng = _scale_and_range(metric, difference, fisher)
    rng = rng if value_range is None else value_range
    if bool(_flat(np.array(point), loo[None, :])[0]):
        return Interval(None, n, NO_SPREAD)
    lo, hi = jackknife_bounds(np.array(point), loo[None, :], level, fisher, rng, df)
    return Interval((float(lo[0]), float(hi[0])), n, None)


def _flat(point: np.ndarray, loo: np.ndarray) -> np.ndarray:
    """(sets,): every leave-one-out value equals the value (to ZERO, relative): no spread across documents."""
    scale = ZERO * np.maximum(1.0, np.abs(loo).max(axis=-1))
    return (np.ptp(loo, axis=-1) <= scale) & (np.abs(loo[..., 0] - point) <= scale)


def rate_bounds(
    point: np.ndarray, loo: np.ndarray, level: float, per_document: float = PER_DOCUMENT
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised core of a rate's interval (module docstring): (lo, hi, exact) of `point` (sets,)
    from its leave-one-out values `loo` (sets, n); `exact` marks the one-sided exact bounds."""
    point, loo = np.asarray(point, dtype=float), np.asarray(loo, dtype=float)
    n = loo.shape[-1]
    mean = loo.mean(axis=-1)
    var = (n - 1) / n * ((loo - mean[..., None]) ** 2).sum(axis=-1) + ((n - 1) * (mean - point)) ** 2
    p = np.clip(point, 0.0, 1.0)
    z2 = t_quantile(level, n - 1) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        ne = np.minimum(np.where(var > 0, p * (1 - p) / var, np.inf), per_document * n)
        ne = np.where(ne > 0, ne, per_document * n)

        def wilson(q: np.ndarray, sign: float) -> np.ndarray:
            centre = (q + z2 / (2 * ne)) / (1 + z2 / ne)
            half = np.sqrt(z2) / (1 + z2 / ne) * np.sqrt(q * (1 - q) / ne + z2 / (4 * ne * ne))
            return centre + sign * half

        cc = 0.5 / ne
        lo = np.where(p - cc <= 0, 0.0, wilson(np.clip(p - cc, 0, 1), -1.0))
        hi = np.where(p + cc >= 1, 1.0, wilson(np.clip(p + cc, 0, 1), 1.0))
    flat = _flat(point, loo)
    top, bottom = flat & (point >= 1 - ZERO), flat & (point <= ZERO)
    one_sided = (1 - level) ** (1 / n)
    lo = np.where(top, one_sided, np.where(bottom, 0.0, lo))
    hi = np.where(bottom, 1 - one_sided, np.where(top, 1.0, hi))
    return np.clip(lo, 0, 1), np.clip(hi, 0, 1), top | bottom


def rate_interval(
    point: float,
    loo: Sequence[float] | np.ndarray,
    level: float,
    metric: str | None = None,
    per_document: float = PER_DOCUMENT,
) -> Interval:
    """The interval of a rate (RATES) from its n leave-one-document-out values: Wilson's score
    interval with the jackknife's effective n, or the exact one-sided bound when every document
    sits at 0 or at 1 (module docstring); a BOUNDED mean's, on its range rescaled to [0, 1].
    `per_document`: the effective decisions per document the score interval counts at most."""
    loo = np.asarray(loo, dtype=float).ravel()
    n = int(loo.size)
    if n < min_documents(metric):
        return Interval(None, n, TOO_FEW, SCORE_METHOD)
    if not math.isfinite(point) or not np.isfinite(loo).all():
        return Interval(None, n, "undefined with a document left out", SCORE_METHOD)
    low, high = BOUNDED.get(metric or "", (0.0, 1.0))
    scale = lambda x: np.clip((np.asarray(x, dtype=float) - low) / (high - low), 0, 1)  # noqa: E731
    lo, hi, exact = rate_bounds(scale(point), scale(loo)[None, :], level, per_document)
    lo, hi = low + (high - low) * lo, low + (high - low) * hi
    return Interval((float(lo[0]), float(hi[0])), n, None, EXACT_METHOD if exact[0] else SCORE_METHOD)


def at_the_bound(metric: str, point: float, loo: np.ndarray) -> bool:
    """Whether `metric` takes the score interval (BOUNDED): always, but for a mean of per-document
    correlations (FISHER) only when some document's value is +/-1, each value recovered from the
    leave-one-out means as n * mean - (n - 1) * mean_(i)."""
    if metric not in BOUNDED:
        return False
    if metric not in FISHER:
        return True
    n = len(loo)
    values = n * point - (n - 1) * np.asarray(loo, dtype=float)
    return bool(np.any(np.abs(values) >= 1 - 1e-9))


def too_few_labelled(metric: str, *labelled: float | int | None) -> str | None:
    """Why `metric` has no interval on so few labelled judgments (MIN_LABELLED), else None."""
    need = MIN_LABELLED.get(metric)
    got = [int(x) for x in labelled if isinstance(x, int | float) and math.isfinite(x)]
    if need is None or not got or min(got) >= need:
        return None
    return f"too few labelled pairs to tell ({min(got)}; {metric} needs {need})"


def fairness_of(rate: Interval) -> Interval:
    """Fairness -|rate - 0.5| of a rate's interval: the image of [lo, hi] under it."""
    if rate.bounds is None:
        return rate
    lo, hi = (abs(b - 0.5) for b in rate.bounds)
    top = 0.0 if rate.bounds[0] <= 0.5 <= rate.bounds[1] else -min(lo, hi)
    return Interval((-max(lo, hi), top), rate.n, rate.note, rate.method)


def bootstrap_interval(
    point: float,
    rounds: Sequence[float] | np.ndarray,
    n: int,
    level: float,
    metric: str | None = None,
    *,
    difference: bool = False,
    fisher: bool | None = None,
) -> Interval:
    """`jackknife_interval` for a statistic the jackknife cannot follow (a rank statistic across
    instructions, a median): the RMSE from percentile-bootstrap `rounds` over the n documents. No
    interval below MIN_DOCUMENTS or where more than 1 - level of the rounds are undefined."""
    rounds = np.asarray(rounds, dtype=float).ravel()
    if n < min_documents(metric):
        return Interval(None, n, TOO_FEW, BOOT_METHOD)
    defined = np.isfinite(rounds)
    if not math.isfinite(point) or defined.sum() < 2 or (~defined).sum() > (1 - level) * rounds.size:
        return Interval(
            None, n, f"undefined in {int((~defined).sum())} of {rounds.size} bootstrap rounds", BOOT_METHOD
        )
    if bool(_flat(np.array(point), rounds[defined][None, :])[0]):
        return Interval(None, n, NO_SPREAD, BOOT_METHOD)
    fisher, rng = _scale_and_range(metric, difference, fisher)
    lo, hi = bootstrap_bounds(np.array(point), rounds[defined][None, :], n, level, fisher, rng)
    return Interval((float(lo[0]), float(hi[0])), n, None, BOOT_METHOD)


def kish_df(weights: np.ndarray) -> float:
    """Degrees of freedom of a ratio pooled over documents weighted `weights` (their judgments):
    Kish's effective number of documents (sum w)^2 / sum w^2, less 1. With 4-16 candidates per
    document (12-240 pairs) the paired t test with n - 1 fired 6.0-6.9% at 8-12 documents with no
    difference, with this 4.7-4.8% (20,000 simulated sets; docs/report_card.md)."""
    w = np.asarray(weights, dtype=float)
    w = w[w > 0]
    return max(float(w.sum() ** 2 / (w**2).sum()) - 1, 1.0) if w.size else 1.0


def p_value(
    point: float,
    loo: Sequence[float] | np.ndarray,
    n: int | None = None,
    boot: bool = False,
    df: float | None = None,
) -> float:
    """Two-sided p-value of `point` = 0 from the t statistic the interval is made of: point over the
    jackknife's RMSE of its leave-one-out values (or, `boot`, the bootstrap rounds' RMSE over n
    documents), t with n - 1 df; NaN where there is no spread (NO_SPREAD: nothing to test)."""
    from scipy import stats

    v = np.asarray(loo, dtype=float).ravel()
    if boot:
        v = v[np.isfinite(v)]
        n = int(n or 0)
        se2 = float(np.var(v, ddof=1)) * n / (n - 1) + (float(v.mean()) - point) ** 2 if v.size > 1 else 0.0
    else:
        n = v.size
        se2 = (n - 1) / n * float(((v - v.mean()) ** 2).sum()) + ((n - 1) * (float(v.mean()) - point)) ** 2
    if n < 2 or not se2 > 0:
        return math.nan
    return float(2 * stats.t.sf(abs(point) / math.sqrt(se2), n - 1 if df is None else df))


def holm(p_values: Mapping[str, float], level: float) -> dict[str, bool]:
    """Holm's step-down over a family of tests: {name: rejected} with the family-wise error rate at
    most 1 - level (NaN p-values are not tested: never rejected, not counted)."""
    tested = sorted((p, k) for k, p in p_values.items() if math.isfinite(p))
    out = {k: False for k in p_values}
    alpha, m = 1 - level, len(tested)
    for i, (p, k) in enumerate(tested):
        if p > alpha / (m - i):
            break
        out[k] = True
    return out


def _scale_and_range(
    metric: str | None, difference: bool, fisher: bool | None = None
) -> tuple[bool, tuple[float, float]]:
    """Fisher's z for a correlation (not for a difference of two); the metric's range, or for a
    difference hi - lo either way."""
    low, high = RANGES.get(metric or "", (-math.inf, math.inf))
    scale = (metric in FISHER and not difference) if fisher is None else fisher
    return scale, ((low - high, high - low) if difference else (low, high))


def rule(metric: str | None, difference: bool = False) -> tuple[bool, tuple[float, float], int]:
    """How a metric's interval is made: (on Fisher's z scale?, the range its bounds are clipped to,
    the fewest documents it is made from) -- what jackknife_interval applies, for vectorised callers."""
    return (*_scale_and_range(metric, difference), min_documents(metric, difference))


def verdict(iv: Interval | None) -> str | None:
    """Whether B - A = 0 is excluded: the ONE rule every sentence, table and script uses. None when
    the interval cannot tell (no interval, too few documents)."""
    if iv is None or iv.bounds is None:
        return None
    lo, hi = iv.bounds
    return "distinguishable from 0" if lo > 0 or hi < 0 else "not distinguishable from 0"


def distinguishable(iv: Interval | None) -> bool:
    return verdict(iv) == "distinguishable from 0"


def tidy(x: float) -> float:
    """x, or 0.0 where |x| < ZERO (the residue of a sum that is 0: -9.25e-18 is printed as 0)."""
    return 0.0 if abs(x) < ZERO else x


def num(x: float) -> str:
    """A signed number that never shows a nonzero as 0.000: "+0.120", "-1.2e-07"; an exact 0 (or
    rounding residue below ZERO) as "+0.000"."""
    x = tidy(x)
    return f"{x:+.3f}" if x == 0 or abs(x) >= 5e-4 else f"{x:+.2g}"


def shown(value: float, iv: Interval | None, fmt: Callable[[float], str] = num, *, basis: bool = True) -> str:
    """A value with its interval and what it rests on, "+0.120 [-0.050, +0.310] (12 documents,
    t-jackknife)", or why it has none, "+0.933 (2 documents: too few documents to tell)"; the bare
    value without an interval record. `basis=False`: the note alone (where a caption gives the
    documents and method, `described`): "0.481 (too few documents to tell)"."""
    text = fmt(value)
    if iv is None:
        return text
    if iv.bounds is not None:
        text += f" [{fmt(iv.bounds[0])}, {fmt(iv.bounds[1])}]"
    why = iv.about() if basis else iv.note if iv.bounds is not None else iv.note or "no interval"
    return text + (f" ({why})" if why else "")


def sentence(
    label: str,
    value: float | None,
    iv: Interval | None,
    level: float,
    *,
    off: str | None = None,
    said: str | None = None,
) -> str:
    """One plain sentence with its n and method, e.g. "held-out Spearman +0.120 [-0.050, +0.310]
    (12 documents, t-jackknife): not distinguishable from 0 at 95%", or "... +0.933 (2 documents:
    too few documents to tell)". `off`: why there are no intervals at all (metrics.bootstrap=0);
    `said`: the verdict to print instead of `verdict`'s (a family-wise one: harness-compare)."""
    if value is None or not math.isfinite(value):
        return f"{label}: undefined (the metric is NaN in at least one arm)"
    if iv is None:
        return f"{label} {num(value)}: no interval ({off or 'metrics.bootstrap=0'})"
    if said is None:
        said = verdict(iv)
        said = f"{said} at {level * 100:g}%" if said else None
    return f"{label} {shown(value, iv)}" + (f": {said}" if said else "")


def recorded(bounds: Any, basis: Any, run: Any = None) -> Interval | None:
    """One metric's Interval as results.json records it: its [lo, hi] (in "intervals") and, beside
    it, its documents, method and note (in "interval_basis"). A run written before interval_basis
    existed: its bounds with the documents and method of the run's "interval" record (`run`).
    None when the run records no interval for it."""
    ok = (
        isinstance(bounds, Sequence)
        and len(bounds) == 2
        and all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds)
    )
    if isinstance(basis, Mapping) and isinstance(basis.get("n_documents"), int):
        return Interval.from_record({**basis, "interval": bounds if ok else None})
    if ok and isinstance(run, Mapping) and isinstance(run.get("n_documents"), int):
        return Interval(
            (float(bounds[0]), float(bounds[1])), run["n_documents"], None, str(run.get("method") or METHOD)
        )
    return None


def documents(ns: Iterable[int]) -> str:
    """ "1 document", "6 documents", "2-12 documents"."""
    got = sorted(set(ns))
    if not got:
        return "documents not recorded"
    span = str(got[0]) if got[0] == got[-1] else f"{got[0]}-{got[-1]}"
    return f"{span} document{'' if got == [1] else 's'}"


def described(ivs: Sequence[tuple[Interval | None, float | None]]) -> str:
    """What a set of intervals (Interval, level) is, said once, e.g. a table column's, one per run:
    "6 documents, 95% t-jackknife", "2 documents: too few documents to tell", both joined by "; "
    where the runs differ, and "no interval recorded" (metrics.bootstrap=0) for those without."""
    said: dict[tuple[Any, ...], list[int]] = {}
    for iv, level in ivs:
        if iv is None:
            key: tuple[Any, ...] = ("none",)
        elif iv.bounds is not None:
            key = ("bounds", level, iv.method)
        else:
            key = ("note", iv.note or "no interval")
        said.setdefault(key, []).append(-1 if iv is None else iv.n)
    out = []
    for key, ns in said.items():
        if key[0] == "bounds":
            pct = "" if key[1] is None else f"{key[1] * 100:g}% "
            out.append(f"{documents(ns)}, {pct}{SHORT.get(key[2], key[2])}")
        elif key[0] == "note":
            out.append(f"{documents(ns)}: {key[1]}")
        else:
            out.append(
                "no interval recorded" + ("" if len(ns) == len(ivs) else f" ({len(ns)} of {len(ivs)})")
            )
    return "; ".join(out)


def basis_of(intervals: Mapping[str, Interval | None]) -> dict[str, dict[str, object] | None]:
    """{metric: Interval.basis()} for results.json, beside {metric: [lo, hi]}."""
    return {k: None if iv is None else iv.basis() for k, iv in intervals.items()}
