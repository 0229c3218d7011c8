"""The `zepo` experiment: search for a fairer instruction, then evaluate initial vs best.

    python -m harness.run experiment=zepo task=summeval task.aspect=coherence
    python -m harness.run experiment=zepo_demo          # SmolLM2 judge + optimizer, a few minutes on CPU

What it writes: harness/zepo/run.py. Resume a killed run: the same command with
hydra.run.dir=<its run directory>.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from harness.errors import ConfigError
from harness.metrics.settings import MetricsSettings
from harness.runtime.context import RunContext, experiment
from harness.zepo import search
from harness.zepo.run import run_zepo
from harness.zepo.validation import aspect_word


def settings_from(cfg: Any) -> search.SearchSettings:
    """The search settings of a validated run config (harness.runtime.experiment_schema.ZepoExp)."""
    exp = OmegaConf.to_object(cfg.experiment)
    return exp.search_settings(seed=cfg.seed, max_candidates=cfg.task.max_candidates)


def prepare(ctx: RunContext) -> dict[str, Any]:
    """Everything run_zepo needs, built in a run context (tests call this too)."""
    cfg, exp = ctx.cfg, ctx.cfg.experiment
    # No aspect (preference data): the default instruction asks for overall preference, so the
    # optimizer keeps the word "overall" in every paraphrase.
    aspect = ctx.aspect or "overall"
    leak = bool(exp.leak_search_docs)
    search_docs, eval_docs = search.split_documents(
        ctx.docs, int(exp.search_docs), exp.get("eval_docs"), leak
    )
    initial = ctx.instruction()  # a bad instruction file is refused before any weights load
    if ctx.aspect is None and aspect_word(aspect, initial).lower() not in initial.lower():
        raise ConfigError(
            "ZEPO keeps the aspect's word in every paraphrase, and without task.aspect that word is "
            "'overall', which this instruction does not say: set task.aspect=<the word it asks about>"
        )
    return {
        "judge": ctx.judge,
        "optimizer": ctx.optimizer(),
        "search_docs": search_docs,
        "eval_docs": eval_docs,
        "initial": initial,
        "task": cfg.task.name,
        "aspect": aspect,
        "family": ctx.family,
        "settings": settings_from(cfg),
        "progress": bool(cfg.progress),
        "leak_search_docs": leak,
        "intervals": MetricsSettings.of(cfg.metrics),
        "extra": {"model": cfg.model.get("name"), "paper_table": exp.get("paper_table")},
    }


def main(cfg: Any, out_dir: Path) -> dict[str, Any]:
    """Hydra entry: documents split into search/eval, judge, optimizer, tracker -> run_zepo."""
    with experiment(cfg, out_dir) as ctx:
        return run_zepo(**prepare(ctx), out_dir=out_dir, tracker=ctx.tracker)
