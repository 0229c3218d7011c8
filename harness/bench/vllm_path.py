"""harness-bench vllm-path: the path users run with backend=vllm against vLLM alone.

Each round runs the shipped `experiment=judge backend=vllm` config (Hydra's compose, then the CLI's
own `harness.runtime.entry.run`: config checks, request cache, preemption wrapper, progress bar,
results.json) with a fresh request cache, and reads its judging time (results.json
`judge_work.judging_s`: tokenizing, the cache, the engine, the progress bar). Then vLLM alone: ONE
`LLM.generate` call on the very token ids, in the very order, with the very sampling parameters the
harness handed the engine (recorded as it added them), on the same engine (so the same engine
settings) and the same torch threads. The prefix cache is emptied before each. The engine starts
before the first round: neither side pays for it. It needs the run's own config (Hydra), so
`harness-bench` offers it where Hydra is installed (not on the bare machine `harness-bench gpu` needs).

`EngineWatch` counts from outside the judge, on vLLM's LLMEngine class: the requests added and the
most unfinished at once (read before each step). Printed: each round, then the median ratio
harness / vLLM alone (prompts/s; 1.0 = no overhead on the harness's side), then ONE JSON line with
the machine (lscpu's model, load, date, commit) and the command. The same command runs on a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from harness.bench.measure import machine
from harness.bench.report import add_common, emit, positive
from harness.confdir import conf_dir
from harness.errors import ConfigError
from harness.judges.cpu import torch_threads
from harness.runtime import schema
from harness.runtime.context import build_judge
from harness.runtime.entry import check, one_line, run

HELP = "the harness's backend=vllm judging against one LLM.generate call on the same token ids"


class EngineWatch:
    """What vLLM's LLMEngine sees while the block runs, whoever drives it (the judge, LLM.generate):
    `added` (each request's prompt token ids, in order), `steps`, and `most_in_flight` (the most
    unfinished requests before a step)."""

    def __init__(self) -> None:
        self.added: list[list[int]] = []
        self.steps = 0
        self.most_in_flight = 0

    @contextlib.contextmanager
    def watching(self) -> Iterator[EngineWatch]:
        from vllm.v1.engine.llm_engine import LLMEngine

        add, step = LLMEngine.add_request, LLMEngine.step
        watch = self

        def add_request(engine: Any, request_id: str, prompt: Any, *args: Any, **kwargs: Any) -> Any:
            ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else None
            watch.added.append(list(ids) if ids is not None else [])
            return add(engine, request_id, prompt, *args, **kwargs)

        def counted_step(engine: Any) -> Any:
            watch.steps += 1
            watch.most_in_flight = max(watch.most_in_flight, engine.get_num_unfinished_requests())
            return step(engine)

        LLMEngine.add_request, LLMEngine.step = add_request, counted_step  # type: ignore[method-assign]
        try:
            yield self
        finally:
            LLMEngine.add_request, LLMEngine.step = add, step  # type: ignore[method-assign]


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_common(p, rounds=3)
    p.add_argument("--task", default="summeval", help="conf/task name (default summeval)")
    p.add_argument("--docs", type=positive, default=2, help="documents judged (task.docs; default 2)")
    p.add_argument(
        "--candidates",
        type=positive,
        default=8,
        help="candidates per document (task.max_candidates; default 8)",
    )
    p.add_argument(
        "--warmup", type=int, default=1, help="untimed rounds first (the engine's first shapes; default 1)"
    )
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another config override (repeatable), e.g. backend.engine_args.max_num_seqs=64",
    )


def compose(overrides: Sequence[str]) -> Any:
    """The shipped conf/ composed with `overrides`, as `python -m harness.run` composes it; a
    refused override is one ConfigError line."""
    schema.register()
    try:
        with initialize_config_dir(str(conf_dir()), version_base="1.3"):
            return hydra_compose("config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(one_line(e, overrides)) from None


def harness_round(cfg: Any, out: Path) -> tuple[float, int, EngineWatch]:
    """One `experiment=judge` run into `out`: (judging seconds, requests judged, what the engine saw)."""
    with EngineWatch().watching() as watch:
        run(cfg, out)
    results = json.loads((out / "results.json").read_text())
    return float(results["judge_work"]["judging_s"]), int(results["judge_calls"]), watch


def vllm_round(judge: Any, prompts: list[list[int]]) -> tuple[float, EngineWatch]:
    """One LLM.generate call on `prompts` (token ids) with the judge's engine, parameters and threads."""
    llm = judge.llm
    llm.reset_prefix_cache()
    with EngineWatch().watching() as watch, torch_threads(judge.threads):
        start = time.perf_counter()
        outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompts], judge.params, use_tqdm=False)
        seconds = time.perf_counter() - start
    if len(outputs) != len(prompts) or not all(o.finished for o in outputs):
        raise RuntimeError(
            f"LLM.generate returned {len(outputs)} finished outputs for {len(prompts)} prompts"
        )
    return seconds, watch


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every round of both sides (module docstring) and their summary."""
    common = [
        "experiment=judge",
        f"model={args.model}",
        "backend=vllm",
        f"task={args.task}",
        f"task.docs={args.docs}",
        f"task.max_candidates={args.candidates}",
        "wandb.mode=disabled",
        *([f"data.dir={args.data_dir}"] if args.data_dir is not None else []),
        *args.override,
    ]
    cfg = compose(common)
    check(cfg)  # as a run checks it, before the engine starts
    judge = build_judge(cfg.model, cfg.backend)  # the run's own judge: one per process (runtime.context)
    judge.llm  # noqa: B018 (the engine starts here, outside every timed round)
    rows: dict[str, list[Any]] = {
        "harness_s": [],
        "vllm_s": [],
        "requests": [],
        "harness_in_flight": [],
        "vllm_in_flight": [],
    }
    for k in range(args.warmup + args.rounds):
        cfg = compose([*common, f"cache.path={work / f'cache-{k}.sqlite'}"])
        judge.llm.reset_prefix_cache()
        judge.forget_ids()  # each round tokenizes its prompts, as a fresh run's process does
        seconds, n, seen = harness_round(cfg, work / f"run-{k}")
        if len(seen.added) != n:
            raise RuntimeError(f"the harness judged {n} requests but the engine was given {len(seen.added)}")
        alone, bare = vllm_round(judge, seen.added)
        name = (
            f"warm-up {k + 1}/{args.warmup}"
            if k < args.warmup
            else f"round {k + 1 - args.warmup}/{args.rounds}"
        )
        print(
            f"{name}: {n} requests; harness {seconds:.2f} s ({n / seconds:.2f} prompts/s, "
            f"{seen.most_in_flight} in flight at most), vLLM alone {alone:.2f} s ({n / alone:.2f} prompts/s, "
            f"{bare.most_in_flight} in flight)",
            flush=True,
        )
        if k < args.warmup:
            continue
        rows["harness_s"].append(seconds)
        rows["vllm_s"].append(alone)
        rows["requests"].append(n)
        rows["harness_in_flight"].append(seen.most_in_flight)
        rows["vllm_in_flight"].append(bare.most_in_flight)
    ratios = [v / h for h, v in zip(rows["harness_s"], rows["vllm_s"])]
    return {
        **rows,
        "ratios": ratios,
        "ratio": statistics.median(ratios),
        "threads": judge.threads,
        "engine": judge.engine_settings,
        "identity": judge.identity,
    }


def main(args: argparse.Namespace) -> int:
    command = "harness-bench " + shlex.join(getattr(args, "argv", None) or ["vllm-path"])
    with tempfile.TemporaryDirectory(prefix="vllm-path-") as tmp:
        result = {
            "command": command,
            "bench": "vllm-path",
            "model": args.model,
            "task": args.task,
            "docs": args.docs,
            "candidates": args.candidates,
            "rounds": args.rounds,
            "overrides": list(args.override),
            **measure(args, Path(tmp)),
        }
    result["machine"] = machine()
    print(
        f"harness / vLLM alone: {result['ratio']:.3f}x (median of {args.rounds} rounds; prompts/s, "
        f"{result['requests'][0]} requests, in flight at most {max(result['harness_in_flight'])} in the harness's "
        f"run and {max(result['vllm_in_flight'])} in LLM.generate; {result['machine']['cpu']}, "
        f"{result['machine']['date']})",
        flush=True,
    )
    emit(result, args.json)
    return 0
