"""Agreement with humans: per-document Spearman/Kendall of the judge's ranking (win rate, or the
PairS merge sort over the preference matrix, averaged over seeded shuffles, or over every initial
order where there are no more of them than shuffles) against human scores; undefined per-document
correlations count as 0, as in the ZEPO/PairS code. The merge sort and the correlations run on all
documents and shuffles at once (`pairs_positions`, `rank_correlations`); `pairs_sort` is the
one-order version, kept as the readable definition."""

from __future__ import annotations

import functools
import itertools
import math
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from harness.errors import ConfigError
from harness.metrics.views import DocView, document_views, mean_or_nan
from harness.records import Judgment

RANK_DECIMALS = 12
"""Values are rounded to this many decimals before they are ranked: a mean that is a tie in exact
arithmetic (two candidates' win rates; a mean of per-document correlations that is 0) comes out
as +-1e-17 in floats, and ranking that noise would order what is tied. (Noise larger than this,
e.g. bf16 arithmetic's ~1e-2 on P(A), can still reorder near-ties: docs/report_card.md bounds it.)"""


def rankable(x: np.ndarray) -> np.ndarray:
    """`x` rounded to RANK_DECIMALS: what every ranking of a win rate (or of a mean) ranks."""
    return np.round(np.asarray(x, dtype=float), RANK_DECIMALS)


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
    """Spearman and Kendall tau-b of each row of `scores` (R x n) against `human` (n, or R x n: one
    human vector per row), the numbers scipy.stats.spearmanr/kendalltau give, vectorised over rows
    because PairS needs shuffles x documents of them (scipy one by one would dominate a summary).
    Undefined values (constant row or constant humans, n < 2) are 0, as in ZEPO."""
    from scipy.stats import rankdata

    scores, human = np.atleast_2d(scores).astype(float), np.asarray(human, dtype=float)
    rs = rankdata(scores, axis=1)
    rs -= rs.mean(axis=1, keepdims=True)
    n = scores.shape[1]
    i, k = np.triu_indices(n, k=1)
    if human.ndim == 1:
        rh = rankdata(human) - (n + 1) / 2
        rho = _ratio(rs @ rh, np.sqrt((rs**2).sum(axis=1) * (rh**2).sum()))
        sh = np.sign(human[i] - human[k])
        untied_h = np.abs(sh).sum()
    else:
        rh = rankdata(human, axis=1) - (n + 1) / 2
        rho = _ratio((rs * rh).sum(axis=1), np.sqrt((rs**2).sum(axis=1) * (rh**2).sum(axis=1)))
        sh = np.sign(human[:, i] - human[:, k])
        untied_h = np.abs(sh).sum(axis=1)
    # tau-b = (C - D) / sqrt((n0 - ties_x)(n0 - ties_h)) over the pairs i < k (integer sums: exact).
    sx = np.sign(scores[:, i] - scores[:, k])
    untied = np.abs(sx).sum(axis=1) * untied_h
    tau = _ratio((sx * sh).sum(axis=1), np.sqrt(untied))
    return np.clip(rho, -1, 1), np.clip(tau, -1, 1)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


@functools.lru_cache(maxsize=8192)
def pairs_orders(doc_id: str, n: int, shuffles: int, seed: int) -> np.ndarray:
    """The initial orders PairS sorts from, (S, n): every one of the n! orders when n! <= shuffles
    (the exact expectation over initial orders, for less work than the shuffles), else `shuffles`
    orders drawn from the document's own seeded stream, so its result does not depend on which
    other documents are present."""
    if math.factorial(n) <= shuffles:
        every = np.array(list(itertools.permutations(range(n))), dtype=np.int64).reshape(-1, n)
        every.flags.writeable = False
        return every
    rng = np.random.default_rng([seed, zlib.crc32(doc_id.encode())])
    orders = np.array([rng.permutation(n) for _ in range(shuffles)], dtype=np.int64).reshape(shuffles, n)
    orders.flags.writeable = False  # cached: shared by every variant of a summary
    return orders


def pairs_positions(tables: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """PairS list positions (higher = preferred), (D, S, n), of D documents with n candidates each,
    sorted from S initial orders each: `pairs_sort` run on all D x S rows at once."""
    d, s, n = orders.shape
    rows = orders.reshape(d * s, n)
    base = np.repeat(np.arange(d, dtype=np.int64) * n * n, s)
    ranked = _merge_sort(tables.reshape(-1), base, rows, n)
    pos = np.empty_like(ranked)
    np.put_along_axis(pos, ranked, np.broadcast_to(np.arange(n), ranked.shape), axis=1)
    return pos.reshape(d, s, n)


def _merge_sort(table: np.ndarray, base: np.ndarray, items: np.ndarray, n: int) -> np.ndarray:
    """`pairs_sort`'s top-down merge sort on every row of `items` in lockstep: the split points
    depend only on the length, so each merge step is one array operation over all rows."""
    length = items.shape[1]
    if length <= 1:
        return items
    mid = length // 2
    left, right = _merge_sort(table, base, items[:, :mid], n), _merge_sort(table, base, items[:, mid:], n)
    r = np.arange(items.shape[0])
    i, k = np.zeros(len(r), dtype=np.int64), np.zeros(len(r), dtype=np.int64)
    out = np.empty_like(items)
    for t in range(length):
        li, rk = left[r, np.minimum(i, mid - 1)], right[r, np.minimum(k, length - mid - 1)]
        # Right first when the judge prefers left shown as A, or when left is used up.
        take_right = (k < length - mid) & ((i >= mid) | table[base + li * n + rk])
        out[:, t] = np.where(take_right, rk, li)
        k += take_right
        i += ~take_right
    return out


def _tables(matrices: Sequence[np.ndarray]) -> np.ndarray:
    """`preference_table` of several same-size matrices as one bool array (D, n, n)."""
    m = np.stack(matrices)
    with np.errstate(invalid="ignore"):
        p = np.where(np.isfinite(m), m, 1.0 - np.swapaxes(m, 1, 2))
        return np.nan_to_num(p, nan=0.5) > 0.5


def _doc_scores(
    views: Mapping[str, DocView], ranking: str, shuffles: int, seed: int
) -> dict[str, np.ndarray]:
    """The judge's score of each candidate per document: one row (win rate) or one row per initial
    order (PairS list position, higher = preferred)."""
    if ranking == "winrate":
        return {d: rankable(win_rates(v.matrix))[None, :] for d, v in views.items()}
    groups: dict[int, list[str]] = {}
    for d, v in views.items():
        groups.setdefault(len(v.ids), []).append(d)
    out = {}
    for n, docs in groups.items():
        orders = np.stack([pairs_orders(d, n, shuffles, seed) for d in docs])
        pos = pairs_positions(_tables([views[d].matrix for d in docs]), orders)
        out.update({d: pos[g].astype(float) for g, d in enumerate(docs)})
    return out


def _per_doc(scores: Mapping[str, np.ndarray], views: Mapping[str, DocView]) -> dict[str, np.ndarray]:
    """Spearman and Kendall of every score row, per document ({doc: (2, S)}), the documents with the
    same number of usable candidates and rows stacked into one `rank_correlations` call."""
    groups: dict[tuple[int, int], list[tuple[str, np.ndarray]]] = {}
    for d, sc in scores.items():
        ok = np.isfinite(views[d].human) & np.isfinite(sc).all(axis=0)
        groups.setdefault((int(ok.sum()), sc.shape[0]), []).append((d, ok))
    out = {}
    for (m, s), members in groups.items():
        x = np.concatenate([scores[d][:, ok] for d, ok in members])  # (documents x rows, m)
        h = np.repeat(np.stack([views[d].human[ok] for d, ok in members]), s, axis=0)
        rho, tau = rank_correlations(x, h) if m else (np.zeros(len(x)), np.zeros(len(x)))
        rho, tau = rho.reshape(len(members), s), tau.reshape(len(members), s)
        out.update({d: np.stack([rho[g], tau[g]]) for g, (d, _) in enumerate(members)})
    return out


def _whole_corr(views: Sequence[DocView]) -> tuple[float, float]:
    """Spearman and Kendall over (win rate, human) pooled across documents; NaN if undefined."""
    from scipy.stats import kendalltau, spearmanr

    x = np.concatenate([rankable(win_rates(v.matrix)) for v in views]) if views else np.array([])
    h = np.concatenate([v.human for v in views]) if views else np.array([])
    ok = np.isfinite(x) & np.isfinite(h)
    if ok.sum() < 2 or np.ptp(x[ok]) == 0 or np.ptp(h[ok]) == 0:
        return math.nan, math.nan
    return float(spearmanr(x[ok], h[ok])[0]), float(kendalltau(x[ok], h[ok])[0])


def correlations(
    judgments: Sequence[Judgment], ranking: str = "winrate", shuffles: int = 100, seed: int = 0
) -> dict[str, float | int]:
    """Per-document Spearman/Kendall of the judge's ranking vs human scores, averaged over
    documents (and, for PairS, over `shuffles` seeded random initial orders, or over all n! orders
    when that is no more: `pairs_orders`).

    ranking="winrate": score = `win_rates(M)`; ranking="pairs": rank = position in
    `pairs_sort`. Candidates without a human score (or win rate) are left out of their
    document; documents with fewer than two human-scored candidates, or with no readable pair,
    are left out (n_docs
    counts those kept). spearman_whole/kendall_whole pool (win rate, human) over all
    documents whatever the ranking, since PairS positions are not comparable across documents.
    `spearman_se`: the standard error of `spearman` from the shuffles (0 where every initial order
    was sorted, and for the win rate), sqrt(sum_d var_d / S_d) / D.
    """
    return view_correlations(document_views(judgments), ranking, shuffles, seed)


def view_correlations(
    all_views: Mapping[str, DocView],
    ranking: str,
    shuffles: int,
    seed: int,
    per_doc_out: dict[str, tuple[float, float]] | None = None,
) -> dict[str, float | int]:
    """`correlations` of document views; `per_doc_out`, when given, receives each kept document's
    (Spearman, Kendall), averaged over its initial orders (the bootstrap resamples these)."""
    if ranking not in ("winrate", "pairs"):
        raise ConfigError(f"correlations ranking must be 'winrate' or 'pairs', got {ranking!r}")
    if not isinstance(shuffles, int) or shuffles < 1:
        raise ConfigError(f"correlations shuffles must be a positive integer, got {shuffles!r}")
    # A document none of whose pairs was read (every P(A) NaN) has no ranking: left out, never a
    # correlation of 0 (which is what ranking all-tied candidates would give).
    views = {
        d: v for d, v in all_views.items() if np.isfinite(v.human).sum() >= 2 and np.isfinite(v.matrix).any()
    }
    per_doc = _per_doc(_doc_scores(views, ranking, shuffles, seed), views)
    rows = [per_doc[d] for d in views]
    if per_doc_out is not None:
        per_doc_out.update({d: (float(r[0].mean()), float(r[1].mean())) for d, r in zip(views, rows)})
    sampled = [ranking == "pairs" and math.factorial(len(v.ids)) > shuffles for v in views.values()]
    var = [
        r[0].var(ddof=1) / r.shape[1] if drawn and r.shape[1] > 1 else 0.0 for r, drawn in zip(rows, sampled)
    ]
    se = math.sqrt(sum(var)) / len(rows) if rows else math.nan
    rho_w, tau_w = _whole_corr(list(views.values()))
    return {
        "spearman": mean_or_nan([r[0].mean() for r in rows]),
        "kendall": mean_or_nan([r[1].mean() for r in rows]),
        "spearman_se": se,
        "spearman_whole": rho_w,
        "kendall_whole": tau_w,
        "n_docs": len(views),
    }
