"""The judge's report card (issue #15): answer mass, order consistency, calibration pictures.

- a SCRIPTED judge with a designed position bias and designed answer masses: every number on the
  card is worked out from the design, and an unbiased twin is the negative control;
- SmolLM2-135M-Instruct, a real model, with and without its chat template: the mass drops and
  the warning fires only without it;
- `python -m harness.run` end to end (real Hydra, W&B offline): pictures in the run directory, in
  W&B and in the run's artifact; `harness-report` gives results.json's numbers from
  judgments.jsonl alone, for a run in the format written before the card existed too.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import sys

import pytest
from helpers import REPO
from helpers.cli import run_in_process
from helpers.wandb_offline import wandb_records

from harness.errors import ConfigError
from harness.experiments.judge import run_judge
from harness.judges.base import template_fingerprint
from harness.judging import (
    LOW_MASS,
    MIN_ANSWER_MASS,
    judge_documents,
    load_judgments,
    write_judgments,
)
from harness.metrics import card_numbers, order_consistency, render_cards
from harness.metrics.card import CARD_KEYS, PICTURES
from harness.records import Candidate, Document, PairScore


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


class PositionBiasedScriptedJudge:
    """SCRIPTED judge, not a model: P(A) = sigmoid(q_A - q_B + bias) from designed qualities, and
    a designed answer mass spread over four answer-token variants. For a pair {i, j} with quality
    gap d the decision survives the swap iff |d| > bias, so consistency and A-rate are known."""

    def __init__(self, docs, bias: float, mass) -> None:
        self.q = {(d.id, c.id): c.scores["coherence"] for d in docs for c in d.candidates}
        self.bias, self.mass = bias, mass
        self.identity = f"scripted-position-bias|{bias}"

    def score_pairs(self, requests):
        out = []
        for r in requests:
            qa, qb = self.q.get((r.doc_id, r.a_id), 0.0), self.q.get((r.doc_id, r.b_id), 0.0)
            p, m = _sigmoid(qa - qb + self.bias), self.mass(r)
            lp = {
                "A:A": math.log(m * p * 0.8),
                "A: A": math.log(m * p * 0.2),
                "B:B": math.log(m * (1 - p) * 0.7),
                "B: B": math.log(m * (1 - p) * 0.3),
            }
            out.append(PairScore(lp, p))
        return out


QUALITIES = ([0.0, 1.0, 2.0, 3.0], [3.0, 1.0, 0.0, 2.0])
"""Two documents, four candidates each; the second lists them out of quality order."""


def _docs() -> list[Document]:
    return [
        Document(
            f"d{k}",
            "source",
            tuple(Candidate(f"c{i}", f"text {i}", {"coherence": q}) for i, q in enumerate(qs)),
        )
        for k, qs in enumerate(QUALITIES)
    ]


def _designed(bias: float) -> dict[str, float]:
    """Consistency, gap and A-rate from the design alone: every document has quality gaps
    |d| = 1, 1, 1, 2, 2, 3 among its 6 unordered pairs."""
    gaps = [1, 1, 1, 2, 2, 3]
    ordered = [g for d in gaps for g in (d, -d)]
    return {
        "order_consistency": sum(d > bias for d in gaps) / 6,
        "order_gap": sum(abs(_sigmoid(d + bias) + _sigmoid(-d + bias) - 1) for d in gaps) / 6,
        "a_rate": sum(d + bias > 0 for d in ordered) / 12,
    }


def _c3_low(r) -> float:
    """Designed mass: 0.01 on every pair with candidate c3 (6 of 12 ordered pairs), else 0.9."""
    return 0.01 if "c3" in (r.a_id, r.b_id) else 0.9


@pytest.mark.parametrize("bias", [1.5, 0.0])
def test_scripted_position_bias_gives_the_designed_card(tmp_path, bias, caplog):
    """bias 1.5: consistency 3/6, A-rate 9/12; bias 0 (the negative control): 6/6 and 6/12."""
    docs = _docs()
    judge = PositionBiasedScriptedJudge(docs, bias, _c3_low)
    results = run_judge(
        judge,
        docs,
        task="scripted",
        aspect="coherence",
        instruction="x",
        family="summarization",
        out_dir=tmp_path,
        shuffles=5,
        progress=False,
    )
    want = _designed(bias)
    m = results["metrics"]["none"]
    assert m["order_consistency"] == pytest.approx(want["order_consistency"])
    assert m["order_gap"] == pytest.approx(want["order_gap"])
    assert m["a_rate"] == pytest.approx(want["a_rate"])
    assert m["n_order_pairs"] == 12
    assert (want["order_consistency"], want["a_rate"]) == ((0.5, 0.75) if bias else (1.0, 0.5))
    # Answer mass as designed: half the pairs at 0.01, half at 0.9 (each summed over 4 variants).
    assert m["answer_mass_median"] == pytest.approx((0.01 + 0.9) / 2)
    assert m["answer_mass_low_share"] == pytest.approx(0.5)
    # Permutation debiasing makes every pair consistent by construction.
    assert results["metrics"]["permutation"]["order_consistency"] == 1.0
    # The low-mass pairs stay in the data, flagged; exactly those.
    judgments, _ = load_judgments(tmp_path / "judgments.jsonl")
    assert len(judgments) == 24
    assert [LOW_MASS in j.flags for j in judgments] == ["c3" in (j.a_id, j.b_id) for j in judgments]
    # The card, from judgments.jsonl alone, equals results.json; its pictures are written.
    with caplog.at_level(logging.WARNING, logger="harness.metrics.card"):
        (card,) = render_cards(tmp_path, echo=lambda _: None)
    saved = json.loads((tmp_path / "results.json").read_text())["metrics"]["none"]
    assert {k: card.numbers[k] for k in CARD_KEYS} == pytest.approx({k: saved[k] for k in CARD_KEYS})
    assert set(card.pictures) == set(PICTURES) and all(p.stat().st_size > 0 for p in card.pictures.values())
    assert "decision survives swapping" in (tmp_path / "card.md").read_text()
    assert not caplog.records  # median 0.455 is above the threshold: no warning
    # Negative control: one P(A) changed in judgments.jsonl and the card no longer equals results.json.
    rows = [json.loads(x) for x in (tmp_path / "judgments.jsonl").read_text().splitlines()]
    rows[0]["p_a"] = 1 - rows[0]["p_a"]
    (tmp_path / "judgments.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tampered,) = render_cards(tmp_path, echo=lambda _: None)
    assert tampered.numbers["a_rate_prob"] != pytest.approx(saved["a_rate_prob"])


def test_order_consistency_counts_ties_and_skips_one_order_pairs():
    from harness.records import Judgment

    def j(a, b, p):
        return Judgment("d", a, b, p, {})

    # (x, y): 0.7 / 0.2 -> x wins both ways; (x, z): 0.6 / 0.6 -> flips; (y, z): tie both ways;
    # (w, x): only one order judged -> not counted.
    js = [
        j("x", "y", 0.7),
        j("y", "x", 0.2),
        j("x", "z", 0.6),
        j("z", "x", 0.6),
        j("y", "z", 0.5),
        j("z", "y", 0.5),
        j("w", "x", 0.9),
    ]
    got = order_consistency(js)
    assert got["n_order_pairs"] == 3
    assert got["order_consistency"] == pytest.approx(2 / 3)
    assert got["order_gap"] == pytest.approx((0.1 + 0.2 + 0.0) / 3)
    assert math.isnan(order_consistency(js[-1:])["order_consistency"])


def test_low_mass_run_warns_once_naming_every_low_set(tmp_path, caplog):
    """Two judged sets of a base-model-like judge (mass 1e-9) and one healthy set: ONE warning line,
    naming the two low sets and the likely causes; nothing dropped from the data."""
    docs = _docs()
    for name, mass in (("eval_initial", 1e-9), ("eval_best", 1e-9), ("healthy", 0.9)):
        judge = PositionBiasedScriptedJudge(docs, 1.5, lambda r, m=mass: m)
        run_judge(
            judge,
            docs,
            task="scripted",
            aspect="coherence",
            instruction="x",
            family="summarization",
            out_dir=tmp_path / name,
            shuffles=5,
            progress=False,
        )
    with caplog.at_level(logging.WARNING, logger="harness.metrics.card"):
        cards = render_cards(tmp_path, echo=lambda _: None)
    assert [c.name for c in cards] == ["eval_best", "eval_initial", "healthy"]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "eval_initial" in lines[0] and "eval_best" in lines[0] and "healthy" not in lines[0]
    assert "chat template" in lines[0] and "base model" in lines[0] and "prompt" in lines[0]
    low = cards[0].numbers
    assert low["answer_mass_median"] == pytest.approx(1e-9) and low["answer_mass_low_share"] == 1.0
    assert low["a_rate"] == pytest.approx(0.75)  # P(A) itself looks as fine as ever: the point of the card
    assert len(load_judgments(tmp_path / "eval_best" / "judgments.jsonl")[0]) == 24


def test_chat_template_off_is_refused_on_the_chat_endpoint():
    from harness.judges import api

    with pytest.raises(ConfigError, match="endpoint=completions"):
        api.build(
            {"name": "m", "path": "x", "chat_template": False},
            base_url="http://127.0.0.1:9/v1",
            logprob_mode="top",
            endpoint="chat",
        )


# -- a real model: SmolLM2 with and without its chat template -----------------------------------
@pytest.mark.slow
def test_smollm2_without_chat_template_loses_mass_and_warns(
    smollm2_path, smollm2_judge, shared_data, tmp_path, caplog
):
    """SmolLM2-135M-Instruct on 2 SummEval documents x 3 systems (12 pairs), default instruction.
    With its template the label is its top token; without, 'Answer: ' is continued by a newline."""
    import torch

    from harness.data import load_task
    from harness.judges.hf import HFJudge
    from harness.prompts import default_instruction

    docs = load_task("summeval", data_dir=shared_data, limit=87)[
        85:87
    ]  # short: 162 and 180 words (83-84: 365, 316)
    # The session's SmolLM2 weights, twice: prefix reuse runs each document's source once.
    template, plain = (
        HFJudge(
            smollm2_path,
            name="SmolLM2-135M-Instruct",
            batch_size=4,
            device="cpu",
            model=smollm2_judge.model,
            tokenizer=smollm2_judge.tokenizer,
            prefix_reuse=True,
            chat_template=on,
        )
        for on in (True, False)
    )
    # The cache keeps them apart; weights handed over in memory are fingerprinted from memory
    # ("|w=mem:..."), so only the rest of the identity equals the folder-loaded judge's.
    assert template.identity != plain.identity and template.legacy_identity == smollm2_judge.legacy_identity
    assert smollm2_judge.tokenizer.chat_template  # the shared tokenizer is untouched
    medians, warnings = {}, {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, judge in (("template", template), ("plain", plain)):
            judgments, p_cf = judge_documents(
                judge,
                docs,
                aspect="coherence",
                family="summarization",
                instruction=default_instruction("coherence", "summarization"),
                max_candidates=3,
                progress=False,
            )
            out = tmp_path / name
            out.mkdir()
            write_judgments(out / "judgments.jsonl", judgments, p_cf)
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="harness.metrics.card"):
                (card,) = render_cards(out, echo=print)
            medians[name] = card.numbers["answer_mass_median"]
            warnings[name] = [r.getMessage() for r in caplog.records]
    finally:
        torch.set_num_threads(threads)
    print(
        f"\nSmolLM2 answer mass median: with chat template {medians['template']:.3f}, "
        f"without {medians['plain']:.3f}"
    )
    assert medians["template"] > MIN_ANSWER_MASS > medians["plain"]
    assert medians["template"] > 2 * medians["plain"]
    assert warnings["template"] == [] and len(warnings["plain"]) == 1
    assert all(LOW_MASS in j.flags for j in load_judgments(tmp_path / "plain" / "judgments.jsonl")[0])


# -- end to end: harness.run, W&B offline, harness-report ------------------------------------
def _report(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's harness, not an installed one
    return subprocess.run(
        [sys.executable, "-m", "harness.runtime.report_cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_run_gets_a_card_in_the_run_dir_wandb_and_report(tmp_path):
    """A judge run through `python -m harness.run` with model.chat_template=false. The tiny random
    model's mass is meaningless (random weights): here it only drives the plumbing."""
    out = tmp_path / "run"
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama3",
            "model.chat_template=false",
            "task.docs=2",
            "task.max_candidates=3",
            "experiment.shuffles=5",
            "progress=false",
            f"hydra.run.dir={out}",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert f"tmpl={template_fingerprint(None)}" in results["judge"]
    for name in PICTURES.values():
        assert (out / name).stat().st_size > 0
    assert "report card run:" in r.stdout
    assert (r.stdout + r.stderr).count("answer mass is low") == 1
    records = wandb_records(out)
    logged = {k for rec in records if rec.get("type") == "history" for k in rec["history"]["item"]}
    assert {f"card/run/{kind}" for kind in PICTURES} <= {k.split(".")[0] for k in logged}
    (art,) = [
        rec["artifact"]
        for rec in records
        if rec.get("type") == "artifact" and rec["artifact"]["type"] == "run-outputs"
    ]
    assert set(PICTURES.values()) | {"card.md"} <= {e["path"] for e in art["manifest"]["contents"]}
    # harness-report from judgments.jsonl alone: results.json's numbers, key for key.
    rep = _report([str(out), "--json", "--out", str(tmp_path / "cards")])
    assert rep.returncode == 0, rep.stderr
    numbers = json.loads(rep.stdout)["run"]
    saved = results["metrics"]["none"]
    assert {k: numbers[k] for k in CARD_KEYS} == pytest.approx({k: saved[k] for k in CARD_KEYS}, nan_ok=True)
    assert rep.stderr.count("answer mass is low") == 1
    # A run in the format written before the card (no flags in judgments.jsonl, none of the card's
    # new keys in results.json, no pictures): the same card, equal to what results.json has.
    old = tmp_path / "old"
    old.mkdir()
    rows = [json.loads(x) for x in (out / "judgments.jsonl").read_text().splitlines()]
    (old / "judgments.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in row.items() if k != "flags"}) + "\n" for row in rows)
    )
    new_keys = {
        "order_consistency",
        "order_gap",
        "n_order_pairs",
        "answer_mass_median",
        "answer_mass_low_share",
    }
    shutil.copy(out / "results.json", old / "results.json")
    rep = _report([str(old), "--json"])
    assert rep.returncode == 0, rep.stderr
    numbers = json.loads(rep.stdout)["run"]
    assert {k: numbers[k] for k in CARD_KEYS if k not in new_keys} == pytest.approx(
        {k: saved[k] for k in CARD_KEYS if k not in new_keys}, nan_ok=True
    )
    assert all((old / name).is_file() for name in PICTURES.values())
    assert _report([str(tmp_path / "nothing-here")]).returncode == 2


def test_card_numbers_of_an_empty_set_are_nan_not_errors():
    n = card_numbers([])
    assert (
        n["n_judgments"] == 0 and math.isnan(n["answer_mass_median"]) and math.isnan(n["order_consistency"])
    )


def test_picture_titles_say_leaky_or_held_out(tmp_path):
    """Issue 31: card.md named its documents (leaky / held-out) but the PNG titles did not. The title
    is read back from the PNG's Title text chunk (harness.figures.save). Negative control: a set with
    no SET_FILE (a plain judge run) gets no such tag."""
    from PIL import Image

    docs = _docs()
    for name, documents in (("eval_best", "held-out: all 3 documents, no search document"), ("plain", None)):
        folder = tmp_path / name
        run_judge(
            PositionBiasedScriptedJudge(docs, 1.5, _c3_low),
            docs,
            task="scripted",
            aspect="coherence",
            instruction="x",
            family="summarization",
            out_dir=folder,
            shuffles=5,
            progress=False,
        )
        if documents:
            (folder / "set.json").write_text(json.dumps({"documents": documents}))
    cards = {c.name: c for c in render_cards(tmp_path, echo=lambda _: None)}
    title = {n: {k: Image.open(p).text["Title"] for k, p in c.pictures.items()} for n, c in cards.items()}
    assert title["eval_best"]["p_a_by_order"].startswith(
        "eval_best [held-out: all 3 documents]: A-rate 0.750"
    )
    assert title["eval_best"]["answer_mass"] == "eval_best [held-out: all 3 documents]: answer-token mass"
    assert (
        title["plain"]["p_a_by_order"].startswith("plain: A-rate")
        and "[" not in title["plain"]["answer_mass"]
    )


def test_the_card_takes_its_intervals_from_results_json_only_where_they_are_its_own(tmp_path):
    """A judge run over 10 documents: the intervals its results.json records for the card's numbers
    (recorded_intervals) are the ones card_intervals computes from judgments.jsonl (the same
    intervals, documents, methods and notes), so the card reads them instead of bootstrapping
    again. Controls: another seed, rounds or level, or a number that differs from the file's
    (another set, or judgments changed since), and it computes them."""
    import random

    from harness.metrics.card import INTERVAL_KEYS, card_intervals, recorded_intervals
    from harness.results import RunResults

    rng = random.Random(3)
    docs = [
        Document(
            f"d{k}",
            "source",
            tuple(Candidate(f"c{i}", f"text {i}", {"coherence": rng.uniform(1, 5)}) for i in range(4)),
        )
        for k in range(10)
    ]
    judge = PositionBiasedScriptedJudge(docs, 0.7, lambda r: rng.uniform(0.05, 0.95))
    run_judge(
        judge,
        docs,
        task="scripted",
        aspect="coherence",
        instruction="x",
        family="summarization",
        out_dir=tmp_path,
        shuffles=5,
        progress=False,
    )
    results = RunResults.read(tmp_path / "results.json")
    judgments, _ = load_judgments(tmp_path / "judgments.jsonl")
    numbers = card_numbers(judgments)
    computed = card_intervals(judgments, numbers, 1000, 0.95, 0)
    assert computed is not None and set(computed) == set(INTERVAL_KEYS)
    assert sum(iv is not None and iv.bounds is not None for iv in computed.values()) >= 8
    assert recorded_intervals(results, numbers, 1000, 0.95, 0) == computed
    assert recorded_intervals(results, numbers, 1000, 0.95, 1) is None
    assert recorded_intervals(results, numbers, 500, 0.95, 0) is None
    assert recorded_intervals(results, numbers, 1000, 0.9, 0) is None
    assert recorded_intervals(results, {**numbers, "a_rate": numbers["a_rate"] + 0.01}, 1000, 0.95, 0) is None
    assert recorded_intervals(results, numbers, 0, 0.95, 0) is None


@pytest.mark.parametrize("sizes", [(2, 12), (4, 12)])
def test_unequal_candidate_counts_are_said_on_the_card_and_in_results(tmp_path, sizes):
    """Documents of 2 and 12 candidates (6x apart): card.md and results.json say how each metric
    weighs them (pooled metrics 66x, the A-rate and per-document correlations equally), in the same
    words; NEGATIVE CONTROL: 4 and 12 (3x apart) say nothing."""
    docs = [
        Document(
            f"d{k}", "source", tuple(Candidate(f"c{i}", f"t{i}", {"coherence": float(i)}) for i in range(m))
        )
        for k, m in enumerate(sizes)
    ]
    run_judge(
        PositionBiasedScriptedJudge(docs, 0.5, lambda r: 0.9),
        docs,
        task="scripted",
        aspect="coherence",
        instruction="x",
        family="summarization",
        out_dir=tmp_path,
        shuffles=1,
        progress=False,
    )
    got = json.loads((tmp_path / "results.json").read_text())["candidates_per_document"]
    render_cards(tmp_path, echo=lambda _: None)
    card = (tmp_path / "card.md").read_text()
    assert (got["min"], got["max"]) == sizes
    if sizes == (2, 12):
        assert got["note"].startswith("2 to 12 candidates per document (more than 5x apart)")
        assert "weigh a 12-candidate document 66x a 2-candidate one" in got["note"]
        assert got["note"] in card
    else:
        assert got["note"] is None and "candidates per document" not in card
