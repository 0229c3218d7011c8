"""Bad input through the real CLI: one `error:` line naming the problem, exit 2, no traceback."""

from __future__ import annotations

import json

import pytest
from helpers.cli import assert_one_line_error, run_in_process
from helpers.data import GOOD, write_jsonl


def _bad_data_cases(tmp):
    second = {**GOOD, "candidate_id": "c2"}
    return {
        "missing file": (tmp / "nope.jsonl", ("nope.jsonl", "not found")),
        "wrong schema": (
            write_jsonl(tmp / "schema.jsonl", [GOOD, {k: v for k, v in second.items() if k != "text"}]),
            ("schema.jsonl", "line 2", "text"),
        ),
        "nan score": (
            write_jsonl(tmp / "nan.jsonl", [GOOD, json.dumps(second).replace("3.0", "NaN")]),
            ("nan.jsonl", "line 2", "coherence"),
        ),
        "empty candidate": (
            write_jsonl(tmp / "empty.jsonl", [GOOD, {**second, "text": "  "}]),
            ("empty.jsonl", "line 2", "text"),
        ),
    }


@pytest.mark.parametrize("case", ["missing file", "wrong schema", "nan score", "empty candidate"])
def test_bad_data_file(case, tmp_path):
    path, needles = _bad_data_cases(tmp_path)[case]
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task=jsonl",
            f"task.path={path}",
            "task.aspect=coherence",
            f"hydra.run.dir={tmp_path / 'run'}",
            "wandb.mode=disabled",
        ],
        tmp_path,
    )
    assert_one_line_error(r, *needles)


@pytest.mark.parametrize(
    "override, needles",
    [
        ("model.labels=[Zulu-Alpha-Quebec,B]", ("Zulu-Alpha-Quebec", "not a single token")),
        ("model.max_length=64", ("longer than the model's context of 64",)),
        ("task.aspect=brilliance", ("unknown aspect 'brilliance'",)),
        ("backend.engine=fast", ("backend.engine='fast'", "auto, packed, hf")),
    ],
)
def test_bad_config(override, needles, tmp_path):
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task.docs=1",
            "task.max_candidates=2",
            override,
            f"hydra.run.dir={tmp_path / 'run'}",
            "wandb.mode=disabled",
        ],
        tmp_path,
    )
    assert_one_line_error(r, *needles)


def test_secret_in_config_is_refused(tmp_path):
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "+backend.api_key=sk-should-never-be-here",
            f"hydra.run.dir={tmp_path / 'run'}",
            "wandb.mode=disabled",
        ],
        tmp_path,
    )
    assert_one_line_error(r, "environment variable")
    assert not any(
        "sk-should-never-be-here" in p.read_text(errors="ignore")
        for p in (tmp_path / "run").rglob("*")
        if p.is_file()
    )


@pytest.mark.parametrize(
    "override, needles",
    [
        ("backend.batch_size=abc", ("backend.batch_size=abc", "Integer")),  # wrong type: compose
        ("backend.batch_sise=4", ("batch_sise",)),  # unknown key (a typo): compose
        ("backend.batch_size=-1", ("backend.batch_size=-1", ">= 1")),  # out of range: schema check
        ("task.offset=-1", ("task.offset=-1", ">= 0")),
        ("task=nosuchtask", ("nosuchtask", "summeval")),  # unknown group choice: compose
        ("task.name=nosuchtask", ("task.name='nosuchtask'", "summeval")),
        ("backend.device=tpu", ("backend.device='tpu'",)),
        ("seed=abc", ("seed=abc",)),
        ("wandb.mode=sometimes", ("wandb.mode='sometimes'",)),
        ("task.max_candidates=-1", ("task.max_candidates=-1", ">= 2")),
        ("experiment.shuffles=0", ("experiment.shuffles=0", ">= 1")),
        ("optimizer.temperature=-1", ("optimizer.temperature=-1", ">= 0")),
        ("optimizer.device=tpu", ("optimizer.device='tpu'",)),
        ("experiment=abb experiment.verify=-1", ("experiment.verify=-1", ">= 0")),
        ("experiment=abb experiment.sigma_mode=lots", ("experiment.sigma_mode='lots'",)),
        ("backend=api +backend.token_ids={A:1,B:-2}", ("backend.token_ids.B=-2",)),
    ],
)
def test_config_refused_before_any_work(override, needles, tmp_path):
    """The schemas (harness/runtime/schema.py): types and unknown keys at compose, ranges and names
    right after, before any model or data is touched: no run directory is created."""
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            *override.split(" "),
            f"hydra.run.dir={tmp_path / 'run'}",
            "wandb.mode=disabled" if not override.startswith("wandb.") else "progress=false",
        ],
        tmp_path,
        timeout=120,
    )
    assert_one_line_error(r, *needles)
    assert not (tmp_path / "run" / "config.json").exists()


def test_context_length_is_checked_when_every_answer_comes_from_the_cache(tmp_path):
    """model.max_length is not part of the cache key (it changes no answer), so a cached answer
    must not let a prompt the model cannot read through: the check runs on cache hits too."""
    args = [
        "experiment=judge",
        "model=tiny_llama",
        "task.docs=1",
        "task.max_candidates=2",
        "wandb.mode=disabled",
        "progress=false",
    ]
    r = run_in_process([*args, f"hydra.run.dir={tmp_path / 'warm'}"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    again = run_in_process([*args, f"hydra.run.dir={tmp_path / 'again'}"], tmp_path)
    assert (
        again.returncode == 0
        and json.loads((tmp_path / "again" / "results.json").read_text())["judge_calls"] == 0
    )
    r = run_in_process([*args, "model.max_length=32", f"hydra.run.dir={tmp_path / 'short'}"], tmp_path)
    assert_one_line_error(r, "longer than the model's context of 32", "model.max_length")
    assert not (tmp_path / "short" / "results.json").exists()
