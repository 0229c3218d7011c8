"""python scripts/bench_run.py [--model tiny:llama] [--docs 2] [--candidates 16] [--threads 1] [--dtypes]

How close do real runs come to the engine? One process, one model, real SummEval prompts, three
measurements in the same run (so the ratios hold on a loaded machine):

  (1) judge: every ordered pair of `--docs` documents x `--candidates` candidates (+ the content-free
      prompt) through the wrappers a run uses (PreemptibleJudge over CachedJudge, a fresh request
      cache): as shipped (one streamed call, a cache commit after every forward) and as before
      (`--chunk` requests per call, each call its own prefix tree), against the engine-only figure:
      the same prompts in ONE call to the bare judge. Tokens processed / the trie minimum,
      prompts/s, and the ratio to engine-only.
  (2) ZEPO epoch: `--instructions` instructions (ZEPO's four SummEval ones and ours, as bench_judge) on one document's
      pairs, judged one instruction per call (as a search did before) and all in one call
      (harness.judging.judge_instructions, as an epoch is now judged), through the same wrappers.
  (3) `--dtypes`: bf16 against fp32 on SummEval and NewsRoom (`--dtype-pairs` docs x 4 candidates):
      decisions equal, max and mean |dP(A)|, and each dtype's prompts/s.

Prints a markdown table per measurement, then one line of JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_common import SMOLLM2, dp_summary, instructions

from harness.data import load_task
from harness.judges.cache import CachedJudge, ScoreCache
from harness.judges.cpu import cpu_flags, fast_bf16
from harness.judges.hf import HFJudge
from harness.judges.prefix import trie_size
from harness.judges.wrappers import PreemptibleJudge
from harness.judging import build_requests, content_free_request, judge_instructions
from harness.models.resolve import resolve_model_path
from harness.prompts import default_instruction

DATA = Path.home() / ".cache" / "harness" / "data"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=SMOLLM2)
    p.add_argument("--docs", type=int, default=2)
    p.add_argument("--candidates", type=int, default=16)
    p.add_argument("--chunk", type=int, default=16, help="cache.chunk (the shipped 16), for the 'before' row")
    p.add_argument("--instructions", type=int, default=5)
    p.add_argument("--epoch-candidates", type=int, default=8, help="candidates of the ZEPO epoch's document")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtypes", action="store_true")
    p.add_argument("--dtype-docs", type=int, default=2)
    p.add_argument("--data-dir", type=Path, default=DATA)
    return p.parse_args(argv)


def judge_for(args, dtype: str = "float32", base: HFJudge | None = None) -> HFJudge:
    path, gguf = resolve_model_path(args.model, None)
    if base is not None:
        return HFJudge(path, dtype=dtype, device="cpu", prefix_reuse=True, threads=args.threads, model=base.model,
                       tokenizer=base.tokenizer)
    return HFJudge(path, gguf_file=gguf, dtype=dtype, device="cpu", prefix_reuse=True, threads=args.threads)


def wrapped(judge: HFJudge, chunk: int, tmp: Path, name: str) -> PreemptibleJudge:
    return PreemptibleJudge(CachedJudge(judge, ScoreCache(tmp / f"{name}.sqlite"), chunk=chunk), chunk)


def timed(judge: HFJudge, fn) -> dict:
    t0, tok0, s0 = time.perf_counter(), judge.tokens_processed, judge.seconds
    out = fn()
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "tokens": judge.tokens_processed - tok0, "judge_s": judge.seconds - s0, "out": out}


def bench_judge(args, base: HFJudge, tmp: Path) -> dict:
    docs = load_task("summeval", data_dir=args.data_dir, limit=args.docs)
    ins = default_instruction("coherence", "summarization")
    reqs = build_requests(docs, ins, "summarization", "coherence", args.candidates)[0]
    reqs.append(content_free_request(ins, "summarization"))
    trie = trie_size(base.encode(reqs))
    rows = {}
    engine = judge_for(args, base=base)
    rows["engine only (one call)"] = timed(engine, lambda: engine.score_pairs(reqs))
    shipped = judge_for(args, base=base)
    rows["run: shipped (one streamed call)"] = timed(
        shipped, lambda: wrapped(shipped, args.chunk, tmp, "shipped").score_pairs(reqs))
    before = judge_for(args, base=base)
    w = wrapped(before, args.chunk, tmp, "before")
    rows[f"run: before ({args.chunk} requests per call)"] = timed(
        before, lambda: [s for i in range(0, len(reqs), args.chunk) for s in w.score_pairs(reqs[i : i + args.chunk])])
    ref = rows["engine only (one call)"]
    out = {}
    for name, r in rows.items():
        out[name] = {"prompts": len(reqs), "tokens": r["tokens"], "x_trie": r["tokens"] / trie,
                     "prompts_per_s": len(reqs) / r["wall_s"], "x_engine": ref["wall_s"] / r["wall_s"],
                     "max_dp": max(abs(a.p_a - b.p_a) for a, b in zip(r["out"], ref["out"]))}
    return {"trie_minimum": trie, "rows": out}


def bench_epoch(args, base: HFJudge, tmp: Path) -> dict:
    docs = load_task("summeval", data_dir=args.data_dir, limit=1)
    texts = instructions(args.data_dir)[: args.instructions]
    out, scores = {}, {}
    for mode in ("one call per instruction", "one call per epoch"):
        j = judge_for(args, base=base)
        w = wrapped(j, args.chunk, tmp, mode.replace(" ", "_"))
        jobs = [(docs, t) for t in texts]
        if mode.endswith("instruction"):
            fn = lambda w=w: [judge_instructions(w, [job], aspect="coherence", family="summarization",
                                                 max_candidates=args.epoch_candidates, progress=False)[0]
                              for job in jobs]
        else:
            fn = lambda w=w: judge_instructions(w, jobs, aspect="coherence", family="summarization",
                                                max_candidates=args.epoch_candidates, progress=False)
        r = timed(j, fn)
        n = sum(len(js) + 1 for js, _ in r["out"])
        scores[mode] = [x.p_a for js, _ in r["out"] for x in js]
        out[mode] = {"prompts": n, "tokens": r["tokens"], "prompts_per_s": n / r["wall_s"], "wall_s": r["wall_s"]}
    a, b = scores.values()
    out["speed-up"] = out["one call per epoch"]["prompts_per_s"] / out["one call per instruction"]["prompts_per_s"]
    out["max_dp"] = max(abs(x - y) for x, y in zip(a, b))
    out["decisions_equal"] = sum((x > 0.5) == (y > 0.5) for x, y in zip(a, b)), len(a)
    return out


def bench_dtypes(args, base: HFJudge) -> dict:
    out = {}
    for task, aspect in (("summeval", "coherence"), ("newsroom", "relevance")):
        docs = load_task(task, data_dir=args.data_dir, limit=args.dtype_docs)
        reqs = build_requests(docs, default_instruction(aspect, "summarization"), "summarization", aspect, 4)[0]
        got = {}
        for dtype in ("float32", "bfloat16"):
            j = base if dtype == "float32" else judge_for(args, dtype="bfloat16")
            got[dtype] = timed(j, lambda j=j: j.score_pairs(reqs))
        s = dp_summary(*([x.p_a for x in got[d]["out"]] for d in ("float32", "bfloat16")))
        out[task] = {"pairs": len(reqs), "decisions_equal": s["agree"][0], "max_dp": s["max_abs_dp"],
                     "mean_dp": s["mean_abs_dp"], **{f"{d}_prompts_per_s": len(reqs) / got[d]["wall_s"] for d in got}}
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    flags = cpu_flags(Path("/proc/cpuinfo").read_text()) if Path("/proc/cpuinfo").is_file() else frozenset()
    base = judge_for(args)
    result = {"model": args.model, "threads": args.threads, "cpu_fast_bf16": fast_bf16(flags)}
    with tempfile.TemporaryDirectory() as tmp:
        result["judge"] = bench_judge(args, base, Path(tmp))
        print(f"\n(1) judge, trie minimum {result['judge']['trie_minimum']} tokens\n")
        print("| how | prompts | tokens | x trie min | prompts/s | x engine-only | max abs dP(A) vs engine |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, r in result["judge"]["rows"].items():
            print(f"| {name} | {r['prompts']} | {r['tokens']} | {r['x_trie']:.3f} | {r['prompts_per_s']:.1f} | "
                  f"{r['x_engine']:.2f} | {r['max_dp']:.1e} |")
        result["epoch"] = e = bench_epoch(args, base, Path(tmp))
        print(f"\n(2) one ZEPO epoch of {args.instructions} instructions\n")
        print("| how | prompts | tokens | prompts/s |\n|---|---:|---:|---:|")
        for mode in ("one call per instruction", "one call per epoch"):
            print(f"| {mode} | {e[mode]['prompts']} | {e[mode]['tokens']} | {e[mode]['prompts_per_s']:.1f} |")
        print(f"\nspeed-up {e['speed-up']:.2f}x, decisions equal {e['decisions_equal']}, max |dP(A)| {e['max_dp']:.1e}")
    if args.dtypes:
        result["dtypes"] = d = bench_dtypes(args, base)
        print("\n(3) bf16 vs fp32\n\n| task | pairs | decisions equal | max abs dP(A) | mean abs dP(A) | fp32 prompts/s "
              "| bf16 prompts/s |\n|---|---:|---:|---:|---:|---:|---:|")
        for task, r in d.items():
            print(f"| {task} | {r['pairs']} | {r['decisions_equal']} | {r['max_dp']:.4f} | {r['mean_dp']:.4f} | "
                  f"{r['float32_prompts_per_s']:.1f} | {r['bfloat16_prompts_per_s']:.1f} |")
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
