"""The engines a benchmark times, each scoring the same token ids.

In this process, over one loaded model (`Model`), each engine a judge with fresh counters:
- `official`: the ZEPO read-out the harness ships (`model.readout=generate`: greedy generation
  of up to 32 tokens, batches of 4, P(A) read at the first generated A/B token, with C in the
  denominator where C is one token; 0.5 when no A/B token comes);
- `batched-hf`: one forward per prompt through HF's own forward on left-padded batches;
- `batched`: the same forward through the packed engine (rows back to back, no padding);
- `prefix`: the packed engine with prefix reuse, what `backend=hf` runs by default.
`batched` and `prefix` take `kernels` (backend.kernels) variants, these and `batched-hf` `batch_size` ones.

vLLM, each engine in its own spawned process (an engine started after another in the same
process ran slower, measured, not explained), prefix cache emptied before every timed round:
- `vllm-eager`: prefix caching, eager (`backend=vllm`'s CPU default);
- `vllm-compiled`: prefix caching, torch.compile at the engine's start (vLLM's own default;
  the compile is not timed);
- `vllm-no-apc`: eager, without prefix caching (what the cache buys).
"""

from __future__ import annotations

import copy
import multiprocessing
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.bench.measure import causal_pairs, rounds, summary
from harness.errors import JudgeInputError
from harness.judges.hf import HFJudge
from harness.judges.vllm import VLLMJudge
from harness.models.resolve import model_folder
from harness.records import PairRequest

HF_ENGINES = ("official", "batched-hf", "batched", "prefix")
VLLM_ENGINES = {"vllm-eager": (True, None), "vllm-compiled": (True, False), "vllm-no-apc": (False, None)}
"""name -> (enable_prefix_caching, enforce_eager; None: backend=vllm's default, eager on CPU)."""
ENGINES = (*HF_ENGINES, *VLLM_ENGINES)
KERNEL_ENGINES = ("batched", "prefix")
"""The engines that run on the packed engine, so take --kernels variants."""
BATCH_ENGINES = ("batched-hf", "batched", "prefix")
"""The engines that take --batch-sizes variants (rows per forward)."""
OFFICIAL = {"readout": "generate", "max_new_tokens": 32, "generate_batch_size": 4}
"""The official read-out's settings, as ZEPO's code runs it."""

SHAPES = {
    "llama3-8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
    ),
    "llama3-tiny": dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
    ),
}
"""Random-weight models built in place (no download): Llama-3-8B's published shape, and a tiny
one with its vocabulary and GQA layout to try the shape path on a CPU."""


@dataclass
class Model:
    """One loaded model (weights and tokenizer) the in-process engines share."""

    folder: str
    """The tokenizer's folder (and the weights', unless `shape`)."""
    judge: HFJudge
    """The plain judge the model was loaded through, in its dtype."""
    shape: str | None = None

    @property
    def dtype(self) -> str:
        return str(self.judge.torch_dtype).removeprefix("torch.")


def load(spec: str, device: str, dtype: str | None, shape: str | None = None) -> Model:
    """The model of a conf/model name or spec, in `dtype` (default: the judge's own for the
    device), or a random-weight model of `shape` with that model's tokenizer."""
    folder = model_folder(spec)
    if shape is None:
        return Model(folder, HFJudge(folder, device=device, dtype=dtype or "auto"))
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = dtype or ("float32" if device == "cpu" else "bfloat16")
    config = LlamaConfig(
        vocab_size=128256,
        max_position_embeddings=8192,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        **SHAPES[shape],
    )
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(previous)
    return Model(
        folder,
        HFJudge(
            folder, tokenizer=AutoTokenizer.from_pretrained(folder), model=model, device=device, dtype=dtype
        ),
        shape,
    )


def in_dtype(model: Model, dtype: str) -> Model:
    """The same model in another dtype: loaded again in it (a checkpoint), or, for a random-weight
    shape, the first model's weights cast (the same model, not a new draw)."""
    if model.dtype == dtype:
        return model
    if model.shape is None:
        return Model(model.folder, HFJudge(model.folder, device=model.judge.device, dtype=dtype))
    import torch

    weights = copy.deepcopy(model.judge.model).to(getattr(torch, dtype))
    return Model(
        model.folder,
        HFJudge(
            model.folder,
            model=weights,
            tokenizer=model.judge.tokenizer,
            device=model.judge.device,
            dtype=dtype,
        ),
        model.shape,
    )


def judge(model: Model, engine: str, kernels: str | None = None, batch_size: int | None = None) -> HFJudge:
    """An in-process engine over `model`'s weights, with fresh counters."""
    base = model.judge
    options: dict[str, Any] = {
        "model": base.model,
        "tokenizer": base.tokenizer,
        "device": base.device,
        "dtype": model.dtype,
        "kernels": kernels or "auto",
        "engine": "hf" if engine == "batched-hf" else "auto",
        "prefix_reuse": engine == "prefix",
    }
    if batch_size is not None:
        options["batch_size"] = batch_size
    if engine != "official":
        return HFJudge(model.folder, **options)
    try:
        return HFJudge(model.folder, labels=("A", "B", "C"), tie_label="C", **OFFICIAL, **options)
    except JudgeInputError:  # no single-token C in this vocabulary: A and B only
        return HFJudge(model.folder, **OFFICIAL, **options)


def hf_counts(j: HFJudge) -> dict[str, int]:
    """The judge's work counters so far (attention pairs as the prefix scorer counted them)."""
    pairs = j.prefix_scorer.attention_pairs if j.prefix_scorer is not None else 0
    return {"tokens": j.tokens_processed, "heads": j.prompts, "pairs": pairs}


def hf_work(j: HFJudge, before: dict[str, int], ids: list[list[int]]) -> dict[str, int]:
    """What one call did: tokens run, rows read, causal (query, key) pairs (the prefix scorer's
    count, else every prompt's own)."""
    now = hf_counts(j)
    work = {k: now[k] - before[k] for k in now}
    if not j.prefix_reuse:
        work["pairs"] = causal_pairs(ids)
    return work


# -- vLLM, in its own process --------------------------------------------------------------------
def spawned(target: Callable[..., Any], *args: Any) -> Any:
    """target(*args) in a fresh spawned process; its result, or RuntimeError with its error line."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, target, args))
    child.start()
    send.close()
    try:
        ok, value = receive.recv()
    except EOFError:
        ok, value = False, "no result"
    child.join()
    if not ok:
        raise RuntimeError(f"{value} (exit code {child.exitcode})")
    return value


def _child(send: Any, target: Callable[..., Any], args: tuple) -> None:
    try:
        send.send((True, target(*args)))
    except BaseException as e:  # the parent raises it; the traceback goes to this process's stderr
        traceback.print_exc(file=sys.stderr)
        send.send((False, f"{type(e).__name__}: {e}"))
    finally:
        send.close()


def vllm_rows(job: dict[str, Any]) -> dict[str, Any]:
    """One vLLM engine (`job["engine"]`) on each workload of `job["loads"]` ({name: (requests,
    token ids)}): warmed up, then timed `job["rounds"]` times, its prefix cache emptied before
    each round. Runs in a spawned process (`spawned`)."""
    import torch

    if job["threads"]:
        torch.set_num_threads(job["threads"])
    apc, eager = VLLM_ENGINES[job["engine"]]
    vj = VLLMJudge(
        job["folder"],
        dtype=job["dtype"],
        enable_prefix_caching=apc,
        max_model_len=job["max_len"],
        cpu_threads=job["threads"],
        enforce_eager=eager,
    )
    try:
        rows = {}
        for name, (reqs, ids) in job["loads"].items():
            if vj.encode(reqs) != ids:
                raise JudgeInputError(f"vLLM's token ids for workload {name} differ from the other engines'")
            before = {}

            def timed(reqs=reqs, before=before):
                vj.llm.reset_prefix_cache()
                before.update(prompt=vj.prompt_tokens, cached=vj.cached_tokens)
                return vj.score_pairs(reqs)

            times, scores = rounds(timed, job["rounds"], warmup=lambda reqs=reqs: vj.score_pairs(reqs[:2]))
            prompt, cached = vj.prompt_tokens - before["prompt"], vj.cached_tokens - before["cached"]
            rows[name] = {
                **summary(times),
                "p_a": [s.p_a for s in scores],
                "prefix_hit_rate": cached / prompt,
                "work": {"tokens": prompt - cached, "heads": len(reqs), "pairs": causal_pairs(ids)},
            }
        return {"rows": rows, "settings": dict(vj.engine_settings)}
    finally:
        vj.close()


def vllm_engine(
    engine: str,
    model: Model,
    loads: dict[str, list[PairRequest]],
    n_rounds: int,
    threads: int | None,
    max_len: int,
) -> dict[str, Any]:
    """`vllm_rows` for `engine` in `model`'s dtype, in a spawned process."""
    job = {
        "engine": engine,
        "folder": model.folder,
        "dtype": model.dtype,
        "rounds": n_rounds,
        "threads": threads,
        "max_len": max_len,
        "loads": {name: (reqs, model.judge.encode(reqs)) for name, reqs in loads.items()},
    }
    return spawned(vllm_rows, job)
