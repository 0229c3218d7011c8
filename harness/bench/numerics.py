"""harness-bench numerics: what bfloat16 changes against float32, on the same prompts.

For each task (SummEval and NewsRoom by default: coherence, our default instruction, the first
documents' ordered pairs of their first 4 candidates, `--pairs` of them), three transformers
judges as `backend=hf` ships them (prefix reuse) score the same prompts:
- `float32`: `backend.dtype=float32` (the CPU default), the reference;
- `bfloat16, bf16 head`: a bf16 model whose LM head writes bf16 logits (the read-out before
  harness.judges.head; `FloatHead.upcast = False` puts it back);
- `bfloat16`: `backend.dtype=bfloat16` as shipped (final norm and head in float32).
Each bf16 row: decisions equal to float32's, max and mean |dP(A)|, the distinct P(A)s, the
"logit step" (the coarsest 2^-k all A-minus-B logit differences sit on within 1e-4; bf16 logits
of magnitude >= 1 sit on 2^-7 or coarser, float32 ones on none), the P(A) step it means at 0.5
(a quarter of the logit step), the share of pairs on the 2^-7 lattice, and prompts/s.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from harness.bench import engines as eng
from harness.bench.compare import agree
from harness.bench.measure import machine, rounds, summary
from harness.bench.report import add_common, choices_list, emit, num, positive, table
from harness.bench.workloads import data_dir
from harness.data import TASKS, load_task
from harness.judges.head import BF16_LATTICE, LATTICE_TOL, lattice_step, logit_difference, on_lattice
from harness.judging import build_requests
from harness.prompts import default_instruction

HELP = "bfloat16 against float32: decisions, |dP(A)|, the bf16 logit lattice, prompts/s"
JUDGES = ("bfloat16, bf16 head", "bfloat16")


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_common(p, rounds=1)
    p.add_argument("--pairs", type=positive, default=24, help="ordered pairs per task (default 24)")
    p.add_argument("--tasks", type=choices_list(sorted(TASKS)), default=["summeval", "newsroom"])
    p.add_argument("--threads", type=positive, default=None, help="torch threads (default: torch's)")


def pairs(args: argparse.Namespace, task: str) -> list:
    docs = load_task(task, data_dir=data_dir(args.data_dir, task), limit=8)
    reqs, _ = build_requests(
        docs,
        default_instruction("coherence", "summarization"),
        "summarization",
        "coherence",
        max_candidates=4,
    )
    return reqs[: args.pairs]


def judges(args: argparse.Namespace) -> dict[str, Any]:
    """The three judges, the two bf16 ones over one bf16 model (so they differ only in the head)."""
    fp32, bf16 = eng.load(args.model, "cpu", "float32"), eng.load(args.model, "cpu", "bfloat16")
    old = eng.judge(bf16, "prefix")
    old.float_head.upcast = False
    return {"float32": eng.judge(fp32, "prefix"), JUDGES[0]: old, JUDGES[1]: eng.judge(bf16, "prefix")}


def row(task: str, name: str, times: list[float], scores: list, ref: list) -> dict[str, Any]:
    diffs = [logit_difference(s.token_logprobs) for s in scores]
    step = lattice_step(diffs)
    return {
        "task": task,
        "judge": name,
        "pairs": len(scores),
        **summary(times),
        "prompts_per_s": len(scores) / summary(times)["median_s"],
        "distinct_p_a": len({round(s.p_a, 9) for s in scores}),
        "logit_step": step,
        "p_a_step_at_half": None if step is None else step / 4,
        "share_on_bf16_lattice": sum(on_lattice(d, BF16_LATTICE) for d in diffs) / len(diffs),
        **agree([r.p_a for r in ref], [s.p_a for s in scores]),
    }


def main(args: argparse.Namespace) -> int:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    found = judges(args)
    rows = []
    for task in args.tasks:
        reqs = pairs(args, task)
        got = {
            name: rounds(
                lambda j=j, reqs=reqs: j.score_pairs(reqs),
                args.rounds,
                warmup=lambda j=j, reqs=reqs: j.score_pairs(reqs[:2]),
            )
            for name, j in found.items()
        }
        rows += [row(task, name, times, scores, got["float32"][1]) for name, (times, scores) in got.items()]
    out = {
        "command": "numerics",
        "model": args.model,
        "threads": torch.get_num_threads(),
        "rounds": args.rounds,
        "machine": machine(),
        "rows": rows,
    }
    print(
        table(
            [
                ("task", lambda r: r["task"]),
                ("judge", lambda r: r["judge"]),
                ("pairs", lambda r: str(r["pairs"])),
                ("decisions", lambda r: "{}/{}".format(*r["agree"])),
                ("max|dP(A)|", lambda r: num(r["max_abs_dp"], ".4f")),
                ("mean|dP(A)|", lambda r: num(r["mean_abs_dp"], ".4f")),
                ("distinct", lambda r: str(r["distinct_p_a"])),
                ("logit step", lambda r: _power(r["logit_step"])),
                ("P(A) step", lambda r: num(r["p_a_step_at_half"], ".4f")),
                ("on 2^-7", lambda r: f"{r['share_on_bf16_lattice']:.0%}"),
                ("prompts/s", lambda r: num(r["prompts_per_s"], ".2f")),
            ],
            rows,
        )
    )
    m = out["machine"]
    print(
        f"(decisions and |dP(A)| against float32 on the same prompts; logit step: the coarsest 2^-k the A-B "
        f"logit differences sit on within {LATTICE_TOL:g}, -: none coarser than 2^-10)"
    )
    print(f"{m['date']}, commit {m['commit']}, {m['cpu']}, nproc {m['nproc']}, load {m['load_1min']:.1f}")
    emit(out, args.json)
    return 0


def _power(step: float | None) -> str:
    return "-" if step is None else f"2^{int(round(math.log2(step)))}"
