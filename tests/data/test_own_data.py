"""A user's own data runs without code: aspects the project has no wording for, and pairwise
preference data with a gold label and no aspect (real CLI, tiny real model)."""

from __future__ import annotations

import json

import pytest
from helpers.cli import assert_one_line_error, run_in_process

from harness.prompts import default_instruction


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_generic_instruction_for_an_unknown_aspect(tmp_path):
    rows = [
        {
            "doc_id": f"d{d}",
            "source": f"source text {d}",
            "candidate_id": f"c{c}",
            "text": f"summary {d}{c}",
            "scores": {"litepyramid_recall": float(c + d)},
        }
        for d in range(2)
        for c in range(3)
    ]
    data = _write(tmp_path / "mine.jsonl", rows)
    out = tmp_path / "run"
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task=jsonl",
            f"task.path={data}",
            "task.aspect=litepyramid_recall",
            f"hydra.run.dir={out}",
            "wandb.mode=disabled",
            "experiment.shuffles=5",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    warnings = [
        line for line in (r.stdout + r.stderr).splitlines() if "no default instruction for aspect" in line
    ]
    assert len(warnings) == 1 and "experiment.instruction.text" in warnings[0]
    results = json.loads((out / "results.json").read_text())
    assert results["instruction"].startswith("Which summary is better in terms of litepyramid_recall?")
    assert results["instruction"] == default_instruction("litepyramid_recall", "summarization")
    assert results["metrics"]["none"]["n_docs"] == 2  # the human scores of that aspect were used


def test_gold_label_data_without_an_aspect_is_overall_preference(tmp_path):
    rows = []
    for d in range(3):
        for c in ("good", "bad"):
            rows.append(
                {
                    "doc_id": f"q{d}",
                    "source": f"question {d}?",
                    "candidate_id": c,
                    "text": f"{c} answer {d}",
                    "gold": "good",
                }
            )
    data = _write(tmp_path / "prefs.jsonl", rows)
    out = tmp_path / "run"
    # As the README gives it: no task.family; the `gold` field makes it instruction data.
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task=jsonl",
            f"task.path={data}",
            f"hydra.run.dir={out}",
            "wandb.mode=disabled",
            "experiment.shuffles=5",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert (
        results["aspect"] is None and results["family"] == "instruction"
    )  # was summarization: "Source text: ..."
    assert results["instruction"] == default_instruction(None, "instruction")
    assert results["instruction"].startswith("Compare response candidate A and response candidate B overall.")
    assert results["metrics"]["none"]["n_calibration"] == 6  # every ordered pair has a gold preference


def test_an_empty_aspect_is_refused_with_what_to_set(tmp_path):
    rows = [{"doc_id": "d", "source": "s", "candidate_id": f"c{c}", "text": f"t{c}"} for c in range(2)]
    data = _write(tmp_path / "mine.jsonl", rows)
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task=jsonl",
            f"task.path={data}",
            "task.aspect=' '",
            f"hydra.run.dir={tmp_path / 'run'}",
            "wandb.mode=disabled",
        ],
        tmp_path,
    )
    assert r.returncode == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "task.aspect" in errors[0]


def _scored(tmp_path, scores_of):
    rows = [
        {
            "doc_id": f"d{d}",
            "source": f"source text {d}",
            "candidate_id": f"c{c}",
            "text": f"summary {d}{c}",
            "scores": scores_of(d, c),
        }
        for d in range(2)
        for c in range(3)
    ]
    return _write(tmp_path / "scored.jsonl", rows)


def test_the_files_only_score_key_is_the_aspect_when_none_is_set(tmp_path):
    data = _scored(tmp_path, lambda d, c: {"quality": float(c + d)})
    out = tmp_path / "run"
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task=jsonl",
            f"task.path={data}",
            f"hydra.run.dir={out}",
            "wandb.mode=disabled",
            "experiment.shuffles=5",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert results["aspect"] == "quality" and results["family"] == "summarization"
    assert results["metrics"]["none"]["n_docs"] == 2  # the human scores were used, not dropped


@pytest.mark.parametrize(
    "aspect, needles",
    [
        (
            "task.aspect=coherence",
            ("task.aspect='coherence'", "scores are for fluency, quality", "set task.aspect"),
        ),
        (None, ("several aspects (fluency, quality)", "set task.aspect")),
    ],
)
def test_scores_for_other_aspects_are_one_line_naming_the_file_and_its_keys(tmp_path, aspect, needles):
    data = _scored(tmp_path, lambda d, c: {"quality": float(c), "fluency": float(d)})
    out = tmp_path / "run"
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task=jsonl",
            f"task.path={data}",
            f"hydra.run.dir={out}",
            "wandb.mode=disabled",
            *([aspect] if aspect else []),
        ],
        tmp_path,
    )
    assert_one_line_error(r, "scored.jsonl", *needles)
    assert not (out / "judgments.jsonl").exists()  # refused before any model call


def test_an_empty_score_key_is_one_line_before_any_work(tmp_path):
    """Scores under the key "" were taken as the file's only aspect and every human metric came out
    null, exit 0. Now one line naming the file, line and field; nothing judged."""
    data = _scored(tmp_path, lambda d, c: {"": float(c + d)})
    out = tmp_path / "run"
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task=jsonl",
            f"task.path={data}",
            f"hydra.run.dir={out}",
            "wandb.mode=disabled",
        ],
        tmp_path,
    )
    assert_one_line_error(r, "scored.jsonl", "line 1", "scores", "an empty aspect name ''")
    assert not (out / "judgments.jsonl").exists()
