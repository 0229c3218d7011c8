"""Rows of weights over documents (harness/metrics/bootstrap.py): a row of ones gives metric_set's
numbers, pooled rank correlations and medians per row are what scipy and numpy give on the
reweighted data, a mean over documents' percentile-bootstrap rounds equal scipy.stats.bootstrap's;
the document is the unit: 1,000 simulated clustered data sets of 200 documents, where the harness's
interval covers a known truth in 93-97% and (the negative control) a pair-level bootstrap
under-covers; the paired difference and its sentence carry their documents and method, and a
difference with no spread across documents has no interval. Coverage at 2 to 50 documents:
tests/metrics/test_interval_coverage.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.data import random_judgments
from scipy import stats

from harness.errors import ConfigError
from harness.metrics import bootstrap as B
from harness.metrics.debias import batch_p, permutation_p
from harness.metrics.interval import METHOD, NO_SPREAD, SCORE_METHOD, TOO_FEW, jackknife_bounds
from harness.metrics.settings import MetricsSettings
from harness.metrics.summary import analyse, frame_metrics
from harness.metrics.views import build_frame


@pytest.mark.parametrize("seed", [0, 1])
def test_a_round_of_ones_gives_metric_set(seed):
    """Every replicated metric, on a round that draws each document once, equals metric_set (1e-12),
    for the raw and debiased columns, on judgments with every awkward case (NaN P(A), repeats,
    one-sided pairs, tied/missing humans, gold labels, unreadable pairs)."""
    frame = build_frame(random_judgments(seed))
    for p, official in (
        (frame.p, None),
        (permutation_p(frame), permutation_p(frame, "official")),
        (batch_p(frame), None),
    ):
        got: list[B.DocStats] = []
        m = frame_metrics(frame.with_p(p), official_p=official, stats_out=got)
        reps = B.replicate(got[0], np.ones((1, len(frame.doc_ids))))
        assert set(reps) == {k for k in m if k not in B.NO_INTERVAL}
        for key, r in reps.items():
            want, have = float(m[key]), float(r[0])
            assert (math.isnan(want) and math.isnan(have)) or abs(want - have) < 1e-12, key


def test_whole_correlations_and_median_equal_scipy_on_the_resampled_data():
    """Pooled Spearman/Kendall tau-b and the median, per round, are scipy's/numpy's numbers on the
    data with each document repeated as often as drawn (ties from repeats included)."""
    rng = np.random.default_rng(3)
    doc = np.repeat(np.arange(6), 4)
    x, h = rng.integers(0, 5, doc.size).astype(float), rng.integers(0, 3, doc.size).astype(float)
    w = B.resample_counts(6, 20, 7)
    rho, tau = B.whole_correlations(x, h, doc, w)
    order = np.argsort(x, kind="stable")
    med = B.weighted_median(x[order], doc[order], w, chunk=7)
    for r in range(20):
        take = np.repeat(np.arange(doc.size), w[r, doc].astype(int))
        assert rho[r] == pytest.approx(stats.spearmanr(x[take], h[take])[0], abs=1e-12)
        assert tau[r] == pytest.approx(stats.kendalltau(x[take], h[take])[0], abs=1e-12)
        assert med[r] == np.median(x[take])


def test_a_mean_over_documents_equals_scipy_percentile_bootstrap():
    """Same seed, same draws (rng.integers(0, n, (rounds, n))), same quantile rule: the intervals
    agree to rounding (W @ x / n sums in another order than scipy's mean over the resample)."""
    x = np.random.default_rng(0).normal(size=40)
    w = B.resample_counts(40, 999, 11)
    ours = B.percentile_interval(w @ x / 40, 0.9)
    ref = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=999,
        method="percentile",
        confidence_level=0.9,
        rng=np.random.default_rng(11),
        vectorized=True,
    ).confidence_interval
    assert ours == pytest.approx([ref.low, ref.high], abs=1e-12)
    other = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=999,
        method="percentile",
        confidence_level=0.9,
        rng=np.random.default_rng(12),
        vectorized=True,
    ).confidence_interval
    assert abs(other.low - ours[0]) > 1e-6  # another seed draws other documents: the match is not trivial


def _clustered(sets: int, docs: int, pairs: int, spread: float, seed: int) -> tuple[np.ndarray, float]:
    """`sets` data sets of `docs` documents x `pairs` binary decisions: y = 1{mu + u_doc + e > 0},
    u_doc ~ N(0, spread) shared by a document's pairs, e ~ N(0, 1); truth P(y = 1) = Phi(mu / sqrt(1 + spread^2))."""
    rng = np.random.default_rng(seed)
    mu = 0.3
    u = rng.normal(0, spread, (sets, docs, 1))
    y = (mu + u + rng.normal(size=(sets, docs, pairs)) > 0).astype(float)
    return y, 0.5 * (1 + math.erf(mu / math.sqrt(1 + spread**2) / math.sqrt(2)))


def _coverage(y: np.ndarray, truth: float, rounds: int) -> tuple[float, float]:
    """(document coverage, pair-level bootstrap coverage) of 95% intervals. The document interval is
    the harness's (interval.jackknife_bounds on the leave-one-document-out means); the pair-level
    bootstrap treats every decision as independent: for binary decisions its resampled mean is
    exactly Binomial(N, mean)/N, drawn directly (one array for every set instead of N counts per round)."""
    means = y.mean(axis=2)  # (sets, documents): equal pairs per document, so the pooled rate is their mean
    n = means.shape[1]
    lo, hi = jackknife_bounds(means.mean(axis=1), (means.sum(axis=1, keepdims=True) - means) / (n - 1), 0.95)
    doc_hits = int(((lo <= truth) & (truth <= hi)).sum())
    n = y.shape[1] * y.shape[2]
    pooled = y.reshape(len(y), -1).mean(axis=1)
    reps = np.random.default_rng(1).binomial(n, pooled[:, None], (len(y), rounds)) / n
    lo, hi = np.quantile(reps, [0.025, 0.975], axis=1)
    return doc_hits / len(y), float(((lo <= truth) & (truth <= hi)).mean())


def test_document_intervals_cover_the_truth_and_pair_intervals_do_not():
    """1,000 simulated data sets of 200 documents x 6 correlated decisions (a document random
    effect): the harness's 95% intervals over documents cover the known A-rate in 93-97% of them;
    the NEGATIVE CONTROL, a pair-level bootstrap (1,200 decisions as independent) on the same data,
    under-covers (< 90%), the failure the document unit exists to prevent. 400 rounds per set."""
    y, truth = _clustered(1000, 200, 6, 1.0, 0)
    doc, pair = _coverage(y, truth, 400)
    assert 0.93 <= doc <= 0.97, doc
    assert pair < 0.90, pair


def test_paired_difference_and_its_sentence():
    """Every sentence carries its documents and method; a difference whose documents all give the
    same value (exactly 0, or a constant) has no interval and says "too little to tell", never a
    zero-width bracket or "distinguishable"; a nonzero one is shown with the digits that make it
    nonzero; 2 documents are too few to tell, however large the difference."""
    a = np.random.default_rng(0).normal(size=12)
    jitter = np.random.default_rng(1).normal(size=12)
    same = B.paired("order_gap", 0.5, 0.5, a, a, 0.95, metric="order_gap")
    assert same["interval"] is None and same["n_documents"] == 12 and same["note"] == NO_SPREAD
    assert same["p_value"] is None
    assert (
        same["sentence"] == "order_gap +0.000 (12 documents: no spread across documents: too little to tell)"
    )
    flat = B.paired("held-out Spearman", 0.2, 0.5, a, a + 0.3, 0.95, metric="spearman")
    assert flat["interval"] is None and "distinguishable" not in flat["sentence"]
    up = B.paired("held-out Spearman", 0.2, 0.5, a, a + 0.3 + 0.01 * jitter, 0.95, metric="spearman")
    assert (
        up["sentence"].startswith("held-out Spearman +0.300 [+0.2")
        and "(12 documents, t-jackknife)" in up["sentence"]
    )
    assert up["sentence"].endswith(": distinguishable from 0 at 95%") and up["p_value"] < 1e-4
    tiny = B.paired("order_gap", 0.1, 0.1 - 1e-7, a, a - 1e-7 + 1e-10 * jitter, 0.95, metric="order_gap")
    assert tiny["sentence"].startswith("order_gap -1e-07 [-1") and "distinguishable" in tiny["sentence"]
    two = B.paired("held-out Spearman (PairS)", 0.0, 0.933, np.zeros(2), np.array([0.866, 1.0]), 0.95)
    assert two["interval"] is None and two["note"] == TOO_FEW and "distinguishable" not in two["sentence"]
    assert two["sentence"] == "held-out Spearman (PairS) +0.933 (2 documents: too few documents to tell)"
    off = B.paired("x", 0.2, 0.5, None, None, 0.95)
    assert off["interval"] is None and "no interval (metrics.bootstrap=0)" in off["sentence"]


def test_analyse_intervals_hold_the_value_and_zero_rounds_turn_them_off():
    js = random_judgments(0)
    on = analyse(js, p_cf=0.4, shuffles=5, with_intervals=MetricsSettings(200))
    iv = on.intervals()
    assert iv is not None and set(iv) == set(on.metrics) == {"none", "permutation", "batch", "contextual"}
    lo, hi = iv["none"]["a_rate"]
    assert lo <= on.metrics["none"]["a_rate"] <= hi and hi > lo
    assert on.meta()["unit"] == "document" and on.meta()["n_documents"] == 4 and on.meta()["method"] == METHOD
    basis = on.basis()["none"]
    assert basis["a_rate"] == {"n_documents": 4, "method": SCORE_METHOD, "note": None}  # a rate
    assert iv["none"]["ece"] is None and basis["ece"]["note"] == TOO_FEW  # ECE needs 8 documents
    assert "permutation - none" in on.differences()
    off = analyse(js, p_cf=0.4, shuffles=5, with_intervals=MetricsSettings(0))
    assert off.intervals() is None and off.meta()["note"] == "no intervals (metrics.bootstrap=0)"
    assert off.metrics == on.metrics


@pytest.mark.parametrize("rounds, level", [(-1, 0.95), (10, 1.0), (10, 0), (True, 0.95)])
def test_bad_settings_are_refused(rounds, level):
    with pytest.raises(ConfigError, match="metrics"):
        B.check_settings(rounds, level)
