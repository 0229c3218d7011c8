"""The `zepo` experiment: search for a fairer instruction, then evaluate initial vs best.

    python -m harness.run experiment=zepo task=summeval task.aspect=coherence
    python -m harness.run experiment=zepo_demo          # SmolLM2 judge + optimizer, a few minutes on CPU

Writes into the run directory:
- `state.json`: the resumable search state (rerun with `hydra.run.dir=<this dir>` to resume);
- `history.jsonl`: every scored candidate (text, epoch, parent, all objectives, held-out Spearman);
- `best_instruction.txt`; `eval_initial/` and `eval_best/` (judgments.jsonl of the evaluation);
- `results.json`: initial vs best on the evaluation documents, raw and debiased (metrics.summarize);
- `search.png`: fairness and held-out Spearman per candidate.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness import metrics, zepo
from harness.errors import ConfigError
from harness.judge.base import Judge
from harness.tracking import Tracker, write_json_atomic, write_jsonl_atomic
from harness.types import Document

log = logging.getLogger(__name__)

CANDIDATE_COLUMNS = ["index", "epoch", "slot", "parent", "objective", "fairness", "fairness_prob", "confidence",
                     "calibration", "a_rate", "spearman_heldout", "selected", "text"]


# -- building the parts -------------------------------------------------------------------------
def build_optimizer(opt: Mapping[str, Any], model: Mapping[str, Any], cache: Mapping[str, Any],
                    judge: Judge | None = None):
    """An optimizer from `optimizer/*.yaml`; completions cached beside the request cache.

    A local optimizer with the judge's own weights reuses the judge's loaded model.
    """
    from harness.optimizers import ApiOptimizer, LocalOptimizer

    kind = opt.get("name", "local")
    kwargs = {k: v for k, v in opt.items() if k != "name" and v is not None}
    kwargs.setdefault("labels", tuple(model.get("labels") or ("A", "B")))
    kwargs["labels"] = tuple(kwargs["labels"])
    if cache.get("enabled", True):
        kwargs.setdefault("cache", Path(os.path.expanduser(str(cache["path"]))).with_name("completions.sqlite"))
    if kind == "api":
        cls = ApiOptimizer
        if "model" not in kwargs:
            raise ConfigError("optimizer.model is required for the api optimizer (e.g. gpt-3.5-turbo)")
    elif kind == "local":
        cls = LocalOptimizer
        inner = loaded_judge(judge)
        if str(kwargs.get("path")) == str(model.get("path")) and inner is not None:
            kwargs.update(model=inner.model, tokenizer=inner.tokenizer)
            kwargs.setdefault("name", model.get("name"))
    else:
        raise ConfigError(f"unknown optimizer {kind!r}; use api or local")
    allowed = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise ConfigError(f"optimizer.{unknown[0]} is not an option of the {kind} optimizer; "
                          f"known: {', '.join(sorted(allowed))}")
    return cls(**kwargs)


def loaded_judge(judge: Any) -> Any:
    """The judge holding loaded weights under any wrappers (PreemptibleJudge, CachedJudge), or None
    (an API judge's `model` is a name, not weights)."""
    from harness.judge.base import innermost

    inner = innermost(judge)
    return inner if hasattr(inner, "tokenizer") and not isinstance(getattr(inner, "model", ""), str) else None


def settings_from(exp: Mapping[str, Any], task: Mapping[str, Any], seed: int) -> zepo.SearchSettings:
    return zepo.SearchSettings(
        population=int(exp.get("population", 5)), epochs=int(exp.get("epochs", 5)),
        objective=str(exp.get("objective", "fairness")), seed=int(seed),
        max_candidates=task.get("max_candidates"), heldout_spearman=bool(exp.get("heldout_spearman", True)),
        ranking=str(exp.get("ranking", "pairs")), shuffles=int(exp.get("shuffles", 100)),
        dedup_attempts=int(exp.get("dedup_attempts", 3)))


def resolve_initial(exp: Mapping[str, Any], aspect: str | None, family: str, data: Mapping[str, Any]) -> str:
    """The starting instruction; ZEPO's init_prompts.json is fetched/verified on demand."""
    from harness.experiments.judge import resolve_instruction

    if aspect is None:
        raise ConfigError("ZEPO needs task.aspect (the aspect the instruction asks about)")
    spec = exp.get("instruction")
    data_dir = Path(os.path.expanduser(str(data["dir"])))
    if isinstance(spec, Mapping) and spec.get("source") == "zepo" and not spec.get("path"):
        from harness.data.fetch import ensure_data

        ensure_data(data_dir, mirror=data.get("mirror"), only=["zepo"])
    return resolve_instruction(spec, aspect, family, data_dir)


# -- the experiment -----------------------------------------------------------------------------
def evaluate(judge: Judge, docs: Sequence[Document], instruction: str, *, aspect: str | None, family: str,
             max_candidates: int | None, out_dir: Path, shuffles: int, seed: int,
             progress: bool) -> dict[str, Any]:
    """One instruction on the evaluation documents: judgments.jsonl and every metric."""
    from harness.experiments.judge import judge_documents, write_judgments

    judgments, p_cf = judge_documents(judge, docs, aspect=aspect, instruction=instruction, family=family,
                                      max_candidates=max_candidates, progress=progress)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_judgments(out_dir / "judgments.jsonl", judgments, p_cf)
    return {"instruction": instruction, "p_content_free": p_cf, "n_judgments": len(judgments),
            "metrics": metrics.summarize(judgments, p_cf=p_cf, shuffles=shuffles, seed=seed)}


def _candidate_row(c: zepo.ScoredCandidate, objective: str, best: int) -> list[Any]:
    o = c.objectives
    return [c.index, c.epoch, c.slot, c.parent, o[objective], o["fairness"], o["fairness_prob"], o["confidence"],
            o["calibration"], c.a_rate, c.spearman_heldout, c.index == best, c.text]


class _Recorder:
    """Writes history.jsonl after every candidate and logs per-candidate/per-epoch metrics."""

    def __init__(self, out_dir: Path, tracker: Tracker | None, objective: str) -> None:
        self.out_dir, self.tracker, self.objective = out_dir, tracker, objective
        self.history: list[zepo.ScoredCandidate] = []

    def candidate(self, c: zepo.ScoredCandidate, best: zepo.ScoredCandidate, fresh: bool) -> None:
        self.history.append(c)
        self.write(best.index)
        if fresh and self.tracker is not None:
            self.tracker.log({"candidate/objective": c.objectives[self.objective], "candidate/fairness": c.fairness,
                              "candidate/a_rate": c.a_rate, "candidate/confidence": c.confidence,
                              "candidate/spearman_heldout": _num(c.spearman_heldout),
                              "best/objective": best.objectives[self.objective]}, step=c.index)

    def epoch(self, epoch: int, scored: list[zepo.ScoredCandidate], best: zepo.ScoredCandidate) -> None:
        if self.tracker is None or not scored:
            return
        fair = [c.fairness for c in scored if not math.isnan(c.fairness)]
        self.tracker.log({"epoch": epoch, "epoch/best_fairness": best.fairness,
                          "epoch/best_objective": best.objectives[self.objective],
                          "epoch/best_spearman_heldout": _num(best.spearman_heldout),
                          "epoch/mean_fairness": sum(fair) / len(fair) if fair else math.nan},
                         step=scored[-1].index)

    def write(self, best: int) -> None:
        write_jsonl_atomic(self.out_dir / "history.jsonl",
                           [dict(c.to_row(), selected=c.index == best) for c in self.history])


def _num(x: float | None) -> float:
    return math.nan if x is None else float(x)


def run_zepo(judge: Judge, optimizer: Any, search_docs: Sequence[Document], eval_docs: Sequence[Document], *,
             initial: str, task: str, aspect: str | None, family: str, settings: zepo.SearchSettings,
             out_dir: str | Path, tracker: Tracker | None = None, progress: bool = False,
             leak_search_docs: bool = False, extra: Mapping[str, Any] | None = None,
             after_epoch: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Search on `search_docs`, then evaluate the initial and the best instruction on `eval_docs`.

    `after_epoch(epoch)` runs once each epoch is recorded (tests raise there to simulate a kill).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rec = _Recorder(out, tracker, settings.objective)

    def on_epoch(epoch: int, scored: list[zepo.ScoredCandidate], best: zepo.ScoredCandidate) -> None:
        rec.epoch(epoch, scored, best)
        if after_epoch is not None:
            after_epoch(epoch)

    search = zepo.Search(judge, optimizer, initial, aspect, family, search_docs, eval_docs, settings,
                         state_path=out / "state.json", progress=progress, on_candidate=rec.candidate,
                         on_epoch=on_epoch)
    result = search.run()
    rec.write(result.best.index)
    (out / "best_instruction.txt").write_text(result.best.text.strip() + "\n")
    final = {}
    for label, cand in (("initial", result.initial), ("best", result.best)):
        ev = evaluate(judge, eval_docs, cand.text, aspect=aspect, family=family,
                      max_candidates=settings.max_candidates, out_dir=out / f"eval_{label}",
                      shuffles=settings.shuffles, seed=settings.seed, progress=progress)
        search_view = {"objectives": dict(cand.objectives), "a_rate": cand.a_rate, "a_rate_prob": cand.a_rate_prob}
        final[label] = {**ev, "index": cand.index, "epoch": cand.epoch, "search": search_view}
    results = {
        "experiment": "zepo", "task": task, "aspect": aspect, "family": family, "judge": judge.identity,
        "optimizer": getattr(optimizer, "identity", type(optimizer).__name__), **dict(extra or {}),
        "judge_calls": getattr(judge, "calls", None),  # this process's cache misses (attempts.jsonl: all)
        "objective": settings.objective, "settings": asdict(settings),
        "leak_search_docs": leak_search_docs, "search_doc_ids": [d.id for d in search_docs],
        "eval_doc_ids": [d.id for d in eval_docs], "n_candidates": len(result.candidates),
        "improved": result.best.index != result.initial.index, **final,
    }
    write_json_atomic(out / "results.json", results)
    _report(results, result, out, tracker)
    return results


def _report(results: Mapping[str, Any], result: zepo.SearchResult, out: Path, tracker: Tracker | None) -> None:
    table = before_after_table(results)
    print(table, flush=True)
    (out / "summary.md").write_text(table + "\n")
    if tracker is None:
        return
    from harness import plots

    rows = [_candidate_row(c, result.objective, result.best.index) for c in result.candidates]
    tracker.log_table("candidates", CANDIDATE_COLUMNS, rows)
    tracker.summary({f"{label}/{k}": v for label in ("initial", "best")
                     for k, v in results[label]["metrics"]["none"].items()}
                    | {"best/instruction": result.best.text, "improved": int(results["improved"])})
    plots.log_figure(tracker, "search", plots.plot_search(result.candidates, out / "search.png",
                                                           objective=result.objective))


def before_after_table(results: Mapping[str, Any]) -> str:
    """Markdown: initial vs best, on the search documents (the objective, the decision rate) and on
    the evaluation documents (decision rate, mean P(A), Spearman raw and permutation-debiased)."""
    obj = results["objective"]
    kind = "mean P(A)" if obj == "fairness_prob" else "A-rate"
    head = (f"| instruction | search {obj} | search {kind} | eval A-rate | eval mean P(A) | Spearman (PairS) "
            "| Spearman (win rate) | Spearman (PairS) +perm. debias |")
    lines = [f"ZEPO {results['task']}/{results['aspect']}: {len(results['search_doc_ids'])} search docs, "
             f"{len(results['eval_doc_ids'])} eval docs, {results['n_candidates']} candidates scored",
             "", head, "|" + "---|" * 8]
    for label in ("initial", "best"):
        r = results[label]
        m, p = r["metrics"]["none"], r["metrics"]["permutation"]
        rate = r["search"]["a_rate_prob"] if obj == "fairness_prob" else r["search"]["a_rate"]
        lines.append(f"| {label} (#{r['index']}) | {_f(r['search']['objectives'][obj])} | {_f(rate)} "
                     f"| {_f(m['a_rate'])} | {_f(m['a_rate_prob'])} | {_f(m['spearman_pairs'])} | {_f(m['spearman'])} "
                     f"| {_f(p['spearman_pairs'])} |")
    return "\n".join(lines)


def _f(x: Any) -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def prepare(cfg: Any) -> dict[str, Any]:
    """Everything run_zepo needs, built from a composed config (tests call this too)."""
    from harness.build import build_judge, load_documents, preemptible
    from harness.data import TASKS

    task, exp = cfg.task, cfg.experiment
    family = task.get("family") or TASKS[task.name].family
    docs = load_documents(task, cfg.data)
    leak = bool(exp.get("leak_search_docs", False))
    search_docs, eval_docs = zepo.split_documents(docs, int(exp.search_docs), exp.get("eval_docs"), leak)
    initial = resolve_initial(exp, task.get("aspect"), family, cfg.data)
    settings = settings_from(exp, task, cfg.seed)
    # One cache chunk at a time, preemption signals held until it is committed (harness.shard).
    judge = preemptible(build_judge(cfg.model, cfg.backend), cfg.cache)
    optimizer = build_optimizer(cfg.optimizer, cfg.model, cfg.cache, judge)
    return {"judge": judge, "optimizer": optimizer, "search_docs": search_docs, "eval_docs": eval_docs,
            "initial": initial, "task": task.name, "aspect": task.get("aspect"), "family": family,
            "settings": settings, "progress": bool(cfg.get("progress", True)), "leak_search_docs": leak,
            "extra": {"model": cfg.model.get("name"), "paper_table": exp.get("paper_table")}}


def main(cfg: Any, out_dir: Path) -> dict[str, Any]:
    """Hydra entry: documents split into search/eval, judge, optimizer, tracker -> run_zepo."""
    from harness.experiments.judge import make_tracker
    from harness.shard import record_attempt

    parts = prepare(cfg)
    tracker = make_tracker(cfg, out_dir)
    try:
        with record_attempt(out_dir, parts["judge"]):  # one attempts.jsonl line per (re)start
            return run_zepo(**parts, out_dir=out_dir, tracker=tracker)
    finally:
        tracker.finish()
