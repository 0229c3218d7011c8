"""Uncertainty of every metric: each metric recomputed with each document left out, and paired differences.

A document is the independent unit: its pairs, both orders and its human scores move together
(treating pairs as independent gives intervals too narrow: tests/metrics/test_bootstrap.py).

`LeaveOneOut` is the jackknife's design over the documents in sorted id order: row i weighs every
document 1 except the i-th (0), so two runs over the same documents get the same rows (a paired
jackknife: `paired`). Every metric is recomputed per row from per-document sufficient statistics
(`DocStats`, `replicate`): a pooled mean (confidence, calibration, order consistency, ...) is
(W @ sums) / (W @ counts), a mean over documents (A-rate, per-document Spearman/Kendall) is
(W @ values) / (W @ defined), ECE sums |W @ sum(y) - W @ sum(p)| over its bins; the pooled ("whole")
rank correlations are recomputed per row: Spearman from weighted mid-ranks, Kendall's tau-b as a
quadratic form W K W^T of per-document-pair concordance sums (exactly what scipy gives on the
data with the document left out, ties included). Variants with a fitted constant (batch
calibration's shift, the content-free P(A)) keep it at its full-data value: their intervals are
conditional on it. `support` says which documents each metric rests on (SUPPORT: with how many
judgments); the interval of a metric is made from its own documents' rows by interval.py. The same
functions take any rows of weights: `resample_counts` draws percentile-bootstrap rounds
(BOOTSTRAPPED metrics; `percentile_interval` is the coverage test's negative control).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.judging import MIN_ANSWER_MASS
from harness.metrics.correlation import rankable
from harness.metrics.interval import (
    BOUNDED,
    EXACT_METHOD,
    FISHER,
    FROM_RATE,
    METHOD,
    MIN_DOCUMENTS,
    MIN_DOCUMENTS_OF,
    MIN_PAIRED_OF,
    RATES,
    SCORE_METHOD,
    Interval,
    bootstrap_interval,
    jackknife_interval,
    p_value,
    sentence,
    too_few_labelled,
)
from harness.metrics.views import EPS, Frame

NO_INTERVAL = ("n_judgments", "n_docs", "n_calibration", "n_order_pairs", "spearman_pairs_se")
"""metric_set keys without an interval: counts, and the shuffle standard error (itself a spread)."""
CONDITIONAL = (
    "batch calibration's logit shift and the content-free P(A) are held at their full-data values "
    "(intervals of the batch and contextual variants are conditional on them)"
)


def check_settings(rounds: int, level: float) -> None:
    """metrics.bootstrap (0: no intervals; else intervals, and this many bootstrap rounds for the
    statistics that take their RMSE from them) and metrics.level."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ConfigError(
            f"metrics.bootstrap must be an integer >= 0 (0 turns intervals off), got {rounds!r}"
        )
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ConfigError(f"metrics.level must lie strictly between 0 and 1 (e.g. 0.95), got {level!r}")


def resample_counts(n: int, rounds: int, seed: int) -> np.ndarray:
    """(rounds, n) counts: how often each of n units is drawn in each percentile-bootstrap round."""
    idx = np.random.default_rng(seed).integers(0, n, (rounds, n)) if n else np.zeros((rounds, 0), np.int64)
    flat = (idx + np.arange(rounds)[:, None] * n).ravel()
    return np.bincount(flat, minlength=rounds * n).reshape(rounds, n).astype(float)


@dataclass(frozen=True)
class LeaveOneOut:
    """The jackknife's rows over a set of document ids (sorted): row i leaves ids[i] out; with
    `rounds` > 0 also that many percentile-bootstrap rounds over them (`resample_counts`, seeded:
    BOOTSTRAPPED metrics and rank statistics across instructions take their RMSE from those)."""

    ids: list[str]
    level: float
    boot_rounds: int = 0
    seed: int = 0

    @classmethod
    def over(cls, doc_ids: Sequence[str], level: float, rounds: int = 0, seed: int = 0) -> LeaveOneOut:
        check_settings(rounds, level)
        return cls(sorted(set(doc_ids)), float(level), int(rounds), int(seed))

    def boot_columns(self, doc_ids: Sequence[str]) -> np.ndarray:
        """The bootstrap rounds' counts of `doc_ids`, in that order: (rounds, len(doc_ids))."""
        return resample_counts(len(self.ids), self.boot_rounds, self.seed)[:, self.positions(doc_ids)]

    @property
    def rounds(self) -> int:
        return len(self.ids)

    @property
    def counts(self) -> np.ndarray:
        """(rows, len(ids)): 1 everywhere except the diagonal."""
        return 1.0 - np.eye(len(self.ids))

    def positions(self, doc_ids: Sequence[str]) -> np.ndarray:
        """The index in `ids` of each of `doc_ids` (each must be one of them)."""
        pos = {d: k for k, d in enumerate(self.ids)}
        missing = [d for d in doc_ids if d not in pos]
        if missing:
            raise ValueError(f"documents {missing[:3]} are not among the jackknife's")
        return np.array([pos[d] for d in doc_ids], dtype=np.int64)

    def columns(self, doc_ids: Sequence[str]) -> np.ndarray:
        """The rows' weights of `doc_ids`, in that order: (rows, len(doc_ids))."""
        return self.counts[:, self.positions(doc_ids)]

    def row_mask(self, doc_ids: Sequence[str], mask: np.ndarray) -> np.ndarray:
        """A per-document mask in `doc_ids` order -> the same mask over the rows (sorted ids)."""
        out = np.zeros(len(self.ids), dtype=bool)
        out[self.positions(doc_ids)] = np.asarray(mask, dtype=bool)
        return out

    def meta(self) -> dict[str, object]:
        return {
            "method": METHOD,
            "rates": sorted(RATES | set(FROM_RATE)),
            "bounded": sorted(BOUNDED),
            "rate_method": f"{SCORE_METHOD}; {EXACT_METHOD}",
            "level": self.level,
            "unit": "document",
            "n_documents": len(self.ids),
            "rounds": self.boot_rounds,
            "seed": self.seed,
            "bootstrapped": list(BOOTSTRAPPED),
            "min_documents": MIN_DOCUMENTS,
            "min_documents_of": dict(MIN_DOCUMENTS_OF),
            "min_documents_paired_of": dict(MIN_PAIRED_OF),
            "fisher_z": sorted(FISHER),
            "held_fixed": CONDITIONAL,
        }


def no_interval_meta() -> dict[str, object]:
    return {"method": None, "rounds": 0, "note": "no intervals (metrics.bootstrap=0)"}


def _ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)


def _bincount(doc: np.ndarray, weights: np.ndarray | None, n: int) -> np.ndarray:
    return np.bincount(doc, weights=weights, minlength=n).astype(float)


@dataclass(frozen=True)
class DocStats:
    """Per-document sufficient statistics of one variant (one P(A) column) of a Frame; arrays are
    (documents,) in the frame's document order unless noted."""

    sums: dict[str, np.ndarray]
    """name -> per-document sum (or value); see `replicate` for which ratio each metric is."""
    bins: tuple[np.ndarray, np.ndarray, np.ndarray]
    """ECE: (documents, bins) counts, sums of labels, sums of P(A)."""
    masses: tuple[np.ndarray, np.ndarray]
    """Readable judgments' answer masses, sorted, and their document indices."""
    bc_undefined: bool
    whole: tuple[np.ndarray, np.ndarray, np.ndarray]
    """Pooled (win rate, human, document index) of the candidates the whole correlations use."""


def _cell_layout(frame: Frame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every flat matrix cell: its document, whether it is upper (row < column), its reverse cell."""
    sizes = np.array([len(x) for x in frame.ids], dtype=np.int64)
    cell_doc = np.repeat(np.arange(len(sizes)), sizes**2)
    local = np.arange(frame.cells) - frame.start[cell_doc]
    n = sizes[cell_doc]
    row, col = local // np.maximum(n, 1), local % np.maximum(n, 1)
    return cell_doc, row < col, frame.start[cell_doc] + col * n + row


def _decisions(
    flat: np.ndarray, keep: np.ndarray, cell_doc: np.ndarray, d: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-document A-rate (argmax) and whether it is defined, over the cells `keep`."""
    with np.errstate(invalid="ignore"):
        n_a = _bincount(cell_doc[keep & (flat > 0.5)], None, d)
        n_b = _bincount(cell_doc[keep & (flat < 0.5)], None, d)
    rate = _ratio(n_a, n_a + n_b)
    return np.nan_to_num(rate), np.isfinite(rate).astype(float)


def doc_stats(
    frame: Frame,
    win: Mapping[str, tuple[float, float]],
    pairs: Mapping[str, tuple[float, float]],
    upper_p: np.ndarray | None = None,
    bins: int = 10,
) -> DocStats:
    """Per-document statistics of `frame`'s P(A) column; `win`/`pairs`: per-document (Spearman,
    Kendall) of the documents the correlations kept (view_correlations' per_doc_out); `upper_p`:
    the column whose upper-triangle decision rate is a_rate_upper (metric_set's official_p)."""
    d, p, doc = len(frame.doc_ids), frame.p, frame.doc
    flat = frame.matrix()
    cell_doc, upper, reverse = _cell_layout(frame)
    judged = np.isfinite(flat)
    s: dict[str, np.ndarray] = {}
    s["rate"], s["rate_def"] = _decisions(flat, judged, cell_doc, d)
    prob_n = _bincount(cell_doc[judged], None, d)
    prob = _ratio(_bincount(cell_doc[judged], flat[judged], d), prob_n)
    s["rate_prob"], s["rate_prob_def"] = np.nan_to_num(prob), np.isfinite(prob).astype(float)
    uflat = flat if upper_p is None else frame.with_p(upper_p).matrix()
    with np.errstate(invalid="ignore"):
        s["upper"], s["upper_def"] = _decisions(uflat, np.isfinite(uflat) & upper & (uflat != 0), cell_doc, d)
    # Order consistency: pairs i < k judged in both orders, pooled.
    both = upper & judged & np.isfinite(flat[reverse])
    pp, qq, od = flat[both], flat[reverse[both]], cell_doc[both]
    s["order_n"] = _bincount(od, None, d)
    s["order_same"] = _bincount(od, (np.sign(pp - 0.5) == np.sign(0.5 - qq)).astype(float), d)
    s["order_gap"] = _bincount(od, np.abs(pp + qq - 1), d)
    # Confidence, BC and the Norm Gap: judgments with a finite P(A), pooled.
    ok = np.isfinite(p)
    pf, dj = p[ok], doc[ok]
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -(np.where(pf > 0, pf * np.log(pf), 0.0) + np.where(pf < 1, (1 - pf) * np.log1p(-pf), 0.0))
    s["judged"] = _bincount(dj, None, d)
    s["max_prob"] = _bincount(dj, np.maximum(pf, 1 - pf), d)
    s["entropy"] = _bincount(dj, ent, d)
    tokens = frame.tokens
    s["bc"] = _bincount(dj, tokens.bc_diff[ok], d)
    s["gap"] = _bincount(dj, tokens.gap[ok], d)
    # Calibration: judgments with a label, pooled.
    lab = ok & np.isfinite(frame.label)
    pl, yl, dl = p[lab], frame.label[lab], doc[lab]
    pc = np.clip(pl, EPS, 1 - EPS)
    s["cal_n"] = _bincount(dl, None, d)
    s["brier"] = _bincount(dl, (pl - yl) ** 2, d)
    s["nll"] = _bincount(dl, -(yl * np.log(pc) + (1 - yl) * np.log(1 - pc)), d)
    s["correct"] = _bincount(dl, np.where(pl == 0.5, 0.5, ((pl > 0.5) == (yl == 1)).astype(float)), d)
    b = np.minimum((pl * bins).astype(int), bins - 1)
    key = dl * bins + b
    shape = (d, bins)
    ece = (
        _bincount(key, None, d * bins).reshape(shape),
        _bincount(key, yl, d * bins).reshape(shape),
        _bincount(key, pl, d * bins).reshape(shape),
    )
    # Answer mass of the readable judgments (not P(A)-dependent).
    mass, mdoc = tokens.mass[tokens.readable], doc[tokens.readable]
    order = np.argsort(mass, kind="stable")
    s["mass_n"] = _bincount(mdoc, None, d)
    s["mass_low"] = _bincount(mdoc, (mass < MIN_ANSWER_MASS).astype(float), d)
    # Per-document correlations (mean over the kept documents).
    for name, per in (("win", win), ("pairs", pairs)):
        vals = np.array([per.get(x, (0.0, 0.0)) for x in frame.doc_ids]).reshape(d, 2)
        s[f"{name}_def"] = np.array([x in per for x in frame.doc_ids], dtype=float)
        s[f"{name}_rho"], s[f"{name}_tau"] = vals[:, 0], vals[:, 1]
    return DocStats(
        s,
        ece,
        (mass[order], mdoc[order]),
        bool((tokens.bc_mismatch & ok).any()),
        _whole_inputs(frame, flat, set(win)),
    )


def _whole_inputs(
    frame: Frame, flat: np.ndarray, kept: set[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xs, hs, ds = [], [], []
    for k, doc_id in enumerate(frame.doc_ids):
        if doc_id not in kept:
            continue
        n = len(frame.ids[k])
        m = flat[frame.start[k] : frame.start[k] + n * n].reshape(n, n)
        judged = np.isfinite(m)
        with np.errstate(invalid="ignore"):
            x = rankable(
                np.where(
                    judged.any(axis=1), np.where(judged, m, 0.0).sum(axis=1) / judged.sum(axis=1), np.nan
                )
            )
        h = frame.human[k]
        good = np.isfinite(x) & np.isfinite(h)
        xs.append(x[good])
        hs.append(h[good])
        ds.append(np.full(int(good.sum()), k))
    cat = lambda a: np.concatenate(a) if a else np.zeros(0)  # noqa: E731
    return cat(xs), cat(hs), cat(ds).astype(np.int64)


def replicate(stats: DocStats, w: np.ndarray, mass_median: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Every metric with an interval, per round: w is (rounds, documents) counts in the frame's
    document order (a row of ones gives metric_set's values). `mass_median`: the answer mass
    median's rounds when already computed (they do not change with the P(A) column)."""
    s = stats.sums

    def ratio(top: str, bottom: str) -> np.ndarray:
        return _ratio(w @ s[top], w @ s[bottom])

    rate, rate_prob = ratio("rate", "rate_def"), ratio("rate_prob", "rate_prob_def")
    cal_n = w @ s["cal_n"]
    counts, ys, ps = stats.bins
    ece = _ratio(np.abs(w @ ys - w @ ps).sum(axis=1), cal_n)
    ece = np.where(cal_n > 0, ece, np.nan)
    bc = np.full(len(w), np.nan) if stats.bc_undefined else np.abs(ratio("bc", "judged")) / 2
    rho_w, tau_w = whole_correlations(*stats.whole, w)
    return {
        "a_rate": rate,
        "a_rate_prob": rate_prob,
        "order_consistency": ratio("order_same", "order_n"),
        "order_gap": ratio("order_gap", "order_n"),
        "answer_mass_median": weighted_median(*stats.masses, w) if mass_median is None else mass_median,
        "answer_mass_low_share": ratio("mass_low", "mass_n"),
        "fairness": -np.abs(rate - 0.5),
        "fairness_prob": -np.abs(rate_prob - 0.5),
        "max_prob": ratio("max_prob", "judged"),
        "entropy": ratio("entropy", "judged"),
        "ece": ece,
        "brier": ratio("brier", "cal_n"),
        "nll": ratio("nll", "cal_n"),
        "accuracy": ratio("correct", "cal_n"),
        "spearman": ratio("win_rho", "win_def"),
        "kendall": ratio("win_tau", "win_def"),
        "spearman_pairs": ratio("pairs_rho", "pairs_def"),
        "kendall_pairs": ratio("pairs_tau", "pairs_def"),
        "spearman_whole": rho_w,
        "kendall_whole": tau_w,
        "a_rate_upper": ratio("upper", "upper_def"),
        "bc": bc,
        "prob_gap": ratio("gap", "judged"),
    }


def weighted_median(sorted_values: np.ndarray, doc: np.ndarray, w: np.ndarray, chunk: int = 64) -> np.ndarray:
    """np.median of the resampled values per round (each value repeated w[r, doc] times)."""
    out = np.full(len(w), np.nan)
    if not sorted_values.size:
        return out
    wi = w.astype(np.int32)
    for lo in range(0, len(w), chunk):
        c = np.cumsum(wi[lo : lo + chunk][:, doc], axis=1, dtype=np.int32)  # (chunk, values)
        total = c[:, -1]
        # np.median: the mean of the values at 0-based positions floor((T-1)/2) and floor(T/2).
        first = (c > np.floor((total - 1) / 2)[:, None]).argmax(axis=1)
        second = (c > np.floor(total / 2)[:, None]).argmax(axis=1)
        med = (sorted_values[first] + sorted_values[second]) / 2
        out[lo : lo + chunk] = np.where(total > 0, med, np.nan)
    return out


def _midranks(values: np.ndarray, doc: np.ndarray, w: np.ndarray, n_docs: int) -> np.ndarray:
    """Mid-ranks (1-based, ties averaged) of each value in every round's resampled multiset: (rounds, values)."""
    uniq, inv = np.unique(values, return_inverse=True)
    a = np.zeros((n_docs, len(uniq)))
    np.add.at(a, (doc, inv), 1.0)
    wg = w @ a
    below = np.cumsum(wg, axis=1) - wg
    return (below + (wg + 1) / 2)[:, inv]


def whole_correlations(
    x: np.ndarray, h: np.ndarray, doc: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pooled Spearman and Kendall tau-b of (x, h) per round, each candidate weighted by its
    document's count; NaN where undefined (fewer than two, or constant x or h), as _whole_corr."""
    rounds, n_docs = w.shape
    if x.size < 2:
        return np.full(rounds, np.nan), np.full(rounds, np.nan)
    cw = w[:, doc]
    total = cw.sum(axis=1, keepdims=True)
    rx, rh = _midranks(x, doc, w, n_docs), _midranks(h, doc, w, n_docs)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx, mh = (cw * rx).sum(axis=1, keepdims=True) / total, (cw * rh).sum(axis=1, keepdims=True) / total
    dx, dh = rx - mx, rh - mh
    vx, vh = (cw * dx * dx).sum(axis=1), (cw * dh * dh).sum(axis=1)
    rho = _ratio((cw * dx * dh).sum(axis=1), np.sqrt(vx * vh))
    rho = np.where((vx > 1e-9) & (vh > 1e-9), rho, np.nan)  # mid-ranks are exact halves: 0 variance is 0
    sx, sh = np.sign(x[:, None] - x[None, :]), np.sign(h[:, None] - h[None, :])
    present, starts = np.unique(doc, return_index=True)  # candidates come grouped by document

    def form(m: np.ndarray) -> np.ndarray:
        """sum over ordered candidate pairs of m, each weighted by both documents' counts, halved."""
        k = np.add.reduceat(np.add.reduceat(m, starts, axis=0), starts, axis=1)
        wp = w[:, present]
        return ((wp @ k) * wp).sum(axis=1) / 2

    untied = form(np.abs(sx)) * form(np.abs(sh))
    tau = np.where(untied > 0, _ratio(form(sx * sh), np.sqrt(untied)), np.nan)
    return np.clip(rho, -1, 1), np.clip(tau, -1, 1)


def percentile_interval(reps: np.ndarray, level: float) -> list[float] | None:
    """[lo, hi]: the (1 - level)/2 and (1 + level)/2 quantiles of the defined rounds; None when none is
    (the percentile bootstrap: only the coverage comparison uses it)."""
    reps = np.asarray(reps, dtype=float)
    reps = reps[np.isfinite(reps)]
    if not reps.size:
        return None
    lo, hi = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2])
    return [float(lo), float(hi)]


SUPPORT = {
    "a_rate": "rate_def",
    "fairness": "rate_def",
    "a_rate_prob": "rate_prob_def",
    "fairness_prob": "rate_prob_def",
    "a_rate_upper": "upper_def",
    "order_consistency": "order_n",
    "order_gap": "order_n",
    "answer_mass_median": "mass_n",
    "answer_mass_low_share": "mass_n",
    "max_prob": "judged",
    "entropy": "judged",
    "bc": "judged",
    "prob_gap": "judged",
    "ece": "cal_n",
    "brier": "cal_n",
    "nll": "cal_n",
    "accuracy": "cal_n",
    "spearman": "win_def",
    "kendall": "win_def",
    "spearman_pairs": "pairs_def",
    "kendall_pairs": "pairs_def",
}
"""Each replicated metric -> the per-document count that says whether a document contributes to it."""


def support(stats: DocStats) -> dict[str, np.ndarray]:
    """{metric: (documents,) bool}: the documents each metric rests on (frame order); the pooled
    correlations rest on the documents with a candidate in them."""
    out = {k: stats.sums[key] > 0 for k, key in SUPPORT.items()}
    whole = np.zeros(len(stats.sums["judged"]), dtype=bool)
    whole[np.unique(stats.whole[2]).astype(np.int64)] = True
    return out | {"spearman_whole": whole, "kendall_whole": whole}


BOOTSTRAPPED = ("answer_mass_median",)
"""Metrics the jackknife cannot follow (a median jumps between neighbouring values as a document
leaves): their interval's RMSE comes from percentile-bootstrap rounds instead."""


def as_lists(ivs: Mapping[str, Interval | None]) -> dict[str, list[float] | None]:
    """results.json's "intervals": {metric: [lo, hi] or None}."""
    return {k: None if iv is None else iv.as_list() for k, iv in ivs.items()}


def paired(
    label: str,
    a: float,
    b: float,
    reps_a: np.ndarray | None,
    reps_b: np.ndarray | None,
    level: float,
    mask: np.ndarray | None = None,
    metric: str | None = None,
    boots: tuple[np.ndarray, np.ndarray] | None = None,
    withheld: str | None = None,
    df: float | None = None,
) -> dict[str, object]:
    """B - A on the same documents, its interval from the same rows' B - A (a paired jackknife over
    the documents `mask` keeps: those either arm rests on; BOOTSTRAPPED metrics: the bootstrap
    rounds' B - A, `boots`; `withheld`: why none), its documents and method, its t test's two-sided
    "p_value" (harness-compare's Holm reads it) and its sentence."""
    a, b = float(a), float(b)
    diff = b - a if math.isfinite(a) and math.isfinite(b) else math.nan
    iv, p = None, math.nan
    if reps_a is not None and reps_b is not None and math.isfinite(diff):
        rows = np.asarray(reps_b, dtype=float) - np.asarray(reps_a, dtype=float)
        if withheld:  # too few labelled pairs (interval.MIN_LABELLED)
            iv = Interval(None, len(rows) if mask is None else int(np.sum(mask)), withheld)
        elif metric in BOOTSTRAPPED and boots is not None:
            n = len(rows) if mask is None else int(np.sum(mask))
            iv = bootstrap_interval(diff, boots[1] - boots[0], n, level, metric, difference=True)
            if iv.bounds is not None:
                p = p_value(diff, boots[1] - boots[0], n, boot=True)
        else:
            kept = rows if mask is None else rows[mask]
            iv = jackknife_interval(diff, kept, level, metric, difference=True, df=df)
            if iv.bounds is not None:
                p = p_value(diff, kept, df=df)
    return {
        "a": a,
        "b": b,
        "diff": diff,
        "interval": None if iv is None else iv.as_list(),
        **(iv.basis() if iv is not None else {}),
        "p_value": p if math.isfinite(p) else None,
        "sentence": sentence(label, diff, iv, level),
    }


def paired_all(
    reps_a: Mapping[str, np.ndarray] | None,
    reps_b: Mapping[str, np.ndarray] | None,
    point_a: Mapping[str, float | int],
    point_b: Mapping[str, float | int],
    level: float,
    prefix: str = "",
    masks_a: Mapping[str, np.ndarray] | None = None,
    masks_b: Mapping[str, np.ndarray] | None = None,
    boot_a: Mapping[str, np.ndarray] | None = None,
    boot_b: Mapping[str, np.ndarray] | None = None,
    dfs: Mapping[str, float] | None = None,
    withheld: Mapping[str, str] | None = None,
) -> dict[str, dict[str, object]]:
    """`paired` for every metric both arms have (a document counts when either arm rests on it);
    `dfs`: a metric's t degrees of freedom where not n - 1 (interval.kish_df); `withheld`: metric ->
    why it gets no interval."""
    keys = [
        k for k in point_a if k in point_b and k not in NO_INTERVAL and isinstance(point_a[k], (int, float))
    ]

    def mask(k: str) -> np.ndarray | None:
        got = [m[k] for m in (masks_a, masks_b) if m is not None and k in m]
        return None if not got else np.logical_or.reduce(got)

    def boots(k: str) -> tuple[np.ndarray, np.ndarray] | None:
        return (boot_a[k], boot_b[k]) if boot_a is not None and boot_b is not None and k in boot_a else None

    return {
        k: paired(
            f"{prefix}{k}",
            point_a[k],
            point_b[k],
            None if reps_a is None else reps_a.get(k),
            None if reps_b is None else reps_b.get(k),
            level,
            mask(k),
            k,
            boots(k),
            (withheld or {}).get(k)
            or too_few_labelled(k, point_a.get("n_calibration"), point_b.get("n_calibration")),
            (dfs or {}).get(k),
        )
        for k in keys
    }


def interval_summary(intervals: Mapping[str, Mapping[str, Any]] | None, prefix: str = "") -> dict[str, float]:
    """W&B summary keys for results.json "intervals" ({group: {metric: [lo, hi]}}):
    "<prefix><group>/<metric>_lo" and "_hi" beside the values' "<prefix><group>/<metric>"."""
    out: dict[str, float] = {}
    for group, values in (intervals or {}).items():
        for key, iv in (values or {}).items():
            if iv is not None:
                out[f"{prefix}{group}/{key}_lo"], out[f"{prefix}{group}/{key}_hi"] = (
                    float(iv[0]),
                    float(iv[1]),
                )
    return out
