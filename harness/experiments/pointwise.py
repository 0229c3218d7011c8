"""The `pointwise` experiment: the ZEPO paper's Table 1 Scoring and G-Eval rows.

    python -m harness.run experiment=pointwise task=newsroom task.aspect=coherence
    python -m harness.run -m experiment=paper/table1_pointwise backend=vllm model=llama3_8b_instruct \
        task=newsroom task.aspect=coherence,relevance,informativeness,fluency

The judge reads the digits 1-5 (its answer labels are set to them here); the scoring and the
correlations are harness/zepo/pointwise.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import open_dict

from harness.errors import ConfigError
from harness.runtime.context import experiment
from harness.zepo.pointwise import run_pointwise


def main(cfg: Any, out_dir: Path) -> dict[str, Any]:
    """Hydra entry: the judge with digit labels, the documents, then run_pointwise."""
    with open_dict(cfg):
        cfg.model.labels = list(cfg.experiment.labels)
        cfg.model.tie_label = None
    with experiment(cfg, out_dir) as ctx:
        if ctx.aspect is None:
            raise ConfigError("pointwise scoring needs the aspect it rates: set task.aspect=...")
        return run_pointwise(
            ctx.judge,
            ctx.docs,
            task=cfg.task.name,
            aspect=ctx.aspect,
            out_dir=out_dir,
            instruction=cfg.experiment.get("instruction"),
            tracker=ctx.tracker,
            max_candidates=cfg.task.get("max_candidates"),
            progress=bool(cfg.progress),
            extra={"model": cfg.model.get("name"), "paper_table": cfg.experiment.get("paper_table")},
        )
