"""harness-bench metrics: what one judged set's metrics cost at paper scale, once the judge has answered.

SummEval at full size is 100 documents x 16 candidates = 24,000 ordered pairs, scored with 100
PairS shuffles. An instant judge (harness.bench.workloads.instant_judgments: seeded P(A)s and A/B
log-probs, human scores in thirds with ties) feeds the shipped `harness.metrics.write_run`
(judgments.jsonl, every metric raw and under each debiasing, results.json) without the
bootstrap, then `analyse` without and with `--bootstrap` rounds over documents; the difference
is what the intervals cost. Each is called once, then timed `--rounds` times: the median wall
time, and this process's CPU time (on a shared machine the wall time also holds other jobs' turns).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.bench.measure import machine
from harness.bench.report import add_common, emit, positive, table
from harness.bench.workloads import instant_judgments
from harness.metrics import write_run
from harness.metrics.settings import MetricsSettings
from harness.metrics.summary import analyse

HELP = "what write_run and the bootstrap cost at paper scale, with an instant judge"


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_common(p, rounds=3, model=False)
    p.add_argument("--docs", type=positive, default=100, help="documents (default 100: SummEval)")
    p.add_argument("--candidates", type=positive, default=16, help="candidates per document (default 16)")
    p.add_argument("--shuffles", type=positive, default=100, help="PairS shuffles (default 100)")
    p.add_argument(
        "--bootstrap",
        type=positive,
        default=MetricsSettings.bootstrap,
        help=f"bootstrap rounds over documents (default {MetricsSettings.bootstrap}: metrics.bootstrap)",
    )


def cpu_and_wall(n: int, fn: Callable[[], Any]) -> dict[str, Any]:
    """Median wall and CPU seconds of `n` calls after a warm-up call (first imports); every round's wall time."""
    fn()
    walls, cpus = [], []
    for _ in range(n):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return {"median_s": statistics.median(walls), "median_cpu_s": statistics.median(cpus), "rounds_s": walls}


def main(args: argparse.Namespace) -> int:
    judgments = instant_judgments(args.docs, args.candidates)
    facts = dict(
        task="summeval",
        aspect="coherence",
        family="summary",
        instruction="instant judge",
        judge_identity="instant",
        n_docs=args.docs,
        shuffles=args.shuffles,
        seed=0,
    )
    with tempfile.TemporaryDirectory() as tmp:
        rows = {
            "write_run": cpu_and_wall(
                args.rounds,
                lambda: write_run(Path(tmp), judgments, 0.5, **facts, metrics=MetricsSettings(bootstrap=0)),
            )
        }
    rows["analyse"] = cpu_and_wall(args.rounds, lambda: analyse(judgments, 0.5, args.shuffles, 0))
    rows["analyse + bootstrap"] = cpu_and_wall(
        args.rounds,
        lambda: analyse(judgments, 0.5, args.shuffles, 0, with_intervals=MetricsSettings(args.bootstrap)),
    )
    boot = {
        "median_s": rows["analyse + bootstrap"]["median_s"] - rows["analyse"]["median_s"],
        "median_cpu_s": rows["analyse + bootstrap"]["median_cpu_s"] - rows["analyse"]["median_cpu_s"],
    }
    out = {
        "command": "metrics",
        "docs": args.docs,
        "candidates": args.candidates,
        "pairs": len(judgments),
        "shuffles": args.shuffles,
        "bootstrap": args.bootstrap,
        "rounds": args.rounds,
        "machine": machine(),
        "rows": rows,
        "bootstrap_cost": boot,
    }
    print(
        f"{len(judgments):,} ordered pairs ({args.docs} docs x {args.candidates} candidates), {args.shuffles} "
        f"PairS shuffles, {args.bootstrap} bootstrap rounds; median of {args.rounds}"
    )
    print(
        table(
            [
                ("what", lambda kv: kv[0]),
                ("wall s", lambda kv: f"{kv[1]['median_s']:.2f}"),
                ("CPU s", lambda kv: f"{kv[1]['median_cpu_s']:.2f}"),
            ],
            [*rows.items(), ("the bootstrap (difference)", boot)],
        )
    )
    m = out["machine"]
    print(f"load {m['load_1min']:.1f} on {m['nproc']} CPUs ({m['cpu']}), {m['date']}")
    emit(out, args.json)
    return 0
