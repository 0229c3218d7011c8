"""CPU facts the local judges (transformers, in-process vLLM) decide with: what `dtype: auto` means,
the cores this process may use, whether the CPU does bf16 matmuls fast, and torch's thread count
for a block.

`dtype: auto` is float32 on EVERY CPU, so the same command gives the same numbers on any machine:
bfloat16 where the CPU multiplies bf16 in hardware would make a run's P(A) depend on the CPU it
lands on (coarse bf16 logit steps; docs/benchmarks.md, Numerics). bf16 on CPU is an
explicit `backend.dtype=bfloat16`, fast on a CPU with AMX-BF16 (Sapphire Rapids and later) or
AVX512-BF16 (Cooper Lake, Zen 4 and later), emulated and slower than fp32 elsewhere
(docs/benchmarks.md). `this_cpu_fast_bf16` still reads the kernel's flags in /proc/cpuinfo, for
tests/judges/test_cpu.py to show that `auto` ignores them; no default and no result depends on it.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

FAST_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""cpuinfo flags of an x86 CPU that multiplies bf16 in hardware (either one is enough)."""

CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor in a /proc/cpuinfo text (x86 `flags`, Arm `Features`)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def fast_bf16(flags: Iterable[str]) -> bool:
    """Whether a CPU with these flags does bf16 matmuls in hardware (AMX-BF16 or AVX512-BF16)."""
    return bool(set(flags) & set(FAST_BF16_FLAGS))


@functools.cache
def this_cpu_fast_bf16() -> bool:
    """fast_bf16 for this machine's CPU (False where /proc/cpuinfo cannot be read, e.g. macOS)."""
    try:
        return fast_bf16(cpu_flags(CPUINFO.read_text(errors="replace")))
    except OSError:
        return False


AUTO_CPU_DTYPE = "float32"
"""`dtype: auto` on a CPU, whatever its flags."""
AUTO_GPU_DTYPE = "bfloat16"
"""`dtype: auto` on a GPU (the paper judges' checkpoints are bf16)."""


def auto_dtype(device: str) -> str:
    """What `dtype: auto` means on `device` ("cpu", "cuda", "cuda:1"): float32 on every CPU,
    bfloat16 on a GPU. Never read from the CPU's flags."""
    return AUTO_CPU_DTYPE if str(device).startswith("cpu") else AUTO_GPU_DTYPE


def dtype_source(requested: str | None) -> str:
    """Where a judge's dtype came from, as a run records it: "auto" (resolved by the device,
    `auto_dtype`) or "config" (set by backend.dtype / model.dtype)."""
    return "auto" if requested in (None, "", "auto") else "config"


def numerics(dtype: str, source: str, engine: str, device: str, **more: str) -> dict[str, str]:
    """A judge's numerics as a run records them (results.json "numerics", card.md, the run's first
    lines): its dtype, where that came from (`dtype_source`: "config" or "auto"; an API judge's is
    the server's), the engine ("transformers", "vllm", "api") and the device, plus `more`."""
    return {"dtype": str(dtype), "dtype_source": source, "engine": engine, "device": str(device), **more}


def numerics_line(n: dict | None) -> str:
    """One line of `numerics`: "float32 (auto), transformers on cpu, answer logits float32"."""
    if not n:
        return "not recorded (scores from a file, or a judge that does not say)"
    rest = "".join(
        f", {k.replace('_', ' ')} {v}"
        for k, v in n.items()
        if k not in ("dtype", "dtype_source", "engine", "device")
    )
    return f"{n.get('dtype')} ({n.get('dtype_source')}), {n.get('engine')} on {n.get('device')}{rest}"


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask: a SLURM allocation, taskset, a cgroup
    cpuset), not the machine's total that os.cpu_count() reports."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity API (macOS)
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """`backend.threads: null`: OMP_NUM_THREADS when set (the usual way to pin a job's threads),
    else the cores this process may use."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else usable_cores()


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `n` for the block, the caller's count restored after;
    nothing changes when `n` is None."""
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    if n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
