"""The `abb` experiment: A-BB bias-bounded scores with a guarantee that is checked, not assumed.

    python -m harness.run experiment=abb task=arena_bench model=llama3_8b_instruct backend=vllm
    python -m harness.run experiment=abb experiment.scores=file experiment.file.path=likert.jsonl \
        'experiment.file.scale=[1,10]'
    python -m harness.run -m experiment=abb_sweep model=llama3_8b_instruct backend=vllm   # the grid
    python -m harness.run -m experiment=abb_zepo experiment.instruction.path=<zepo run>/best_instruction.txt
    python -m harness.runtime.abb_sweep multirun/<name>/<stamp>    # table, plots, instructions side by side

The pipeline and its outputs: harness/abb/run.py. A (tau, delta) no data could meet is refused
before any model is loaded (`abb.preflight`); one the measured sensitivity cannot meet is refused
after estimation (neighbours.jsonl is kept). The optimizer model (conf/optimizer) is wired in here
for llm_paraphrase neighbours: harness.abb takes a paraphraser and never imports harness.zepo.

Writes into the run directory: bounded_scores.jsonl (item, doc_id, model, original, bounded),
neighbours.jsonl (every neighbour: split, edits, squared distance, changed coordinates), abb.json
(AbbResult.to_json() + scores, neighbours, jitter, retained signal), results.json (metrics for
harness.runtime.collect, rankings before/after, retained signal), W&B (every number, a models table).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from harness import abb
from harness.abb.neighbours import (
    EditMaker,
    Neighbours,
    judge_neighbours,
    neighbour_rows,
    summarise,
)
from harness.abb.paraphrase import AnswerParaphraser
from harness.abb.run import (
    BASELINES,
    Settings,
    apply_abb,
    check_feasible,
    jitter_report,
    report,
    settings_from,
    where,
    write_outputs,
)
from harness.abb.scores import (
    UNIT,
    PairwiseScorer,
    ScoreVector,
    load_file_scores,
    reference_scores,
    select_items,
)
from harness.errors import ConfigError, DataError, located
from harness.files import read_text, write_json_atomic, write_jsonl_atomic
from harness.judging import document_fingerprints
from harness.results import write_results
from harness.runtime.context import RunContext, experiment
from harness.zepo.optimizers import show_progress
from harness.zepo.paraphrases import load_paraphrases


def resolve_instructions(ctx: RunContext, aspect: str) -> tuple[str, list[str]]:
    """The run's instruction (default | zepo | text | file, e.g. a ZEPO best_instruction.txt) and
    the wordings 'instruction' neighbours draw from (templates with {aspect}, a file or a ZEPO
    history.jsonl), the run's own first."""
    exp = ctx.cfg.experiment
    spec = dict(exp.get("instruction") or {})
    if spec.get("source") == "file":
        path = Path(str(spec.get("path") or ""))
        if not path.is_file():
            raise ConfigError(
                f"instruction file {str(path)!r} not found; set experiment.instruction.path=...",
                where=where("instruction.path"),
            )
        text = read_text(path).strip()
    else:
        text = ctx.instruction(spec, aspect)
    others = [str(t).format(aspect=aspect) for t in (exp.get("instructions") or [])]
    if exp.get("instructions_file"):
        others += load_paraphrases(str(exp.instructions_file))
    return text, list(dict.fromkeys([text, *others]))


def run_judged(ctx: RunContext, s: Settings) -> dict[str, Any]:
    """f(D) from the judge's A/B logprobs, its neighbours re-judged, then the A-BB step."""
    cfg, exp, task = ctx.cfg, ctx.cfg.experiment, ctx.cfg.task
    docs, family = ctx.docs, ctx.family
    base_name = exp.get("baseline", "auto")
    baseline = BASELINES.get(task.name) if base_name == "auto" else base_name
    models = None if exp.get("models") is None else list(exp.models)
    items, skipped = select_items(
        docs, baseline=baseline, models=models, max_candidates=task.get("max_candidates")
    )
    aspect = exp.get("aspect") or ("helpfulness" if family == "instruction" else ctx.aspect)
    instruction, wordings = resolve_instructions(ctx, aspect)
    scorer = PairwiseScorer(
        None,
        docs,
        items,
        instruction=instruction,
        family=family,
        baseline=baseline,
        orders=str(exp.orders),
        progress=bool(cfg.progress),
    )
    bounds = scorer.bounds(s.mode)
    check_feasible(s, UNIT, bounds)  # before any model is loaded
    scorer.judge = ctx.judge
    vector = scorer.vector(reference_scores(docs, items, ctx.aspect, baseline))
    para, rewriter = paraphrasers(ctx, s)
    maker = EditMaker(scorer, wordings, para, aspect, rewriter)
    est = judge_neighbours(scorer, vector.values, maker, s.plan("estimate", s.estimate))
    fresh = (
        judge_neighbours(scorer, vector.values, maker, s.plan("verify", s.verify)) if s.verify > 0 else None
    )
    jitter, how = None, {"route": "not measured (experiment.jitter.samples=0)"}
    if s.jitter["samples"] > 0:
        rows, how = scorer.jitter(vector.values, samples=s.jitter["samples"], mode=s.mode, seed=s.seed)
        jitter = Neighbours("jitter", rows, tuple({"index": k} for k in range(len(rows))))
    extra = {
        "task": task.name,
        "judge": ctx.judge.identity,
        "numerics": getattr(ctx.judge, "numerics", None),
        "instruction": instruction,
        "scores": {
            "kind": vector.kind,
            "scale": list(vector.scale),
            "d": scorer.d,
            "baseline": baseline,
            "orders": scorer.orders,
            "n_docs": len(scorer.by_doc),
            "skipped_docs": skipped,
            "models": list(dict.fromkeys(it.model for it in items)),
        },
        "documents_sha256": document_fingerprints([d for d in docs if d.id in scorer.by_doc]),
    }
    coords = (how.get("coords"), scorer.d if s.mode == "whole_set" else 1)
    return finish(
        ctx,
        vector,
        est,
        fresh,
        jitter,
        how,
        s,
        bounds,
        s.mode,
        extra,
        coords=coords,
        all_noop=all(r.get("noop") for r in est.records),
        coords_allowed=scorer.coords_allowed(s.mode),
    )


def paraphrasers(ctx: RunContext, s: Settings) -> tuple[Any, Any]:
    """(instruction paraphraser, answer/question rewriter) for llm_paraphrase neighbours: both from the
    configured optimizer model (conf/optimizer); None when no neighbour needs them."""
    if "llm_paraphrase" not in s.kinds:
        return None, None
    opt = ctx.optimizer()
    show_progress(opt, bool(ctx.cfg.progress))
    rewriter = AnswerParaphraser(opt) if set(s.fields) - {"instruction"} else None
    return (opt if "instruction" in s.fields else None), rewriter


def run_file(ctx: RunContext, s: Settings) -> dict[str, Any]:
    """A user's score file (f(D) and its neighbours' rows): the A-BB step without a judge."""
    exp = ctx.cfg.experiment
    spec = exp.get("file") or {}
    if not spec.get("path"):
        raise ConfigError("experiment.scores=file needs experiment.file.path=...", where=where("file.path"))
    fs = load_file_scores(
        spec["path"],
        spec.get("scale"),
        exp.get("baseline") if exp.get("baseline") not in (None, "auto") else None,
    )
    vector, d = fs.vector, fs.vector.values.size
    k = fs.items_changed()  # the claim's edit budget: from the estimation rows only, never the fresh ones
    outside = fs.outside_budget(k)
    if outside:
        nid, n, at = outside[0]
        more = f" (and {len(outside) - 1} more)" if len(outside) > 1 else ""
        raise DataError(
            f"fresh neighbour {nid!r} (split=verify) lists {n} items{more}, outside the claim's edit "
            f"budget of {k} item(s) per neighbour set by the split=estimate rows; fresh rows are checked "
            "against the claim and never re-size it: drop them, or estimate with neighbours of the "
            f"same size",
            where=located(spec["path"], at or None, "neighbour"),
        )
    mode = abb.neighbour_mode(k, d)
    bounds = abb.distance_bounds(mode, d, vector.scale, items_changed=k)
    s = dataclasses.replace(s, estimate=len(fs.neighbours.get("estimate", [])))
    if not s.estimate:
        raise ConfigError(
            f"{spec['path']} has no neighbour rows with split=estimate", where=where("file.path")
        )
    check_feasible(s, vector.scale, bounds)

    def split(name: str) -> Neighbours | None:
        rows = fs.neighbours.get(name, [])
        return (
            Neighbours(name, fs.rows(name), tuple({"index": j, "id": nid} for j, (nid, _) in enumerate(rows)))
            if rows
            else None
        )

    jit = fs.neighbours.get("jitter", [])
    how = {
        "route": f"split=jitter rows of {spec['path']}",
        "coords": max((len(c) for _, c in jit), default=None),
    }
    extra = {
        "task": "file",
        "judge": None,
        "numerics": None,
        "instruction": None,
        "scores": {
            "kind": "file",
            "path": str(spec["path"]),
            "scale": list(vector.scale),
            "d": d,
            "baseline": vector.baseline,
            "items_changed": k,
        },
    }
    return finish(
        ctx,
        vector,
        split("estimate"),
        split("verify"),
        split("jitter"),
        how,
        s,
        bounds,
        mode,
        extra,
        coords=(how["coords"], k),
        coords_allowed=k,
    )


def finish(
    ctx: RunContext,
    vector: ScoreVector,
    est: Neighbours,
    fresh: Neighbours | None,
    jitter: Neighbours | None,
    how: Mapping[str, Any],
    s: Settings,
    bounds: tuple[float, float],
    mode: str,
    extra: dict[str, Any],
    *,
    coords: tuple[Any, int],
    all_noop: bool = False,
    coords_allowed: int | None = None,
) -> dict[str, Any]:
    """neighbours.jsonl first (kept when calibration refuses), then A-BB and every output."""
    out = ctx.out_dir
    write_jsonl_atomic(
        out / "neighbours.jsonl", neighbour_rows(vector.values, [n for n in (est, fresh, jitter) if n])
    )
    result, bounded = apply_abb(
        vector,
        est,
        fresh,
        jitter,
        s,
        bounds,
        mode,
        coords=coords,
        all_noop=all_noop,
        coords_allowed=coords_allowed,
    )
    removed = result.params.choice.claim == "context"
    extra = {
        **extra,
        "tau_fraction": s.tau_fraction,
        "neighbours": {
            "mode": mode,
            "kinds": list(s.kinds),
            "fields": list(s.fields),
            "bounds": {"B": bounds[0], "B_parallel": bounds[1]},
            "estimate": summarise(est, vector.values),
            "verify": summarise(fresh, vector.values),
        },
        "jitter": jitter_report(jitter, vector.values, how, removed),
        "judge_calls": ctx.calls,
    }
    results = write_outputs(out, vector, bounded, result, extra, s, ctx.tracker)
    print(report(results), flush=True)
    print(f"A-BB in one sentence: {results['summary']}", flush=True)
    return results


def in_multirun() -> bool:
    """True inside a Hydra multirun (`python -m harness.run -m ...`): refusals become refused cells."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def record_refusal(cfg: Any, out_dir: Path, s: Settings, err: abb.Refusal) -> dict[str, Any]:
    """A refused sweep cell: results.json (and abb.json) say refused and why; no claim, no scores."""
    exp = cfg.experiment
    scale = tuple(exp.file.scale) if exp.scores == "file" and exp.file.get("scale") else UNIT
    reason = str(err)
    metrics = {
        "tau": s.tau_for(scale),
        "tau_fraction": s.tau_fraction,
        "delta": s.split.total,
        "cell": "refused",
        "guarantee_kind": "refused",
        "status": f"refused: {reason}",
        "claimed": False,
        "verdict": None,
        "mode": s.mode,
        "refused": reason,
    }
    summary = (
        f"nothing is proven: this (tau, delta, mu, bound) cannot be met ({reason}); nothing was checked."
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        out_dir / "abb.json",
        {
            "summary": summary,
            "refused": reason,
            "tau": metrics["tau"],
            "tau_fraction": s.tau_fraction,
            "delta": s.split.total,
        },
    )
    results = {
        "experiment": "abb",
        "summary": summary,
        "refused": reason,
        "guarantee": {"kind": "refused", "claimed": False, "status": metrics["status"], "statement": summary},
        "verdict": None,
        "metrics": metrics,
    }
    results = write_results(out_dir / "results.json", results)
    print(f"A-BB [refused, recorded; the multirun goes on]: {reason}", flush=True)
    return results


def main(cfg: Any, out_dir: Path) -> dict[str, Any]:
    """Hydra entry (harness.run): settings first, so a bad (tau, delta) fails before any work.

    A (tau, delta, mu, bound, alpha_min) that cannot be met (`abb.Refusal`) exits 2 in a single run;
    in a multirun the cell is recorded as refused (results.json says why) and the sweep goes on."""
    s = settings_from(cfg.experiment, cfg.seed)
    try:
        with experiment(cfg, out_dir) as ctx:
            return run_file(ctx, s) if cfg.experiment.scores == "file" else run_judged(ctx, s)
    except abb.Refusal as e:
        if not in_multirun():
            raise
        return record_refusal(cfg, out_dir, s, e)
