"""Turn a multirun directory into a paper table (markdown + CSV) and figures; merge shard runs.

    python -m harness.runtime.collect table multirun/judge/2026-01-01_12-00-00 --out tables/judge \
        --metrics none/spearman permutation/spearman none/a_rate
    python -m harness.runtime.collect table multirun/judge/... --pivot task.aspect model --metrics none/spearman
    python -m harness.runtime.collect table multirun/judge/2026-01-01_12-00-00   # -> <that dir>/collect/
    python -m harness.runtime.collect merge runs/coh/shard-* --out runs/coh/merged

A run is any directory under the root holding results.json (hidden dirs such as .submitit are
skipped); its config.json and overrides.json (the job's command-line overrides, written by
harness.run; Hydra's .hydra/overrides.yaml is read when that is absent) say what it was. Rows are the runs,
labelled by the overrides that differ between them (the ones all runs share go into the caption);
columns are the chosen metrics. A metric name is a path into results.json's "metrics" (e.g.
`none/spearman`, `permutation/a_rate`), into a part's "metrics" (a ZEPO run's `best/none/a_rate`,
`initial/permutation/spearman`) or into results.json itself (`p_content_free`).
Rows are ordered by job number (Hydra's subdir), so a sweep run locally and on SLURM give the
same table. Where a run's results.json records an interval for a cell's metric (its "intervals", a
part's "intervals", "intervals_leaky" or "intervals_heldout", and beside each its documents, method
and note in "interval_basis..." : harness/metrics/interval.py), the markdown cell is
`value [lo, hi]`, or `value (too few documents to tell)` (its note) where the run has none; the CSV
has `<column> lo`, `hi`, `documents` and `note` beside the column; each figure draws the intervals
as error bars; the caption says, per column, the level, method and documents, or why there is no
interval, and each figure's title says it for its own column.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from harness.checks import within
from harness.errors import ConfigError, DataError, HarnessError
from harness.files import read_json, write_text_atomic
from harness.metrics.interval import Interval, described, recorded
from harness.outputs import refuse_other_run, writable_folder
from harness.results import RunResults
from harness.runtime.merged import merge_run
from harness.runtime.sweep import listed_jobs, sweep_gaps
from harness.runtime.table import Table, plot_table, to_csv, to_markdown

DEFAULT_METRICS = (
    "none/spearman",
    "none/kendall",
    "permutation/spearman",
    "none/a_rate",
    "none/fairness",
    "none/ece",
    "initial/none/a_rate",
    "best/none/a_rate",
    "initial/none/spearman",
    "best/none/spearman",
    "initial/heldout/none/spearman",
    "best/heldout/none/spearman",
)
"""Columns when --metrics is not given (those present in at least one run; where no run has a
`.../spearman`, as on gold-label data without human scores, `.../accuracy` follows `.../a_rate`). The `initial/` and
`best/` ones are a ZEPO run's evaluation before and after the search, on the run's configured
evaluation set; their headers say which (leaky or held-out, `metric_label`). The
`initial/heldout/...` ones are the held-out set whatever was configured (dropped where they
repeat a column already labelled held-out)."""
VIEWS = {"leaky": "metrics_leaky", "heldout": "metrics_heldout"}
"""`part/<view>/mode/metric`: a ZEPO evaluation's leaky (search documents included, as the paper
evaluated) or held-out (search documents excluded) metrics, whichever set the run configured; their
intervals are in the part's `intervals_<view>` and `interval_basis_<view>`."""
DEFAULT_OUT = "collect"
"""`table` without --out writes here, inside the collected directory (beside its jobs), and says so."""


@dataclass(frozen=True)
class Run:
    """One finished job of a multirun, read back from its directory."""

    path: Path
    """The job directory (holds results.json)."""
    overrides: dict[str, str]
    """Command-line overrides of the job (`key=value`, from overrides.json); {} if none."""
    results: dict[str, Any]
    """results.json."""
    config: dict[str, Any] = field(default_factory=dict)
    """config.json (the resolved config), {} when absent."""


def job_order(path: Path, root: Path) -> tuple:
    # Hydra names job dirs by job number: order 0, 1, ..., 10 numerically, not as strings.
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in rel(path, root).parts)


def rel(path: Path, root: Path) -> Path:
    """`path` relative to `root`, with `..` for a job folder outside it (hydra.sweep.subdir=../x_N)."""
    return Path(os.path.relpath(path, root))


def find_runs(root: str | Path) -> list[Path]:
    """Directories under `root` (root included) holding results.json, in job-number order."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError("not a directory", where=str(root))
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "wandb"]
        if "results.json" in filenames:
            found.append(Path(dirpath))
    return sorted(found, key=lambda p: job_order(p, root))


def parse_overrides(lines: Sequence[str]) -> dict[str, str]:
    """["task.aspect=coherence", "+x=1"] -> {"task.aspect": "coherence", "x": "1"} (deletions dropped)."""
    out = {}
    for line in lines:
        key, sep, value = str(line).partition("=")
        if not sep or key.startswith("~"):
            continue
        out[key.lstrip("+")] = value
    return out


def read_run(path: str | Path) -> Run:
    path = Path(path)
    overrides: dict[str, str] = {}
    if (path / "overrides.json").is_file():  # written by harness.run
        overrides = parse_overrides(json.loads((path / "overrides.json").read_text()))
    elif (path / ".hydra" / "overrides.yaml").is_file():  # Hydra's own record, when output_subdir is set
        overrides = parse_overrides(list(OmegaConf.load(path / ".hydra" / "overrides.yaml")))
    config = read_json(path / "config.json") if (path / "config.json").is_file() else {}
    results = RunResults.read(
        path / "results.json",
        "not a finished run's results: rerun that run, or move its folder out of the collected directory",
    )
    return Run(path, overrides, results, config)


def collect_runs(root: str | Path) -> list[Run]:
    """The runs below `root`. A shard sweep's merged runs (`merged/`, harness.runtime.sweep_end)
    stand for its shards: the shards (task.num_shards > 1) are left out when they are there."""
    found = find_runs(root)
    inside = {p.resolve() for p in found}
    outside = [  # jobs multirun.yaml lists in folders outside root (hydra.sweep.subdir=../x_N, /abs/x_N)
        d
        for _, _, d in listed_jobs(Path(root))
        if d is not None and (d / "results.json").is_file() and d.resolve() not in inside
    ]
    runs = [read_run(p) for p in [*found, *outside]]
    if any("merged" in rel(r.path, Path(root)).parts for r in runs):
        runs = [r for r in runs if int((r.config.get("task") or {}).get("num_shards") or 1) <= 1]
    if not runs:
        gaps = sweep_gaps(Path(root))  # each job multirun.yaml lists, with its state and reason
        raise DataError(
            f"no job of the sweep finished: {'; '.join(gaps)}"
            if gaps
            else "no results.json below this directory: nothing finished yet?",
            where=str(root),
        )
    return runs


def _walk(obj: Any, parts: Sequence[str]) -> Any:
    for p in parts:
        if not isinstance(obj, Mapping) or p not in obj:
            return None
        obj = obj[p]
    return obj


def metric_value(results: Mapping[str, Any], name: str) -> Any:
    """`mode/metric` from results["metrics"]; `part/mode/metric` from results[part]["metrics"] (a
    ZEPO run's `initial` and `best` evaluations, on its configured set); `part/leaky/mode/metric`
    and `part/heldout/mode/metric` from that evaluation's leaky or held-out metrics; else the same
    path from results itself; None if absent."""
    parts = name.split("/")
    if len(parts) > 2 and parts[1] in VIEWS and isinstance(results.get(parts[0]), Mapping):
        return _walk(results[parts[0]].get(VIEWS[parts[1]]), parts[2:])
    v = _walk(results.get("metrics"), parts)
    if v is None and len(parts) > 1:
        v = _walk(_walk(results, [parts[0], "metrics"]), parts[1:])
    return _walk(results, parts) if v is None else v


def _beside(results: Mapping[str, Any], name: str, key: str) -> Any:
    """What results.json records under `key` ("intervals", "interval_basis") for the metric
    `metric_value(results, name)` reads: the run's, a part's, or a part's `<key>_leaky` / `_heldout`."""
    parts = name.split("/")
    if len(parts) > 2 and parts[1] in VIEWS and isinstance(results.get(parts[0]), Mapping):
        return _walk(results[parts[0]].get(f"{key}_{parts[1]}"), parts[2:])
    if _walk(results.get("metrics"), parts) is not None:
        return _walk(results.get(key), parts)
    if len(parts) > 1 and _walk(_walk(results, [parts[0], "metrics"]), parts[1:]) is not None:
        return _walk(_walk(results, [parts[0], key]), parts[1:])
    return None


def _interval_record(results: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """The "interval" record (level, method, documents) of the evaluation `name` is read from."""
    parts = name.split("/")
    if _walk(results.get("metrics"), parts) is not None or not isinstance(results.get(parts[0]), Mapping):
        got = results.get("interval")
    else:
        view = (
            parts[1]
            if parts[1] in VIEWS
            else {"leaky": "leaky", "held-out": "heldout"}.get(evaluation_view(results, parts[0]) or "")
        )
        got = _walk(results, [parts[0], "interval", view or "leaky"])
        got = got if isinstance(got, Mapping) else results.get("interval")
    return got if isinstance(got, Mapping) else None


def metric_interval(results: Mapping[str, Any], name: str) -> Interval | None:
    """The Interval beside `metric_value(results, name)` ([lo, hi] or why none, its documents and
    method: harness.metrics.interval.recorded); None when the run records none."""
    return recorded(
        _beside(results, name, "intervals"),
        _beside(results, name, "interval_basis"),
        _interval_record(results, name),
    )


def metric_level(results: Mapping[str, Any], name: str) -> float | None:
    """The level of the interval beside `metric_value(results, name)` (the run's metrics.level)."""
    level = (_interval_record(results, name) or {}).get("level")
    return float(level) if isinstance(level, int | float) else None


def _with_intervals(table: Table, sources: Sequence[Sequence[tuple[Mapping[str, Any], str] | None]]) -> Table:
    """The table with each cell's Interval (sources[k][j]: the results.json and metric of row k's
    cell j, None for a label or a missing run) and, in its caption, what each column's intervals are."""
    bases = [[None if c is None else metric_interval(*c) for c in row] for row in sources]
    if not any(iv is not None for row in bases for iv in row):
        return table
    about: list[str | None] = [
        None
        if all(row[j] is None for row in sources)
        else described(
            [
                (b[j], None if row[j] is None else metric_level(*row[j]))
                for b, row in zip(bases, sources)
                if row[j] is not None
            ]
        )
        for j in range(len(table.columns))
    ]
    said: dict[str, list[str]] = {}
    for column, text in zip(table.columns, about):
        if text is not None:
            said.setdefault(text, []).append(column)
    line = "intervals: " + (
        "; ".join(f"{', '.join(cols)}: {text}" for text, cols in said.items())
        if len(said) > 1
        else next(iter(said))
    )
    caption = "; ".join(x for x in (table.caption, line) if x)
    return replace(table, caption=caption, bases=bases, about=about, settings=table.caption)


def evaluation_view(results: Mapping[str, Any], part: str) -> str | None:
    """Which documents a ZEPO part's `metrics` cover: "leaky" (the search documents included),
    "held-out", or None when `part` is no such evaluation (or the run does not say)."""
    entry = results.get(part)
    if not isinstance(entry, Mapping) or not isinstance(entry.get("metrics"), Mapping):
        return None
    if "leak_search_docs" in results:
        return "leaky" if results["leak_search_docs"] else "held-out"
    for view, key in (("leaky", "metrics_leaky"), ("held-out", "metrics_heldout")):
        if entry.get(key) is not None and entry[key] == entry["metrics"]:
            return view
    return None


def metric_label(runs: Sequence[Run], name: str) -> str:
    """A column header that says what the number covers: a ZEPO evaluation's `initial/none/spearman`
    becomes "initial/none/spearman (leaky)" or "(held-out)" (the paper's tables are the leaky ones);
    explicit `part/leaky/...` and `part/heldout/...` paths and every other metric keep their name."""
    parts = name.split("/")
    if len(parts) < 2 or parts[1] in VIEWS:
        return name
    views = {evaluation_view(r.results, parts[0]) for r in runs if metric_value(r.results, name) is not None}
    views.discard(None)
    if not views:
        return name
    return (
        f"{name} ({views.pop()})"
        if len(views) == 1
        else f"{name} (leaky or held-out by run: leak_search_docs)"
    )


def _leaves(obj: Any, prefix: str = "") -> list[str]:
    if isinstance(obj, Mapping):
        return [k for key, v in obj.items() for k in _leaves(v, f"{prefix}{key}/")]
    return [prefix[:-1]] if isinstance(obj, int | float) and not isinstance(obj, bool) else []


def pick_metrics(runs: Sequence[Run], metrics: Sequence[str] | None) -> list[str]:
    if metrics:
        for m in metrics:
            if all(metric_value(r.results, m) is None for r in runs):
                raise ConfigError(
                    f"metric {m!r} is in no run's results.json (e.g. {runs[0].path / 'results.json'})"
                )
        return list(metrics)
    present = [m for m in DEFAULT_METRICS if any(metric_value(r.results, m) is not None for r in runs)]
    present = [a for m in present for a in (m, *_accuracy_for(runs, m, present))]
    # part/heldout/x repeats part/x where that column is already the held-out set
    present = [
        m
        for m in present
        if not (
            m.split("/")[1:2] == ["heldout"]
            and metric_label(runs, m.replace("/heldout", "", 1)).endswith("(held-out)")
        )
    ]
    return present or _leaves(runs[0].results.get("metrics") or runs[0].results)


def _accuracy_for(runs: Sequence[Run], metric: str, present: Sequence[str]) -> list[str]:
    """[`.../accuracy`] beside a default `.../a_rate` column whose `.../spearman` no run has (gold-label
    data without human scores: accuracy against the gold label is its agreement measure)."""
    if not metric.endswith("/a_rate"):
        return []
    head = metric.removesuffix("a_rate")
    acc = head + "accuracy"
    if head + "spearman" in present or all(metric_value(r.results, acc) is None for r in runs):
        return []
    return [acc]


def varying_keys(runs: Sequence[Run]) -> tuple[list[str], dict[str, str]]:
    """(override keys whose value differs between runs, {key: value} shared by all runs)."""
    keys = list(dict.fromkeys(k for r in runs for k in r.overrides))
    varying = [k for k in keys if len({r.overrides.get(k) for r in runs}) > 1]
    shared = {k: runs[0].overrides[k] for k in keys if k not in varying}
    return varying, shared


def build_table(runs: Sequence[Run], metrics: Sequence[str], root: Path | None = None) -> Table:
    """Rows = runs labelled by their varying overrides (or their path when none vary)."""
    varying, shared = varying_keys(runs)
    label_cols = varying or ["run"]
    rows = []
    for r in runs:
        labels = (
            [r.overrides.get(k) for k in varying]
            if varying
            else [str(rel(r.path, root)) if root else str(r.path)]
        )
        rows.append(labels + [metric_value(r.results, m) for m in metrics])
    caption = " ".join(f"{k}={v}" for k, v in shared.items())
    table = Table(label_cols + [metric_label(runs, m) for m in metrics], rows, caption)
    return _with_intervals(
        table, [[None] * len(label_cols) + [(r.results, m) for m in metrics] for r in runs]
    )


def pivot_table(runs: Sequence[Run], row_key: str, col_key: str, metric: str) -> Table:
    """One metric laid out row_key x col_key (e.g. aspects x models): the usual paper layout."""
    varying, shared = varying_keys(runs)
    others = [k for k in varying if k not in (row_key, col_key)]
    if others:
        raise ConfigError(
            f"--pivot {row_key} {col_key}: runs also differ in {', '.join(others)}; "
            "collect a narrower directory or add those keys to the pivot"
        )
    row_vals = list(dict.fromkeys(r.overrides.get(row_key) for r in runs))
    col_vals = list(dict.fromkeys(r.overrides.get(col_key) for r in runs))
    by_cell = {(r.overrides.get(row_key), r.overrides.get(col_key)): r for r in runs}
    rows = [
        [rv]
        + [
            None if (rv, cv) not in by_cell else metric_value(by_cell[rv, cv].results, metric)
            for cv in col_vals
        ]
        for rv in row_vals
    ]
    caption = f"{metric_label(runs, metric)}; " + " ".join(
        f"{k}={v}" for k, v in shared.items() if k not in (row_key, col_key)
    )
    table = Table([f"{row_key} \\ {col_key}"] + [str(c) for c in col_vals], rows, caption.strip().rstrip(";"))
    return _with_intervals(
        table,
        [
            [None] + [(by_cell[rv, cv].results, metric) if (rv, cv) in by_cell else None for cv in col_vals]
            for rv in row_vals
        ],
    )


def collect(
    root: str | Path,
    out_dir: str | Path | None = None,
    metrics: Sequence[str] | None = None,
    pivot: Sequence[str] | None = None,
    digits: int = 3,
    figures: bool = True,
) -> Table:
    """Collect `root` into out_dir/table.md, table.csv (and figures/); returns the table."""
    root = Path(root)
    runs = collect_runs(root)
    chosen = pick_metrics(runs, metrics)
    if pivot:
        if len(chosen) != 1:
            raise ConfigError(
                f"--pivot lays out one metric; got {len(chosen)}: pass exactly one with --metrics"
            )
        table = pivot_table(runs, pivot[0], pivot[1], chosen[0])
    else:
        table = build_table(runs, chosen, root)
    gaps = sweep_gaps(root)
    if gaps:  # never a partial table that reads as the whole sweep
        note = f"PARTIAL: {len(gaps)} job(s) of the sweep have no row: " + "; ".join(gaps)
        table = replace(table.noted(note), missing=gaps)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / "table.md", to_markdown(table, digits))
        write_text_atomic(out / "table.csv", to_csv(table))
        if figures and not pivot:
            plot_table(table, chosen, out / "figures", len(table.columns) - len(chosen))
    return table


def partial_line(table: Table, root: Path) -> str:
    """What a partial table (`table.missing`) is told by: the jobs of root's sweep without a row."""
    return (
        f"partial table: {len(table.missing)} job(s) listed in {root / 'multirun.yaml'} have no row: "
        + "; ".join(table.missing)
    )


def check_merge_out(dirs: Sequence[str], out: Path) -> None:
    """merge --out: a folder this process can write, holding no run but this merge's own earlier
    output (its merge.json names the same shards)."""
    writable_folder(out)

    def same(folder: Path) -> bool:
        try:
            shards = json.loads((folder / "merge.json").read_text(encoding="utf-8"))["shards"]
            return sorted(Path(s).resolve() for s in shards) == sorted(Path(d).resolve() for d in dirs)
        except (OSError, ValueError, KeyError, TypeError):
            return False

    refuse_other_run(out, same=same)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.runtime.collect", description=__doc__.split("\n\n")[0]
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table", help="a multirun directory -> table.md, table.csv, figures/")
    t.add_argument("root", help="multirun directory (or any directory with run dirs below it)")
    t.add_argument(
        "--out",
        help=f"where to write table.md/table.csv/figures (default: ROOT/{DEFAULT_OUT}, "
        "beside the collected jobs)",
    )
    t.add_argument("--metrics", nargs="+", help=f"metric paths (default: {' '.join(DEFAULT_METRICS)})")
    t.add_argument("--pivot", nargs=2, metavar=("ROW_KEY", "COL_KEY"), help="one metric as ROW_KEY x COL_KEY")
    t.add_argument("--digits", type=int, default=3, help="decimals in the markdown table (CSV keeps all)")
    t.add_argument("--no-figures", action="store_true", help="skip the PNG bar charts")
    m = sub.add_parser(
        "merge",
        help="shard run dirs -> one run dir equal to the unsharded run, written as the "
        "sweep's own merge writes it (harness.runtime.merged)",
    )
    m.add_argument("dirs", nargs="+", help="the shards' run directories (any order)")
    m.add_argument(
        "--out",
        required=True,
        help="directory for the merged run: judgments.jsonl, results.json, "
        "config.json, the card, report.html and its W&B run (the shards' wandb.mode)",
    )
    args = p.parse_args(argv)
    try:
        if args.cmd == "table":
            within("--digits", args.digits, 0, 17)  # decimals of a float's repr, at most
            out = writable_folder(Path(args.out) if args.out else Path(args.root) / DEFAULT_OUT)
            table = collect(args.root, out, args.metrics, args.pivot, args.digits, not args.no_figures)
            print(to_markdown(table, args.digits), end="")
            figs = "" if args.no_figures or args.pivot else " and figures/"
            print(
                f"wrote {out / 'table.md'}, table.csv{figs}"
                + (
                    ""
                    if args.out
                    else f" (no --out given: the default, {DEFAULT_OUT}/ inside the collected directory)"
                ),
                file=sys.stderr,
            )
            if table.missing:
                print(f"error: {partial_line(table, Path(args.root))}", file=sys.stderr)
                return 1
        else:
            check_merge_out(args.dirs, Path(args.out))
            results = merge_run(args.dirs, args.out)
            print(
                f"merged {len(args.dirs)} shards: {results['n_docs']} documents, "
                f"{results['n_judgments']} judgments -> {args.out}"
            )
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
