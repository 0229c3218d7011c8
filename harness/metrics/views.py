"""Judgments grouped by document: the preference matrix M[i, j] = P(A) and human scores.

Conventions follow the ZEPO/PairS code (shared/reference/zepo.md): a `p_a` that is NaN counts as
unjudged everywhere; the diagonal is NaN (a self-pair is not a comparison).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.records import Judgment

EPS = 1e-6
"""Probabilities are clipped to [EPS, 1 - EPS] wherever a log would otherwise be infinite."""


@dataclass(frozen=True)
class DocView:
    """One document's judgments as a matrix, with the human score of each candidate."""

    ids: list[str]
    """Candidate ids in order of first appearance among the judgments."""
    matrix: np.ndarray
    """M[i, j] = P(A) with A = ids[i], B = ids[j]; mean over repeats; NaN on the diagonal and
    where unjudged."""
    human: np.ndarray
    """Human score per candidate (first finite value seen); NaN where the data has none."""


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


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


def preference_matrices(judgments: Sequence[Judgment]) -> dict[str, tuple[list[str], np.ndarray]]:
    """{doc_id: (ids, M)} with M[i, j] = P(A) for A = ids[i], B = ids[j]; NaN where unjudged."""
    return {d: (v.ids, v.matrix) for d, v in document_views(judgments).items()}


def human_scores(judgments: Sequence[Judgment]) -> dict[str, tuple[list[str], np.ndarray]]:
    """{doc_id: (ids, h)} with the same ids as `preference_matrices`; NaN where unknown."""
    return {d: (v.ids, v.human) for d, v in document_views(judgments).items()}



def mean_or_nan(xs: Sequence[float]) -> float:
    return float(np.mean(xs)) if len(xs) else math.nan
