"""Metrics on hand-computed judgment sets: every expected number below is worked out by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from harness.errors import ConfigError, DataError
from harness.judging import judgment_from_row, judgment_to_row
from harness.metrics import (
    a_rate,
    batch_calibrate,
    calibration,
    confidence,
    contextual_calibrate,
    correlations,
    fairness,
    human_scores,
    pairs_sort,
    permutation_debias,
    preference_matrices,
    summarize,
    win_rates,
)
from harness.records import Judgment

SUMMARY_KEYS = {
    "a_rate",
    "a_rate_prob",
    "fairness",
    "fairness_prob",
    "max_prob",
    "entropy",
    "ece",
    "brier",
    "nll",
    "accuracy",
    "n_calibration",
    "spearman",
    "kendall",
    "spearman_pairs",
    "kendall_pairs",
    "spearman_pairs_se",
    "spearman_whole",
    "kendall_whole",
    "n_judgments",
    "n_docs",
    "order_consistency",
    "order_gap",
    "n_order_pairs",
    "answer_mass_median",
    "answer_mass_low_share",
    "a_rate_upper",
    "bc",
    "prob_gap",  # as the official ZEPO code (harness/metrics/official.py)
}


def J(doc, a, b, p, ha=None, hb=None, gold=None) -> Judgment:
    return Judgment(
        doc,
        a,
        b,
        p,
        {"A:A": math.log(max(p, 1e-300)) if p == p else 0.0},
        human_a=ha,
        human_b=hb,
        gold_a=gold,
    )


def from_matrix(doc: str, ids: list[str], m: dict, human: dict) -> list[Judgment]:
    """Judgments from {(a, b): P(A)} with human scores per candidate id."""
    return [J(doc, a, b, p, human[a], human[b]) for (a, b), p in m.items()]


# The designed 3-candidate document. Humans: x=3 > y=2 > z=1.
#            B=x   B=y   B=z
#   A=x       -    0.9   0.8
#   A=y      0.6    -    0.7
#   A=z      0.5   0.2    -
# x vs y is position-biased (A wins in both orders); z-x has a tie (0.5).
HUMAN3 = {"x": 3.0, "y": 2.0, "z": 1.0}
M3 = {("x", "y"): 0.9, ("y", "x"): 0.6, ("x", "z"): 0.8, ("z", "x"): 0.5, ("y", "z"): 0.7, ("z", "y"): 0.2}
DOC3 = from_matrix("d3", ["x", "y", "z"], M3, HUMAN3)


def test_matrix_layout_and_human_vectors():
    extra = [J("d3", "x", "y", 0.7, 3.0, 2.0)]  # a repeat of (x, y): averaged with 0.9
    ((ids, m),) = preference_matrices(DOC3 + extra).values()
    assert ids == ["x", "y", "z"]  # first-appearance order
    assert np.isnan(np.diag(m)).all()
    assert m[0, 1] == pytest.approx(0.8) and m[1, 0] == 0.6 and m[2, 1] == 0.2
    ((hids, h),) = human_scores(DOC3).values()
    assert hids == ids and h.tolist() == [3.0, 2.0, 1.0]
    # Unjudged entries and NaN P(A) stay NaN.
    ((_, m2),) = preference_matrices([J("d", "a", "b", 0.7), J("d", "b", "c", float("nan"))]).values()
    assert m2[0, 1] == 0.7 and np.isnan(m2[1, 0]) and np.isnan(m2[1, 2])


def test_a_rate_and_fairness_by_hand():
    # argmax: > 0.5 are 0.9, 0.6, 0.8, 0.7 (4); < 0.5 is 0.2 (1); 0.5 is a tie, left out -> 4/5.
    assert a_rate(DOC3) == pytest.approx(0.8)
    assert fairness(DOC3) == pytest.approx(-0.3)
    # prob: (0.9 + 0.6 + 0.8 + 0.5 + 0.7 + 0.2) / 6 = 3.7 / 6.
    assert a_rate(DOC3, "prob") == pytest.approx(3.7 / 6)
    assert fairness(DOC3, "prob") == pytest.approx(-(3.7 / 6 - 0.5))
    with pytest.raises(ConfigError):
        a_rate(DOC3, "mass")


def test_a_rate_averages_documents_not_pairs():
    # Doc p: 2 entries, both A (rate 1). Doc q: 6 entries, 3 A and 3 B (rate 0.5). Mean 0.75,
    # whereas pooling all 8 entries would give 5/8.
    p = [J("p", "a", "b", 0.9), J("p", "b", "a", 0.8)]
    q = [
        J("q", a, b, v)
        for (a, b), v in zip(
            [("a", "b"), ("b", "a"), ("a", "c"), ("c", "a"), ("b", "c"), ("c", "b")],
            [0.9, 0.1, 0.8, 0.2, 0.7, 0.3],
        )
    ]
    assert a_rate(p + q) == pytest.approx(0.75)


def test_confidence_by_hand():
    # max(p, 1-p): 0.9, 0.6, 0.8, 0.5, 0.7, 0.8 -> 4.3 / 6.
    c = confidence(DOC3)
    assert c["max_prob"] == pytest.approx(4.3 / 6)
    h = lambda p: -(p * math.log(p) + (1 - p) * math.log(1 - p))  # noqa: E731
    assert c["entropy"] == pytest.approx(sum(h(p) for p in M3.values()) / 6)
    # A certain answer has zero entropy, not NaN; an empty list gives NaN.
    assert confidence([J("d", "a", "b", 1.0)])["entropy"] == 0.0
    assert math.isnan(confidence([])["max_prob"])


def test_calibration_by_hand():
    # (P(A), label): (.9,1) (.6,0) (.8,1) (.5,0) (.7,1) (.2,0); label 1 when human A > human B.
    cal = calibration(DOC3, bins=2)
    assert cal["n"] == 6
    # Brier: (.01 + .36 + .04 + .25 + .09 + .04) / 6 = .79 / 6.
    assert cal["brier"] == pytest.approx(0.79 / 6)
    # NLL: -(ln .9 + ln .4 + ln .8 + ln .5 + ln .7 + ln .8) / 6 = 0.4196268.
    assert cal["nll"] == pytest.approx(0.4196268, abs=1e-6)
    # Accuracy: right, wrong, right, tie (half), right, right -> 4.5 / 6.
    assert cal["accuracy"] == pytest.approx(0.75)
    # ECE, 2 bins: [0, .5) = {.2 (0)}: gap .2, weight 1/6; [.5, 1] = {.9,.6,.8,.5,.7} with
    # labels {1,0,1,0,1}: mean p .7, frequency .6, gap .1, weight 5/6 -> (.2 + .5) / 6.
    assert cal["ece"] == pytest.approx(0.7 / 6)
    # ECE, 3 bins: [0,1/3) {.2 (0)} gap .2 x1; [1/3,2/3) {.6,.5} labels 0: gap .55 x2;
    # [2/3,1] {.9,.8,.7} labels 1: gap .2 x3 -> (.2 + 1.1 + .6) / 6 = 1.9 / 6.
    assert calibration(DOC3, bins=3)["ece"] == pytest.approx(1.9 / 6)
    with pytest.raises(ConfigError):
        calibration(DOC3, bins=0)


def test_calibration_excludes_ties_missing_and_nan_and_prefers_gold():
    js = [
        J("d", "a", "b", 0.9, 2.0, 2.0),  # human tie: out
        J("d", "a", "c", 0.9, 2.0, None),  # missing human: out
        J("d", "b", "c", float("nan"), 2.0, 1.0),  # NaN P(A): out
        J("d", "c", "a", 0.3, 1.0, 2.0, gold=True),  # gold wins over humans: label 1
    ]
    cal = calibration(js, bins=10)
    assert cal["n"] == 1
    assert cal["brier"] == pytest.approx(0.49) and cal["accuracy"] == 0.0
    assert cal["ece"] == pytest.approx(0.7)
    empty = calibration(js[:3])
    assert empty["n"] == 0
    assert all(math.isnan(empty[k]) for k in ("ece", "brier", "nll", "accuracy"))


def test_nll_clips_saturated_probabilities():
    cal = calibration([J("d", "a", "b", 0.0, 2.0, 1.0)])
    assert cal["nll"] == pytest.approx(-math.log(1e-6))


def _judge(doc: str, human: dict, better: float, worse: float) -> list[Judgment]:
    """Every ordered pair judged: P(A) = `better` when A's human score is higher, else `worse`."""
    ids = list(human)
    return [
        J(doc, a, b, better if human[a] > human[b] else worse, human[a], human[b])
        for a in ids
        for b in ids
        if a != b
    ]


HUMAN5 = {"c0": 1.0, "c1": 4.0, "c2": 2.5, "c3": 5.0, "c4": 3.0}


@pytest.mark.parametrize("ranking", ["winrate", "pairs"])
def test_perfect_judge_gives_plus_one_and_reversed_gives_minus_one(ranking):
    perfect = _judge("d", HUMAN5, 0.8, 0.2) + _judge("e", {"u": 1.0, "v": 2.0, "w": 0.0}, 0.9, 0.3)
    reverse = _judge("d", HUMAN5, 0.2, 0.8)
    good = correlations(perfect, ranking=ranking, shuffles=20, seed=3)
    assert good["spearman"] == pytest.approx(1.0) and good["kendall"] == pytest.approx(1.0)
    assert good["n_docs"] == 2
    bad = correlations(reverse, ranking=ranking, shuffles=20, seed=3)
    assert bad["spearman"] == pytest.approx(-1.0) and bad["kendall"] == pytest.approx(-1.0)


def test_pairs_sort_direction_and_fallback_to_reverse_order():
    m = np.array([[np.nan, 0.9], [np.nan, np.nan]])
    assert pairs_sort(m, [0, 1]) == [1, 0]  # 0 preferred -> placed last (best last)
    assert pairs_sort(m, [1, 0]) == [1, 0]  # (1, 0) unjudged: read 1 - M[0, 1] = 0.1
    assert pairs_sort(np.full((2, 2), np.nan), [1, 0]) == [1, 0]  # no information: kept


def test_position_bias_breaks_pairs_but_permutation_debias_repairs_it():
    # A always wins (0.95 when A is truly better, 0.55 when worse): win rate still orders
    # correctly, PairS follows the shuffle; debiased: 0.5 + (0.95 - 0.55)/2 = 0.7 for the better.
    biased = _judge("d", HUMAN5, 0.95, 0.55)
    assert correlations(biased, "winrate")["spearman"] == pytest.approx(1.0)
    assert correlations(biased, "pairs", shuffles=30)["spearman"] < 0.9
    fixed = permutation_debias(biased)
    assert {round(j.p_a, 12) for j in fixed} == {0.7, 0.3}
    assert correlations(fixed, "pairs", shuffles=30)["spearman"] == pytest.approx(1.0)


def test_constant_humans_count_as_zero_and_unscored_docs_are_left_out():
    perfect = _judge("d", {"a": 1.0, "b": 2.0, "c": 3.0}, 0.8, 0.2)
    flat = [J("f", a, b, 0.9 if a < b else 0.1, 2.0, 2.0) for a in "abc" for b in "abc" if a != b]
    unscored = [J("u", "a", "b", 0.9), J("u", "b", "a", 0.2)]
    for ranking in ("winrate", "pairs"):
        c = correlations(perfect + flat + unscored, ranking=ranking, shuffles=5)
        assert c["spearman"] == pytest.approx(0.5) and c["kendall"] == pytest.approx(0.5)
        assert c["n_docs"] == 2
    # A judge that ties everything gives constant ranks under win rate: 0, not NaN.
    ties = [J("t", a, b, 0.5, {"a": 1, "b": 2}[a], {"a": 1, "b": 2}[b]) for a, b in ("ab", "ba")]
    assert correlations(ties)["spearman"] == 0.0
    assert math.isnan(correlations(unscored)["spearman"])


def test_whole_set_correlation_by_hand():
    # Two docs, each perfectly ordered with win rates .2/.5/.8; humans 1,2,3 and 4,5,6.
    # Pooled: score ranks 1.5,3.5,5.5,1.5,3.5,5.5 vs 1..6 -> rho = 8/sqrt(16*17.5) = 0.478091;
    # Kendall tau-b: 9 concordant, 3 discordant, 3 score ties -> 6/sqrt(12*15) = 0.447214.
    m = {("a", "b"): 0.2, ("a", "c"): 0.2, ("b", "a"): 0.8, ("b", "c"): 0.2, ("c", "a"): 0.8, ("c", "b"): 0.8}
    js = from_matrix("p", list("abc"), m, {"a": 1.0, "b": 2.0, "c": 3.0})
    js += from_matrix("q", list("abc"), m, {"a": 4.0, "b": 5.0, "c": 6.0})
    (_, mat), _ = preference_matrices(js).values()
    assert win_rates(mat).tolist() == pytest.approx([0.2, 0.5, 0.8])
    c = correlations(js)
    assert c["spearman"] == pytest.approx(1.0)
    assert c["spearman_whole"] == pytest.approx(8 / math.sqrt(280))
    assert c["kendall_whole"] == pytest.approx(6 / math.sqrt(180))


def test_permutation_debias_by_hand_and_fully_biased_judge():
    out = permutation_debias(DOC3)
    got = {(j.a_id, j.b_id): j.p_a for j in out}
    # 0.5 + (P(A|i,j) - P(A|j,i)) / 2.
    assert got[("x", "y")] == pytest.approx(0.65) and got[("y", "x")] == pytest.approx(0.35)
    assert got[("x", "z")] == pytest.approx(0.65) and got[("z", "y")] == pytest.approx(0.25)
    assert a_rate(out) == pytest.approx(0.5)
    assert out[0].token_logprobs == DOC3[0].token_logprobs and out[0].human_a == 3.0
    # Always 0.9 in both orders: every entry becomes exactly 0.5, so no decision is left:
    # the argmax A-rate (and fairness) is NaN, the probability A-rate is 0.5.
    biased = _judge("d", HUMAN5, 0.9, 0.9)
    flat = permutation_debias(biased)
    assert all(j.p_a == 0.5 for j in flat)
    assert math.isnan(a_rate(flat)) and math.isnan(fairness(flat))
    assert a_rate(flat, "prob") == 0.5 and fairness(flat, "prob") == 0.0
    # Without the reverse order a judgment is unchanged.
    lone = [J("d", "a", "b", 0.9)]
    assert permutation_debias(lone)[0].p_a == 0.9


def test_batch_calibration_centres_an_always_a_judge():
    always_a = _judge("d", HUMAN5, 0.9, 0.9)
    assert a_rate(always_a) == 1.0
    centred = batch_calibrate(always_a)
    assert all(j.p_a == pytest.approx(0.5) for j in centred)
    # logits ln 9 and 0: mean (ln 9)/2 = ln 3 -> sigmoid(ln 3) = 3/4 and sigmoid(-ln 3) = 1/4.
    two = batch_calibrate([J("d", "a", "b", 0.9), J("e", "a", "b", 0.5)])
    assert [j.p_a for j in two] == pytest.approx([0.75, 0.25])
    per_doc = batch_calibrate([J("d", "a", "b", 0.9), J("e", "a", "b", 0.5)], by_doc=True)
    assert [j.p_a for j in per_doc] == pytest.approx([0.5, 0.5])
    # NaN stays NaN and is not in the mean; a saturated answer stays saturated.
    mixed = batch_calibrate([J("d", "a", "b", 1.0), J("d", "b", "a", float("nan")), J("d", "a", "c", 0.5)])
    assert mixed[0].p_a == 1.0 and math.isnan(mixed[1].p_a) and 0 < mixed[2].p_a < 0.5


def test_contextual_calibration_with_p_cf():
    js = [J("d", "a", "b", 0.75), J("d", "b", "a", 0.5)]
    out = contextual_calibrate(js, 0.75)
    # p' = (p/.75) / (p/.75 + (1-p)/.25): 0.75 -> 0.5; 0.5 -> (2/3) / (2/3 + 2) = 0.25.
    assert [j.p_a for j in out] == pytest.approx([0.5, 0.25])
    assert [j.p_a for j in contextual_calibrate(js, 0.5)] == pytest.approx([0.75, 0.5])
    with pytest.raises(ConfigError):
        contextual_calibrate(js, 1.5)


def test_summarize_keys_types_json_and_determinism():
    js = _judge("d", HUMAN5, 0.95, 0.55) + DOC3
    s = summarize(js, shuffles=10, seed=1, bins=5)
    assert set(s) == {"none", "permutation", "batch"}
    s_cf = summarize(js, p_cf=0.7, shuffles=10, seed=1, bins=5)
    assert set(s_cf) == {"none", "permutation", "batch", "contextual"}
    for m in s_cf.values():
        assert set(m) == SUMMARY_KEYS
        assert all(type(v) in (float, int) for v in m.values())
        assert m["n_judgments"] == 26 and m["n_docs"] == 2
    # "bc" is NaN here (these judgments carry no B log-probs), so compare the JSON texts.
    assert json.dumps(json.loads(json.dumps(s_cf))) == json.dumps(s_cf)
    assert summarize(js, p_cf=0.7, shuffles=10, seed=1, bins=5) == s_cf
    none = s["none"]
    assert none["a_rate"] == pytest.approx((1.0 + 0.8) / 2)
    assert s["permutation"]["a_rate"] == pytest.approx(0.5)
    assert none["spearman"] == pytest.approx(1.0)
    assert s["permutation"]["spearman_pairs"] == pytest.approx(1.0)


def test_summarize_survives_nan_only_and_empty_input():
    s = summarize([J("d", "a", "b", float("nan"))], shuffles=2)
    m = s["none"]
    assert m["n_judgments"] == 1 and m["n_calibration"] == 0
    assert math.isnan(m["a_rate"]) and math.isnan(m["ece"]) and math.isnan(m["spearman"])
    assert summarize([], shuffles=2)["batch"]["n_docs"] == 0


def test_rows_round_trip_through_json():
    js = [
        Judgment(
            "d1",
            "a",
            "b",
            0.25,
            {"A:A": -1.5, "A: A": float("-inf"), "B:B": -0.3},
            human_a=3.5,
            human_b=None,
            gold_a=None,
        ),
        Judgment("d1", "b", "a", 1.0, {}, gold_a=True),
        Judgment("d2", "a", "b", float("nan"), {}, flags=("unreadable",)),
    ]
    for j in js:
        row = json.loads(json.dumps(judgment_to_row(j)))
        assert list(row) == [
            "doc_id",
            "a_id",
            "b_id",
            "p_a",
            "token_logprobs",
            "human_a",
            "human_b",
            "gold_a",
            "flags",
        ]
        back = judgment_from_row(row)
        assert back == j or (math.isnan(back.p_a) and back.flags == j.flags == ("unreadable",))


def test_rows_round_trip_through_the_strict_jsonl_file(tmp_path):
    """judgments.jsonl is strict JSON (NaN -> null, -inf -> "-inf"): a flagged pair and a
    probability-0 answer token read back as they were written."""
    from harness.judging import load_judgments, write_judgments

    js = [
        Judgment("d1", "a", "b", 0.25, {"A:A": -1.5, "A: A": float("-inf"), "B:B": -0.3}),
        Judgment("d2", "a", "b", float("nan"), {}, flags=("unreadable",)),
    ]
    write_judgments(tmp_path / "j.jsonl", js, float("nan"))
    back, p_cf = load_judgments(tmp_path / "j.jsonl")
    assert back[0] == js[0] and math.isnan(back[1].p_a) and back[1].flags == ("unreadable",)
    row = json.loads((tmp_path / "j.jsonl").read_text().splitlines()[0])
    row.update(p_a=None, flags=[])
    with pytest.raises(DataError, match="p_a"):  # null is NaN for a flagged pair only
        judgment_from_row(row)


def test_a_file_this_process_wrote_reads_back_as_parsing_it_does(tmp_path):
    """load_judgments of a judgments.jsonl this process just wrote gives what parsing the file
    gives (same values and types: int labels as floats, -inf, a flagged NaN, a numpy float), without
    parsing it; rows that would not read back as written (a NaN label is null in the file) and a
    file changed since (same size) are parsed. Control: the parse itself, with the memory cleared."""
    from harness import judging
    from harness.judging import load_judgments, write_judgments

    def parsed(path):
        judging._written.clear()
        return load_judgments(path)

    js = [
        Judgment("d1", "a", "b", 0.25, {"A": -1.5, "B": float("-inf")}, 3, 2.5, True, ("x",)),
        Judgment("d1", "b", "a", np.float64(0.75), {"A": np.float32(-0.5)}, None, None, None),
        Judgment("d2", "a", "b", float("nan"), {}, flags=("unreadable",)),
    ]
    for p_cf in (0.5, float("nan"), None):
        write_judgments(tmp_path / "j.jsonl", js, p_cf)
        assert judging._written, "not remembered"
        got, got_cf = load_judgments(tmp_path / "j.jsonl")
        want, want_cf = parsed(tmp_path / "j.jsonl")
        assert repr(got) == repr(want) and repr(got_cf) == repr(want_cf)
        assert [type(j.human_a) for j in got] == [float, type(None), type(None)]

    write_judgments(tmp_path / "j.jsonl", js, 0.5)
    text = (tmp_path / "j.jsonl").read_text()
    (tmp_path / "j.jsonl").write_text(text.replace('"p_a": 0.25', '"p_a": 0.35'))  # same size
    assert load_judgments(tmp_path / "j.jsonl")[0][0].p_a == 0.35

    nan_label = [Judgment("d1", "a", "b", 0.25, {"A": -1.5}, float("nan"), 1.0)]
    write_judgments(tmp_path / "n.jsonl", nan_label, 0.5)
    assert load_judgments(tmp_path / "n.jsonl")[0][0].human_a is None  # as the file says


@pytest.mark.parametrize(
    "field,value",
    [
        ("p_a", 1.2),
        ("p_a", "0.5"),
        ("doc_id", 7),
        ("human_a", "high"),
        ("gold_a", 1),
        ("token_logprobs", {"A:A": "x"}),
        ("flags", "unreadable"),
        ("flags", [1]),
    ],
)
def test_bad_rows_name_file_record_and_field(field, value):
    row = judgment_to_row(J("d", "a", "b", 0.5, 1.0, 2.0))
    row[field] = value
    with pytest.raises(DataError) as err:
        judgment_from_row(row, path="run/judgments.jsonl", record=4)
    assert str(err.value).startswith(f"run/judgments.jsonl, record 4, field '{field}'")


def test_rank_correlations_match_scipy_with_ties():
    from scipy.stats import kendalltau, spearmanr

    from harness.metrics import rank_correlations

    rng = np.random.default_rng(0)
    human = rng.integers(1, 4, 9).astype(float)  # many ties, as in averaged human ratings
    scores = rng.integers(0, 5, (25, 9)).astype(float)
    rho, tau = rank_correlations(scores, human)
    for row, r, t in zip(scores, rho, tau):
        if np.ptp(row) == 0:
            assert r == 0.0 and t == 0.0
            continue
        assert r == pytest.approx(spearmanr(row, human)[0], abs=1e-12)
        assert t == pytest.approx(kendalltau(row, human)[0], abs=1e-12)
    assert rank_correlations(scores, np.full(9, 2.0))[0].tolist() == [0.0] * 25


def test_answer_mass_counts_no_answer_as_zero_and_leaves_unreadable_out():
    """A pair the judge answered with no A/B token has mass 0 (flagged low_answer_mass, counted in
    the card); an API answer that stayed unreadable has no reading (neither flagged nor counted)."""
    from harness.judging import LOW_MASS, _mass_flags
    from harness.metrics import answer_mass_stats
    from harness.records import PairScore

    good = {"A": math.log(0.5), "B": math.log(0.3)}  # mass 0.8
    read = Judgment("d", "x", "y", 0.6, good, 1.0, 0.0)
    silent = Judgment("d", "y", "x", 0.5, {}, 0.0, 1.0, flags=("no_answer", LOW_MASS))
    spoiled = Judgment("d", "x", "z", math.nan, {}, 1.0, 0.0, flags=("unreadable",))
    stats = answer_mass_stats([read, silent, spoiled])
    assert stats == pytest.approx({"answer_mass_median": 0.4, "answer_mass_low_share": 0.5})
    assert _mass_flags(PairScore(token_logprobs={}, p_a=0.5, flags=("no_answer",))) == (LOW_MASS,)
    assert _mass_flags(PairScore(token_logprobs={}, p_a=math.nan, flags=("unreadable",))) == ()
    assert _mass_flags(PairScore(token_logprobs=good, p_a=0.625)) == ()


def test_ranks_are_rounded_in_one_place():
    """Rounding before ranking is one rule, `correlation.rankable`: nothing else in harness/ rounds
    to RANK_DECIMALS (zepo/plots.py and zepo/figure3.py each rounded on their own, failing this),
    and both rank as it does: tied values a float's noise apart are one rank (control: unrounded,
    scipy orders them)."""
    from scipy.stats import spearmanr

    from harness.zepo import figure3, plots

    root = Path(__file__).resolve().parents[2] / "harness"
    others = [
        str(f.relative_to(root))
        for f in root.rglob("*.py")
        if "RANK_DECIMALS" in f.read_text() and f.relative_to(root).as_posix() != "metrics/correlation.py"
    ]
    assert others == []
    x, y = [0.5 + 3e-15, 0.5 - 3e-15, 0.2, 0.9], [1.0, 2.0, 0.0, 3.0]
    rho = plots.spearman(x, y)["rho"]
    assert rho == spearmanr([0.5, 0.5, 0.2, 0.9], y)[0] != spearmanr(x, y)[0]
    assert figure3.round_spearman(np.array([x]), np.array([y]))[0][0] == pytest.approx(rho)


def test_tied_win_rates_stay_tied_under_float_noise():
    """Two candidates whose win rates tie in exact arithmetic ((0.7 + 0.3 + 0.5) / 3 and
    (0.6 + 0.4 + 0.5) / 3), judged twice with one P(A) moved by float-sized noise (3e-15) in
    opposite directions: the per-document and pooled win-rate Spearman are equal in both copies,
    because win rates are ranked rounded to RANK_DECIMALS. NEGATIVE CONTROL: ranked unrounded (scipy
    on the raw win rates), the noise orders the tie and the two copies' Spearman differ."""
    from scipy.stats import spearmanr

    from harness.metrics.correlation import RANK_DECIMALS

    m = np.array(
        [[np.nan, 0.7, 0.3, 0.5], [0.6, np.nan, 0.4, 0.5], [0.2, 0.3, np.nan, 0.4], [0.8, 0.9, 0.7, np.nan]]
    )
    human = [3.0, 2.0, 1.0, 4.0]
    ids = ["c0", "c1", "c2", "c3"]

    def judged(noise: float) -> list[Judgment]:
        p = m.copy()
        p[0, 1] += noise
        return [
            Judgment("d", ids[i], ids[k], float(p[i, k]), {}, human[i], human[k])
            for i in range(4)
            for k in range(4)
            if i != k
        ]

    up, down = judged(3e-15), judged(-3e-15)
    a, b = correlations(up, "winrate", 2), correlations(down, "winrate", 2)
    assert a["spearman"] == b["spearman"] and a["spearman_whole"] == b["spearman_whole"]
    raw = [win_rates(preference_matrices(js)["d"][1]) for js in (up, down)]
    assert raw[0][0] > raw[0][1] and raw[1][0] < raw[1][1]  # the noise survived into the win rates
    assert round(raw[0][0], RANK_DECIMALS) == round(raw[0][1], RANK_DECIMALS)
    assert spearmanr(raw[0], human)[0] != spearmanr(raw[1], human)[0]  # ranked raw, the noise decides
