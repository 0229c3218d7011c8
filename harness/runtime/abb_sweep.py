"""Collect an A-BB sweep: the table (harness.runtime.collect) and the plots of harness.abb.plots.

    python -m harness.run -m experiment=abb_sweep                              # or any multirun of experiment=abb
    python -m harness.runtime.abb_sweep multirun/abb_grid/<stamp> [--out DIR]  # default DIR: <root>/collect

- `table.md` / `table.csv`: one row per cell: `cell` (certified / estimate / none / refused), the
  verdict of its fresh check and what that check tested (sure: the cap's assumption; rate; context),
  and for a refused cell the reason; a VACUOUS cell (no judge within the score scale could have
  failed it) is marked, never counted as a pass; numbers in 4 significant figures (CSV: all digits);
- `retained_vs_tau.png`: retained correlation (per-model Pearson by default) and the per-item
  variance kept, against tau (as a fraction of the score range when the sweep set tau_fraction);
- `violation_vs_delta.png`: the violation rate on fresh neighbours with its Clopper-Pearson interval
  against the delta each cell claimed; certified cells filled, plug-in estimates hollow; vacuous,
  sure and refused cells are dropped (and counted in the title);
- `instructions.md`: when the sweep varied experiment.instruction.source (ZEPO x A-BB,
  conf/experiment/abb_zepo.yaml), the instructions side by side on the same items.
Everything lands in DIR and is logged to W&B in the sweep's group (job_type abb_collect).
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
from harness.files import write_text_atomic
from harness.runtime import collect
from harness.runtime.tracking import Tracker

TABLE_METRICS = (
    "cell",
    "verdict",
    "check_tests",
    "bound_winner",
    "alpha",
    "alpha_cap",
    "alpha_plugin",
    "sigma",
    "delta_claimed",
    "sensitivity_plugin",
    "sensitivity_ucb",
    "noop_estimate",
    "violations",
    "trials",
    "violation_rate",
    "violation_cp_high",
    "model_pearson",
    "model_spearman",
    "elo_spearman",
    "item_variance_reduction",
    "refused",
)
"""Columns of the sweep table (paths into results.json 'metrics'): `cell` separates certified, estimate
and refused cells, `verdict` marks vacuous ones, `refused` says why a cell was refused."""
_AXES = ("experiment.tau", "experiment.tau_fraction", "experiment.delta")
SIDE_BY_SIDE = (
    "d",
    "sensitivity_plugin",
    "sensitivity_ucb",
    "bound_winner",
    "threshold",
    "alpha",
    "alpha_cap",
    "alpha_plugin",
    "verdict",
    "model_pearson",
    "model_spearman",
    "elo_spearman",
    "reference_spearman_original",
    "reference_spearman_bounded",
)
"""Columns of instructions.md (ZEPO x A-BB): Delta-hat, its bound, alpha, retained ranking signal."""


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
        points.append(
            {
                **m,
                "label": label,
                "vacuous": m.get("verdict") == "vacuous",
                "cell": m.get("cell") or m.get("guarantee_kind"),
            }
        )
    return points


def instruction_table(runs: Sequence[collect.Run]) -> collect.Table | None:
    """Instructions side by side (one row per run) when the sweep varied experiment.instruction.source;
    `same_items` says whether every run scored the same items (bounded_scores.jsonl), as a fair
    comparison needs."""
    varying, _ = collect.varying_keys(runs)
    if "experiment.instruction.source" not in varying:
        return None
    items = [_items(r.path) for r in runs]
    same = all(i == items[0] for i in items)
    others = [k for k in varying if k not in ("experiment.instruction.source", "experiment.instruction.path")]
    cols = [*others, "source", "instruction", *SIDE_BY_SIDE]
    rows = []
    for r in runs:
        text = " ".join(str(r.results.get("instruction") or "").split())
        rows.append(
            [
                *(r.overrides.get(k) for k in others),
                r.overrides.get("experiment.instruction.source"),
                text[:70] + ("..." if len(text) > 70 else ""),
                *(_sig(collect.metric_value(r.results, m)) for m in SIDE_BY_SIDE),
            ]
        )
    caption = (
        f"same items in every run: {same} ({len(items[0])} items); alpha is certified, Delta-hat and "
        "alpha_plugin are estimates"
    )
    return collect.Table(cols, rows, caption)


def _sig(v: Any) -> Any:
    """4 significant digits: Delta-hat of a small judge is ~1e-4, which fixed decimals would show as 0."""
    return f"{v:.4g}" if isinstance(v, float) else v


def _items(path: Path) -> list[str]:
    f = path / "bounded_scores.jsonl"
    return (
        [json.loads(line)["item"] for line in f.read_text().splitlines() if line.strip()]
        if f.is_file()
        else []
    )


def collect_abb(
    root: str | Path,
    out_dir: str | Path | None = None,
    metric: str = "model_pearson",
    tracker: Any | None = None,
) -> dict[str, Path]:
    """table.md, table.csv and both plots in out_dir (default <root>/collect); logged to `tracker`
    when given, else to a W&B run in the sweep's group (mode/project from the runs' config)."""
    root = Path(root)
    out = Path(out_dir) if out_dir is not None else root / "collect"
    out.mkdir(parents=True, exist_ok=True)
    runs = with_overrides(collect.collect_runs(root))
    present = [m for m in TABLE_METRICS if any(collect.metric_value(r.results, m) is not None for r in runs)]
    table = collect.build_table(runs, present or collect.pick_metrics(runs, None), root)
    shown = dataclasses.replace(table, rows=[[_sig(v) for v in row] for row in table.rows])
    write_text_atomic(out / "table.md", collect.to_markdown(shown))
    write_text_atomic(out / "table.csv", collect.to_csv(table))
    points = sweep_points(runs)
    if not any(p["cell"] != "refused" for p in points):
        raise HarnessError(f"no A-BB results (metrics.tau/delta) under {root}")
    files = {
        "retained_vs_tau": plot_retained_vs_tau(points, out / "retained_vs_tau.png", metric),
        "violation_vs_delta": plot_violation_vs_delta(points, out / "violation_vs_delta.png"),
    }
    side = instruction_table(runs)
    if side is not None:
        write_text_atomic(out / "instructions.md", collect.to_markdown(side, digits=4))
        files["instructions"] = out / "instructions.md"
    own = tracker is None
    if own:
        tracker = _sweep_tracker(runs, out)
    try:
        for name, path in files.items():
            if path.suffix == ".png":
                tracker.log_image(name, path)
        tracker.log_table("sweep", table.columns, table.rows)
        if side is not None:
            tracker.log_table("instructions", side.columns, side.rows)
    finally:
        if own:
            tracker.finish()
    return {**files, "table": out / "table.md"}


def _sweep_tracker(runs: Sequence[collect.Run], out: Path) -> Any:
    w = runs[0].config.get("wandb") or {}
    return Tracker(
        out,
        mode=w.get("mode") or "offline",
        project=w.get("project") or "harness",
        entity=w.get("entity"),
        group=w.get("group"),
        job_type="abb_collect",
        run_config={"root": str(runs[0].path.parent), "runs": len(runs)},
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.runtime.abb_sweep", description=__doc__.split("\n\n")[0]
    )
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
