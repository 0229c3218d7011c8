"""Debiasing baselines that return new judgments: permutation (both orders averaged), batch
calibration (Zhou et al., ICLR 2024) and contextual calibration (Zhao et al., 2021).

Each has a list form (new judgments) and a column form on a `Frame` (`*_p`: the new P(A) column),
which `summarize` uses so that no judgment is copied."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np

from harness.errors import ConfigError
from harness.metrics.views import EPS, Frame, build_frame
from harness.records import Judgment

ARITHMETIC = ("exact", "official")
"""How permutation debiasing adds: "exact" 0.5 + (p - q)/2, "official" (p + 1 - q)/2 as the
official ZEPO code's (M + 1 - M^T)/2 (pairs/pairs_eval.py). They differ only by rounding: for a
bit-identical pair (p == q) exact gives 0.5 (a tie), official 0.49999999999999994 for some p
(a B decision in the official upper-triangle rate)."""


def permutation_p(frame: Frame, arithmetic: str = "exact") -> np.ndarray:
    """p'(i, j) = (P(A|i,j) + 1 - P(A|j,i)) / 2 per judgment, P(A|j,i) the mean over the reverse
    order's repeats; a judgment whose reverse was not judged (or a self-pair) keeps its P(A)."""
    if arithmetic not in ARITHMETIC:
        raise ConfigError(
            f"permutation debiasing arithmetic must be one of {', '.join(ARITHMETIC)}, got {arithmetic!r}"
        )
    p = frame.p
    q = np.where(frame.a != frame.b, frame.matrix()[frame.rcell], np.nan) if p.size else p
    ok = np.isfinite(p) & np.isfinite(q)
    with np.errstate(invalid="ignore"):
        # exact: 0.5 + (p - q)/2 is exactly 0.5 when p == q; (p + 1 - q)/2 can round off 0.5,
        # which the argmax A-rate would count as a decision. The official code does the latter.
        new = 0.5 + (p - q) / 2 if arithmetic == "exact" else (p + 1 - q) / 2
    return np.where(ok, new, p)


def permutation_debias(judgments: Sequence[Judgment], arithmetic: str = "exact") -> list[Judgment]:
    """Judgments with `permutation_p` (arithmetic "exact", or "official": as the official code)."""
    return with_p(judgments, permutation_p(build_frame(judgments), arithmetic))


def with_p(judgments: Sequence[Judgment], p: np.ndarray) -> list[Judgment]:
    """Copies of `judgments` with P(A) from `p`, NaN P(A) kept (as dataclasses.replace, faster)."""
    out = []
    for j, v in zip(judgments, p.tolist()):
        if v is j.p_a or v == j.p_a or v != v:
            out.append(j)
            continue
        new = copy.copy(j)
        object.__setattr__(new, "p_a", v)
        out.append(new)
    return out


def _shift_p(p: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """logit(p) reduced by `shift`; NaN p kept. A saturated p (0 or 1) has an infinite logit and
    stays saturated."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        z = np.log(p) - np.log1p(-p) - shift
        new = 1.0 / (1.0 + np.exp(-z))
    return np.where(np.isfinite(p), new, p)


def _clipped_logit(p: np.ndarray) -> np.ndarray:
    pc = np.clip(p, EPS, 1 - EPS)
    return np.log(pc) - np.log1p(-pc)


def batch_p(frame: Frame, by_doc: bool = False) -> np.ndarray:
    """`batch_calibrate`'s P(A) column."""
    p, ok = frame.p, np.isfinite(frame.p)
    if not by_doc:
        return _shift_p(p, float(_clipped_logit(p[ok]).mean()) if ok.any() else 0.0)
    shifts = np.zeros(len(frame.doc_ids))
    for d in np.unique(frame.doc[ok]):
        shifts[d] = float(_clipped_logit(p[ok & (frame.doc == d)]).mean())
    return _shift_p(p, shifts[frame.doc])


def batch_calibrate(judgments: Sequence[Judgment], by_doc: bool = False) -> list[Judgment]:
    """Batch calibration (Zhou et al., ICLR 2024): subtract the batch-mean log-probability of
    each class, then renormalise. With two classes this is logit(p) - mean(logit(p)); the
    mean uses p clipped to [EPS, 1-EPS] so one saturated answer cannot make it infinite.
    The batch is every judgment passed, or each document's when `by_doc`."""
    return with_p(judgments, batch_p(build_frame(judgments), by_doc))


def contextual_p(frame: Frame, p_cf: float) -> np.ndarray:
    """`contextual_calibrate`'s P(A) column."""
    if not isinstance(p_cf, (int, float)) or not 0 <= p_cf <= 1:
        raise ConfigError(f"contextual calibration needs p_cf in [0, 1], got {p_cf!r}")
    return _shift_p(frame.p, float(_clipped_logit(np.array([p_cf]))[0]))


def contextual_calibrate(judgments: Sequence[Judgment], p_cf: float) -> list[Judgment]:
    """Contextual calibration (Zhao et al., 2021): W = diag(1/[p_cf, 1-p_cf]), so
    p' = (p/p_cf) / (p/p_cf + (1-p)/(1-p_cf)), i.e. logit(p') = logit(p) - logit(p_cf).
    `p_cf` is the judge's P(A) on a content-free input; clipped to [EPS, 1-EPS]."""
    return with_p(judgments, contextual_p(build_frame(judgments), p_cf))
