"""Collect an A-BB sweep: the table (harness.collect) and the two plots the issue asks for.

    python -m harness.run -m experiment=bbe_sweep                      # or any multirun of experiment=bbe
    python -m harness.bbe_plots multirun/bbe_grid/<stamp> [--out DIR]  # default DIR: <root>/collect

- `retained_vs_tau.png`: retained correlation (per-model Pearson by default) and the per-item
  variance kept, against tau, one line per delta (and per other swept setting);
- `violation_vs_delta.png`: the empirical violation rate on fresh neighbours with its
  Clopper-Pearson interval against delta, with the line rate = delta the claim promises.
Both PNGs, table.md and table.csv land in DIR and are logged to W&B in the sweep's group
(job_type bbe_collect), with the settings every run shared.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import collect
from harness.errors import HarnessError

TABLE_METRICS = ("alpha", "sigma", "sensitivity_plugin", "sensitivity_ucb", "violations", "trials",
                 "violation_rate", "violation_cp_high", "model_pearson", "model_spearman", "elo_spearman",
                 "item_variance_reduction")
"""Columns of the sweep table (paths into results.json 'metrics')."""
_AXES = ("experiment.tau", "experiment.delta")


def with_overrides(runs: Sequence[collect.Run]) -> list[collect.Run]:
    """Fill each run's overrides from overrides.json (written by harness.run) when Hydra's
    .hydra/overrides.yaml is absent (conf/config.yaml sets hydra.output_subdir: null)."""
    out = []
    for r in runs:
        path = r.path / "overrides.json"
        if not r.overrides and path.is_file():
            r = dataclasses.replace(r, overrides=collect.parse_overrides(json.loads(path.read_text())))
        out.append(r)
    return out


def sweep_points(runs: Sequence[collect.Run]) -> list[dict[str, Any]]:
    """One point per run: tau, delta and metrics from results.json, labelled by the other overrides
    that vary across the sweep."""
    varying, _ = collect.varying_keys(runs)
    others = [k for k in varying if k not in _AXES]
    points = []
    for r in runs:
        m = r.results.get("metrics") or {}
        if m.get("tau") is None or m.get("delta") is None:
            continue  # not an A-BB run
        label = " ".join(f"{k.removeprefix('experiment.')}={r.overrides.get(k)}" for k in others)
        points.append({**m, "label": label})
    return points


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on clusters; must precede the pyplot import
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    _pyplot().close(fig)
    tmp.replace(path)
    return path


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def plot_retained_vs_tau(points: Sequence[Mapping[str, Any]], path: Path, metric: str = "model_pearson") -> Path:
    """Left: `metric` vs tau; right: per-item variance kept (1 - reduction) vs tau; one line per delta."""
    plt = _pyplot()
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
    return _save(fig, path)


def plot_violation_vs_delta(points: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Each run's violation rate on fresh neighbours with its CP interval; the claim is rate <= delta."""
    plt = _pyplot()
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
    return _save(fig, path)


def collect_bbe(root: str | Path, out_dir: str | Path | None = None, metric: str = "model_pearson",
                tracker: Any | None = None) -> dict[str, Path]:
    """table.md, table.csv and both plots in out_dir (default <root>/collect); logged to `tracker`
    when given, else to a W&B run in the sweep's group (mode/project from the runs' config)."""
    root = Path(root)
    out = Path(out_dir) if out_dir is not None else root / "collect"
    out.mkdir(parents=True, exist_ok=True)
    runs = with_overrides(collect.collect_runs(root))
    present = [m for m in TABLE_METRICS if any(collect.metric_value(r.results, m) is not None for r in runs)]
    table = collect.build_table(runs, present or collect.pick_metrics(runs, None), root)
    _write_text(out / "table.md", collect.to_markdown(table))
    _write_text(out / "table.csv", collect.to_csv(table))
    points = sweep_points(runs)
    if not points:
        raise HarnessError(f"no A-BB results (metrics.tau/delta) under {root}")
    files = {"retained_vs_tau": plot_retained_vs_tau(points, out / "retained_vs_tau.png", metric),
             "violation_vs_delta": plot_violation_vs_delta(points, out / "violation_vs_delta.png")}
    own = tracker is None
    if own:
        tracker = _sweep_tracker(runs, out)
    try:
        for name, path in files.items():
            tracker.log_image(name, path)
        tracker.log_table("sweep", table.columns, table.rows)
    finally:
        if own:
            tracker.finish()
    return {**files, "table": out / "table.md"}


def _sweep_tracker(runs: Sequence[collect.Run], out: Path) -> Any:
    from harness.tracking import Tracker

    w = runs[0].config.get("wandb") or {}
    return Tracker(out, mode=w.get("mode") or "offline", project=w.get("project") or "harness",
                   entity=w.get("entity"), group=w.get("group"), job_type="bbe_collect",
                   config={"root": str(runs[0].path.parent), "runs": len(runs)})


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.bbe_plots", description=__doc__.split("\n\n")[0])
    p.add_argument("root", help="the sweep's multirun directory")
    p.add_argument("--out", help="output directory (default: <root>/collect)")
    p.add_argument("--metric", default="model_pearson", help="retained-signal metric for the tau plot")
    args = p.parse_args(argv)
    try:
        files = collect_bbe(args.root, args.out, args.metric)
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, path in files.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
