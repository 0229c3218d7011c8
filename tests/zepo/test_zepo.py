"""ZEPO search: greedy keep-best selection, resumability, and the experiment end to end.

- A scripted judge with a designed position bias (named as such) tests the selection logic,
  where knowing the true fairness of each instruction is the point.
- End to end: the real tiny Llama judge, the real API optimizer against a real loopback
  OpenAI-compatible server that injects 429/500/hang/malformed replies and garbage completions.
- Resume: a run interrupted after epoch 0 finishes with the unbroken run's history, repeating no
  optimizer request and no judge call.
- Slow: SmolLM2 as judge and local optimizer on real SummEval documents.
"""

from __future__ import annotations

import json
import math

import pytest
from helpers.compose import compose
from helpers.results import assert_close
from helpers.scripted import (
    GARBAGE,
    CallLog,
    ScriptedBiasJudge,
    ScriptedOptimizer,
    e2e_overrides,
    scripted_completion,
    scripted_docs,
)
from PIL import Image

from harness.errors import ConfigError
from harness.judges.cache import CachedJudge, ScoreCache
from harness.zepo import search as zepo


# -- selection logic with a scripted, position-biased judge (helpers.scripted) ----------------------
def _search(tmp_path, cache_name="c.sqlite", state="state.json", **kw):
    judge = CachedJudge(ScriptedBiasJudge(), ScoreCache(tmp_path / cache_name))
    opt = ScriptedOptimizer()
    docs = scripted_docs()
    settings = zepo.SearchSettings(**{"population": 3, "epochs": 3, "shuffles": 5, **kw})
    s = zepo.Search(
        judge,
        opt,
        "Which summary is more coherent? Answer 'A' or 'B'.",
        "coherence",
        "summarization",
        docs[:1],
        docs[1:],
        settings,
        state_path=tmp_path / state,
    )
    return s, judge, opt


@pytest.mark.parametrize("objective", ["fairness", "fairness_prob", "confidence", "calibration"])
def test_greedy_keeps_the_first_best_and_paraphrases_it(tmp_path, objective):
    s, _, _ = _search(tmp_path, objective=objective)
    res = s.run()
    cands = res.candidates
    assert len(cands) == 9 and cands[0].text == s.initial and cands[0].parent is None
    assert [c.epoch for c in cands] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    key = [zepo.objective_key(c.objectives[objective]) for c in cands]
    first_max = key.index(max(key))
    assert res.best.index == first_max  # strictly higher replaces; ties keep the earlier
    # Epoch 0 paraphrases the initial; epoch e paraphrases the best after epoch e-1.
    for e in (1, 2):
        prev = [k for k, c in enumerate(cands) if c.epoch < e]
        best_before = max(prev, key=lambda k: (key[k], -k))
        assert {c.parent for c in cands if c.epoch == e} == {best_before}
    assert all(c.parent == 0 for c in cands[1:3])
    # The initial instruction is biased towards A by design; the search must leave it.
    if objective == "fairness":
        assert cands[0].a_rate == 1.0 and res.best.fairness > cands[0].fairness


def test_split_documents_disjoint_by_default_and_leaky_on_request():
    docs = scripted_docs(5)
    search, ev = zepo.split_documents(docs, 2)
    assert [d.id for d in search] == ["d0", "d1"] and [d.id for d in ev] == ["d2", "d3", "d4"]
    _, ev = zepo.split_documents(docs, 2, eval_docs=1)
    assert [d.id for d in ev] == ["d2"]
    _, ev = zepo.split_documents(docs, 2, leak=True)
    assert [d.id for d in ev] == [d.id for d in docs]
    with pytest.raises(ConfigError, match="no evaluation documents"):
        zepo.split_documents(docs, 5)
    with pytest.raises(ConfigError, match="only 5"):
        zepo.split_documents(docs, 6)


def test_interrupted_search_resumes_exactly(tmp_path):
    ref, ref_judge, ref_opt = _search(tmp_path / "a")
    ref_res = ref.run()

    class Killed(Exception):
        pass

    def kill(epoch, scored, best):
        if epoch == 0:
            raise Killed

    first, j1, o1 = _search(tmp_path / "b")
    first.on_epoch = kill
    with pytest.raises(Killed):
        first.run()
    state = json.loads((tmp_path / "b" / "state.json").read_text())
    assert len(state["candidates"]) == 3 and state["epoch"] == 0
    again, j2, o2 = _search(tmp_path / "b")
    res = again.run()
    assert [c.to_row() for c in res.candidates] == [c.to_row() for c in ref_res.candidates]
    assert o1.calls + o2.calls == ref_opt.calls  # no paraphrase asked twice
    assert j1.calls + j2.calls == ref_judge.calls  # no pair judged twice
    # Same directory, different settings: refused rather than mixed.
    other, _, _ = _search(tmp_path / "b", objective="confidence")
    with pytest.raises(ConfigError, match="different settings"):
        other.run()
    # More epochs continue the finished search instead of starting over.
    more, _, o3 = _search(tmp_path / "b", epochs=4)
    assert len(more.run().candidates) == 12 and o3.calls == 3


# -- an epoch judged in one call -----------------------------------------------------------------
class PerCandidateSearch(zepo.Search):
    """The search judging one candidate at a time (one judge call per text and document set),
    as it did before epochs were judged in one call: the reference the batched search must equal."""

    def judge_texts(self, texts):
        held = self.settings.heldout_spearman and bool(self.heldout_docs)
        return {
            t: (self.judge_on(self.search_docs, t), self.judge_on(self.heldout_docs, t) if held else None)
            for t in dict.fromkeys(texts)
        }


def test_epoch_in_one_call_equals_per_candidate_judging(tmp_path, tiny_llama, shared_data):
    """A ZEPO epoch's candidates are judged in ONE call (search and held-out documents together):
    the same state.json, history and request-cache keys as judging one candidate at a time, with
    fewer tokens run (each pair's content computed once for all the epoch's instructions)."""
    import sqlite3

    from harness.data import load_task
    from harness.judges.hf import HFJudge
    from harness.judges.wrappers import PreemptibleJudge

    docs = load_task("summeval", data_dir=shared_data, limit=2)
    model = HFJudge(tiny_llama, device="cpu", dtype="float32", threads=1, prefix_reuse=True)
    runs = {}
    for kind, cls in (("batched", zepo.Search), ("per_candidate", PerCandidateSearch)):
        out = tmp_path / kind
        out.mkdir()
        model.tokens_processed = 0
        model.prefix_scorer = None  # no KV kept from the other run
        log = CallLog(model)
        judge = PreemptibleJudge(CachedJudge(log, ScoreCache(out / "requests.sqlite"), chunk=16), chunk=16)
        settings = zepo.SearchSettings(population=3, epochs=2, shuffles=5, max_candidates=4)
        search = cls(
            judge,
            ScriptedOptimizer(),
            "Which summary is more coherent? Answer 'A' or 'B'.",
            "coherence",
            "summarization",
            docs[:1],
            docs[1:],
            settings,
            state_path=out / "state.json",
        )
        result = search.run()
        with sqlite3.connect(out / "requests.sqlite") as db:
            keys = {k for (k,) in db.execute("SELECT key FROM scores")}
        runs[kind] = {
            "state": json.loads((out / "state.json").read_text()),
            "keys": keys,
            "sizes": log.sizes,
            "history": zepo.history_rows(result),
            "tokens": model.tokens_processed,
        }
    batched, single = runs["batched"], runs["per_candidate"]
    assert_close(batched["state"], single["state"])
    assert_close(batched["history"], single["history"], "history")
    assert len(batched["history"]) == 6 and len({r["text"] for r in batched["history"]}) == 6
    assert batched["keys"] == single["keys"] and len(batched["keys"]) == 6 * (12 + 12 + 1)
    # Per candidate: a search and a held-out call per text, each one or more chunks; batched: the
    # epoch's requests as one stream, cut only into cache chunks of 16.
    assert sum(batched["sizes"]) == sum(single["sizes"]) == len(batched["keys"])
    assert len(batched["sizes"]) == sum(math.ceil(3 * 25 / 16) for _ in range(2)) < len(single["sizes"])
    assert batched["tokens"] < 0.8 * single["tokens"]


# -- end to end: tiny Llama judge, API optimizer on a loopback server -----------------------------


@pytest.fixture(scope="module")
def e2e(tmp_path_factory, shared_data, tiny_llama):
    """One unbroken run through the Hydra entry, with faults injected into the optimizer server."""
    from helpers.servers import OpenAIServer

    from harness.runtime.entry import run

    tmp = tmp_path_factory.mktemp("zepo_e2e")
    with OpenAIServer(script=scripted_completion, hang_s=1.5) as srv:
        srv.inject("429", "500", "hang", "malformed", "no_choices")
        cfg = compose(e2e_overrides(tmp, srv.url, shared_data, "wandb.mode=offline"))
        results = run(cfg, tmp / "run")
        yield {
            "tmp": tmp,
            "srv": srv,
            "results": results,
            "ok": len(srv.ok_requests()),
            "faults_left": srv.faults_left,
            "outcomes": [r.outcome for r in srv.requests],
            "replies": [scripted_completion(r.body) for r in srv.ok_requests()],
        }


def test_e2e_history_selection_and_faults(e2e):
    out = e2e["tmp"] / "run"
    rows = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and [r["epoch"] for r in rows] == [0, 0, 0, 1, 1, 1]
    for r in rows:
        for k in (
            "text",
            "epoch",
            "index",
            "parent",
            "objectives",
            "a_rate",
            "fairness",
            "confidence",
            "spearman_heldout",
        ):
            assert k in r
        assert set(r["objectives"]) == set(zepo.OBJECTIVES)
        assert r["spearman_heldout"] is not None and r["text"] not in GARBAGE
    selected = [r for r in rows if r["selected"]]
    assert len(selected) == 1
    best_fair = max(r["fairness"] for r in rows)
    assert selected[0]["fairness"] == best_fair
    assert selected[0]["index"] == min(r["index"] for r in rows if r["fairness"] == best_fair)
    assert (out / "best_instruction.txt").read_text().strip() == selected[0]["text"]
    # Every injected fault was served and survived; garbage completions were asked again.
    assert e2e["faults_left"] == 0 and {"429", "500", "hang", "malformed", "no_choices"} <= set(
        e2e["outcomes"]
    )
    assert set(GARBAGE) & set(e2e["replies"])
    res = json.loads((out / "results.json").read_text())
    assert res["search_doc_ids"] and not set(res["search_doc_ids"]) & set(res["eval_doc_ids"])
    for label in ("initial", "best"):
        assert {"none", "permutation"} <= set(res[label]["metrics"])
        assert (out / f"eval_{label}" / "judgments.jsonl").is_file()
    table = [json.loads(x) for x in (out / "tables" / "candidates.jsonl").read_text().splitlines()]
    assert len(table) == 6 and (out / "search.png").stat().st_size > 0
    assert list(out.glob("wandb/offline-run-*")), "offline W&B run missing"


def test_e2e_report_cards_for_both_evaluations(e2e):
    """The run context draws two report cards per evaluation, each naming its documents and equal
    to the results.json set it names: eval_<label>/ (search documents included: leaky) and
    eval_<label>/heldout/ (search documents excluded)."""
    from harness.judging import load_judgments
    from harness.metrics.card import CARD_KEYS, PICTURES, card_numbers
    from harness.progress import counted

    out = e2e["tmp"] / "run"
    res = json.loads((out / "results.json").read_text())
    n_search, n_held = len(res["search_doc_ids"]), res["initial"]["n_heldout_docs"]
    for label in ("initial", "best"):
        for folder, split, first in (
            (
                out / f"eval_{label}",
                "metrics_leaky",
                f"report card eval_{label} [leaky: all {counted(n_search + n_held, 'document')}, the "
                f"{counted(n_search, 'search document')} included]:",
            ),
            (
                out / f"eval_{label}" / "heldout",
                "metrics_heldout",
                f"report card eval_{label}/heldout [held-out: {counted(n_held, 'document')}, search documents "
                "excluded]:",
            ),
        ):
            assert all((folder / name).stat().st_size > 0 for name in PICTURES.values())
            assert (folder / "card.md").read_text().startswith(first)
            # ... and so do the pictures' titles (the PNG's Title chunk, harness.figures.save)
            tag = first.split("[")[1].split(",")[0]
            png = Image.open(folder / PICTURES["p_a_by_order"]).text["Title"]
            assert png.startswith(f"{folder.relative_to(out).as_posix()} [{tag}]: A-rate"), png
            numbers = card_numbers(load_judgments(folder / "judgments.jsonl")[0])
            saved = res[label][split]["none"]
            assert {k: numbers[k] for k in CARD_KEYS} == pytest.approx(
                {k: saved[k] for k in CARD_KEYS}, nan_ok=True
            )
        # The two sets differ (negative control: comparing one card with the other set's numbers fails).
        assert (
            res[label]["metrics_leaky"]["none"]["n_docs"] != res[label]["metrics_heldout"]["none"]["n_docs"]
        )


def test_e2e_killed_after_epoch0_resumes_without_repeats(e2e, shared_data, tmp_path):
    """Same seed, fresh caches: interrupted after epoch 0, resumed, same history as the unbroken run."""
    from helpers.servers import OpenAIServer

    from harness.experiments import zepo as zexp
    from harness.runtime.context import RunContext
    from harness.zepo.run import run_zepo

    class Killed(Exception):
        pass

    def kill(epoch):
        if epoch == 0:
            raise Killed

    with OpenAIServer(script=scripted_completion) as srv:
        cfg = compose(e2e_overrides(tmp_path, srv.url, shared_data))
        parts = zexp.prepare(RunContext(cfg, tmp_path / "run"))
        with pytest.raises(Killed):
            run_zepo(**parts, out_dir=tmp_path / "run", after_epoch=kill)
        calls_1, requests_1 = parts["judge"].calls, len(srv.requests)
        assert json.loads((tmp_path / "run" / "state.json").read_text())["epoch"] == 0
        parts = zexp.prepare(RunContext(cfg, tmp_path / "run"))
        run_zepo(**parts, out_dir=tmp_path / "run")
        calls_2, requests_2 = parts["judge"].calls, len(srv.requests) - requests_1
    ref = [json.loads(x) for x in (e2e["tmp"] / "run" / "history.jsonl").read_text().splitlines()]
    got = [json.loads(x) for x in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert got == ref
    assert requests_1 + requests_2 == e2e["ok"]  # every optimizer completion requested exactly once
    n_cached = len(ScoreCache(tmp_path / "cache" / "requests.sqlite"))
    assert calls_1 + calls_2 == n_cached == len(ScoreCache(e2e["tmp"] / "cache" / "requests.sqlite"))
    assert requests_2 > 0 and calls_2 > 0  # the second part did real work (epoch 1)


# -- slow: SmolLM2 judge and local SmolLM2 optimizer on SummEval ----------------------------------
@pytest.mark.slow
def test_smollm2_search_moves_decision_rate_toward_half(shared_data, smollm2_path, tmp_path):
    """The real thing, small: the demo config (SmolLM2 judges AND paraphrases, local optimizer, the
    fairness_prob objective) on 1 search + 1 held-out SummEval document, 3 systems, one epoch of 3
    candidates (the initial + 2 paraphrases)."""
    from harness.runtime.entry import run

    cfg = compose(
        [
            "experiment=zepo_demo",
            f"data.dir={tmp_path / 'data'}",
            f"data.mirror={shared_data}",
            f"cache.path={tmp_path / 'cache' / 'requests.sqlite'}",
            "progress=false",
            "wandb.mode=disabled",
            "task.offset=85",
            "task.docs=2",
            "experiment.search_docs=1",
            "experiment.epochs=1",
            "experiment.heldout_spearman=false",
            "optimizer.max_new_tokens=100",
        ]
    )
    res = run(cfg, tmp_path / "run")
    assert res["objective"] == "fairness_prob"
    init, best = res["initial"], res["best"]
    rate = [r["search"]["a_rate_prob"] for r in (init, best)]
    held = [r["metrics"]["none"]["a_rate_prob"] for r in (init, best)]
    sp = [r["metrics"]["none"]["spearman_pairs"] for r in (init, best)]
    print(
        f"\nsearch mean P(A) {rate[0]:.3f} -> {rate[1]:.3f}; held-out mean P(A) {held[0]:.3f} -> {held[1]:.3f}; "
        f"held-out Spearman (PairS) {sp[0]:.3f} -> {sp[1]:.3f}"
    )
    assert res["n_candidates"] >= 2  # the local optimizer produced usable paraphrases
    assert abs(rate[1] - 0.5) < abs(rate[0] - 0.5)  # strictly fairer on the search document
    assert all(0 <= x <= 1 for x in held) and all(-1 <= x <= 1 for x in sp)
    # Every number with its interval entry over documents, and the paired held-out gain as a sentence:
    # on 1 held-out document, too few to tell.
    assert set(best["intervals_heldout"]["none"]) >= {"a_rate_prob", "spearman_pairs", "fairness"}
    said = res["gains"]["heldout"]["none"]["spearman_pairs"]["sentence"]
    assert "(1 document: too few documents to tell)" in said and "distinguishable" not in said


def test_fairness_prob_on_permutation_debiased_judgments_is_refused():
    """Debiased judgments have mean P(A) 0.5 whatever the instruction: that objective could never
    pick a candidate, so the search refuses it rather than silently keep the initial one."""
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="constant on permutation-debiased"):
        zepo.SearchSettings(objective="fairness_prob", debias="permutation")
    zepo.SearchSettings(objective="fairness", debias="permutation")
