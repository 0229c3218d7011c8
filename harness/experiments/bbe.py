"""The `bbe` experiment: A-BB bias-bounded scores with a guarantee that is checked, not assumed.

    python -m harness.run experiment=bbe task=arena_bench model=llama3_8b_instruct backend=vllm
    python -m harness.run experiment=bbe experiment.scores=file experiment.file.path=likert.jsonl \
        'experiment.file.scale=[1,10]'
    python -m harness.run -m experiment=bbe_sweep model=llama3_8b_instruct backend=vllm   # the grid
    python -m harness.bbe_plots multirun/bbe_grid/<stamp>                                  # its plots

f(D) (harness.experiments.scores) -> estimation neighbours (harness.neighbours; Hamming-1 edits are
re-judged alone and spliced into the cached f(D)) -> intrinsic jitter, measured by a route that
skips the request cache -> calibrate (tau, delta) -> M(D) = alpha f(D) + (1 - alpha) mu + Z ->
FRESH neighbours (never used for estimation) and fresh noise -> the violation rate with a
Clopper-Pearson interval -> rankings and retained signal before/after (harness.bbe.signal).
A (tau, delta) no data could meet is refused before any judging (`bbe.preflight`); one the
measured sensitivity cannot meet is refused after estimation (neighbours.jsonl is kept).

Writes into the run directory: bounded_scores.jsonl (item, doc_id, model, original, bounded),
neighbours.jsonl (every neighbour: split, edits, squared distance, changed coordinates), bbe.json
(BBEResult.to_json() + scores, neighbours, jitter, retained signal), results.json (metrics for
harness.collect, rankings before/after, retained signal), W&B (every number, a models table).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import bbe
from harness.bbe import signal
from harness.errors import ConfigError, located
from harness.experiments.bbe_neighbours import (
    SPLIT_SEEDS,
    EditMaker,
    Neighbours,
    NeighbourSpec,
    judge_neighbours,
    neighbour_rows,
    summarise,
)
from harness.experiments.scores import FIELDS, PairwiseScorer, ScoreVector
from harness.neighbours import FORMATTING, KINDS, MODES
from harness.tracking import Tracker, write_json_atomic, write_jsonl_atomic

log = logging.getLogger(__name__)

BASELINES = {"arena_hard": "gpt-4-0314", "arena_bench": "gpt-4-0314"}
"""`baseline: auto`: Arena-Hard's baseline; arena-bench-v1 has the same model's answers."""
KIND_GROUPS = {"formatting": tuple(FORMATTING)}
"""Shorthands accepted in experiment.kinds."""


def _where(field: str) -> str:
    return located("experiment", field=field)


@dataclass(frozen=True)
class Settings:
    """Everything the A-BB step needs from `experiment.*` (see conf/experiment/bbe.yaml)."""

    tau: float
    """Distance bound, raw score units."""
    split: bbe.DeltaSplit
    """delta and how it is spent (markov + noise + est)."""
    ucb: str
    """Sensitivity bound: none (plug-in) | hoeffding | bernstein."""
    calibration: dict[str, Any]
    """Keyword arguments of bbe.calibrate (mu, mu_value, alpha, alpha_fraction, alpha_min, sigma_*, dp_epsilon)."""
    clip: bool
    """Project M(D) onto the score scale (non-expansive)."""
    mode: str
    """one_item (Hamming-1) | whole_set."""
    kinds: tuple[str, ...]
    """Neighbour kinds (harness.neighbours.KINDS)."""
    fields: tuple[str, ...]
    """Inputs formatting/paraphrase kinds edit: answer | question | instruction."""
    estimate: int
    """Estimation neighbours m."""
    verify: int
    """Fresh verification neighbours (0 = no check)."""
    draws: int
    """Noise pairs per fresh neighbour (trials independent only at 1)."""
    jitter: dict[str, Any]
    """{docs, repeats, remove}: intrinsic-jitter measurement and whether to subtract it."""
    bootstrap: int
    """Bootstrap rounds of the ranking intervals."""
    seed: int
    """Root of every seed (plans, noise, bootstrap)."""

    def plan(self, split: str, m: int) -> NeighbourSpec:
        """What `judge_neighbours` draws for one split; each split has a seed of its own."""
        return NeighbourSpec(split, m, self.kinds, self.mode, self.fields,
                             int(np.random.SeedSequence([self.seed, SPLIT_SEEDS[split]]).generate_state(1)[0]))


def _kinds(value: Any) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else list(value or [])
    out: list[str] = []
    for n in names:
        out += KIND_GROUPS.get(str(n), (str(n),))
    bad = [k for k in out if k not in KINDS]
    if not out or bad:
        raise ConfigError(f"unknown neighbour kind {bad[0] if bad else None!r}; choose from "
                          f"{list(KIND_GROUPS) + list(KINDS)}", where=_where("kinds"))
    return tuple(dict.fromkeys(out))


def settings_from(exp: Mapping[str, Any], seed: int) -> Settings:
    """Validated settings; the delta split gives nothing to an unused noise or estimation term."""
    ucb, sigma_mode, dp = str(exp.get("ucb", "bernstein")), str(exp.get("sigma_mode", "zero")), exp.get("dp_epsilon")
    if ucb not in bbe.METHODS:
        raise ConfigError(f"ucb must be one of {bbe.METHODS}, got {ucb!r}", where=_where("ucb"))
    frac = dict(exp.get("delta_split") or {})
    noise = frac.get("noise", "auto")
    noise = (0.0 if sigma_mode == "zero" and dp is None else 0.45) if noise in (None, "auto") else float(noise)
    est = 0.0 if ucb == "none" else float(frac.get("est", 0.1))
    split = bbe.split_delta(float(exp.get("delta", 0.05)), noise_fraction=noise, est_fraction=est)
    mode = str(exp.get("mode", "one_item"))
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {MODES}, got {mode!r}", where=_where("mode"))
    fields = tuple(str(f) for f in (exp.get("fields") or ["answer"]))
    if any(f not in FIELDS for f in fields):
        raise ConfigError(f"fields must be among {sorted(FIELDS)}, got {list(fields)}", where=_where("fields"))
    kinds = _kinds(exp.get("kinds"))
    if "llm_paraphrase" in kinds and set(fields) != {"instruction"}:
        raise ConfigError("llm_paraphrase neighbours paraphrase the judge's instruction (the optimizer is "
                          "written for that): set experiment.fields=[instruction]", where=_where("fields"))
    cal = {k: exp.get(k) for k in ("mu_value", "alpha", "alpha_fraction", "dp_epsilon")}
    cal.update(mu=str(exp.get("mu", "fixed")), alpha_min=float(exp.get("alpha_min") or 0.0),
               sigma_mode=sigma_mode, sigma_fraction=float(exp.get("sigma_fraction", 0.5)))
    jit = dict(exp.get("jitter") or {})
    return Settings(
        tau=float(exp.get("tau", 0.5)), split=split, ucb=ucb, calibration=cal, clip=bool(exp.get("clip", True)),
        mode=mode, kinds=kinds, fields=fields, estimate=int(exp.get("estimate", 40)),
        verify=int(exp.get("verify", 100)), draws=int(exp.get("draws", 1)),
        jitter={"docs": jit.get("docs"), "repeats": int(jit.get("repeats", 1)), "remove": bool(jit.get("remove", False))},
        bootstrap=int(exp.get("bootstrap", 100)), seed=int(seed))


def check_feasible(s: Settings, d: int, bounds: tuple[float, float]) -> float:
    """bbe.preflight with these settings: refuse before any model is loaded or judged."""
    return bbe.preflight(tau=s.tau, split=s.split, d=d, n=s.estimate, bound=bounds[0], parallel_bound=bounds[1],
                         method=s.ucb, mu=s.calibration["mu"], alpha_min=s.calibration["alpha_min"],
                         jitter_removed=s.jitter["remove"] or s.calibration["dp_epsilon"] is not None)


# --- the A-BB step and its record --------------------------------------------------------------


def apply_abb(vector: ScoreVector, est: Neighbours, fresh: Neighbours | None, jitter: Neighbours | None,
              s: Settings, bounds: tuple[float, float], mode: str) -> tuple[bbe.BBEResult, np.ndarray]:
    """Estimate, calibrate (ConfigError when (tau, delta) cannot be met), apply M(D), verify."""
    remove = jitter is not None and s.jitter["remove"] and len(jitter.vectors) > 0
    rng = np.random.default_rng([s.seed, 3])
    return bbe.run_bbe(
        vector.values, est.vectors, tau=s.tau, split=s.split, mode=mode, scale=vector.scale, rng=rng,
        method=s.ucb, intrinsic=jitter.vectors if remove else None,
        fresh=fresh.vectors if fresh is not None and len(fresh.vectors) else None, draws=s.draws,
        bounds=bounds, clip=vector.scale if s.clip else None, **s.calibration)


def jitter_report(jitter: Neighbours | None, base: np.ndarray, info: Mapping[str, Any], removed: bool) -> dict:
    """What re-judging the unchanged input by a cache-free route measured (`measured: false` if not)."""
    if jitter is None or not len(jitter.vectors):
        return {"measured": False, **info}
    sq, _ = bbe.squared_distances(base, jitter.vectors)
    return {"measured": True, "rms": float(np.sqrt(np.mean(sq))),
            "max_abs": float(np.max(np.abs(jitter.vectors - base))), "removed": removed, **info}


def write_outputs(out: Path, vector: ScoreVector, bounded: np.ndarray, result: bbe.BBEResult,
                  extra: Mapping[str, Any], s: Settings, tracker: Tracker | None) -> dict[str, Any]:
    """bounded_scores.jsonl, bbe.json, results.json and the W&B record; returns results.json."""
    models = [it.model for it in vector.items]
    groups = [it.doc_id for it in vector.items]
    kw = {"scale": vector.scale, "baseline": vector.baseline, "rounds": s.bootstrap, "seed": s.seed}
    rank = {"before": signal.rank_models(vector.values, models, groups, **kw),
            "after": signal.rank_models(bounded, models, groups, **kw)}
    sig = signal.retained(vector.values, bounded, models, rank["before"], rank["after"])
    ref = signal.reference_agreement(vector.reference, vector.values, bounded, models) if vector.reference else None
    write_jsonl_atomic(out / "bounded_scores.jsonl", [
        {"item": it.id, "doc_id": it.doc_id, "model": it.model, "original": float(o), "bounded": float(b)}
        for it, o, b in zip(vector.items, vector.values, bounded)])
    bj = {**result.to_json(), **extra, "retained_signal": sig, "reference_agreement": ref}
    bbe.write_json(out / "bbe.json", bj)
    metrics = signal.flat_metrics(bj, sig, ref)
    results = {"experiment": "bbe", **{k: extra[k] for k in ("task", "judge", "instruction") if k in extra},
               "scores": extra.get("scores"), "guarantee_kind": bj["guarantee"]["kind"], "metrics": metrics,
               "rankings": rank, "retained_signal": sig,
               "reference_agreement": ref, "judge_calls": extra.get("judge_calls")}
    write_json_atomic(out / "results.json", results)
    if tracker is not None:
        tracker.log({**metrics, **signal.numeric_leaves(bj, "bbe"), **signal.numeric_leaves(rank, "rank")})
        tracker.summary({k: v for k, v in metrics.items() if v is not None})
        tracker.log_table("models", *signal.model_rows(rank))
        tracker.log_table("bounded_scores", ["item", "model", "original", "bounded"],
                          [[it.id, it.model, float(o), float(b)] for it, o, b in zip(vector.items, vector.values, bounded)])
    return results


# --- Hydra entry -------------------------------------------------------------------------------


def resolve_instructions(exp: Mapping[str, Any], aspect: str, family: str, data: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The run's instruction (default | zepo | text | file, e.g. a ZEPO best_instruction.txt) and
    the wordings 'instruction' neighbours draw from (templates with {aspect}, a file or a ZEPO
    history.jsonl), the run's own first."""
    from harness.experiments.sensitivity import load_paraphrases
    from harness.experiments.zepo import resolve_initial

    spec = dict(exp.get("instruction") or {})
    if spec.get("source") == "file":
        path = Path(str(spec.get("path") or ""))
        if not path.is_file():
            raise ConfigError(f"instruction file {str(path)!r} not found", where=_where("instruction.path"))
        text = path.read_text(encoding="utf-8").strip()
    else:
        text = resolve_initial(exp, aspect, family, data)
    others = [str(t).format(aspect=aspect) for t in (exp.get("instructions") or [])]
    if exp.get("instructions_file"):
        others += load_paraphrases(str(exp.instructions_file))
    return text, list(dict.fromkeys([text, *others]))


_JUDGES: dict[str, Any] = {}


def shared_judge(cfg: Any) -> Any:
    """One loaded judge per (model, backend) per process: a local multirun reuses it across jobs."""
    from omegaconf import OmegaConf

    from harness.build import build_judge

    key = json.dumps([OmegaConf.to_container(cfg.model, resolve=True),
                      OmegaConf.to_container(cfg.backend, resolve=True)], sort_keys=True, default=str)
    if key not in _JUDGES:
        _JUDGES.clear()  # never hold two models
        _JUDGES[key] = build_judge(cfg.model, cfg.backend)
    return _JUDGES[key]


def run_judged(cfg: Any, out_dir: Path, s: Settings) -> dict[str, Any]:
    from harness.build import load_documents, preemptible
    from harness.data import TASKS
    from harness.experiments.scores import reference_scores, select_items
    from harness.shard import record_attempt

    exp, task = cfg.experiment, cfg.task
    family = task.get("family") or TASKS[task.name].family
    docs = load_documents(task, cfg.data)
    base_name = exp.get("baseline", "auto")
    baseline = BASELINES.get(task.name) if base_name == "auto" else base_name
    models = None if exp.get("models") is None else list(exp.models)
    items, skipped = select_items(docs, baseline=baseline, models=models, max_candidates=task.get("max_candidates"))
    aspect = exp.get("aspect") or ("helpfulness" if family == "instruction" else task.get("aspect"))
    instruction, wordings = resolve_instructions(exp, aspect, family, cfg.data)
    scorer = PairwiseScorer(None, docs, items, instruction=instruction, family=family, baseline=baseline,
                            orders=str(exp.get("orders", "both")), progress=bool(cfg.get("progress", True)))
    bounds = scorer.bounds(s.mode)
    check_feasible(s, scorer.d, bounds)  # before any model is loaded
    judge = preemptible(shared_judge(cfg), cfg.cache)
    scorer.judge = judge  # signals held until each chunk is cached
    with record_attempt(out_dir, judge):  # one attempts.jsonl line per (re)start
        paraphraser = None
        if "llm_paraphrase" in s.kinds:
            from harness.experiments.zepo import build_optimizer

            paraphraser = build_optimizer(cfg.optimizer, cfg.model, cfg.cache, judge)
        vector = scorer.vector(reference_scores(docs, items, task.get("aspect"), baseline))
        maker = EditMaker(scorer, wordings, paraphraser, aspect)
        est = judge_neighbours(scorer, vector.values, maker, s.plan("estimate", s.estimate))
        fresh = judge_neighbours(scorer, vector.values, maker, s.plan("verify", s.verify)) if s.verify > 0 else None
        jitter, how = None, {"route": "not measured (experiment.jitter.repeats=0)"}
        if s.jitter["repeats"] > 0:
            rows, how = scorer.jitter(vector.values, docs=s.jitter["docs"], repeats=s.jitter["repeats"], seed=s.seed)
            jitter = Neighbours("jitter", rows, tuple({"index": k} for k in range(len(rows))))
        extra = {"task": task.name, "judge": judge.identity, "instruction": instruction,
                 "scores": {"kind": vector.kind, "scale": list(vector.scale), "d": scorer.d, "baseline": baseline,
                            "orders": scorer.orders, "n_docs": len(scorer.by_doc), "skipped_docs": skipped,
                            "models": list(dict.fromkeys(it.model for it in items))}}
        return finish(out_dir, vector, est, fresh, jitter, how, s, bounds, s.mode, extra, cfg, judge)


def run_file(cfg: Any, out_dir: Path, s: Settings) -> dict[str, Any]:
    from harness.experiments.scores import load_file_scores

    spec = cfg.experiment.get("file") or {}
    if not spec.get("path"):
        raise ConfigError("experiment.scores=file needs experiment.file.path", where=_where("file.path"))
    fs = load_file_scores(spec["path"], spec.get("scale"), cfg.experiment.get("baseline") if
                          cfg.experiment.get("baseline") not in (None, "auto") else None)
    vector, d = fs.vector, fs.vector.values.size
    k = fs.items_changed()
    mode = "one_item" if k == 1 else "whole_set"
    bounds = bbe.distance_bounds(mode, d, vector.scale, items_changed=k)
    s = dataclasses.replace(s, estimate=len(fs.neighbours.get("estimate", [])))
    if not s.estimate:
        raise ConfigError(f"{spec['path']} has no neighbour rows with split=estimate", where=_where("file.path"))
    check_feasible(s, d, bounds)

    def split(name: str) -> Neighbours | None:
        rows = fs.neighbours.get(name, [])
        return Neighbours(name, fs.rows(name), tuple({"index": j, "id": nid} for j, (nid, _) in enumerate(rows))) \
            if rows else None

    how = {"route": f"split=jitter rows of {spec['path']}"}
    extra = {"task": "file", "judge": None, "instruction": None,
             "scores": {"kind": "file", "path": str(spec["path"]), "scale": list(vector.scale), "d": d,
                        "baseline": vector.baseline, "items_changed": k}}
    return finish(out_dir, vector, split("estimate"), split("verify"), split("jitter"), how, s, bounds, mode,
                  extra, cfg, None)


def finish(out_dir: Path, vector: ScoreVector, est: Neighbours, fresh: Neighbours | None, jitter: Neighbours | None,
           how: Mapping[str, Any], s: Settings, bounds: tuple[float, float], mode: str, extra: dict[str, Any],
           cfg: Any, judge: Any) -> dict[str, Any]:
    """neighbours.jsonl first (kept when calibration refuses), then A-BB and every output."""
    from harness.experiments.judge import make_tracker

    write_jsonl_atomic(out_dir / "neighbours.jsonl", neighbour_rows(vector.values, [n for n in (est, fresh, jitter) if n]))
    result, bounded = apply_abb(vector, est, fresh, jitter, s, bounds, mode)
    removed = result.params.sensitivity.intrinsic is not None
    extra = {**extra, "neighbours": {"mode": mode, "kinds": list(s.kinds), "fields": list(s.fields),
                                     "bounds": {"B": bounds[0], "B_parallel": bounds[1]},
                                     "estimate": summarise(est, vector.values), "verify": summarise(fresh, vector.values)},
             "jitter": jitter_report(jitter, vector.values, how, removed),
             "judge_calls": getattr(judge, "calls", None)}
    tracker = make_tracker(with_sweep_group(cfg), out_dir)
    try:
        results = write_outputs(out_dir, vector, bounded, result, extra, s, tracker)
    finally:
        tracker.finish()
    print(report(results), flush=True)
    return results


def with_sweep_group(cfg: Any) -> Any:
    """W&B group = the sweep: wandb.group, else sweep.name, else (multirun) '<experiment>/<stamp>'."""
    from omegaconf import OmegaConf

    group = cfg.wandb.get("group") or OmegaConf.select(cfg, "sweep.name", default=None)
    if group is None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            group = "/".join(Path(str(HydraConfig.get().sweep.dir)).parts[-2:])
    return cfg if group is None else OmegaConf.merge(cfg, {"wandb": {"group": str(group)}})


def report(results: Mapping[str, Any]) -> str:
    m = results["metrics"]
    fmt = lambda x: "–" if x is None else f"{x:.4g}"  # noqa: E731
    kind = "" if results.get("guarantee_kind") == "distance" else " (DP variant: no tau claim)"
    return (f"A-BB{kind}: d={m['d']} tau={m['tau']} delta={m['delta']} alpha={fmt(m['alpha'])} sigma={fmt(m['sigma'])} "
            f"sensitivity plug-in {fmt(m['sensitivity_plugin'])} / bound {fmt(m['sensitivity_ucb'])}; fresh check "
            f"{m['violations']}/{m['trials']} > tau (CP upper {fmt(m['violation_cp_high'])}); retained per-model "
            f"Pearson {fmt(m['model_pearson'])}, Spearman {fmt(m['model_spearman'])}")


def main(cfg: Any, out_dir: Path) -> dict[str, Any]:
    """Hydra entry (harness.run): settings first, so a bad (tau, delta) fails before any work."""
    s = settings_from(cfg.experiment, cfg.seed)
    source = str(cfg.experiment.get("scores", "pairwise"))
    if source == "file":
        return run_file(cfg, out_dir, s)
    if source != "pairwise":
        raise ConfigError(f"scores must be 'pairwise' or 'file', got {source!r}", where=_where("scores"))
    return run_judged(cfg, out_dir, s)
