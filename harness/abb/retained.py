"""What a bounded score keeps: model rankings before/after, and the retained correlation.

Rankings come two ways, each with group-bootstrap intervals (groups = questions/documents):
- by mean item score per model;
- by Bradley-Terry/Elo: with a baseline, each item is a pseudo-battle against it (the paper's
  Arena-Hard recipe, `harness.abb.ranking.pseudo_battles`); without one (win rates, a user's Likert
  file) every two models scored on the same question meet once, with the soft outcome
  1/2 + (s_a - s_b) / (2 (hi - lo)).
`retained` reports Pearson/Spearman/Kendall and the variance reduction between original and
bounded scores per model, per item, and between the Elo ratings (`harness.abb.ranking.signal_report`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.abb import ranking


def pairwise_battles(
    scores: Sequence[float], models: Sequence[str], groups: Sequence[str], scale: tuple[float, float]
) -> ranking.Battles:
    """One soft battle per (question, model pair) from the score difference on that question."""
    lo, hi = scale
    s = np.asarray(scores, dtype=float)
    by_group: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(str(g), []).append(i)
    a, b, y, grp = [], [], [], []
    for g, idx in by_group.items():
        for x in range(len(idx)):
            for z in range(x + 1, len(idx)):
                i, j = idx[x], idx[z]
                a.append(models[i])
                b.append(models[j])
                y.append(float(np.clip(0.5 + (s[i] - s[j]) / (2 * (hi - lo)), 0.0, 1.0)))
                grp.append(g)
    return ranking.make_battles(a, b, y, grp)


def bootstrap_means(
    scores: Sequence[float],
    models: Sequence[str],
    groups: Sequence[str],
    *,
    rounds: int,
    seed: int,
    confidence: float = 0.95,
) -> dict[str, dict[str, float]]:
    """Mean score per model with percentile intervals from resampling groups (questions)."""
    s = np.asarray(scores, dtype=float)
    names = list(dict.fromkeys(models))
    m_idx = np.array([names.index(m) for m in models])
    g_names = list(dict.fromkeys(str(g) for g in groups))
    g_idx = np.array([g_names.index(str(g)) for g in groups])
    rng = np.random.default_rng(seed)
    point = ranking.model_means(s, models)
    draws = np.full((rounds, len(names)), np.nan)
    for r in range(rounds):
        w = np.bincount(rng.integers(0, len(g_names), len(g_names)), minlength=len(g_names))[g_idx]
        tot = np.bincount(m_idx, weights=w * s, minlength=len(names))
        cnt = np.bincount(m_idx, weights=w, minlength=len(names))
        with np.errstate(invalid="ignore", divide="ignore"):
            draws[r] = tot / cnt  # a model absent from a resample gets NaN, ignored below
    tail = (1 - confidence) / 2 * 100
    out = {}
    for k, n in enumerate(names):
        col = draws[:, k][np.isfinite(draws[:, k])]
        lo, hi = (
            (np.percentile(col, tail), np.percentile(col, 100 - tail)) if col.size else (math.nan, math.nan)
        )
        out[n] = {"mean": point[n], "lo": float(lo), "hi": float(hi)}
    return out


def _with_ranks(table: Mapping[str, Mapping[str, float]], key: str) -> dict[str, dict[str, float]]:
    ordered = sorted(table, key=lambda n: -table[n][key])
    return {n: {**table[n], "rank": ordered.index(n) + 1} for n in table}


def rank_models(
    scores: Sequence[float],
    models: Sequence[str],
    groups: Sequence[str],
    *,
    scale: tuple[float, float],
    baseline: str | None,
    rounds: int,
    seed: int,
) -> dict[str, Any]:
    """{"mean": {model: {mean, lo, hi, rank}}, "elo": {model: {elo, lo, hi, rank}}, "anchor": name}."""
    means = _with_ranks(bootstrap_means(scores, models, groups, rounds=rounds, seed=seed), "mean")
    if baseline is not None:
        battles = ranking.pseudo_battles(scores, models, baseline, scale, groups)
        anchor = baseline
    else:
        battles = pairwise_battles(scores, models, groups, scale)
        anchor = next(iter(dict.fromkeys(models)))
    elo: dict[str, dict[str, float]] = {}
    if battles.y.size and len(battles.names) >= 2:
        elo = _with_ranks(ranking.bootstrap_elo(battles, anchor, rounds=rounds, seed=seed), "elo")
    return {"mean": means, "elo": elo, "anchor": anchor}


def _safe_signal(x: Sequence[float], y: Sequence[float]) -> dict[str, float] | None:
    return ranking.retained_signal(x, y) if len(x) >= 2 else None  # one model has no correlation


def retained(
    original: Sequence[float],
    bounded: Sequence[float],
    models: Sequence[str],
    before: Mapping[str, Any],
    after: Mapping[str, Any],
) -> dict[str, Any]:
    """Correlations and variance change, original vs bounded: per model, per item, Elo."""
    names = list(dict.fromkeys(models))
    mo, mb = ranking.model_means(original, models), ranking.model_means(bounded, models)
    out: dict[str, Any] = {
        "per_model": _safe_signal([mo[n] for n in names], [mb[n] for n in names]),
        "per_item": ranking.retained_signal(original, bounded),
    }
    common = [n for n in before["elo"] if n in after["elo"]]
    out["elo"] = _safe_signal(
        [before["elo"][n]["elo"] for n in common], [after["elo"][n]["elo"] for n in common]
    )
    out["top_model_kept"] = bool(names) and min(names, key=lambda n: before["mean"][n]["rank"]) == min(
        names, key=lambda n: after["mean"][n]["rank"]
    )
    return out


def reference_agreement(
    reference: Sequence[float | None],
    original: Sequence[float],
    bounded: Sequence[float],
    models: Sequence[str],
) -> dict[str, Any] | None:
    """Per-model agreement of judge means with an external reference (e.g. GPT-4 grades), before
    and after bounding, over items that have a reference; None when fewer than 2 models do."""
    keep = [i for i, r in enumerate(reference) if r is not None and math.isfinite(r)]
    sub_models = [models[i] for i in keep]
    if len(set(sub_models)) < 2:
        return None
    ref = ranking.model_means([reference[i] for i in keep], sub_models)
    names = list(ref)
    out: dict[str, Any] = {"n_items": len(keep), "n_models": len(names)}
    for label, vec in (("original", original), ("bounded", bounded)):
        mine = ranking.model_means([vec[i] for i in keep], sub_models)
        sig = ranking.retained_signal([ref[n] for n in names], [mine[n] for n in names])
        out[label] = {k: sig[k] for k in ("pearson", "spearman", "kendall")}
    return out


# --- flat records for tables, sweeps and W&B ---------------------------------------------------


def flat_metrics(
    bj: Mapping[str, Any], sig: Mapping[str, Any], ref: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The numbers a sweep table and the plots read (harness.runtime.collect: results.json 'metrics')."""
    v, g, bd = bj.get("verification") or {}, bj["guarantee"], bj["bounds"]
    cand = {c["name"]: c for c in bd["candidates"]}
    est = (bj.get("neighbours") or {}).get("estimate") or {}
    fresh = (bj.get("neighbours") or {}).get("verify") or {}
    out = {
        "tau": bj["tau"],
        "tau_fraction": bj.get("tau_fraction"),
        "delta": bj["delta"]["total"],
        "delta_markov": bj["delta"]["markov"],
        "delta_noise": bj["delta"]["noise"],
        "delta_est": bj["delta"]["est"],
        "delta_claimed": g["delta_claimed"],
        "d": bj["d"],
        "n_estimate": bj["n_neighbours"],
        "noop_estimate": est.get("noop"),
        "unchanged_estimate": est.get("unchanged_scores"),
        "noop_verify": fresh.get("noop"),
        "status": g["status"],
        "guarantee_kind": g["kind"],
        "cell": g["kind"],
        "mode": bj["mode"],
        "check_tests": v.get("tests"),
        "assumption_held": (v.get("assumption") or {}).get("held"),
        "claimed": g["claimed"],
        "bound_winner": bd["winner"]["name"],
        "threshold": bd["winner"]["threshold"],
        "alpha": bj["alpha"],
        "alpha_max": bj["alpha_max"],
        "alpha_cap": cand["certain_cap"]["alpha"],
        "alpha_plugin": cand["plugin"]["alpha"],
        "sigma": bj["sigma"],
        "sigma_max": bj["sigma_max"],
        "mu_value": bj["mu"]["value"],
        "radius": g["radius"],
        "sensitivity_plugin": bd["rms"],
        "sensitivity_ucb": bd["rms_ucb"],
        "verdict": v.get("verdict"),
        "verdict_text": v.get("verdict_text") or v.get("verdict"),
        "violations": v.get("violations"),
        "trials": v.get("trials"),
        "violation_rate": v.get("rate"),
        "violation_cp_low": v.get("cp_low"),
        "violation_cp_high": v.get("cp_high"),
        "worst_case": v.get("worst_case"),
        "verify_mean_distance": v.get("mean_distance"),
        "verify_max_distance": v.get("max_distance"),
    }
    for scope, key in (("per_model", "model"), ("per_item", "item"), ("elo", "elo")):
        block = sig.get(scope) or {}
        for stat in ("pearson", "spearman", "kendall", "variance_reduction"):
            out[f"{key}_{stat}"] = block.get(stat)
    if ref:
        for label in ("original", "bounded"):
            out[f"reference_spearman_{label}"] = ref[label]["spearman"]
    return out


def numeric_leaves(obj: Any, prefix: str) -> dict[str, float]:
    """Every numeric leaf of a nested dict as 'prefix/a/b' (bools as 0/1) for W&B."""
    if isinstance(obj, Mapping):
        return {k: v for key, val in obj.items() for k, v in numeric_leaves(val, f"{prefix}/{key}").items()}
    if isinstance(obj, bool):
        return {prefix: float(obj)}
    return {prefix: obj} if isinstance(obj, int | float) else {}


def model_rows(rank: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The models table (W&B): mean and Elo with intervals and ranks, before and after."""
    cols = [
        "model",
        "mean_before",
        "mean_after",
        "mean_rank_before",
        "mean_rank_after",
        "elo_before",
        "elo_lo_before",
        "elo_hi_before",
        "elo_after",
        "elo_lo_after",
        "elo_hi_after",
        "elo_rank_before",
        "elo_rank_after",
    ]
    b, a = rank["before"], rank["after"]
    names = list(dict.fromkeys([*b["mean"], *b["elo"]]))
    get = lambda t, n, k: t.get(n, {}).get(k)  # noqa: E731 - the baseline has an Elo but no mean
    rows = [
        [
            n,
            get(b["mean"], n, "mean"),
            get(a["mean"], n, "mean"),
            get(b["mean"], n, "rank"),
            get(a["mean"], n, "rank"),
            get(b["elo"], n, "elo"),
            get(b["elo"], n, "lo"),
            get(b["elo"], n, "hi"),
            get(a["elo"], n, "elo"),
            get(a["elo"], n, "lo"),
            get(a["elo"], n, "hi"),
            get(b["elo"], n, "rank"),
            get(a["elo"], n, "rank"),
        ]
        for n in names
    ]
    return cols, rows
