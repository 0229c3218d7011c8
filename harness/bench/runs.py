"""harness-bench run: how close a run's judging path comes to the bare engine, in one process.

(1) A judge run's requests (SummEval pairs + the content-free prompt, `experiment=judge`'s) through
    the wrappers a run uses (PreemptibleJudge over CachedJudge, a fresh request cache each round):
    as shipped (one streamed call, a cache commit after every forward) and in `--chunk` requests
    per call (each call its own prefix tree), against the same prompts in ONE call to the bare
    judge: tokens run over the trie's least, prompts/s, and the ratio to the bare call.
(2) One ZEPO epoch: `--instructions` instructions (ZEPO's SummEval ones, then ours) on one
    document's pairs, judged one instruction per call and all in one call
    (harness.judging.judge_instructions, as an epoch is judged).
Each row is timed `--rounds` times after one warm-up of the judge; medians.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path
from typing import Any

from harness.bench import engines as eng
from harness.bench.compare import agree
from harness.bench.measure import machine, now, summary
from harness.bench.report import add_common, emit, num, positive, table
from harness.bench.workloads import epoch_jobs, run_requests
from harness.judges.cache import CachedJudge, ScoreCache
from harness.judges.prefix import trie_work
from harness.judges.settings import CacheSettings
from harness.judges.wrappers import PreemptibleJudge
from harness.judging import judge_instructions

HELP = "a run's judging path (request cache, streaming, a ZEPO epoch) against the bare engine"
BARE = "engine only (one call)"


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_common(p, rounds=1)
    p.add_argument("--docs", type=positive, default=2, help="SummEval documents of the judge run (default 2)")
    p.add_argument("--candidates", type=positive, default=16, help="candidates per document (default 16)")
    p.add_argument(
        "--chunk",
        type=positive,
        default=CacheSettings.chunk,
        help=f"requests per call of the chunked row (default {CacheSettings.chunk}: cache.chunk)",
    )
    p.add_argument(
        "--instructions", type=positive, default=5, help="instructions of the ZEPO epoch (default 5)"
    )
    p.add_argument("--epoch-candidates", type=positive, default=8, help="candidates of the epoch's document")
    p.add_argument("--threads", type=positive, default=1, help="torch threads (default 1)")


def wrapped(judge: Any, chunk: int, cache: Path) -> PreemptibleJudge:
    """The judge as a run wraps it: preemption-safe steps over a request cache at `cache`."""
    return PreemptibleJudge(CachedJudge(judge, ScoreCache(cache), chunk=chunk), chunk)


def timed(model: eng.Model, rounds: int, folder: Path, call) -> dict[str, Any]:
    """`call(judge, cache path)` on a fresh prefix judge and cache each round: times, tokens, output."""
    times, out, tokens = [], None, 0
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(rounds):
        judge = eng.judge(model, "prefix")
        start = now()
        out = call(judge, folder / f"requests-{k}.sqlite")
        times.append(now() - start)
        tokens = judge.tokens_processed
    return {**summary(times), "tokens": tokens, "out": out}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def judge_rows(args: argparse.Namespace, model: eng.Model, tmp: Path) -> dict[str, Any]:
    reqs = run_requests(args.data_dir, args.docs, args.candidates)
    least = trie_work(model.judge.encode(reqs))["tokens"]
    chunk = args.chunk

    def chunked(j, cache):
        w = wrapped(j, chunk, cache)
        return [s for i in range(0, len(reqs), chunk) for s in w.score_pairs(reqs[i : i + chunk])]

    calls = {
        BARE: lambda j, cache: j.score_pairs(reqs),
        "run: as shipped (one streamed call)": lambda j, cache: wrapped(j, chunk, cache).score_pairs(reqs),
        f"run: {chunk} requests per call": chunked,
    }
    got = {name: timed(model, args.rounds, tmp / _slug(name), call) for name, call in calls.items()}
    bare = got[BARE]
    rows = {
        name: {
            "prompts": len(reqs),
            "tokens": r["tokens"],
            "x_trie": r["tokens"] / least,
            "median_s": r["median_s"],
            "rounds_s": r["rounds_s"],
            "prompts_per_s": len(reqs) / r["median_s"],
            "x_engine": bare["median_s"] / r["median_s"],
            **agree([s.p_a for s in bare["out"]], [s.p_a for s in r["out"]]),
        }
        for name, r in got.items()
    }
    return {"trie_minimum": least, "rows": rows}


def epoch_rows(args: argparse.Namespace, model: eng.Model, tmp: Path) -> dict[str, Any]:
    jobs = epoch_jobs(args.data_dir, args.instructions)
    kw = {
        "aspect": "coherence",
        "family": "summarization",
        "max_candidates": args.epoch_candidates,
        "progress": False,
    }
    calls = {
        "one call per instruction": lambda j, cache: [
            judge_instructions(wrapped(j, args.chunk, cache), [job], **kw)[0] for job in jobs
        ],
        "one call per epoch": lambda j, cache: judge_instructions(wrapped(j, args.chunk, cache), jobs, **kw),
    }
    got = {name: timed(model, args.rounds, tmp / _slug(name), call) for name, call in calls.items()}
    p_a = {name: [x.p_a for js, _ in r["out"] for x in js] for name, r in got.items()}
    n = sum(len(js) + 1 for js, _ in got["one call per epoch"]["out"])
    rows = {
        name: {
            "prompts": n,
            "tokens": r["tokens"],
            "median_s": r["median_s"],
            "rounds_s": r["rounds_s"],
            "prompts_per_s": n / r["median_s"],
        }
        for name, r in got.items()
    }
    per_instruction, per_epoch = (rows[k]["prompts_per_s"] for k in calls)
    return {"rows": rows, "speedup": per_epoch / per_instruction, **agree(*p_a.values())}


def main(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    model = eng.load(args.model, "cpu", None)
    eng.judge(model, "prefix").score_pairs(run_requests(args.data_dir, 1, 2))  # warm-up
    with tempfile.TemporaryDirectory() as tmp:
        out = {
            "command": "run",
            "model": args.model,
            "threads": args.threads,
            "rounds": args.rounds,
            "dtype": model.dtype,
            "machine": machine(),
            "judge": judge_rows(args, model, Path(tmp)),
            "epoch": epoch_rows(args, model, Path(tmp)),
        }
    j, e = out["judge"], out["epoch"]
    print(f"(1) a judge run's requests, trie minimum {j['trie_minimum']} tokens; median of {args.rounds}")
    print(
        table(
            [
                ("how", lambda kv: kv[0]),
                ("prompts", lambda kv: str(kv[1]["prompts"])),
                ("tokens", lambda kv: str(kv[1]["tokens"])),
                ("x trie", lambda kv: f"{kv[1]['x_trie']:.3f}"),
                ("prompts/s", lambda kv: f"{kv[1]['prompts_per_s']:.2f}"),
                ("x engine", lambda kv: f"{kv[1]['x_engine']:.2f}"),
                ("max|dP(A)| vs engine", lambda kv: num(kv[1]["max_abs_dp"], ".1e")),
            ],
            list(j["rows"].items()),
        )
    )
    print(f"(2) one ZEPO epoch of {args.instructions} instructions")
    print(
        table(
            [
                ("how", lambda kv: kv[0]),
                ("prompts", lambda kv: str(kv[1]["prompts"])),
                ("tokens", lambda kv: str(kv[1]["tokens"])),
                ("prompts/s", lambda kv: f"{kv[1]['prompts_per_s']:.2f}"),
            ],
            list(e["rows"].items()),
        )
    )
    print(
        f"one call per epoch: {e['speedup']:.2f}x the prompts/s, decisions {e['agree'][0]}/{e['agree'][1]} equal, "
        f"max |dP(A)| {e['max_abs_dp']:.1e}"
    )
    emit(out, args.json)
    return 0
