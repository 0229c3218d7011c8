"""The sensitivity study's objectives across instructions and Figure 3 (ZEPO §2): each objective's
Spearman rho with the judge's Spearman against humans, with its percentile-bootstrap interval
(every instruction's values from the same resampled documents), and the candidate-order control
(`shuffle_candidates`, `earlier_preferred`): the debiased decision rate counts pairs i < j in the
order the candidates are judged. The study itself: harness.zepo.study."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.errors import DataError
from harness.metrics.correlation import rankable
from harness.metrics.interval import ACROSS, BOOT_METHOD, Interval, bootstrap_interval, sentence
from harness.metrics.summary import Summary
from harness.records import Document
from harness.zepo import plots

MODES = ("none", "permutation")
"""The variants of every study metric: raw and permutation-debiased."""
OBJECTIVES = {
    "fairness": "fairness",
    "fairness_prob": "fairness_prob",
    "confidence": "prob_gap",
    "calibration": "bc",
    "calibration_ece": "ece",
}
"""Objective name -> metric_set key. confidence = the official Norm Gap; calibration = -BC (label-free,
the official objective); calibration_ece = -ECE against human labels (needs them). Negated keys are
in NEGATED, so higher is better everywhere."""
NEGATED = ("calibration", "calibration_ece")
FIGURE3 = {
    "fairness": "fairness",
    "confidence": "confidence (Norm Gap)",
    "calibration": "calibration (-BC, label-free)",
    "calibration_ece": "-ECE vs human labels",
}
"""Figure 3's panels: objective -> panel name."""


def objective_values(rows: Sequence[Mapping[str, Any]], mode: str = "none") -> dict[str, list[float]]:
    """Each objective across instructions, oriented so that higher is better (calibration = -BC)."""
    out = {}
    for name, key in OBJECTIVES.items():
        sign = -1.0 if name in NEGATED else 1.0
        out[name] = [sign * _num(r[mode].get(key)) for r in rows]
    if mode == "permutation":  # the official --do_permutate fairness: from the upper-triangle rate
        out["fairness"] = [-abs(x - 0.5) for x in decision_rates(rows, mode)]
    return out


def decision_rates(rows: Sequence[Mapping[str, Any]], mode: str) -> list[float]:
    """The decision rate the paper plots: raw = the A-rate over all pairs; debiased = the official
    upper-triangle rate of the permutation-debiased matrix."""
    key = "a_rate_upper" if mode == "permutation" else "a_rate"
    return [_num(r[mode].get(key)) for r in rows]


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def analyse(rows: Sequence[Mapping[str, Any]], ranking_key: str) -> dict[str, Any]:
    """Spearman rho (with its p-value) and Pearson r of each objective with the Spearman against
    humans, the Spearman spread, and the quadratic fit on the decision rate; raw and debiased."""
    out: dict[str, Any] = {}
    for mode in MODES:
        sp = [_num(r[mode][ranking_key]) for r in rows]
        finite = [x for x in sp if math.isfinite(x)]
        coef = plots.quadratic_fit(decision_rates(rows, mode), sp)
        objectives = objective_values(rows, mode)
        out[mode] = {
            "spearman_with_spearman": {k: plots.spearman(v, sp) for k, v in objectives.items()},
            "rate_vs_spearman": plots.spearman(decision_rates(rows, mode), sp),
            "pearson_with_spearman": {k: plots.pearson(v, sp) for k, v in objectives.items()},
            "spearman_min": min(finite) if finite else math.nan,
            "spearman_max": max(finite) if finite else math.nan,
            "quadratic_fit_vs_a_rate": None if coef is None else [float(c) for c in coef],
        }
    return out


# -- Figure 3 with its interval, and the candidate-order control ----------------------------------
HUMAN = {"spearman_pairs": "PairS Spearman", "spearman": "win-rate Spearman"}
"""The Spearmans with humans that Figure 3's rho is computed against (results.json figure3 keys)."""
MODE_WORD = {"none": "raw", "permutation": "permutation-debiased"}
UNDEFINED = ("too_few", "constant_objective", "constant_spearman")
"""Why a bootstrap round's across-instruction rho is undefined (results.json figure3 ... undefined)."""


def objective_rounds(summary: Summary, name: str, mode: str) -> np.ndarray:
    """An objective's bootstrap rounds, (rounds,), oriented as `objective_values` (higher is better;
    debiased fairness from the upper-triangle rate)."""
    reps = summary.boot[mode]  # type: ignore[index]
    if mode == "permutation" and name == "fairness":
        return -np.abs(np.asarray(reps["a_rate_upper"], dtype=float) - 0.5)
    return (-1.0 if name in NEGATED else 1.0) * np.asarray(reps[OBJECTIVES[name]], dtype=float)


def round_spearman(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spearman rho across the columns (instructions) of x and y, row by row (bootstrap rounds):
    (rounds,) rho and (rounds,) reason codes: -1 defined, else the index in UNDEFINED (fewer than 3
    instructions with both values finite; a constant objective; a constant Spearman), where rho is
    NaN. Ties get mid-ranks and an instruction NaN in a round is left out of that round, as the
    point value (plots.spearman, scipy's spearmanr), both on `rankable` values (float noise is no
    ranking)."""
    from scipy.stats import rankdata

    x, y = (rankable(np.atleast_2d(np.asarray(v, dtype=float))) for v in (x, y))
    rounds = x.shape[0]
    rho, why = np.full(rounds, np.nan), np.full(rounds, -1, dtype=np.int64)
    ok = np.isfinite(x) & np.isfinite(y)
    full = ok.all(axis=1)

    def fill(rows: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> None:
        if xs.shape[1] < 3:
            why[rows] = 0
            return
        cx, cy = np.ptp(xs, axis=1) == 0, np.ptp(ys, axis=1) == 0
        rx, ry = rankdata(xs, axis=1), rankdata(ys, axis=1)
        dx, dy = rx - rx.mean(axis=1, keepdims=True), ry - ry.mean(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = (dx * dy).sum(axis=1) / np.sqrt((dx * dx).sum(axis=1) * (dy * dy).sum(axis=1))
        rho[rows] = np.where(cx | cy, np.nan, np.clip(r, -1, 1))
        why[rows] = np.where(cx, 1, np.where(cy, 2, -1))

    if full.any():
        fill(np.flatnonzero(full), x[full], y[full])
    for r in np.flatnonzero(~full):  # a round with some instruction undefined: its finite ones only
        fill(np.array([r]), x[r : r + 1, ok[r]], y[r : r + 1, ok[r]])
    return rho, why


def figure3_intervals(
    rows: Sequence[Mapping[str, Any]], summaries: Sequence[Summary], level: float, n_docs: int
) -> dict[str, Any]:
    """Figure 3 with its interval: for each Spearman with humans (HUMAN), raw and permutation-debiased,
    each FIGURE3 objective's Spearman rho across the instructions (the point, as `analyse`) and, per
    bootstrap round, the same rho from that round's values (every instruction's objective and
    Spearman recomputed on the SAME resampled documents) -> the t interval on the rounds' RMSE
    (harness/metrics/interval.py, BOOT_METHOD: a rank across a dozen instructions jumps as a document
    leaves, which the jackknife cannot follow; on Fisher's z scale as any correlation; none below
    12 documents, MIN_DOCUMENTS_OF).

    A round whose rho is undefined (UNDEFINED) is counted by reason; the interval is withheld when
    more than 1 - level of the rounds are undefined."""
    boot = summaries[0].boot if summaries else None
    if boot is not None:
        first = summaries[0].loo
        for s in summaries[1:]:
            if (
                s.loo is None
                or s.loo.ids != first.ids
                or (s.loo.boot_rounds, s.loo.seed) != (first.boot_rounds, first.seed)
            ):
                raise DataError(
                    "the instructions' bootstrap rounds resample different documents: Figure 3's "
                    "interval needs the same draws for every instruction",
                    where="sensitivity study",
                )
    rounds = 0 if boot is None else summaries[0].loo.boot_rounds  # type: ignore[union-attr]
    out: dict[str, Any] = {
        "method": f"{BOOT_METHOD}: each round's rho across instructions, every instruction's "
        "values from the same resampled documents",
        "level": float(level),
        "rounds": rounds,
        "n_instructions": len(rows),
        "n_docs": n_docs,
    }
    for human, said in HUMAN.items():
        out[human] = {}
        for mode in MODES:
            objectives = objective_values(rows, mode)
            sp = [_num(r[mode][human]) for r in rows]
            got = {}
            for name, panel in FIGURE3.items():
                point = plots.spearman(objectives[name], sp)
                label = (
                    f"{MODE_WORD[mode]} {panel} vs {said} across {point['n']} instructions "
                    f"on {n_docs} documents: rho"
                )
                entry: dict[str, Any] = {
                    **point,
                    "interval": None,
                    "rounds": rounds,
                    "defined_rounds": 0,
                    "undefined": {k: 0 for k in UNDEFINED},
                }
                iv = None
                if boot is not None:
                    r, why = figure3_rounds(summaries, name, mode, human)
                    entry["defined_rounds"] = int((why < 0).sum())
                    entry["undefined"] = {k: int((why == i).sum()) for i, k in enumerate(UNDEFINED)}
                    if math.isfinite(point["rho"]):
                        iv = bootstrap_interval(point["rho"], r, n_docs, level, ACROSS)
                        entry.update(iv.basis(), interval=iv.as_list())
                entry["sentence"] = _figure3_sentence(label, entry, iv, level)
                entry["lo"], entry["hi"] = entry["interval"] or (None, None)
                got[name] = entry
            out[human][mode] = got
    return out


def figure3_rounds(
    summaries: Sequence[Summary], name: str, mode: str, human: str
) -> tuple[np.ndarray, np.ndarray]:
    """Each bootstrap round's rho across instructions of objective `name` (variant `mode`) with the
    Spearman `human`, and why it is undefined where it is (round_spearman)."""
    x = np.stack([objective_rounds(s, name, mode) for s in summaries], axis=1)
    y = np.stack([np.asarray(s.boot[mode][human], dtype=float) for s in summaries], axis=1)  # type: ignore[index]
    return round_spearman(x, y)


def _figure3_sentence(label: str, entry: Mapping[str, Any], iv: Interval | None, level: float) -> str:
    undefined = {k: v for k, v in entry["undefined"].items() if v}
    why = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in undefined.items())
    if not math.isfinite(entry["rho"]):
        return f"{label} undefined (fewer than 3 instructions, or one side constant across them)"
    said = sentence(label, entry["rho"], iv, level)
    return said + (
        f" ({sum(undefined.values())} of {entry['rounds']} rounds undefined: {why})" if undefined else ""
    )


def shuffle_candidates(
    docs: Sequence[Document], seed: int, max_candidates: int | None = None
) -> list[Document]:
    """Each document's candidates (its first `max_candidates`, the ones judged) in a random order,
    seeded by (seed, document id) alone, so a document gets the same order in any slice and any
    run with that seed. Candidates keep their ids, texts and human scores; pairs are then formed
    from the new order (`experiment.shuffle_candidates`: the candidate-order control of Figure 3)."""
    out = []
    for doc in docs:
        cands = doc.candidates[:max_candidates] if max_candidates else doc.candidates
        digest = hashlib.sha256(f"{int(seed)}\0{doc.id}".encode()).digest()
        order = np.random.default_rng(int.from_bytes(digest[:8], "little")).permutation(len(cands))
        out.append(dataclasses.replace(doc, candidates=tuple(cands[int(k)] for k in order)))
    return out


def earlier_preferred(
    docs: Sequence[Document], aspect: str | None, max_candidates: int | None = None
) -> dict[str, Any]:
    """How often humans score the earlier-listed candidate higher, over the pairs i < j of each
    document's judged candidates in the order they are judged (the order the debiased decision
    rate, a_rate_upper, counts in): if humans always preferred the earlier one, debiased fairness
    would measure agreement with the labels."""
    counts = {"pairs": 0, "earlier_higher": 0, "later_higher": 0, "tied": 0, "unscored": 0}
    for doc in docs:
        cands = doc.candidates[:max_candidates] if max_candidates else doc.candidates
        for i in range(len(cands)):
            for j in range(i + 1, len(cands)):
                counts["pairs"] += 1
                hi, hj = (
                    (cands[i].scores.get(aspect), cands[j].scores.get(aspect)) if aspect else (None, None)
                )
                if hi is None or hj is None or not (math.isfinite(hi) and math.isfinite(hj)):
                    counts["unscored"] += 1
                else:
                    counts["earlier_higher" if hi > hj else "later_higher" if hi < hj else "tied"] += 1
    untied = counts["earlier_higher"] + counts["later_higher"]
    return {**counts, "share_earlier": counts["earlier_higher"] / untied if untied else None}
