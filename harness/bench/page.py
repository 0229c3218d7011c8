"""harness-bench page: how big report.html gets and how fast it opens. A synthetic judge run over a
real task slice (every ordered pair of --docs documents x --candidates candidates; SummEval's 100 x 16
is 24,000 pairs), its page written as a run writes it, then loaded in headless Chromium with the
network off (harness.bench.browser).

`--run RUN_DIR` opens that run's own report.html instead (e.g. a 24,000-judgment run of
`harness-bench scale --out`): nothing is written.

The JSON line: pairs, page MB, seconds to write it (prompts checked pair by pair against SmolLM2's
chat template), Chromium's load time (navigation start to the end of the load event: the page's
script runs inline, so its first page of rows is drawn by then; the median of --loads loads in one
Chromium, each load listed), the time to filter and to turn a page, and the machine. P(A) and
log-probs are seeded random numbers: the page's size and speed do not depend on them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.bench.browser import Chromium, find_chromium
from harness.bench.measure import machine
from harness.bench.report import add_common, emit, positive, table
from harness.data import load_task
from harness.data.fetch import default_data_dir, ensure_data
from harness.errors import ConfigError
from harness.files import write_json_atomic
from harness.judging import ordered_pairs, write_judgments
from harness.metrics.card import render_cards
from harness.metrics.settings import MetricsSettings
from harness.models.resolve import model_spec
from harness.outputs import refuse_other_run, writable_folder
from harness.prompts import default_instruction
from harness.records import Judgment
from harness.report.page import write_report
from harness.report.prompt import config_view

SYNTHETIC = "synthetic (seeded random P(A))"
"""The judge results.json names for the page bench's run."""
HELP = "report.html's size and load time in headless Chromium for a synthetic run (24,000 pairs by default)"


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_common(p, rounds=None, model=False)
    p.add_argument(
        "--task", default="summeval", help="the real task whose texts fill the page (default %(default)s)"
    )
    p.add_argument("--aspect", default="coherence")
    p.add_argument("--docs", type=positive, default=100, help="documents (default 100: SummEval)")
    p.add_argument("--candidates", type=positive, default=16, help="candidates per document (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out", type=Path, default=None, help="keep the run folder here (default: a temporary one)"
    )
    p.add_argument(
        "--run", type=Path, default=None, help="time this run's own report.html (no synthetic run)"
    )
    p.add_argument("--loads", type=positive, default=3, help="page loads, the median reported (default 3)")


def synthetic_run(
    out: Path, task: str, aspect: str, n_docs: int, n_cands: int, seed: int, data_dir: Path | None = None
) -> list:
    """A judge run's files (config.json, results.json, judgments.jsonl) over a real slice."""
    data = Path(data_dir or os.environ.get("HARNESS_DATA_DIR") or default_data_dir())
    ensure_data(data, mirror=os.environ.get("HARNESS_DATA_MIRROR"), only=[task])
    docs = load_task(task, data_dir=data, limit=n_docs)
    rng = random.Random(seed)
    judgments = []
    for doc in docs:
        for a, b in ordered_pairs(doc, n_cands):
            p = rng.random()
            mass = rng.uniform(0.05, 0.9)
            lp = {"A:A": math.log(mass * p), "B:B": math.log(mass * (1 - p))}
            judgments.append(
                Judgment(
                    doc.id,
                    a.id,
                    b.id,
                    p,
                    lp,
                    a.scores.get(aspect),
                    b.scores.get(aspect),
                    flags=("low_answer_mass",) if mass < 0.2 else (),
                )
            )
    write_judgments(out / "judgments.jsonl", judgments, 0.5)
    task_cfg = {
        "name": task,
        "aspect": aspect,
        "offset": 0,
        "docs": n_docs,
        "max_candidates": n_cands,
        "num_shards": 1,
        "shard_index": 0,
        "family": None,
        "path": None,
        "format": "default",
    }
    write_json_atomic(
        out / "config.json",
        {
            "task": task_cfg,
            "data": {"dir": str(data), "mirror": None},
            "model": model_spec("smollm2"),
            "backend": {"name": "hf"},
        },
    )
    write_json_atomic(
        out / "results.json",
        {
            "experiment": "judge",
            "task": task,
            "aspect": aspect,
            "family": "summarization",
            "instruction": default_instruction(aspect, "summarization"),
            "judge": SYNTHETIC,
            "n_docs": len(docs),
            "n_judgments": len(judgments),
        },
    )
    return docs


def _synthetic(folder: Path) -> bool:
    """The folder holds an earlier `harness-bench page --out` run (its results.json says so)."""
    try:
        return json.loads((folder / "results.json").read_text(encoding="utf-8")).get("judge") == SYNTHETIC
    except (OSError, ValueError, AttributeError):
        return False


def main(args: argparse.Namespace) -> int:
    if find_chromium() is None:
        raise ConfigError("no Chromium found: install it (Debian: apt-get install chromium) to time the page")
    if args.run is not None and not (args.run / "report.html").is_file():
        raise ConfigError(f"{args.run}: holds no report.html; give --run a finished run directory")
    if args.out is not None and args.run is None:  # before any work: a folder holding no run but a page's
        refuse_other_run(writable_folder(args.out), same=_synthetic)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.run or args.out or tmp)
        write_s = None
        if args.run is None:
            out.mkdir(parents=True, exist_ok=True)
            docs = synthetic_run(
                out, args.task, args.aspect, args.docs, args.candidates, args.seed, args.data_dir
            )
            render_cards(out, echo=lambda _: None, metrics=MetricsSettings(bootstrap=0))
            start = time.perf_counter()
            page = write_report(out, docs, config_view(json.loads((out / "config.json").read_text())))
            write_s = time.perf_counter() - start
        page = out / "report.html"
        with Chromium() as browser:
            loads = [browser.load(page) for _ in range(args.loads)]
            loaded = loads[0]
            loaded.errors = [e for got in loads for e in got.errors]
            loaded.requests = [r for got in loads for r in got.requests]
            status = browser.evaluate("document.getElementById('pairs-status').textContent")
            t0 = time.perf_counter()
            browser.evaluate("document.getElementById('tag-flip').click()")
            filter_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            browser.evaluate("document.getElementById('next').click()")
            page_s = time.perf_counter() - t0
        result: dict[str, Any] = {
            "pairs": sum(1 for _ in (out / "judgments.jsonl").open()) - 1,
            "page_mb": round(page.stat().st_size / 1e6, 2),
            "write_s": None if write_s is None else round(write_s, 1),
            "chromium_load_s": round(statistics.median(got.load_ms for got in loads) / 1000, 2),
            "chromium_loads_s": [round(got.load_ms / 1000, 2) for got in loads],
            "load_1min": round(os.getloadavg()[0], 1),
            "filter_s": round(filter_s, 2),
            "next_page_s": round(page_s, 2),
            "errors": loaded.errors,
            "requests": loaded.requests,
            "first_page": status,
            "machine": machine(),
        }
    print(
        table(
            [
                ("pairs", lambda r: str(r["pairs"])),
                ("page MB", lambda r: f"{r['page_mb']:.2f}"),
                ("write s", lambda r: "-" if r["write_s"] is None else f"{r['write_s']:.1f}"),
                ("load s", lambda r: f"{r['chromium_load_s']:.2f}"),
                ("filter s", lambda r: f"{r['filter_s']:.2f}"),
                ("next page s", lambda r: f"{r['next_page_s']:.2f}"),
                ("errors", lambda r: str(len(r["errors"]))),
                ("requests", lambda r: str(len(r["requests"]))),
            ],
            [result],
        )
    )
    emit(result, args.json)
    return 0 if not result["errors"] and not result["requests"] else 1
