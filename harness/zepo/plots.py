"""Figures for the ZEPO search and the sensitivity study (matplotlib, Agg backend, PNG files).

- `plot_rate_vs_spearman`: Spearman vs decision rate with a quadratic fit, and the box plot of
  Spearman across paraphrases (the paper's Figure 2);
- `plot_spearman_boxes`: that box plot for several models side by side (scripts/paper_figures.py);
- `plot_objectives_vs_spearman`: each zero-shot objective vs Spearman, Spearman rho and its p-value
  in the title (Figure 3);
- `plot_debias`: paraphrases before and after permutation debiasing (Figure 4);
- `plot_search`: objective and held-out Spearman per candidate of a ZEPO search.
Every function writes the PNG and returns its path; `log_figure` hands it to the Tracker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.figures import pyplot, save
from harness.metrics.correlation import rankable


def _clean(x: Sequence[float | None], y: Sequence[float | None]) -> tuple[np.ndarray, np.ndarray]:
    xa = np.array([math.nan if v is None else v for v in x], dtype=float)
    ya = np.array([math.nan if v is None else v for v in y], dtype=float)
    ok = np.isfinite(xa) & np.isfinite(ya)
    return xa[ok], ya[ok]


def pearson(x: Sequence[float | None], y: Sequence[float | None]) -> float:
    """Pearson r over pairs where both are finite; NaN with < 3 points or a constant side."""
    xa, ya = _clean(x, y)
    if xa.size < 3 or np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return math.nan
    return float(np.corrcoef(xa, ya)[0, 1])


def spearman(x: Sequence[float | None], y: Sequence[float | None]) -> dict[str, float]:
    """Spearman rho and its two-sided p-value (scipy) over pairs where both are finite; NaN with
    < 3 points or a constant side. Ranks are of `rankable` values (rounded as the metrics rank win
    rates: a tie computed as +-1e-17 stays a tie)."""
    from scipy.stats import spearmanr

    xa, ya = (rankable(v) for v in _clean(x, y))
    if xa.size < 3 or np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return {"rho": math.nan, "p": math.nan, "n": int(xa.size)}
    rho, p = spearmanr(xa, ya)
    return {"rho": float(rho), "p": float(p), "n": int(xa.size)}


def quadratic_fit(x: Sequence[float | None], y: Sequence[float | None]) -> np.ndarray | None:
    """Coefficients (a, b, c) of y = a x^2 + b x + c, or None with < 3 distinct x."""
    xa, ya = _clean(x, y)
    if np.unique(xa).size < 3:
        return None
    return np.polyfit(xa, ya, 2)


def plot_rate_vs_spearman(
    rates: Sequence[float | None],
    spearmans: Sequence[float | None],
    path: str | Path,
    title: str = "Spearman vs decision rate",
    box_label: str | None = None,
) -> Path:
    """Figure 2: each paraphrase as a point (the quadratic fit shows the inverted U near 0.5) and,
    with `box_label`, the box plot of the same Spearman values beside it."""
    plt = pyplot()
    if box_label is None:
        fig, ax = plt.subplots(figsize=(5, 4))
    else:
        fig, (ax, box) = plt.subplots(1, 2, figsize=(7.5, 4), width_ratios=[3, 1], layout="constrained")
        _boxes(box, {box_label: spearmans})
    x, y = _clean(rates, spearmans)
    ax.scatter(x, y, s=18, alpha=0.8)
    coef = quadratic_fit(rates, spearmans)
    if coef is not None:
        grid = np.linspace(min(x.min(), 0.5), max(x.max(), 0.5), 100)
        ax.plot(grid, np.polyval(coef, grid), color="C3", label="quadratic fit")
        ax.legend(loc="lower center")
    ax.axvline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("decision rate P(judge answers A)")
    ax.set_ylabel("Spearman with humans")
    ax.set_title(title)
    return save(fig, path)


def _boxes(ax: Any, groups: Mapping[str, Sequence[float | None]]) -> None:
    data = [_clean(v, v)[0] for v in groups.values()]
    ax.boxplot(data, tick_labels=[f"{k}\n(n={len(d)})" for k, d in zip(groups, data)])
    ax.set_ylabel("Spearman with humans")


def plot_spearman_boxes(
    groups: Mapping[str, Sequence[float | None]],
    path: str | Path,
    title: str = "Spearman across paraphrased instructions",
) -> Path:
    """Figure 2's box plot: one box per model over its paraphrases' Spearman values."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(groups), 4), layout="constrained")
    _boxes(ax, groups)
    ax.set_title(title)
    return save(fig, path)


def plot_objectives_vs_spearman(
    objectives: Mapping[str, Sequence[float | None]],
    spearmans: Sequence[float | None],
    path: str | Path,
    title: str = "zero-shot objectives vs Spearman",
    needs_labels: Sequence[str] = (),
) -> Path:
    """Figure 3: one panel per objective (higher = better), Spearman rho and its p-value with the
    Spearman against humans in its title; `needs_labels` panels are marked as not label-free."""
    return save(objectives_figure(objectives, spearmans, title, needs_labels), path)


def objectives_figure(
    objectives: Mapping[str, Sequence[float | None]],
    spearmans: Sequence[float | None],
    title: str = "zero-shot objectives vs Spearman",
    needs_labels: Sequence[str] = (),
) -> Any:
    """`plot_objectives_vs_spearman`'s figure, unsaved."""
    plt = pyplot()
    n = max(1, len(objectives))
    cols = min(n, 2)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(4.5 * cols, 3.6 * rows), squeeze=False, layout="constrained"
    )
    for ax, (name, values) in zip(axes.flat, objectives.items()):
        x, y = _clean(values, spearmans)
        ax.scatter(x, y, s=18, alpha=0.8)
        if np.unique(x).size >= 2:
            coef = np.polyfit(x, y, 1)
            grid = np.linspace(x.min(), x.max(), 50)
            ax.plot(grid, np.polyval(coef, grid), color="C2")
        r = spearman(values, spearmans)
        tag = " (needs labels)" if name in needs_labels else ""
        rho = "nan" if math.isnan(r["rho"]) else f"{r['rho']:.2f}, p = {r['p']:.2g}"
        # Two lines: a long objective name and its rho on one line ran into the next panel's title.
        ax.set_title(f"{name}{tag}\nSpearman rho = {rho}", fontsize=10)
        ax.set_xlabel(name)
        ax.set_ylabel("Spearman")
    for ax in list(axes.flat)[len(objectives) :]:
        ax.axis("off")
    fig.suptitle(title)
    return fig


RAW_COLOUR, DEBIASED_COLOUR = "tab:red", "tab:blue"
"""Figure 4's colours as in the paper: standard pairwise red, debiased blue."""


def plot_debias(
    rates_before: Sequence[float | None],
    spearman_before: Sequence[float | None],
    rates_after: Sequence[float | None],
    spearman_after: Sequence[float | None],
    path: str | Path,
    title: str = "before/after permutation debiasing",
) -> Path:
    """Figure 4: left, Spearman vs decision rate before (red) and after (blue) debiasing, each group
    with its quadratic fit, as the paper; right, each paraphrase's Spearman before -> after
    (debiasing narrows but does not remove the spread)."""
    return save(debias_figure(rates_before, spearman_before, rates_after, spearman_after, title), path)


def debias_figure(
    rates_before: Sequence[float | None],
    spearman_before: Sequence[float | None],
    rates_after: Sequence[float | None],
    spearman_after: Sequence[float | None],
    title: str = "before/after permutation debiasing",
) -> Any:
    """`plot_debias`'s figure, unsaved."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.8), layout="constrained")
    for rates, sp, label, color in (
        (rates_before, spearman_before, "pairwise (raw)", RAW_COLOUR),
        (rates_after, spearman_after, "permutation debiased", DEBIASED_COLOUR),
    ):
        x, y = _clean(rates, sp)
        ax1.scatter(x, y, s=18, alpha=0.8, label=label, color=color)
        coef = quadratic_fit(rates, sp)
        if coef is not None:  # each group's own inverted U, as the paper draws it
            grid = np.linspace(x.min(), x.max(), 100)
            ax1.plot(grid, np.polyval(coef, grid), color=color, lw=1.5)
    ax1.axvline(0.5, color="grey", lw=0.8, ls=":")
    ax1.set_xlabel("decision rate (debiased: upper triangle, as the official code)")
    ax1.set_ylabel("Spearman with humans")
    ax1.legend()
    for b, a in zip(spearman_before, spearman_after):
        if b is not None and a is not None and math.isfinite(b) and math.isfinite(a):
            ax2.plot([0, 1], [b, a], color="grey", alpha=0.4, lw=1)
            ax2.scatter([0, 1], [b, a], color=[RAW_COLOUR, DEBIASED_COLOUR], s=10, zorder=3)
    ax2.set_xticks([0, 1], ["raw", "debiased"])
    ax2.set_ylabel("Spearman")
    _, after = _clean(spearman_after, spearman_after)
    if after.size:
        ax2.set_title(f"debiased range {after.min():.2f}-{after.max():.2f}")
    fig.suptitle(title)
    return fig


def plot_search(candidates: Sequence[Any], path: str | Path, objective: str = "fairness") -> Path:
    """A ZEPO search: each candidate's objective (and held-out Spearman), the running best."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    idx = [c.index for c in candidates]
    obj = [c.objectives[objective] for c in candidates]
    ax.scatter(idx, obj, s=18, label=objective, color="C0")
    best, running = -math.inf, []
    for v in obj:
        best = max(best, v) if math.isfinite(v) else best
        running.append(best if math.isfinite(best) else math.nan)
    ax.step(idx, running, where="post", color="C0", alpha=0.6)
    ax.set_xlabel("candidate (scoring order)")
    ax.set_ylabel(objective)
    sp = [c.spearman_heldout for c in candidates]
    if any(v is not None and math.isfinite(v) for v in sp):
        ax2 = ax.twinx()
        ax2.scatter(
            idx,
            [math.nan if v is None else v for v in sp],
            s=18,
            marker="x",
            color="C3",
            label="held-out Spearman",
        )
        ax2.set_ylabel("held-out Spearman", color="C3")
    for c in candidates:
        if c.slot == 0 and c.index:
            ax.axvline(c.index - 0.5, color="grey", lw=0.6, ls=":")
    ax.set_title(f"ZEPO search ({objective})")
    return save(fig, path)


def log_figure(tracker: Any, name: str, path: Path) -> Path:
    if tracker is not None:
        tracker.log_image(name, path)
    return path
