"""python scripts/bench_metrics.py [--docs 100] [--candidates 16] [--shuffles 100] [--repeats 3] [--rounds 1000]

How long does one judged set's write_run take at paper scale, once the judge has answered?
SummEval at full size is 100 documents x 16 candidates = 24,000 ordered pairs, scored with 100
PairS shuffles. An instant judge (P(A) and A/B logprobs from a seeded logistic model; human scores
on SummEval's 1-5 scale in thirds, with ties) feeds `harness.metrics.write_run` (judgments.jsonl,
every metric raw and under each debiasing, results.json) and, in the same run, the loop
implementation it replaced (tests/metrics_reference.py). Prints the best of `--repeats` for each,
wall time and this process's CPU time (on a shared, loaded machine the wall time includes the
other jobs' turns), the ratios, the largest difference between their metrics (shared keys) and whether they wrote the
same judgments.jsonl; then the bootstrap over documents (issue #31: `--rounds` rounds of every
metric, raw and debiased, harness/metrics/bootstrap.py): `analyse` with and without it, the
difference being what the intervals cost; then the machine (lscpu model name, nproc, date) and ONE
line of JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import metrics_reference as ref  # noqa: E402
import numpy as np  # noqa: E402

from harness.metrics import write_run  # noqa: E402
from harness.metrics.summary import analyse  # noqa: E402
from harness.records import Judgment  # noqa: E402


def instant_judgments(docs: int, candidates: int, seed: int = 0) -> list[Judgment]:
    """Every ordered pair of `docs` documents, judged instantly: a position bias per document plus
    a weak preference for the candidate humans rate higher, plus noise."""
    rng = np.random.default_rng(seed)
    out = []
    for d in range(docs):
        human = rng.integers(3, 16, candidates) / 3  # 1..5 in thirds: the mean of 3 experts
        bias = rng.normal(0.5, 1.0)
        for i in range(candidates):
            for k in range(candidates):
                if i == k:
                    continue
                z = bias + 0.5 * (human[i] - human[k]) + rng.normal()
                la, lb = -math.log1p(math.exp(-z)) - 0.4, -math.log1p(math.exp(z)) - 0.4
                out.append(Judgment(f"doc{d}", f"M{i}", f"M{k}", 1 / (1 + math.exp(-z)),
                                    {"A": la, "A: A": la - 3, "B": lb, "B: B": lb - 3},
                                    float(human[i]), float(human[k])))
    return out


def best_of(repeats: int, fn) -> tuple[float, float, object]:
    """(best wall seconds, best CPU seconds of this process, result): on a shared machine the CPU
    time is what the code costs, the wall time also what the other jobs took."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), result


def max_diff(new: dict, old: dict) -> float:
    worst = 0.0
    for variant, values in old.items():
        for key, value in values.items():
            a, b = float(new[variant][key]), float(value)
            if math.isnan(a) != math.isnan(b):
                return math.inf
            if not math.isnan(a):
                worst = max(worst, abs(a - b))
    return worst


def cpu_model() -> str:
    """lscpu's model name (platform.processor() where lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        out = ""
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")]
    return names[0] if names else platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--candidates", type=int, default=16)
    ap.add_argument("--shuffles", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3, help="time each implementation this many times, keep the best")
    ap.add_argument("--rounds", type=int, default=1000, help="bootstrap rounds to time (metrics.bootstrap)")
    ap.add_argument("--out", type=Path, help="folder for the two runs' files (default: a temporary folder)")
    args = ap.parse_args(argv)
    judgments = instant_judgments(args.docs, args.candidates)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        new_dir, old_dir = root / "new", root / "old"
        new_dir.mkdir(parents=True, exist_ok=True)
        old_dir.mkdir(parents=True, exist_ok=True)
        facts = dict(task="summeval", aspect="coherence", family="summary", instruction="instant judge",
                     judge_identity="instant", n_docs=args.docs, shuffles=args.shuffles, seed=0)
        new_s, new_cpu, new = best_of(args.repeats, lambda: write_run(new_dir, judgments, 0.5, **facts,
                                                                      bootstrap=0)["metrics"])
        old_s, old_cpu, old = best_of(args.repeats, lambda: ref.write_run(old_dir, judgments, 0.5, args.shuffles, 0))
        same_jsonl = (new_dir / "judgments.jsonl").read_bytes() == (old_dir / "judgments.jsonl").read_bytes()
    plain_s, plain_cpu, _ = best_of(args.repeats, lambda: analyse(judgments, 0.5, args.shuffles, 0))
    boot_s, boot_cpu, _ = best_of(args.repeats, lambda: analyse(judgments, 0.5, args.shuffles, 0, rounds=args.rounds))
    line = {"docs": args.docs, "candidates": args.candidates, "pairs": len(judgments), "shuffles": args.shuffles,
            "repeats": args.repeats, "new_s": new_s, "old_s": old_s, "ratio": old_s / new_s,
            "new_cpu_s": new_cpu, "old_cpu_s": old_cpu, "cpu_ratio": old_cpu / new_cpu,
            "max_abs_diff": max_diff(new, old), "same_judgments_jsonl": same_jsonl,  # type: ignore[arg-type]
            "rounds": args.rounds, "analyse_s": plain_s, "analyse_bootstrap_s": boot_s,
            "bootstrap_s": boot_s - plain_s, "bootstrap_cpu_s": boot_cpu - plain_cpu,
            "load_1min": os.getloadavg()[0], "cpus": os.cpu_count(), "cpu_model": cpu_model(),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    print(f"write_run, {line['pairs']:,} ordered pairs ({args.docs} docs x {args.candidates} candidates), "
          f"{args.shuffles} PairS shuffles, best of {args.repeats}:")
    print(f"  wall  vectorised {new_s:.2f} s   loop (reference) {old_s:.2f} s   ratio {line['ratio']:.1f}x")
    print(f"  CPU   vectorised {new_cpu:.2f} s   loop (reference) {old_cpu:.2f} s   ratio {line['cpu_ratio']:.1f}x")
    print(f"bootstrap over documents, {args.rounds} rounds of every metric (raw and 3 debiased variants), "
          f"best of {args.repeats}:")
    print(f"  wall  analyse {plain_s:.2f} s   with the bootstrap {boot_s:.2f} s   the bootstrap "
          f"{line['bootstrap_s']:.2f} s (CPU {line['bootstrap_cpu_s']:.2f} s)")
    print(f"  load average {line['load_1min']:.1f} on {line['cpus']} CPUs ({line['cpu_model']}), {line['date']}")
    print(f"  max |new - old| over every metric {line['max_abs_diff']:.3g}; same judgments.jsonl: {same_jsonl}")
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
