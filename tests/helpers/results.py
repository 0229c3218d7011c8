"""A run's outputs read as tests compare them: results.json less the facts about one attempt, the
report page's data, trees of numbers equal within float noise; and a ZEPO results.json to lay out."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

RUN_FACTS = ("judge_calls", "judge_calls_all_attempts", "judge_work")
"""results.json keys about one attempt of a run (its calls, timings), not about its results: two
runs that computed the same things (resumed, sharded, on SLURM) agree on everything else."""


def results_only(results: dict) -> dict:
    return {k: v for k, v in results.items() if k not in RUN_FACTS}


def page_data(page: Path) -> dict:
    """The JSON block report.html draws its pairs and prompts from."""
    html = page.read_text()
    return json.loads(html.split("id='report-data'>", 1)[1].split("</script>", 1)[0])


def assert_close(a, b, path="state"):
    """Equal, floats within 1e-5: prefix reuse and batch composition change the float order (fp32 GEMM kernels on AVX-512/AMX CPUs give a row other bits in another batch: 1.1e-6 measured on order_gap), not the decisions."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-5, abs=1e-5), path
    else:
        assert a == b, path


def zepo_result(initial: float, best: float, gain_interval, with_intervals: bool = True) -> dict:
    """A ZEPO results.json as run_zepo writes it, reduced to what the paper tables read."""

    def part(v):
        m = {"none": {"spearman_pairs": v, "fairness": -0.1}}
        iv = (
            {"none": {"spearman_pairs": [v - 0.2, v + 0.2], "fairness": [-0.2, 0.0]}}
            if with_intervals
            else None
        )
        return {
            "metrics": m,
            "metrics_leaky": m,
            "metrics_heldout": m,
            "intervals_leaky": iv,
            "intervals_heldout": iv,
            "search": {"objectives": {"fairness": -0.05}},
        }

    gain = {
        "diff": best - initial,
        "interval": gain_interval,
        "sentence": f"held-out spearman_pairs {best - initial:+.3f}",
    }
    return {
        "experiment": "zepo",
        "model": "m",
        "judge": "j|m",
        "task": "newsroom",
        "aspect": "coherence",
        "settings": {"debias": "none"},
        "leak_search_docs": True,
        "initial": part(initial),
        "best": part(best),
        "gains": {"heldout": {"none": {"spearman_pairs": gain}}, "leaky": None},
    }
