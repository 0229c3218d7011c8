"""Every metric of one judgment list, raw and under each debiasing: `summarize` -> results.json."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.files import read_json, write_json_atomic
from harness.judging import load_judgments, write_judgments
from harness.metrics.calibration import calibration_arrays
from harness.metrics.correlation import view_correlations
from harness.metrics.debias import batch_p, contextual_p, permutation_p
from harness.metrics.mass import answer_mass_stats_of
from harness.metrics.official import bc_prior_of, prob_gap_of, view_upper_a_rate
from harness.metrics.order import view_order_consistency
from harness.metrics.rates import confidence_p, view_a_rate
from harness.metrics.views import Frame, build_frame
from harness.records import Judgment

log = logging.getLogger(__name__)


def metric_set(
    judgments: Sequence[Judgment], shuffles: int = 100, seed: int = 0, bins: int = 10
) -> dict[str, float | int]:
    """Every metric of one judgment list, as plain floats/ints (NaN where undefined)."""
    return frame_metrics(build_frame(judgments), shuffles=shuffles, seed=seed, bins=bins)


def frame_metrics(frame: Frame, shuffles: int = 100, seed: int = 0, bins: int = 10,
                  official_p: np.ndarray | None = None) -> dict[str, float | int]:
    """`metric_set` of a Frame (its P(A) column); `official_p`: the column whose upper-triangle
    rate is `a_rate_upper` (the permutation variant's official arithmetic), default the frame's."""
    views = frame.views()
    conf = confidence_p(frame.p)
    labelled = np.isfinite(frame.p) & np.isfinite(frame.label)
    cal = calibration_arrays(frame.p[labelled], frame.label[labelled], bins=bins)
    win = view_correlations(views, "winrate", shuffles, seed)
    pairs = view_correlations(views, "pairs", shuffles, seed)
    rate, rate_prob = view_a_rate(views, "argmax"), view_a_rate(views, "prob")
    tokens = frame.tokens
    upper_views = views if official_p is None else frame.with_p(official_p).views()
    return {
        "a_rate": rate, "a_rate_prob": rate_prob, **view_order_consistency(views),
        **answer_mass_stats_of(tokens.mass[tokens.readable]),
        "fairness": -abs(rate - 0.5), "fairness_prob": -abs(rate_prob - 0.5),
        "max_prob": conf["max_prob"], "entropy": conf["entropy"],
        "ece": cal["ece"], "brier": cal["brier"], "nll": cal["nll"], "accuracy": cal["accuracy"],
        "n_calibration": int(cal["n"]),
        "spearman": win["spearman"], "kendall": win["kendall"],
        "spearman_pairs": pairs["spearman"], "kendall_pairs": pairs["kendall"],
        "spearman_pairs_se": pairs["spearman_se"],
        "spearman_whole": win["spearman_whole"], "kendall_whole": win["kendall_whole"],
        "n_judgments": len(frame.p), "n_docs": len(views),
        # As the official ZEPO code (metrics/official.py): the upper-triangle decision rate (the
        # debiased rate of Figure 4 under "permutation", with the official arithmetic), the
        # label-free BC prior, the Norm Gap.
        "a_rate_upper": view_upper_a_rate(upper_views), "bc": bc_prior_of(frame), "prob_gap": prob_gap_of(frame),
    }


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
    frame = build_frame(judgments)
    variants = {"none": frame.p, "permutation": permutation_p(frame), "batch": batch_p(frame)}
    if p_cf is not None and not math.isnan(p_cf):
        variants["contextual"] = contextual_p(frame, p_cf)
    elif p_cf is not None:  # the content-free probe stayed unreadable: only its view is lost
        log.warning("the content-free probe's answer was unreadable (P(A) NaN: NaN/inf log-probs, or an API "
                    "answer still unusable after every retry): the "
                    "contextual-calibration view is left out; every other view is complete")
    official = {"permutation": permutation_p(frame, "official")}
    return {k: frame_metrics(frame.with_p(p), shuffles=shuffles, seed=seed, bins=bins, official_p=official.get(k))
            for k, p in variants.items()}


def write_run(out: Path, judgments: Sequence[Judgment], p_cf: float, *, task: str, aspect: str | None,
              family: str, instruction: str, judge_identity: str, n_docs: int, shuffles: int,
              seed: int, extra: dict[str, Any] | None = None, numerics: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """judgments.jsonl + results.json of one judged set (the judge experiment; shard merges).

    `extra` adds run facts that are not metrics (e.g. judge_calls: requests that missed the cache).
    `numerics`: the judge's dtype, its source, engine and device (harness.judges.cpu.numerics).
    `n_unreadable`: pairs whose answer could not be read (flagged, P(A) NaN, unjudged by every metric)."""
    write_judgments(out / "judgments.jsonl", judgments, p_cf)
    summary = summarize(judgments, p_cf=p_cf, shuffles=shuffles, seed=seed)
    results = {"task": task, "aspect": aspect, "family": family, "instruction": instruction,
               "judge": judge_identity, "numerics": numerics, "n_docs": n_docs, "n_judgments": len(judgments),
               "n_unreadable": sum("unreadable" in j.flags for j in judgments),
               "p_content_free": p_cf,
               **({"content_free_unreadable": True} if p_cf is not None and math.isnan(p_cf) else {}),
               "shuffles": shuffles, "seed": seed, **(extra or {}), "metrics": summary}
    write_json_atomic(out / "results.json", results)
    return results


def recompute(run_dir: str | Path, shuffles: int | None = None, seed: int | None = None) -> dict[str, Any]:
    """Metrics from judgments.jsonl alone (settings from results.json): must equal results.json."""
    run_dir = Path(run_dir)
    results = read_json(run_dir / "results.json")
    judgments, p_cf = load_judgments(run_dir / "judgments.jsonl")
    return summarize(judgments, p_cf=p_cf, shuffles=shuffles or results["shuffles"],
                     seed=results["seed"] if seed is None else seed)
