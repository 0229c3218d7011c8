"""The `abb` experiment on a tiny slice (the tiny Llama judge, three arena-bench-v1 questions) run in
this process, and a user's Likert scores with SCRIPTED neighbours (scores=file)."""

from __future__ import annotations

import json

import numpy as np

from helpers import SHARED_DATA
from helpers.compose import compose

# Three consecutive arena-bench-v1 questions whose prompts are short for the tiny tokenizer
# (about 1,200 tokens per pair), three concise models plus the baseline.
SLICE = [
    "experiment=abb",
    "model=tiny_llama",
    "task=arena_bench",
    "task.offset=69",
    "task.docs=3",
    "experiment.models=[llama-13b,palm-2-chat-bison-001,claude-2.1]",
    "experiment.kinds=[formatting,swap]",
    "experiment.estimate=6",
    "experiment.verify=6",
    "experiment.jitter.samples=2",
    "experiment.bootstrap=20",
    "progress=false",
]


def run_here(shared, name, *overrides):
    """An in-process run (no interpreter start-up) on the module's data and request cache."""
    from harness.runtime.entry import run

    ov = [
        *SLICE,
        *overrides,
        f"data.dir={shared / 'data'}",
        f"data.mirror={SHARED_DATA}",
        f"cache.path={shared / 'cache' / 'requests.sqlite'}",
        "wandb.mode=disabled",
    ]
    cfg = compose(ov)
    run(cfg, shared / name, overrides=ov)
    return shared / name


def likert_file(
    path, rng, n_q=12, models=("m1", "m2", "m3"), m_est=60, m_ver=40, jitter_docs=0, jitter_items=3
):
    """A user's 1-10 scores, plus Hamming-1 neighbours with a SCRIPTED bias: one item moves by +-1
    (rarely by 4); optionally jitter rows that re-judge whole questions (3 items each)."""
    base = {(f"q{q}", m): float(rng.integers(1, 11)) for q in range(n_q) for m in models}
    rows = [{"item": q, "model": m, "score": s} for (q, m), s in base.items()]
    keys = list(base)
    for split, n in (("estimate", m_est), ("verify", m_ver)):
        for j in range(n):
            q, m = keys[int(rng.integers(len(keys)))]
            step = 4.0 if rng.random() < 0.05 else 1.0
            s = float(np.clip(base[(q, m)] + step * rng.choice([-1, 1]), 1, 10))
            rows.append({"item": q, "model": m, "score": s, "neighbour": f"{split}{j}", "split": split})
    for j in range(jitter_docs):
        for m in models[:jitter_items]:
            rows.append(
                {
                    "item": f"q{j}",
                    "model": m,
                    "score": base[(f"q{j}", m)],
                    "neighbour": f"j{j}",
                    "split": "jitter",
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return base, rows
