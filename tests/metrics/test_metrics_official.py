"""harness.metrics.official against the values the official ZEPO code (pairs/pairs_eval.py @ 0c3940a)
computed on synthetic matrices and a synthetic compare log (tests/golden/zepo_metrics_official.json:
get_a_rate raw and with --do_permutate, compute_spearman, get_prob_gap)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness import metrics
from harness.records import Judgment

GOLDEN = json.loads(
    (Path(__file__).resolve().parents[1] / "golden" / "zepo_metrics_official.json").read_text()
)


def judgments_of(case) -> list[Judgment]:
    n, m, h = case["n"], case["matrix"], case["human"]
    return [
        Judgment("d", str(i), str(j), m[i][j], {}, h[i], h[j]) for i in range(n) for j in range(n) if i != j
    ]


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=[f"{c['kind']}-{c['n']}" for c in GOLDEN["cases"]])
def test_decision_rates_as_the_official_code(case):
    js = judgments_of(case)
    debiased = metrics.permutation_debias(js)
    assert metrics.a_rate(js) == pytest.approx(case["permutate_False"]["a_rate"])
    assert metrics.upper_a_rate(debiased) == pytest.approx(case["permutate_True"]["a_rate"])
    # The debiased matrix the official code builds, M' = (M + 1 - M^T) / 2 (diagonal aside).
    m = case["permutate_True"]["matrix_used"]
    for j in debiased:
        assert j.p_a == pytest.approx(m[int(j.a_id)][int(j.b_id)])
    # Negative control: over all off-diagonal entries a debiased matrix is always exactly 0.5.
    assert metrics.a_rate(debiased) == 0.5


@pytest.mark.parametrize("case", [c for c in GOLDEN["cases"] if c["kind"] == "consistent_order"])
def test_pairs_spearman_is_exact_where_shuffles_cannot_matter(case):
    for permutate, js in (
        (False, judgments_of(case)),
        (True, metrics.permutation_debias(judgments_of(case))),
    ):
        want = case[f"permutate_{permutate}"]["spearman_avg_100_shuffles_python_random_seed0"]
        assert metrics.correlations(js, "pairs", shuffles=20)["spearman"] == pytest.approx(want)


def test_bc_prior_and_prob_gap_as_the_official_code():
    """The official compare log holds raw logits (summed over variants) and normalised probabilities;
    judgments hold log-probabilities, which differ from logits by a per-pair log Z that cancels."""
    case = GOLDEN["bc_prior_case"]
    log = case["compare_log"]["0"]
    js = []
    for k, (logits, probs) in enumerate(zip(log["logit_list"], log["norm_prob_list"])):
        log_z = 7.0 + k  # any per-pair constant
        lp = {"A:A": logits[0] - log_z, "B:B": logits[1] - log_z, "C:C": logits[2] - log_z}
        js.append(Judgment("d", "a", f"b{k}", probs[0], lp))
    assert metrics.bc_prior(js) == pytest.approx(case["bc"])
    # Norm Gap from log-probabilities normalised over A, B, C.
    js_p = [
        Judgment(
            "d", "a", f"b{k}", p[0], {f"{lab}:{lab}": math.log(max(x, 1e-300)) for lab, x in zip("ABC", p)}
        )
        for k, p in enumerate(log["norm_prob_list"])
    ]
    assert metrics.prob_gap(js_p) == pytest.approx(case["norm_prob_gap"])
    # An unread pair (the official failure: logits 0, probabilities 0.5/0.5) shrinks both.
    unread = Judgment("d", "a", "bx", 0.5, {}, flags=("no_answer",))
    assert metrics.bc_prior([*js, unread]) == pytest.approx(case["bc"] * 3 / 4)
    assert metrics.prob_gap([*js_p, unread]) == pytest.approx(case["norm_prob_gap"] * 3 / 4)
    # Unequal variant counts would leave log Z in the difference: undefined, not a wrong number.
    assert math.isnan(metrics.bc_prior([Judgment("d", "a", "b", 0.6, {"A:A": -1, "A: A": -2, "B:B": -1})]))
