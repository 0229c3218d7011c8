"""The researcher's own words and data, as the README gives them to type (real CLI entry, the tiny
random Llama, a preference JSONL written here: 4 questions x 3 responses, one gold response each,
no human scores).

- `experiment.instruction.text='X'` alone is the instruction judged: results.json, config.json
  and the judgments (not the default instruction's, served from the cache) say so; with another
  source it is refused in one line.
- A gold label only on pairs that hold the gold candidate (also under task.max_candidates=2, a
  slice that drops it); the labelled-pair counts follow.
- Accuracy against the gold label is this data's agreement: card.md's agreement line,
  harness-collect table's default columns, ZEPO's before/after table and best - initial lines;
  harness-compare names what differs (the instruction) first and the metrics that do not apply
  once, with why.
- ZEPO runs on the file without task.aspect (the default wording asks for overall preference)
  and its console lines print the objective it optimises.
"""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.cli import assert_one_line_error, run_in_process

import harness.runtime.compare as compare
from harness.data.jsonl import load_jsonl
from harness.judging import build_requests
from harness.prompts import default_instruction
from harness.runtime import collect

TEXT = "Which response answers better? Answer A or B."
GOLD = {"q0": "c2", "q1": "c0", "q2": "c1", "q3": "c2"}
ARGS = ["experiment=judge", "model=tiny_llama", "task=jsonl", "wandb.mode=disabled", "experiment.shuffles=5"]


def _write_prefs(path):
    rows = [
        {
            "doc_id": d,
            "source": f"question {d}?",
            "candidate_id": f"c{c}",
            "text": f"answer {c} to {d}" + " more" * c,
            "gold": gold,
        }
        for d, gold in GOLD.items()
        for c in range(3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def prefs(tmp_path_factory):
    """Two judge runs on the same preference file: the README's text override alone, and the default
    instruction (run first, so its answers are in the cache the text run shares)."""
    tmp = tmp_path_factory.mktemp("own_words")
    data = _write_prefs(tmp / "prefs.jsonl")
    runs = {}
    for name, extra in (("default", []), ("text", [f"experiment.instruction.text='{TEXT}'"])):
        r = run_in_process([*ARGS, f"task.path={data}", *extra, f"hydra.run.dir={tmp / name}"], tmp)
        assert r.returncode == 0, r.stderr[-2000:]
        runs[name] = tmp / name
    return {"tmp": tmp, "data": data, **runs}


def _read(run, name):
    return json.loads((run / name).read_text())


def _rows(run):
    return [json.loads(line) for line in (run / "judgments.jsonl").read_text().splitlines()]


def test_instruction_text_alone_is_the_instruction_judged(prefs):
    text, default = prefs["text"], prefs["default"]
    assert _read(text, "results.json")["instruction"] == TEXT
    assert _read(text, "config.json")["experiment"]["instruction"]["source"] == "text"
    # control: the default run judged the default wording, and the text run's answers are its own
    assert _read(default, "results.json")["instruction"] == default_instruction(None, "instruction")
    assert _read(default, "config.json")["experiment"]["instruction"]["source"] == "default"
    assert [r.get("p_a") for r in _rows(text)] != [r.get("p_a") for r in _rows(default)]


def test_instruction_text_with_another_source_is_refused_in_one_line(prefs, tmp_path):
    r = run_in_process(
        [
            *ARGS,
            f"task.path={prefs['data']}",
            "experiment.instruction.source=default",
            f"experiment.instruction.text='{TEXT}'",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        tmp_path,
    )
    assert_one_line_error(r, "experiment.instruction.source")
    assert "text alone selects it" in r.stderr


@pytest.mark.parametrize("max_candidates", [None, 2])
def test_gold_only_on_pairs_holding_the_gold_candidate(prefs, max_candidates):
    docs = load_jsonl(prefs["data"])
    _, templates = build_requests(docs, "x", "instruction", None, max_candidates)
    labelled = [t for t in templates if t.gold_a is not None]
    for t in templates:
        holds = GOLD[t.doc_id] in (t.a_id, t.b_id)
        assert (t.gold_a is not None) == holds, t
        assert not holds or t.gold_a == (t.a_id == GOLD[t.doc_id])
    # 3 candidates: 4 of each document's 6 ordered pairs hold the gold one; with 2 (c0, c1) only the
    # two documents whose gold is c0 or c1 have any (the old rule labelled all 6 and all 2 pairs)
    assert len(labelled) == (16 if max_candidates is None else 4) < len(templates)


def test_the_run_labels_and_counts_only_gold_pairs(prefs):
    rows = [r for r in _rows(prefs["text"]) if "doc_id" in r]
    assert len(rows) == 24
    for r in rows:
        assert (r["gold_a"] is not None) == (GOLD[r["doc_id"]] in (r["a_id"], r["b_id"]))
    assert _read(prefs["text"], "results.json")["metrics"]["none"]["n_calibration"] == 16


def test_card_agreement_line_is_accuracy_against_the_gold_label(prefs):
    card = (prefs["text"] / "card.md").read_text()
    line = next(x for x in card.splitlines() if x.strip().startswith("humans"))
    acc = _read(prefs["text"], "results.json")["metrics"]["none"]["accuracy"]
    assert f"accuracy {acc:.3f}" in line and "against the gold label on 16 labelled pairs" in line
    assert "no agreement" not in card
    # the page: the same agreement, and the correlations named once as not applicable, with why
    page = (prefs["text"] / "report.html").read_text()
    assert "against the gold label (no human scores: no Spearman or Kendall)" in page
    assert page.count("not applicable (the data has gold labels and no human scores") == 1


def test_collect_table_default_columns_hold_accuracy(prefs, tmp_path):
    root = tmp_path / "sweep"
    for i, name in enumerate(("default", "text")):
        shutil.copytree(prefs[name], root / str(i))
    runs = collect.collect_runs(root)
    metrics = collect.pick_metrics(runs, None)
    assert "none/accuracy" in metrics and "none/spearman" not in metrics
    table = collect.build_table(runs, metrics, root)
    col = [c.split(" ")[0] for c in table.columns].index("none/accuracy")
    assert [row[col] for row in table.rows] == [
        _read(prefs[n], "results.json")["metrics"]["none"]["accuracy"] for n in ("default", "text")
    ]
    # control: scored data (a Spearman in some run) keeps its columns without accuracy
    scored = [
        collect.Run(r.path, r.overrides, {**r.results, "metrics": {"none": {"spearman": 0.5, "a_rate": 0.1}}})
        for r in runs
    ]
    assert "none/accuracy" not in collect.pick_metrics(scored, None)


def test_compare_names_what_differs_first_and_what_does_not_apply_once(prefs):
    lines = compare.compare(prefs["default"], prefs["text"], "none", 0, None, None)
    assert lines[2].startswith("differs: instruction: 'Compare response candidate A") and TEXT in lines[2]
    assert not any(line.startswith(("differs:", " ")) and "shuffles" in line for line in lines)
    assert not any(" nan " in line or "undefined" in line for line in lines)
    na = [line for line in lines if line.startswith("not applicable")]
    assert len(na) == 1 and "gold label" in na[0] and "spearman, kendall" in na[0]
    # control: a run against itself differs in nothing
    same = compare.compare(prefs["text"], prefs["text"], "none", 0, None, None)
    assert same[2].startswith("differs: nothing")


@pytest.mark.slow  # a whole ZEPO search (docs/testing.md)
def test_zepo_runs_without_an_aspect_and_shows_accuracy(prefs, tmp_path):
    """ZEPO on the preference file as a user types it (no task.aspect), the API optimizer on a
    loopback server (test_zepo's scripted replies), objective fairness_prob."""
    from helpers.scripted import scripted_completion
    from helpers.servers import OpenAIServer

    with OpenAIServer(script=scripted_completion) as srv:
        r = run_in_process(
            [
                "experiment=zepo",
                "model=tiny_llama",
                "task=jsonl",
                f"task.path={prefs['data']}",
                "optimizer=api",
                f"optimizer.base_url={srv.url}",
                "optimizer.model=scripted-loopback",
                "experiment.search_docs=1",
                "experiment.population=2",
                "experiment.epochs=1",
                "experiment.shuffles=5",
                "experiment.objective=fairness_prob",
                "wandb.mode=disabled",
                f"hydra.run.dir={tmp_path / 'zepo'}",
            ],
            tmp_path,
        )
    assert r.returncode == 0, r.stderr[-3000:]
    res = _read(tmp_path / "zepo", "results.json")
    assert res["aspect"] == "overall"
    table = (tmp_path / "zepo" / "summary.md").read_text()
    assert "| held-out accuracy |" in table and "Spearman (PairS)" not in table
    assert "gold label" in table and "- held-out accuracy (gold label)" in table
    slots = [line for line in (r.stdout + r.stderr).splitlines() if " slot " in line and "fairness" in line]
    assert slots and all("fairness_prob -0." in line for line in slots), slots
    assert not any("Spearman nan" in line for line in slots) and "against the human scores" not in table
    metrics = collect.pick_metrics(collect.collect_runs(tmp_path / "zepo"), None)
    assert {"initial/none/accuracy", "best/none/accuracy"} <= set(metrics)


@pytest.mark.slow  # a two-job sweep with W&B offline
def test_sweep_runs_are_named_by_what_varies_and_the_table_holds_the_prompts(prefs, tmp_path):
    """A two-instruction sweep, W&B offline: each run's W&B name ends in the instruction it judged
    (the override that differs); the judgments table has the source, instruction and prompt (as its template)."""
    from helpers.wandb_offline import run_record

    from harness.runtime.tracking import row_prompt

    sweep = tmp_path / "sweep"
    texts = ("Pick the better response: A or B.", "Which response is better? A or B.")
    r = run_in_process(
        [
            "-m",
            *ARGS[:-2],
            "experiment.shuffles=5",
            "wandb.mode=offline",
            f"task.path={prefs['data']}",
            "experiment.instruction.text=" + ",".join(f"'{t}'" for t in texts),
            f"hydra.sweep.dir={sweep}",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for i, text in enumerate(texts):
        name = run_record(sweep / str(i))["display_name"]
        assert name == f"judge-jsonl-tiny-llama experiment.instruction.text='{text}'", name
        (saved,) = (sweep / str(i) / "wandb").rglob("judgments.table.json")  # the table W&B holds
        table = json.loads(saved.read_text())
        rows = [dict(zip(table["columns"], row)) for row in table["data"]]
        assert len(rows) == 24 and {row["instruction"] for row in rows} == {text}
        prompts = [row_prompt(row) for row in rows]  # each row's template, filled with its own cells
        assert all(row["source"] in p and row["a_text"] in p for row, p in zip(rows, prompts))
        assert all(p.endswith(f"Question: {text}\nAnswer: ") for p in prompts)


def test_compare_names_only_the_judge_fields_that_differ(tmp_path):
    """Two judge identities differing in their last field (the weights' hash): the line shows that
    field, not the first 70 characters they share."""
    from harness.report.rundiff import differences

    a = {"judge": "hf|tiny-llama|-|-|float32|tmpl=e237606c4ee5|sys=e3b0c44298fc|w=1a225cbdb53d3642"}
    b = {**a, "judge": a["judge"].replace("w=1a22", "w=9f00")}
    assert differences(tmp_path, tmp_path, a, b) == ["judge: 'w=1a225cbdb53d3642' vs 'w=9f005cbdb53d3642'"]
    assert differences(tmp_path, tmp_path, a, a) == []
