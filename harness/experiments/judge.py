"""The `judge` experiment: score a task/aspect/instruction over documents, in both orders.

Writes into the run directory:
- `judgments.jsonl`: one row per ordered pair (doc id, candidate ids, answer-token logprobs, P(A),
  both candidates' human scores), plus one `content_free` row used for contextual calibration;
- `results.json`: every metric with and without each debiasing, recomputable from the JSONL alone.
Every judge call goes through the request cache, so a killed run restarts without re-scoring.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import metrics
from harness.errors import ConfigError, DataError, located
from harness.judgments import judgment_from_row, judgment_to_row
from harness.judge.base import Judge
from harness.prompts import default_instruction, load_zepo_instructions, render
from harness.tracking import Tracker, write_json_atomic, write_jsonl_atomic
from harness.types import Candidate, Document, Judgment, PairRequest

log = logging.getLogger(__name__)

CONTENT_FREE = "N/A"


def ordered_pairs(doc: Document, max_candidates: int | None = None) -> list[tuple[Candidate, Candidate]]:
    cands = doc.candidates[:max_candidates] if max_candidates else doc.candidates
    return list(itertools.permutations(cands, 2))


def build_requests(docs: Sequence[Document], instruction: str, family: str, aspect: str | None,
                   max_candidates: int | None = None) -> tuple[list[PairRequest], list[Judgment]]:
    """Requests for all ordered pairs, and Judgment templates carrying the human labels."""
    requests, templates = [], []
    for doc in docs:
        for a, b in ordered_pairs(doc, max_candidates):
            requests.append(PairRequest(doc.id, a.id, b.id, render(doc, a, b, instruction, family)))
            gold = None if doc.gold is None else doc.gold == a.id
            templates.append(Judgment(doc.id, a.id, b.id, float("nan"), {}, a.scores.get(aspect) if aspect else None,
                                      b.scores.get(aspect) if aspect else None, gold))
    return requests, templates


def content_free_request(instruction: str, family: str) -> PairRequest:
    """Zhao et al. (2021): the same prompt with every content slot set to 'N/A'."""
    doc = Document("__content_free__", CONTENT_FREE,
                   (Candidate("cf_a", CONTENT_FREE), Candidate("cf_b", CONTENT_FREE)))
    return PairRequest(doc.id, "cf_a", "cf_b", render(doc, doc.candidates[0], doc.candidates[1], instruction, family))


def resolve_instruction(spec: Mapping[str, Any] | str | None, aspect: str, family: str,
                        data_dir: Path | None = None) -> str:
    """`null`/"default" -> this project's default; "zepo" -> ZEPO's init_prompts.json; else the text."""
    source = spec.get("source", "default") if isinstance(spec, Mapping) else ("default" if spec is None else "text")
    text = spec.get("text") if isinstance(spec, Mapping) else spec
    if source == "default":
        return default_instruction(aspect, family)
    if source == "zepo":
        path = Path(spec.get("path") or (Path(data_dir or ".") / "zepo" / "init_prompts.json"))  # type: ignore[union-attr]
        table = load_zepo_instructions(path)
        if aspect not in table:
            raise ConfigError(f"no ZEPO instruction for aspect {aspect!r}", where=str(path))
        return table[aspect]
    if source == "text":
        if not text or not str(text).strip():
            raise ConfigError("instruction.text is empty")
        return str(text)
    raise ConfigError(f"unknown instruction source {source!r}; use default, zepo or text")


def score(judge: Judge, requests: Sequence[PairRequest], progress: bool = True, desc: str = "judging"):
    """Score requests with a progress bar (rate and ETA) when the judge supports one."""
    from tqdm import tqdm

    with tqdm(total=len(requests), desc=desc, unit="pair", disable=not progress, dynamic_ncols=True) as bar:
        try:
            return judge.score_pairs(requests, progress=bar)  # type: ignore[call-arg]
        except TypeError:
            scores = judge.score_pairs(requests)
            bar.update(len(requests))
            return scores


def judge_documents(judge: Judge, docs: Sequence[Document], *, aspect: str | None, instruction: str,
                    family: str, max_candidates: int | None = None,
                    progress: bool = True) -> tuple[list[Judgment], float]:
    """All ordered pairs judged (cached), plus the content-free P(A)."""
    requests, templates = build_requests(docs, instruction, family, aspect, max_candidates)
    if not requests:
        raise DataError("no pairs to judge: every document needs at least two candidates")
    scores = score(judge, [*requests, content_free_request(instruction, family)], progress)
    judgments = [Judgment(t.doc_id, t.a_id, t.b_id, s.p_a, dict(s.token_logprobs), t.human_a, t.human_b, t.gold_a)
                 for t, s in zip(templates, scores)]
    return judgments, scores[-1].p_a


def write_judgments(path: Path, judgments: Sequence[Judgment], p_cf: float) -> None:
    rows = [judgment_to_row(j) for j in judgments]
    rows.append({"kind": "content_free", "p_a": p_cf})
    write_jsonl_atomic(path, rows)


def load_judgments(path: str | Path) -> tuple[list[Judgment], float | None]:
    """Read judgments.jsonl back: (pair judgments, content-free P(A) or None)."""
    judgments, p_cf = [], None
    path = Path(path)
    for i, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"not valid JSON ({e.msg})", where=located(path, i)) from None
        if row.get("kind") == "content_free":
            p_cf = float(row["p_a"])
        else:
            judgments.append(judgment_from_row(row, str(path), record=i))
    return judgments, p_cf


def write_run(out: Path, judgments: Sequence[Judgment], p_cf: float, *, task: str, aspect: str | None,
              family: str, instruction: str, judge_identity: str, n_docs: int, shuffles: int,
              seed: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """judgments.jsonl + results.json of one judged set (run_judge; harness.shard's merge).

    `extra` adds run facts that are not metrics (e.g. judge_calls: requests that missed the cache)."""
    write_judgments(out / "judgments.jsonl", judgments, p_cf)
    summary = metrics.summarize(judgments, p_cf=p_cf, shuffles=shuffles, seed=seed)
    results = {"task": task, "aspect": aspect, "family": family, "instruction": instruction,
               "judge": judge_identity, "n_docs": n_docs, "n_judgments": len(judgments),
               "p_content_free": p_cf, "shuffles": shuffles, "seed": seed, **(extra or {}), "metrics": summary}
    write_json_atomic(out / "results.json", results)
    return results


def run_judge(judge: Judge, docs: Sequence[Document], *, task: str, aspect: str | None, instruction: str,
              family: str, out_dir: str | Path, tracker: Tracker | None = None,
              max_candidates: int | None = None, shuffles: int = 100, seed: int = 0,
              progress: bool = True) -> dict[str, Any]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    judgments, p_cf = judge_documents(judge, docs, aspect=aspect, instruction=instruction, family=family,
                                      max_candidates=max_candidates, progress=progress)
    results = write_run(out, judgments, p_cf, task=task, aspect=aspect, family=family, instruction=instruction,
                        judge_identity=judge.identity, n_docs=len(docs), shuffles=shuffles, seed=seed,
                        extra={"judge_calls": getattr(judge, "calls", None)})
    summary = results["metrics"]
    if tracker is not None:
        tracker.log({f"{mode}/{k}": v for mode, m in summary.items() for k, v in m.items()})
        tracker.summary({f"{mode}/{k}": v for mode, m in summary.items() for k, v in m.items()})
        tracker.log_table("judgments", ["doc_id", "a_id", "b_id", "p_a", "human_a", "human_b"],
                          [[j.doc_id, j.a_id, j.b_id, j.p_a, j.human_a, j.human_b] for j in judgments])
    return results


def recompute(run_dir: str | Path, shuffles: int | None = None, seed: int | None = None) -> dict[str, Any]:
    """Metrics from judgments.jsonl alone (settings from results.json): must equal results.json."""
    run_dir = Path(run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    judgments, p_cf = load_judgments(run_dir / "judgments.jsonl")
    return metrics.summarize(judgments, p_cf=p_cf, shuffles=shuffles or results["shuffles"],
                             seed=results["seed"] if seed is None else seed)


def main(cfg: Any, out_dir: Path) -> dict[str, Any]:
    """Hydra entry: build judge, documents and tracker from cfg, then call run_judge."""
    from harness.build import build_judge, load_documents, preemptible
    from harness.data import TASKS
    from harness.shard import record_attempt

    task = cfg.task
    family = task.get("family") or TASKS[task.name].family
    docs = load_documents(task, cfg.data)
    aspect = task.get("aspect")
    instruction = resolve_instruction(cfg.experiment.get("instruction"), aspect, family, Path(str(cfg.data.dir)))
    # Chunk-at-a-time with preemption signals held until each chunk is cached (harness.shard).
    judge = preemptible(build_judge(cfg.model, cfg.backend), cfg.cache)
    tracker = make_tracker(cfg, out_dir)
    try:
        with record_attempt(out_dir, judge):
            return run_judge(judge, docs, task=task.name, aspect=aspect, instruction=instruction, family=family,
                             out_dir=out_dir, tracker=tracker, max_candidates=task.get("max_candidates"),
                             shuffles=cfg.experiment.get("shuffles", 100), seed=cfg.seed,
                             progress=cfg.get("progress", True))
    finally:
        tracker.finish()


def make_tracker(cfg: Any, out_dir: Path) -> Tracker:
    from omegaconf import OmegaConf

    w = cfg.wandb
    return Tracker(out_dir, mode=w.mode, project=w.project, entity=w.get("entity"), group=w.get("group"),
                   job_type=w.get("job_type") or cfg.experiment.name, name=w.get("name"),
                   config=OmegaConf.to_container(cfg, resolve=True), tags=list(w.get("tags") or []))
