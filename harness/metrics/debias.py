"""Debiasing baselines that return new judgments: permutation (both orders averaged), batch
calibration (Zhou et al., ICLR 2024) and contextual calibration (Zhao et al., 2021)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from harness.errors import ConfigError
from harness.metrics.views import EPS, document_views, finite
from harness.records import Judgment


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


def _clipped_logit(p: np.ndarray) -> np.ndarray:
    pc = np.clip(p, EPS, 1 - EPS)
    return np.log(pc) - np.log1p(-pc)


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


