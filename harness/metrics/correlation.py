"""Agreement with humans: per-document Spearman/Kendall of the judge's ranking (win rate, or the
PairS merge sort over the preference matrix, averaged over seeded shuffles) against human scores;
undefined per-document correlations count as 0, as in the ZEPO/PairS code."""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from harness.errors import ConfigError
from harness.metrics.views import DocView, document_views, mean_or_nan
from harness.records import Judgment


def win_rates(m: np.ndarray) -> np.ndarray:
    """Row mean of M over judged off-diagonal entries; NaN for a row with none."""
    off = np.where(np.eye(len(m), dtype=bool), np.nan, m)
    judged = np.isfinite(off)
    total = np.where(judged, off, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(judged.any(axis=1), total / judged.sum(axis=1), np.nan)


def preference_table(m: np.ndarray) -> list[list[bool]]:
    """T[a][b] = the judge prefers candidate a over b when a is shown as A (M[a, b] > 0.5).
    Where only the reverse order was judged it is read from B's side (1 - M[b, a] > 0.5);
    an unjudged pair is a tie (False)."""
    with np.errstate(invalid="ignore"):
        p = np.where(np.isfinite(m), m, 1.0 - m.T)
        return np.nan_to_num(p, nan=0.5).__gt__(0.5).tolist()


def pairs_sort(m: np.ndarray | list[list[bool]], order: Sequence[int]) -> list[int]:
    """PairS merge sort of candidate indices, judged worst first (best last).

    Merging compares left vs right with left shown as A; when the judge prefers left
    (P(A) > 0.5) the right item is emitted first, exactly as the PairS/ZEPO code, whose sorted
    list is ascending. So a list position is a rank where higher means preferred by the judge.
    `m` is the matrix or its `preference_table` (precomputed when sorting many shuffles).
    """
    table = preference_table(m) if isinstance(m, np.ndarray) else m
    items = list(order)
    if len(items) <= 1:
        return items
    mid = len(items) // 2
    left, right = pairs_sort(table, items[:mid]), pairs_sort(table, items[mid:])
    out: list[int] = []
    i = k = 0
    while i < len(left) and k < len(right):
        if table[left[i]][right[k]]:
            out.append(right[k])
            k += 1
        else:
            out.append(left[i])
            i += 1
    return out + left[i:] + right[k:]


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


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def _doc_scores(doc_id: str, view: DocView, ranking: str, shuffles: int, seed: int) -> np.ndarray:
    """The judge's score of each candidate: one row (win rate) or one row per shuffle (PairS
    list position, higher = preferred). Each document draws its shuffles from its own seeded
    stream, so its result does not depend on which other documents are present."""
    if ranking == "winrate":
        return win_rates(view.matrix)[None, :]
    n = len(view.ids)
    rng = np.random.default_rng([seed, zlib.crc32(doc_id.encode())])
    table, rows = preference_table(view.matrix), np.empty((shuffles, n))
    for s in range(shuffles):
        rows[s, pairs_sort(table, rng.permutation(n).tolist())] = np.arange(n)
    return rows


def _whole_corr(views: Sequence[DocView]) -> tuple[float, float]:
    """Spearman and Kendall over (win rate, human) pooled across documents; NaN if undefined."""
    from scipy.stats import kendalltau, spearmanr

    x = np.concatenate([win_rates(v.matrix) for v in views]) if views else np.array([])
    h = np.concatenate([v.human for v in views]) if views else np.array([])
    ok = np.isfinite(x) & np.isfinite(h)
    if ok.sum() < 2 or np.ptp(x[ok]) == 0 or np.ptp(h[ok]) == 0:
        return math.nan, math.nan
    return float(spearmanr(x[ok], h[ok])[0]), float(kendalltau(x[ok], h[ok])[0])


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
    return {"spearman": mean_or_nan(rhos), "kendall": mean_or_nan(taus), "spearman_whole": rho_w,
            "kendall_whole": tau_w, "n_docs": len(views)}


