"""The `sensitivity` experiment: how much paraphrasing the instruction moves a judge (ZEPO §2).

    python -m harness.run experiment=sensitivity experiment.paraphrases=20
    python -m harness.run experiment=sensitivity experiment.from_file=outputs/zepo/<run>/history.jsonl

The study itself (scores, analysis, Figures 2-4): harness/zepo/study.py (Figure 3: figure3.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.metrics.settings import MetricsSettings
from harness.runtime.context import experiment
from harness.zepo.optimizers import log_rejections, show_progress
from harness.zepo.paraphrases import generate_paraphrases, load_paraphrases
from harness.zepo.study import run_sensitivity


def main(cfg: Any, out_dir: Path) -> dict[str, Any]:
    """Hydra entry: the instruction, its paraphrases (file or optimizer), then run_sensitivity."""
    exp = cfg.experiment
    with experiment(cfg, out_dir) as ctx:
        if exp.get("from_file"):
            instructions = load_paraphrases(exp.from_file)
            reference = "instruction 0 (the first of experiment.from_file)"
        else:
            initial = ctx.instruction()
            optimizer = ctx.optimizer()
            log_rejections(optimizer, Path(out_dir) / "rejections.jsonl")
            show_progress(optimizer, bool(cfg.progress))
            paraphrases = generate_paraphrases(
                optimizer,
                initial,
                int(exp.paraphrases),
                int(cfg.seed),
                ctx.aspect,
                progress=bool(cfg.progress),
            )
            instructions = ([initial] if exp.include_initial else []) + paraphrases
            reference = (
                "the initial instruction"
                if exp.include_initial
                else "paraphrase 0 (experiment.include_initial=false: the initial instruction is not judged)"
            )
        return run_sensitivity(
            ctx.judge,
            ctx.docs,
            instructions,
            task=cfg.task.name,
            aspect=ctx.aspect,
            family=ctx.family,
            out_dir=out_dir,
            tracker=ctx.tracker,
            max_candidates=cfg.task.get("max_candidates"),
            shuffles=int(exp.shuffles),
            seed=int(cfg.seed),
            ranking=str(exp.ranking),
            progress=bool(cfg.progress),
            extra={"model": cfg.model.get("name")},
            metrics=MetricsSettings.of(cfg.metrics),
            reference=reference,
            shuffle=bool(exp.get("shuffle_candidates", False)),
        )
