"""Decision rates and confidence: the A-rate (argmax count, ties out, as ZEPO), its probability-mass
variant, fairness = -|A-rate - 0.5|, and mean max(p, 1 - p) / binary entropy."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from harness.errors import ConfigError
from harness.metrics.views import DocView, document_views, mean_or_nan
from harness.records import Judgment


def _doc_a_rate(m: np.ndarray, mode: str) -> float:
    vals = m[np.isfinite(m)]  # the diagonal is NaN, so this is the judged off-diagonal
    if mode == "prob":
        return float(vals.mean()) if vals.size else math.nan
    n_a, n_b = int((vals > 0.5).sum()), int((vals < 0.5).sum())
    # A document with no decisive entry has no decision rate; it is left out of the average.
    return n_a / (n_a + n_b) if n_a + n_b else math.nan


def a_rate(judgments: Sequence[Judgment], mode: str = "argmax") -> float:
    """Mean over documents of the per-document A-rate; NaN when no document has one.

    argmax: #(M > 0.5) / (#(M > 0.5) + #(M < 0.5)) over judged off-diagonal entries (ZEPO).
    prob: mean P(A) over judged off-diagonal entries.
    """
    return view_a_rate(document_views(judgments), mode)


def view_a_rate(views: Mapping[str, DocView], mode: str) -> float:
    if mode not in ("argmax", "prob"):
        raise ConfigError(f"a_rate mode must be 'argmax' or 'prob', got {mode!r}")
    rates = [_doc_a_rate(v.matrix, mode) for v in views.values()]
    return mean_or_nan([r for r in rates if not math.isnan(r)])


def fairness(judgments: Sequence[Judgment], mode: str = "argmax") -> float:
    """-|A-rate - 0.5|: 0 is perfectly fair; NaN when the A-rate is undefined."""
    return -abs(a_rate(judgments, mode) - 0.5)


def _xlogx(x: np.ndarray) -> np.ndarray:
    """x log x with 0 log 0 = 0 (a certain answer has zero entropy)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x * np.log(x), 0.0)


def confidence(judgments: Sequence[Judgment]) -> dict[str, float]:
    """Mean max(p, 1 - p) and mean binary entropy (nats) over judged pairs; NaN when none."""
    return confidence_p(np.array([j.p_a for j in judgments], dtype=float))


def confidence_p(p: np.ndarray) -> dict[str, float]:
    """`confidence` of a P(A) column (NaN entries are unjudged)."""
    p = p[np.isfinite(p)]
    if not p.size:
        return {"max_prob": math.nan, "entropy": math.nan}
    entropy = -(_xlogx(p) + _xlogx(1 - p))
    return {"max_prob": float(np.maximum(p, 1 - p).mean()), "entropy": float(entropy.mean())}
