"""How two benchmark rows are compared: decisions, |dP(A)|, and prompts/s ratios.

A decision is which side of 0.5 a P(A) falls on (+1 A, -1 B, 0 a tie or no number). Two rows
are compared pair by pair on the same prompts; a row of a five-instruction workload can be
compared with a one-instruction row on its instruction-0 prompts (`first_instruction`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def decision(p_a: float) -> int:
    """+1 (A), -1 (B) or 0 (0.5 or NaN)."""
    return (p_a > 0.5) - (p_a < 0.5)


def agree(ref: Sequence[float], other: Sequence[float]) -> dict:
    """`other`'s P(A)s against `ref`'s on the same prompts: decisions equal ([equal, pairs]) and the
    max and mean |dP(A)| over the pairs where both are numbers."""
    if len(ref) != len(other) or not ref:
        raise ValueError(f"compare P(A) lists of one non-zero length, got {len(ref)} and {len(other)}")
    same = sum(decision(x) == decision(y) for x, y in zip(ref, other))
    diffs = [abs(x - y) for x, y in zip(ref, other) if math.isfinite(x) and math.isfinite(y)]
    return {
        "agree": [same, len(ref)],
        "max_abs_dp": max(diffs, default=math.nan),
        "mean_abs_dp": sum(diffs) / len(diffs) if diffs else math.nan,
    }


def first_instruction(p_a: Sequence[float], n_instructions: int) -> list[float]:
    """A pair-major workload's instruction-0 rows (harness.bench.workloads.pair_workload)."""
    return list(p_a[::n_instructions])


def speedup(row_prompts_per_s: float, ref_prompts_per_s: float) -> float:
    """How many times the reference's prompts/s a row reaches (>1: the row is faster)."""
    return row_prompts_per_s / ref_prompts_per_s
