"""The report card's pictures (PNG through harness.figures): a reliability diagram, P(A) by
presentation order, and the answer-mass distribution. Each function writes one file and returns
its path (None when there is nothing to draw, e.g. no human labels for the reliability diagram).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from harness.figures import kept, pyplot, save


@kept
def plot_reliability(
    p: np.ndarray, y: np.ndarray, path: str | Path, bins: int = 10, title: str = "reliability"
) -> Path | None:
    """Observed share of pairs humans prefer A vs mean P(A), per equal-width bin (the bins of the
    ECE), with each bin's count; the diagonal is perfect calibration. None without labels."""
    if not p.size:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    idx = np.minimum((p * bins).astype(int), bins - 1)
    used = np.unique(idx)
    conf = np.array([p[idx == b].mean() for b in used])
    freq = np.array([y[idx == b].mean() for b in used])
    count = np.array([(idx == b).sum() for b in used])
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":", label="perfectly calibrated")
    ax.bar((used + 0.5) / bins, freq, width=0.9 / bins, alpha=0.35, color="C0", label="observed share")
    ax.plot(conf, freq, "o-", color="C0", ms=4, label="per bin (mean P(A), share)")
    for x, f, c in zip(conf, freq, count):
        ax.annotate(str(int(c)), (x, f), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
    ax.set(
        xlim=(0, 1),
        ylim=(0, 1.08),
        xlabel="P(A) (bin mean)",
        ylabel="share of pairs humans prefer A",
        title=title,
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=7, frameon=False)
    return save(fig, path)


@kept
def plot_p_a_by_order(
    listed: Sequence[float], swapped: Sequence[float], path: str | Path, title: str = "P(A) by order"
) -> Path:
    """Histograms of P(A) with the candidates as listed (i shown as A) and swapped (j shown as A).
    Without position bias the two are mirror images around 0.5; a judge that favours A shifts both
    to the right."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    edges = np.linspace(0, 1, 21)
    for values, label, color in (
        (listed, "listed order (A = first candidate)", "C0"),
        (swapped, "swapped (A = second candidate)", "C1"),
    ):
        vals = np.array([v for v in values if math.isfinite(v)], dtype=float)
        ax.hist(
            vals, bins=edges, histtype="stepfilled", alpha=0.35, color=color, label=f"{label}, n={vals.size}"
        )
        ax.hist(vals, bins=edges, histtype="step", color=color)
    ax.axvline(0.5, color="grey", lw=0.8, ls=":")
    ax.set(xlim=(0, 1), xlabel="P(A)", ylabel="pairs", title=title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=7, frameon=False)
    return save(fig, path)


@kept
def plot_answer_mass(
    masses: np.ndarray, threshold: float, path: str | Path, title: str = "answer-token mass"
) -> Path:
    """Histogram of log10(answer mass) per pair, the threshold and the median marked. A log axis,
    because the failures it shows are orders of magnitude (1e-9 for a base model)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    logm = np.log10(np.clip(masses, 1e-12, 1.0))
    low = min(math.floor(logm.min()) if logm.size else -3, -3)
    ax.hist(logm, bins=np.linspace(low, 0, 41), color="C2", alpha=0.7)
    ax.axvline(math.log10(threshold), color="C3", lw=1.2, ls="--", label=f"threshold {threshold:g}")
    if logm.size:
        med = float(np.median(masses))
        ax.axvline(math.log10(max(med, 1e-12)), color="black", lw=1.0, label=f"median {med:.3g}")
    ax.set(
        xlim=(low, 0), xlabel="log10 P(any answer token) before renormalising", ylabel="pairs", title=title
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=7, frameon=False)
    return save(fig, path)
