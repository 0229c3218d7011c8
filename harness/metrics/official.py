"""Quantities as the official ZEPO code computes them (cambridgeltl/zepo @ 0c3940a, pairs/pairs_eval.py),
for the paper's figures and its debiased search:

- `upper_a_rate`: the decision rate of a permutation-debiased matrix (`get_a_rate` with
  `--do_permutate`, :52-62). Over ALL off-diagonal entries a debiased matrix always gives exactly
  0.5 (p'(j, i) = 1 - p'(i, j)); the official code counts the upper triangle only: the share of
  pairs i < j (candidates in file order) on which the debiased judge prefers the earlier one.
- `bc_prior`: the label-free "calibration" of Figure 3 (`get_prob_gap`, :24-42): the batch-
  calibration prior |mean logit_A - mean logit_B| / 2, each logit the SUM of the raw logits of
  the label's token variants (`models/llama3.py:133-135`). Lower is better calibrated.
- `prob_gap`: the "confidence" column (`Norm Gap`): mean |P(A) - P(B)| with the label
  probabilities normalised over every answer label (C included when read).
Raw logits differ from the log-probabilities judgments.jsonl keeps by the per-pair log-partition
log Z; summed over the same number of A and B variants it cancels in logit_A - logit_B, so both
BC and the gap are computed exactly from `token_logprobs`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from harness.metrics.views import DocView, Frame, document_views, finite, mean_or_nan
from harness.records import Judgment


def _doc_upper_rate(m: np.ndarray) -> float:
    upper = m[np.triu_indices(len(m), k=1)]
    vals = upper[np.isfinite(upper) & (upper != 0)]  # the official `!= 0` (it removes the zeroed lower half)
    n_a, n_b = int((vals > 0.5).sum()), int((vals < 0.5).sum())
    return n_a / (n_a + n_b) if n_a + n_b else math.nan


def upper_a_rate(judgments: Sequence[Judgment]) -> float:
    """Mean over documents of #(M[i, j] > 0.5) / #(M[i, j] != 0.5) over pairs i < j (candidate
    order = first appearance, i.e. the data's order); pass permutation-debiased judgments for the
    official debiased decision rate. A document with no decisive pair is left out (the official
    code would turn the mean into NaN)."""
    return view_upper_a_rate(document_views(judgments))


def view_upper_a_rate(views: Mapping[str, DocView]) -> float:
    rates = [_doc_upper_rate(v.matrix) for v in views.values()]
    return mean_or_nan([r for r in rates if not math.isnan(r)])


def _label_sums(logprobs: Mapping[str, float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for key, value in logprobs.items():
        out.setdefault(key.split(":", 1)[0], []).append(float(value))
    return out


def bc_prior(judgments: Sequence[Judgment], labels: tuple[str, str] = ("A", "B")) -> float:
    """|mean(logit_A) - mean(logit_B)| / 2 over every judged pair (lower = better calibrated).

    A pair whose answer could not be read (no answer-token log-probs) contributes logits 0, as in
    the official code; a NaN P(A) is left out. NaN when a pair's A and B have different numbers of
    variants (log Z would not cancel) or when nothing is judged."""
    diffs = []
    for j in judgments:
        if not finite(j.p_a):
            continue
        sums = _label_sums(j.token_logprobs)
        a, b = sums.get(labels[0], []), sums.get(labels[1], [])
        if len(a) != len(b):
            return math.nan
        diffs.append(sum(a) - sum(b) if a else 0.0)
    return abs(float(np.mean(diffs))) / 2 if diffs else math.nan


def bc_prior_of(frame: Frame) -> float:
    """`bc_prior` (labels A, B) from a Frame's token stats: one pass over the logprobs per summary."""
    t, ok = frame.tokens, np.isfinite(frame.p)
    if (t.bc_mismatch & ok).any():
        return math.nan
    return abs(float(np.mean(t.bc_diff[ok]))) / 2 if ok.any() else math.nan


def prob_gap_of(frame: Frame) -> float:
    """`prob_gap` (labels A, B) from a Frame's token stats."""
    ok = np.isfinite(frame.p)
    return float(np.mean(frame.tokens.gap[ok])) if ok.any() else math.nan


def prob_gap(judgments: Sequence[Judgment], labels: tuple[str, str] = ("A", "B")) -> float:
    """Mean |P(A) - P(B)|, probabilities normalised over every label read (unread pairs: 0)."""
    gaps = []
    for j in judgments:
        if not finite(j.p_a):
            continue
        sums = _label_sums(j.token_logprobs)
        if not sums:
            gaps.append(0.0)
            continue
        mass = {k: sum(math.exp(x) for x in v) for k, v in sums.items()}
        total = sum(mass.values())
        gaps.append(abs(mass.get(labels[0], 0.0) - mass.get(labels[1], 0.0)) / total if total > 0 else 0.0)
    return mean_or_nan(gaps)
