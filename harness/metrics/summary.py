"""Every metric of one judgment list, raw and under each debiasing: `summarize` -> results.json."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.judging import load_judgments, write_judgments
from harness.metrics.bootstrap import (
    SUPPORT,
    DocStats,
    LeaveOneOut,
    as_lists,
    doc_stats,
    no_interval_meta,
    paired_all,
    replicate,
    support,
)
from harness.metrics.calibration import calibration_arrays
from harness.metrics.correlation import view_correlations
from harness.metrics.debias import batch_p, contextual_p, permutation_p
from harness.metrics.interval import Interval, basis_of, kish_df
from harness.metrics.length import control_shift, controlled_p, length_bias
from harness.metrics.mass import answer_mass_stats_of
from harness.metrics.official import bc_prior_of, prob_gap_of, view_upper_a_rate
from harness.metrics.order import view_order_consistency
from harness.metrics.ranges import candidate_counts, decisions, intervals, unequal_withheld
from harness.metrics.rates import confidence_p, view_a_rate
from harness.metrics.settings import MetricsSettings, metrics_settings
from harness.metrics.views import Frame, build_frame
from harness.records import Judgment
from harness.results import RunResults, write_results

log = logging.getLogger(__name__)


def metric_set(
    judgments: Sequence[Judgment], shuffles: int = 100, seed: int = 0, bins: int = 10
) -> dict[str, float | int]:
    """Every metric of one judgment list, as plain floats/ints (NaN where undefined)."""
    return frame_metrics(build_frame(judgments), shuffles=shuffles, seed=seed, bins=bins)


def frame_metrics(
    frame: Frame,
    shuffles: int = 100,
    seed: int = 0,
    bins: int = 10,
    official_p: np.ndarray | None = None,
    stats_out: list[DocStats] | None = None,
) -> dict[str, float | int]:
    """`metric_set` of a Frame (its P(A) column); `official_p`: the column whose upper-triangle
    rate is `a_rate_upper` (the permutation variant's official arithmetic), default the frame's.
    `stats_out`, when given, receives the per-document statistics the bootstrap resamples."""
    views = frame.views()
    conf = confidence_p(frame.p)
    labelled = np.isfinite(frame.p) & np.isfinite(frame.label)
    cal = calibration_arrays(frame.p[labelled], frame.label[labelled], bins=bins)
    win_doc: dict[str, tuple[float, float]] = {}
    pairs_doc: dict[str, tuple[float, float]] = {}
    win = view_correlations(views, "winrate", shuffles, seed, win_doc)
    pairs = view_correlations(views, "pairs", shuffles, seed, pairs_doc)
    if stats_out is not None:
        stats_out.append(doc_stats(frame, win_doc, pairs_doc, official_p, bins))
    rate, rate_prob = view_a_rate(views, "argmax"), view_a_rate(views, "prob")
    tokens = frame.tokens
    upper_views = views if official_p is None else frame.with_p(official_p).views()
    return {
        "a_rate": rate,
        "a_rate_prob": rate_prob,
        **view_order_consistency(views),
        **answer_mass_stats_of(tokens.mass[tokens.readable]),
        "fairness": -abs(rate - 0.5),
        "fairness_prob": -abs(rate_prob - 0.5),
        "max_prob": conf["max_prob"],
        "entropy": conf["entropy"],
        "ece": cal["ece"],
        "brier": cal["brier"],
        "nll": cal["nll"],
        "accuracy": cal["accuracy"],
        "n_calibration": int(cal["n"]),
        "spearman": win["spearman"],
        "kendall": win["kendall"],
        "spearman_pairs": pairs["spearman"],
        "kendall_pairs": pairs["kendall"],
        "spearman_pairs_se": pairs["spearman_se"],
        "spearman_whole": win["spearman_whole"],
        "kendall_whole": win["kendall_whole"],
        "n_judgments": len(frame.p),
        "n_docs": len(views),
        # As the official ZEPO code (metrics/official.py): the upper-triangle decision rate (the
        # debiased rate of Figure 4 under "permutation", with the official arithmetic), the
        # label-free BC prior, the Norm Gap.
        "a_rate_upper": view_upper_a_rate(upper_views),
        "bc": bc_prior_of(frame),
        "prob_gap": prob_gap_of(frame),
    }


@dataclass(frozen=True)
class Summary:
    """Every metric of one judged set, raw and debiased, with its leave-one-document-out rows (None when off)."""

    metrics: dict[str, dict[str, float | int]]
    """variant ("none", "permutation", "batch", "contextual") -> metric_set."""
    replicates: dict[str, dict[str, np.ndarray]] | None
    """variant -> metric -> (rows,) values, row i with the i-th document (sorted ids) left out."""
    loo: LeaveOneOut | None
    masks: dict[str, dict[str, np.ndarray]] | None = None
    """variant -> metric -> (rows,) bool: the documents the metric rests on."""
    boot: dict[str, dict[str, np.ndarray]] | None = None
    """variant -> metric -> (bootstrap rounds,): the same metrics on percentile-bootstrap rounds over
    the documents (bootstrap.BOOTSTRAPPED metrics and Figure 3's rho take their RMSE from these)."""
    weights: dict[str, dict[str, np.ndarray]] | None = None
    """variant -> metric -> (rows,): the judgments each document gives the metric (bootstrap.SUPPORT's
    counts, in the rows' document order): a pooled ratio's paired t takes Kish's df from them."""
    decisions: dict[str, dict[str, np.ndarray]] | None = None
    """variant -> rate -> (rows,): each document's decisions (ranges.DECISIONS): what a rate's
    score interval counts a document as, at most."""
    candidates: tuple[int, int] = (0, 0)
    """The fewest and most candidates judged in a document: `versus` withholds the per-document
    correlations' paired intervals where they differ more than ranges.UNEQUAL-fold."""

    @property
    def level(self) -> float:
        return self.loo.level if self.loo is not None else math.nan

    def interval_objects(self) -> dict[str, dict[str, Interval | None]] | None:
        """variant -> metric -> Interval (with its documents and method)."""
        if self.replicates is None or self.masks is None:
            return None
        return {
            v: intervals(
                self.metrics[v],
                reps,
                self.masks[v],
                self.level,
                (self.boot or {}).get(v),
                (self.weights or {}).get(v),
                (self.decisions or {}).get(v),
            )
            for v, reps in self.replicates.items()
        }

    def intervals(self) -> dict[str, dict[str, list[float] | None]] | None:
        """variant -> metric -> [lo, hi] (results.json "intervals", mirroring "metrics")."""
        ivs = self.interval_objects()
        return None if ivs is None else {v: as_lists(got) for v, got in ivs.items()}

    def basis(self) -> dict[str, dict[str, Any]] | None:
        """variant -> metric -> {n_documents, method, note} (results.json "interval_basis", beside
        "intervals": what each interval rests on; note "too few documents to tell" where it has none)."""
        ivs = self.interval_objects()
        return None if ivs is None else {v: basis_of(got) for v, got in ivs.items()}

    def meta(self) -> dict[str, Any]:
        return self.loo.meta() if self.loo is not None else no_interval_meta()

    def versus(
        self, other: Summary, prefix: str = "", variant: str = "none", other_variant: str | None = None
    ) -> dict[str, dict[str, Any]]:
        """Paired differences other - self of every metric (the same documents left out in both)."""
        ov = other_variant or variant
        dfs = None
        if self.weights is not None and other.weights is not None:
            mine_w, theirs_w = self.weights[variant], other.weights[ov]
            dfs = {k: kish_df(w + theirs_w[k]) for k, w in mine_w.items() if k in theirs_w}
        mine = None if self.replicates is None else self.replicates[variant]
        theirs = None if other.replicates is None else other.replicates[ov]
        return paired_all(
            mine,
            theirs,
            self.metrics[variant],
            other.metrics[ov],
            self.loo.level if self.loo is not None else MetricsSettings.level,
            prefix,
            None if self.masks is None else self.masks[variant],
            None if other.masks is None else other.masks[ov],
            None if self.boot is None else self.boot[variant],
            None if other.boot is None else other.boot[ov],
            dfs,
            unequal_withheld(*both_candidates(self, other)),
        )

    def differences(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Each debiased variant minus the raw judgments, paired over the same documents."""
        return {
            f"{v} - none": self.versus(self, f"{v} - none: ", "none", v) for v in self.metrics if v != "none"
        }

    def results_fields(self) -> dict[str, Any]:
        """What results.json carries beside "metrics"."""
        ivs = self.interval_objects()
        return {
            "interval": self.meta(),
            "intervals": None if ivs is None else {v: as_lists(g) for v, g in ivs.items()},
            "interval_basis": None if ivs is None else {v: basis_of(g) for v, g in ivs.items()},
            "differences": self.differences(),
        }


def both_candidates(a: Summary, b: Summary) -> tuple[int, int]:
    """The fewest and the most candidates judged in a document of either run."""
    return min(a.candidates[0], b.candidates[0]), max(a.candidates[1], b.candidates[1])


def analyse(
    judgments: Sequence[Judgment],
    p_cf: float | None = None,
    shuffles: int = 100,
    seed: int = 0,
    bins: int = 10,
    with_intervals: MetricsSettings | None = None,
    only: Sequence[str] | None = None,
) -> Summary:
    """`summarize` with intervals over the documents (`with_intervals` None or its bootstrap 0: none;
    else the leave-one-document-out rows of harness/metrics/bootstrap.py at its level, with its
    bootstrap rounds). `only`: the variants to compute (default all; harness-compare and the coverage simulation need one)."""
    frame = build_frame(judgments)
    want = set(only or ("none", "permutation", "batch", "contextual"))
    variants = {"none": frame.p} if "none" in want else {}
    if "permutation" in want:
        variants["permutation"] = permutation_p(frame)
    if "batch" in want:
        variants["batch"] = batch_p(frame)
    if "contextual" in want and p_cf is not None and not math.isnan(p_cf):
        variants["contextual"] = contextual_p(frame, p_cf)
    elif (
        "contextual" in want and p_cf is not None
    ):  # the content-free probe stayed unreadable: only its view is lost
        log.warning(
            "the content-free probe's answer was unreadable (P(A) NaN: NaN/inf log-probs, or an API "
            "answer still unusable after every retry): the "
            "contextual-calibration view is left out; every other view is complete"
        )
    official = {"permutation": permutation_p(frame, "official")} if "permutation" in variants else {}
    iv = with_intervals
    loo = LeaveOneOut.over(frame.doc_ids, iv.level, iv.bootstrap, seed) if iv and iv.bootstrap else None
    w = None if loo is None else np.vstack([loo.columns(frame.doc_ids), loo.boot_columns(frame.doc_ids)])
    out, reps, masks, boot, weights, counts = {}, {}, {}, {}, {}, {}
    for k, p in variants.items():
        stats: list[DocStats] = []
        variant = frame.with_p(p)
        out[k] = frame_metrics(
            variant,
            shuffles=shuffles,
            seed=seed,
            bins=bins,
            official_p=official.get(k),
            stats_out=stats if loo is not None else None,
        )
        if loo is not None:
            first = next(iter(boot.values()), {})
            both = replicate(
                stats[0],
                w,
                None
                if not first
                else np.concatenate(
                    [next(iter(reps.values()))["answer_mass_median"], first["answer_mass_median"]]
                ),
            )
            reps[k] = {m: v[: loo.rounds] for m, v in both.items()}
            boot[k] = {m: v[loo.rounds :] for m, v in both.items()}
            masks[k] = {m: loo.row_mask(frame.doc_ids, v) for m, v in support(stats[0]).items()}
            where = loo.positions(frame.doc_ids)
            weights[k] = {m: np.bincount(where, stats[0].sums[c], len(loo.ids)) for m, c in SUPPORT.items()}
            counts[k] = decisions(stats[0].sums, where, len(loo.ids))
    on = loo is not None
    sizes = candidates_of(judgments)
    return Summary(
        out,
        reps if on else None,
        loo,
        masks if on else None,
        boot if on else None,
        weights if on else None,
        counts if on else None,
        (int(sizes["min"]), int(sizes["max"])),
    )


def summarize(
    judgments: Sequence[Judgment],
    p_cf: float | None = None,
    shuffles: int = 100,
    seed: int = 0,
    bins: int = 10,
) -> dict[str, dict[str, float | int]]:
    """`metric_set` of the raw judgments and of each debiased version: keys "none",
    "permutation", "batch" and, when `p_cf` is given, "contextual". The judgments are read into
    columns once; each variant is another P(A) column. The permutation variant's `a_rate_upper`
    uses the official arithmetic (debias.ARITHMETIC), as the official decision rate it is."""
    return analyse(judgments, p_cf=p_cf, shuffles=shuffles, seed=seed, bins=bins).metrics


def write_run(
    out: Path,
    judgments: Sequence[Judgment],
    p_cf: float,
    *,
    task: str,
    aspect: str | None,
    family: str,
    instruction: str,
    judge_identity: str,
    n_docs: int,
    shuffles: int,
    seed: int,
    extra: dict[str, Any] | None = None,
    metrics: MetricsSettings | None = None,
    lengths: Mapping[tuple[str, str], float] | None = None,
    numerics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """judgments.jsonl + results.json of one judged set (the judge experiment; shard merges).

    `metrics` (None: the defaults; its bootstrap 0: no intervals) and its level give "intervals"
    (variant -> metric -> [lo, hi], beside "metrics"), "interval_basis" (beside each: its documents,
    method and note, harness/metrics/interval.py), "interval" (how they were made) and
    "differences" (each debiased variant minus raw, paired). `lengths`
    ((document id, candidate id) -> words), when given, adds "length_bias" (metrics.length: the
    raw judgments' position and length coefficients with intervals from the same rows) and
    "candidate_words" (the lengths, so a shard merge can refit them).

    "candidates_per_document" ({min, max, note}): the note says how each metric weighs documents
    whose candidate counts differ more than 5-fold (harness/metrics/ranges.py), as the card does.
    `extra` adds run facts that are not metrics (e.g. judge_calls: requests that missed the cache).
    `numerics`: the judge's dtype, its source, engine and device (harness.judges.cpu.numerics).
    `n_unreadable`: pairs whose answer could not be read (flagged, P(A) NaN, unjudged by every metric)."""
    write_judgments(out / "judgments.jsonl", judgments, p_cf)
    summary = analyse(
        judgments, p_cf=p_cf, shuffles=shuffles, seed=seed, with_intervals=metrics_settings(metrics)
    )
    results = {
        "task": task,
        "aspect": aspect,
        "family": family,
        "instruction": instruction,
        "judge": judge_identity,
        "numerics": numerics,
        "n_docs": n_docs,
        "n_judgments": len(judgments),
        "n_unreadable": sum("unreadable" in j.flags for j in judgments),
        "candidates_per_document": candidates_of(judgments),
        "p_content_free": p_cf,
        **({"content_free_unreadable": True} if p_cf is not None and math.isnan(p_cf) else {}),
        "shuffles": shuffles,
        "seed": seed,
        **(extra or {}),
        "metrics": summary.metrics,
        **summary.results_fields(),
        **(
            {
                "length_bias": length_report(judgments, lengths, summary, shuffles, seed),
                "candidate_words": words_by_document(lengths),
            }
            if lengths is not None
            else {}
        ),
    }
    results = write_results(out / "results.json", results)
    return results


def candidates_of(judgments: Sequence[Judgment]) -> dict[str, object]:
    """results.json "candidates_per_document": the fewest and most candidates judged in a document,
    and a note when they differ more than ranges.UNEQUAL-fold (how each metric weighs them)."""
    per: dict[str, set[str]] = {}
    for j in judgments:
        per.setdefault(j.doc_id, set()).update((j.a_id, j.b_id))
    return candidate_counts(len(c) for c in per.values())


def words_by_document(lengths: Mapping[tuple[str, str], float]) -> dict[str, dict[str, float]]:
    """results.json "candidate_words" ({document: {candidate: words}}): what a shard merge refits from."""
    out: dict[str, dict[str, float]] = {}
    for (doc, cand), n in lengths.items():
        out.setdefault(doc, {})[cand] = n
    return out


def lengths_of(words: Mapping[str, Mapping[str, float]]) -> dict[tuple[str, str], float]:
    """`words_by_document` inverted."""
    return {(doc, cand): n for doc, per in words.items() for cand, n in per.items()}


LENGTH_CONTROLLED = ("spearman", "kendall", "spearman_pairs", "kendall_pairs", "a_rate", "accuracy")
"""The length-controlled metrics results.json reports (length_bias.controlled)."""


def length_report(
    judgments: Sequence[Judgment],
    lengths: Mapping[tuple[str, str], float],
    summary: Summary,
    shuffles: int,
    seed: int,
) -> dict[str, Any]:
    """results.json "length_bias": the fit with intervals (metrics.length) and "controlled": the
    LENGTH_CONTROLLED metrics on length-controlled P(A), their intervals and their paired
    difference from the raw judgments' (the same documents left out)."""
    loo = summary.loo
    fit = length_bias(judgments, lengths, loo)
    shift = control_shift(judgments, lengths, fit)
    frame = build_frame(judgments)
    stats: list[DocStats] = []
    lc = frame_metrics(
        frame.with_p(controlled_p(judgments, lengths, fit, shift)),
        shuffles=shuffles,
        seed=seed,
        stats_out=stats,
    )
    shown = {k: lc[k] for k in LENGTH_CONTROLLED}
    reps = (
        None
        if loo is None
        else {k: v for k, v in replicate(stats[0], loo.columns(frame.doc_ids)).items() if k in shown}
    )
    masks = None if loo is None else {k: loo.row_mask(frame.doc_ids, v) for k, v in support(stats[0]).items()}
    level = loo.level if loo is not None else MetricsSettings.level
    raw_reps = None if summary.replicates is None else summary.replicates["none"]
    versus = paired_all(
        raw_reps,
        reps,
        {k: summary.metrics["none"][k] for k in LENGTH_CONTROLLED},
        shown,
        level,
        "length-controlled - raw: ",
        None if summary.masks is None else summary.masks["none"],
        masks,
    )
    ivs = None if reps is None or masks is None else intervals(shown, reps, masks, level)
    return {
        **fit,
        "controlled": {
            "metrics": shown,
            "intervals": None if ivs is None else as_lists(ivs),
            "interval_basis": None if ivs is None else basis_of(ivs),
            "minus_raw": versus,
            "shift": shift,
            "coefficient": "shift held at its full-data value",
        },
    }


def recompute(run_dir: str | Path, shuffles: int | None = None, seed: int | None = None) -> dict[str, Any]:
    """Metrics from judgments.jsonl alone (settings from results.json): must equal results.json."""
    run_dir = Path(run_dir)
    results = RunResults.read(run_dir / "results.json")
    judgments, p_cf = load_judgments(run_dir / "judgments.jsonl")
    return summarize(
        judgments,
        p_cf=p_cf,
        shuffles=shuffles or results["shuffles"],
        seed=results["seed"] if seed is None else seed,
    )
