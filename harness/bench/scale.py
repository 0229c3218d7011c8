"""harness-bench scale: what the harness itself costs around a nearly free judge, at SummEval's size.

Each size is a real `experiment=judge` run (`python -m harness.run`, a process of its own) over the
first N/240 SummEval documents x all 16 candidates (240 ordered pairs each: 24,000 is all of
SummEval; past it the documents repeat, each copy's prompts made distinct by a line naming the
copy: 100,080 is 417 documents), judged by `--model` (default tiny_llama3: the real Llama-3 tokenizer and chat template,
tiny random weights, so the judge costs next to nothing and what is left is the harness). Each size
runs `--modes` on one fresh request cache: uncached (every prompt reaches the judge), then cached (none
does); `stub` instead of uncached fills the cache with seeded random answers at no model cost. Per run: the CPU-seconds of the run's processes (W&B's service included), wall seconds, the
run process's peak RSS, the 1-minute load when it started, the sizes of report.html, judgments.jsonl
and wandb/, and the CPU-seconds of each phase (harness.bench.phases: imports, tokenizer, requests,
tokenize+check, cache, judge, metrics+intervals, plots, W&B, report, results, other). Then, per mode,
the least-squares line CPU-s = fixed + slope x judgments over the sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.bench.measure import machine, run_child
from harness.bench.phases import ORDER
from harness.bench.report import add_common, emit, table
from harness.errors import ConfigError

HELP = "the harness's own cost (phases, CPU-s, peak RSS) of a cached and an uncached run at 1,200 to 24,000 judgments"
PAIRS_PER_DOC = 240
"""SummEval: 16 candidates, 16 x 15 ordered pairs per document."""
SUMMEVAL_PAIRS = 100 * PAIRS_PER_DOC
"""All of SummEval (100 documents). A larger size repeats the documents, each copy's id and source
marked so that every prompt is distinct (harness.bench.phases.cycled_documents)."""


def sizes(text: str) -> list[int]:
    """An argparse type: comma-separated judgment counts, each a multiple of 240 (whole documents)."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(n < PAIRS_PER_DOC or n % PAIRS_PER_DOC for n in out):
        raise argparse.ArgumentTypeError(
            f"--sizes takes judgment counts that are multiples of {PAIRS_PER_DOC} (SummEval's pairs per "
            f"document), e.g. 1200,4800,24000; got {text!r}"
        )
    return out


MODES = ("uncached", "stub", "cached")


def modes(text: str) -> list[str]:
    """An argparse type: comma-separated MODES."""
    out = [x.strip() for x in text.split(",") if x.strip()]
    if not out or any(m not in MODES for m in out):
        raise argparse.ArgumentTypeError(f"--modes takes {', '.join(MODES)} (comma-separated); got {text!r}")
    return out


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_common(p, rounds=None, model=False)
    p.add_argument(
        "--sizes", type=sizes, default=[1200, 4800, 24000], help="judgments per run (default 1200,4800,24000)"
    )
    p.add_argument("--model", default="tiny_llama3", help="a conf/model name (default %(default)s)")
    p.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="more run overrides (repeatable)"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="keep the runs and caches here (default: a temporary folder)"
    )
    p.add_argument(
        "--modes",
        type=modes,
        default=["uncached", "cached"],
        help="the runs of each size, in order, on one request cache: uncached (the judge computes every "
        "prompt), stub (the same with seeded random answers instead of the model: fills the cache at no "
        "model cost), cached (no prompt reaches the judge) (default uncached,cached)",
    )


def _folder_bytes(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (0: absent)."""
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def one_run(n: int, mode: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One `experiment=judge` run of `n` judgments in its own process, on the size's request cache."""
    run_dir, phases = root / f"{n}-{mode}", root / f"{n}-{mode}.phases.json"
    cmd = [
        sys.executable,
        "-m",
        "harness.bench.phases",
        *(["--stub"] if mode == "stub" else []),
        *(["--cycle"] if n > SUMMEVAL_PAIRS else []),
        str(phases),
        "experiment=judge",
        f"model={args.model}",
        "task=summeval",
        f"task.docs={n // PAIRS_PER_DOC}",
        "task.max_candidates=16",
        f"hydra.run.dir={run_dir}",
        *args.override,
    ]
    env = {**os.environ, "HARNESS_CACHE": str(root / f"cache-{n}")}
    done, cpu, wall, load = run_child(cmd, env)
    if done.returncode != 0 or not phases.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ConfigError(f"the {n}-judgment {mode} run failed (exit {done.returncode}): {tail[0]}")
    got = json.loads(phases.read_text())
    return {
        "judgments": n,
        "mode": mode,
        "cpu_s": round(cpu, 2),
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(got.pop("peak_rss_kb") / 1024, 1),
        "load_1min": load,
        "phases_cpu_s": {k: v["cpu_s"] for k, v in got.items()},
        "phases_wall_s": {k: v["wall_s"] for k, v in got.items()},
        "report_html_mb": round(_folder_bytes(run_dir / "report.html") / 1e6, 2),
        "judgments_jsonl_mb": round(_folder_bytes(run_dir / "judgments.jsonl") / 1e6, 2),
        "wandb_mb": round(_folder_bytes(run_dir / "wandb") / 1e6, 2),
    }


def line_fit(points: list[tuple[int, float]]) -> dict[str, float] | None:
    """Least squares y = fixed + slope * x (None with fewer than two sizes)."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return {"ms_per_judgment": round(slope * 1e3, 4), "fixed_s": round(my - slope * mx, 2)}


def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp)
        root.mkdir(parents=True, exist_ok=True)
        runs = [one_run(n, mode, args, root) for n in args.sizes for mode in args.modes]
    out = {
        "command": "scale",
        "model": args.model,
        "overrides": args.override,
        "machine": machine(),
        "runs": runs,
        "fit": {
            mode: line_fit([(r["judgments"], r["cpu_s"]) for r in runs if r["mode"] == mode])
            for mode in dict.fromkeys(args.modes)
        },
    }
    print(f"CPU-seconds per phase of an experiment=judge run, model={args.model}; {out['machine']['cpu']}")
    print(
        table(
            [
                ("run", lambda r: f"{r['judgments']:,} {r['mode']}"),
                *[(k, lambda r, k=k: f"{r['phases_cpu_s'][k]:.2f}") for k in ORDER],
                ("CPU-s", lambda r: f"{r['cpu_s']:.1f}"),
                ("wall s", lambda r: f"{r['wall_s']:.1f}"),
                ("peak RSS MB", lambda r: f"{r['peak_rss_mb']:.0f}"),
                ("load", lambda r: f"{r['load_1min']:.1f}"),
                ("report MB", lambda r: f"{r['report_html_mb']:.2f}"),
            ],
            runs,
        )
    )
    for mode, fit in out["fit"].items():
        if fit is not None:
            print(
                f"{mode}: {fit['ms_per_judgment']:.3f} ms per judgment + {fit['fixed_s']:.2f} s fixed (CPU-s)"
            )
    emit(out, args.json)
    return 0
