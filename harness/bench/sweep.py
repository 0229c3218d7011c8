"""harness-bench sweep: what `harness-collect table` and `harness-report` cost over a sweep of
--jobs jobs (default 100).

The sweep is made from ONE finished run (--job RUN_DIR): its folder (W&B's left out) copied into
jobs 0..N-1 of a multirun folder whose multirun.yaml, as Hydra writes it, sweeps `seed` x
`task.aspect` (4 aspects when N is a multiple of 4, else `seed` alone), each job's overrides.json
its own. Every job holds the same judgments: what is timed is the commands' own work, not the
runs'. Then, each as its own process: `harness-collect table SWEEP` (the table, the CSV and one
figure per metric), `harness-report SWEEP` (every job's card and report.html, then index.html),
and `harness-report SWEEP` again (the jobs' card pictures now hold the keys this code gives them,
harness.figures.kept: a finished sweep's jobs drew theirs at the end of their run). Per command:
the CPU-seconds of its process, wall seconds and the 1-minute load when it started.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.bench.measure import machine, run_child
from harness.bench.report import emit, positive, table
from harness.errors import ConfigError
from harness.outputs import refuse_other_run, writable_folder

HELP = "harness-collect and harness-report over a 100-job sweep made from one finished run"
ASPECTS = ("coherence", "consistency", "fluency", "relevance")
SWEPT = ("seed", "task.aspect", "hydra.")


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, default=None, help="also write the JSON line here (atomically)")
    p.add_argument(
        "--job", type=Path, required=True, help="a finished run directory (results.json, judgments.jsonl)"
    )
    p.add_argument("--jobs", type=positive, default=100, help="jobs in the sweep (default %(default)s)")
    p.add_argument(
        "--out", type=Path, default=None, help="keep the sweep folder here (default: a temporary one)"
    )


def make_sweep(job: Path, root: Path, n: int) -> list[list[str]]:
    """`n` copies of `job` as jobs 0..n-1 of a multirun folder `root`; each job's overrides."""
    try:
        base = json.loads((job / "overrides.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        base = []
    base = [str(o) for o in base if not str(o).startswith(SWEPT)] if isinstance(base, list) else []
    per_aspect = n // len(ASPECTS) if n % len(ASPECTS) == 0 else n
    jobs = [
        [*base, f"seed={s}", *([f"task.aspect={a}"] if per_aspect != n else [])]
        for s in range(per_aspect)
        for a in (ASPECTS if per_aspect != n else ("",))
    ]
    swept = [
        f"seed=range(0,{per_aspect})",
        *([f"task.aspect={','.join(ASPECTS)}"] if per_aspect != n else []),
    ]
    root.mkdir(parents=True, exist_ok=True)
    (root / "multirun.yaml").write_text(
        "hydra:\n"
        f"  sweep:\n    dir: {json.dumps(str(root))}\n    subdir: ${{hydra.job.num}}\n"
        "  mode: MULTIRUN\n"
        "  overrides:\n    hydra: []\n    task:\n"
        + "".join(f"    - {json.dumps(o)}\n" for o in [*base, *swept]),
        encoding="utf-8",
    )
    for num, overrides in enumerate(jobs):
        shutil.copytree(
            job, root / str(num), ignore=shutil.ignore_patterns("wandb", ".*"), dirs_exist_ok=True
        )
        (root / str(num) / "overrides.json").write_text(json.dumps(overrides, indent=2), encoding="utf-8")
    return jobs


def timed(name: str, cmd: list[str]) -> dict[str, Any]:
    """One command as its own process: its CPU-s (user + system), wall, the load when it started."""
    done, cpu, wall, load = run_child(cmd)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ConfigError(f"{name} failed (exit {done.returncode}): {tail[0]}")
    return {"step": name, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "load_1min": round(load, 1)}


def main(args: argparse.Namespace) -> int:
    if not (args.job / "results.json").is_file():
        raise ConfigError(f"{args.job}: holds no results.json; give --job a finished run directory")
    if args.out is not None:
        refuse_other_run(writable_folder(args.out), same=lambda f: (f / "multirun.yaml").is_file())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp) / "sweep"
        if root.exists():
            shutil.rmtree(root)
        jobs = make_sweep(args.job, root, args.jobs)
        py = [sys.executable, "-m"]
        steps = [
            timed("harness-collect table", [*py, "harness.runtime.collect", "table", str(root)]),
            timed("harness-report", [*py, "harness.runtime.report_cli", str(root)]),
            timed("harness-report again", [*py, "harness.runtime.report_cli", str(root)]),
        ]
        pages = sum(1 for n in range(len(jobs)) if (root / str(n) / "report.html").is_file())
        result = {
            "jobs": len(jobs),
            "judgments_per_job": sum(1 for _ in (args.job / "judgments.jsonl").open()) - 1
            if (args.job / "judgments.jsonl").is_file()
            else None,
            "pages": pages,
            "index": (root / "index.html").is_file(),
            "steps": steps,
            "machine": machine(),
        }
    print(
        table(
            [
                ("step", lambda r: r["step"]),
                ("CPU-s", lambda r: f"{r['cpu_s']:.2f}"),
                ("wall s", lambda r: f"{r['wall_s']:.2f}"),
                ("load", lambda r: f"{r['load_1min']:.1f}"),
            ],
            steps,
        )
    )
    emit(result, args.json)
    return 0
