"""What differs between two runs, said before their numbers (harness-compare's first lines), and
which metrics apply to neither.

    differs       instruction: 'Which is better? Answer A or B.' vs 'Compare response candidate ...'
                  experiment.shuffles: 5 vs 4

The instruction and the judge's identity come from results.json (what the run used); data and
settings from config.json (model, backend, task, experiment, metrics, seed), flattened to dotted
keys. Where the runs are places (data.dir, cache, W&B), not settings, they are left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.files import read_json_object
from harness.records import Judgment

RESULT_KEYS = ("instruction", "judge", "task", "aspect", "family")
"""results.json's record of what the run used: the instruction as judged, the judge's identity."""
CONFIG_PARTS = ("model", "backend", "task", "experiment", "metrics", "seed")
"""config.json's parts that change what a run computes (places such as data.dir, cache.path,
wandb.* and progress do not)."""
WIDTH = 70
"""A value longer than this is cut with '...' (an instruction stays recognisable)."""


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, Mapping):
        return {k: v for key, val in obj.items() for k, v in _flat(val, f"{prefix}{key}.").items()}
    return {prefix[:-1]: obj}


def _short(value: Any) -> str:
    if not isinstance(value, str):
        return repr(value)
    text = " ".join(value.split())
    return f"'{text}'" if len(text) <= WIDTH else f"'{text[: WIDTH - 3]}...'"


def _versus(a: Any, b: Any, identity: bool = False) -> str:
    """`a vs b`; for two judge identities (`hf|model|...|w=<hash>`) only the fields that differ, so a
    difference at the end of a long identity is not cut off."""
    if identity and isinstance(a, str) and isinstance(b, str) and a.count("|") == b.count("|"):
        pairs = [(x, y) for x, y in zip(a.split("|"), b.split("|"), strict=True) if x != y]
        return "; ".join(f"{_short(x)} vs {_short(y)}" for x, y in pairs)
    return f"{_short(a)} vs {_short(b)}"


def _config(run: Path) -> dict[str, Any]:
    path = run / "config.json"
    if not path.is_file():
        return {}
    config = read_json_object(path, "give the directory of a finished judge run")
    return _flat({k: config[k] for k in CONFIG_PARTS if k in config})


def differences(dir_a: Path, dir_b: Path, ra: Mapping[str, Any], rb: Mapping[str, Any]) -> list[str]:
    """Lines `key: A vs B` for what the runs used that differs: results.json's instruction, judge,
    task, aspect and family, then config.json's settings (its instruction keys are covered by the
    instruction judged). Empty when nothing differs."""
    lines = [
        f"{k}: {_versus(ra.get(k), rb.get(k), k == 'judge')}" for k in RESULT_KEYS if ra.get(k) != rb.get(k)
    ]
    ca, cb = _config(dir_a), _config(dir_b)
    for key in dict.fromkeys([*ca, *cb]):
        if key.startswith("experiment.instruction.") or ca.get(key) == cb.get(key):
            continue
        lines.append(f"{key}: {_short(ca.get(key, '(absent)'))} vs {_short(cb.get(key, '(absent)'))}")
    return lines


def differs_lines(dir_a: Path, dir_b: Path, ra: Mapping[str, Any], rb: Mapping[str, Any]) -> list[str]:
    """harness-compare's lines saying what differs between A and B (or that nothing does)."""
    found = differences(dir_a, dir_b, ra, rb)
    if not found:
        return [
            "differs: nothing in the instruction, judge, data or settings (results.json, config.json): "
            "B - A is run-to-run variation"
        ]
    return [f"{'differs:' if i == 0 else '':<9}{line}" for i, line in enumerate(found)]


def _nan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def not_applicable(
    rows: Mapping[str, Mapping[str, Any]], judgments: Sequence[Judgment]
) -> tuple[set[str], str]:
    """(metrics with no value in either run, one line naming them and why) - ({}, "") when none."""
    empty = {k for k, d in rows.items() if _nan(d.get("a")) and _nan(d.get("b"))}
    if not empty:
        return set(), ""
    gold = any(j.gold_a is not None for j in judgments)
    scored = any(j.human_a is not None for j in judgments)
    why = (
        "no human scores, only gold labels: accuracy against the gold label is this data's agreement"
        if gold and not scored
        else "no human scores or gold labels"
        if not scored
        else "no value in either run: e.g. fewer than two human-scored candidates per document"
    )
    return empty, f"not applicable ({why}): {', '.join(k for k in rows if k in empty)}"
