"""Rankings: Bradley-Terry/Elo recovers known ratings; bootstrap intervals cover them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.abb import ranking
from harness.errors import ConfigError

TRUE_ELO = {"base": 1000.0, "m1": 1150.0, "m2": 1050.0, "m3": 900.0, "m4": 1250.0}


def _synthetic_battles(n: int, seed: int) -> ranking.Battles:
    """Random pairs among all models; Bernoulli outcomes from the true Elo ratings."""
    rng = np.random.default_rng(seed)
    names = list(TRUE_ELO)
    a, b, y = [], [], []
    for _ in range(n):
        i, j = rng.choice(len(names), size=2, replace=False)
        p = 1 / (1 + 10 ** ((TRUE_ELO[names[j]] - TRUE_ELO[names[i]]) / 400))
        a.append(names[i]), b.append(names[j]), y.append(float(rng.random() < p))
    return ranking.make_battles(a, b, y)


def test_bt_recovers_known_ranking_and_intervals_cover_truth():
    battles = _synthetic_battles(4000, seed=0)
    boot = ranking.bootstrap_elo(battles, "base", rounds=100, seed=1)
    elo = {n: v["elo"] for n, v in boot.items()}
    assert ranking.order(elo) == ranking.order(TRUE_ELO)
    assert elo["base"] == pytest.approx(1000.0)
    for name, truth in TRUE_ELO.items():
        if name == "base":
            continue
        assert boot[name]["lo"] < truth < boot[name]["hi"], (name, boot[name])
        assert boot[name]["hi"] - boot[name]["lo"] < 80
    assert ranking.bootstrap_elo(battles, "base", rounds=10, seed=1) == ranking.bootstrap_elo(
        battles, "base", rounds=10, seed=1
    )


def test_pseudo_battles_from_scores():
    """Item scores on 1..5 vs the baseline, per-model mean shifts known: Elo order follows them."""
    rng = np.random.default_rng(2)
    shifts = {"m1": 0.6, "m2": 0.2, "m3": -0.4, "m4": 1.0}
    scores, models, groups = [], [], []
    for q in range(300):
        for m, s in shifts.items():
            scores.append(float(np.clip(np.round(3 + s + rng.normal(0, 1)), 1, 5)))
            models.append(m), groups.append(q)
    battles = ranking.pseudo_battles(scores, models, "gpt-4-0314", (1.0, 5.0), groups)
    # No baseline rows exist in the scores: pseudo_battles adds the baseline as the opponent.
    assert "gpt-4-0314" in battles.names
    boot = ranking.bootstrap_elo(battles, "gpt-4-0314", rounds=30, seed=0)
    elo = {n: v["elo"] for n, v in boot.items() if n != "gpt-4-0314"}
    assert ranking.order(elo) == ranking.order(shifts)
    # Against a single opponent the BT MLE is the logit of the mean win probability.
    p1 = np.mean([(s - 1) / 4 for s, m in zip(scores, models) if m == "m1"])
    assert elo["m1"] - 1000 == pytest.approx(ranking.ELO_SCALE * math.log(p1 / (1 - p1)), abs=0.5)
    wr = ranking.win_rates({**elo, "gpt-4-0314": 1000.0}, "gpt-4-0314")
    assert wr["gpt-4-0314"] == pytest.approx(0.5) and wr["m1"] == pytest.approx(p1, abs=1e-3)


def test_model_means_and_retained_signal():
    models = ["a", "a", "b", "b", "c", "c"]
    orig = np.array([1.0, 3.0, 4.0, 5.0, 2.0, 2.0])
    assert ranking.model_means(orig, models) == {"a": 2.0, "b": 4.5, "c": 2.0}
    contracted = 0.1 * orig + 0.9 * 3.0
    rep = ranking.signal_report(orig, contracted, models)
    assert rep["per_item"]["pearson"] == pytest.approx(1.0)
    assert rep["per_item"]["spearman"] == pytest.approx(1.0)
    assert rep["per_item"]["variance_ratio"] == pytest.approx(0.01)
    assert rep["per_item"]["variance_reduction"] == pytest.approx(0.99)
    noisy = contracted + np.random.default_rng(0).normal(0, 0.5, orig.size)
    r = ranking.retained_signal(orig, noisy)
    assert r["pearson"] < 0.95 and -1 <= r["kendall"] <= 1
    flat = ranking.retained_signal(orig, np.full(orig.size, 3.0))
    assert math.isnan(flat["pearson"]) and flat["variance_reduction"] == 1.0
    with pytest.raises(ConfigError):
        ranking.retained_signal([1.0], [1.0])
    with pytest.raises(ConfigError):
        ranking.model_means([1.0, 2.0], ["a"])
