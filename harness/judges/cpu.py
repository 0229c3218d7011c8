"""CPU facts the local judges (transformers, in-process vLLM) decide with: the cores this process
may use, whether the CPU does bf16 matmuls fast, and torch's thread count for a block.

Fast bf16: a CPU with AMX-BF16 (Sapphire Rapids and later) or AVX512-BF16 (Cooper Lake, Zen 4 and
later) multiplies bf16 in hardware; there `dtype: auto` picks bfloat16 (the issue measured a 2048^2
matmul at 2,054 vs 263 GFLOP/s on an AMX CPU). Everywhere else bf16 is emulated through fp32 and
slower than fp32 itself (an AVX2-only EPYC: docs/benchmarks.md), so `auto` stays float32 there.
The answer comes from the kernel's flags in /proc/cpuinfo, read once.
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


def auto_cpu_dtype() -> str:
    """What `dtype: auto` means on this CPU: bfloat16 where it is fast, float32 elsewhere."""
    return "bfloat16" if this_cpu_fast_bf16() else "float32"


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
