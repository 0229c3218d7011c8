"""harness-compare RUN_A RUN_B (scripts/compare.py; issue #31): two real experiment=judge runs (the tiny random
llama, 2 documents x 3 candidates, two instructions) compared metric by metric with a paired
bootstrap over documents; runs over other documents or other pairs are refused in one line; a
difference in the runs' numerics is warned about. Also: experiment=judge's results.json carries an
interval for every estimated metric, and its card shows them, equal to results.json's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_in_process

import harness.report.compare as compare  # harness-compare (scripts/compare.py wraps it)

REPO = Path(__file__).resolve().parents[1]

ARGS = ["experiment=judge", "model=tiny_llama", "task.docs=2", "task.max_candidates=3", "experiment.shuffles=4",
        "wandb.mode=disabled", "metrics.bootstrap=200"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    runs = []
    for name, text in (("a", "Which summary is more coherent? Answer A or B."),
                       ("b", "Pick the better summary. Answer A or B.")):
        r = run_in_process([*ARGS, "experiment.instruction.source=text", f"experiment.instruction.text='{text}'",
                            f"hydra.run.dir={tmp / name}"], tmp)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(tmp / name)
    return runs


def test_judge_results_carry_every_interval_and_the_card_shows_them(two_runs):
    res = json.loads((two_runs[0] / "results.json").read_text())
    assert res["interval"]["unit"] == "document" and res["interval"]["rounds"] == 200
    assert res["interval"]["n_documents"] == 2 and res["interval"]["level"] == 0.95
    for variant, values in res["metrics"].items():
        iv = res["intervals"][variant]
        assert set(iv) == {k for k in values if k not in compare.NO_INTERVAL}
        for key, bounds in iv.items():
            if bounds is not None:
                assert bounds[0] <= bounds[1]
    assert "permutation - none" in res["differences"]
    lo, hi = res["intervals"]["none"]["a_rate"]
    card = (two_runs[0] / "card.md").read_text()
    assert f"A-rate {res['metrics']['none']['a_rate']:.3f} [{lo:.3f}, {hi:.3f}]" in card
    assert "95% percentile bootstrap over the documents" in card
    # The length bias of the raw judgments, with its interval, in results.json and the card.
    lb = res["length_bias"]
    assert lb["n_pairs"] == 12 and lb["unit"].startswith("words") and lb["scale"] > 0
    assert lb["length_interval"][0] <= lb["length"] <= lb["length_interval"][1]
    assert f"log-odds of A {lb['length']:+.3f} [" in card
    lc = lb["controlled"]
    assert set(lc["metrics"]) == set(lc["intervals"]) == set(lc["minus_raw"]) >= {"spearman", "spearman_pairs"}
    assert "length-controlled - raw: spearman " in lc["minus_raw"]["spearman"]["sentence"]


def test_compare_prints_each_metric_with_its_paired_interval(two_runs, capsys):
    assert compare.main([str(two_runs[0]), str(two_runs[1]), "--bootstrap", "200"]) == 0
    out = capsys.readouterr().out
    ra = json.loads((two_runs[0] / "results.json").read_text())["metrics"]["none"]
    rb = json.loads((two_runs[1] / "results.json").read_text())["metrics"]["none"]
    line = next(x for x in out.splitlines() if x.startswith("a_rate "))
    assert f"{ra['a_rate']:.4f}" in line and f"{rb['a_rate']:.4f}" in line
    assert f"a_rate {rb['a_rate'] - ra['a_rate']:+.3f} [" in line and "distinguishable from 0 at 95%" in line
    assert "2 documents, 12 ordered pairs in each" in out
    # A run against itself: every difference is exactly 0, its interval [0, 0].
    assert compare.main([str(two_runs[0]), str(two_runs[0]), "--bootstrap", "50"]) == 0
    assert "a_rate +0.000 [+0.000, +0.000]: not distinguishable" in capsys.readouterr().out


def test_compare_refuses_other_documents_and_warns_on_numerics(two_runs, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(two_runs[1], other)
    rows = (other / "judgments.jsonl").read_text().splitlines()
    first = json.loads(rows[0])["doc_id"]
    (other / "judgments.jsonl").write_text("\n".join(r for r in rows if json.loads(r).get("doc_id") != first) + "\n")
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
        return subprocess.run([sys.executable, "-m", "harness.report.compare", str(a), str(b), "--bootstrap", "20"],
                              env=env, capture_output=True, text=True, timeout=300)

    got = harness_compare(two_runs[0], rel)
    assert got.returncode == 0, got.stderr
    assert "warning: the runs differ in aspect 'coherence' vs 'relevance'" in got.stdout
    same = harness_compare(two_runs[0], two_runs[1])
    assert same.returncode == 0 and "differ in aspect" not in same.stdout
