"""harness-compare RUN_A RUN_B: two real experiment=judge runs (the tiny random
llama, 3 documents x 3 candidates, two instructions) compared metric by metric with a paired
interval over documents, each sentence with its documents and method; the same runs cut to 2
documents make no "distinguishable" claim anywhere (compare.py, results.json, the card); runs over
other documents or other pairs are refused in one line; a difference in the runs' numerics is
warned about. Also: experiment=judge's results.json carries an interval for every estimated
metric with its documents and method beside it, and its card shows them, equal to results.json's."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
from helpers.cli import run_in_process

import harness.runtime.compare as compare  # harness-compare
from harness.metrics.interval import EXACT_METHOD, METHOD, SCORE_METHOD
from harness.metrics.settings import MetricsSettings

REPO = Path(__file__).resolve().parents[2]

ARGS = [
    "experiment=judge",
    "model=tiny_llama",
    "task.docs=3",
    "task.max_candidates=3",
    "experiment.shuffles=4",
    "wandb.mode=disabled",
    "metrics.bootstrap=200",
]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    runs = []
    for name, text in (
        ("a", "Which summary is more coherent? Answer A or B."),
        ("b", "Pick the better summary. Answer A or B."),
    ):
        r = run_in_process(
            [
                *ARGS,
                "experiment.instruction.source=text",
                f"experiment.instruction.text='{text}'",
                f"hydra.run.dir={tmp / name}",
            ],
            tmp,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(tmp / name)
    return runs


def _two_documents(run: Path, out: Path) -> Path:
    """`run` cut to its first 2 documents (judgments.jsonl filtered; results.json kept for its settings)."""
    shutil.copytree(run, out)
    rows = (out / "judgments.jsonl").read_text().splitlines()
    docs = sorted({json.loads(r)["doc_id"] for r in rows if "doc_id" in json.loads(r)})[:2]
    (out / "judgments.jsonl").write_text(
        "\n".join(r for r in rows if json.loads(r).get("doc_id", docs[0]) in docs) + "\n"
    )
    return out


def test_judge_results_carry_every_interval_and_the_card_shows_them(two_runs):
    res = json.loads((two_runs[0] / "results.json").read_text())
    assert res["interval"]["unit"] == "document" and res["interval"]["method"] == METHOD
    assert res["interval"]["n_documents"] == 3 and res["interval"]["level"] == 0.95
    for variant, values in res["metrics"].items():
        iv, basis = res["intervals"][variant], res["interval_basis"][variant]
        assert set(iv) == set(basis) == {k for k in values if k not in compare.NO_INTERVAL}
        for key, bounds in iv.items():
            if bounds is not None:
                assert (
                    bounds[0] <= bounds[1]
                    and basis[key]["n_documents"] == 3
                    and basis[key]["note"] in (None, "no spread across documents")
                )
    assert res["interval_basis"]["none"]["ece"]["note"] == "too few documents to tell"  # ECE needs 8
    assert "permutation - none" in res["differences"]
    lo, hi = res["intervals"]["none"]["a_rate"]
    card = (two_runs[0] / "card.md").read_text()
    assert f"A-rate {res['metrics']['none']['a_rate']:.3f} [{lo:.3f}, {hi:.3f}]" in card
    assert "[lo, hi]: 95%, 3 documents; " in card and METHOD in card and SCORE_METHOD in card
    # Each bracket's own method: this tiny judge answers B on every pair of every document, so its
    # A-rate is the exact one-sided bound and the bracket says so; mean P(A) is a Wilson score interval.
    assert "a_rate_prob, " in card.split(f": {EXACT_METHOD}")[1].split(SCORE_METHOD)[0]
    assert res["interval_basis"]["none"]["a_rate"]["method"] == EXACT_METHOD and lo == 0 and hi > 0.6
    assert f"A-rate 0.000 [0.000, {hi:.3f}] (one-sided: every document at 0)" in card
    assert (
        "(3 documents: too few documents to tell)" in card.split("calibration")[1].splitlines()[0]
    )  # ECE: 8
    # The length bias of the raw judgments, with its interval, in results.json and the card.
    lb = res["length_bias"]
    assert lb["n_pairs"] == 18 and lb["unit"].startswith("words") and lb["scale"] > 0
    assert lb["length_interval"][0] <= lb["length"] <= lb["length_interval"][1]
    assert lb["length_basis"] == {"n_documents": 3, "method": METHOD, "note": None}
    assert f"log-odds of A {lb['length']:+.3f} [" in card
    lc = lb["controlled"]
    assert (
        set(lc["metrics"]) == set(lc["intervals"]) == set(lc["minus_raw"]) >= {"spearman", "spearman_pairs"}
    )
    assert "length-controlled - raw: spearman " in lc["minus_raw"]["spearman"]["sentence"]


def test_compare_prints_each_metric_with_its_paired_interval(two_runs, capsys):
    assert compare.main([str(two_runs[0]), str(two_runs[1]), "--bootstrap", "200"]) == 0
    out = capsys.readouterr().out
    ra = json.loads((two_runs[0] / "results.json").read_text())["metrics"]["none"]
    rb = json.loads((two_runs[1] / "results.json").read_text())["metrics"]["none"]
    line = next(x for x in out.splitlines() if x.startswith("a_rate_prob "))
    assert f"{ra['a_rate_prob']:.4f}" in line and f"{rb['a_rate_prob']:.4f}" in line
    diff = rb["a_rate_prob"] - ra["a_rate_prob"]
    assert f"a_rate_prob {diff:+.3f} [" in line and "(3 documents, t-jackknife" in line
    assert "distinguishable from 0 at 95% family-wise (Holm, " in line
    assert "3 documents, 18 ordered pairs in each" in out and METHOD in out
    assert "one family of claims: Holm's step-down over the " in out
    # A run against itself: every difference is exactly 0 in every document: too little to tell.
    assert compare.main([str(two_runs[0]), str(two_runs[0]), "--bootstrap", "50"]) == 0
    same = capsys.readouterr().out
    assert "a_rate +0.000 (3 documents: no spread across documents: too little to tell)" in same
    assert ": distinguishable" not in same and "nothing is tested" in same
    # One primary metric named up front: tested alone; every other line exploratory, no verdict.
    assert (
        compare.main([str(two_runs[0]), str(two_runs[1]), "--bootstrap", "50", "--primary", "a_rate_prob"])
        == 0
    )
    got = capsys.readouterr().out
    first = next(x for x in got.splitlines() if x.startswith("a_rate_prob "))
    assert "distinguishable from 0 at 95% (the primary metric, named up front)" in first
    others = [x for x in got.splitlines() if x.startswith(("spearman ", "max_prob "))]
    assert others and all("exploratory (the primary metric is a_rate_prob): no claim" in x for x in others)
    assert "one claim: the primary metric a_rate_prob at 95%" in got and "Holm" not in got
    assert compare.main([str(two_runs[0]), str(two_runs[1]), "--primary", "nope"]) == 2
    assert "--primary 'nope' is not a metric with an interval" in capsys.readouterr().err


def test_two_documents_make_no_distinguishable_claim(two_runs, tmp_path, capsys):
    """The issue's case: two 2-document runs. compare.py, the results.json written for them and their
    cards say "too few documents to tell" and never "distinguishable" (NEGATIVE CONTROL: the same
    runs on 3 documents do make intervals)."""
    from harness.judging import load_judgments
    from harness.metrics import write_run
    from harness.metrics.card import render_cards

    a, b = (_two_documents(r, tmp_path / r.name) for r in two_runs)
    assert compare.main([str(a), str(b), "--bootstrap", "200"]) == 0
    out = capsys.readouterr().out
    assert "distinguishable" not in out and "(2 documents: too few documents to tell)" in out
    judgments, p_cf = load_judgments(a / "judgments.jsonl")
    (tmp_path / "written").mkdir()
    res = write_run(
        tmp_path / "written",
        judgments,
        p_cf,
        task="t",
        aspect=None,
        family="summarization",
        instruction="x",
        judge_identity="j",
        n_docs=2,
        shuffles=4,
        seed=0,
        metrics=MetricsSettings(200),
    )
    text = json.dumps(res)
    assert "distinguishable from 0" not in text.replace("not distinguishable from 0", "")
    assert all(v is None for v in res["intervals"]["none"].values())
    assert {b["note"] for b in res["interval_basis"]["none"].values()} == {"too few documents to tell"}
    cards = render_cards(a, echo=lambda _: None, metrics=MetricsSettings(200))
    assert "none: 2 documents: too few documents to tell" in (a / "card.md").read_text()
    assert cards[0].bounds is not None and all(v.bounds is None for v in cards[0].bounds.values() if v)
    three = json.loads((two_runs[0] / "results.json").read_text())
    assert three["intervals"]["none"]["a_rate"] is not None  # the control: 3 documents get intervals


def test_compare_refuses_other_documents_and_warns_on_numerics(two_runs, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(two_runs[1], other)
    rows = (other / "judgments.jsonl").read_text().splitlines()
    first = json.loads(rows[0])["doc_id"]
    (other / "judgments.jsonl").write_text(
        "\n".join(r for r in rows if json.loads(r).get("doc_id") != first) + "\n"
    )
    assert compare.main([str(two_runs[0]), str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(two_runs[0]) in err and str(other) in err
    assert f"1 only in A ({first})" in err
    # Numerics recorded differently: warned, still compared.
    res = json.loads((two_runs[1] / "results.json").read_text())
    same = tmp_path / "same"
    shutil.copytree(two_runs[1], same)
    numerics = {"dtype": "float32", "dtype_source": "config", "engine": "hf", "device": "cpu"}
    (same / "results.json").write_text(json.dumps({**res, "numerics": numerics}))
    a = tmp_path / "a"
    shutil.copytree(two_runs[0], a)
    ra = json.loads((a / "results.json").read_text())
    (a / "results.json").write_text(json.dumps({**ra, "numerics": {**numerics, "dtype": "bfloat16"}}))
    assert compare.main([str(a), str(same), "--bootstrap", "20"]) == 0
    assert "numerics differ (dtype 'bfloat16' vs 'float32')" in capsys.readouterr().out
    assert compare.main([str(a), str(tmp_path / "missing")]) == 2
    assert "results.json not found" in capsys.readouterr().err


def test_a_judgments_file_that_repeats_a_pair_is_refused_naming_file_line_and_pair(
    two_runs, tmp_path, capsys
):
    """A later row repeating an ordered pair (p_a 0.99) was read as that pair's judgment: rc 0, "12
    ordered pairs in each" and every metric shifted. Now one line naming the file, the line and the
    pair, from harness.judging.load_judgments, so every reader refuses it (compare, the shard
    merge, the report cards). Control: the file as the run wrote it is compared."""
    from harness.errors import DataError
    from harness.judging import load_judgments

    b = tmp_path / "b"
    shutil.copytree(two_runs[1], b)
    rows = (b / "judgments.jsonl").read_text().splitlines()
    again = {**json.loads(rows[2]), "p_a": 0.99}
    (b / "judgments.jsonl").write_text("\n".join([*rows[:-1], json.dumps(again), rows[-1]]) + "\n")
    where = f"{b / 'judgments.jsonl'}, line {len(rows)}"
    pair = f"document {again['doc_id']!r}, A {again['a_id']!r}, B {again['b_id']!r} of line 3"
    assert compare.main([str(two_runs[0]), str(b)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and where in out.err and pair in out.err
    with pytest.raises(DataError, match="repeats the ordered pair"):
        load_judgments(b / "judgments.jsonl")
    assert compare.main([str(two_runs[0]), str(two_runs[1]), "--bootstrap", "20"]) == 0  # control
    assert "3 documents, 18 ordered pairs in each" in capsys.readouterr().out


def test_compare_says_when_the_runs_judged_different_aspects(two_runs, tmp_path):
    """The same pairs judged for another aspect: compared, with one line saying the aspects differ
    (each run's human labels are its own aspect's). Negative control: two coherence runs get no such line."""
    import os
    import subprocess
    import sys

    rel = tmp_path / "relevance"
    r = run_in_process([*ARGS, "task.aspect=relevance", f"hydra.run.dir={rel}"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def harness_compare(a: Path, b: Path) -> subprocess.CompletedProcess:  # what `harness-compare A B` runs
        return subprocess.run(
            [sys.executable, "-m", "harness.runtime.compare", str(a), str(b), "--bootstrap", "20"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    got = harness_compare(two_runs[0], rel)
    assert got.returncode == 0, got.stderr
    assert "warning: the runs differ in aspect 'coherence' vs 'relevance'" in got.stdout
    same = harness_compare(two_runs[0], two_runs[1])
    assert same.returncode == 0 and "differ in aspect" not in same.stdout


def test_compare_uses_the_runs_level_and_refuses_two_levels(two_runs, tmp_path, capsys):
    """harness-compare always said 95%, whatever the runs' metrics.level. Now run A's level is the
    default (a real run at metrics.level=0.9 compared with itself: 90%), and runs made at different
    levels are refused in one line unless --level picks one (fails with compare.py reverted: 95%)."""
    b90 = tmp_path / "b90"
    r = run_in_process(
        [
            *ARGS,
            "experiment.instruction.source=text",
            "experiment.instruction.text='Pick the better summary. Answer A or B.'",
            "metrics.level=0.9",
            f"hydra.run.dir={b90}",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert compare.main([str(b90), str(b90), "--bootstrap", "20"]) == 0
    out = capsys.readouterr().out
    assert "B - A: 90% paired interval" in out and "95%" not in out  # itself: no spread, nothing tested
    assert compare.main([str(two_runs[0]), str(b90), "--bootstrap", "20"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different levels (metrics.level 0.95 vs 0.9): give --level" in err
    assert compare.main([str(two_runs[0]), str(b90), "--bootstrap", "20", "--level", "0.9"]) == 0
    assert "distinguishable from 0 at 90%" in capsys.readouterr().out


def _mixed_run(out: Path, sizes: list[int], shift: float) -> Path:
    """A judge run written from made-up judgments (no model): one document per entry of `sizes`,
    every ordered pair of its candidates judged."""
    from harness.metrics import write_run
    from harness.records import Judgment

    judgments = [
        Judgment(f"d{d:02d}", f"c{i}", f"c{k}", 0.5 + shift * (i - k) / m, {}, float(i % 5), float(k % 5))
        for d, m in enumerate(sizes)
        for i, k in itertools.permutations(range(m), 2)
    ]
    out.mkdir()
    write_run(
        out,
        judgments,
        None,
        task="t",
        aspect=None,
        family="summarization",
        instruction="x",
        judge_identity="j",
        n_docs=len(sizes),
        shuffles=2,
        seed=0,
        metrics=MetricsSettings(0),
    )
    return out


def test_compare_warns_when_candidate_counts_differ_more_than_5x(tmp_path):
    """2 and 12 candidates per document: one warning line, and the correlations' paired intervals
    (which under-cover on such mixes) are withheld with the reason on their own lines;
    CONTROL: 4 and 12 candidates (3x apart) get no such line and no such reason."""
    a = _mixed_run(tmp_path / "a", [2, 12, 2, 12], 0.05)
    b = _mixed_run(tmp_path / "b", [2, 12, 2, 12], 0.08)
    out = compare.compare(a, b, "none", 1, None, None)
    said = [x for x in out if "candidates (more than 5x apart)" in x]
    assert len(said) == 1 and said[0].startswith("warning: the documents have 2 to 12 candidates")
    assert "spearman, kendall, spearman_pairs, kendall_pairs, spearman_whole, kendall_whole" in said[0]
    withheld = [x.split()[0] for x in out if "5x apart): no paired interval, a correlation" in x]
    assert withheld == [
        "spearman",
        "kendall",
        "spearman_pairs",
        "kendall_pairs",
        "spearman_whole",
        "kendall_whole",
    ]
    even_a = _mixed_run(tmp_path / "ea", [4, 12, 4, 12], 0.05)
    even_b = _mixed_run(tmp_path / "eb", [4, 12, 4, 12], 0.08)
    assert not any("5x apart" in x for x in compare.compare(even_a, even_b, "none", 1, None, None))
