"""A-BB sweep figures, from one point per run (tau, delta and the run's metrics):

- `plot_retained_vs_tau`: retained correlation (per-model Pearson by default) and the per-item
  variance kept, against tau, one line per delta (and per other swept setting);
- `plot_violation_vs_delta`: the empirical violation rate on fresh neighbours with its
  Clopper-Pearson interval against the delta each cell claimed, with the line rate = delta;
  certified cells are filled, plug-in ESTIMATES hollow (no certificate); cells whose rate check was
  VACUOUS (it could not fail), sure claims (no rate to test) and refused cells are dropped and
  counted, never drawn as passes.
Refused cells (`cell` = refused) carry no scores: both plots skip them and say how many.

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


def _tau(p: Mapping[str, Any]) -> float:
    return p["tau_fraction"] if p.get("tau_fraction") is not None else p["tau"]


def plot_retained_vs_tau(
    points: Sequence[Mapping[str, Any]], path: Path, metric: str = "model_pearson"
) -> Path:
    """Left: `metric` vs tau; right: per-item variance kept (1 - reduction) vs tau; one line per delta."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    lines: dict[str, list[Mapping[str, Any]]] = {}
    refused = sum(1 for p in points if p.get("cell") == "refused")
    for p in points:
        if p.get("cell") == "refused":
            continue
        lines.setdefault(f"delta={p['delta']:g} {p['label']}".strip(), []).append(p)
    for name, pts in lines.items():
        pts = sorted(pts, key=_tau)
        tau = [_tau(p) for p in pts]
        # a line whose cells are plug-in estimates is dashed: no certificate behind its alphas
        style = "--" if all(p.get("cell") == "estimate" for p in pts) else "-"
        ax1.plot(tau, [_num(p.get(metric)) for p in pts], ls=style, marker="o", label=name)
        ax2.plot(
            tau, [1 - _num(p.get("item_variance_reduction")) for p in pts], ls=style, marker="o", label=name
        )
    unit = (
        "fraction of the score range"
        if all(p.get("tau_fraction") is not None for p in points)
        else "raw units"
    )
    for ax, ylabel in ((ax1, f"retained: {metric}"), (ax2, "per-item variance kept")):
        ax.set_xlabel(f"tau ({unit})")
        ax.set_ylabel(ylabel)
    ax2.set_yscale("log")
    ax1.legend(fontsize=7)
    fig.suptitle(
        f"A-BB: retained signal vs tau (dashed: plug-in estimates; {refused} refused cells not shown)"
    )
    return save(fig, path)


def plot_violation_vs_delta(points: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Each informative cell's violation rate with its CP interval against its claimed delta."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    shown = [
        p
        for p in points
        if p.get("violation_rate") is not None
        and not p.get("vacuous")
        and (p.get("delta_claimed") or 0) > 0
        and p.get("cell") in ("certified", "estimate")
    ]
    dropped = sum(1 for p in points if p.get("vacuous"))
    sure = sum(1 for p in points if p.get("check_tests") == "sure")
    refused = sum(1 for p in points if p.get("cell") == "refused")
    taus = sorted({_tau(p) for p in shown})
    for k, tau in enumerate(taus):
        pts = [p for p in shown if _tau(p) == tau]
        # Runs sharing a delta are spread a little sideways so their intervals stay readable.
        x = [p["delta_claimed"] * (1 + 0.04 * (k - (len(taus) - 1) / 2)) for p in pts]
        y = [p["violation_rate"] for p in pts]
        err = [
            [max(0.0, p["violation_rate"] - p["violation_cp_low"]) for p in pts],
            [max(0.0, p["violation_cp_high"] - p["violation_rate"]) for p in pts],
        ]
        for kind, face in (("certified", None), ("estimate", "none")):
            sel = [i for i, p in enumerate(pts) if p.get("cell") == kind]
            if sel:
                ax.errorbar(
                    [x[i] for i in sel],
                    [y[i] for i in sel],
                    yerr=[[err[0][i] for i in sel], [err[1][i] for i in sel]],
                    fmt="o",
                    mfc=face,
                    capsize=3,
                    label=f"tau={tau:g}" + (" (plug-in estimate)" if kind == "estimate" else ""),
                )
    deltas = sorted({p["delta_claimed"] for p in shown})
    if deltas:
        span = [deltas[0] / 2, deltas[-1] * 2]
        ax.plot(span, span, color="grey", ls="--", label="rate = delta (the claim's limit)")
        ax.set_xscale("log")
        ax.set_xlim(*span)
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no informative cell", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("delta claimed (bound + noise)")
    ax.set_ylabel("violation rate on fresh neighbours")
    ax.set_title(
        f"A-BB: violation rate vs delta (dropped: {dropped} vacuous, {sure} sure, {refused} refused)",
        fontsize=9,
    )
    return save(fig, path)
