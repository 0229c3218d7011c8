"""The A-BB step of a run: settings from `experiment.*`, choose the bound -> calibrate -> M(D) ->
verify, and its record (bounded_scores.jsonl, abb.json, results.json, the tracker).

f(D) (harness.abb.scores) -> i.i.d. estimation neighbours (harness.abb.neighbours; one-item edits
are re-judged alone and spliced into f(D), whatever the cache) -> FRESH neighbours from another seed stream
-> identity neighbours (jitter, on the coordinates a neighbour re-judges, through the uncached judge)
-> abb.run_abb: the largest certified alpha (harness.abb.certify), sigma, M(D) = alpha f(D) +
(1 - alpha) mu + Z, and the fresh check with its verdict -> rankings and retained signal
before/after (harness.abb.retained).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import abb
from harness.abb import retained
from harness.abb.config import AbbConfig, abb_config
from harness.abb.edits import FORMATTING, KINDS, MODES
from harness.abb.neighbours import SPLIT_SEEDS, Neighbours, NeighbourSpec
from harness.abb.scores import FIELDS, ScoreVector
from harness.errors import ConfigError, located
from harness.files import write_jsonl_atomic
from harness.records import Tracker
from harness.results import write_results

BASELINES = {"arena_hard": "gpt-4-0314", "arena_bench": "gpt-4-0314"}
"""`baseline: auto`: Arena-Hard's baseline; arena-bench-v1 has the same model's answers."""
KIND_GROUPS = {"formatting": tuple(FORMATTING)}
"""Shorthands accepted in experiment.kinds."""


def where(field: str) -> str:
    return located("experiment", field=field)


@dataclass(frozen=True)
class Settings:
    """Everything the A-BB step needs from `experiment.*` (see conf/experiment/abb.yaml)."""

    tau: float | None
    """Distance bound in raw score units (wins when given), else None."""
    tau_fraction: float | None
    """tau as a fraction of the score range hi - lo when tau is None (the paper: 0.5 on a 1-5 scale = 1/8)."""
    split: abb.DeltaSplit
    """delta and how it is spent (bound + noise + est)."""
    allowed: tuple[str, ...]
    """Bound families that may win (experiment.bound), or ("plugin",) for the official estimate."""
    mean_ucb: str
    """Mean bound under Markov: best | hoeffding | bernstein."""
    calibration: dict[str, Any]
    """Keyword arguments of abb.calibrate (mu, mu_value, alpha, alpha_fraction, alpha_min, sigma_*, dp_epsilon)."""
    clip: bool
    """Project M(D) onto the score scale (non-expansive)."""
    mode: str
    """one_item (Hamming-1) | whole_set."""
    kinds: tuple[str, ...]
    """Neighbour kinds (harness.abb.edits.KINDS)."""
    fields: tuple[str, ...]
    """Inputs formatting/paraphrase kinds edit: answer | question | instruction."""
    estimate: int
    """Estimation neighbours m."""
    verify: int
    """Fresh verification neighbours (0 = no check)."""
    jitter: dict[str, Any]
    """{samples, remove}: identity neighbours re-judged uncached, and whether to subtract (context claim)."""
    bootstrap: int
    """Bootstrap rounds of the ranking intervals."""
    seed: int
    """Root of every seed (plans, noise, bootstrap)."""

    def plan(self, split: str, m: int) -> NeighbourSpec:
        """What `judge_neighbours` draws for one split; each split has a seed of its own."""
        return NeighbourSpec(
            split,
            m,
            self.kinds,
            self.mode,
            self.fields,
            int(np.random.SeedSequence([self.seed, SPLIT_SEEDS[split]]).generate_state(1)[0]),
        )

    def tau_for(self, scale: tuple[float, float]) -> float:
        """tau in raw units: given, or tau_fraction of the scale's range."""
        return float(self.tau) if self.tau is not None else float(self.tau_fraction) * (scale[1] - scale[0])


def _kinds(value: Any) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else list(value or [])
    out: list[str] = []
    for n in names:
        out += KIND_GROUPS.get(str(n), (str(n),))
    bad = [k for k in out if k not in KINDS]
    if not out or bad:
        raise ConfigError(
            f"unknown neighbour kind {bad[0] if bad else None!r}; choose from "
            f"{list(KIND_GROUPS) + list(KINDS)}",
            where=where("kinds"),
        )
    return tuple(dict.fromkeys(out))


def _allowed(bound: str) -> tuple[str, ...]:
    if bound not in abb.CHOICES:
        raise ConfigError(f"bound must be one of {abb.CHOICES}, got {bound!r}", where=where("bound"))
    return abb.BOUNDS if bound == "auto" else (bound,)


def settings_from(exp: AbbConfig | Mapping[str, Any], seed: int) -> Settings:
    """Validated settings from the typed config (a run's `experiment` node or a mapping, read as
    AbbConfig: its defaults are the schema's); the delta split gives nothing to an unused noise or
    estimation term."""
    c = abb_config(exp)
    allowed, sigma_mode, dp = _allowed(str(c.bound)), str(c.sigma_mode), c.dp_epsilon
    tau, frac_tau = c.tau, c.tau_fraction
    if tau is not None:
        frac_tau = None  # a raw tau given on the command line wins over the default fraction
    elif frac_tau is None:
        raise ConfigError(
            "set experiment.tau (raw units) or experiment.tau_fraction (of the score range)",
            where=where("tau"),
        )
    noise = c.delta_split.noise
    noise = (
        (0.0 if sigma_mode == "zero" and dp is None else 0.45) if noise in (None, "auto") else float(noise)
    )
    est = 0.0 if allowed in (("plugin",), ("certain_cap",)) else float(c.delta_split.est)
    split = abb.split_delta(float(c.delta), noise_fraction=noise, est_fraction=est)
    mode = str(c.mode)
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {MODES}, got {mode!r}", where=where("mode"))
    fields = tuple(str(f) for f in c.fields)
    if any(f not in FIELDS for f in fields):
        raise ConfigError(f"fields must be among {sorted(FIELDS)}, got {list(fields)}", where=where("fields"))
    cal = {
        "mu_value": c.mu_value,
        "alpha": c.alpha,
        "alpha_fraction": c.alpha_fraction,
        "dp_epsilon": dp,
        "mu": str(c.mu),
        "alpha_min": float(c.alpha_min or 0.0),
        "sigma_mode": sigma_mode,
        "sigma_fraction": float(c.sigma_fraction),
    }
    return Settings(
        tau=None if tau is None else float(tau),
        tau_fraction=None if frac_tau is None else float(frac_tau),
        split=split,
        allowed=allowed,
        mean_ucb=str(c.mean_ucb),
        calibration=cal,
        clip=bool(c.clip),
        mode=mode,
        kinds=_kinds(c.kinds),
        fields=fields,
        estimate=int(c.estimate),
        verify=int(c.verify),
        jitter={"samples": int(c.jitter.samples or 0), "remove": bool(c.jitter.remove)},
        bootstrap=int(c.bootstrap),
        seed=int(seed),
    )


def check_feasible(s: Settings, scale: tuple[float, float], bounds: tuple[float, float]) -> float:
    """abb.preflight with these settings: refuse before any model is loaded or judged."""
    if s.jitter["remove"] and s.jitter["samples"] < 1:
        raise ConfigError(
            "jitter.remove needs jitter.samples >= 1 (identity neighbours to subtract)",
            where=where("jitter.samples"),
        )
    return abb.preflight(
        tau=s.tau_for(scale),
        split=s.split,
        n=s.estimate,
        B=bounds[0],
        B_parallel=bounds[1],
        allowed=s.allowed,
        method=s.mean_ucb,
        mu=s.calibration["mu"],
        alpha_min=s.calibration["alpha_min"],
        context=s.jitter["remove"] and s.calibration["dp_epsilon"] is None,
    )


# --- the A-BB step and its record --------------------------------------------------------------


def apply_abb(
    vector: ScoreVector,
    est: Neighbours,
    fresh: Neighbours | None,
    jitter: Neighbours | None,
    s: Settings,
    bounds: tuple[float, float],
    mode: str,
    *,
    coords: tuple[int, int] | None = None,
    all_noop: bool = False,
    coords_allowed: int | None = None,
) -> tuple[abb.AbbResult, np.ndarray]:
    """Choose the bound, calibrate (ConfigError when (tau, delta) cannot be met), apply M(D), verify.

    coords = (coordinates a jitter sample re-judged, coordinates a neighbour re-judges): they must
    match for jitter to be subtracted (one unit system); coords_allowed: the most coordinates one
    neighbour may move, checked on every fresh neighbour."""
    remove = jitter is not None and s.jitter["remove"] and len(jitter.vectors) > 0
    rng = np.random.default_rng([s.seed, 3])
    return abb.run_abb(
        vector.values,
        est.vectors,
        tau=s.tau_for(vector.scale),
        split=s.split,
        mode=mode,
        scale=vector.scale,
        rng=rng,
        allowed=s.allowed,
        method=s.mean_ucb,
        intrinsic=jitter.vectors if remove else None,
        coords=coords,
        fresh=fresh.vectors if fresh is not None and len(fresh.vectors) else None,
        bounds=bounds,
        clip=vector.scale if s.clip else None,
        all_noop=all_noop,
        coords_allowed=coords_allowed,
        **s.calibration,
    )


def jitter_report(
    jitter: Neighbours | None, base: np.ndarray, info: Mapping[str, Any], removed: bool
) -> dict:
    """What re-judging unchanged input where a neighbour re-judges measured, in neighbour units
    (rms = sqrt(mean ||f(D) - f(D)_rejudged||^2) per sample); `measured: false` if not measured."""
    if jitter is None or not len(jitter.vectors):
        return {"measured": False, **info}
    sq, _ = abb.squared_distances(base, jitter.vectors)
    return {
        "measured": True,
        "rms": float(np.sqrt(np.mean(sq))),
        "max_abs": float(np.max(np.abs(jitter.vectors - base))),
        "removed": removed,
        **info,
    }


def write_outputs(
    out: Path,
    vector: ScoreVector,
    bounded: np.ndarray,
    result: abb.AbbResult,
    extra: Mapping[str, Any],
    s: Settings,
    tracker: Tracker | None,
) -> dict[str, Any]:
    """bounded_scores.jsonl, abb.json, results.json and the W&B record; returns results.json."""
    models = [it.model for it in vector.items]
    groups = [it.doc_id for it in vector.items]
    kw = {"scale": vector.scale, "baseline": vector.baseline, "rounds": s.bootstrap, "seed": s.seed}
    rank = {
        "before": retained.rank_models(vector.values, models, groups, **kw),
        "after": retained.rank_models(bounded, models, groups, **kw),
    }
    sig = retained.retained(vector.values, bounded, models, rank["before"], rank["after"])
    ref = (
        retained.reference_agreement(vector.reference, vector.values, bounded, models)
        if vector.reference
        else None
    )
    write_jsonl_atomic(
        out / "bounded_scores.jsonl",
        [
            {"item": it.id, "doc_id": it.doc_id, "model": it.model, "original": float(o), "bounded": float(b)}
            for it, o, b in zip(vector.items, vector.values, bounded)
        ],
    )
    kept = {k: v for k, v in extra.items() if k != "documents_sha256"}  # results.json holds it, once
    bj = {**result.to_json(), **kept, "retained_signal": sig, "reference_agreement": ref}
    abb.write_json(out / "abb.json", bj)
    metrics = retained.flat_metrics(bj, sig, ref)
    results = {
        "experiment": "abb",
        "summary": bj["summary"],
        **{
            k: extra[k]
            for k in ("task", "judge", "numerics", "instruction", "documents_sha256")
            if k in extra
        },
        "scores": extra.get("scores"),
        "guarantee": {k: bj["guarantee"][k] for k in ("kind", "claimed", "status", "statement")},
        "verdict": (bj["verification"] or {}).get("verdict"),
        "metrics": metrics,
        "rankings": rank,
        "retained_signal": sig,
        "reference_agreement": ref,
        "judge_calls": extra.get("judge_calls"),
    }
    results = write_results(out / "results.json", results)
    if tracker is not None:
        tracker.log(
            {**metrics, **retained.numeric_leaves(bj, "abb"), **retained.numeric_leaves(rank, "rank")}
        )
        tracker.summary({k: v for k, v in metrics.items() if v is not None})
        tracker.log_table("models", *retained.model_rows(rank))
        tracker.log_table(
            "bounded_scores",
            ["item", "model", "original", "bounded"],
            [[it.id, it.model, float(o), float(b)] for it, o, b in zip(vector.items, vector.values, bounded)],
        )
    return results


def report(results: Mapping[str, Any]) -> str:
    """One line for the console: what is claimed, by which bound, and what the fresh check found."""
    m = results["metrics"]
    fmt = lambda x: "–" if x is None else f"{x:.4g}"  # noqa: E731
    noop = f", {m['noop_estimate']} no-op" if m.get("noop_estimate") else ""
    return (
        f"A-BB [{m['status']}]: d={m['d']} tau={fmt(m['tau'])} delta_claimed={fmt(m['delta_claimed'])} "
        f"alpha={fmt(m['alpha'])} ({m['bound_winner']}, t={fmt(m['threshold'])}; cap {fmt(m['alpha_cap'])}, "
        f"plug-in {fmt(m['alpha_plugin'])}) sigma={fmt(m['sigma'])}; Delta-hat {fmt(m['sensitivity_plugin'])} "
        f"from {m['n_estimate']} neighbours ({m['unchanged_estimate']} unchanged{noop}); fresh check "
        f"{m['violations']}/{m['trials']} > tau: {m.get('verdict_text') or m['verdict']} ({m['check_tests']} check); "
        "retained per-model Pearson "
        f"{fmt(m['model_pearson'])}, Spearman {fmt(m['model_spearman'])}"
    )
