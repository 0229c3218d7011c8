"""The `abb` experiment end to end: real Hydra, real arena-bench-v1 answers, the tiny Llama judge.

One run (3 questions x 3 models vs gpt-4-0314, d = 9) is judged once; the sweep and the refusal
after estimation re-use its request cache, so they cost no new forward passes. Scores from a file
use a SCRIPTED neighbour bias (a designed ground truth, not a model) so distances can be checked.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import run_harness

from harness.errors import ConfigError, DataError

# Three consecutive arena-bench-v1 questions whose prompts are short for the tiny tokenizer
# (about 1,200 tokens per pair), three concise models plus the baseline.
SLICE = ["experiment=abb", "model=tiny_llama", "task=arena_bench", "task.offset=69", "task.docs=3",
         "experiment.models=[llama-13b,palm-2-chat-bison-001,claude-2.1]", "experiment.kinds=[formatting,swap]",
         "experiment.estimate=6", "experiment.verify=6", "experiment.jitter.docs=1", "experiment.bootstrap=20",
         "progress=false"]
D = 9


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def shared(tmp_path_factory, shared_data, tiny_llama):
    """The tmp dir whose cache/ and data/ every subprocess of this module shares."""
    return tmp_path_factory.mktemp("abb")


@pytest.fixture(scope="module")
def e2e(shared):
    out = shared / "run"
    r = run_harness([*SLICE, f"hydra.run.dir={out}"], shared)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_end_to_end_writes_bounded_scores_and_a_checked_guarantee(e2e):
    bj = json.loads((e2e / "abb.json").read_text())
    rows = _jsonl(e2e / "bounded_scores.jsonl")
    neigh = _jsonl(e2e / "neighbours.jsonl")
    assert len(rows) == D and {r["model"] for r in rows} == {"llama-13b", "palm-2-chat-bison-001", "claude-2.1"}
    assert {"item", "model", "original", "bounded"} <= rows[0].keys()
    # sigma = 0 by default: M(D) = alpha f(D) + (1 - alpha) * 0.5 exactly, scores are P(better) in [0, 1].
    assert bj["sigma"] == 0 and bj["mu"] == {"mode": "fixed", "value": 0.5} and bj["scale"] == [0.0, 1.0]
    for r in rows:
        assert 0 < r["original"] < 1
        assert r["bounded"] == pytest.approx(bj["alpha"] * r["original"] + (1 - bj["alpha"]) * 0.5, abs=1e-12)
    # The sensitivity is recomputable from neighbours.jsonl; the UCB (m = 6) is larger than the plug-in.
    est = [n for n in neigh if n["split"] == "estimate"]
    fresh = [n for n in neigh if n["split"] == "verify"]
    assert len(est) == 6 and len(fresh) == 6
    assert bj["sensitivity"]["plugin"] == pytest.approx(math.sqrt(np.mean([n["sq_distance"] for n in est])))
    assert bj["sensitivity"]["ucb"] > bj["sensitivity"]["plugin"] and bj["sensitivity"]["method"] == "bernstein"
    # Both orders are averaged, so an A/B swap cannot move a score: its distance is exactly 0.
    swaps = [n for n in est + fresh if n["edits"][0]["kind"] == "swap"]
    assert all(n["sq_distance"] == 0 and n["noop"] for n in swaps)
    assert all(n["n_edits"] == 1 and len(n["changed"]) <= 1 for n in est + fresh)  # Hamming-1: spliced
    assert bj["guarantee"]["holds"] and bj["guarantee"]["total"] <= bj["tau"] * (1 + 1e-9)
    assert bj["alpha"] == pytest.approx(bj["alpha_max"])
    assert bj["alpha"] == pytest.approx(min(1.0, bj["tau"] * math.sqrt(bj["delta"]["markov"]) / bj["sensitivity"]["ucb"]))
    v = bj["verification"]
    assert v["n_trials"] == 6 and v["violations"] == 0 and v["pass_point"] and v["cp_low"] == 0
    assert 0 < v["cp_high"] < 1 and not v["pass_upper"]  # 6 trials cannot rule out a rate above delta
    # Jitter: measured by re-judging through the uncached judge; a local logprob judge has none.
    assert bj["jitter"]["measured"] and "uncached" in bj["jitter"]["route"] and bj["jitter"]["max_abs"] < 1e-5
    sig = bj["retained_signal"]
    for scope in ("per_model", "per_item", "elo"):
        assert {"pearson", "spearman", "kendall", "variance_reduction"} <= sig[scope].keys()
    # A contraction alone is a positive affine map: the rankings are kept exactly, the variance is not.
    assert sig["per_item"]["spearman"] == pytest.approx(1.0) and sig["per_model"]["kendall"] == pytest.approx(1.0)
    assert sig["per_item"]["variance_reduction"] == pytest.approx(1 - bj["alpha"] ** 2)


def test_end_to_end_results_rankings_and_wandb(e2e):
    results = json.loads((e2e / "results.json").read_text())
    for when in ("before", "after"):
        rank = results["rankings"][when]
        assert rank["anchor"] == "gpt-4-0314" and rank["elo"]["gpt-4-0314"]["elo"] == pytest.approx(1000.0)
        assert sorted(r["rank"] for r in rank["mean"].values()) == [1, 2, 3]
        for row in rank["elo"].values():
            assert row["lo"] <= row["elo"] + 1e-9 and row["elo"] <= row["hi"] + 1e-9
    before, after = (results["rankings"][w]["mean"] for w in ("before", "after"))
    assert {m: r["rank"] for m, r in before.items()} == {m: r["rank"] for m, r in after.items()}
    m = results["metrics"]
    assert m["d"] == D and m["trials"] == 6 and m["model_pearson"] == pytest.approx(1.0)
    assert results["judge"].startswith("hf|tiny-llama") and results["judge_calls"] > 0
    # arena-bench carries GPT-4 grades: agreement with them is reported before and after.
    assert results["reference_agreement"]["n_models"] == 3
    models = _jsonl(e2e / "tables" / "models.jsonl")
    assert {r["model"] for r in models} == {"llama-13b", "palm-2-chat-bison-001", "claude-2.1", "gpt-4-0314"}
    assert list((e2e / "wandb").glob("offline-run-*")), "W&B offline run missing"
    logged = _jsonl(e2e / "metrics.jsonl")[0]
    assert logged["abb/verification/n_trials"] == 6 and "rank/after/elo/llama-13b/elo" in logged


def test_sweep_over_tau_runs_and_plots(shared, e2e):
    """A 2-point multirun over tau (with noise: alpha = alpha_max / 2, sigma = sigma_max), then the
    collect step writes the table and both plots."""
    sweep = shared / "sweep"
    r = run_harness(["-m", *SLICE, "experiment.tau=0.3,0.6", "experiment.alpha_fraction=0.5",
                     "experiment.sigma_mode=max", f"hydra.sweep.dir={sweep}"], shared)
    assert r.returncode == 0, r.stderr[-3000:]
    taus = []
    for job in ("0", "1"):
        bj = json.loads((sweep / job / "abb.json").read_text())
        taus.append(bj["tau"])
        assert bj["sigma"] == pytest.approx(bj["sigma_max"]) and bj["sigma"] > 0 and bj["delta"]["noise"] > 0
        assert bj["guarantee"]["total"] == pytest.approx(bj["tau"])  # the noise fills the room alpha/2 left
        assert bj["verification"]["violations"] == 0
        # Every request came from the first run's cache; only the jitter route skipped it (on purpose).
        assert bj["judge_calls"] == 0 and bj["jitter"]["requests"] == 6
    assert taus == [0.3, 0.6]
    # Each point is logged to W&B in the sweep's group (no wandb.group given: '<parent>/<sweep dir>').
    for job in ("0", "1"):
        (run_file,) = (sweep / job / "wandb").glob("offline-run-*/run-*.wandb")
        assert f"{shared.name}/sweep".encode() in run_file.read_bytes()
    from harness.runtime.abb_sweep import main

    assert main([str(sweep)]) == 0
    out = sweep / "collect"
    for name in ("retained_vs_tau.png", "violation_vs_delta.png"):
        assert (out / name).stat().st_size > 5000
    table = (out / "table.md").read_text()
    assert table.startswith("| experiment.tau |") and "| 0.3 |" in table and "| 0.6 |" in table


def _one_line_error(r) -> str:
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    return errors[0]


def test_impossible_tau_delta_is_refused_before_judging(shared):
    out = shared / "refused"
    r = run_harness([*SLICE, "experiment.tau=0.001", "experiment.alpha_min=0.5", f"hydra.run.dir={out}"], shared)
    line = _one_line_error(r)
    assert "alpha_min" in line and "even if no neighbour moved any score" in line
    assert "Loading weights" not in r.stderr and not (out / "neighbours.jsonl").exists()


def test_refusal_after_estimation_keeps_the_neighbours(shared, e2e):
    out = shared / "refused_late"
    r = run_harness([*SLICE, "experiment.tau=1e-6", "experiment.ucb=none", "experiment.alpha_min=0.9",
                     f"hydra.run.dir={out}"], shared)
    line = _one_line_error(r)
    assert "needs alpha <=" in line and "alpha_min=0.9" in line
    assert (out / "neighbours.jsonl").is_file() and not (out / "abb.json").exists()


# --- settings, win rates and file scores (in-process) --------------------------------------------


def test_settings_split_and_kinds():
    from harness.experiments.abb import settings_from

    s = settings_from({"tau": 0.5, "delta": 0.1, "kinds": "formatting"}, seed=0)
    assert s.split.noise == 0 and s.split.est == pytest.approx(0.01) and s.split.markov == pytest.approx(0.09)
    assert len(s.kinds) == 6 and "swap" not in s.kinds
    s = settings_from({"delta": 0.1, "sigma_mode": "max", "ucb": "none", "kinds": ["swap"]}, seed=0)
    assert s.split.noise == pytest.approx(0.045) and s.split.est == 0
    with pytest.raises(ConfigError, match="insert_whitespace"):
        settings_from({"kinds": "insert_whitespace"}, seed=0)
    with pytest.raises(ConfigError, match="fields=\\[instruction\\]"):
        settings_from({"kinds": ["llm_paraphrase"], "fields": ["answer"]}, seed=0)


def test_win_rates_from_the_tiny_judge(shared_data, tiny_judge):
    """Summarisation: per-candidate win rates; one edited candidate moves its whole document."""
    from harness.abb.scores import PairwiseScorer, View, select_items
    from harness.data import load_task

    doc = load_task("summeval", data_dir=shared_data, limit=58)[57]
    items, skipped = select_items([doc], baseline=None, max_candidates=3)
    sc = PairwiseScorer(tiny_judge, [doc], items, instruction="Which summary is more coherent? Answer A or B.",
                        family="summarization", baseline=None)
    f = sc.vector().values
    assert len(f) == 3 and not skipped and sc.kind == "winrate"
    assert f.sum() == pytest.approx(1.5, abs=1e-9)  # s_ij + s_ji = 1: the win rates sum to k/2
    edited = sc.original(0, "answer").upper()
    g = sc.score_many([{0: View(answer=edited)}], base=f)[0]
    v = g - f
    b, _ = sc.bounds("one_item")
    # Only pairs with candidate 0 changed: the others move by at most 1/(k - 1) each, all moves sum
    # to 0, and ||v||^2 stays under the bound the UCB uses (k/(k - 1) = 1.5).
    assert v[0] != 0 and v[1] != 0 and v[2] != 0 and abs(v.sum()) < 1e-9
    assert max(abs(v[1]), abs(v[2])) <= 0.5 and float(v @ v) <= b and b == pytest.approx(1.5)


def _likert_file(path, rng, n_q=12, models=("m1", "m2", "m3"), m_est=60, m_ver=40):
    """A user's 1-10 scores, plus Hamming-1 neighbours with a SCRIPTED bias: one item moves by +-1
    (rarely by 4)."""
    base = {(f"q{q}", m): float(rng.integers(1, 11)) for q in range(n_q) for m in models}
    rows = [{"item": q, "model": m, "score": s} for (q, m), s in base.items()]
    keys = list(base)
    for split, n in (("estimate", m_est), ("verify", m_ver)):
        for j in range(n):
            q, m = keys[int(rng.integers(len(keys)))]
            step = 4.0 if rng.random() < 0.05 else 1.0
            s = float(np.clip(base[(q, m)] + step * rng.choice([-1, 1]), 1, 10))
            rows.append({"item": q, "model": m, "score": s, "neighbour": f"{split}{j}", "split": split})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return base, rows


def test_scores_from_a_file_run_through_hydra(tmp_path):
    from conftest import REPO
    from hydra import compose, initialize_config_dir

    from harness.runtime.entry import run

    base, rows = _likert_file(tmp_path / "likert.jsonl", np.random.default_rng(0))
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=abb", "experiment.scores=file",
                                           f"experiment.file.path={tmp_path / 'likert.jsonl'}",
                                           "experiment.file.scale=[1,10]", "experiment.tau=2.0",
                                           "experiment.delta=0.1", "wandb.mode=disabled"])
    results = run(cfg, tmp_path / "out")
    bj = json.loads((tmp_path / "out" / "abb.json").read_text())
    assert bj["mode"] == "one_item" and bj["d"] == len(base) and bj["scores"]["items_changed"] == 1
    assert bj["neighbours"]["bounds"]["B"] == 81.0  # one item, range 9
    sq = [(r["score"] - base[(r["item"], r["model"])]) ** 2 for r in rows if r.get("split") == "estimate"]
    assert bj["sensitivity"]["plugin"] == pytest.approx(math.sqrt(np.mean(sq)))
    assert bj["verification"]["n_trials"] == 40 and bj["mu"]["value"] == 5.5
    assert results["metrics"]["violation_rate"] <= 0.1
    # No baseline: models are ranked by mean and by pairwise battles on shared questions.
    assert set(results["rankings"]["before"]["elo"]) == {"m1", "m2", "m3"}


def test_file_errors_name_the_line_and_field(tmp_path):
    from harness.abb.scores import load_file_scores

    p = tmp_path / "bad.jsonl"
    p.write_text('{"item": "q1", "model": "a", "score": 3}\n{"item": "q1", "model": "b", "score": 12}\n')
    with pytest.raises(DataError, match=r"line 2.*'score'.*outside the scale"):
        load_file_scores(p, [1, 10])
    p.write_text('{"item": "q1", "model": "a", "score": 3}\n{"item": "q2", "model": "a", "score": 4, "neighbour": 1}\n')
    with pytest.raises(DataError, match="no baseline row"):
        load_file_scores(p, [1, 10])


def test_instruction_and_llm_paraphrase_neighbours(shared, e2e):
    """'instruction' neighbours draw from a ZEPO history.jsonl; 'llm_paraphrase' ones come from the
    API optimizer on a loopback server (scripted replies). The baseline f(D) is the e2e run's cache."""
    import re

    from conftest import REPO, SHARED_DATA
    from hydra import compose, initialize_config_dir
    from openai_server import OpenAIServer

    from harness.runtime.entry import run

    def reply(body: dict) -> str:
        word = re.search(r'keep the word "([^"]+)"', body["messages"][-1]["content"]).group(1)
        return (f"Judge the {word} of response candidate A and response candidate B. Which one has better "
                f"{word}? Answer 'A' or 'B', the letter only (v{int(body.get('seed', 0)) % 97}).")

    history = shared / "history.jsonl"
    texts = ["Which response candidate is more helpful, A or B? Answer with 'A' or 'B'.",
             "Pick the response candidate with greater helpfulness: reply 'A' or 'B' only."]
    history.write_text("".join(json.dumps({"index": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    with OpenAIServer(script=reply) as srv:
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=[
                *[o for o in SLICE if not o.startswith(("experiment.kinds", "progress"))],
                "experiment.kinds=[instruction,llm_paraphrase]", "experiment.fields=[instruction]",
                "experiment.instructions=[]", f"experiment.instructions_file={history}",
                "experiment.estimate=4", "experiment.verify=2", "experiment.jitter.repeats=0",
                "optimizer=api", f"optimizer.base_url={srv.url}", "optimizer.model=scripted-loopback",
                f"data.dir={shared / 'data'}", f"data.mirror={SHARED_DATA}",
                f"cache.path={shared / 'cache' / 'requests.sqlite'}", "progress=false", "wandb.mode=disabled"])
        run(cfg, shared / "paraphrase")
        asked = len(srv.ok_requests())
    rows = _jsonl(shared / "paraphrase" / "neighbours.jsonl")
    kinds = {r["edits"][0]["kind"] for r in rows}
    assert kinds == {"instruction", "llm_paraphrase"} and asked >= 1
    for r in rows:
        assert r["edits"][0]["field"] == "instruction" and not r["noop"]
        if r["edits"][0]["kind"] == "instruction":
            assert r["instruction"] in texts
        else:
            assert re.search(r"\(v\d+\)\.$", r["instruction"]) and "helpfulness" in r["instruction"]
    bj = json.loads((shared / "paraphrase" / "abb.json").read_text())
    assert bj["jitter"] == {"measured": False, "route": "not measured (experiment.jitter.repeats=0)"}
    assert bj["neighbours"]["estimate"]["n"] == 4 and bj["verification"]["n_trials"] == 2
