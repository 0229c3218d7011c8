"""python scripts/bench_profile.py [--workload 5instr] [--docs 1] [--candidates 3] [--threads 2]

Where the prefix engine's CPU time goes: torch.profiler over one timed `score_pairs` of
bench_judge's `prefix_5instr` (or `prefix_1instr`) workload, after a warm-up, in the judge's dtype
(float32 on CPU unless --dtype says otherwise). Prints the self-CPU time of every op (top
--top), then the same grouped into the issue #33 categories (matmuls, attention, elementwise,
copies, other) as a share of the total self-CPU time of the profiled region, plus the wall time.
`--json` also writes the grouped figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench_common import DATA, SMOLLM2, instructions, load_documents, workload

from harness.judges.cpu_kernels import KERNELS
from harness.judges.settings import HFSettings

CATEGORIES = {
    "matmul (aten::mm/addmm/bmm/matmul)": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    "attention (SDPA kernels)": ("aten::_scaled_dot_product_flash_attention_for_cpu",
                                 "aten::_scaled_dot_product_attention_math",
                                 "aten::_softmax", "aten::scaled_dot_product_attention",
                                 "_C::cpu_attention_with_kv_cache", "_C::get_scheduler_metadata"),
    "elementwise (norm, RoPE, SiLU, mul/add)": (
        "aten::mul", "aten::add", "aten::pow", "aten::mean", "aten::rsqrt", "aten::silu", "aten::neg",
        "aten::cat", "aten::sub", "aten::div", "aten::exp", "aten::masked_fill_", "aten::tril_",
        "aten::log_softmax", "aten::_log_softmax", "aten::sum", "aten::add_", "aten::mul_", "aten::fill_",
        "aten::zeros", "aten::ones", "_C::rms_norm", "_C::fused_add_rms_norm"),
    "copies (copy_, index, contiguous, clone)": ("aten::copy_", "aten::index", "aten::clone",
                                                 "aten::contiguous", "aten::index_select",
                                                 "aten::embedding", "aten::to", "aten::_to_copy",
                                                 "aten::cumsum", "_C::cpu_attn_reshape_and_cache"),
}


def category(op: str) -> str:
    for name, ops in CATEGORIES.items():
        if op in ops:
            return name
    return "other (views, allocation, Python-side ops)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=SMOLLM2)
    p.add_argument("--docs", type=int, default=1)
    p.add_argument("--candidates", type=int, default=3)
    p.add_argument("--workload", choices=("1instr", "5instr"), default="5instr")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--kernels", choices=KERNELS, default="auto", help="backend.kernels")
    p.add_argument("--batch-size", type=int, default=HFSettings.batch_size, help="rows per forward (default: the shipped backend.batch_size)")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from harness.judges.hf import HFJudge
    from harness.models.resolve import resolve_model_path

    if args.threads:
        torch.set_num_threads(args.threads)
    docs, _ = load_documents(args.data_dir, args.docs, args.candidates)
    instrs = instructions(args.data_dir)
    reqs = workload(docs, instrs if args.workload == "5instr" else instrs[:1])
    path, gguf = resolve_model_path(args.model)
    judge = HFJudge(path, gguf_file=gguf, device="cpu", batch_size=args.batch_size, dtype=args.dtype,
                    prefix_reuse=True, kernels=args.kernels)
    judge.score_pairs(reqs[:2])  # warm-up
    start = time.perf_counter()
    judge.score_pairs(reqs)
    plain = time.perf_counter() - start
    judge = HFJudge(path, model=judge.model, tokenizer=judge.tokenizer, device="cpu", dtype=args.dtype,
                    batch_size=args.batch_size, prefix_reuse=True, kernels=args.kernels)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        judge.score_pairs(reqs)
        wall = time.perf_counter() - start
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    print(f"prefix_{args.workload}, {len(reqs)} prompts, {args.dtype}, {torch.get_num_threads()} threads: "
          f"{plain:.2f} s unprofiled, {wall:.2f} s profiled, self-CPU total {total / 1e6:.2f} s")
    print(f"{'op':<55}{'self-CPU s':>11}{'share':>8}{'calls':>8}")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[: args.top]:
        print(f"{e.key[:54]:<55}{e.self_cpu_time_total / 1e6:>11.3f}{100 * e.self_cpu_time_total / total:>7.1f}%"
              f"{e.count:>8}")
    groups: dict[str, float] = {}
    for e in events:
        groups[category(e.key)] = groups.get(category(e.key), 0.0) + e.self_cpu_time_total
    print("by category:")
    for name, t in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<52}{t / 1e6:>8.3f} s{100 * t / total:>7.1f}%")
    if args.json:
        args.json.write_text(json.dumps({"workload": args.workload, "prompts": len(reqs), "dtype": args.dtype,
                                         "threads": torch.get_num_threads(), "seconds": plain,
                                         "profiled_seconds": wall, "self_cpu_s": total / 1e6,
                                         "categories": {k: v / 1e6 for k, v in groups.items()}}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
