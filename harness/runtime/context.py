"""The run context every experiment main works in: one place that builds the parts from the
composed config, records the attempt and closes the tracker.

    def main(cfg, out_dir):
        with experiment(cfg, out_dir) as ctx:
            judgments, p_cf = judge_documents(ctx.judge, ctx.docs, aspect=ctx.aspect, ...)
            ctx.tracker.log(...)

Parts are built lazily, with `hydra.utils.instantiate` where the config names a `_target_`:
- `ctx.judge`: conf/backend's builder for conf/model's weights (loaded on the first request the
  cache lacks: a run whose requests are all cached loads none), behind the request cache, fed
  one cache chunk at a time (the transformers judge: one streamed call, committed forward by
  forward) with preemption signals held (judges.wrappers);
  one loaded model per (model, backend) per process, so a local multirun loads it once;
- `ctx.optimizer()`: conf/optimizer's builder (reuses the judge's weights where they are the same);
- `ctx.tracker`: conf/wandb's Tracker (W&B group = the sweep when one runs);
- `ctx.docs`, `ctx.instruction(...)`: the task's documents (fetched, verified, sliced, sharded)
  and the instruction (init_prompts.json fetched on demand).
attempts.jsonl gets the attempt's start line at once, a line as requests are sent and after each
cache commit, and an end line. On leaving a completed run, every judged set gets its report card
(harness.metrics.card: answer mass, order consistency, calibration pictures) and the run's files
(results, judgments, figures) are logged to W&B as one artifact.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from harness.api_client import CompletionCache
from harness.data import load_task
from harness.data.fetch import ensure_data
from harness.data.jsonl import file_aspect, file_family
from harness.data.tasks import task_spec
from harness.errors import ConfigError, HarnessError
from harness.files import disk_full
from harness.judges.base import Judge
from harness.judges.cache import CachedJudge, ScoreCache
from harness.judges.cpu import numerics_line
from harness.judges.wrappers import PreemptibleJudge
from harness.judging import check_pair_count
from harness.metrics.card import render_cards
from harness.metrics.settings import MetricsSettings
from harness.prompts import resolve_instruction
from harness.records import Document
from harness.redaction import redact_overrides
from harness.report.page import write_report
from harness.report.prompt import config_view, judge_view
from harness.runtime.attempts import Attempt, record_attempt
from harness.runtime.shard import select_shard, shard_spec
from harness.runtime.sweep import cache_file, swept_overrides
from harness.runtime.tracking import Tracker, run_name

log = logging.getLogger(__name__)

ARTIFACT_SUFFIXES = (".json", ".jsonl", ".png", ".md", ".txt", ".html")
"""Run-directory files logged to W&B as the run's artifact (attempts.jsonl and wandb/ excluded)."""

_LOADED: dict[str, Judge] = {}


def build(node: Any, *args: Any, **kwargs: Any) -> Any:
    """hydra.utils.instantiate, with a HarnessError raised by the target passed through as itself
    (so it stays one clear line) instead of wrapped in Hydra's InstantiationException. Keyword
    arguments are passed as they are (`_recursive_=False`): a run config handed to the tracker holds
    `_target_` keys that must not be built again."""
    try:
        return instantiate(node, *args, _recursive_=False, **kwargs)
    except InstantiationException as e:
        cause = e.__cause__
        while cause is not None and not isinstance(cause, HarnessError):
            cause = cause.__cause__
        if cause is not None:
            raise cause from None
        raise


def container(node: Any) -> Any:
    """A config node as plain Python (resolved); plain values pass through."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def build_judge(model: Any, backend: Any) -> Judge:
    """The judge conf/backend builds (`_target_`) for conf/model's weights; one per process.

    A second, different (model, backend) replaces the first: never two models in memory. The first
    hands its engine over (a vLLM judge with the same engine settings keeps it running) or stops it."""
    key = json.dumps([container(model), container(backend)], sort_keys=True, default=str)
    if key not in _LOADED:
        judge = build(backend, judge_model=container(model))  # lazy: no weights loaded yet
        for old in _LOADED.values():
            hand_over = getattr(old, "hand_over", None)
            if callable(hand_over):
                hand_over(judge)
        _LOADED.clear()
        _LOADED[key] = judge
    return _LOADED[key]


def cache_path(cache: Mapping[str, Any]) -> Path:
    return Path(os.path.expanduser(str(cache["path"])))


def load_documents(task: Mapping[str, Any], data: Mapping[str, Any]) -> list[Document]:
    """The task's documents: fetched/verified into data.dir (from data.mirror when set), sliced
    [offset, offset + docs), then cut to shard `task.shard_index` of `task.num_shards`."""
    name = str(task["name"])
    spec = task_spec(name)
    data_dir = Path(os.path.expanduser(str(data["dir"])))
    kwargs = {}
    if name == "jsonl":
        kwargs["path"] = task.get("path")
    else:
        ensure_data(data_dir, mirror=data.get("mirror"), only=[name, "zepo"])
    offset = int(task.get("offset") or 0)
    limit = task.get("docs")
    docs = load_task(
        name,
        data_dir=data_dir,
        limit=None if limit is None else offset + int(limit),
        fmt=str(task.get("format") or "default"),
        **kwargs,
    )
    if offset >= len(docs):
        raise ConfigError(
            f"task.offset={offset} is past the end of task {name!r} ({len(docs)} documents); "
            f"set task.offset below {len(docs)}"
        )
    aspect = task.get("aspect")
    if aspect is not None and spec.aspects and aspect not in spec.aspects:
        raise ConfigError(
            f"unknown aspect {aspect!r} for task {name!r}; set task.aspect to one of "
            f"{', '.join(spec.aspects)}"
        )
    docs = select_shard(docs[offset:], shard_spec(task))
    check_pair_count(docs, task.get("max_candidates"))  # before the pairs take the memory
    return docs


class RunContext:
    """The composed config and the run directory, and the parts built from them on first use."""

    def __init__(
        self, cfg: DictConfig, out_dir: str | Path, *, group: str | None = None, name_suffix: str = ""
    ) -> None:
        self.cfg = cfg
        self.out_dir = Path(out_dir)
        self.group = group
        """W&B group when not sweep_group's (a merged run: its shards' sweep's)."""
        self.name_suffix = name_suffix
        """Appended to the W&B name (a merged run: `-merged`, beside its shards' runs)."""
        self._tracker: Tracker | None = None
        self._judge: Judge | None = None
        self.attempt: Attempt | None = None
        """This attempt's record (attempts.jsonl); the request cache reports each chunk to it."""

    # -- data ----------------------------------------------------------------------------------
    @cached_property
    def family(self) -> str:
        """task.family, else the task's; a user's JSONL: inferred from the file (`gold` -> instruction)."""
        task = self.cfg.task
        if task.name == "jsonl":
            return file_family(self.docs, task.get("family"))
        return str(task.get("family") or task_spec(task.name).family)

    @cached_property
    def aspect(self) -> str | None:
        """task.aspect; a user's JSONL: checked against its score keys (the only key when unset)."""
        task = self.cfg.task
        if task.name == "jsonl":
            return file_aspect(self.docs, task.get("aspect"), task.path)
        return task.get("aspect")

    @cached_property
    def docs(self) -> list[Document]:
        return load_documents(self.cfg.task, self.cfg.data)

    @property
    def data_dir(self) -> Path:
        return Path(os.path.expanduser(str(self.cfg.data.dir)))

    def instruction(self, spec: Any = None, aspect: str | None = None) -> str:
        """experiment.instruction (or `spec`) resolved; ZEPO's init_prompts.json fetched on demand."""
        spec = container(self.cfg.experiment.get("instruction") if spec is None else spec)
        if isinstance(spec, Mapping) and spec.get("source") == "zepo" and not spec.get("path"):
            ensure_data(self.data_dir, mirror=self.cfg.data.get("mirror"), only=["zepo"])
        return resolve_instruction(
            spec, aspect if aspect is not None else self.aspect, self.family, self.data_dir
        )

    # -- parts ---------------------------------------------------------------------------------
    @property
    def judge(self) -> Judge:
        """The model behind the request cache (cache.enabled) and preemption-safe chunks."""
        if self._judge is None:
            cache = self.cfg.cache
            # The cache first: a corrupt or read-only one is refused before any weights are loaded.
            own = self.cache_file != cache_path(cache)  # a sweep job's own file (cache.per_job)
            store = ScoreCache(self.cache_file, own_file=own) if cache.enabled else None
            judge = build_judge(self.cfg.model, self.cfg.backend)
            log.info(
                "judge %s; numerics: %s", judge.identity, numerics_line(getattr(judge, "numerics", None))
            )
            if store is not None:
                judge = CachedJudge(judge, store, chunk=int(cache.chunk), on_progress=self._progress)
            self._judge = PreemptibleJudge(judge, int(cache.chunk))
            self._record_judge()
        return self._judge

    @cached_property
    def cache_file(self) -> Path:
        """cache.path, or under hydra/launcher=slurm this job's own file beside it (cache.per_job,
        harness.runtime.sweep); the optimizer's completions.sqlite sits next to it."""
        return cache_file(self.cfg, cache_path(self.cfg.cache))

    def _record_judge(self) -> None:
        """The judge's identity (what determines its numbers: weights fingerprint, dtype, template,
        read-out, ...) in the W&B config, once both exist; computed without loading the weights."""
        update = getattr(self._tracker, "update_config", None)
        if self._judge is not None and update is not None:
            update({"judge_identity": self._judge.identity})

    def _progress(self, calls: int, in_flight: int) -> None:
        if self.attempt is not None:
            self.attempt.progress(calls, in_flight)

    @property
    def calls(self) -> int | None:
        """Requests sent to the model so far in this process (None before any judge was built)."""
        return None if self._judge is None else getattr(self._judge, "calls", None)

    def optimizer(self) -> Any:
        """conf/optimizer's paraphraser; completions cached beside the request cache."""
        cache = self.cfg.cache
        own = self.cache_file != cache_path(cache)  # a sweep job's own folder (cache.per_job)
        path = self.cache_file.with_name("completions.sqlite")
        store = CompletionCache(path, own_file=own) if cache.enabled else None
        return build(self.cfg.optimizer, judge_model=container(self.cfg.model), judge=self.judge, cache=store)

    @property
    def tracker(self) -> Tracker:
        if self._tracker is None:
            w = self.cfg.wandb
            self._tracker = build(
                w,
                out_dir=self.out_dir,
                run_config=container(self.cfg),
                job_type=w.get("job_type") or self.cfg.experiment.name,
                group=self.group or sweep_group(self.cfg),
                tags=list(w.get("tags") or []),
                name=f"{w.name}{self.name_suffix}" if w.get("name") else self.run_name,
            )
            self._record_judge()
        return self._tracker

    @property
    def run_name(self) -> str:
        """W&B's name for the run: experiment, task, aspect, model, then name_suffix (a merged
        run's), else in a sweep the job's overrides the sweep varies but its document shard, so a
        sweep's runs read as what tells them apart (wandb.name overrides it)."""
        c = self.cfg
        return (
            run_name(
                c.experiment.name,
                OmegaConf.select(c, "task.name"),
                OmegaConf.select(c, "task.aspect"),
                OmegaConf.select(c, "model.name"),
            )
            + self.name_suffix
            + ("" if self.name_suffix else "".join(f" {o}" for o in _swept()))
        )

    def close(self, completed: bool) -> None:
        """A completed run: its report cards (every judgments.jsonl) and report.html, then its files
        as a W&B artifact (the cards' pictures and the page included); then the tracker is finished."""
        if completed:
            self.report_cards()
            self.report_page()
        if self._tracker is None:
            return
        try:
            if completed:
                files = sorted(
                    p
                    for p in self.out_dir.rglob("*")
                    if p.is_file()
                    and p.suffix in ARTIFACT_SUFFIXES
                    and "wandb" not in p.relative_to(self.out_dir).parts
                    and not p.name.startswith(".")
                    and p.name != "attempts.jsonl"
                )
                self._tracker.log_artifact(
                    f"{self.run_name}-outputs", "run-outputs", files, {"experiment": self.cfg.experiment.name}
                )
        finally:
            self._tracker.finish()

    def report_page(self) -> None:
        """report.html (harness.report.page) from the run's files, the documents this run loaded and
        its judge's chat template (no weights); a run that built no judge (a merge of shards) gets
        the template as harness-report finds it, from the config. Like a card, a page that cannot
        be written is a warning, a full disk ends the run."""
        try:
            docs = self.__dict__.get("docs")  # only if the run loaded them (a cached_property)
            view = (
                None
                if docs is None
                else judge_view(self._judge)
                if self._judge is not None
                else config_view(container(self.cfg))
            )
            write_report(self.out_dir, docs, view)
        except (HarnessError, OSError) as e:
            if disk_full(e):
                raise
            log.warning("report.html not written: %s", e)

    def report_cards(self) -> None:
        """The report card of every judged set in the run directory (harness.metrics.card): printed,
        its pictures beside the judgments and in W&B, one warning when the answer mass is low. A
        card that cannot be drawn (an unreadable judgments file) is a warning: the run's results are
        already written. A full disk is not: it ends the run (one line, exit 2), and a rerun after
        freeing space finishes it from the cache."""
        try:
            c = self.cfg
            render_cards(
                self.out_dir,
                self._tracker,
                metrics=MetricsSettings.of(OmegaConf.select(c, "metrics", default=None)),
                seed=int(OmegaConf.select(c, "seed", default=0)),
            )
        except (HarnessError, OSError) as e:
            if disk_full(e):  # not a warning: a rerun after freeing space must finish the run
                raise
            log.warning("report card not rendered: %s", e)


SWEPT_WIDTH = 40
"""A swept value longer than this is cut with '...' in a W&B run name (an instruction text)."""


SHARD_KEYS = ("task.shard_index", "task.num_shards")
"""Overrides that split one run into document shards, not settings that tell runs apart."""


def _swept() -> list[str]:
    """This multirun job's overrides that the sweep varies, secrets blanked, long values cut: what
    tells its W&B run from the sweep's others ([] outside a multirun)."""
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return []
    hc = HydraConfig.get()
    found = swept_overrides(list(hc.overrides.task), Path(str(hc.sweep.dir)))
    out = []
    for o in redact_overrides(found):
        if o.partition("=")[0].lstrip("+") in SHARD_KEYS:
            continue  # the shards of one run share its name (their merge adds "-merged")
        key, _, value = o.partition("=")
        out.append(f"{key}={value if len(value) <= SWEPT_WIDTH else value[: SWEPT_WIDTH - 3] + '...'}")
    return out


def sweep_group(cfg: Any, sweep_dir: str | Path | None = None) -> str | None:
    """W&B group: wandb.group, else sweep.name, else '<sweep dir parent>/<stamp>' of `sweep_dir` or
    of the multirun this process runs a job of."""
    group = cfg.wandb.get("group") or OmegaConf.select(cfg, "sweep.name", default=None)
    if (
        group is None
        and sweep_dir is None
        and HydraConfig.initialized()
        and HydraConfig.get().mode == RunMode.MULTIRUN
    ):
        sweep_dir = HydraConfig.get().sweep.dir
    if group is None and sweep_dir is not None:
        group = "/".join(Path(str(sweep_dir)).parts[-2:])
    return None if group is None else str(group)


@contextlib.contextmanager
def experiment(cfg: DictConfig, out_dir: str | Path) -> Iterator[RunContext]:
    """A RunContext for one run: its attempt recorded in attempts.jsonl, its tracker closed."""
    ctx = RunContext(cfg, out_dir)
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    completed = False
    with record_attempt(ctx.out_dir, ctx) as ctx.attempt:
        try:
            yield ctx
            completed = True
        finally:
            ctx.close(completed)
