"""Every experiment config composes and instantiates; each ZEPO paper-table config runs end to end
on the tiny Llama judge (tiny slices, API optimizer on a loopback server), and
harness-paper-tables lays the runs out beside the paper's numbers."""

from __future__ import annotations

import csv
import dataclasses
import inspect
import json

import pytest
from helpers import CONF
from helpers.compose import compose
from helpers.results import zepo_result
from helpers.scripted import scripted_completion
from omegaconf import OmegaConf

EXPERIMENTS = sorted(
    p.relative_to(CONF / "experiment").with_suffix("").as_posix()
    for p in (CONF / "experiment").rglob("*.yaml")
)
PAPER = [e for e in EXPERIMENTS if e.startswith("paper/") and "pointwise" not in e]
"""The paper's ZEPO configs (paper/table1_pointwise is the pointwise experiment: tests/experiments/test_pointwise.py)."""
# Short documents of each dataset (the tiny model's 512-token vocabulary makes prompts long).
SHORT_DOC = {"newsroom": 28, "summeval": 57, "usr_zepo": 27}


def _paper_tables():
    import harness.report.paper_tables as mod  # harness-paper-tables

    return mod


def test_paper_configs_exist():
    assert {
        "paper/table1_zepo",
        "paper/table2_debias",
        "paper/table3_dialogue",
        "paper/table5_fairness",
    } <= set(PAPER)
    assert "paper/table1_pointwise" in EXPERIMENTS


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_config_composes_and_instantiates(name):
    from harness.runtime.entry import resolve_entry

    cfg = compose([f"experiment={name}"])
    resolved = OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    entry = resolve_entry(cfg.experiment.entry)
    assert callable(entry) and list(inspect.signature(entry).parameters)[:2] == ["cfg", "out_dir"]
    if cfg.experiment.entry.startswith("harness.experiments.zepo"):
        from harness.experiments.zepo import settings_from
        from harness.zepo.optimizers import ApiOptimizer, LocalOptimizer
        from harness.zepo.settings import ApiOptimizerSettings, LocalSettings

        settings = settings_from(cfg)
        assert settings.population >= 1 and isinstance(resolved["experiment"]["search_docs"], int)
        api = cfg.optimizer.name == "api"
        cls, kind = (ApiOptimizer, ApiOptimizerSettings) if api else (LocalOptimizer, LocalSettings)
        allowed = set(inspect.signature(cls.__init__).parameters) | {f.name for f in dataclasses.fields(kind)}
        assert set(cfg.optimizer) - {"name", "_target_"} <= allowed, (
            "optimizer keys the optimizer does not take"
        )
    if name.startswith("paper/"):
        assert cfg.experiment.paper_table in (1, 2, 3, 5)
        assert cfg.task.docs is None and cfg.task.max_candidates is None and cfg.task.format == "zepo"
        # The official wrapping and read-out by default (docs/zepo.md lists what still differs).
        assert (cfg.model.chat_format, cfg.model.readout, cfg.model.max_new_tokens) == (
            "zepo",
            "generate",
            32,
        )
    if name in PAPER:
        assert cfg.experiment.leak_search_docs is True and cfg.experiment.instruction.source == "zepo"
        assert cfg.experiment.instruction.raw is True and cfg.optimizer.meta_prompt == "zepo"
        assert list(cfg.model.labels) == ["A", "B", "C"] and cfg.model.tie_label == "C"
        assert cfg.experiment.search_debias == ("permutation" if name == "paper/table2_debias" else "none")
        # Something is always held out: the dialogue search takes 20 of the 60 contexts.
        assert (
            resolved["experiment"]["search_docs"]
            < {"newsroom": 60, "summeval": 100, "usr_zepo": 60}[cfg.task.name]
        )


@pytest.fixture(scope="module")
def paper_runs(tmp_path_factory, shared_data, tiny_llama):
    """Each paper config once, tiny: 2 documents (1 searched, 1 held out), 3 systems, population 2,
    1 epoch, generation cut to 4 tokens; and one pointwise run for Table 1's Scoring/G-Eval rows."""
    from helpers.servers import OpenAIServer

    from harness.runtime.entry import run

    tmp = tmp_path_factory.mktemp("paper")
    runs = {}
    with OpenAIServer(script=scripted_completion) as srv:
        for name in PAPER:
            task = compose([f"experiment={name}"]).task.name
            cfg = compose(
                [
                    f"experiment={name}",
                    "model=tiny_llama",
                    "model.max_length=8192",
                    "optimizer=api",
                    f"optimizer.base_url={srv.url}",
                    "optimizer.model=scripted-loopback",
                    f"task.offset={SHORT_DOC[task]}",
                    "task.docs=2",
                    "task.max_candidates=3",
                    "model.max_new_tokens=4",
                    "experiment.search_docs=1",
                    "experiment.population=2",
                    "experiment.epochs=1",
                    "experiment.shuffles=5",
                    f"data.dir={tmp / 'data'}",
                    f"data.mirror={shared_data}",
                    f"cache.path={tmp / 'cache' / 'requests.sqlite'}",
                    "progress=false",
                    "wandb.mode=disabled",
                ]
            )
            out = tmp / "multirun" / name.replace("/", "_") / "0"
            runs[name] = (out, run(cfg, out))
    cfg = compose(
        [
            "experiment=paper/table1_pointwise",
            "model=tiny_llama",
            "model.max_length=8192",
            "model.readout=next_token",
            f"task.offset={SHORT_DOC['newsroom']}",
            "task.docs=2",
            "task.max_candidates=3",
            "task.aspect=coherence",
            f"data.dir={tmp / 'data'}",
            f"data.mirror={shared_data}",
            f"cache.path={tmp / 'cache' / 'requests.sqlite'}",
            "progress=false",
            "wandb.mode=disabled",
        ]
    )
    out = tmp / "multirun" / "paper_table1_pointwise" / "0"
    runs["paper/table1_pointwise"] = (out, run(cfg, out))
    return tmp, runs


def test_each_paper_config_runs_end_to_end(paper_runs):
    _, runs = paper_runs
    for name in PAPER:
        out, res = runs[name]
        assert res["experiment"] == "zepo" and res["paper_table"] == int(name.split("table")[1][0])
        assert res["leak_search_docs"] and res["eval_doc_ids"] == [
            res["search_doc_ids"][0],
            res["eval_doc_ids"][1],
        ]
        assert res["n_candidates"] == 2 and res["model"] == "tiny-llama"
        assert "chat=zepo|readout=generate4" in res["judge"] and "tie=C" in res["judge"]
        # The paper's initial instruction (init_prompts.json, raw) is the "Pairwise" row.
        assert "You must return the choice only" in res["initial"]["instruction"]
        assert " " * 21 in res["initial"]["instruction"]
        for label in ("initial", "best"):  # leaky (the paper's evaluation) and held-out, side by side
            r = res[label]
            assert r["metrics"] == r["metrics_leaky"] and r["n_heldout_docs"] == 1
            assert r["metrics_leaky"]["none"]["n_docs"] == 2 and r["metrics_heldout"]["none"]["n_docs"] == 1
        assert (out / "history.jsonl").is_file() and (out / "best_instruction.txt").is_file()
    assert runs["paper/table3_dialogue"][1]["task"] == "usr_zepo"
    assert runs["paper/table2_debias"][1]["settings"]["debias"] == "permutation"
    assert runs["paper/table1_zepo"][1]["settings"]["debias"] == "none"


def test_paper_tables_script_lays_out_ours_beside_the_paper(paper_runs, tmp_path):
    tmp, runs = paper_runs
    pt = _paper_tables()
    assert pt.main(["--table", "1", str(tmp / "multirun"), "--out", str(tmp_path / "t1")]) == 0
    md = (tmp_path / "t1.md").read_text()
    assert "| Mistral-7B | Pairwise | – / – (.33) |" in md  # the paper's numbers even without our runs
    assert "| Llama-3-8B | Scoring | – (.42) |" in md
    nr = runs["paper/table1_zepo"][1]  # newsroom coherence on tiny-llama
    rows = list(csv.DictReader((tmp_path / "t1.csv").open()))
    cell = [
        r
        for r in rows
        if r["model"] == "tiny-llama"
        and r["method"] == "Pairwise"
        and r["task"] == "newsroom"
        and r["aspect"] == "coherence"
    ]
    assert len(cell) == 1
    assert float(cell[0]["ours_leaky"]) == pytest.approx(
        nr["initial"]["metrics_leaky"]["none"]["spearman_pairs"]
    )
    assert float(cell[0]["ours_heldout"]) == pytest.approx(
        nr["initial"]["metrics_heldout"]["none"]["spearman_pairs"]
    )
    assert "tiny-llama | ZEPO" in md and "leaky / held-out (paper)" in md
    assert "| model | method: leaky / held-out (paper) |" in md  # the header names the cells' documents
    pw = runs["paper/table1_pointwise"][1]
    score = [
        r
        for r in rows
        if r["model"] == "tiny-llama"
        and r["method"] == "G-Eval"
        and r["aspect"] == "coherence"
        and r["task"] == "newsroom"
    ][0]
    assert float(score["ours_leaky"]) == pytest.approx(pw["metrics"]["geval"]["spearman"])
    # Table 2: Pairwise/ZEPO from the raw search, ZEPO+Debias from the debiased search.
    md2, rows2 = pt.build(2, pt.find_results([tmp / "multirun"]))
    assert "Pairwise+Debias" in md2 and "(.60)" in md2
    zd = [r for r in rows2 if r["model"] == "tiny-llama" and r["method"] == "ZEPO+Debias"][0]
    deb = runs["paper/table2_debias"][1]
    assert zd["run"] == str(runs["paper/table2_debias"][0]) and zd["ours_leaky"] == pytest.approx(
        deb["best"]["metrics_leaky"]["permutation"]["spearman_pairs"]
    )
    z = [r for r in rows2 if r["model"] == "tiny-llama" and r["method"] == "ZEPO"][0]
    assert z["run"] != zd["run"]
    md3, _ = pt.build(3, pt.find_results([tmp / "multirun"]))
    assert "usr_zepo" in md3 and "tiny-llama | Pairwise" in md3
    md5, rows5 = pt.build(5, pt.find_results([tmp / "multirun"]))
    fair = runs["paper/table5_fairness"][1]  # summeval coherence
    r5 = [r for r in rows5 if r["task"] == "summeval" and r["aspect"] == "coherence"][0]
    for got, want in (
        (r5["initial_search"], fair["initial"]["search"]["objectives"]["fairness"]),
        (r5["initial_heldout"], fair["initial"]["metrics_heldout"]["none"]["fairness"]),
        (r5["best_leaky"], fair["best"]["metrics_leaky"]["none"]["fairness"]),
    ):
        assert got == pytest.approx(want, nan_ok=True)
    assert r5["paper_initial"] == -0.288 and "-0.288" in md5
    assert pt.main(["--table", "1", str(tmp_path / "nothing-here")]) == 2
    json.dumps(rows2)  # plain values only


def test_paper_table_cells_carry_intervals_and_mark_distinguishable_gains(tmp_path):
    """Issue 31: each ZEPO cell's value has its bootstrap interval; † marks a held-out gain whose
    paired interval excludes 0, and not one whose interval covers 0; CSV holds the bounds and the
    gain; a run without intervals prints the bare values (hand-built results.json: cheap)."""
    pt = _paper_tables()
    for name, res in (
        ("sure", zepo_result(0.30, 0.50, [0.05, 0.35])),
        ("noise", dict(zepo_result(0.30, 0.40, [-0.10, 0.30]), model="n")),
        ("bare", dict(zepo_result(0.30, 0.40, None, with_intervals=False), model="b")),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(res))
    md, rows = pt.build(1, pt.find_results([tmp_path]))
    assert "| m | ZEPO | .50 [.30, .70] / .50 [.30, .70]† (–) |" in md
    assert "| n | ZEPO | .40 [.20, .60] / .40 [.20, .60] (–) |" in md  # covers 0: no mark
    assert "| m | Pairwise | .30 [.10, .50] / .30 [.10, .50] (–) |" in md  # the initial: nothing to gain
    assert "| b | ZEPO | .40 / .40 (–) |" in md and "† after a ZEPO held-out value" in md
    z = [
        r
        for r in rows
        if r["model"] == "m"
        and r["method"] == "ZEPO"
        and r["aspect"] == "coherence"
        and r["task"] == "newsroom"
    ][0]
    assert (z["ours_heldout_lo"], z["ours_heldout_hi"]) == pytest.approx((0.3, 0.7))
    assert (z["gain_heldout"], z["gain_heldout_lo"], z["gain_heldout_hi"]) == pytest.approx((0.2, 0.05, 0.35))
    assert len({tuple(r) for r in rows}) == 1  # one CSV header for every row
    (tmp_path / "t5").mkdir()
    (tmp_path / "t5" / "results.json").write_text(
        json.dumps(dict(zepo_result(0.3, 0.5, None), task="summeval"))
    )
    md5, rows5 = pt.build(5, pt.find_results([tmp_path / "t5"]))
    assert "-0.100 [-0.200, 0.000] / -0.100 [-0.200, 0.000]" in md5
    assert [r["initial_heldout_lo"] for r in rows5 if r["aspect"] == "coherence"] == [pytest.approx(-0.2)]
