"""The sensitivity study: paraphrases from a file, a ZEPO history or the optimizer, each scored raw
and debiased; the paper's figures; the fit and correlation helpers on data with a known answer."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers.compose import compose
from helpers.scripted import scripted_completion

from harness.errors import DataError
from harness.metrics.interval import METHOD, SCORE_METHOD
from harness.metrics.settings import MetricsSettings
from harness.zepo import plots
from harness.zepo.figure3 import OBJECTIVES, analyse
from harness.zepo.paraphrases import load_paraphrases

INSTRUCTIONS = [
    "Which response candidate has better overall quality? If candidate A is better, answer 'A'; "
    "if candidate B is better, answer 'B'.",
    "Judge the overall quality of the two responses. Return 'A' if candidate A is better, 'B' if candidate B is.",
    "Consider overall quality. Answer 'A' for candidate A or 'B' for candidate B, the letter only.",
]


def test_quadratic_fit_and_pearson_on_known_data():
    x = np.linspace(0.1, 0.9, 9)
    y = 0.4 - 2.0 * (x - 0.5) ** 2  # an inverted U peaking at a decision rate of 0.5
    a, b, c = plots.quadratic_fit(x, y)
    assert a == pytest.approx(-2.0) and -b / (2 * a) == pytest.approx(0.5)
    assert plots.pearson(x, 3 * x + 1) == pytest.approx(1.0)
    assert plots.pearson(x, -x) == pytest.approx(-1.0)
    assert math.isnan(plots.pearson(x, np.ones_like(x)))  # constant side: undefined, not 0
    assert plots.quadratic_fit([0.5, 0.5, 0.5], [1, 2, 3]) is None
    assert plots.pearson([1, 2, None, 4], [2, 4, 100, 8]) == pytest.approx(1.0)  # missing pairs dropped


def test_figures_are_written(tmp_path):
    rng = np.random.default_rng(0)
    rates = rng.uniform(0.1, 0.9, 12)
    sp = 0.4 - (rates - 0.5) ** 2 + rng.normal(0, 0.01, 12)
    p2 = plots.plot_rate_vs_spearman(rates, sp, tmp_path / "f2.png")
    p3 = plots.plot_objectives_vs_spearman(
        {"fairness": -abs(rates - 0.5), "confidence": rates}, sp, tmp_path / "f3.png"
    )
    p4 = plots.plot_debias(rates, sp, 0.5 + (rates - 0.5) / 4, sp + 0.1, tmp_path / "f4.png")
    for p in (p2, p3, p4):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_load_paraphrases_from_text_and_history(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_text("\n".join(INSTRUCTIONS[:2]) + "\n\n" + INSTRUCTIONS[0] + "\n")
    assert load_paraphrases(txt) == INSTRUCTIONS[:2]
    hist = tmp_path / "history.jsonl"
    hist.write_text("\n".join(json.dumps({"index": i, "text": t}) for i, t in enumerate(INSTRUCTIONS)) + "\n")
    assert load_paraphrases(hist) == INSTRUCTIONS
    hist.write_text(json.dumps({"text": "ok A B"}) + "\n{not json\n")
    with pytest.raises(DataError, match=r"history.jsonl, record line 2"):
        load_paraphrases(hist)
    hist.write_text(json.dumps({"txt": "x"}) + "\n")
    with pytest.raises(DataError, match="field 'text'"):
        load_paraphrases(hist)
    with pytest.raises(DataError, match="file not found"):
        load_paraphrases(tmp_path / "missing.txt")


def test_analyse_recovers_a_designed_correlation():
    rows = []
    for k, r in enumerate(np.linspace(0.2, 0.8, 7)):
        m = {
            "a_rate": r,
            "a_rate_prob": r,
            "fairness": -abs(r - 0.5),
            "fairness_prob": -abs(r - 0.5),
            "max_prob": 0.6 + 0.01 * k,
            "ece": 0.1,
            "spearman_pairs": 0.5 - abs(r - 0.5),
            "spearman": 0.0,
            "prob_gap": 0.2 + 0.01 * k,
            "bc": 1.0 - 0.1 * k,
            "a_rate_upper": r,
        }
        rows.append({"index": k, "text": str(k), "none": m, "permutation": m})
    out = analyse(rows, "spearman_pairs")
    assert out["none"]["pearson_with_spearman"]["fairness"] == pytest.approx(1.0)
    assert out["none"]["spearman_with_spearman"]["fairness"]["rho"] == pytest.approx(1.0)
    assert out["none"]["spearman_with_spearman"]["fairness"]["p"] < 1e-3
    assert math.isnan(out["none"]["pearson_with_spearman"]["calibration_ece"])  # constant ECE
    # calibration = -BC (label-free): BC falls with k, so -BC rises with k; Spearman is an inverted U.
    assert abs(out["none"]["spearman_with_spearman"]["calibration"]["rho"]) < 0.5
    assert out["none"]["spearman_max"] == pytest.approx(0.5)


def _overrides(tmp, data, *extra, docs=1):
    return [
        "experiment=sensitivity",
        "model=tiny_llama",
        "task=usr_zepo",
        "task.aspect=overall",
        "task.offset=27",
        f"task.docs={docs}",
        "task.max_candidates=3",
        "experiment.shuffles=5",
        f"data.dir={tmp / 'data'}",
        f"data.mirror={data}",
        f"cache.path={tmp / 'cache' / 'requests.sqlite'}",
        "progress=false",
        "wandb.mode=disabled",
        *extra,
    ]


def test_sensitivity_from_a_zepo_history(tmp_path, shared_data, tiny_llama, capsys, caplog):
    import logging

    from harness.runtime.entry import run

    hist = tmp_path / "history.jsonl"
    hist.write_text("\n".join(json.dumps({"text": t}) for t in INSTRUCTIONS) + "\n")
    with caplog.at_level(logging.INFO, logger="harness.zepo.study"):
        res = run(
            compose(_overrides(tmp_path, shared_data, f"experiment.from_file={hist}", docs=2)),
            tmp_path / "run",
        )
    # Issue 31: every Spearman printed says which it is (win rate or PairS).
    printed = capsys.readouterr().out
    assert (
        "PairS Spearman range over instructions: raw " in printed
        and "with the PairS Spearman, raw" in printed
    )
    assert "\nSpearman range raw" not in printed
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("instruction ")]
    assert len(logged) == 3 and all(
        "win-rate Spearman" in m and "PairS Spearman" in m or "no_answer" in m for m in logged
    ), logged
    out = tmp_path / "run"
    rows = [json.loads(x) for x in (out / "sensitivity.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == INSTRUCTIONS
    for r in rows:
        assert {"none", "permutation", "batch", "contextual"} <= set(r)
        for key in ("a_rate", "fairness", "max_prob", "ece", "spearman", "spearman_pairs"):
            assert key in r["none"]
        # Permutation debiasing balances A and B by construction: its mean P(A) is exactly 0.5.
        assert r["permutation"]["a_rate_prob"] == pytest.approx(0.5)
    assert res["n_instructions"] == 3 and set(res["analysis"]["none"]["pearson_with_spearman"]) == set(
        OBJECTIVES
    )
    for name in res["figures"].values():
        assert (out / name).stat().st_size > 0
    assert (out / "paraphrases.txt").read_text().splitlines() == INSTRUCTIONS
    # Each instruction's judgments, with the report card the run context draws for it.
    from harness.judging import load_judgments
    from harness.metrics.card import PICTURES, card_numbers

    for r in rows:
        folder = out / "instructions" / f"{r['index']:03d}"
        numbers = card_numbers(load_judgments(folder / "judgments.jsonl")[0])
        drawn = {k for k, name in PICTURES.items() if (folder / name).is_file()}
        assert drawn == set(PICTURES) - ({"reliability"} if numbers["n_calibration"] == 0 else set())
        for key in (
            "a_rate",
            "order_consistency",
            "order_gap",
            "answer_mass_median",
            "answer_mass_low_share",
        ):
            assert numbers[key] == pytest.approx(r["none"][key], nan_ok=True)
    _check_versus_reference(res, rows, out, printed)
    # Figure 3 with its interval (tests/zepo/test_figure3.py): the points are the analysis's rho, every
    # entry has its sentence (printed), and the candidates kept the dataset's order.
    f3 = res["figure3"]
    assert f3["rounds"] == 1000 and f3["n_instructions"] == 3 and f3["n_docs"] == 2
    for mode in ("none", "permutation"):
        for name, e in f3["spearman_pairs"][mode].items():
            assert e["rho"] == pytest.approx(
                res["analysis"][mode]["spearman_with_spearman"][name]["rho"], nan_ok=True
            )
            assert f"- {e['sentence']}" in printed
    assert res["candidate_order"]["shuffled"] is False and "Candidate order: the dataset's order" in printed


def _check_versus_reference(res, rows, out, printed):
    """Issue 31: each instruction's metrics carry their interval entries over the documents with
    their documents and method beside them, and each paraphrase minus instruction 0 its PAIRED
    interval (both arms leave out the same documents) and its sentence, in sensitivity.jsonl,
    results.json, summary.md and the printed table; on these 2 documents every one says "too few
    documents to tell" and none "distinguishable"."""
    from harness.judging import load_judgments
    from harness.metrics.summary import analyse
    from harness.zepo.study import VERSUS

    meta = res["interval"]
    assert meta["rounds"] == 1000 and meta["level"] == 0.95 and meta["n_documents"] == res["n_docs"] == 2
    assert json.loads((out / "results.json").read_text())["versus_reference"] == json.loads(
        json.dumps(res["versus_reference"])
    )
    for r, shown in zip(rows, res["instructions"]):
        for key in ("a_rate", "spearman", "spearman_pairs", "fairness"):
            assert shown["intervals"]["none"][key] == r["intervals"]["none"][key] is None
            assert shown["interval_basis"]["none"][key] == {
                "n_documents": 2,
                "method": SCORE_METHOD
                if key in ("a_rate", "fairness")
                else METHOD,  # rates: a score interval
                "note": "too few documents to tell",
            }
    assert [v["index"] for v in res["versus_reference"]] == [1, 2] and "versus_reference" not in rows[0]
    summaries = [
        analyse(
            *load_judgments(out / "instructions" / f"{i:03d}" / "judgments.jsonl"),
            shuffles=5,
            seed=meta["seed"],
            with_intervals=MetricsSettings(),
        )
        for i in range(3)
    ]
    for v in res["versus_reference"]:
        assert {k: x for k, x in v.items() if k != "index"} == json.loads(
            json.dumps(rows[v["index"]]["versus_reference"])
        )
        for mode in ("none", "permutation"):
            assert set(v[mode]) == set(VERSUS)
            for key, d in v[mode].items():
                assert d["diff"] == pytest.approx(
                    rows[v["index"]][mode][key] - rows[0][mode][key], nan_ok=True
                )
                assert d["sentence"].startswith(
                    f"instruction {v['index']} - instruction 0 (the first of "
                    f"experiment.from_file): {'' if mode == 'none' else mode + '-debiased '}{key}"
                )
        # The paired difference rests on both arms' rows with the same document left out; 2 are too few.
        assert summaries[0].loo.ids == summaries[v["index"]].loo.ids
        d = v["none"]["spearman"]
        assert (
            d["interval"] is None
            and d["n_documents"] == 2
            and "(2 documents: too few documents to tell)" in d["sentence"]
            and "distinguishable" not in d["sentence"]
        )
    assert (
        "Each paraphrase minus instruction 0 (the first of experiment.from_file), paired on the same documents:"
        in printed
    )
    assert (
        "- instruction 2 - instruction 0 (the first of experiment.from_file): PairS Spearman (permutation-debiased) "
        in printed
        and "(2 documents: too few documents to tell)" in printed
        and "| 0 | " in printed
    )
    assert "distinguishable" not in printed.replace("not distinguishable", "")
    assert (out / "summary.md").read_text().strip() in printed


def test_sensitivity_generates_paraphrases_with_the_optimizer(tmp_path, shared_data, tiny_llama):
    from helpers.servers import OpenAIServer

    from harness.runtime.entry import run

    with OpenAIServer(script=scripted_completion) as srv:
        cfg = compose(
            _overrides(
                tmp_path,
                shared_data,
                "optimizer=api",
                f"optimizer.base_url={srv.url}",
                "optimizer.model=scripted-loopback",
                "experiment.paraphrases=3",
            )
        )
        res = run(cfg, tmp_path / "run")
    texts = (tmp_path / "run" / "paraphrases.txt").read_text().splitlines()
    assert res["n_instructions"] == len(texts) == 4  # the initial + 3 paraphrases
    assert (
        texts[0].startswith("Compare response candidate A and response candidate B overall.")
        and len(set(texts)) == 4
    )
    assert all("overall" in t for t in texts[1:])


def test_no_valid_paraphrase_is_one_line_and_exit_2_before_any_judging(tmp_path):
    """A local optimizer whose every reply is rejected (2 new tokens: shorter than min_ratio x the
    instruction) ends the study in one line, before the initial instruction is judged alone (an
    all-NaN table and one-point figures, exit 0, was the old outcome)."""
    from helpers.cli import assert_one_line_error, run_in_process

    out = tmp_path / "run"
    r = run_in_process(
        [
            "experiment=sensitivity",
            "model=tiny_llama",
            "task.docs=1",
            "task.max_candidates=2",
            "experiment.paraphrases=2",
            "optimizer.max_attempts=1",
            "optimizer.max_new_tokens=2",
            "progress=false",
            "wandb.mode=disabled",
            f"hydra.run.dir={out}",
        ],
        tmp_path,
        timeout=600,
    )
    assert_one_line_error(
        r, "no valid paraphrase came back", "all 2 requested paraphrases", "rejections.jsonl"
    )
    assert (out / "rejections.jsonl").is_file()  # where the reasons are, as the line says
    assert not (out / "results.json").exists() and not (out / "instructions").exists()


def test_sensitivity_judges_every_instruction_in_one_call(tmp_path, shared_data, tiny_llama):
    """score_instructions judges all instructions in ONE judge call: the same rows (floats within
    1e-6) and the same cached prompts as judging each instruction on its own."""
    import sqlite3

    from helpers.results import assert_close
    from helpers.scripted import CallLog

    from harness.data import load_task
    from harness.judges.cache import CachedJudge, ScoreCache
    from harness.judges.hf import HFJudge
    from harness.judging import judge_documents
    from harness.metrics import summarize
    from harness.zepo.study import KEEP, score_instructions

    docs = load_task("usr_zepo", data_dir=shared_data, limit=1)
    model = HFJudge(tiny_llama, device="cpu", dtype="float32", threads=1, prefix_reuse=True)
    log = CallLog(model)
    judge = CachedJudge(log, ScoreCache(tmp_path / "one.sqlite"), chunk=10**6)
    rows = score_instructions(
        judge, docs, INSTRUCTIONS, aspect="overall", family="dialogue", max_candidates=4, shuffles=5, seed=0
    )
    assert len(log.sizes) == 1 and log.sizes[0] == len(INSTRUCTIONS) * (12 + 1)
    alone = CachedJudge(model, ScoreCache(tmp_path / "each.sqlite"))
    for row, text in zip(rows, INSTRUCTIONS):
        judgments, p_cf = judge_documents(
            alone,
            docs,
            aspect="overall",
            instruction=text,
            family="dialogue",
            max_candidates=4,
            progress=False,
        )
        summary = summarize(judgments, p_cf=p_cf, shuffles=5, seed=0)
        assert_close(
            {mode: {k: row[mode][k] for k in KEEP} for mode in summary},
            {mode: {k: m[k] for k in KEEP} for mode, m in summary.items()},
        )
    keys = [
        {k for (k,) in sqlite3.connect(tmp_path / name).execute("SELECT key FROM scores")}
        for name in ("one.sqlite", "each.sqlite")
    ]
    assert keys[0] == keys[1] and len(keys[0]) == len(INSTRUCTIONS) * 13
