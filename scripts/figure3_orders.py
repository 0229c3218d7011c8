"""python scripts/figure3_orders.py <sensitivity run> <the same, shuffle_candidates=true> [--out f.json]

Figure 3's rho across instructions in two sensitivity runs that differ only in the candidate order
(experiment.shuffle_candidates), and their PAIRED difference: both runs judged the same documents
and resample them with the same draws (the same seed and document ids), so each bootstrap round
gives a rho in each order and the round's shuffled - original difference; the t interval on those
differences' RMSE (harness/metrics/interval.py, as Figure 3's own) says whether the order changed
the relation. Reads each run's
instructions/<index>/judgments.jsonl and config.json (seed, experiment.shuffles, metrics); calls no
model. Prints one sentence per (Spearman, variant, objective) and writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from harness.judging import load_judgments
from harness.metrics.interval import ACROSS, bootstrap_interval, sentence
from harness.metrics.settings import MetricsSettings
from harness.metrics.summary import Summary, analyse
from harness.zepo.figure3 import FIGURE3, HUMAN, MODE_WORD, figure3_intervals, figure3_rounds


def load_run(run: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[Summary]]:
    cfg = json.loads((run / "config.json").read_text())
    folders = sorted(p for p in (run / "instructions").iterdir() if p.is_dir())
    rows, summaries = [], []
    for k, folder in enumerate(folders):
        judgments, p_cf = load_judgments(folder / "judgments.jsonl")
        s = analyse(
            judgments,
            p_cf=p_cf,
            shuffles=int(cfg["experiment"]["shuffles"]),
            seed=int(cfg["seed"]),
            with_intervals=MetricsSettings.of(cfg["metrics"]),
        )
        rows.append({"index": k, **{m: s.metrics[m] for m in ("none", "permutation")}})
        summaries.append(s)
    return cfg, rows, summaries


def compare(original: Path, shuffled: Path) -> dict[str, Any]:
    (cfg_a, rows_a, sum_a), (cfg_b, rows_b, sum_b) = load_run(original), load_run(shuffled)
    la, lb = sum_a[0].loo, sum_b[0].loo
    if (
        len(rows_a) != len(rows_b)
        or la is None
        or lb is None
        or (la.ids, la.boot_rounds, la.seed) != (lb.ids, lb.boot_rounds, lb.seed)
    ):
        raise SystemExit(
            "the two runs differ in their instructions or documents (or bootstrap draws): "
            "a paired comparison needs the same of both"
        )
    level = float(cfg_a["metrics"]["level"])
    n_docs = len(sum_a[0].loo.ids)
    f_a, f_b = (
        figure3_intervals(rows_a, sum_a, level, n_docs),
        figure3_intervals(rows_b, sum_b, level, n_docs),
    )
    out: dict[str, Any] = {
        "original": str(original),
        "shuffled": str(shuffled),
        "level": level,
        "n_docs": n_docs,
        "n_instructions": len(rows_a),
        "rounds": la.boot_rounds,
        "shuffle_candidates": [
            cfg_a["experiment"].get("shuffle_candidates"),
            cfg_b["experiment"].get("shuffle_candidates"),
        ],
    }
    for human, said in HUMAN.items():
        out[human] = {}
        for mode in ("none", "permutation"):
            out[human][mode] = {}
            for name, panel in FIGURE3.items():
                ea, eb = f_a[human][mode][name], f_b[human][mode][name]
                ra, _ = figure3_rounds(sum_a, name, mode, human)
                rb, _ = figure3_rounds(sum_b, name, mode, human)
                diff = (
                    eb["rho"] - ea["rho"]
                    if math.isfinite(ea["rho"]) and math.isfinite(eb["rho"])
                    else math.nan
                )
                both = np.isfinite(ra) & np.isfinite(rb)
                iv = (
                    bootstrap_interval(diff, rb - ra, n_docs, level, ACROSS, difference=True)
                    if math.isfinite(diff)
                    else None
                )
                label = (
                    f"{MODE_WORD[mode]} {panel} vs {said}, rho shuffled - dataset order "
                    f"({len(rows_a)} instructions, {n_docs} documents)"
                )
                out[human][mode][name] = {
                    "original": {
                        k: ea.get(k)
                        for k in (
                            "rho",
                            "p",
                            "interval",
                            "defined_rounds",
                            "undefined",
                            "n_documents",
                            "method",
                            "sentence",
                        )
                    },
                    "shuffled": {
                        k: eb.get(k)
                        for k in (
                            "rho",
                            "p",
                            "interval",
                            "defined_rounds",
                            "undefined",
                            "n_documents",
                            "method",
                            "sentence",
                        )
                    },
                    "diff": diff,
                    "interval": None if iv is None else iv.as_list(),
                    **({} if iv is None else iv.basis()),
                    "rounds_both_defined": int(both.sum()),
                    "sentence": sentence(label, diff, iv, level),
                }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("original", type=Path)
    ap.add_argument("shuffled", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    got = compare(args.original, args.shuffled)
    for human in HUMAN:
        for mode in ("none", "permutation"):
            for e in got[human][mode].values():
                print(
                    f"- {e['original']['sentence']}\n  shuffled: {e['shuffled']['sentence']}\n  {e['sentence']}"
                )
    if args.out is not None:
        args.out.write_text(json.dumps(got, indent=1, allow_nan=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
