"""A merged run: the run directories of a run's document shards made into one run directory, as
the unsharded run writes it. The sweep's end (harness.runtime.sweep_end) and the merge by hand
(`python -m harness.runtime.collect merge DIRS --out DIR`, slurm/node.sbatch's last step) both
call `merge_run`, so both write the same files:

- judgments.jsonl, results.json (every metric recomputed) and merge.json: harness.runtime.shard.merge_shards;
- config.json and overrides.json: shard 0's, without the shard keys;
- the report card and report.html, every prompt shown (rebuilt from config.json, as harness-report does);
- a W&B run of its own, in the shards' group (their sweep's) and named as they are with `-merged`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from harness.files import read_json, read_json_object, write_json_atomic
from harness.judging import load_judgments
from harness.runtime.context import RunContext, sweep_group
from harness.runtime.shard import merge_shards
from harness.runtime.sweep import override_key
from harness.runtime.tracking import log_judge_results

SHARD_KEYS = ("task.shard_index", "task.num_shards")
MERGED_SUFFIX = "-merged"
"""Appended to the shards' W&B name: the merged run stands beside them in their group."""


def merge_run(
    dirs: Sequence[str | Path], out: str | Path, sweep_dir: str | Path | None = None
) -> dict[str, Any]:
    """Merge the shards' run dirs `dirs` into `out` and write it as a whole run; its results.
    `sweep_dir`: the sweep the shards are jobs of (default: the nearest folder above shard 0 that
    holds a multirun.yaml; none for shards run one by one), which names the W&B group."""
    results = merge_shards(dirs, out)
    out = Path(out)
    merge = read_json_object(out / "merge.json", "rerun the merge")
    first = Path(merge["shards"][0])
    publish(out, merge["config"], shard_overrides(first), results, sweep_dir or sweep_of(first))
    return results


def sweep_of(run_dir: Path) -> Path | None:
    """The sweep directory a job's run directory lies in: the nearest folder above it with a multirun.yaml."""
    return next((p for p in Path(run_dir).resolve().parents if (p / "multirun.yaml").is_file()), None)


def shard_overrides(run_dir: Path) -> list[str]:
    """A shard's command-line overrides (overrides.json) without the shard keys: the unsharded run's."""
    path = run_dir / "overrides.json"
    overrides = read_json(path) if path.is_file() else []
    return (
        [str(o) for o in overrides if override_key(str(o)) not in SHARD_KEYS]
        if isinstance(overrides, list)
        else []
    )


def publish(
    out: Path, config: dict[str, Any], overrides: list[str], results: dict[str, Any], sweep_dir: Path | None
) -> None:
    """What the unsharded run writes beside judgments.jsonl and results.json: config.json and
    overrides.json, the report card and report.html, and its W&B run (metrics, summary, judgments
    table, the files as an artifact) in the sweep's group."""
    config = {**config, "task": {**config.get("task", {}), "num_shards": 1, "shard_index": 0}}
    write_json_atomic(out / "config.json", config)
    write_json_atomic(out / "overrides.json", overrides)
    judgments, _ = load_judgments(out / "judgments.jsonl")
    cfg = OmegaConf.create(config)
    ctx = RunContext(cfg, out, group=sweep_group(cfg, sweep_dir), name_suffix=MERGED_SUFFIX)
    completed = False
    try:
        log_judge_results(ctx.tracker, results, judgments, ctx.docs)
        ctx.tracker.update_config({"judge_identity": results["judge"]})
        completed = True
    finally:
        ctx.close(completed)
