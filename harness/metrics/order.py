"""Order consistency: does the judge's decision about two candidates survive swapping A and B?

For an unordered pair {i, j} judged in both orders, P(A|i,j) and 1 - P(A|j,i) both estimate the
probability that i beats j; a judge without position bias gives the same number twice. Reported:
- `order_consistency`: the share of such pairs whose decision is the same in both orders
  (sign(P(A|i,j) - 0.5) == sign(0.5 - P(A|j,i)); a tie in both orders counts as the same);
- `order_gap`: the mean |P(A|i,j) - (1 - P(A|j,i))| (0 for a judge that only reads content);
- `n_order_pairs`: how many unordered pairs had both orders judged (repeats averaged, per DocView).
Pairs are pooled over documents. Next to the A-rate they separate a position-biased judge (high
A-rate, low consistency) from one whose candidates simply differ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from harness.metrics.views import DocView, document_views
from harness.records import Judgment


def order_pairs(views: Mapping[str, DocView]) -> list[tuple[float, float]]:
    """(P(A|i,j), P(A|j,i)) for every unordered pair with both orders judged, i listed first."""
    return [tuple(x) for x in _pair_array(views).tolist()]  # type: ignore[misc]


def _pair_array(views: Mapping[str, DocView]) -> np.ndarray:
    """`order_pairs` as an (n, 2) array: per document, pairs i < k in row-major order."""
    out = []
    for v in views.values():
        i, k = np.triu_indices(len(v.ids), k=1)
        p, q = v.matrix[i, k], v.matrix[k, i]
        ok = np.isfinite(p) & np.isfinite(q)
        out.append(np.stack([p[ok], q[ok]], axis=1))
    return np.concatenate(out) if out else np.zeros((0, 2))


def view_order_consistency(views: Mapping[str, DocView]) -> dict[str, float | int]:
    pairs = _pair_array(views)
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
