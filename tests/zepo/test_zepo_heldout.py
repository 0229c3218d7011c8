"""The search with permutation debiasing (the official --do_permutate, Table 2's ZEPO + Debias) and the
evaluation reported both leaky and held out. The scripted judge of test_zepo has a designed position
bias per instruction (named as such), so what debiasing removes is known by design."""

from __future__ import annotations

import logging

import pytest
from helpers.scripted import ScriptedBiasJudge, ScriptedOptimizer, scripted_docs

from harness import metrics
from harness.errors import ConfigError
from harness.judges.cache import CachedJudge, ScoreCache
from harness.records import Candidate, Document, PairScore
from harness.zepo import search as zepo
from harness.zepo.run import before_after_table, run_zepo
from harness.zepo.search import candidate_line

INITIAL = "Which summary is more coherent? Answer 'A' or 'B'."


def _mixed_docs(n: int = 2) -> list[Document]:
    """Qualities not in file order, so the debiased upper-triangle rate is neither 0 nor 1."""
    order = [2, 0, 3, 1]
    return [
        Document(
            f"m{k}",
            f"source {k}",
            tuple(Candidate(f"c{i}", f"q{q}", {"coherence": float(q)}) for i, q in enumerate(order)),
        )
        for k in range(n)
    ]


def _search(tmp_path, **kw):
    judge = CachedJudge(ScriptedBiasJudge(), ScoreCache(tmp_path / "c.sqlite"))
    settings = zepo.SearchSettings(**{"population": 3, "epochs": 2, "shuffles": 5, **kw})
    return zepo.Search(
        judge,
        ScriptedOptimizer(),
        INITIAL,
        "coherence",
        "summarization",
        _mixed_docs(),
        (),
        settings,
        state_path=tmp_path / "state.json",
    )


def test_debiased_search_scores_the_upper_triangle_of_debiased_judgments(tmp_path):
    raw = _search(tmp_path / "raw").run()
    deb_search = _search(tmp_path / "deb", debias="permutation")
    deb = deb_search.run()
    # Raw: each instruction's designed bias moves its A-rate; the search picks a fairer one.
    assert len({c.a_rate for c in raw.candidates}) > 1 and raw.best.index != 0
    # Debiased: both orders averaged, the bias cancels; every instruction has the same decisions,
    # and the rate is the official upper-triangle one: c0 > c1, c0 < c2, c0 > c3, c1 < c2, c1 < c3,
    # c2 > c3 -> 3 of 6 pairs prefer the earlier candidate.
    for c in deb.candidates:
        judged = metrics.permutation_debias(deb_search.judge_on(deb_search.search_docs, c.text))
        assert c.a_rate == metrics.upper_a_rate(judged) == pytest.approx(0.5)
        assert metrics.a_rate(judged) == 0.5  # (over all entries it is 0.5 whatever the judge)
    assert deb.best.index == 0  # all tie: the initial instruction stays


def test_debiased_rate_is_not_trivially_half(tmp_path):
    docs = [
        Document("s", "src", tuple(Candidate(f"c{i}", f"q{i}", {"coherence": float(i)}) for i in range(4)))
    ]
    judge = CachedJudge(ScriptedBiasJudge(), ScoreCache(tmp_path / "c.sqlite"))
    s = zepo.Search(
        judge,
        ScriptedOptimizer(),
        INITIAL,
        "coherence",
        "summarization",
        docs,
        (),
        zepo.SearchSettings(population=1, epochs=1, debias="permutation"),
    )
    assert s.run().best.a_rate == 0.0  # quality rises with file order: the later candidate always wins


def test_debias_setting_is_part_of_the_resume_fingerprint(tmp_path):
    _search(tmp_path).run()
    with pytest.raises(ConfigError, match="different settings"):
        _search(tmp_path, debias="permutation").run()
    with pytest.raises(ConfigError, match="search debias"):
        zepo.SearchSettings(debias="batch")


def test_results_hold_leaky_and_heldout_metrics(tmp_path):
    docs = scripted_docs(3)
    inner = ScriptedBiasJudge()
    judge = CachedJudge(inner, ScoreCache(tmp_path / "c.sqlite"))
    settings = zepo.SearchSettings(population=2, epochs=1, shuffles=5, heldout_spearman=False)
    res = run_zepo(
        judge,
        ScriptedOptimizer(),
        docs[:1],
        docs[1:],
        initial=INITIAL,
        task="t",
        aspect="coherence",
        family="summarization",
        settings=settings,
        out_dir=tmp_path / "run",
    )
    per_doc = 4 * 3  # ordered pairs of 4 candidates
    for label in ("initial", "best"):
        r = res[label]
        assert r["metrics"] == r["metrics_heldout"] and r["n_heldout_docs"] == 2
        assert r["metrics_heldout"]["none"]["n_docs"] == 2 and r["metrics_leaky"]["none"]["n_docs"] == 3
        assert r["n_judgments"] == 3 * per_doc
    # The search document's pairs (and the content-free prompt) came from the cache: the evaluation
    # judged only the 2 held-out documents of each distinct instruction.
    distinct = len({res["initial"]["instruction"], res["best"]["instruction"]})
    assert inner.calls == 2 * (per_doc + 1) + distinct * 2 * per_doc
    table = (tmp_path / "run" / "summary.md").read_text()
    assert "leaky Spearman (PairS) | held-out Spearman (PairS)" in table and "2 held out" in table
    # Every column names its documents; the configured set's columns follow leak_search_docs.
    assert "| held-out A-rate | held-out mean P(A) |" in table and "held-out Spearman (win rate)" in table
    leaky = before_after_table(dict(res, leak_search_docs=True))
    head = next(line for line in leaky.splitlines() if line.startswith("| instruction"))
    assert "| leaky A-rate | leaky mean P(A) |" in head and "held-out A-rate" not in head
    # 4 candidates, 5 shuffles (4! > 5): PairS is sampled, so its standard error is shown.
    rows = [line for line in table.splitlines() if line.startswith("| best")]
    assert " ± " in rows[0]
    # Intervals over documents beside each leaky value (3 documents); the 2 held-out ones are too few
    # to tell, in each cell, in the gain's sentence and in one plain line under the table.
    assert rows[0].count(" [") >= 2 and rows[0].count("(2 docs: too few to tell)") >= 4
    gain = res["gains"]["heldout"]["none"]["spearman_pairs"]
    assert gain["diff"] == pytest.approx(
        res["best"]["metrics_heldout"]["none"]["spearman_pairs"]
        - res["initial"]["metrics_heldout"]["none"]["spearman_pairs"]
    )
    assert "- held-out Spearman (PairS) " in table and "(2 documents: too few documents to tell)" in table
    assert "The held-out part (2 documents) is too small to tell whether the best instruction" in table
    assert res["best"]["intervals_heldout"]["none"]["a_rate"] is None
    assert res["best"]["interval_basis_heldout"]["none"]["a_rate"]["n_documents"] == 2
    lo, hi = res["best"]["intervals_leaky"]["none"]["a_rate"]
    assert lo <= res["best"]["metrics_leaky"]["none"]["a_rate"] <= hi


class NoAnswerJudge:
    """SCRIPTED judge whose greedy generation never holds an A/B token: every pair is `no_answer`
    (P(A) = 0.5, flagged), as tiny random models often do with the official generate read-out."""

    identity = "scripted-no-answer|v1"

    def score_pairs(self, requests):
        return [PairScore({}, 0.5, flags=("no_answer",)) for _ in requests]


def test_all_no_answer_candidate_is_logged_as_such_not_as_nan(caplog):
    """Issue 31: a candidate whose pairs were all no_answer logged `fairness nan a_rate nan`."""
    s = zepo.Search(
        NoAnswerJudge(),
        ScriptedOptimizer(),
        INITIAL,
        "coherence",
        "summarization",
        _mixed_docs(1),
        (),
        zepo.SearchSettings(population=1, epochs=1),
    )
    with caplog.at_level(logging.INFO, logger="harness.zepo.search"):
        best = s.run().best
    text = caplog.text
    # What the old line formatted: "fairness %.4f a_rate %.3f" of these gives "fairness nan a_rate nan".
    assert "fairness %.4f a_rate %.3f" % (best.fairness, best.a_rate) == "fairness nan a_rate nan"  # noqa: UP031
    assert "epoch 0 slot 0: all 12 pairs no_answer (no fairness); held-out PairS Spearman -" in text
    assert "fairness nan" not in text and "a_rate nan" not in text
    # The sensitivity study's per-instruction line: labelled Spearmans, and the same plain statement.
    judged = s.judge_on(s.search_docs, INITIAL)
    assert (
        candidate_line(judged, {"a_rate": float("nan")}) == "all 12 pairs no_answer (no fairness, no A-rate, "
        "no Spearman)"
    )
    line = candidate_line(judged[:0], {"a_rate": 0.25, "spearman": -0.683, "spearman_pairs": 0.0})
    assert line == "a_rate 0.250, win-rate Spearman -0.683, PairS Spearman 0.000"
