"""Rates at the bound, no-spread labels, Holm's family and exact zeros (harness/metrics/interval.py).

A rate that is 1 in every one of 12 documents gets the exact one-sided bound [0.05^(1/12), 1] =
[0.779, 1] (the t x jackknife's [1, 1] is the NEGATIVE CONTROL); fairness is its image; a metric
whose documents all give one value has no interval, and results.json, card.md and report.html's
metrics table say so in the same words; each bracket names its own method; a sum that is 0 prints
as 0; candidate counts more than 5x apart get a line on the card; the p-value harness-compare's
Holm step-down reads is the paired t test's; Holm keeps the family-wise rate.
"""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
from scipy import stats

from harness.metrics import write_run
from harness.metrics.card import render_cards
from harness.metrics.interval import (
    EXACT_METHOD,
    NO_SPREAD,
    SCORE_METHOD,
    fairness_of,
    holm,
    jackknife_bounds,
    num,
    p_value,
    rate_interval,
    recorded,
)
from harness.metrics.settings import MetricsSettings
from harness.records import Judgment
from harness.report.sections import metrics_table, plain

EXACT = 0.05 ** (1 / 12)


def test_a_rate_at_the_bound_gets_the_exact_one_sided_bound_and_fairness_its_image():
    ones = np.ones(12)
    iv = rate_interval(1.0, ones, 0.95, "a_rate")
    assert iv.bounds == pytest.approx((EXACT, 1.0)) and iv.method == EXACT_METHOD and iv.note is None
    assert rate_interval(0.0, np.zeros(12), 0.95, "a_rate").bounds == pytest.approx((0.0, 1 - EXACT))
    assert fairness_of(iv).bounds == pytest.approx((-0.5, 0.5 - EXACT))
    lo, hi = jackknife_bounds(np.array(1.0), ones[None, :], 0.95)  # NEGATIVE CONTROL: zero width
    assert (lo[0], hi[0]) == (1.0, 1.0)
    # One document of 12 at 0.5: a Wilson score interval that holds 0.96 (the t interval's upper
    # bound was 1.0 with a lower bound above 0.9); mid-range values keep a two-sided interval.
    values = np.r_[np.ones(11), 0.5]
    loo = (values.sum() - values) / 11
    near = rate_interval(values.mean(), loo, 0.95, "a_rate")
    assert near.method == SCORE_METHOD and near.bounds[0] < 0.9 < 0.96 < near.bounds[1] <= 1
    mid = np.linspace(0.3, 0.7, 12)
    both = rate_interval(mid.mean(), (mid.sum() - mid) / 11, 0.95, "a_rate")
    assert 0.3 < both.bounds[0] < 0.5 < both.bounds[1] < 0.7


def test_the_p_value_is_the_paired_t_test_and_holm_keeps_the_family():
    x = np.random.default_rng(0).normal(0.2, 1, 10)
    loo = (x.sum() - x) / 9  # a mean's leave-one-out values: the jackknife's t is the one-sample t
    assert p_value(x.mean(), loo) == pytest.approx(stats.ttest_1samp(x, 0).pvalue, rel=1e-9)
    assert np.isnan(p_value(0.5, np.full(10, 0.5)))  # no spread: nothing to test
    kept = holm({"a": 0.001, "b": 0.03, "c": 0.04, "d": float("nan")}, 0.95)
    assert kept == {"a": True, "b": False, "c": False, "d": False}  # 0.03 > 0.05 / 2: Holm stops
    assert holm({"a": 0.01, "b": 0.02}, 0.95) == {"a": True, "b": True}  # 0.02 <= 0.05 / 1
    # The family's rate under no difference: 2,000 families of 20 independent null p-values.
    p = np.random.default_rng(1).random((2000, 20))
    fired = np.mean([any(holm(dict(enumerate(row)), 0.95).values()) for row in p])
    assert fired <= 0.06 and np.mean((p < 0.05).any(axis=1)) > 0.5  # control: per-test 95% fires in 64%


def test_exact_zeros_print_as_zero():
    assert num(-9.25e-18) == "+0.000" and plain(-9.25e-18) == "0.000"
    assert num(-1.2e-7) == "-1.2e-07" and plain(1.2e-7) == "1.2e-07"  # a nonzero is never 0.000


def _judgments() -> list[Judgment]:
    """12 documents of 2 candidates and one of 12, every pair judged P(A) 0.9: A-rate 1, max_prob
    0.9 and a win-rate Spearman of 0 (every candidate ties) in every document."""
    out = []
    for d, m in enumerate([2] * 12 + [12]):
        for i, k in itertools.permutations(range(m), 2):
            out.append(Judgment(f"d{d:02d}", f"c{i}", f"c{k}", 0.9, {}, float(i % 5), float(k % 5)))
    return out


def test_results_card_and_page_label_the_bound_and_no_spread_alike(tmp_path):
    res = write_run(
        tmp_path,
        _judgments(),
        None,
        task="t",
        aspect=None,
        family="summarization",
        instruction="x",
        judge_identity="j",
        n_docs=13,
        shuffles=2,
        seed=0,
        metrics=MetricsSettings(50),
    )
    basis, ivs = res["interval_basis"]["none"], res["intervals"]["none"]
    assert (
        ivs["a_rate"] == pytest.approx([0.05 ** (1 / 13), 1.0]) and basis["a_rate"]["method"] == EXACT_METHOD
    )
    assert ivs["spearman"] is None and basis["spearman"]["note"] == NO_SPREAD  # 0 in every document
    assert (
        ivs["max_prob"] is not None and basis["max_prob"]["method"] == SCORE_METHOD
    )  # bounded: capped score
    cards = render_cards(tmp_path, echo=lambda _: None, metrics=MetricsSettings(50))
    card = (tmp_path / "card.md").read_text()
    lo = f"{0.05 ** (1 / 13):.3f}"
    assert f"A-rate 1.000 [{lo}, 1.000] (one-sided: every document at 1)" in card
    assert f"Spearman 0.000 (13 documents: {NO_SPREAD})" in card
    assert "[1.000, 1.000]" not in card and "[0.000, 0.000]" not in card  # no zero-width bracket
    assert "a_rate" in card.split(EXACT_METHOD)[0].split("intervals")[-1]  # the bracket's own method
    assert (
        "2 to 12 candidates per document (more than 5x apart)" in card
        and "weigh a 12-candidate document 66x" in card
    )
    assert cards[0].intervals["a_rate"] == pytest.approx(ivs["a_rate"])
    html = metrics_table(
        res["metrics"],
        lambda v, k: recorded(res["intervals"][v].get(k), res["interval_basis"][v].get(k)),
        0.95,
    )
    text = re.sub(r"<[^>]+>", "", html)  # the page's cells put the value and its reason in two spans
    assert f"0.000 ({NO_SPREAD})" in text and f"1.000 [{lo}, 1.000]" in text
    assert "13 documents, 95% exact one-sided" in html and "[0.000, 0.000]" not in html
    assert "e-16" not in html and "e-17" not in html  # rounding residue of an exact 0 printed as 0
    assert json.loads(json.dumps(res))  # plain JSON


def test_equal_candidate_counts_get_no_line(tmp_path):
    js = [j for j in _judgments() if j.doc_id != "d12"]
    write_run(
        tmp_path,
        js,
        None,
        task="t",
        aspect=None,
        family="summarization",
        instruction="x",
        judge_identity="j",
        n_docs=12,
        shuffles=2,
        seed=0,
        metrics=MetricsSettings(0),
    )
    render_cards(tmp_path, echo=lambda _: None, metrics=MetricsSettings(0))
    assert "candidates per document" not in (tmp_path / "card.md").read_text()


def test_a_rate_counts_each_document_as_at_most_its_own_decisions():
    """ranges.cap: documents of 10 or more decisions count PER_DOCUMENT (10) each; a mean of
    per-document rates over 25 one-decision documents (2 candidates' upper triangle) and 25 of 435
    counts 50^2 / (25 / 1 + 25 / 10) = 91 decisions in all, not 500; a pooled rate weighs documents
    by their decisions. NEGATIVE CONTROL: with that cap the A-rate's score interval is wider."""
    from harness.metrics import ranges as R

    assert R.cap("a_rate", np.full(12, 12.0)) == pytest.approx(10.0)
    mix = np.array([1.0] * 25 + [435.0] * 25)
    assert R.cap("a_rate_upper", mix) * 50 == pytest.approx(2500 / 27.5)
    assert R.cap("order_consistency", mix) * 50 == pytest.approx(
        (25 + 25 * 435) ** 2 / (25 + 25 * 435**2 / 10)
    )
    assert R.cap("spearman_whole", mix) == 10.0  # a pooled correlation takes no score interval
    values = np.r_[np.ones(25), np.full(25, 0.956)]  # one decision each, all A; 435 each at 0.956
    loo = (values.sum() - values) / 49
    narrow = rate_interval(values.mean(), loo, 0.95, "a_rate_upper").bounds
    wide = rate_interval(values.mean(), loo, 0.95, "a_rate_upper", R.cap("a_rate_upper", mix)).bounds
    assert wide[0] < narrow[0] - 0.02, (narrow, wide)
