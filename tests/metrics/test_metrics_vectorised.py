"""The vectorised metrics give the numbers the loop implementation gave, to 1e-12, on random
judgments with everything that makes metrics awkward (NaN P(A), repeats, one-sided pairs, missing
and tied humans, gold labels, unreadable pairs, C variants, unequal variant counts); the loop
functions vectorisation replaced are kept in tests/helpers/metrics_reference.py. PairS averages every
initial order where that is no more work than the shuffles (exact), and permutation debiasing has
the official arithmetic; both are checked against their definitions, each with a negative control."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from helpers import metrics_reference as ref
from helpers.data import random_judgments

from harness import metrics
from harness.metrics.correlation import pairs_orders
from harness.records import Judgment

TOL = 1e-12


def _assert_close(new, old, where: str) -> None:
    if isinstance(old, float) and math.isnan(old):
        assert isinstance(new, float) and math.isnan(new), where
    else:
        assert abs(new - old) <= TOL, f"{where}: {new} != {old}"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_summarize_equals_the_loop_implementation(seed):
    js = random_judgments(seed)
    shuffles = 30  # 5! = 120 > 30: every document's PairS is sampled, as the old code did
    new = metrics.summarize(js, p_cf=0.62, shuffles=shuffles, seed=seed)
    old = ref.summarize(js, p_cf=0.62, shuffles=shuffles, seed=seed)
    assert set(new) == set(old)
    for variant in old:
        assert set(new[variant]) - set(old[variant]) == {"spearman_pairs_se"}
        for key, value in old[variant].items():
            _assert_close(new[variant][key], value, f"{variant}.{key}")


def test_debiased_judgments_and_single_metrics_equal_the_loop_implementation():
    js = random_judgments(7)
    for new, old in (
        (metrics.permutation_debias(js), ref.permutation_debias(js)),
        (metrics.batch_calibrate(js, by_doc=True), ref.batch_calibrate(js, by_doc=True)),
        (metrics.contextual_calibrate(js, 0.3), ref.contextual_calibrate(js, 0.3)),
    ):
        assert len(new) == len(old)
        for a, b in zip(new, old):
            assert (a.doc_id, a.a_id, a.b_id, a.flags) == (b.doc_id, b.a_id, b.b_id, b.flags)
            _assert_close(a.p_a, b.p_a, f"{a.doc_id} {a.a_id}>{a.b_id}")
    for name in (
        "upper_a_rate",
        "confidence",
        "order_consistency",
        "calibration",
    ):  # bc_prior, prob_gap: unchanged
        new, old = getattr(metrics, name)(js), getattr(ref, name)(js)
        for key, value in old.items() if isinstance(old, dict) else [(name, old)]:
            _assert_close(new[key] if isinstance(new, dict) else new, value, name)
    views_new, views_old = metrics.document_views(js), ref.document_views(js)
    assert list(views_new) == list(views_old)
    for d, v in views_old.items():
        assert views_new[d].ids == v.ids
        np.testing.assert_allclose(views_new[d].matrix, v.matrix, rtol=0, atol=TOL)
        np.testing.assert_array_equal(views_new[d].human, v.human)


def test_the_comparison_catches_a_difference():
    """Negative control: one judgment's P(A) moved by 1e-9 is caught."""
    js = random_judgments(3, sizes=(6,))
    moved = list(js)
    k = next(i for i, j in enumerate(js) if math.isfinite(j.p_a) and 0.1 < j.p_a < 0.9)
    moved[k] = replace(js[k], p_a=js[k].p_a + 1e-9)
    new, old = metrics.summarize(moved, shuffles=30), ref.summarize(js, shuffles=30)
    with pytest.raises(AssertionError):
        _assert_close(new["none"]["a_rate_prob"], old["none"]["a_rate_prob"], "a_rate_prob")


def _position_judge(n: int) -> list[Judgment]:
    """A judge whose decisions follow position only: P(A) = 0.9 for every ordered pair."""
    human = [1.0, 3.0, 2.0, 5.0][:n]
    return [
        Judgment("d", f"c{i}", f"c{k}", 0.9, {"A": -0.1, "B": -2.4}, human[i], human[k])
        for i, k in itertools.permutations(range(n), 2)
    ]


def test_pairs_is_exact_where_every_order_is_cheap():
    """n! <= shuffles: PairS sorts every initial order once; for a judge that follows position the
    expected Spearman is 0 (its output order is a bijection of a uniform input order), and the
    shuffle standard error is 0. Negative control: 20 seeded shuffles, as before, give noise."""
    js = _position_judge(3)
    exact = metrics.correlations(js, "pairs", shuffles=20)
    assert abs(exact["spearman"]) <= TOL and exact["spearman_se"] == 0
    assert len(pairs_orders("d", 3, 20, 0)) == 6
    # The definition: the mean over all 3! orders of the one-order merge sort.
    view = ref.document_views(js)["d"]
    rhos = []
    for order in itertools.permutations(range(3)):
        pos = np.empty(3)
        pos[ref.pairs_sort(view.matrix, list(order))] = np.arange(3)
        rhos.append(ref.rank_correlations(pos, view.human)[0][0])
    assert abs(exact["spearman"] - np.mean(rhos)) <= TOL
    sampled = ref.correlations(js, "pairs", shuffles=20)
    assert abs(sampled["spearman"]) > 0.01
    drawn = metrics.correlations(_position_judge(4), "pairs", shuffles=20)  # 4! = 24 > 20: sampled
    assert drawn["spearman_se"] > 0


def test_permutation_debias_official_arithmetic():
    """A bit-identical pair (P(A|i,j) == P(A|j,i) == 0.9): the official (M + 1 - M^T)/2 gives
    0.49999999999999994 (a B decision), the exact arithmetic a tie. Negative control: the old
    expression 0.5 + (p - q)/2 does not give the official value."""
    js = _position_judge(2)
    m = np.array([[np.nan, 0.9], [0.9, np.nan]])
    official_value = ((m + 1 - m.T) / 2)[0, 1]  # the official pairs_eval.py expression
    assert official_value == 0.49999999999999994
    official = metrics.permutation_debias(js, "official")
    assert [j.p_a for j in official] == [official_value, official_value]
    assert [j.p_a for j in metrics.permutation_debias(js)] == [0.5, 0.5]
    assert 0.5 + (0.9 - 0.9) / 2 != official_value
    # The official decision rate counts it: B wins the upper triangle; summarize reports that one.
    assert metrics.upper_a_rate(official) == 0.0
    assert metrics.summarize(js, shuffles=4)["permutation"]["a_rate_upper"] == 0.0
    with pytest.raises(Exception, match="arithmetic"):
        metrics.permutation_debias(js, "other")


def test_bench_metrics_times_write_run_and_the_bootstrap(tmp_path):
    """`harness-bench metrics` at a small size: write_run, analyse and analyse with the bootstrap
    timed in one run, the bootstrap's cost their difference, one JSON line with what the table printed."""
    from helpers.cli import bench_json, run_bench

    proc = run_bench(
        [
            "metrics",
            "--docs",
            "3",
            "--candidates",
            "6",
            "--shuffles",
            "10",
            "--rounds",
            "2",
            "--bootstrap",
            "50",
        ],
        tmp_path,
        timeout=300,
    )
    line = bench_json(proc)
    assert (
        line["pairs"] == 3 * 6 * 5
        and line["shuffles"] == 10
        and line["bootstrap"] == 50
        and line["rounds"] == 2
    )
    rows = line["rows"]
    assert set(rows) == {"write_run", "analyse", "analyse + bootstrap"}
    for r in rows.values():
        assert len(r["rounds_s"]) == 2 and r["median_s"] > 0 and r["median_cpu_s"] > 0
        assert f"{r['median_s']:.2f}" in proc.stdout
    cost = line["bootstrap_cost"]
    assert cost["median_s"] == rows["analyse + bootstrap"]["median_s"] - rows["analyse"]["median_s"]
    assert line["machine"]["cpu"] and line["machine"]["date"] in proc.stdout


def test_documents_without_usable_scores_equal_the_loop_implementation():
    """A document whose human-scored candidates have no judged pair (no win rate), beside a normal
    one: both rankings as the loop implementation (undefined correlations count 0)."""
    js = [
        Judgment("d", "a", "b", math.nan, {}, 1.0, 2.0),
        Judgment("d", "b", "a", math.nan, {}, 2.0, 1.0),
        Judgment("d", "a", "c", 0.7, {}, 1.0, None),
    ] + random_judgments(4, sizes=(5,))
    for ranking in ("winrate", "pairs"):
        new, old = metrics.correlations(js, ranking, shuffles=5), ref.correlations(js, ranking, shuffles=5)
        for key, value in old.items():
            _assert_close(new[key], value, f"{ranking}.{key}")
