"""harness-bench profile: where an engine's CPU time goes.

torch.profiler over one `score_pairs` of a speed workload (default: the prefix engine on
`5instr`), after a warm-up and `--rounds` unprofiled timed rounds (their median is printed beside
the profiled time). Prints the self-CPU time of the top ops, then the same grouped into
categories (matmuls, attention, elementwise, copies, other) as shares of the profiled total.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from harness.bench import engines as eng
from harness.bench.measure import rounds, summary
from harness.bench.report import add_common, emit, positive, table
from harness.bench.workloads import WORKLOADS, workloads
from harness.judges.cpu_kernels import KERNELS

HELP = "where an engine's CPU time goes: torch.profiler by op category"
CATEGORIES = {
    "matmul (aten::mm/addmm/bmm/matmul)": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    "attention (SDPA kernels)": (
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_attention_math",
        "aten::_softmax",
        "aten::scaled_dot_product_attention",
        "_C::cpu_attention_with_kv_cache",
        "_C::get_scheduler_metadata",
    ),
    "elementwise (norm, RoPE, SiLU, mul/add)": (
        "aten::mul",
        "aten::add",
        "aten::pow",
        "aten::mean",
        "aten::rsqrt",
        "aten::silu",
        "aten::neg",
        "aten::cat",
        "aten::sub",
        "aten::div",
        "aten::exp",
        "aten::masked_fill_",
        "aten::tril_",
        "aten::log_softmax",
        "aten::_log_softmax",
        "aten::sum",
        "aten::add_",
        "aten::mul_",
        "aten::fill_",
        "aten::zeros",
        "aten::ones",
        "_C::rms_norm",
        "_C::fused_add_rms_norm",
    ),
    "copies (copy_, index, contiguous, clone)": (
        "aten::copy_",
        "aten::index",
        "aten::clone",
        "aten::contiguous",
        "aten::index_select",
        "aten::embedding",
        "aten::to",
        "aten::_to_copy",
        "aten::cumsum",
        "_C::cpu_attn_reshape_and_cache",
    ),
}
OTHER = "other (views, allocation, Python-side ops)"


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_common(p, rounds=1)
    p.add_argument("--engine", choices=[e for e in eng.HF_ENGINES if e != "official"], default="prefix")
    p.add_argument("--workload", choices=list(WORKLOADS), default="5instr")
    p.add_argument("--docs", type=positive, default=1, help="SummEval documents (default 1)")
    p.add_argument("--candidates", type=positive, default=3, help="candidates per document (default 3)")
    p.add_argument("--threads", type=positive, default=None, help="torch threads (default: torch's)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 (default: the judge's own)")
    p.add_argument("--kernels", choices=KERNELS, default="auto", help="backend.kernels")
    p.add_argument(
        "--batch-size", type=positive, default=None, help="backend.batch_size (default: the shipped one)"
    )
    p.add_argument("--top", type=positive, default=15, help="ops listed (default 15)")


def category(op: str) -> str:
    return next((name for name, ops in CATEGORIES.items() if op in ops), OTHER)


def main(args: argparse.Namespace) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    if args.threads:
        torch.set_num_threads(args.threads)
    reqs = workloads(args.data_dir, args.docs, args.candidates, [args.workload])[args.workload]
    model = eng.load(args.model, "cpu", args.dtype)
    judge = eng.judge(model, args.engine, args.kernels, args.batch_size)
    times, _ = rounds(
        lambda: judge.score_pairs(reqs), args.rounds, warmup=lambda: judge.score_pairs(reqs[:2])
    )
    judge = eng.judge(model, args.engine, args.kernels, args.batch_size)  # fresh: the call plans its own tree
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        judge.score_pairs(reqs)
        wall = time.perf_counter() - start
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    groups: dict[str, float] = {}
    for e in events:
        groups[category(e.key)] = groups.get(category(e.key), 0.0) + e.self_cpu_time_total / 1e6
    out: dict[str, Any] = {
        "command": "profile",
        "engine": args.engine,
        "workload": args.workload,
        "prompts": len(reqs),
        "dtype": model.dtype,
        "kernels": judge.numerics["kernels"],
        "threads": torch.get_num_threads(),
        **summary(times),
        "profiled_s": wall,
        "self_cpu_s": total,
        "categories": groups,
    }
    print(
        f"{args.engine} {args.workload}, {len(reqs)} prompts, {model.dtype}, {out['threads']} threads, "
        f"{out['kernels']}: {out['median_s']:.2f} s unprofiled (median of {args.rounds}), {wall:.2f} s profiled, "
        f"self-CPU total {total:.2f} s"
    )
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[: args.top]
    print(
        table(
            [
                ("op", lambda e: e.key[:54]),
                ("self-CPU s", lambda e: f"{e.self_cpu_time_total / 1e6:.3f}"),
                ("share", lambda e: f"{100 * e.self_cpu_time_total / 1e6 / total:.1f}%"),
                ("calls", lambda e: str(e.count)),
            ],
            top,
        )
    )
    print("by category:")
    ranked = sorted(groups.items(), key=lambda kv: -kv[1])
    print(
        table(
            [
                ("category", lambda kv: kv[0]),
                ("self-CPU s", lambda kv: f"{kv[1]:.3f}"),
                ("share", lambda kv: f"{100 * kv[1] / total:.1f}%"),
            ],
            ranked,
        )
    )
    emit(out, args.json)
    return 0
