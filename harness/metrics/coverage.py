"""How often the harness's intervals cover the truth, on simulated clustered documents, at 2 to 50 documents.

    python -m harness.metrics.coverage                      # the table in docs/report_card.md
    python -m harness.metrics.coverage --sets 4000 --sizes 3 6 12

The simulated documents (`simulate`): 4 to 16 candidates each (uniform), a latent quality q ~ N(0, 1)
per candidate, human scores round(3 + q + N(0, 0.8)) clipped to 1..5 (so humans tie), and a judge
whose P(A | i shown as A, j as B) = sigmoid(beta (q_i - q_j) + e_ij + b_d + noise): a pair effect
e_ij = -e_ji ~ N(0, 0.8) shared by both orders of the pair, a position bias b_d ~ N(0.3, 0.7) per
document and N(0, 0.3) noise per order. Three judges ("arms") judge the same documents: A and A2
(beta 1; A2's pair effects and position bias correlate 0.7 with A's: two instructions of one judge)
and B (beta 1.5, its pair effects half as large, as correlated: a better instruction).

A pool of `documents` such documents is the population; each data set draws n of them without
replacement, so the truth is the pool's own value, exactly: the A-rate and the per-document
Spearman are means over the pool's documents, the pooled win-rate Spearman and ECE are computed over
the whole pool. The paired difference of per-document Spearmans is measured twice: B - A (a true
difference: coverage) and A2 - A with the arms' labels swapped at random per document (no true
difference, exactly: how often the "distinguishable" sentence fires). Each data set's statistics
and their leave-one-document-out values are what `harness.metrics.bootstrap.replicate` computes
(tests/test_interval_coverage.py checks them against it); the intervals are
`harness.metrics.interval.jackknife_bounds` and, as the comparison, the percentile bootstrap the
harness used before (`harness.metrics.bootstrap.percentile_interval`, `rounds` rounds).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.metrics.bootstrap import percentile_interval, resample_counts
from harness.metrics.correlation import rank_correlations
from harness.metrics.interval import ACROSS, Interval, bootstrap_bounds, jackknife_bounds, rule, verdict

SIZES = (2, 3, 4, 6, 8, 12, 20, 30, 50)
STATISTICS = {
    "a_rate": "mean over documents (A-rate)",
    "spearman": "per-document Spearman (mean)",
    "spearman_whole": "pooled win-rate Spearman",
    "spearman_diff": "paired difference of Spearmans (B - A)",
    "ece": "ECE",
}
"""Statistic -> what it is; each is named as the metric_set key whose interval rule it uses."""
NULL = "spearman_null"
"""The paired difference with no true difference: its interval should exclude 0 in <= 5% of data sets."""
MAX_C, BINS = 16, 10


@dataclass(frozen=True)
class Pool:
    """Per-document statistics of the simulated population (arrays over documents)."""

    rate: np.ndarray
    """Arm A's A-rate per document."""
    rho: np.ndarray
    """(3, documents): per-document win-rate Spearman of arms A, A2, B."""
    x: np.ndarray
    """(documents, MAX_C): arm A's win rates, NaN past the document's candidates."""
    h: np.ndarray
    """(documents, MAX_C): human scores, NaN likewise."""
    ece: np.ndarray
    """(documents, BINS, 3): arm A's labelled pairs per P(A) bin: count, sum of labels, sum of P(A)."""


def _judge(
    rng: np.random.Generator,
    q: np.ndarray,
    ok: np.ndarray,
    beta: float,
    base: tuple | None,
    spread: float = 0.8,
) -> tuple:
    """One arm's P(A) matrices (documents, MAX_C, MAX_C) and its (pair effect, position bias)."""
    d = len(q)
    raw = rng.normal(0, spread, (d, MAX_C, MAX_C))
    e = (raw - raw.transpose(0, 2, 1)) / math.sqrt(2)  # antisymmetric: shared by both orders
    b = rng.normal(0.3, 0.7, (d, 1, 1))
    if base is not None:  # the same judge under another instruction: correlated effects
        e = 0.7 * base[0] * spread / 0.8 + math.sqrt(1 - 0.49) * e
        b = 0.3 + 0.7 * (base[1] - 0.3) + math.sqrt(1 - 0.49) * (b - 0.3)
    z = beta * (q[:, :, None] - q[:, None, :]) + e + b + rng.normal(0, 0.3, (d, MAX_C, MAX_C))
    return np.where(ok, 1 / (1 + np.exp(-z)), np.nan), (e, b)


def _spearman_per_document(x: np.ndarray, h: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The harness's per-document Spearman (rank_correlations; undefined counts 0), grouped by size."""
    out = np.zeros(len(m))
    for k in np.unique(m):
        sel = m == k
        out[sel] = rank_correlations(x[sel, :k], h[sel, :k])[0]
    return out


def _chunk(rng: np.random.Generator, d: int, betas: tuple[float, float, float]) -> tuple[Pool, np.ndarray]:
    m = rng.integers(4, MAX_C + 1, d)
    valid = np.arange(MAX_C)[None, :] < m[:, None]
    q = rng.normal(size=(d, MAX_C))
    h = np.where(valid, np.clip(np.round(3 + q + rng.normal(0, 0.8, (d, MAX_C))), 1, 5), np.nan)
    ok = valid[:, :, None] & valid[:, None, :] & ~np.eye(MAX_C, dtype=bool)
    p_a, base = _judge(rng, q, ok, betas[0], None)
    p_a2, _ = _judge(rng, q, ok, betas[1], base)
    p_b, _ = _judge(rng, q, ok, betas[2], base, spread=0.4)
    with np.errstate(invalid="ignore"):
        rate = (p_a > 0.5).sum(axis=(1, 2)) / ((p_a > 0.5) | (p_a < 0.5)).sum(axis=(1, 2))
        wins = [np.where(ok, p, 0.0).sum(axis=2) / ok.sum(axis=2) for p in (p_a, p_a2, p_b)]
        y = (h[:, :, None] > h[:, None, :]).astype(float)
        labelled = ok & (h[:, :, None] != h[:, None, :])
    rho = np.stack([_spearman_per_document(w, h, m) for w in wins])
    doc = np.broadcast_to(np.arange(d)[:, None, None], ok.shape)[labelled]
    b = np.minimum((p_a[labelled] * BINS).astype(int), BINS - 1)
    ece = np.zeros((d * BINS, 3))
    for col, weight in enumerate((None, y[labelled], p_a[labelled])):
        ece[:, col] = np.bincount(doc * BINS + b, weights=weight, minlength=d * BINS)
    return Pool(rate, rho, wins[0], h, ece.reshape(d, BINS, 3)), p_a


def simulate(
    documents: int,
    seed: int,
    chunk: int = 2000,
    betas: tuple[float, float, float] = (1.0, 1.0, 1.5),
    keep_matrices: bool = False,
) -> Any:
    """A pool of simulated documents (module docstring), seeded; with `keep_matrices`, (pool, arm A's
    P(A) matrices (documents, MAX_C, MAX_C)): what the harness's own functions are checked on."""
    rng = np.random.default_rng(seed)
    parts = [_chunk(rng, min(chunk, documents - lo), betas) for lo in range(0, documents, chunk)]
    pool = Pool(
        *(
            np.concatenate([getattr(p, f) for p, _ in parts], axis=1 if f == "rho" else 0)
            for f in ("rate", "rho", "x", "h", "ece")
        )
    )
    return (pool, np.concatenate([m for _, m in parts])) if keep_matrices else pool


def ece_of(bins: np.ndarray) -> np.ndarray:
    """ECE from per-document bin sums (..., documents, BINS, 3) summed over documents."""
    total = bins.sum(axis=-3)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.abs(total[..., 1] - total[..., 2]).sum(axis=-1) / total[..., 0].sum(axis=-1)


def truths(pool: Pool) -> dict[str, float]:
    from scipy.stats import spearmanr

    ok = np.isfinite(pool.h)
    return {
        "a_rate": float(pool.rate.mean()),
        "spearman": float(pool.rho[0].mean()),
        "spearman_whole": float(spearmanr(pool.x[ok], pool.h[ok])[0]),
        "spearman_diff": float((pool.rho[2] - pool.rho[0]).mean()),
        NULL: 0.0,
        "ece": float(ece_of(pool.ece)),
    }


def pooled_spearman_loo(x: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pooled Spearman of (x, h) over every candidate of each set (sets, n, MAX_C; NaN padding) and
    with each document left out: ((sets,), (sets, n)), from sums per (document, human level): x has
    no ties (its ranks left are 1..N), h takes the levels 1..5 (mid-ranks), so the only term that
    needs the pairs is how many of a document's candidates lie below others in x."""
    s, n, c = x.shape
    valid = np.isfinite(x) & np.isfinite(h)
    level = np.where(valid, h, 0).astype(int)
    onehot = (level[..., None] == np.arange(1, 6)) & valid[..., None]  # (s, n, c, 5)
    flat = onehot.reshape(s, n * c, 5)
    order = np.argsort(np.where(valid, x, np.inf).reshape(s, n * c), axis=1, kind="stable")
    sorted_hot = np.take_along_axis(flat, order[:, :, None], axis=1).astype(np.int64)
    above_sorted = sorted_hot[:, ::-1].cumsum(axis=1)[:, ::-1] - sorted_hot  # level counts strictly above
    above = np.empty_like(above_sorted)
    np.put_along_axis(above, order[:, :, None], above_sorted, axis=1)
    rank = np.empty((s, n * c))
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(1.0, n * c + 1), (s, n * c)), axis=1)
    rank = rank.reshape(s, n, c)
    k_doc = onehot.sum(axis=2).astype(float)  # (s, n, 5)
    hot = onehot.astype(float)
    r_doc = (hot * np.where(valid, rank, 0.0)[..., None]).sum(axis=2)
    mask = valid[..., None].astype(float)
    cross = (above.reshape(s, n, c, 5) * mask).sum(axis=2)
    lower = ((x[:, :, :, None] < x[:, :, None, :]) & valid[:, :, :, None]).sum(axis=2)  # same-document below
    within = (hot * lower[..., None]).sum(axis=2)
    full = _spearman_from_sums(k_doc.sum(1), r_doc.sum(1), np.zeros((s, 5)))
    loo = _spearman_from_sums(
        k_doc.sum(1, keepdims=True) - k_doc, r_doc.sum(1, keepdims=True) - r_doc, cross - within
    )
    return full, loo


def _spearman_from_sums(k: np.ndarray, r: np.ndarray, below: np.ndarray) -> np.ndarray:
    """Spearman of the candidates left, from their count per human level k, the sum of their full x
    ranks per level r, and how many removed candidates lie below each level's candidates in x."""
    total = k.sum(-1)
    mid = np.cumsum(k, axis=-1) - k + (k + 1) / 2
    sxy = (mid * (r - below)).sum(-1)
    sx, sxx = total * (total + 1) / 2, total * (total + 1) * (2 * total + 1) / 6
    sy, syy = (k * mid).sum(-1), (k * mid * mid).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        vx, vy = sxx - sx * sx / total, syy - sy * sy / total
        rho = (sxy - sx * sy / total) / np.sqrt(vx * vy)
    return np.where((vx > 1e-9) & (vy > 1e-9), np.clip(rho, -1, 1), np.nan)


def _mean_loo(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = v.shape[1]
    total = v.sum(axis=1)
    return total / n, (total[:, None] - v) / max(n - 1, 1)


def set_statistics(
    pool: Pool, idx: np.ndarray, rng: np.random.Generator, pooled_sets: int | None = None, chunk: int = 256
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each statistic's value and leave-one-out values on the data sets `idx` (sets, n); the pooled
    Spearman (the costly one) on the first `pooled_sets` of them only, when given."""
    sign = rng.choice([-1.0, 1.0], idx.shape)  # which of A, A2 is called "A": exchangeable arms
    out = {
        "a_rate": _mean_loo(pool.rate[idx]),
        "spearman": _mean_loo(pool.rho[0][idx]),
        "spearman_diff": _mean_loo((pool.rho[2] - pool.rho[0])[idx]),
        NULL: _mean_loo(sign * (pool.rho[1] - pool.rho[0])[idx]),
    }
    bins = pool.ece[idx]  # (sets, n, BINS, 3)
    loo = bins.sum(axis=1, keepdims=True) - bins
    out["ece"] = (ece_of(bins), ece_of(loo[:, :, None]))
    some = idx[:pooled_sets]
    parts = [
        pooled_spearman_loo(pool.x[some[lo : lo + chunk]], pool.h[some[lo : lo + chunk]])
        for lo in range(0, len(some), chunk)
    ]
    out["spearman_whole"] = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return out


def draw_sets(pool_size: int, n: int, sets: int, rng: np.random.Generator) -> np.ndarray:
    """(sets, n) document indices, each set without replacement."""
    return (
        np.argsort(rng.random((sets, pool_size)), axis=1)[:, :n]
        if pool_size <= 4 * n
        else np.array([rng.choice(pool_size, n, replace=False) for _ in range(sets)])
    )


@dataclass(frozen=True)
class Cell:
    """One statistic at one n: how often its interval covered the truth."""

    covered: float
    """Share of data sets whose interval holds the truth (NaN where every set is too few to tell)."""
    told: float
    """Share of data sets with an interval (the rest: too few documents to tell, or undefined)."""
    excluded_zero: float
    """Share of data sets whose interval excludes 0 ("distinguishable from 0")."""
    sets: int


def _cell(lo: np.ndarray, hi: np.ndarray, truth: float, n: int) -> Cell:
    told = np.isfinite(lo) & np.isfinite(hi)
    said = [verdict(Interval((a, b), n)) if t else None for a, b, t in zip(lo, hi, told)]
    covered = (lo <= truth) & (truth <= hi)
    return Cell(
        float(covered[told].mean()) if told.any() else math.nan,
        float(told.mean()),
        float(np.mean([v == "distinguishable from 0" for v in said])),
        int(len(lo)),
    )


def jackknife_cells(
    stats: dict[str, tuple[np.ndarray, np.ndarray]], truth: dict[str, float], level: float
) -> dict[str, Cell]:
    """The harness's intervals (interval.jackknife_bounds, each statistic with its metric's rules)."""
    out = {}
    for name, (point, loo) in stats.items():
        diff = name in ("spearman_diff", NULL)
        fisher, value_range, need = rule("spearman" if diff else name, difference=diff)
        n = loo.shape[1]
        if n < need:
            nan = np.full(len(point), np.nan)
            out[name] = _cell(nan, nan, truth[name], n)
            continue
        lo, hi = jackknife_bounds(point, loo, level, fisher, value_range)
        out[name] = _cell(lo, hi, truth[name], n)
    return out


def percentile_cells(
    pool: Pool, idx: np.ndarray, truth: dict[str, float], level: float, rounds: int, seed: int
) -> dict[str, Cell]:
    """The percentile bootstrap over documents (the harness's previous intervals) for the statistics
    that are means or sums over documents: rounds drawn by resample_counts, bounds by percentile_interval."""
    sign = np.random.default_rng(seed).choice([-1.0, 1.0], idx.shape)
    values = {
        "a_rate": pool.rate[idx],
        "spearman": pool.rho[0][idx],
        "spearman_diff": (pool.rho[2] - pool.rho[0])[idx],
        NULL: sign * (pool.rho[1] - pool.rho[0])[idx],
    }
    n = idx.shape[1]
    bounds: dict[str, list] = {k: [] for k in (*values, "ece")}
    for s in range(len(idx)):
        w = resample_counts(n, rounds, seed + s)
        for k, v in values.items():
            bounds[k].append(percentile_interval(w @ v[s] / n, level) or [math.nan, math.nan])
        bins = pool.ece[idx[s]]
        bounds["ece"].append(percentile_interval(ece_of(np.einsum("rd,dbk->rdbk", w, bins)), level))
    return {k: _cell(*np.array(b, dtype=float).T, truth[k], n) for k, b in bounds.items()}


def measure(
    sizes: Sequence[int] = SIZES,
    sets: int | Mapping[int, int] = 4000,
    documents: int = 20000,
    seed: int = 0,
    level: float = 0.95,
    rounds: int = 0,
    pooled_sets: Mapping[int, int] | None = None,
    control_sets: int | None = None,
    control_sizes: Sequence[int] | None = None,
) -> dict[int, dict[str, dict[str, Cell]]]:
    """{n: {"jackknife": {statistic: Cell}, "percentile": {...}}}: `sets` data sets per n (or per n
    from a mapping), `pooled_sets[n]` of them for the pooled Spearman; with `rounds` > 0 also the
    percentile bootstrap, on `control_sets` of them at `control_sizes` (default: every n)."""
    pool = simulate(documents, seed)
    truth = truths(pool)
    out = {}
    for n in sizes:
        rng = np.random.default_rng([seed, n])
        idx = draw_sets(documents, n, sets if isinstance(sets, int) else sets[n], rng)
        stats = set_statistics(pool, idx, rng, (pooled_sets or {}).get(n))
        out[n] = {"jackknife": jackknife_cells(stats, truth, level)}
        if rounds and (control_sizes is None or n in control_sizes):
            out[n]["percentile"] = percentile_cells(
                pool, idx[:control_sets], truth, level, rounds, seed + 1000 * n
            )
    return out


def _rank_rho(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho across the last axis (instructions; no ties in this simulation)."""
    rx, ry = (
        np.argsort(np.argsort(x, axis=-1), axis=-1).astype(float),
        np.argsort(np.argsort(y, axis=-1), axis=-1),
    )
    rx -= rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    return (rx * ry).sum(-1) / np.sqrt((rx * rx).sum(-1) * (ry * ry).sum(-1))


def figure3_cells(
    n: int, sets: int, rounds: int, seed: int = 0, instructions: int = 12, level: float = 0.95
) -> dict[str, Cell]:
    """Figure 3's statistic: Spearman rho across `instructions` of two per-instruction means over n
    documents (an objective and the Spearman with humans). Each document moves every instruction's
    two values together (N(0, 0.1) and N(0, 0.2) shared) plus N(0, 0.08) per instruction; the truth
    is the rho of the instructions' population means (drawn once, seeded). Intervals: the harness's
    t interval on bootstrap rounds (interval.bootstrap_bounds) and the plain percentile bootstrap."""
    rng = np.random.default_rng([seed, 3])
    f = -0.3 + 0.05 * rng.normal(size=instructions)
    s = 0.3 + 0.5 * (f + 0.3) + 0.03 * rng.normal(size=instructions)
    truth = float(_rank_rho(f, s))
    rng = np.random.default_rng([seed, 3, n])
    df = f + rng.normal(0, 0.1, (sets, n, 1)) + rng.normal(0, 0.08, (sets, n, instructions))
    ds = s + rng.normal(0, 0.2, (sets, n, 1)) + rng.normal(0, 0.08, (sets, n, instructions))
    point = _rank_rho(df.mean(1), ds.mean(1))
    w = np.stack([resample_counts(n, rounds, seed + k) for k in range(sets)])  # (sets, rounds, n)
    reps = _rank_rho(np.einsum("srn,snk->srk", w, df), np.einsum("srn,snk->srk", w, ds))
    fisher, value_range, need = rule(ACROSS)
    if n < need:
        nan = np.full(sets, np.nan)
        told = _cell(nan, nan, truth, n)
    else:
        told = _cell(*bootstrap_bounds(point, reps, n, level, fisher, value_range), truth, n)
    pct = np.array([percentile_interval(r, level) for r in reps], dtype=float)
    return {"t-bootstrap": told, "percentile": _cell(pct[:, 0], pct[:, 1], truth, n)}


def table(result: dict[int, dict[str, dict[str, Cell]]]) -> str:
    """Markdown: coverage (and, for the difference with no true difference, how often it fires) per n."""
    sizes = sorted(result)
    head = "| statistic | method | " + " | ".join(str(n) for n in sizes) + " |"
    lines = [head, "|---|---|" + "---:|" * len(sizes)]
    for method in ("jackknife", "percentile"):
        for name, what in (*STATISTICS.items(), (NULL, "distinguishable from 0 with NO true difference")):
            cells = [result[n].get(method, {}).get(name) for n in sizes]
            if all(c is None for c in cells):
                continue
            show = (
                (lambda c: f"{100 * c.excluded_zero:.1f}%")
                if name == NULL
                else (lambda c: "too few" if not c.told else f"{100 * c.covered:.1f}%")
            )
            label = "t-jackknife" if method == "jackknife" else "percentile (before)"
            lines.append(
                f"| {what} | {label} | " + " | ".join("–" if c is None else show(c) for c in cells) + " |"
            )
    for method, label in (("t-bootstrap", "t-bootstrap"), ("percentile", "percentile (before)")):
        cells = [result[n].get("figure3", {}).get(method) for n in sizes]
        if any(c is not None for c in cells):
            lines.append(
                f"| Figure 3: rho across 12 instructions | {label} | "
                + " | ".join(
                    "–" if c is None else "too few" if not c.told else f"{100 * c.covered:.1f}%"
                    for c in cells
                )
                + " |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--sets", type=int, default=4000, help="data sets per size")
    ap.add_argument("--documents", type=int, default=20000, help="documents in the simulated population")
    ap.add_argument(
        "--rounds", type=int, default=1000, help="percentile bootstrap rounds (0: skip the comparison)"
    )
    ap.add_argument(
        "--control-sets", type=int, default=1000, help="data sets per size for the percentile bootstrap"
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    result = measure(
        args.sizes, args.sets, args.documents, args.seed, rounds=args.rounds, control_sets=args.control_sets
    )
    if args.rounds:
        for n in args.sizes:
            result[n]["figure3"] = figure3_cells(n, args.control_sets, args.rounds, args.seed)
    print(table(result))
    print(
        f"\n{args.sets} data sets per size from a pool of {args.documents} simulated documents, seed {args.seed}; "
        f"a coverage estimate's standard error is about {100 * math.sqrt(0.95 * 0.05 / args.sets):.1f} points"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
