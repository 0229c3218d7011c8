"""The `judge` experiment: score a task/aspect/instruction over documents, in both orders.

    python -m harness.run experiment=judge task=summeval task.aspect=coherence

Writes into the run directory:
- `judgments.jsonl`: one row per ordered pair (doc id, candidate ids, answer-token logprobs, P(A),
  both candidates' human scores), plus one `content_free` row used for contextual calibration;
- `results.json`: every metric with and without each debiasing, recomputable from the JSONL alone,
  and `judge_work`: prompts the model scored, tokens it ran, the trie minimum of the run's prompts,
  prompts/s and the model's share of the judging step's wall time (harness.judging.judge_work);
- the report card (drawn by the run context, harness/metrics/card.py): `card.md` and
  `card_reliability.png`, `card_p_a_by_order.png`, `card_answer_mass.png`, also in W&B.
Every judge call goes through the request cache, so a killed run restarts without re-scoring.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.heap import release_freed_memory
from harness.judges.base import Judge
from harness.judging import (
    document_fingerprints,
    iter_requests,
    judge_documents,
    judge_work,
    work_counters,
)
from harness.metrics import write_run
from harness.metrics.length import candidate_lengths
from harness.metrics.settings import MetricsSettings
from harness.records import Document, Tracker
from harness.runtime.attempts import ATTEMPTS, summed_calls
from harness.runtime.context import experiment
from harness.runtime.tracking import log_judge_results


def run_judge(
    judge: Judge,
    docs: Sequence[Document],
    *,
    task: str,
    aspect: str | None,
    instruction: str,
    family: str,
    out_dir: str | Path,
    tracker: Tracker | None = None,
    max_candidates: int | None = None,
    shuffles: int = 100,
    seed: int = 0,
    progress: bool = True,
    metrics: MetricsSettings | None = None,
) -> dict[str, Any]:
    """Judge every ordered pair, write judgments.jsonl and results.json, log the metrics (and their
    intervals over the documents, `metrics`: metrics.bootstrap and metrics.level, None: the defaults)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    before, start = work_counters(judge), time.perf_counter()
    judgments, p_cf = judge_documents(
        judge,
        docs,
        aspect=aspect,
        instruction=instruction,
        family=family,
        max_candidates=max_candidates,
        progress=progress,
    )
    work = judge_work(
        judge,
        lambda: iter_requests(docs, instruction, family, max_candidates),
        before,
        time.perf_counter() - start,
    )
    release_freed_memory()  # the requests' prompts and the judge's windows, dropped
    results = write_run(
        out,
        judgments,
        p_cf,
        task=task,
        aspect=aspect,
        family=family,
        instruction=instruction,
        judge_identity=judge.identity,
        numerics=getattr(judge, "numerics", None),
        n_docs=len(docs),
        shuffles=shuffles,
        seed=seed,
        metrics=metrics,
        lengths=candidate_lengths(docs),
        extra={
            "judge_calls": getattr(judge, "calls", None),
            "judge_calls_all_attempts": _all_attempts_calls(out),
            "judge_work": work,
            "documents_sha256": document_fingerprints(docs),
        },
    )
    if tracker is not None:
        log_judge_results(tracker, results, judgments, docs)
    return results


def _all_attempts_calls(out: Path) -> int | None:
    """Model calls of every attempt on this run directory (attempts.jsonl: killed and resumed ones
    included, this one up to its last committed chunk); `judge_calls` counts this attempt only."""
    return summed_calls(out)["calls"] if (out / ATTEMPTS).is_file() else None


def main(cfg: Any, out_dir: Path) -> dict[str, Any]:
    """Hydra entry (harness.run): documents, instruction and judge from the config -> run_judge."""
    with experiment(cfg, out_dir) as ctx:
        instruction = ctx.instruction()
        docs = ctx.docs
        return run_judge(
            ctx.judge,
            docs,
            task=cfg.task.name,
            aspect=ctx.aspect,
            instruction=instruction,
            family=ctx.family,
            out_dir=out_dir,
            tracker=ctx.tracker,
            max_candidates=cfg.task.get("max_candidates"),
            shuffles=int(cfg.experiment.shuffles),
            seed=int(cfg.seed),
            progress=bool(cfg.progress),
            metrics=MetricsSettings.of(cfg.metrics),
        )
