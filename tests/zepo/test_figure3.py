"""Figure 3 with its interval (issue 31): the across-instruction Spearman of an objective with the
instructions' Spearman against humans, per bootstrap round on the SAME resampled documents for
every instruction, its interval the t interval on those rounds' RMSE (harness/metrics/interval.py:
a rank across instructions jumps as a document leaves, which the jackknife cannot follow); and the
candidate-order control (experiment.shuffle_candidates). Synthetic data with a known answer; no model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from harness.errors import DataError
from harness.judging import build_requests
from harness.metrics.bootstrap import LeaveOneOut
from harness.metrics.settings import MetricsSettings
from harness.metrics.summary import Summary, analyse
from harness.records import Candidate, Document, Judgment
from harness.zepo.figure3 import (
    FIGURE3,
    HUMAN,
    UNDEFINED,
    earlier_preferred,
    figure3_intervals,
    objective_values,
    round_spearman,
    shuffle_candidates,
)

ROUNDS = 1000


def _summaries(
    fair: np.ndarray, sp: np.ndarray, seeds: list[int] | None = None
) -> tuple[list, list[Summary]]:
    """Rows and Summaries of N instructions (rows of `fair`/`sp`: (instructions, documents) per-document
    fairness and Spearman, means over documents as the real ones). Each metric's rounds are the
    weighted means under the bootstrap's counts; with `seeds`, instruction k draws its own documents."""
    n, d = fair.shape
    ids = [f"doc{j:02d}" for j in range(d)]
    rows, out = [], []
    for k in range(n):
        res = LeaveOneOut.over(ids, 0.95, ROUNDS, 7 if seeds is None else seeds[k])
        w = res.boot_columns(ids)
        m = {
            "fairness": fair[k].mean(),
            "a_rate_upper": 0.5 - fair[k].mean(),
            "spearman_pairs": sp[k].mean(),
            "spearman": sp[k].mean(),
            "prob_gap": 0.3,
            "bc": 0.1,
            "ece": 0.2,
            "fairness_prob": 0.0,
            "a_rate": 0.5,
            "a_rate_prob": 0.5,
            "max_prob": 0.6,
        }
        reps = {
            "fairness": (w @ fair[k]) / w.sum(1),
            "spearman_pairs": (w @ sp[k]) / w.sum(1),
            "spearman": (w @ sp[k]) / w.sum(1),
            "prob_gap": np.full(ROUNDS, 0.3),
            "bc": np.full(ROUNDS, 0.1),
            "ece": np.full(ROUNDS, 0.2),
        }
        reps["a_rate_upper"] = 0.5 - reps["fairness"]
        rows.append({"index": k, "none": m, "permutation": m})
        out.append(
            Summary(
                {"none": m, "permutation": m},
                {"none": {}, "permutation": {}},
                res,
                None,
                {"none": reps, "permutation": reps},
            )
        )
    return rows, out


def test_round_spearman_is_scipy_per_round_with_ties_nans_and_degenerate_rounds():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, (50, 9)).astype(float)  # many ties
    y = rng.normal(size=(50, 9))
    x[3, 2] = np.nan  # left out of its round only
    x[4] = 1.0  # constant objective
    y[5] = 2.0  # constant Spearman
    x[6, :7] = np.nan  # 2 instructions left: too few
    rho, why = round_spearman(x, y)
    for r in range(50):
        ok = np.isfinite(x[r])
        if r in (4, 5, 6):
            assert (
                math.isnan(rho[r])
                and UNDEFINED[why[r]] == {4: "constant_objective", 5: "constant_spearman", 6: "too_few"}[r]
            )
        else:
            assert why[r] == -1 and rho[r] == pytest.approx(spearmanr(x[r, ok], y[r, ok])[0], abs=1e-12)


def test_float_noise_is_no_ranking():
    """Instructions whose Spearman is 0 in exact arithmetic but +-1e-17 in floats (a mean of
    per-document correlations) are tied, in the point (plots.spearman) and in every round; ranked
    as they come (the negative control, scipy on the raw floats) the noise decides the rho."""
    from harness.zepo import plots

    fair = np.array([-0.5, -0.5, -0.5, -0.5, -0.2, -0.1])
    sp = np.array([1e-17, -2e-17, 3e-17, -1e-17, 0.1, 0.2])
    tied = spearmanr(fair, np.round(sp, 12))[0]
    assert plots.spearman(fair, sp)["rho"] == pytest.approx(tied)
    assert round_spearman(fair[None], sp[None])[0][0] == pytest.approx(tied)
    assert spearmanr(fair, sp)[0] != pytest.approx(tied)
    assert (
        UNDEFINED[round_spearman(fair[None], sp[None] * 0 + 1e-17 * np.arange(6))[1][0]]
        == "constant_spearman"
    )


def test_figure3_interval_excludes_0_for_a_real_relation_and_covers_0_for_noise():
    """A strong relation between instructions' fairness and their Spearman gives an interval above 0;
    per-document noise with no instruction effect (the negative control) gives intervals that cover
    0 in most of 40 data sets, as a 95% interval should."""
    rng = np.random.default_rng(1)
    n, d = 12, 20
    q = np.linspace(0, 1, n)[:, None]
    fair = -0.4 + 0.3 * q + rng.normal(0, 0.1, (n, d))
    sp = 0.1 + 0.3 * q + rng.normal(0, 0.1, (n, d))
    rows, summ = _summaries(fair, sp)
    got = figure3_intervals(rows, summ, 0.95, d)
    e = got["spearman_pairs"]["none"]["fairness"]
    assert (
        e["rho"] > 0.8
        and e["lo"] > 0
        and e["interval"] == [e["lo"], e["hi"]]
        and e["defined_rounds"] == ROUNDS
    )
    assert "distinguishable from 0 at 95%" in e["sentence"] and "not" not in e["sentence"]
    assert "(20 documents, t-bootstrap)" in e["sentence"] and e["n_documents"] == 20
    assert e["sentence"].startswith(
        "raw fairness vs PairS Spearman across 12 instructions on 20 documents: rho +"
    )
    # The point is the study's own (analyse): Spearman rho of objective_values with the Spearman.
    assert e["rho"] == pytest.approx(spearmanr(objective_values(rows)["fairness"], sp.mean(1))[0])
    assert set(got) >= set(HUMAN) and set(got["spearman"]["permutation"]) == set(FIGURE3)
    # constant confidence/BC/ECE: undefined, said so, no interval
    c = got["spearman_pairs"]["none"]["confidence"]
    assert math.isnan(c["rho"]) and c["interval"] is None and "undefined" in c["sentence"]
    covered = 0
    for seed in range(40):
        rng = np.random.default_rng(100 + seed)
        rows, summ = _summaries(-0.25 + rng.normal(0, 0.1, (n, d)), 0.2 + rng.normal(0, 0.1, (n, d)))
        e = figure3_intervals(rows, summ, 0.95, d)["spearman_pairs"]["none"]["fairness"]
        covered += e["lo"] <= 0 <= e["hi"]
    assert covered >= 36, covered  # 40 x 95% = 38 expected


def test_figure3_uses_the_same_document_draws_for_every_instruction():
    """Document effects shared by all instructions (documents that lower every instruction's
    Spearman, others that lower every instruction's fairness, independently) leave the ranking of
    instructions unchanged in every round when all of them are resampled with the same documents: a
    tight interval near +1. Drawn independently per instruction (the negative control), the shared
    effects no longer cancel and the interval covers 0; figure3_intervals refuses such summaries."""
    rng = np.random.default_rng(2)
    n, d = 10, 15
    q = np.linspace(0, 1, n)[:, None]
    fair = -0.3 + 0.02 * q + rng.normal(0, 0.3, d) + rng.normal(0, 0.002, (n, d))
    sp = 0.2 + 0.02 * q + rng.normal(0, 0.3, d) + rng.normal(0, 0.002, (n, d))
    rows, summ = _summaries(fair, sp)
    e = figure3_intervals(rows, summ, 0.95, d)["spearman_pairs"]["none"]["fairness"]
    assert e["lo"] > 0.7
    rows, apart = _summaries(fair, sp, seeds=list(range(n)))
    with pytest.raises(DataError, match="resample different documents"):
        figure3_intervals(rows, apart, 0.95, d)
    x = np.stack([s.boot["none"]["fairness"] for s in apart], 1)
    y = np.stack([s.boot["none"]["spearman_pairs"] for s in apart], 1)
    rho, _ = round_spearman(x, y)
    lo, hi = np.quantile(rho, [0.025, 0.975])
    assert lo < 0 < hi


def test_figure3_counts_undefined_rounds_and_withholds_an_interval_built_on_too_few():
    """Fairness that differs between instructions only on one document: every round that does not
    draw that document has a constant fairness (rho undefined). Those rounds are counted; with more
    than 5% of them undefined there is no interval, and the sentence says why."""
    n, d = 6, 12
    fair = np.full((n, d), -0.5)
    fair[:, 0] = np.linspace(-0.5, 0, n)
    sp = np.tile(np.linspace(0, 0.5, n)[:, None], (1, d)) + np.random.default_rng(3).normal(0, 0.01, (n, d))
    rows, summ = _summaries(fair, sp)
    e = figure3_intervals(rows, summ, 0.95, d)["spearman_pairs"]["none"]["fairness"]
    missed = int((summ[0].loo.boot_columns(["doc00"])[:, 0] == 0).sum())  # (11/12)^12: about 35% of rounds
    assert 250 < missed < 450
    assert e["undefined"] == {"too_few": 0, "constant_objective": missed, "constant_spearman": 0}
    assert e["defined_rounds"] == ROUNDS - missed and e["interval"] is None and e["lo"] is None
    assert f"(12 documents: undefined in {missed} of {ROUNDS} bootstrap rounds)" in e["sentence"]
    assert f"({missed} of {ROUNDS} rounds undefined: constant objective {missed})" in e["sentence"]
    assert e["rho"] == pytest.approx(1.0)  # the point itself is defined


# -- the candidate-order control ------------------------------------------------------------------
def _docs(k: int = 30, n: int = 6) -> list[Document]:
    """Humans always prefer the earlier-listed candidate (scores fall along the list)."""
    return [
        Document(
            f"d{i}",
            f"source {i}",
            tuple(Candidate(f"c{j}", f"text {i}.{j}", {"coherence": float(n - j)}) for j in range(n)),
        )
        for i in range(k)
    ]


def test_shuffle_candidates_is_seeded_keeps_scores_and_is_a_noop_when_off():
    docs = _docs()
    a, b, c = shuffle_candidates(docs, 0), shuffle_candidates(docs, 0), shuffle_candidates(docs, 1)
    order = [[x.id for x in d.candidates] for d in a]
    assert order == [[x.id for x in d.candidates] for d in b]  # same seed: same orders
    assert order != [[x.id for x in d.candidates] for d in c]  # another seed: other orders
    assert any(o != sorted(o) for o in order)
    # the order depends on (seed, document id) only: the same in any slice
    assert [x.id for x in shuffle_candidates(docs[5:6], 0)[0].candidates] == order[5]
    for old, new in zip(docs, a):
        assert sorted(new.candidates, key=lambda x: x.id) == sorted(old.candidates, key=lambda x: x.id)
        assert (new.id, new.source) == (old.id, old.source)
    # max_candidates: the same judged subset, reordered
    sub = shuffle_candidates(docs, 0, max_candidates=3)
    assert all({x.id for x in d.candidates} == {"c0", "c1", "c2"} for d in sub)
    # the judgments carry each candidate's own human score; the same ordered pairs (cache keys) as before
    req, tmpl = build_requests(a, "Which is better? Answer 'A' or 'B'.", "summarization", "coherence")
    req0, _ = build_requests(docs, "Which is better? Answer 'A' or 'B'.", "summarization", "coherence")
    assert sorted(r.prompt for r in req) == sorted(r.prompt for r in req0) and [r.prompt for r in req] != [
        r.prompt for r in req0
    ]
    for t in tmpl:
        assert t.human_a == 6 - int(t.a_id[1:]) and t.human_b == 6 - int(t.b_id[1:])
    # humans prefer the earlier candidate in every pair as loaded, about half after the shuffle
    assert earlier_preferred(docs, "coherence")["share_earlier"] == 1.0
    assert 0.4 < earlier_preferred(a, "coherence")["share_earlier"] < 0.6
    assert earlier_preferred(docs, None)["unscored"] == 30 * 15


def test_the_experiment_default_keeps_the_dataset_order(tmp_path, monkeypatch):
    """experiment.shuffle_candidates is false by default and the study then judges the documents it
    was given, in their order (no shuffle call at all)."""
    from helpers.compose import compose

    import harness.zepo.study as study

    cfg = compose(["experiment=sensitivity"])
    assert cfg.experiment.shuffle_candidates is False
    called = []
    monkeypatch.setattr(study, "shuffle_candidates", lambda *a, **k: called.append(1))
    monkeypatch.setattr(
        study,
        "score_instructions",
        lambda judge, docs, *a, **k: (_ for _ in ()).throw(
            RuntimeError([[c.id for c in d.candidates] for d in docs])
        ),
    )
    with pytest.raises(RuntimeError) as e:
        study.run_sensitivity(
            None,
            _docs(2, 3),
            ["x A B"],
            task="t",
            aspect="coherence",
            family="summarization",
            out_dir=tmp_path,
        )
    assert e.value.args[0] == [["c0", "c1", "c2"]] * 2 and not called


def _judged(docs: list[Document], skill: float, instruction: int) -> list[Judgment]:
    """A judge agreeing with humans on each unordered pair with probability `skill`, in both orders
    (no position bias): P(A) 0.75 for the candidate it prefers. Whether it agrees on a pair depends
    on (instruction, document, the two candidates) only, not on their order in the list."""
    out = []
    for d in docs:
        cs = d.candidates
        for i in range(len(cs)):
            for j in range(i + 1, len(cs)):
                hi, hj = cs[i].scores["coherence"], cs[j].scores["coherence"]
                pair = sorted((int(cs[i].id[1:]), int(cs[j].id[1:])))
                right = np.random.default_rng([instruction, int(d.id[1:]), *pair]).random() < skill
                first = (hi > hj) == right  # the judge prefers cs[i]
                p = 0.75 if first else 0.25  # exact in binary: 1 - p is the other one, bit for bit
                out += [
                    Judgment(d.id, cs[i].id, cs[j].id, p, {}, hi, hj),
                    Judgment(d.id, cs[j].id, cs[i].id, 1 - p, {}, hj, hi),
                ]
    return out


def test_the_artefact_the_shuffle_removes():
    """Where humans always prefer the earlier-listed candidate, the debiased decision rate (pairs i < j
    on which the judge prefers the earlier one) IS the judge's agreement with humans, so debiased
    fairness, -|rate - 0.5|, is a function of accuracy and correlates perfectly (negatively, above
    0.5 agreement) with the Spearman against humans. With the candidates shuffled, the same judges'
    debiased rate is about 0.5 for all of them and that relation is gone."""
    docs = _docs(30, 5)
    skills = np.linspace(0.55, 0.95, 6)
    checks = ((False, lambda e: e["rho"] < -0.95 and e["hi"] < 0), (True, lambda e: e["lo"] < 0 < e["hi"]))
    for shuffled, check in checks:
        use = shuffle_candidates(docs, 0) if shuffled else docs
        rows, summ = [], []
        for k, s in enumerate(skills):
            sm = analyse(_judged(use, s, k), shuffles=2, seed=0, with_intervals=MetricsSettings(200))
            rows.append({"index": k, **sm.metrics})
            summ.append(sm)
        if not shuffled:
            acc = [r["none"]["accuracy"] for r in rows]
            assert [r["permutation"]["a_rate_upper"] for r in rows] == pytest.approx(acc)
        e = figure3_intervals(rows, summ, 0.95, len(docs))["spearman_pairs"]["permutation"]["fairness"]
        assert check(e), (shuffled, e)


def test_figure3_orders_script_pairs_the_two_orders(tmp_path):
    """scripts/figure3_orders.py on two runs differing only in the candidate order (4 candidates:
    PairS sorts every initial order, so raw metrics are order-invariant): a raw rho (-ECE's) is the
    same in both (difference exactly 0), the debiased fairness one moves from the artefact's -1 to about 0, and its
    paired difference excludes 0."""
    import importlib.util
    import json
    from pathlib import Path

    from harness.judging import write_judgments

    spec = importlib.util.spec_from_file_location(
        "figure3_orders", Path(__file__).resolve().parents[2] / "scripts" / "figure3_orders.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    compare = script.compare

    docs = _docs(30, 4)
    for name, use in (("a", docs), ("b", shuffle_candidates(docs, 0))):
        for k, s in enumerate(np.linspace(0.55, 0.95, 6)):
            (tmp_path / name / "instructions" / f"{k:03d}").mkdir(parents=True)
            write_judgments(
                tmp_path / name / "instructions" / f"{k:03d}" / "judgments.jsonl", _judged(use, s, k), 0.5
            )
        (tmp_path / name / "config.json").write_text(
            json.dumps(
                {
                    "seed": 0,
                    "experiment": {"shuffles": 100, "shuffle_candidates": name == "b"},
                    "metrics": {"bootstrap": 200, "level": 0.95},
                }
            )
        )
    got = compare(tmp_path / "a", tmp_path / "b")
    raw = got["spearman_pairs"]["none"]["calibration_ece"]  # raw fairness: constant (no position bias)
    assert math.isfinite(raw["original"]["rho"]) and raw["original"]["rho"] == raw["shuffled"]["rho"]
    assert raw["diff"] == 0 and raw["interval"] is None  # the same in every document: no spread, no interval
    deb = got["spearman_pairs"]["permutation"]["fairness"]
    assert deb["original"]["rho"] < -0.9 and deb["interval"][0] > 0, deb
    assert deb["sentence"].startswith(
        "permutation-debiased fairness vs PairS Spearman, rho shuffled - dataset order"
    )
