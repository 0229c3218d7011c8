"""Length bias: does the judge prefer the longer candidate, beside its preference for position A?

A fractional logistic regression of the judge's P(A) on the candidates' length difference:

    logit P(A | i shown as A, j as B) = position + length * (len_i - len_j) / scale

fitted by maximum likelihood with P(A) as a soft target (the cross-entropy of P(A) against
sigmoid(z), Newton's method), over every judged pair of the raw judgments. `scale` is the standard
deviation of the length differences over the judged pairs, so `length` is the change in log-odds
for one standard deviation of length difference; `position` is the log-odds of A for candidates of
equal length (0: no position bias). Lengths are in whitespace-separated words of the candidate
text as shown (every backend has them; a subword count would need the judge's own tokenizer, which
an API judge does not expose). Both coefficients get the interval every metric gets
(harness/metrics/interval.py): the fit is redone with each document left out in turn (starting
from the full-data fit, the same rows as every other metric: harness/metrics/bootstrap.py).

Length-controlled P(A) (`controlled_p`), in the manner of AlpacaEval's length-controlled win rate
(its fitted model's prediction with the length term set to zero): each pair's log-odds minus the
length preference, logit P_lc(A) = logit P(A) - c * (len_A - len_B) / scale, the rest of the
pair's preference (content and position) kept; c (`control_shift`) is the shift after which the same
fit finds no length preference (with noisy P(A) the fitted coefficient itself is attenuated, and
subtracting it once leaves part of the preference: tests/metrics/test_length_bias.py). Win rates, PairS and their Spearman with humans
computed on P_lc are the length-controlled ones (metrics.summary.write_run: "length_bias"
"controlled"); the coefficient is held at its full-data fit there (intervals conditional on it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from harness.metrics.bootstrap import LeaveOneOut
from harness.metrics.interval import jackknife_interval
from harness.metrics.views import EPS
from harness.records import Document, Judgment

UNIT = "words (whitespace-separated) of the candidate text"


def candidate_lengths(docs: Sequence[Document]) -> dict[tuple[str, str], int]:
    """(document id, candidate id) -> length in words."""
    return {(d.id, c.id): len(c.text.split()) for d in docs for c in d.candidates}


def _fit(p: np.ndarray, x: np.ndarray, w: np.ndarray, start: np.ndarray, iters: int) -> np.ndarray:
    """Newton steps for (position, length) of every row of weights w (rounds, n): (rounds, 2)."""
    b = np.broadcast_to(start, (len(w), 2)).astype(float).copy()
    for _ in range(iters):
        z = b[:, :1] + b[:, 1:] * x
        s = 1.0 / (1.0 + np.exp(-z))
        r, v = w * (p - s), w * s * (1 - s)
        g0, g1 = r.sum(axis=1), (r * x).sum(axis=1)
        h00, h01, h11 = v.sum(axis=1), (v * x).sum(axis=1), (v * x * x).sum(axis=1)
        det = h00 * h11 - h01 * h01
        with np.errstate(invalid="ignore", divide="ignore"):
            d0, d1 = (h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det
        ok = (np.isfinite(d0) & np.isfinite(d1))[:, None]
        b += np.where(ok, np.stack([d0, d1], axis=1), 0.0)
        b[~np.isfinite(det) | (det <= 0)] = np.nan
    return b


def length_bias(
    judgments: Sequence[Judgment],
    lengths: Mapping[tuple[str, str], float],
    loo: LeaveOneOut | None = None,
    chunk: int = 100,
) -> dict[str, object]:
    """The fit's coefficients, its scale and, with `loo`, their intervals over documents (and, beside
    each, its documents and method: "position_basis", "length_basis").
    Pairs without both lengths, or with a NaN P(A), are left out (`n_pairs` counts those used);
    the coefficients are NaN when fewer than two length differences exist or all are equal."""
    rows = [
        (j.doc_id, float(j.p_a), lengths[(j.doc_id, j.a_id)] - lengths[(j.doc_id, j.b_id)])
        for j in judgments
        if j.p_a is not None
        and math.isfinite(j.p_a)
        and (j.doc_id, j.a_id) in lengths
        and (j.doc_id, j.b_id) in lengths
    ]
    out: dict[str, object] = {
        "position": math.nan,
        "length": math.nan,
        "scale": math.nan,
        "unit": UNIT,
        "n_pairs": len(rows),
        "position_interval": None,
        "length_interval": None,
        "position_basis": None,
        "length_basis": None,
    }
    if len(rows) < 2:
        return out
    doc_ids = sorted({r[0] for r in rows})
    pos = {d: k for k, d in enumerate(doc_ids)}
    doc = np.array([pos[r[0]] for r in rows])
    p = np.clip(np.array([r[1] for r in rows]), EPS, 1 - EPS)
    diff = np.array([r[2] for r in rows], dtype=float)
    scale = float(diff.std())
    if not scale > 0:
        return {**out, "scale": scale}
    x = diff / scale
    full = _fit(p, x, np.ones((1, len(p))), np.zeros(2), 25)[0]
    out.update(position=float(full[0]), length=float(full[1]), scale=scale)
    if loo is None or not np.isfinite(full).all():
        return out
    rows = loo.positions(doc_ids)  # the rows that leave out a document with a usable pair
    w_doc = loo.columns(doc_ids)[rows]
    reps = np.concatenate(
        [_fit(p, x, w_doc[lo : lo + chunk][:, doc], full, 4) for lo in range(0, len(rows), chunk)]
    )
    for k, name in enumerate(("position", "length")):
        iv = jackknife_interval(float(full[k]), reps[:, k], loo.level)
        out.update({f"{name}_interval": iv.as_list(), f"{name}_basis": iv.basis()})
    return out


def control_shift(
    judgments: Sequence[Judgment],
    lengths: Mapping[tuple[str, str], float],
    fit: Mapping[str, object],
    tol: float = 1e-9,
) -> float:
    """The log-odds shift per SD of length difference that leaves no length preference: the c with
    length_bias(P_c).length == 0, P_c = sigmoid(logit P(A) - c * dlen / scale). It starts at the fit's
    coefficient and adds the refit's until that is below `tol` (with noisy P(A) the fit's own
    coefficient is attenuated, so subtracting it once leaves part of the preference). NaN when the
    fit is undefined."""
    slope, scale = fit.get("length"), fit.get("scale")
    if not (isinstance(slope, float) and isinstance(scale, float) and math.isfinite(slope) and scale > 0):
        return math.nan
    p, diff, ok = _columns(judgments, lengths)
    x = diff[ok] / scale
    pc = np.clip(p[ok], EPS, 1 - EPS)
    logit, c = np.log(pc) - np.log1p(-pc), float(slope)
    for _ in range(100):
        q = np.clip(1.0 / (1.0 + np.exp(-(logit - c * x))), EPS, 1 - EPS)
        left = float(_fit(q, x, np.ones((1, len(q))), np.zeros(2), 25)[0, 1])
        if not math.isfinite(left):
            return math.nan
        c += left
        if abs(left) < tol:
            break
    return c


def _columns(judgments: Sequence[Judgment], lengths: Mapping[tuple[str, str], float]):
    p = np.array([math.nan if j.p_a is None else j.p_a for j in judgments], dtype=float)
    diff = np.array(
        [
            lengths.get((j.doc_id, j.a_id), math.nan) - lengths.get((j.doc_id, j.b_id), math.nan)
            for j in judgments
        ],
        dtype=float,
    )
    return p, diff, np.isfinite(p) & np.isfinite(diff)


def controlled_p(
    judgments: Sequence[Judgment],
    lengths: Mapping[tuple[str, str], float],
    fit: Mapping[str, object],
    shift: float | None = None,
) -> np.ndarray:
    """P(A) with the length preference removed: logit P(A) - shift * dlen / scale, `shift` the
    `control_shift` (computed when not given); unchanged where a length is missing, P(A) is NaN,
    or the fit is undefined."""
    p, diff, ok = _columns(judgments, lengths)
    c = control_shift(judgments, lengths, fit) if shift is None else shift
    scale = fit.get("scale")
    if not (math.isfinite(c) and isinstance(scale, float) and scale > 0):
        return p
    pc = np.clip(p, EPS, 1 - EPS)
    with np.errstate(invalid="ignore", over="ignore"):
        z = np.log(pc) - np.log1p(-pc) - c * diff / scale
        new = 1.0 / (1.0 + np.exp(-z))
    return np.where(ok, new, p)
