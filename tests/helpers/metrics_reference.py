"""The metric functions that vectorisation replaced, as they were before it (harness/metrics @
edf2c66, verbatim but for imports), with the loops that call them: the reference the vectorised
package is compared with to 1e-12 (tests/metrics/test_metrics_vectorised.py). Every function
vectorisation left as it was is imported from harness, so nothing here is compared with itself.
Not shipped.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.files import jsonable, write_json_atomic
from harness.judging import MIN_ANSWER_MASS, judgment_to_row
from harness.metrics.calibration import calibration_pairs
from harness.metrics.correlation import _ratio, _whole_corr, pairs_sort, preference_table, win_rates
from harness.metrics.debias import _clipped_logit
from harness.metrics.mass import answer_masses
from harness.metrics.official import _doc_upper_rate, bc_prior, prob_gap
from harness.metrics.rates import _xlogx, view_a_rate
from harness.metrics.views import EPS, DocView, finite, mean_or_nan
from harness.records import Judgment


# ---- harness/metrics/views.py @ main ----
def document_views(judgments: Sequence[Judgment]) -> dict[str, DocView]:
    """Group judgments by document into preference matrices and human score vectors."""
    ids: dict[str, list[str]] = {}
    pos: dict[str, dict[str, int]] = {}
    for j in judgments:
        doc_ids, doc_pos = ids.setdefault(j.doc_id, []), pos.setdefault(j.doc_id, {})
        for cid in (j.a_id, j.b_id):
            if cid not in doc_pos:
                doc_pos[cid] = len(doc_ids)
                doc_ids.append(cid)
    sums = {d: np.zeros((len(v), len(v))) for d, v in ids.items()}
    counts = {d: np.zeros((len(v), len(v))) for d, v in ids.items()}
    human = {d: np.full(len(v), np.nan) for d, v in ids.items()}
    for j in judgments:
        i, k = pos[j.doc_id][j.a_id], pos[j.doc_id][j.b_id]
        for idx, h in ((i, j.human_a), (k, j.human_b)):
            if finite(h) and math.isnan(human[j.doc_id][idx]):
                human[j.doc_id][idx] = float(h)  # type: ignore[arg-type]
        # A self-pair is not a comparison: the diagonal stays NaN.
        if i != k and finite(j.p_a):
            sums[j.doc_id][i, k] += j.p_a
            counts[j.doc_id][i, k] += 1
    views = {}
    for d in ids:
        with np.errstate(invalid="ignore", divide="ignore"):
            m = np.where(counts[d] > 0, sums[d] / counts[d], np.nan)
        views[d] = DocView(ids=ids[d], matrix=m, human=human[d])
    return views


# ---- harness/metrics/rates.py @ main ----
def confidence(judgments: Sequence[Judgment]) -> dict[str, float]:
    """Mean max(p, 1 - p) and mean binary entropy (nats) over judged pairs; NaN when none."""
    p = np.array([j.p_a for j in judgments if finite(j.p_a)], dtype=float)
    if not p.size:
        return {"max_prob": math.nan, "entropy": math.nan}
    entropy = -(_xlogx(p) + _xlogx(1 - p))
    return {"max_prob": float(np.maximum(p, 1 - p).mean()), "entropy": float(entropy.mean())}


# ---- harness/metrics/calibration.py @ main ----
def calibration(judgments: Sequence[Judgment], bins: int = 10) -> dict[str, float | int]:
    """ECE (equal-width bins on P(A), bin k = [k/B, (k+1)/B), last bin closed, weighted by
    count), Brier, NLL (p clipped to [EPS, 1-EPS]), accuracy (P(A) = 0.5 scores half) and n."""
    if not isinstance(bins, int) or bins < 1:
        raise ConfigError(f"calibration bins must be a positive integer, got {bins!r}")
    p, y = calibration_pairs(judgments)
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


# ---- harness/metrics/correlation.py @ main ----
def rank_correlations(scores: np.ndarray, human: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spearman and Kendall tau-b of each row of `scores` (S x n) against `human` (n), the
    numbers scipy.stats.spearmanr/kendalltau give, vectorised over rows because PairS needs
    S = shuffles of them per document (scipy one by one took a minute per summary).
    Undefined values (constant row or constant humans, n < 2) are 0, as in ZEPO."""
    from scipy.stats import rankdata

    scores, human = np.atleast_2d(scores).astype(float), np.asarray(human, dtype=float)
    rs = rankdata(scores, axis=1)
    rs -= rs.mean(axis=1, keepdims=True)
    rh = rankdata(human) - (len(human) + 1) / 2
    rho = _ratio(rs @ rh, np.sqrt((rs**2).sum(axis=1) * (rh**2).sum()))
    sx = np.sign(scores[:, :, None] - scores[:, None, :])
    sh = np.sign(human[:, None] - human[None, :])
    # tau-b = (C - D) / sqrt((n0 - ties_x)(n0 - ties_h)); summing over both triangles doubles
    # numerator and each factor alike.
    untied = np.abs(sx).sum(axis=(1, 2)) * np.abs(sh).sum()
    tau = _ratio((sx * sh).sum(axis=(1, 2)), np.sqrt(untied))
    return np.clip(rho, -1, 1), np.clip(tau, -1, 1)


def _doc_scores(doc_id: str, view: DocView, ranking: str, shuffles: int, seed: int) -> np.ndarray:
    """The judge's score of each candidate: one row (win rate) or one row per shuffle (PairS
    list position, higher = preferred). Each document draws its shuffles from its own seeded
    stream, so its result does not depend on which other documents are present."""
    if ranking == "winrate":  # ranked as rounded to 12 decimals: float noise is no ranking
        return np.round(win_rates(view.matrix), 12)[None, :]
    n = len(view.ids)
    rng = np.random.default_rng([seed, zlib.crc32(doc_id.encode())])
    table, rows = preference_table(view.matrix), np.empty((shuffles, n))
    for s in range(shuffles):
        rows[s, pairs_sort(table, rng.permutation(n).tolist())] = np.arange(n)
    return rows


def correlations(
    judgments: Sequence[Judgment], ranking: str = "winrate", shuffles: int = 100, seed: int = 0
) -> dict[str, float | int]:
    """Per-document Spearman/Kendall of the judge's ranking vs human scores, averaged over
    documents (and, for PairS, over `shuffles` seeded random initial orders).

    ranking="winrate": score = `win_rates(M)`; ranking="pairs": rank = position in
    `pairs_sort`. Candidates without a human score (or win rate) are left out of their
    document; documents with fewer than two human-scored candidates are left out (n_docs
    counts those kept). spearman_whole/kendall_whole pool (win rate, human) over all
    documents whatever the ranking, since PairS positions are not comparable across documents.
    """
    return view_correlations(document_views(judgments), ranking, shuffles, seed)


def view_correlations(
    all_views: Mapping[str, DocView], ranking: str, shuffles: int, seed: int
) -> dict[str, float | int]:
    if ranking not in ("winrate", "pairs"):
        raise ConfigError(f"correlations ranking must be 'winrate' or 'pairs', got {ranking!r}")
    if not isinstance(shuffles, int) or shuffles < 1:
        raise ConfigError(f"correlations shuffles must be a positive integer, got {shuffles!r}")
    views = {d: v for d, v in all_views.items() if np.isfinite(v.human).sum() >= 2}
    rhos, taus = [], []
    for d, v in views.items():
        scores = _doc_scores(d, v, ranking, shuffles, seed)
        ok = np.isfinite(v.human) & np.isfinite(scores).all(axis=0)
        rho, tau = rank_correlations(scores[:, ok], v.human[ok])
        rhos.append(rho.mean())
        taus.append(tau.mean())
    rho_w, tau_w = _whole_corr(list(views.values()))
    return {
        "spearman": mean_or_nan(rhos),
        "kendall": mean_or_nan(taus),
        "spearman_whole": rho_w,
        "kendall_whole": tau_w,
        "n_docs": len(views),
    }


# ---- harness/metrics/debias.py @ main ----
def permutation_debias(judgments: Sequence[Judgment]) -> list[Judgment]:
    """p'(i, j) = (P(A|i,j) + 1 - P(A|j,i)) / 2 where the reverse order was judged."""
    views = document_views(judgments)
    index = {d: {c: n for n, c in enumerate(v.ids)} for d, v in views.items()}
    out = []
    for j in judgments:
        i, k = index[j.doc_id][j.a_id], index[j.doc_id][j.b_id]
        q = views[j.doc_id].matrix[k, i] if i != k else math.nan
        if finite(j.p_a) and math.isfinite(q):
            # 0.5 + (p - q)/2 is exactly 0.5 when p == q; (p + 1 - q)/2 can round off 0.5,
            # which the argmax A-rate would count as a decision.
            out.append(replace(j, p_a=0.5 + (j.p_a - q) / 2))
        else:
            out.append(j)
    return out


def _shift_logits(judgments: Sequence[Judgment], shifts: Mapping[str | None, float], by_doc: bool):
    """Return judgments with logit(p_a) reduced by the shift of their group; NaN p_a kept.
    A saturated p_a (0 or 1) has an infinite logit and stays saturated."""
    p = np.array([j.p_a for j in judgments], dtype=float)
    shift = np.array([shifts.get(j.doc_id if by_doc else None, 0.0) for j in judgments])
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        z = np.log(p) - np.log1p(-p) - shift
        new = 1.0 / (1.0 + np.exp(-z))
    return [replace(j, p_a=float(q)) if finite(j.p_a) else j for j, q in zip(judgments, new)]


def batch_calibrate(judgments: Sequence[Judgment], by_doc: bool = False) -> list[Judgment]:
    """Batch calibration (Zhou et al., ICLR 2024): subtract the batch-mean log-probability of
    each class, then renormalise. With two classes this is logit(p) - mean(logit(p)); the
    mean uses p clipped to [EPS, 1-EPS] so one saturated answer cannot make it infinite.
    The batch is every judgment passed, or each document's when `by_doc`."""
    groups: dict[str | None, list[float]] = {}
    for j in judgments:
        if finite(j.p_a):
            groups.setdefault(j.doc_id if by_doc else None, []).append(j.p_a)
    shifts = {g: float(_clipped_logit(np.array(ps)).mean()) for g, ps in groups.items()}
    return _shift_logits(judgments, shifts, by_doc)


def contextual_calibrate(judgments: Sequence[Judgment], p_cf: float) -> list[Judgment]:
    """Contextual calibration (Zhao et al., 2021): W = diag(1/[p_cf, 1-p_cf]), so
    p' = (p/p_cf) / (p/p_cf + (1-p)/(1-p_cf)), i.e. logit(p') = logit(p) - logit(p_cf).
    `p_cf` is the judge's P(A) on a content-free input; clipped to [EPS, 1-EPS]."""
    if not isinstance(p_cf, (int, float)) or not 0 <= p_cf <= 1:
        raise ConfigError(f"contextual calibration needs p_cf in [0, 1], got {p_cf!r}")
    shift = float(_clipped_logit(np.array([p_cf]))[0])
    return _shift_logits(judgments, {None: shift}, by_doc=False)


# ---- harness/metrics/mass.py @ main ----
def answer_mass_stats(judgments: Sequence[Judgment], threshold: float = MIN_ANSWER_MASS) -> dict[str, float]:
    """Median answer mass and the share of read judgments below `threshold` (NaN when none)."""
    m = answer_masses(judgments)
    if not m.size:
        return {"answer_mass_median": math.nan, "answer_mass_low_share": math.nan}
    return {"answer_mass_median": float(np.median(m)), "answer_mass_low_share": float((m < threshold).mean())}


# ---- harness/metrics/order.py @ main ----
def order_pairs(views: Mapping[str, DocView]) -> list[tuple[float, float]]:
    """(P(A|i,j), P(A|j,i)) for every unordered pair with both orders judged, i listed first."""
    out = []
    for v in views.values():
        m = v.matrix
        for i in range(len(v.ids)):
            for k in range(i + 1, len(v.ids)):
                if math.isfinite(m[i, k]) and math.isfinite(m[k, i]):
                    out.append((float(m[i, k]), float(m[k, i])))
    return out


def view_order_consistency(views: Mapping[str, DocView]) -> dict[str, float | int]:
    pairs = np.array(order_pairs(views), dtype=float).reshape(-1, 2)
    n = int(pairs.shape[0])
    if n == 0:
        return {"order_consistency": math.nan, "order_gap": math.nan, "n_order_pairs": 0}
    p, q = pairs[:, 0], pairs[:, 1]
    same = np.sign(p - 0.5) == np.sign(0.5 - q)
    return {
        "order_consistency": float(same.mean()),
        "order_gap": float(np.abs(p + q - 1).mean()),
        "n_order_pairs": n,
    }


def order_consistency(judgments: Sequence[Judgment]) -> dict[str, float | int]:
    """order_consistency, order_gap and n_order_pairs of a judgment list (NaN, 0 when no pair
    was judged in both orders)."""
    return view_order_consistency(document_views(judgments))


# ---- harness/metrics/official.py @ main ----
def upper_a_rate(judgments: Sequence[Judgment]) -> float:
    """Mean over documents of #(M[i, j] > 0.5) / #(M[i, j] != 0.5) over pairs i < j (candidate
    order = first appearance, i.e. the data's order); pass permutation-debiased judgments for the
    official debiased decision rate. A document with no decisive pair is left out (the official
    code would turn the mean into NaN)."""
    rates = [_doc_upper_rate(v.matrix) for v in document_views(judgments).values()]
    return mean_or_nan([r for r in rates if not math.isnan(r)])


# ---- harness/metrics/summary.py @ main ----
def metric_set(
    judgments: Sequence[Judgment], shuffles: int = 100, seed: int = 0, bins: int = 10
) -> dict[str, float | int]:
    """Every metric of one judgment list, as plain floats/ints (NaN where undefined)."""
    views = document_views(judgments)
    conf = confidence(judgments)
    cal = calibration(judgments, bins=bins)
    win = view_correlations(views, "winrate", shuffles, seed)
    pairs = view_correlations(views, "pairs", shuffles, seed)
    rate, rate_prob = view_a_rate(views, "argmax"), view_a_rate(views, "prob")
    return {
        "a_rate": rate,
        "a_rate_prob": rate_prob,
        **view_order_consistency(views),
        **answer_mass_stats(judgments),
        "fairness": -abs(rate - 0.5),
        "fairness_prob": -abs(rate_prob - 0.5),
        "max_prob": conf["max_prob"],
        "entropy": conf["entropy"],
        "ece": cal["ece"],
        "brier": cal["brier"],
        "nll": cal["nll"],
        "accuracy": cal["accuracy"],
        "n_calibration": int(cal["n"]),
        "spearman": win["spearman"],
        "kendall": win["kendall"],
        "spearman_pairs": pairs["spearman"],
        "kendall_pairs": pairs["kendall"],
        "spearman_whole": win["spearman_whole"],
        "kendall_whole": win["kendall_whole"],
        "n_judgments": len(judgments),
        "n_docs": len(views),
        # As the official ZEPO code (metrics/official.py): the upper-triangle decision rate (the
        # debiased rate of Figure 4 under "permutation"), the label-free BC prior, the Norm Gap.
        "a_rate_upper": upper_a_rate(judgments),
        "bc": bc_prior(judgments),
        "prob_gap": prob_gap(judgments),
    }


def summarize(
    judgments: Sequence[Judgment],
    p_cf: float | None = None,
    shuffles: int = 100,
    seed: int = 0,
    bins: int = 10,
) -> dict[str, dict[str, float | int]]:
    """`metric_set` of the raw judgments and of each debiased version: keys "none",
    "permutation", "batch" and, when `p_cf` is given, "contextual"."""
    variants = {
        "none": list(judgments),
        "permutation": permutation_debias(judgments),
        "batch": batch_calibrate(judgments),
    }
    if p_cf is not None:
        variants["contextual"] = contextual_calibrate(judgments, p_cf)
    return {k: metric_set(v, shuffles=shuffles, seed=seed, bins=bins) for k, v in variants.items()}


# ---- write_run @ main (harness/metrics/summary.py, harness/files.py's JSONL writer) ----
def write_run(
    out: Path, judgments: Sequence[Judgment], p_cf: float, shuffles: int, seed: int
) -> dict[str, Any]:
    """The old write path: judgments.jsonl through `jsonable` per row, then `summarize`."""
    rows = [judgment_to_row(j) for j in judgments] + [{"kind": "content_free", "p_a": p_cf}]
    tmp = out / ".judgments.jsonl.tmp"
    with tmp.open("w") as f:
        for r in rows:
            f.write(json.dumps(jsonable(r), allow_nan=False) + "\n")
    os.replace(tmp, out / "judgments.jsonl")
    summary = summarize(judgments, p_cf=p_cf, shuffles=shuffles, seed=seed)
    write_json_atomic(out / "results.json", {"shuffles": shuffles, "seed": seed, "metrics": summary})
    return summary
