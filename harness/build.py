"""Build the objects an experiment needs from config sections (no Hydra runtime needed).

Each builder takes the config section it needs, so tests can call them with plain dicts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.judge.base import Judge
from harness.judge.cache import CachedJudge, ScoreCache
from harness.types import Document

log = logging.getLogger(__name__)


def _get(section: Mapping[str, Any], key: str, default: Any = None) -> Any:
    v = section.get(key, default)
    return default if v is None else v


def build_judge(model: Mapping[str, Any], backend: Mapping[str, Any]) -> Judge:
    """A judge from `model/*.yaml` (weights, labels) and `backend/*.yaml` (engine, batching)."""
    kind = backend.get("name", "hf")
    labels = tuple(_get(model, "labels", ("A", "B")))
    if kind == "hf":
        from harness.judge.hf_judge import HFJudge
        from harness.models import resolve_model_path

        path, gguf = resolve_model_path(str(model["path"]), model.get("gguf_file"))
        extra = {"prefix_reuse": bool(backend["prefix_reuse"])} if "prefix_reuse" in backend else {}
        extra.update({k: backend[k] for k in ("engine", "max_batch_tokens") if k in backend})
        return HFJudge(path, name=model.get("name"), gguf_file=gguf, revision=model.get("revision"),
                       dtype=_get(backend, "dtype", _get(model, "dtype", "auto")),
                       device=_get(backend, "device", "auto"), batch_size=_get(backend, "batch_size", 8),
                       max_length=model.get("max_length"), labels=labels,
                       system_prompt=model.get("system_prompt"),
                       trust_remote_code=bool(model.get("trust_remote_code", False)), **extra)
    if kind == "vllm":
        from harness.judge.vllm_judge import VLLMJudge
        from harness.models import resolve_model_path

        path, _ = resolve_model_path(str(model["path"]))
        opts = {k: v for k, v in backend.items() if k != "name"}
        return VLLMJudge(path, name=model.get("name"), revision=model.get("revision"), labels=labels,
                         system_prompt=model.get("system_prompt"), max_model_len=model.get("max_length"), **opts)
    if kind == "api":
        from harness.judge.api_judge import ApiJudge

        opts = {k: v for k, v in backend.items() if k not in ("name", "model")}
        if opts.get("logprob_mode", "auto") != "top" and not opts.get("token_ids") and not opts.get("tokenizer"):
            opts["tokenizer"] = str(model["path"])  # the served model's tokenizer gives exact answer ids
        return ApiJudge(model=_get(backend, "model", model.get("name")), labels=labels,
                        system_prompt=model.get("system_prompt"), **opts)
    raise ConfigError(f"unknown backend {kind!r}; use hf, vllm or api")


def open_cache(cache: Mapping[str, Any]) -> ScoreCache | None:
    if not cache.get("enabled", True):
        return None
    return ScoreCache(Path(os.path.expanduser(str(cache["path"]))))


def cached(judge: Judge, cache: ScoreCache | None, chunk: int = 16) -> Judge:
    return judge if cache is None else CachedJudge(judge, cache, chunk=chunk)


def preemptible(judge: Judge, cache: Mapping[str, Any]) -> Judge:
    """`judge` behind the request cache (`cache/*.yaml`), fed one cache chunk at a time with
    preemption signals held until each chunk is committed (harness.shard.PreemptibleJudge)."""
    from harness.shard import PreemptibleJudge

    chunk = cache.get("chunk", 16)
    return PreemptibleJudge(cached(judge, open_cache(cache), chunk), chunk)


def load_documents(task: Mapping[str, Any], data: Mapping[str, Any]) -> list[Document]:
    """The task's documents: fetched/verified into data.dir (from data.mirror when set), sliced,
    then cut to shard `task.shard_index` of `task.num_shards` when those are set."""
    from harness.data import TASKS, load_task
    from harness.data.fetch import ensure_data

    name = str(task["name"])
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; known: {', '.join(sorted(TASKS))}")
    spec = TASKS[name]
    data_dir = Path(os.path.expanduser(str(data["dir"])))
    kwargs = {}
    if name == "jsonl":
        kwargs["path"] = task.get("path")
    else:
        ensure_data(data_dir, mirror=data.get("mirror"), only=[name, "zepo"])
    offset = int(_get(task, "offset", 0))
    limit = task.get("docs")
    docs = load_task(name, data_dir=data_dir, limit=None if limit is None else offset + int(limit), **kwargs)
    docs = docs[offset:]
    aspect = task.get("aspect")
    if aspect is not None and spec.aspects and aspect not in spec.aspects:
        raise ConfigError(f"unknown aspect {aspect!r} for task {name!r}; known: {', '.join(spec.aspects)}")
    # task.num_shards / task.shard_index (absent = unsharded): a contiguous block of the slice.
    from harness.shard import select_shard, shard_spec

    return select_shard(docs, shard_spec(task))
