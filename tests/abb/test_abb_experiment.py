"""The `abb` experiment end to end: real Hydra, real arena-bench-v1 answers, the tiny Llama judge.

One run (3 questions x 3 models vs gpt-4-0314, d = 9) is judged once; the other runs re-use its
request cache where their prompts coincide. Scores from a file use a SCRIPTED neighbour bias (a
designed ground truth, not a model) so distances can be checked. What each run shows:
- `e2e` (6 neighbours, both orders): the certain cap wins (a sure claim); its fresh check tests the
  cap's assumption on every fresh neighbour and abb.json says in words that no bias rate was tested;
  swaps are no-ops and are counted;
- `informative` (orders=single, 24 neighbours, delta = 0.2): the quantile bound wins with alpha
  above the cap, so the check can fail; it is confirmed, and the same check flags mis-calibrated
  copies of the mechanism on the run's own fresh neighbours (negative controls).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers.abb import SLICE, likert_file, run_here
from helpers.cli import run_in_process
from helpers.data import read_jsonl

from harness.errors import ConfigError, DataError

# The runs below take helpers.abb's SLICE (three arena-bench-v1 questions, three models) and add:
INFORMATIVE = [
    "experiment.orders=single",
    "experiment.kinds=formatting",
    "experiment.delta=0.2",
    "experiment.estimate=24",
    "experiment.verify=20",
    "experiment.jitter.samples=0",
]
D = 9


@pytest.fixture(scope="module")
def shared(tmp_path_factory, shared_data, tiny_llama):
    """The tmp dir whose cache/ and data/ every run of this module shares."""
    return tmp_path_factory.mktemp("abb")


@pytest.fixture(scope="module")
def e2e(shared):
    out = shared / "run"
    r = run_in_process([*SLICE, f"hydra.run.dir={out}"], shared)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def informative(shared, e2e):
    return run_here(shared, "informative", *INFORMATIVE)


def test_end_to_end_cap_wins_and_its_check_tests_the_assumption(e2e):
    bj = json.loads((e2e / "abb.json").read_text())
    rows = read_jsonl(e2e / "bounded_scores.jsonl")
    neigh = read_jsonl(e2e / "neighbours.jsonl")
    assert len(rows) == D and {r["model"] for r in rows} == {
        "llama-13b",
        "palm-2-chat-bison-001",
        "claude-2.1",
    }
    # tau = 1/8 of the [0, 1] scale; sigma = 0: M(D) = alpha f(D) + (1 - alpha) 0.5 exactly.
    assert bj["tau"] == 0.125 and bj["tau_fraction"] == 0.125 and bj["sigma"] == 0
    for r in rows:
        assert 0 < r["original"] < 1
        assert r["bounded"] == pytest.approx(bj["alpha"] * r["original"] + (1 - bj["alpha"]) * 0.5, abs=1e-12)
    est = [n for n in neigh if n["split"] == "estimate"]
    fresh = [n for n in neigh if n["split"] == "verify"]
    assert (
        len(est) == 6 and len(fresh) == 6 and all(n["n_edits"] == 1 and len(n["changed"]) <= 1 for n in est)
    )
    # Delta-hat is recomputable from neighbours.jsonl; with m = 6 only the certain cap certifies.
    assert bj["bounds"]["rms"] == pytest.approx(math.sqrt(np.mean([n["sq_distance"] for n in est])))
    g, v = bj["guarantee"], bj["verification"]
    assert "holds" not in g and g["kind"] == "certified" and g["certified_by"] == "certain_cap"
    assert bj["alpha"] == bj["alpha_max"] == pytest.approx(0.125) and g["delta_claimed"] == 0
    assert g["statement"].startswith("surely") and g["claimed"]
    plugin = next(c for c in bj["bounds"]["candidates"] if c["name"] == "plugin")
    assert (
        plugin["alpha"] == 1.0 and not plugin["certified"]
    )  # the official estimate would not contract at all
    # alpha sqrt(B) = tau: no rate of bias can be tested; the check tests the cap's assumption (every fresh
    # neighbour moved one coordinate, by at most sqrt(B)) and abb.json says what it could not show.
    assert v["verdict"] == "confirmed" and v["tests"] == "sure" and v["worst_case"] == 0 and v["trials"] == 6
    assert v["violations"] == 0 and v["assumption"]["held"] and v["assumption"]["coords_allowed"] == 1
    assert (
        bj["summary"].startswith("proven without data by the certain cap")
        and "no rate of bias" in bj["summary"]
    )
    # No-op neighbours (a swap with both orders averaged; a formatting kind with nothing to change)
    # are counted; a no-op's distance is exactly 0.
    assert bj["neighbours"]["estimate"]["noop"] == sum(n["noop"] for n in est)
    assert all(n["sq_distance"] == 0 for n in est + fresh if n["noop"])
    # Jitter: identity neighbours re-judged uncached on the SAME coordinates a neighbour re-judges.
    j = bj["jitter"]
    assert j["measured"] and "uncached" in j["route"] and j["coords"] == 1 and j["max_abs"] < 1e-5
    assert j["requests"] == 2 * 2 and not j["removed"]  # 2 samples x the item's 2 requests (both orders)
    sig = bj["retained_signal"]
    assert sig["per_item"]["spearman"] == pytest.approx(1.0)  # a positive affine map keeps every ranking
    assert sig["per_item"]["variance_reduction"] == pytest.approx(1 - bj["alpha"] ** 2)


def test_end_to_end_results_rankings_and_wandb(e2e):
    results = json.loads((e2e / "results.json").read_text())
    for when in ("before", "after"):
        rank = results["rankings"][when]
        assert rank["anchor"] == "gpt-4-0314" and rank["elo"]["gpt-4-0314"]["elo"] == pytest.approx(1000.0)
        assert sorted(r["rank"] for r in rank["mean"].values()) == [1, 2, 3]
    m = results["metrics"]
    assert (
        m["d"] == D
        and m["trials"] == 6
        and m["verdict"] == "confirmed"
        and m["bound_winner"] == "certain_cap"
    )
    assert m["status"] == "certified by certain_cap" and results["guarantee"]["claimed"] is True
    assert results["judge"].startswith("hf|tiny-llama") and results["judge_calls"] > 0
    assert results["reference_agreement"]["n_models"] == 3
    assert list((e2e / "wandb").glob("offline-run-*")), "W&B offline run missing"
    logged = read_jsonl(e2e / "metrics.jsonl")[0]
    assert logged["abb/verification/trials"] == 6 and logged["verdict"] == "confirmed"


def _vectors(run):
    """f(D) and the estimation / fresh neighbour vectors, rebuilt from the run's own records."""
    f = np.array([r["original"] for r in read_jsonl(run / "bounded_scores.jsonl")])
    out = {"estimate": [], "verify": []}
    for n in read_jsonl(run / "neighbours.jsonl"):
        vec = f.copy()
        for i, val in n["changed"].items():
            vec[int(i)] = val
        out[n["split"]].append(vec)
    return f, np.array(out["estimate"]), np.array(out["verify"])


def test_informative_check_confirms_and_catches_miscalibrated_mechanisms(informative):
    """Real tiny-model neighbours: the quantile bound lifts alpha above the cap, so the fresh check
    could fail; it confirms. The same `abb.verify` on the same fresh neighbours flags a mechanism
    whose noise is sized per coordinate, and one whose alpha exceeds its bound at a smaller tau."""
    from harness import abb
    from harness.abb.scenarios import with_alpha

    bj = json.loads((informative / "abb.json").read_text())
    g, v = bj["guarantee"], bj["verification"]
    assert (
        g["certified_by"] == "quantile" and bj["alpha"] > 0.125 and g["delta_claimed"] == pytest.approx(0.18)
    )
    assert v["worst_case"] == 1.0 and v["verdict"] == "confirmed" and v["trials"] == 20
    f, est, fresh = _vectors(informative)
    split = abb.split_delta(0.2, noise_fraction=0.0, est_fraction=0.1)
    kw = dict(
        split=split, mode="one_item", scale=(0.0, 1.0), rng=np.random.default_rng(0), bounds=(1.0, 1.0 / D)
    )
    result, _ = abb.run_abb(f, est, tau=0.125, fresh=fresh, **kw)
    p = result.params
    assert (
        p.alpha == pytest.approx(bj["alpha"]) and result.verification.verdict == "confirmed"
    )  # recomputable
    # Negative control 1: noise sized for one coordinate (sigma = tau/2) instead of the d-vector.
    assert (
        abb.verify(f, fresh, with_alpha(p, p.alpha, sigma=p.tau / 2), np.random.default_rng(1)).verdict
        == "violated"
    )
    # Negative control 2: at a tau the edits do exceed, the certified alpha holds and alpha = 1 does not.
    moved = np.sqrt(np.sort(abb.squared_distances(f, est)[0]))
    small = float(
        moved[moved > 0][len(moved[moved > 0]) // 5]
    )  # a low quantile of the moves, from estimation data
    tight, _ = abb.run_abb(f, est, tau=small, fresh=fresh, **kw)
    assert tight.params.alpha < 1 and tight.verification.verdict in ("confirmed", "inconclusive")
    assert abb.verify(f, fresh, with_alpha(tight.params, 1.0), np.random.default_rng(2)).verdict == "violated"


def test_noop_neighbours_and_plugin_certify_nothing(shared, e2e, capsys):
    """kinds=[swap] with both orders: every neighbour is a no-op, so no certificate; bound=plugin is the
    official estimate, labelled as such. Both are served from the e2e run's cache."""
    out = run_here(shared, "noop", "experiment.kinds=[swap]", "experiment.jitter.samples=0")
    g = json.loads((out / "abb.json").read_text())["guarantee"]
    assert g["kind"] == "none" and not g["claimed"] and g["statement"].startswith("no certificate")
    printed = capsys.readouterr().out
    assert "6 no-op" in printed and "[no certificate" in printed
    bj = json.loads(
        (
            run_here(shared, "plugin", "experiment.bound=plugin", "experiment.jitter.samples=0") / "abb.json"
        ).read_text()
    )
    assert (
        bj["guarantee"]["kind"] == "estimate" and not bj["guarantee"]["claimed"] and bj["delta"]["est"] == 0
    )
    assert bj["guarantee"]["statement"].startswith("estimate (no confidence bound)") and bj["alpha"] == 1.0


def test_sweep_marks_vacuous_cells(shared, e2e):
    """Two cells over tau_fraction (alpha = alpha_max / 2, sigma = sigma_max): the noise fills the room,
    the claim is the noise tail, the check is vacuous, and the collect step marks and drops them."""
    sweep = shared / "sweep"
    for job, frac in (("0", 0.0625), ("1", 0.125)):
        run_here(
            shared,
            f"sweep/{job}",
            f"experiment.tau_fraction={frac}",
            "experiment.alpha_fraction=0.5",
            "experiment.sigma_mode=max",
            "experiment.jitter.samples=0",
        )
        bj = json.loads((sweep / job / "abb.json").read_text())
        assert bj["tau"] == frac and bj["sigma"] == pytest.approx(bj["sigma_max"]) and bj["sigma"] > 0
        assert bj["guarantee"]["noise_tail"] == pytest.approx(bj["delta"]["noise"], rel=1e-3)
        assert bj["verification"]["verdict"] == "vacuous" and bj["judge_calls"] == 0  # all from the cache
    from harness.runtime.abb_sweep import main

    assert main([str(sweep)]) == 0
    out = sweep / "collect"
    assert (out / "violation_vs_delta.png").stat().st_size > 5000 and (out / "retained_vs_tau.png").is_file()
    table = (out / "table.md").read_text()
    assert table.startswith("| experiment.tau_fraction |") and table.count("| vacuous |") == 2


def _one_line_error(r) -> str:
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    return errors[0]


def test_impossible_tau_delta_is_refused_before_judging(shared):
    out = shared / "refused"
    r = run_in_process(
        [*SLICE, "experiment.tau=0.001", "experiment.alpha_min=0.5", f"hydra.run.dir={out}"], shared
    )
    line = _one_line_error(r)
    assert "alpha_min" in line and "even if no neighbour moved any score" in line
    assert "Loading weights" not in r.stderr and not (out / "neighbours.jsonl").exists()


def test_refusal_after_estimation_keeps_the_neighbours(shared, e2e):
    with pytest.raises(ConfigError, match=r"needs alpha <= .* below alpha_min=0.9"):
        run_here(
            shared,
            "refused_late",
            "experiment.tau=1e-6",
            "experiment.bound=plugin",
            "experiment.alpha_min=0.9",
        )
    out = shared / "refused_late"
    assert (out / "neighbours.jsonl").is_file() and not (out / "abb.json").exists()


# --- settings, win rates and file scores (in-process) --------------------------------------------


def test_settings_split_and_kinds():
    from harness.experiments.abb import settings_from

    s = settings_from({"tau_fraction": 0.125, "delta": 0.1, "kinds": "formatting"}, seed=0)
    assert s.split.noise == 0 and s.split.est == pytest.approx(0.01) and s.split.markov == pytest.approx(0.09)
    assert (
        len(s.kinds) == 6
        and "swap" not in s.kinds
        and s.allowed == ("certain_cap", "quantile", "dkw", "markov")
    )
    assert s.tau_for((1.0, 5.0)) == 0.5  # the paper's tau: 1/8 of a 1-5 scale
    s = settings_from(
        {
            "delta": 0.1,
            "tau": 0.3,
            "tau_fraction": 0.125,
            "sigma_mode": "max",
            "bound": "plugin",
            "kinds": ["swap"],
        },
        seed=0,
    )
    assert s.split.noise == pytest.approx(0.045) and s.split.est == 0 and s.tau_for((1.0, 5.0)) == 0.3
    with pytest.raises(ConfigError, match="insert_whitespace"):
        settings_from({"tau_fraction": 0.1, "kinds": "insert_whitespace"}, seed=0)
    with pytest.raises(ConfigError, match="bound must be one of"):
        settings_from({"tau_fraction": 0.1, "bound": "bernstein"}, seed=0)


def test_win_rates_from_the_tiny_judge(shared_data, tiny_judge):
    """Summarisation: per-candidate win rates; one edited candidate moves its whole document."""
    from harness.abb.scores import PairwiseScorer, View, select_items
    from harness.data import load_task

    doc = load_task("summeval", data_dir=shared_data, limit=58)[57]
    items, skipped = select_items([doc], baseline=None, max_candidates=3)
    sc = PairwiseScorer(
        tiny_judge,
        [doc],
        items,
        instruction="Which summary is more coherent? Answer A or B.",
        family="summarization",
        baseline=None,
    )
    f = sc.vector().values
    assert len(f) == 3 and not skipped and sc.kind == "winrate"
    assert f.sum() == pytest.approx(1.5, abs=1e-9)  # s_ij + s_ji = 1: the win rates sum to k/2
    edited = sc.original(0, "answer").upper()
    g = sc.score_many([{0: View(answer=edited)}], base=f)[0]
    v = g - f
    b, _ = sc.bounds("one_item")
    # Only pairs with candidate 0 changed: the others move by at most 1/(k - 1) each, all moves sum
    # to 0, and ||v||^2 stays under the sure bound (k/(k - 1) = 1.5).
    assert v[0] != 0 and v[1] != 0 and v[2] != 0 and abs(v.sum()) < 1e-9
    assert max(abs(v[1]), abs(v[2])) <= 0.5 and float(v @ v) <= b and b == pytest.approx(1.5)
    # Matched jitter re-judges exactly the requests a neighbour editing one item re-judges: its pairs.
    rows, info = sc.jitter(f, samples=2, mode="one_item", seed=0)
    assert info["requests"] == 2 * 4 and info["coords"] == 1 and np.abs(rows - f).max() < 1e-5


def _file_cfg(path, *extra):
    from helpers.compose import compose

    return compose(
        [
            "experiment=abb",
            "experiment.scores=file",
            f"experiment.file.path={path}",
            "experiment.file.scale=[1,10]",
            "experiment.tau=2.0",
            "experiment.delta=0.1",
            "experiment.jitter.samples=0",
            "wandb.mode=disabled",
            *extra,
        ]
    )


def test_scores_from_a_file_run_through_hydra(tmp_path):
    from harness.runtime.entry import run

    base, rows = likert_file(tmp_path / "likert.jsonl", np.random.default_rng(0))
    results = run(_file_cfg(tmp_path / "likert.jsonl"), tmp_path / "out")
    bj = json.loads((tmp_path / "out" / "abb.json").read_text())
    assert bj["mode"] == "one_item" and bj["d"] == len(base) and bj["scores"]["items_changed"] == 1
    assert bj["neighbours"]["bounds"]["B"] == 81.0 and bj["neighbours"]["estimate"]["noop"] is None  # unknown
    sq = [(r["score"] - base[(r["item"], r["model"])]) ** 2 for r in rows if r.get("split") == "estimate"]
    assert bj["bounds"]["rms"] == pytest.approx(math.sqrt(np.mean(sq)))
    # m = 60 >= 49: the quantile bound runs; a move of 4 points bounds ||v||: alpha = 2/4 > the cap 2/9.
    assert bj["guarantee"]["certified_by"] == "quantile" and bj["alpha"] == pytest.approx(0.5)
    assert bj["verification"]["trials"] == 40 and bj["verification"]["verdict"] == "confirmed"
    assert set(results["rankings"]["before"]["elo"]) == {"m1", "m2", "m3"}


def test_jitter_in_other_units_is_refused(tmp_path):
    """The issue's unit bug as input: jitter rows re-judge whole questions (3 items), a neighbour one."""
    from harness.runtime.entry import run

    likert_file(tmp_path / "j.jsonl", np.random.default_rng(1), jitter_docs=4)
    with pytest.raises(ConfigError, match="jitter re-judged 3 coordinates per sample, a neighbour 1"):
        run(
            _file_cfg(tmp_path / "j.jsonl", "experiment.jitter.remove=true", "experiment.jitter.samples=4"),
            tmp_path / "out",
        )
    # Jitter rows of one item each (the units of a one-item neighbour): Markov minus the jitter's lower
    # bound makes the CONTEXT claim, labelled as such (the cap, which subtracts nothing, would not).
    likert_file(tmp_path / "k.jsonl", np.random.default_rng(1), jitter_docs=4, jitter_items=1)
    run(
        _file_cfg(
            tmp_path / "k.jsonl",
            "experiment.jitter.remove=true",
            "experiment.jitter.samples=4",
            "experiment.bound=markov",
        ),
        tmp_path / "ok",
    )
    bj = json.loads((tmp_path / "ok" / "abb.json").read_text())
    assert bj["guarantee"]["claim"] == "context" and "MEAN" in bj["guarantee"]["statement"]
    assert "minus jitter LCB" in bj["bounds"]["winner"]["note"] and bj["jitter"]["removed"]


def test_file_errors_name_the_line_and_field(tmp_path):
    from harness.abb.scores import load_file_scores

    p = tmp_path / "bad.jsonl"
    p.write_text('{"item": "q1", "model": "a", "score": 3}\n{"item": "q1", "model": "b", "score": 12}\n')
    with pytest.raises(DataError, match=r"line 2.*'score'.*outside the scale"):
        load_file_scores(p, [1, 10])
    p.write_text(
        '{"item": "q1", "model": "a", "score": 3}\n{"item": "q2", "model": "a", "score": 4, "neighbour": 1}\n'
    )
    with pytest.raises(DataError, match="no baseline row"):
        load_file_scores(p, [1, 10])


def _reply(body: dict) -> str:
    """SCRIPTED optimizer replies on the loopback server: an instruction paraphrase for the ZEPO-style
    prompt, a reworded copy of the text for the answer-paraphrase prompt (tagged with its seed)."""
    import re

    content = body["messages"][-1]["content"]
    seed = int(body.get("seed", 0)) % 97
    m = re.search(r'keep the word "([^"]+)"', content)
    if m:
        w = m.group(1)
        return (
            f"Judge the {w} of response candidate A and response candidate B. Which one has better {w}? "
            f"Answer 'A' or 'B', the letter only (v{seed})."
        )
    text = content.split("Text:\n", 1)[1]
    return f"Put differently (r{seed}): " + text.replace(". ", "; ", 3)


def test_instruction_and_llm_paraphrase_neighbours(shared, e2e):
    """'instruction' neighbours from a ZEPO history.jsonl; 'llm_paraphrase' of the instruction AND of
    answers through the configured API optimizer on a loopback server (the experiment main wires the
    optimizer in; harness.abb never imports zepo)."""
    from helpers import SHARED_DATA
    from helpers.compose import compose
    from helpers.servers import OpenAIServer

    from harness.runtime.entry import run

    history = shared / "history.jsonl"
    texts = [
        "Which response candidate is more helpful, A or B? Answer with 'A' or 'B'.",
        "Pick the response candidate with greater helpfulness: reply 'A' or 'B' only.",
    ]
    history.write_text("".join(json.dumps({"index": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    base = [
        *[
            o
            for o in SLICE
            if not o.startswith(
                (
                    "experiment.kinds",
                    "progress",
                    "experiment.estimate",
                    "experiment.verify",
                    "experiment.jitter",
                )
            )
        ],
        "experiment.estimate=4",
        "experiment.verify=2",
        "experiment.jitter.samples=0",
        f"data.dir={shared / 'data'}",
        f"data.mirror={SHARED_DATA}",
        "optimizer=api",
        "optimizer.model=scripted-loopback",
        f"cache.path={shared / 'cache' / 'requests.sqlite'}",
        "progress=false",
        "wandb.mode=disabled",
    ]
    with OpenAIServer(script=_reply) as srv:
        for name, extra in (
            (
                "paraphrase",
                [
                    "experiment.kinds=[instruction,llm_paraphrase]",
                    "experiment.fields=[instruction]",
                    "experiment.instructions=[]",
                    f"experiment.instructions_file={history}",
                ],
            ),
            ("answers", ["experiment.kinds=[llm_paraphrase]", "experiment.fields=[answer]"]),
        ):
            run(compose([*base, f"optimizer.base_url={srv.url}", *extra]), shared / name)
        asked = [r.body["messages"][-1]["content"] for r in srv.ok_requests()]
    rows = read_jsonl(shared / "paraphrase" / "neighbours.jsonl")
    assert {r["edits"][0]["kind"] for r in rows} == {"instruction", "llm_paraphrase"}
    for r in rows:
        assert r["edits"][0]["field"] == "instruction" and not r["noop"]
        assert (
            r["instruction"] in texts if r["edits"][0]["kind"] == "instruction" else "(v" in r["instruction"]
        )
    answers = read_jsonl(shared / "answers" / "neighbours.jsonl")
    assert len(answers) == 6 and all(r["edits"][0]["field"] == "answer" and not r["noop"] for r in answers)
    assert any(
        a.startswith("Rewrite the text below") for a in asked
    )  # the answer prompt reached the optimizer
    assert sum(r["sq_distance"] > 0 for r in answers) >= 1  # a reworded answer moves the tiny judge's score


def test_zepo_best_vs_initial_side_by_side(shared, shared_data):
    """ZEPO x A-BB in one config: a real (tiny) ZEPO run writes best_instruction.txt; the abb_zepo
    multirun scores the initial and the ZEPO-best instruction on the SAME items and neighbours, and the
    collect step lays out Delta-hat, its bound, alpha and the retained signal side by side."""
    from helpers.compose import compose
    from helpers.scripted import e2e_overrides, scripted_completion
    from helpers.servers import OpenAIServer

    from harness.runtime.abb_sweep import main
    from harness.runtime.entry import run

    with OpenAIServer(script=scripted_completion) as srv:
        # The tiny random judge's A-rate never moves (every fairness ties, so ZEPO keeps the initial);
        # its confidence does, so that objective makes ZEPO pick a paraphrase, as a real search would.
        run(
            compose(
                e2e_overrides(
                    shared,
                    srv.url,
                    shared_data,
                    "experiment.objective=confidence",
                    "experiment.epochs=1",
                    "experiment.heldout_spearman=false",
                )
            ),
            shared / "zepo",
        )
    best = (shared / "zepo" / "best_instruction.txt").read_text().strip()
    sweep = shared / "abb_zepo"
    r = run_in_process(
        [
            "-m",
            "experiment=abb_zepo",
            "model=tiny_llama",
            "task=usr_zepo",
            "task.aspect=overall",
            "task.offset=27",
            "task.docs=2",
            "task.max_candidates=3",
            f"experiment.instruction.path={shared / 'zepo' / 'best_instruction.txt'}",
            "experiment.estimate=4",
            "experiment.verify=2",
            "experiment.jitter.samples=0",
            "experiment.bootstrap=10",
            "progress=false",
            f"hydra.sweep.dir={sweep}",
        ],
        shared,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    runs = [json.loads((sweep / job / "results.json").read_text()) for job in ("0", "1")]
    assert (
        runs[0]["instruction"] == best and runs[1]["instruction"] != best
    )  # the file (ZEPO's best) runs first
    plans = [[n["edits"] for n in read_jsonl(sweep / job / "neighbours.jsonl")] for job in ("0", "1")]
    assert plans[0] == plans[1]  # the same edits of the same items: only the instruction differs
    assert main([str(sweep)]) == 0
    table = (sweep / "collect" / "instructions.md").read_text()
    assert "same items in every run: True (6 items)" in table
    head = table.splitlines()[0]
    for col in ("source", "sensitivity_plugin", "sensitivity_ucb", "bound_winner", "alpha", "model_spearman"):
        assert f" {col} |" in head
    assert "| default |" in table and "| file |" in table
    for job in ("0", "1"):  # each job logged to W&B in the sweep's group
        (run_file,) = (sweep / job / "wandb").glob("offline-run-*/run-*.wandb")
        assert b"abb_zepo" in run_file.read_bytes()
