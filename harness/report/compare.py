"""harness-compare RUN_A RUN_B [--variant none] [--bootstrap ROUNDS] [--level LEVEL] [--seed SEED]

Two judged runs over the SAME documents and pairs (each a run directory with results.json and
judgments.jsonl: experiment=judge, a shard merge): every metric of A and of B, B - A, and B - A's
paired interval over documents (the same document left out in both runs: harness/metrics/interval.py)
with one plain sentence, e.g. "spearman +0.120 [-0.050, +0.310] (12 documents, t-jackknife): not
distinguishable from 0 at 95%"; below 3 documents "(2 documents: too few documents to tell)".

Refuses, in one line naming both runs and what differs, runs over different documents or pairs
(exit 2). Warns when the runs judged different aspects (the same pairs, but each run's human
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

from harness.errors import DataError, HarnessError
from harness.judging import load_judgments
from harness.metrics.bootstrap import NO_INTERVAL, check_settings
from harness.metrics.interval import METHOD
from harness.metrics.summary import analyse
from harness.records import Judgment
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
    dir_a: Path, dir_b: Path, variant: str, rounds: int | None, level: float | None, seed: int | None
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
    sa = analyse(ja, p_cf=cfa, shuffles=shuffles, seed=seed, rounds=rounds, level=level)
    sb = analyse(jb, p_cf=cfb, shuffles=shuffles, seed=seed, rounds=rounds, level=level)
    if variant not in sa.metrics or variant not in sb.metrics:
        raise DataError(
            f"variant {variant!r} is not in both runs (A has {', '.join(sa.metrics)}; B has "
            f"{', '.join(sb.metrics)})",
            where=str(dir_b),
        )
    rows = sa.versus(sb, "", variant)
    lines = [
        f"A = {dir_a}",
        f"B = {dir_b}",
        f"{len({j.doc_id for j in ja})} documents, {len(ja)} ordered pairs in each; variant {variant}; "
        + (f"B - A: {level:.0%} paired interval, {METHOD}" if rounds else "no intervals (--bootstrap 0)"),
    ]
    for warning in (aspect_warning(ra, rb), numerics_warning(ra, rb)):
        if warning:
            lines.append(warning)
    if int(rb.get("shuffles", shuffles)) != shuffles:
        lines.append(
            f"note: B was run with {rb.get('shuffles')} PairS shuffles; both are recomputed here with A's "
            f"{shuffles}"
        )
    lines.append(f"{'metric':<24} {'A':>9} {'B':>9}   B - A")
    for key, d in rows.items():
        if key in NO_INTERVAL:
            continue
        lines.append(f"{key:<24} {_f(d['a']):>9} {_f(d['b']):>9}   {d['sentence']}")
    return lines


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
    args = ap.parse_args(argv)
    try:
        lines = compare(args.run_a, args.run_b, args.variant, args.bootstrap, args.level, args.seed)
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
