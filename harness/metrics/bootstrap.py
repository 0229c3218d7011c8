"""Uncertainty of every metric: a percentile bootstrap over DOCUMENTS, and paired differences.

A document is the independent unit: its pairs, both orders of each, and its candidates' human
scores move together (pairs of one document share its source text, its candidates and often the
judge's mood for it; resampling pairs would treat them as independent and give intervals too
narrow: tests/test_bootstrap.py shows a pair-level bootstrap under-covering on clustered data).

Each of `rounds` rounds draws n documents with replacement from the n judged ones: one call
`numpy.random.default_rng(seed).integers(0, n, (rounds, n))` over the documents in sorted id order
(`Resample`), so the draw does not depend on the judgments' order, two runs over the same
documents get the same draws (a paired bootstrap: `paired`), and a mean over documents equals
scipy.stats.bootstrap(method="percentile") with the same seed. Round r is a row of counts W[r, d].

Every metric is recomputed per round from per-document sufficient statistics (`DocStats`):
a pooled mean (confidence, calibration, order consistency, ...) is (W @ sums) / (W @ counts), a
mean over documents (A-rate, per-document Spearman/Kendall) is (W @ values) / (W @ defined), ECE
sums |W @ sum(y) - W @ sum(p)| over its bins; the pooled ("whole") rank correlations are recomputed
per round: Spearman from weighted mid-ranks ((rounds, candidates) arrays), Kendall's tau-b as a
quadratic form W K W^T of per-document-pair concordance sums (exactly what scipy gives on the
resampled data, ties included). Variants with a fitted constant (batch calibration's shift, the
content-free P(A)) keep it at its full-data value: their intervals are conditional on it.

The interval is the (1 - level)/2 and (1 + level)/2 quantiles (numpy's linear interpolation, as
scipy's percentile method) of the rounds where the metric is defined.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.judging import MIN_ANSWER_MASS
from harness.metrics.views import EPS, Frame

METHOD = "percentile bootstrap over documents"
NO_INTERVAL = ("n_judgments", "n_docs", "n_calibration", "n_order_pairs", "spearman_pairs_se")
"""metric_set keys without an interval: counts, and the shuffle standard error (itself a spread)."""
CONDITIONAL = ("batch calibration's logit shift and the content-free P(A) are held at their full-data values "
               "(intervals of the batch and contextual variants are conditional on them)")


def check_settings(rounds: int, level: float) -> None:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ConfigError(f"metrics.bootstrap must be an integer >= 0 (0 turns intervals off), got {rounds!r}")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ConfigError(f"metrics.level must lie strictly between 0 and 1 (e.g. 0.95), got {level!r}")


def resample_counts(n: int, rounds: int, seed: int) -> np.ndarray:
    """(rounds, n) counts: how often each of n units is drawn in each round (n draws per round)."""
    idx = np.random.default_rng(seed).integers(0, n, (rounds, n)) if n else np.zeros((rounds, 0), np.int64)
    flat = (idx + np.arange(rounds)[:, None] * n).ravel()
    return np.bincount(flat, minlength=rounds * n).reshape(rounds, n).astype(float)


@dataclass(frozen=True)
class Resample:
    """The rounds' document counts over a set of document ids (sorted), and the interval level."""

    ids: list[str]
    counts: np.ndarray
    """(rounds, len(ids))."""
    level: float
    seed: int

    @classmethod
    def draw(cls, doc_ids: Sequence[str], rounds: int, level: float, seed: int) -> Resample:
        check_settings(rounds, level)
        ids = sorted(set(doc_ids))
        return cls(ids, resample_counts(len(ids), rounds, seed), float(level), int(seed))

    @property
    def rounds(self) -> int:
        return int(self.counts.shape[0])

    def columns(self, doc_ids: Sequence[str]) -> np.ndarray:
        """The counts of `doc_ids` (each must be one of `ids`), in that order: (rounds, len(doc_ids))."""
        pos = {d: k for k, d in enumerate(self.ids)}
        missing = [d for d in doc_ids if d not in pos]
        if missing:
            raise ValueError(f"documents {missing[:3]} are not among the resampled ones")
        return self.counts[:, [pos[d] for d in doc_ids]]

    def meta(self) -> dict[str, object]:
        return {"method": METHOD, "rounds": self.rounds, "level": self.level, "seed": self.seed,
                "unit": "document", "n_documents": len(self.ids), "held_fixed": CONDITIONAL}


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


def _decisions(flat: np.ndarray, keep: np.ndarray, cell_doc: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-document A-rate (argmax) and whether it is defined, over the cells `keep`."""
    with np.errstate(invalid="ignore"):
        n_a = _bincount(cell_doc[keep & (flat > 0.5)], None, d)
        n_b = _bincount(cell_doc[keep & (flat < 0.5)], None, d)
    rate = _ratio(n_a, n_a + n_b)
    return np.nan_to_num(rate), np.isfinite(rate).astype(float)


def doc_stats(frame: Frame, win: Mapping[str, tuple[float, float]], pairs: Mapping[str, tuple[float, float]],
              upper_p: np.ndarray | None = None, bins: int = 10) -> DocStats:
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
    ece = (_bincount(key, None, d * bins).reshape(shape), _bincount(key, yl, d * bins).reshape(shape),
           _bincount(key, pl, d * bins).reshape(shape))
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
    return DocStats(s, ece, (mass[order], mdoc[order]), bool((tokens.bc_mismatch & ok).any()),
                    _whole_inputs(frame, flat, set(win)))


def _whole_inputs(frame: Frame, flat: np.ndarray, kept: set[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xs, hs, ds = [], [], []
    for k, doc_id in enumerate(frame.doc_ids):
        if doc_id not in kept:
            continue
        n = len(frame.ids[k])
        m = flat[frame.start[k]:frame.start[k] + n * n].reshape(n, n)
        judged = np.isfinite(m)
        with np.errstate(invalid="ignore"):
            x = np.where(judged.any(axis=1), np.where(judged, m, 0.0).sum(axis=1) / judged.sum(axis=1), np.nan)
        h = frame.human[k]
        good = np.isfinite(x) & np.isfinite(h)
        xs.append(x[good])
        hs.append(h[good])
        ds.append(np.full(int(good.sum()), k))
    cat = (lambda a: np.concatenate(a) if a else np.zeros(0))  # noqa: E731
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
        "a_rate": rate, "a_rate_prob": rate_prob,
        "order_consistency": ratio("order_same", "order_n"), "order_gap": ratio("order_gap", "order_n"),
        "answer_mass_median": weighted_median(*stats.masses, w) if mass_median is None else mass_median,
        "answer_mass_low_share": ratio("mass_low", "mass_n"),
        "fairness": -np.abs(rate - 0.5), "fairness_prob": -np.abs(rate_prob - 0.5),
        "max_prob": ratio("max_prob", "judged"), "entropy": ratio("entropy", "judged"),
        "ece": ece, "brier": ratio("brier", "cal_n"), "nll": ratio("nll", "cal_n"),
        "accuracy": ratio("correct", "cal_n"),
        "spearman": ratio("win_rho", "win_def"), "kendall": ratio("win_tau", "win_def"),
        "spearman_pairs": ratio("pairs_rho", "pairs_def"), "kendall_pairs": ratio("pairs_tau", "pairs_def"),
        "spearman_whole": rho_w, "kendall_whole": tau_w,
        "a_rate_upper": ratio("upper", "upper_def"), "bc": bc, "prob_gap": ratio("gap", "judged"),
    }


def weighted_median(sorted_values: np.ndarray, doc: np.ndarray, w: np.ndarray, chunk: int = 64) -> np.ndarray:
    """np.median of the resampled values per round (each value repeated w[r, doc] times)."""
    out = np.full(len(w), np.nan)
    if not sorted_values.size:
        return out
    wi = w.astype(np.int32)
    for lo in range(0, len(w), chunk):
        c = np.cumsum(wi[lo:lo + chunk][:, doc], axis=1, dtype=np.int32)  # (chunk, values)
        total = c[:, -1]
        # np.median: the mean of the values at 0-based positions floor((T-1)/2) and floor(T/2).
        first = (c > np.floor((total - 1) / 2)[:, None]).argmax(axis=1)
        second = (c > np.floor(total / 2)[:, None]).argmax(axis=1)
        med = (sorted_values[first] + sorted_values[second]) / 2
        out[lo:lo + chunk] = np.where(total > 0, med, np.nan)
    return out


def _midranks(values: np.ndarray, doc: np.ndarray, w: np.ndarray, n_docs: int) -> np.ndarray:
    """Mid-ranks (1-based, ties averaged) of each value in every round's resampled multiset: (rounds, values)."""
    uniq, inv = np.unique(values, return_inverse=True)
    a = np.zeros((n_docs, len(uniq)))
    np.add.at(a, (doc, inv), 1.0)
    wg = w @ a
    below = np.cumsum(wg, axis=1) - wg
    return (below + (wg + 1) / 2)[:, inv]


def whole_correlations(x: np.ndarray, h: np.ndarray, doc: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    """[lo, hi]: the (1 - level)/2 and (1 + level)/2 quantiles of the defined rounds; None when none is."""
    reps = np.asarray(reps, dtype=float)
    reps = reps[np.isfinite(reps)]
    if not reps.size:
        return None
    lo, hi = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2])
    return [float(lo), float(hi)]


def intervals(point: Mapping[str, float | int], reps: Mapping[str, np.ndarray], level: float) -> dict[str, list[float] | None]:
    """{metric: [lo, hi]} for every replicated metric; None where the value itself is undefined."""
    out: dict[str, list[float] | None] = {}
    for key, r in reps.items():
        value = point.get(key)
        out[key] = None if value is None or not math.isfinite(float(value)) else percentile_interval(r, level)
    return out


def sentence(label: str, diff: float, interval: Sequence[float] | None, level: float) -> str:
    """One plain sentence: "held-out Spearman +0.12 [-0.05, +0.31]: not distinguishable from 0 at 95%"."""
    pct = f"{level * 100:g}%"
    if diff is None or not math.isfinite(diff):
        return f"{label}: undefined (the metric is NaN in at least one arm)"
    if interval is None:
        return f"{label} {diff:+.3f}: no interval (metrics.bootstrap=0)"
    lo, hi = interval
    verdict = "distinguishable from 0" if lo > 0 or hi < 0 else "not distinguishable from 0"
    return f"{label} {diff:+.3f} [{lo:+.3f}, {hi:+.3f}]: {verdict} at {pct}"


def paired(label: str, a: float, b: float, reps_a: np.ndarray | None, reps_b: np.ndarray | None,
           level: float) -> dict[str, object]:
    """B - A on the same documents, its interval from the same rounds' B - A (a paired bootstrap),
    and its sentence."""
    a, b = float(a), float(b)
    diff = b - a if math.isfinite(a) and math.isfinite(b) else math.nan
    interval = None
    if reps_a is not None and reps_b is not None and math.isfinite(diff):
        interval = percentile_interval(np.asarray(reps_b) - np.asarray(reps_a), level)
    return {"a": a, "b": b, "diff": diff, "interval": interval, "sentence": sentence(label, diff, interval, level)}


def paired_all(reps_a: Mapping[str, np.ndarray] | None, reps_b: Mapping[str, np.ndarray] | None,
               point_a: Mapping[str, float | int], point_b: Mapping[str, float | int], level: float,
               prefix: str = "") -> dict[str, dict[str, object]]:
    """`paired` for every metric both arms have an interval for (`prefix` starts each sentence)."""
    keys = [k for k in point_a if k in point_b and k not in NO_INTERVAL and isinstance(point_a[k], (int, float))]
    return {k: paired(f"{prefix}{k}", point_a[k], point_b[k], None if reps_a is None else reps_a.get(k),
                      None if reps_b is None else reps_b.get(k), level) for k in keys}


def interval_summary(intervals: Mapping[str, Mapping[str, Any]] | None, prefix: str = "") -> dict[str, float]:
    """W&B summary keys for results.json "intervals" ({group: {metric: [lo, hi]}}):
    "<prefix><group>/<metric>_lo" and "_hi" beside the values' "<prefix><group>/<metric>"."""
    out: dict[str, float] = {}
    for group, values in (intervals or {}).items():
        for key, iv in (values or {}).items():
            if iv is not None:
                out[f"{prefix}{group}/{key}_lo"], out[f"{prefix}{group}/{key}_hi"] = float(iv[0]), float(iv[1])
    return out
