"""The roofline arithmetic of scripts/bench_judge.py and bench_vllm.py: the model's
FLOPs per token and per causal (query, key) pair, the best matmul FLOP/s this device reaches in a
dtype, measured around every timed method, and each row's figures against it.
"""

from __future__ import annotations

import functools
import sys
import time


def model_dims(model) -> tuple[int, int, int]:
    """(linear-layer parameters except the LM head, LM head parameters, attention FLOPs per
    causal (query, key) pair summed over layers: 4 x layers x query heads x head dim)."""
    import torch

    head = model.get_output_embeddings()
    body = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head)
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return body, head.weight.numel(), 4 * c.num_hidden_layers * c.num_attention_heads * head_dim


def causal_pairs(rows) -> int:
    return sum(len(r) * (len(r) + 1) // 2 for r in rows)


def matmul_peak(device: str, dtype, reps: int | None = None, n: int | None = None) -> float:
    """Best FLOP/s of large square matmuls on this device and dtype (the roofline we compare to),
    in the faster of the layouts `a @ b` and `a @ b.T` (nn.Linear's; see `_transposed_faster`).
    On CPU, timed repetitions stop once they took 3 s (two at least): a slow dtype costs seconds, not minutes."""
    import torch

    cuda = device.startswith("cuda")
    n = n or (8192 if cuda else 2048)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    if _transposed_faster(device, dtype):
        b = b.t()
    best, spent = float("inf"), 0.0
    for rep in range(reps or (8 if cuda else 4)):
        t = _now(device)
        for _ in range(10 if cuda else 1):
            a @ b
        dt = (_now(device) - t) / (10 if cuda else 1)
        if rep:  # the first is warm-up
            best, spent = min(best, dt), spent + dt
            if not cuda and rep >= 2 and spent > 3.0:
                break
    return 2 * n**3 / best


@functools.cache
def _transposed_faster(device: str, dtype) -> bool:
    """Whether `a @ b.T` beats `a @ b` in this dtype (probed once on 512^2 matrices, best of 3).
    On an AVX2-only CPU bf16 `a @ b` takes a slow path (measured here at 1024^2: 0.8 GFLOP/s
    against 5.8 for `a @ b.T` at 2048^2), which would make a "peak" below what the model runs."""
    import torch

    a = torch.randn(512, 512, device=device, dtype=dtype)
    b = torch.randn(512, 512, device=device, dtype=dtype)
    times = []
    for rhs in (b, b.t()):
        best = float("inf")
        for _ in range(4):
            t = _now(device)
            a @ rhs
            best = min(best, _now(device) - t)
        times.append(best)
    return times[1] < times[0]


def _now(device: str) -> float:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    return time.perf_counter()


def measure(name: str, fn, judge, peaks: list[float],
            peak_n: int | None = None) -> tuple[object, float, float]:
    """Run fn once, timed; returns (output, seconds, matmul peak around the run).

    The peak is re-measured right after each method and averaged with the one before it, so a
    machine shared with other jobs is compared against the capacity it had at that moment.
    """
    start = _now(judge.device)
    out = fn()
    seconds = _now(judge.device) - start
    peaks.append(matmul_peak(judge.device, judge.torch_dtype, reps=6, n=peak_n))
    local = (peaks[-2] + peaks[-1]) / 2
    print(f"  {name}: {seconds:.1f} s (matmul peak around it {local / 1e9:.1f} GFLOP/s)",
          file=sys.stderr, flush=True)
    return out, seconds, local


def stats(prompts: int, seconds: float, work: dict, unique: int, dims: tuple[int, int, int],
          peak: float) -> dict:
    """Throughput and roofline figures. `frac_peak` counts 2 x parameters x tokens (linear layers,
    LM head at the positions read); `frac_peak_attn` adds the causal attention FLOPs."""
    flops = 2 * dims[0] * work["tokens"] + 2 * dims[1] * work["heads"]
    attn = dims[2] * work["pairs"]
    tokens = work["tokens"]
    return {"prompts": prompts, "seconds": round(seconds, 3), "prompts_per_s": prompts / seconds,
            "matmul_peak_local": peak,
            "tokens_processed": tokens, "tokens_per_s": tokens / seconds, "unique_min_tokens": unique,
            "tokens_over_min": tokens / unique, "flop_per_s": flops / seconds,
            "frac_peak": flops / seconds / peak, "frac_peak_attn": (flops + attn) / seconds / peak}
