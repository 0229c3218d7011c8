"""Document shards: one judging run split into jobs, and merged back into one run.

Shard i of n takes the i-th contiguous block of the task's document slice (`task.num_shards`,
`task.shard_index`; sizes differ by at most one). `merge_shards` concatenates the shards'
judgments in shard order, which is the unsharded run's document order, and recomputes every
metric: judgments.jsonl and results.json come out as the unsharded run writes them
(harness.runtime.merged adds the rest of the run: config, card, report.html, W&B). A sweep over
the shards merges itself when it ends (harness.runtime.sweep_end); by hand:

    python -m harness.run -m experiment=judge task.num_shards=4 'task.shard_index=range(4)' hydra/launcher=slurm
    python -m harness.runtime.collect merge multirun/judge/<stamp>/{0,1,2,3} --out merged

(Within one job, `harness.judges.wrappers.PreemptibleJudge` makes preemption lose nothing, and
`harness.runtime.attempts` records every attempt.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, DataError, located
from harness.files import read_json_object, write_json_atomic
from harness.judging import load_judgments
from harness.metrics import write_run
from harness.metrics.settings import MetricsSettings
from harness.metrics.summary import lengths_of
from harness.records import Document

# Settings that must agree for shards to be parts of one run (results.json keys).
_SAME_RESULTS = ("task", "aspect", "family", "instruction", "judge", "shuffles", "seed")

SHARDED_EXPERIMENTS = ("judge",)
"""Experiments whose document shards merge back into the unsharded run (`merge_shards`). ZEPO's
search is sequential (each epoch's paraphrases follow the last one's scores) and A-BB certifies the
score vector of the whole evaluation set (its neighbours are drawn over every item): a shard of
either is not a part of the run. docs/slurm.md says how they use a cluster instead."""


# ---------------------------------------------------------------- document shards
@dataclass(frozen=True)
class ShardSpec:
    """Which block of the document slice one job judges."""

    index: int
    """0-based shard number (SLURM: $SLURM_ARRAY_TASK_ID)."""
    count: int
    """Number of shards the slice is cut into (1 = unsharded)."""


def shard_spec(task: Mapping[str, Any]) -> ShardSpec:
    """Read `task.num_shards` / `task.shard_index` (absent = unsharded) and check them."""
    count, index = task.get("num_shards", 1), task.get("shard_index", 0)
    count = 1 if count is None else count
    index = 0 if index is None else index
    for key, v in (("num_shards", count), ("shard_index", index)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"task.{key} must be an integer, got {v!r}")
    if count < 1 or not 0 <= index < count:
        raise ConfigError(
            f"task.shard_index must be in [0, task.num_shards) with num_shards >= 1, "
            f"got shard_index={index}, num_shards={count}"
        )
    return ShardSpec(index, count)


def check_shardable(cfg: Any) -> None:
    """Refuse task.num_shards > 1 for an experiment whose shards cannot be merged (SHARDED_EXPERIMENTS):
    its shard would be a smaller run that looks like the whole one."""
    spec = shard_spec(cfg.task)
    name = cfg.experiment.get("name") if cfg.get("experiment") is not None else None
    if spec.count > 1 and name not in SHARDED_EXPERIMENTS:
        raise ConfigError(
            f"task.num_shards={spec.count}: only experiment=judge is split into document shards and "
            f"merged back; run experiment={name} whole (task.num_shards=1) - docs/slurm.md says why"
        )


def shard_bounds(n: int, spec: ShardSpec) -> tuple[int, int]:
    """[start, stop) of shard `spec.index` among n items: contiguous, in order, sizes differ by <= 1."""
    return spec.index * n // spec.count, (spec.index + 1) * n // spec.count


def select_shard(docs: Sequence[Document], spec: ShardSpec) -> list[Document]:
    """The shard's documents; an empty shard is a config error (too many shards for the slice)."""
    if spec.count == 1:
        return list(docs)
    start, stop = shard_bounds(len(docs), spec)
    if start == stop:
        raise ConfigError(
            f"shard {spec.index} of {spec.count} holds no documents: the slice has only "
            f"{len(docs)}; use task.num_shards <= {len(docs)}"
        )
    return list(docs[start:stop])


# ---------------------------------------------------------------- merging
@dataclass(frozen=True)
class ShardRun:
    """One shard's finished run directory, as read back for merging."""

    path: Path
    """The run directory (holds config.json, results.json, judgments.jsonl)."""
    spec: ShardSpec
    """Its shard number and count, from config.json `task`."""
    config: dict[str, Any]
    """config.json: the resolved Hydra config of the job."""
    results: dict[str, Any]
    """results.json of the shard."""


def read_shard(path: str | Path) -> ShardRun:
    path = Path(path)
    for name in ("config.json", "results.json", "judgments.jsonl"):
        if not (path / name).is_file():
            raise DataError(f"{name} not found: not a finished judge run", where=str(path))
    config, results = (
        read_json_object(path / name, "not a finished judge run: rerun that shard")
        for name in ("config.json", "results.json")
    )
    return ShardRun(path, shard_spec(config.get("task") or {}), config, results)


def _interval_settings(results: dict[str, Any]) -> dict[str, Any]:
    """The shards' bootstrap settings (results.json "interval"), so the merge's intervals use them."""
    meta = results.get("interval") or {}
    named = {"bootstrap": "rounds", "level": "level"}
    return {"metrics": MetricsSettings.of({k: meta[v] for k, v in named.items() if v in meta})}


def _shard_lengths(shards: Sequence[ShardRun]) -> dict[str, Any]:
    """The shards' candidate lengths (results.json "candidate_words"), when every shard has them, so
    the merge's length-bias fit is the unsharded run's."""
    words = [s.results.get("candidate_words") for s in shards]
    if any(w is None for w in words):
        return {}
    return {"lengths": lengths_of({d: per for w in words for d, per in w.items()})}


def _task_without_shard(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (config.get("task") or {}).items() if k not in ("shard_index", "num_shards")}


def check_shards(shards: Sequence[ShardRun]) -> list[ShardRun]:
    """Shards sorted by index; every index 0..n-1 exactly once, all from the same settings."""
    if not shards:
        raise ConfigError("no shard directories given")
    first = shards[0]
    for s in shards:
        if s.spec.count != first.spec.count:
            raise ConfigError(
                f"task.num_shards is {s.spec.count}, but {first.spec.count} in {first.path}",
                where=str(s.path / "config.json"),
            )
        for key in _SAME_RESULTS:
            if s.results.get(key) != first.results.get(key):
                raise ConfigError(
                    f"{key} differs from {first.path}: not shards of one run",
                    where=located(s.path / "results.json", None, key),
                )
        if _task_without_shard(s.config) != _task_without_shard(first.config):
            raise ConfigError(
                f"task settings differ from {first.path}: not shards of one run",
                where=located(s.path / "config.json", None, "task"),
            )
    by_index: dict[int, ShardRun] = {}
    for s in shards:
        if s.spec.index in by_index:
            raise ConfigError(f"shard {s.spec.index} given twice: {by_index[s.spec.index].path} and {s.path}")
        by_index[s.spec.index] = s
    missing = sorted(set(range(first.spec.count)) - set(by_index))
    if missing:
        raise ConfigError(f"shards {missing} of {first.spec.count} are missing (have {sorted(by_index)})")
    return [by_index[i] for i in range(first.spec.count)]


def check_shard_pairs(shard: ShardRun, judgments: Sequence[Any]) -> None:
    """A shard's judgments.jsonl must be what its results.json counted (`n_judgments`), every
    document holding each ordered pair of its candidates once (the first `task.max_candidates` of
    `candidate_words` where recorded, else those judged): a shard that lost pairs would merge into metrics
    recomputed on the shorter list."""
    where = str(shard.path / "judgments.jsonl")
    counted = shard.results.get("n_judgments")
    if counted != len(judgments):
        raise DataError(
            f"holds {len(judgments)} judgments, its results.json counted {counted}: the shard lost "
            f"pairs; rerun shard {shard.spec.index}",
            where=where,
        )
    words = shard.results.get("candidate_words") or {}
    limit = (shard.config.get("task") or {}).get("max_candidates") or None
    pairs: dict[str, list[tuple[str, str]]] = {}
    for j in judgments:
        pairs.setdefault(j.doc_id, []).append((j.a_id, j.b_id))
    for doc, got in pairs.items():
        cands = list(words.get(doc) or dict.fromkeys(c for pair in got for c in pair))[:limit]
        want = {(a, b) for a in cands for b in cands if a != b}
        if len(got) != len(want) or set(got) != want:
            missing = sorted(want - set(got))
            raise DataError(
                f"document {doc!r} has {len(got)} judgments for {len(want)} ordered pairs of its "
                f"{len(cands)} candidates"
                + (f" (missing {missing[0]})" if missing else " (a pair twice)")
                + f": rerun shard {shard.spec.index}",
                where=where,
            )


def _summed_calls(shards: Sequence[ShardRun]) -> dict[str, Any]:
    # judge_calls is a fact about the runs, not a metric: the model calls the shards paid together.
    calls = [s.results.get("judge_calls") for s in shards]
    out = {"judge_calls": sum(calls)} if all(isinstance(c, int) for c in calls) else {}
    shas = [s.results.get("documents_sha256") for s in shards]  # the data the shards judged
    if all(isinstance(sha, dict) for sha in shas):
        out["documents_sha256"] = {d: h for sha in shas for d, h in sha.items()}
    return out


def merge_shards(dirs: Sequence[str | Path], out_dir: str | Path, p_cf_tol: float = 1e-6) -> dict[str, Any]:
    """Merge shard run dirs into `out_dir` (judgments.jsonl, results.json, merge.json).

    The content-free P(A) is scored once per shard; the shards must agree within `p_cf_tol` (the
    same prompt, batched with different neighbours) and shard 0's value is kept.
    """
    shards = check_shards([read_shard(d) for d in dirs])
    judgments, p_cfs, owner = [], [], {}
    for s in shards:
        js, p_cf = load_judgments(s.path / "judgments.jsonl")
        check_shard_pairs(s, js)
        for doc_id in dict.fromkeys(j.doc_id for j in js):
            if doc_id in owner:
                raise DataError(
                    f"document {doc_id!r} is in shard {owner[doc_id]} and shard {s.spec.index}",
                    where=str(s.path / "judgments.jsonl"),
                )
            owner[doc_id] = s.spec.index
        judgments.extend(js)
        p_cfs.append(p_cf)
    if any(
        (p is None) != (p_cfs[0] is None) or (p is not None and abs(p - p_cfs[0]) > p_cf_tol) for p in p_cfs
    ):
        raise DataError(f"content-free P(A) differs across shards ({p_cfs}): not scored by the same judge")
    r = shards[0].results
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = write_run(
        out,
        judgments,
        p_cfs[0],
        task=r["task"],
        aspect=r.get("aspect"),
        family=r["family"],
        instruction=r["instruction"],
        judge_identity=r["judge"],
        numerics=r.get("numerics"),
        n_docs=sum(int(s.results["n_docs"]) for s in shards),
        shuffles=int(r["shuffles"]),
        seed=int(r["seed"]),
        extra=_summed_calls(shards),
        **_interval_settings(r),
        **_shard_lengths(shards),
    )
    config = {**shards[0].config, "task": _task_without_shard(shards[0].config)}
    write_json_atomic(
        out / "merge.json",
        {"shards": [str(s.path) for s in shards], "num_shards": len(shards), "config": config},
    )
    return results
