"""How big report.html gets and how fast it opens: a synthetic judge run over a real task slice
(every ordered pair of --docs documents x --candidates candidates; SummEval's 100 x 16 is 24,000
pairs), its page written as a run writes it, then loaded in headless Chromium with the network off.

    python scripts/bench_report.py                       # SummEval, 100 documents x 16 candidates
    python scripts/bench_report.py --docs 2 --candidates 3 --out /tmp/small

Prints one JSON line: pairs, page MB, seconds to write it (prompts checked pair by pair against
SmolLM2's chat template), Chromium's load time (navigation start to the end of the load event,
the first page of rows drawn), the time to filter and to turn a page, and the CPU (lscpu).
P(A) and log-probs are seeded random numbers: the page's size and speed do not depend on them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chromium_cdp import Chromium

from harness.data import load_task
from harness.data.fetch import default_data_dir, ensure_data
from harness.files import write_json_atomic
from harness.judging import ordered_pairs, write_judgments
from harness.metrics.card import render_cards
from harness.models.resolve import model_spec
from harness.prompts import default_instruction
from harness.records import Judgment
from harness.report.page import write_report
from harness.report.prompt import config_view


def synthetic_run(out: Path, task: str, aspect: str, n_docs: int, n_cands: int, seed: int) -> list:
    """A judge run's files (config.json, results.json, judgments.jsonl) over a real slice."""
    data = Path(os.environ.get("HARNESS_DATA_DIR") or default_data_dir())
    ensure_data(data, mirror=os.environ.get("HARNESS_DATA_MIRROR"), only=[task])
    docs = load_task(task, data_dir=data, limit=n_docs)
    rng = random.Random(seed)
    judgments = []
    for doc in docs:
        for a, b in ordered_pairs(doc, n_cands):
            p = rng.random()
            mass = rng.uniform(0.05, 0.9)
            lp = {"A:A": math.log(mass * p), "B:B": math.log(mass * (1 - p))}
            judgments.append(Judgment(doc.id, a.id, b.id, p, lp, a.scores.get(aspect), b.scores.get(aspect),
                                      flags=("low_answer_mass",) if mass < 0.2 else ()))
    write_judgments(out / "judgments.jsonl", judgments, 0.5)
    task_cfg = {"name": task, "aspect": aspect, "offset": 0, "docs": n_docs, "max_candidates": n_cands,
                "num_shards": 1, "shard_index": 0, "family": None, "path": None, "format": "default"}
    write_json_atomic(out / "config.json", {"task": task_cfg, "data": {"dir": str(data), "mirror": None},
                                            "model": model_spec("smollm2"), "backend": {"name": "hf"}})
    write_json_atomic(out / "results.json", {
        "experiment": "judge", "task": task, "aspect": aspect, "family": "summarization",
        "instruction": default_instruction(aspect, "summarization"), "judge": "synthetic (seeded random P(A))",
        "n_docs": len(docs), "n_judgments": len(judgments)})
    return docs


def cpu_model() -> str:
    lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    get = {k.strip(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    return f"{get.get('Model name', '?')}, {get.get('CPU(s)', '?')} CPUs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="summeval")
    ap.add_argument("--aspect", default="coherence")
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--candidates", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="the run folder (default: a temporary one, removed)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        docs = synthetic_run(out, args.task, args.aspect, args.docs, args.candidates, args.seed)
        render_cards(out, echo=lambda _: None, rounds=0)
        start = time.perf_counter()
        page = write_report(out, docs, config_view(json.loads((out / "config.json").read_text())))
        write_s = time.perf_counter() - start
        with Chromium() as browser:
            loaded = browser.load(page)
            status = browser.evaluate("document.getElementById('pairs-status').textContent")
            t0 = time.perf_counter()
            browser.evaluate("document.getElementById('tag-flip').click()")
            filter_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            browser.evaluate("document.getElementById('next').click()")
            page_s = time.perf_counter() - t0
        print(json.dumps({"pairs": sum(1 for _ in (out / "judgments.jsonl").open()) - 1,
                          "page_mb": round(page.stat().st_size / 1e6, 2), "write_s": round(write_s, 1),
                          "chromium_load_s": round(loaded.load_ms / 1000, 2), "filter_s": round(filter_s, 2),
                          "next_page_s": round(page_s, 2), "errors": loaded.errors, "requests": loaded.requests,
                          "first_page": status, "cpu": cpu_model()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
