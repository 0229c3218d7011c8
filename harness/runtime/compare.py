"""harness-compare RUN_A RUN_B [--variant none] [--bootstrap ROUNDS] [--level LEVEL] [--seed SEED] [--primary METRIC]

Two judged runs over the SAME documents and pairs (each a run directory with results.json and
judgments.jsonl: experiment=judge, a shard merge): every metric of A and of B, B - A, and B - A's
paired interval over documents (the same document left out in both runs: harness/metrics/interval.py)
with one plain sentence, e.g. "spearman +0.120 [-0.050, +0.310] (12 documents, t-jackknife): not
distinguishable from 0 at 95%"; below 3 documents "(2 documents: too few documents to tell)".

The table is ONE family of claims: a line says "distinguishable" only when Holm's step-down over
every metric with an interval (their paired t p-values) keeps it, so with no true difference the
chance that any line of the table says so is at most 1 - level (harness/metrics/coverage.py
measures it); each printed interval is still that metric's own, at the level, and a line whose own
interval excludes 0 but which Holm does not keep says so. `--primary METRIC` names the one claim up
front instead: that metric's line is tested alone at the level (all the power Holm spreads over the
family), every other line is printed as exploratory, with no verdict.

Refuses, in one line naming both runs and what differs, runs over different documents or pairs
(exit 2). Its first lines name what differs between the runs (instruction, judge, data,
settings: harness/report/rundiff.py); metrics with no value in either run are named once, with why,
below the table. Warns when the runs judged different aspects (the same pairs, but each run's human
scores and instruction are about its own aspect), and when the runs' numerics (results.json "numerics": dtype, dtype_source, engine,
device) differ or only one run records them: a difference may then be the arithmetic's, not the
instruction's or the model's. The seed defaults to RUN_A's results.json seed, the PairS shuffles
to RUN_A's, the level and bootstrap rounds to the runs' own (results.json "interval": their
metrics.level and metrics.bootstrap), else the schema's defaults; runs made at two levels are
refused in one line unless --level picks one.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from harness.checks import within_optional
from harness.errors import DataError, HarnessError
from harness.judging import load_judgments
from harness.metrics.bootstrap import NO_INTERVAL, check_settings
from harness.metrics.interval import METHOD, Interval, holm, sentence, verdict
from harness.metrics.ranges import UNEQUAL, UNEQUAL_PAIRED, unequal
from harness.metrics.settings import MetricsSettings
from harness.metrics.summary import analyse, both_candidates
from harness.records import Judgment
from harness.report.rundiff import differs_lines, not_applicable
from harness.results import RunResults
from harness.runtime.schema import MetricsConf

NUMERICS = ("dtype", "dtype_source", "engine", "device")


def read_run(path: Path) -> tuple[dict[str, Any], list[Judgment], float | None]:
    for name in ("results.json", "judgments.jsonl"):
        if not (path / name).is_file():
            raise DataError(f"{name} not found: give the directory of a finished judge run", where=str(path))
    judgments, p_cf = load_judgments(path / "judgments.jsonl")
    return (
        RunResults.read(path / "results.json", "give the directory of a finished judge run"),
        judgments,
        p_cf,
    )


def _few(items: set[Any]) -> str:
    shown = sorted(map(str, items))
    return ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")


def difference(a: list[Judgment], b: list[Judgment]) -> str | None:
    """What makes two judgment lists incomparable (their documents, then their ordered pairs), or None."""
    da, db = {j.doc_id for j in a}, {j.doc_id for j in b}
    if da != db:
        return (
            f"different documents: {len(da - db)} only in A ({_few(da - db) or 'none'}), "
            f"{len(db - da)} only in B ({_few(db - da) or 'none'})"
        )
    pa, pb = {(j.doc_id, j.a_id, j.b_id) for j in a}, {(j.doc_id, j.a_id, j.b_id) for j in b}
    if pa != pb:
        fmt = {"/".join(p) for p in pa - pb}, {"/".join(p) for p in pb - pa}
        return (
            f"the same documents but different ordered pairs: {len(pa - pb)} only in A "
            f"({_few(fmt[0]) or 'none'}), {len(pb - pa)} only in B ({_few(fmt[1]) or 'none'})"
        )
    return None


def numerics_warning(ra: dict[str, Any], rb: dict[str, Any]) -> str | None:
    na, nb = ra.get("numerics"), rb.get("numerics")
    if na is None and nb is None:
        return None
    if na is None or nb is None:
        return (
            f"warning: only run {'B' if na is None else 'A'} records its numerics "
            f"({na or nb}); the other's dtype/engine/device are unknown"
        )
    differs = [f"{k} {na.get(k)!r} vs {nb.get(k)!r}" for k in NUMERICS if na.get(k) != nb.get(k)]
    return (
        f"warning: the runs' numerics differ ({'; '.join(differs)}): part of B - A may be the arithmetic's"
        if differs
        else None
    )


def aspect_warning(ra: dict[str, Any], rb: dict[str, Any]) -> str | None:
    """One line when the runs judged different aspects (or different tasks) of the same pairs."""
    differs = [f"{k} {ra.get(k)!r} vs {rb.get(k)!r}" for k in ("task", "aspect") if ra.get(k) != rb.get(k)]
    return (
        f"warning: the runs differ in {'; '.join(differs)}: the same pairs, but each run is scored against "
        "its own aspect's human labels, so B - A mixes the instruction's effect with the aspect's"
        if differs
        else None
    )


def unequal_warning(lo: int, hi: int) -> str | None:
    """One line when the documents' candidate counts (fewest `lo`, most `hi`, over both runs) differ
    more than UNEQUAL-fold: there the paired intervals of the correlations under-cover a true
    difference (docs/report_card.md), and Summary.versus withholds them (ranges.unequal_withheld)."""
    if not unequal(lo, hi):
        return None
    return (
        f"warning: the documents have {lo} to {hi} candidates (more than {UNEQUAL}x apart): no paired "
        f"interval is given for {', '.join(UNEQUAL_PAIRED)}: on such mixes (2 vs 30 candidates) their "
        "intervals held a true difference in only 60-83% (win-rate Spearman, Kendall), 89-95% (PairS) "
        "and 87-93% (pooled) of simulated runs of 3-20 documents (docs/report_card.md)"
    )


def run_interval(
    ra: dict[str, Any], rb: dict[str, Any], rounds: int | None, level: float | None
) -> tuple[int, float]:
    """(rounds, level): the flags, else the runs' own (results.json "interval"), else the schema's.
    Two runs recorded at different levels need --level: one paired interval has one level."""
    meta = [r.get("interval") if isinstance(r.get("interval"), dict) else {} for r in (ra, rb)]
    if level is None:
        levels = [float(m["level"]) for m in meta if isinstance(m.get("level"), int | float)]
        if len(set(levels)) > 1:
            raise DataError(
                f"runs A and B were made at different levels (metrics.level {levels[0]:g} vs "
                f"{levels[1]:g}): give --level to compare them at one"
            )
        level = levels[0] if levels else MetricsConf.level
    if rounds is None:
        recorded = meta[0].get("rounds")
        rounds = int(recorded) if isinstance(recorded, int) and recorded > 0 else MetricsConf.bootstrap
    check_settings(rounds, level)
    return rounds, level


def _f(x: Any) -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"


def compare(
    dir_a: Path,
    dir_b: Path,
    variant: str,
    rounds: int | None,
    level: float | None,
    seed: int | None,
    primary: str | None = None,
) -> list[str]:
    ra, ja, cfa = read_run(dir_a)
    rb, jb, cfb = read_run(dir_b)
    rounds, level = run_interval(ra, rb, rounds, level)
    why = difference(ja, jb)
    if why:
        raise DataError(
            f"runs A ({dir_a}) and B ({dir_b}) cannot be compared pair by pair: {why}; "
            "compare runs over the same documents and candidates"
        )
    seed = int(ra.get("seed", 0)) if seed is None else seed
    shuffles = int(ra.get("shuffles", 100))
    iv = MetricsSettings(rounds, level)
    sa = analyse(ja, p_cf=cfa, shuffles=shuffles, seed=seed, with_intervals=iv)
    sb = analyse(jb, p_cf=cfb, shuffles=shuffles, seed=seed, with_intervals=iv)
    if variant not in sa.metrics or variant not in sb.metrics:
        raise DataError(
            f"variant {variant!r} is not in both runs (A has {', '.join(sa.metrics)}; B has "
            f"{', '.join(sb.metrics)})",
            where=str(dir_b),
        )
    rows = {k: d for k, d in sa.versus(sb, "", variant).items() if k not in NO_INTERVAL}
    if primary is not None and primary not in rows:
        raise DataError(f"--primary {primary!r} is not a metric with an interval (one of: {', '.join(rows)})")
    said, family = family_verdicts(rows, level) if primary is None else primary_verdicts(rows, level, primary)
    lines = [
        f"A = {dir_a}",
        f"B = {dir_b}",
        *differs_lines(dir_a, dir_b, ra, rb),
        f"{len({j.doc_id for j in ja})} documents, {len(ja)} ordered pairs in each; variant {variant}; "
        + (f"B - A: {level:.0%} paired interval, {METHOD}" if rounds else "no intervals (--bootstrap 0)"),
    ]
    if rounds:
        lines.append(family)
    for warning in (
        aspect_warning(ra, rb),
        numerics_warning(ra, rb),
        unequal_warning(*both_candidates(sa, sb)),
    ):
        if warning:
            lines.append(warning)
    if int(rb.get("shuffles", shuffles)) != shuffles:
        lines.append(
            f"note: B was run with {rb.get('shuffles')} PairS shuffles; both are recomputed here with A's "
            f"{shuffles}"
        )
    empty, empty_line = not_applicable({k: d for k, d in rows.items() if k not in NO_INTERVAL}, ja)
    lines.append(f"{'metric':<24} {'A':>9} {'B':>9}   B - A")
    for key, d in rows.items():
        if key in NO_INTERVAL or key in empty:
            continue
        text = (
            d["sentence"]
            if key not in said
            else sentence(key, d["diff"], Interval.from_record(d), level, said=said[key])
        )
        lines.append(f"{key:<24} {_f(d['a']):>9} {_f(d['b']):>9}   {text}")
    return lines + ([empty_line] if empty_line else [])


def primary_verdicts(
    rows: dict[str, dict[str, Any]], level: float, primary: str
) -> tuple[dict[str, str], str]:
    """The one metric named up front is tested alone at `level`; every other line is exploratory."""
    said = {k: f"exploratory (the primary metric is {primary}): no claim" for k in rows if k != primary}
    own = verdict(Interval.from_record(rows[primary]))
    if own:
        said[primary] = f"{own} at {level:.0%} (the primary metric, named up front)"
    return said, (
        f"one claim: the primary metric {primary} at {level:.0%}; every other line is exploratory (no verdict)"
    )


def family_verdicts(rows: dict[str, dict[str, Any]], level: float) -> tuple[dict[str, str], str]:
    """({metric: its family-wise verdict}, the line that says how they were made): Holm's step-down
    over the metrics whose paired interval has a p-value (the others cannot tell and are not tested)."""
    p = {k: d["p_value"] for k, d in rows.items() if isinstance(d.get("p_value"), float)}
    kept = holm(p, level)
    m = len(p)
    said = {}
    for k, rejected in kept.items():
        alone = verdict(Interval.from_record(rows[k])) == "distinguishable from 0"
        said[k] = (
            f"distinguishable from 0 at {level:.0%} family-wise (Holm, {m} metrics)"
            if rejected
            else f"not distinguishable from 0 at {level:.0%} family-wise (Holm, {m} metrics"
            + ("; its own interval excludes 0)" if alone else ")")
        )
    return said, (
        f"one family of claims: Holm's step-down over the {m} metrics with an interval (with no true "
        f"difference, at most {1 - level:.0%} of such tables claim any); each interval is its metric's own"
        if m
        else "no metric has an interval: nothing is tested"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="harness-compare",
        description="Two judged runs over the same pairs: every "
        "metric, B - A and its paired interval over documents.",
    )
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--variant", default="none", help="none (raw), permutation, batch or contextual")
    ap.add_argument(
        "--bootstrap",
        type=int,
        default=None,
        help="0: no intervals; else the bootstrap rounds of the "
        "statistics that use them (default: RUN_A's metrics.bootstrap)",
    )
    ap.add_argument(
        "--level", type=float, default=None, help="the intervals' level (default: the runs' metrics.level)"
    )
    ap.add_argument("--seed", type=int, default=None, help="the PairS shuffles' seed (default: RUN_A's seed)")
    ap.add_argument(
        "--primary",
        default=None,
        help="one metric named up front: tested alone at the level, the rest exploratory "
        "(default: Holm's step-down over every metric)",
    )
    args = ap.parse_args(argv)
    try:
        within_optional("--seed", args.seed, 0, 2**32 - 1)  # numpy's range, before any work
        lines = compare(
            args.run_a, args.run_b, args.variant, args.bootstrap, args.level, args.seed, args.primary
        )
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
