"""Collect an A-BB sweep: the table (harness.runtime.collect) and the plots of harness.abb.plots.

    python -m harness.run -m experiment=abb_sweep                              # or any multirun of experiment=abb
    python -m harness.runtime.abb_sweep multirun/abb_grid/<stamp> [--out DIR]  # default DIR: <root>/collect

- `retained_vs_tau.png`: retained correlation (per-model Pearson by default) and the per-item
  variance kept, against tau, one line per delta (and per other swept setting);
- `violation_vs_delta.png`: the empirical violation rate on fresh neighbours with its
  Clopper-Pearson interval against delta, with the line rate = delta the claim promises.
Both PNGs, table.md and table.csv land in DIR and are logged to W&B in the sweep's group
(job_type abb_collect), with the settings every run shared.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.abb.plots import plot_retained_vs_tau, plot_violation_vs_delta
from harness.errors import HarnessError
from harness.io import write_text_atomic
from harness.runtime import collect
from harness.runtime.tracking import Tracker

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


def collect_abb(root: str | Path, out_dir: str | Path | None = None, metric: str = "model_pearson",
                tracker: Any | None = None) -> dict[str, Path]:
    """table.md, table.csv and both plots in out_dir (default <root>/collect); logged to `tracker`
    when given, else to a W&B run in the sweep's group (mode/project from the runs' config)."""
    root = Path(root)
    out = Path(out_dir) if out_dir is not None else root / "collect"
    out.mkdir(parents=True, exist_ok=True)
    runs = with_overrides(collect.collect_runs(root))
    present = [m for m in TABLE_METRICS if any(collect.metric_value(r.results, m) is not None for r in runs)]
    table = collect.build_table(runs, present or collect.pick_metrics(runs, None), root)
    write_text_atomic(out / "table.md", collect.to_markdown(table))
    write_text_atomic(out / "table.csv", collect.to_csv(table))
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
    w = runs[0].config.get("wandb") or {}
    return Tracker(out, mode=w.get("mode") or "offline", project=w.get("project") or "harness",
                   entity=w.get("entity"), group=w.get("group"), job_type="abb_collect",
                   run_config={"root": str(runs[0].path.parent), "runs": len(runs)})


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.runtime.abb_sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("root", help="the sweep's multirun directory")
    p.add_argument("--out", help="output directory (default: <root>/collect)")
    p.add_argument("--metric", default="model_pearson", help="retained-signal metric for the tau plot")
    args = p.parse_args(argv)
    try:
        files = collect_abb(args.root, args.out, args.metric)
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, path in files.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
