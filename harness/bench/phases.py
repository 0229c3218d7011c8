"""Where a run's seconds go, by phase: `python -m harness.bench.phases [--stub] [--cycle] OUT.json RUN_ARGS...` runs
`python -m harness.run RUN_ARGS...` in this process with a timer around each phase's functions and
writes {phase: {"wall_s", "cpu_s"}} to OUT.json when the run ends (`harness-bench scale` reads it).

Times are exclusive: a phase called inside another (an import inside the report, the cache inside
the judge) is counted once, in the inner phase, and taken out of the outer one; what no phase
covers (Hydra's compose, the entry, other threads' CPU while no phase runs) is `other`. CPU
seconds are the process's (every thread) while the phase runs. Only the functions named in PHASES
are wrapped (a Python call each, nothing per line), so the run's own cost is what is timed.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import json
import math
import random
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

PHASES: dict[str, tuple[str, ...]] = {
    "imports": ("importlib._bootstrap:_find_and_load",),
    "tokenizer": ("harness.judges.weights:load_tokenizer",),
    "requests": (
        "harness.judging:build_requests",
        "harness.judging:iter_requests",
        "harness.judging:content_free_request",
    ),
    "tokenize+check": (
        "harness.judges.chat:ChatPrompts.encode",
        "harness.judges.cache:CachedJudge.check_requests",
    ),
    "cache": (
        "harness.judges.cache:request_key",
        "harness.judges.cache:ScoreCache.get_many",
        "harness.judges.cache:ScoreCache.put_many",
        "harness.judges.cache:ScoreCache.__init__",
    ),
    "judge": (
        "harness.judges.hf:HFJudge.stream_scores",
        "harness.judges.hf:HFJudge.score_pairs",
        "harness.judges.weights:load_weights",
    ),
    "metrics+intervals": ("harness.metrics.summary:analyse", "harness.metrics.card:card_intervals"),
    "plots": ("harness.metrics.card:draw",),
    "W&B": (
        "harness.runtime.tracking:Tracker.__init__",
        "harness.runtime.tracking:Tracker.log",
        "harness.runtime.tracking:Tracker.log_table",
        "harness.runtime.tracking:Tracker.log_image",
        "harness.runtime.tracking:Tracker.log_artifact",
        "harness.runtime.tracking:Tracker.update_config",
        "harness.runtime.tracking:Tracker.summary",
        "harness.runtime.tracking:Tracker.finish",
    ),
    "report": ("harness.report.page:write_report", "harness.metrics.card:render_cards"),
    "results": (
        "harness.judging:write_judgments",
        "harness.metrics.summary:write_run",
        "harness.judging:judge_work",
    ),
}
"""Phase -> the functions ("module:qualname") whose calls are its time. An outer phase's time
excludes the inner phases called within it (render_cards is the report, its drawing the plots)."""

ORDER = (*PHASES, "other")


class Clock:
    """Exclusive wall and CPU seconds per phase (a stack of the phases running)."""

    def __init__(self) -> None:
        self.wall = dict.fromkeys(ORDER, 0.0)
        self.cpu = dict.fromkeys(ORDER, 0.0)
        self.stack: list[list[Any]] = []  # [phase, wall0, cpu0, inner wall, inner cpu]
        self.start = (time.perf_counter(), time.process_time())
        self.thread = threading.get_ident()

    def enter(self, phase: str) -> bool:
        if threading.get_ident() != self.thread:  # W&B's threads import too: only the run's own calls
            return False
        self.stack.append([phase, time.perf_counter(), time.process_time(), 0.0, 0.0])
        return True

    def leave(self) -> None:
        phase, w0, c0, iw, ic = self.stack.pop()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        self.wall[phase] += w - iw
        self.cpu[phase] += c - ic
        if self.stack:
            self.stack[-1][3] += w
            self.stack[-1][4] += c

    def result(self) -> dict[str, dict[str, float]]:
        total_w = time.perf_counter() - self.start[0]
        total_c = time.process_time() - self.start[1]
        self.wall["other"] = total_w - sum(v for k, v in self.wall.items() if k != "other")
        self.cpu["other"] = total_c - sum(v for k, v in self.cpu.items() if k != "other")
        return {k: {"wall_s": round(self.wall[k], 3), "cpu_s": round(self.cpu[k], 3)} for k in ORDER}


def timed(clock: Clock, phase: str, fn: Callable) -> Callable:
    """`fn` with its calls (a generator's every step) counted to `phase`."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*a: Any, **k: Any) -> Any:
            it = fn(*a, **k)
            while True:
                mine = clock.enter(phase)
                try:
                    item = next(it)
                except StopIteration as stop:
                    return stop.value
                finally:
                    if mine:
                        clock.leave()
                yield item

        return gen

    @functools.wraps(fn)
    def call(*a: Any, **k: Any) -> Any:
        mine = clock.enter(phase)
        try:
            return fn(*a, **k)
        finally:
            if mine:
                clock.leave()

    return call


def install(clock: Clock) -> None:
    """Wrap PHASES' functions where they are defined and in every harness module already holding them."""
    swaps: dict[int, Callable] = {}
    for phase, names in PHASES.items():
        for name in names:
            module_name, _, qual = name.partition(":")
            owner: Any = importlib.import_module(module_name)
            *path, attr = qual.split(".")
            for part in path:
                owner = getattr(owner, part)
            fn = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
            if fn is None:  # not in this version of the harness (a bench of an older commit)
                continue
            wrapped = timed(clock, phase, fn)
            setattr(owner, attr, wrapped)
            swaps[id(fn)] = wrapped
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("harness.") and mod is not None:
            for key, value in list(vars(mod).items()):
                if id(value) in swaps and not isinstance(value, type):
                    setattr(mod, key, swaps[id(value)])


def stub_steps(self: Any, ids: list[list[int]], want: set[int]) -> Any:
    """`HFJudge._logprob_steps` without the model: seeded random answer log-probs, 256 rows a step."""
    rng, order = random.Random(len(ids)), sorted(want)
    n = len(self.answers.all_ids)
    for at in range(0, len(order), 256):
        yield [(i, [math.log(rng.uniform(0.01, 0.5)) for _ in range(n)]) for i in order[at : at + 256]]


def stub_judge() -> None:
    """The transformers judge with its forwards replaced by `stub_steps` (for `--modes stub`: the
    harness's whole path, tokenizing and the request cache included, at the cost of no model; the
    judge's identity is unchanged, so the cache it fills serves a cached run)."""
    importlib.import_module(
        "harness.judges.hf"
    ).HFJudge._logprob_steps = stub_steps  # after the clock started


def cycled_documents() -> None:
    """A run's task beyond its file's documents (`--cycle`, for `harness-bench scale` past SummEval's
    100 documents = 24,000 judgments): the documents again, in order, each copy's id suffixed `#r`
    and its source ending in a line naming the copy, so every prompt (and its cache key) is distinct
    and each is tokenized and judged like a document of its own."""
    context = importlib.import_module("harness.runtime.context")
    real = context.load_task

    def load(name: str, data_dir: Any = None, limit: int | None = None, **kw: Any) -> list[Any]:
        docs = real(name, data_dir=data_dir, limit=None, **kw)
        if limit is None or limit <= len(docs):
            return docs[:limit]
        out = []
        for k in range(limit):
            r, d = divmod(k, len(docs))
            doc = docs[d]
            out.append(
                doc
                if r == 0
                else dataclasses.replace(doc, id=f"{doc.id}#{r}", source=f"{doc.source}\n(copy {r})")
            )
        return out

    context.load_task = load


def main(argv: list[str]) -> int:
    flags = {a for a in argv[:2] if a in ("--stub", "--cycle")}
    out, run_args = argv[len(flags)], argv[len(flags) + 1 :]
    clock = Clock()
    install(clock)
    if "--stub" in flags:
        stub_judge()
    if "--cycle" in flags:
        cycled_documents()
    run_main = importlib.import_module("harness.runtime.entry").main  # imported under the clock: timed

    sys.argv = ["harness.run", *run_args]
    code = 0
    try:
        run_main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    result = {**clock.result(), "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
    with open(out, "w") as f:
        json.dump(result, f)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
