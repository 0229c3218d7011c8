"""A-BB sweep figures, from one point per run (tau, delta and the run's metrics):

- `plot_retained_vs_tau`: retained correlation (per-model Pearson by default) and the per-item
  variance kept, against tau, one line per delta (and per other swept setting);
- `plot_violation_vs_delta`: the empirical violation rate on fresh neighbours with its
  Clopper-Pearson interval against delta, with the line rate = delta the claim promises.

`harness.runtime.abb_sweep` collects a sweep's runs into points and calls these.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.figures import pyplot, save


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def plot_retained_vs_tau(points: Sequence[Mapping[str, Any]], path: Path, metric: str = "model_pearson") -> Path:
    """Left: `metric` vs tau; right: per-item variance kept (1 - reduction) vs tau; one line per delta."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    lines: dict[str, list[Mapping[str, Any]]] = {}
    for p in points:
        lines.setdefault(f"delta={p['delta']:g} {p['label']}".strip(), []).append(p)
    for name, pts in lines.items():
        pts = sorted(pts, key=lambda p: p["tau"])
        tau = [p["tau"] for p in pts]
        ax1.plot(tau, [_num(p.get(metric)) for p in pts], marker="o", label=name)
        ax2.plot(tau, [1 - _num(p.get("item_variance_reduction")) for p in pts], marker="o", label=name)
    ax1.set_xlabel("tau (raw score units)")
    ax1.set_ylabel(f"retained: {metric}")
    ax2.set_xlabel("tau (raw score units)")
    ax2.set_ylabel("per-item variance kept")
    ax2.set_yscale("log")
    ax1.legend(fontsize=7)
    fig.suptitle("A-BB: retained signal vs tau")
    return save(fig, path)


def plot_violation_vs_delta(points: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Each run's violation rate on fresh neighbours with its CP interval; the claim is rate <= delta."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    taus = sorted({p["tau"] for p in points})
    for k, tau in enumerate(taus):
        pts = [p for p in points if p["tau"] == tau and p.get("violation_rate") is not None]
        # Runs sharing a delta are spread a little sideways so their intervals stay readable.
        x = [p["delta"] * (1 + 0.04 * (k - (len(taus) - 1) / 2)) for p in pts]
        y = [p["violation_rate"] for p in pts]
        err = [[max(0.0, p["violation_rate"] - p["violation_cp_low"]) for p in pts],
               [max(0.0, p["violation_cp_high"] - p["violation_rate"]) for p in pts]]
        ax.errorbar(x, y, yerr=err, fmt="o", capsize=3, label=f"tau={tau:g}")
    deltas = sorted({p["delta"] for p in points})
    if deltas:
        span = [deltas[0] / 2, deltas[-1] * 2]
        ax.plot(span, span, color="grey", ls="--", label="rate = delta (the claim's limit)")
        ax.set_xscale("log")
        ax.set_xlim(*span)
        ax.set_xticks(deltas, [f"{d:g}" for d in deltas])
        ax.minorticks_off()
    ax.set_xlabel("delta")
    ax.set_ylabel("violation rate on fresh neighbours")
    ax.legend(fontsize=7)
    ax.set_title("A-BB: empirical violation rate vs delta")
    return save(fig, path)
