"""How the benchmarks time and what they time against.

- `rounds`: a warm-up call, then `n` timed calls; `summary` gives their median, best and all.
- The GEMM rate: the best FLOP/s torch's matmul reaches here in a dtype, on large square
  matrices (`matmul_peak`) or at the model's own linear shapes (`linear_peak`), whichever is
  faster (`gemm_rate`). Measured in the run, so it is this machine at that moment, not a
  hardware bound.
- The roofline floor: `floor_flops`, the FLOPs no exact engine can skip on a workload (given its
  prompt trie's least work, harness.judges.prefix.trie_work), over the GEMM rate.
- `machine`: what a result was measured on (CPU model, cores, load, date, commit, torch).
"""

from __future__ import annotations

import datetime
import functools
import os
import platform
import resource
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LINEAR_ROWS = (1024, 2048, 4096)
"""Rows of `linear_peak`'s matmuls: the engine's forwards hold up to max_batch_tokens (4096)."""


def now(device: str = "cpu") -> float:
    """perf_counter, after the device has finished what it was given."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    return time.perf_counter()


def rounds(
    fn: Callable[[], Any], n: int, warmup: Callable[[], Any] | None = None, device: str = "cpu"
) -> tuple[list[float], Any]:
    """(seconds of each of `n` timed calls of fn, the last call's result), after `warmup` once."""
    if warmup is not None:
        warmup()
    times, out = [], None
    for _ in range(n):
        start = now(device)
        out = fn()
        times.append(now(device) - start)
    return times, out


def summary(times: list[float]) -> dict[str, Any]:
    """The median of the timed rounds (the figure reported), the best, and every round."""
    return {"median_s": statistics.median(times), "best_s": min(times), "rounds_s": list(times)}


# -- the GEMM rate -------------------------------------------------------------------------------
def matmul_peak(device: str, dtype: Any, n: int | None = None, reps: int | None = None) -> float:
    """Best FLOP/s of square n x n matmuls (default 2048 on CPU, 8192 on CUDA) in the faster of the
    layouts `a @ b` and `a @ b.T` (nn.Linear's; `_transposed_faster`), after one warm-up. On CPU
    the timed repetitions stop once they took 3 s (two at least)."""
    import torch

    cuda = device.startswith("cuda")
    n = n or (8192 if cuda else 2048)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    if _transposed_faster(device, dtype):
        b = b.t()
    inner = 10 if cuda else 1
    best, spent = float("inf"), 0.0
    for rep in range(reps or (8 if cuda else 4)):
        start = now(device)
        for _ in range(inner):
            a @ b
        took = (now(device) - start) / inner
        if rep:  # the first is the warm-up
            best, spent = min(best, took), spent + took
            if not cuda and rep >= 2 and spent > 3.0:
                break
    return 2 * n**3 / best


@functools.cache
def _transposed_faster(device: str, dtype: Any) -> bool:
    """Whether `a @ b.T` beats `a @ b` in this dtype (512^2, best of 4): on an AVX2-only CPU bf16
    `a @ b` takes a slow path, which would put the "peak" below what the model's linears run."""
    import torch

    a = torch.randn(512, 512, device=device, dtype=dtype)
    b = torch.randn(512, 512, device=device, dtype=dtype)
    times = []
    for rhs in (b, b.t()):
        best = float("inf")
        for _ in range(4):
            start = now(device)
            a @ rhs
            best = min(best, now(device) - start)
        times.append(best)
    return times[1] < times[0]


def linear_peak(model: Any, dtype: Any, device: str = "cpu", reps: int = 5) -> float:
    """Best FLOP/s of `F.linear` at each weight shape of the model's first layer on each of
    LINEAR_ROWS rows, in `dtype`, best of `reps` after a warm-up (some shapes run above the
    square-matmul peak)."""
    import torch
    import torch.nn.functional as F

    shapes = {
        tuple(m.weight.shape) for m in model.model.layers[0].modules() if isinstance(m, torch.nn.Linear)
    }
    best = 0.0
    for n in LINEAR_ROWS:
        for out_f, in_f in sorted(shapes):
            x = torch.randn(n, in_f, dtype=dtype, device=device)
            w = torch.randn(out_f, in_f, dtype=dtype, device=device)
            F.linear(x, w)
            fastest = float("inf")
            for _ in range(reps):
                start = now(device)
                F.linear(x, w)
                fastest = min(fastest, now(device) - start)
            best = max(best, 2 * n * in_f * out_f / fastest)
    return best


def gemm_rate(model: Any, device: str, square_n: int | None = None) -> dict[str, Any]:
    """{"square", "linear", "used", "from"}: the rate a floor is drawn at is the higher of the two."""
    dtype = next(model.parameters()).dtype
    rates = {"square": matmul_peak(device, dtype, square_n), "linear": linear_peak(model, dtype, device)}
    which = max(rates, key=lambda k: rates[k])
    return {**rates, "used": rates[which], "from": which}


# -- the roofline floor --------------------------------------------------------------------------
def causal_pairs(rows: list[list[int]]) -> int:
    """Causal (query, key) pairs of running each row whole."""
    return sum(len(r) * (len(r) + 1) // 2 for r in rows)


def model_dims(model: Any) -> tuple[int, int, int]:
    """(linear-layer parameters but the LM head's, LM head parameters, attention FLOPs per causal
    (query, key) pair summed over layers: 4 x layers x query heads x head dim)."""
    import torch

    head = model.get_output_embeddings()
    body = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head)
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return body, head.weight.numel(), 4 * c.num_hidden_layers * c.num_attention_heads * head_dim


def floor_flops(model: Any, work: dict[str, int]) -> float:
    """The FLOPs an exact engine cannot skip on `work` (tokens computed, "heads": rows whose
    next-token logits are read, causal (query, key) "pairs"): every linear layer for every token,
    except that the last layer's query, output and MLP projections and the LM head run for the
    heads only (nothing reads the other tokens' last-layer outputs), plus attention in every layer
    but the last. The LM head counts for a float32 model only: elsewhere it runs in float32
    (harness.judges.head), which the model dtype's rate would overrate; a term left out keeps the
    count a floor. Norms, RoPE and softmax are not counted."""
    import torch

    body, head, attn = model_dims(model)
    last = model.model.layers[-1]
    kv = {id(last.self_attn.k_proj), id(last.self_attn.v_proj)}
    spared = sum(
        m.weight.numel() for m in last.modules() if isinstance(m, torch.nn.Linear) and id(m) not in kv
    )
    layers = model.config.num_hidden_layers
    heads = work["heads"] if model.get_output_embeddings().weight.dtype == torch.float32 else 0
    linear = 2 * body * work["tokens"] - 2 * spared * (work["tokens"] - work["heads"]) + 2 * head * heads
    return linear + attn * (layers - 1) / layers * work["pairs"]


# -- the machine ---------------------------------------------------------------------------------
def machine(device: str = "cpu") -> dict[str, Any]:
    """CPU model (lscpu), cores, 1-minute load, UTC date, commit (when run from a checkout), torch,
    and the GPU's name on CUDA."""
    import torch

    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()
    except OSError:
        lines = []
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Model name")),
        platform.processor() or platform.machine(),
    )
    here, commit = Path(__file__).resolve().parents[2], ""
    if (here / ".git").exists():  # a checkout, not an installed wheel
        try:
            commit = subprocess.run(
                ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
        except OSError:
            pass
    return {
        "cpu": cpu,
        "nproc": os.cpu_count(),
        "load_1min": os.getloadavg()[0],
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit or "not a git checkout",
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else None,
    }


def run_child(
    cmd: list[str], env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, float, float, float]:
    """`cmd` as its own process: its result, its CPU-seconds (user + system), its wall seconds and
    the 1-minute load when it started."""
    load = os.getloadavg()[0]
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, cpu, wall, load
