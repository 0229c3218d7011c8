"""A key added with `+` that no part of the harness reads is refused, as a plain typo is.

Hydra refuses `task.doc=5` (no such key) and tells the user to add `+`; `+task.doc=5` then merged
into the structured config and was ignored with exit 0 (every document judged). Through the real
CLI: one `error:` line naming the key (never its value), exit 2, before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.cli import assert_one_line_error, run_in_process

BASE = [
    "experiment=judge",
    "model=tiny_llama",
    "task.docs=1",
    "task.max_candidates=2",
    "wandb.mode=disabled",
    "progress=false",
]


@pytest.mark.parametrize(
    "extra, key",
    [
        (["+task.doc=77123"], "task.doc"),
        (["+experiment.foo=77123"], "experiment.foo"),
        (["+experiment.instruction.tex=77123"], "experiment.instruction.tex"),
        (["backend=api", "+backend.api_kye_env=77123"], "backend.api_kye_env"),
        (["+cache.chunks=77123"], "cache.chunks"),
        (["+seeds=77123"], "seeds"),
    ],
)
def test_an_unknown_key_added_with_plus_is_one_line_and_exit_2(tmp_path, extra, key):
    out = tmp_path / "run"
    r = run_in_process([*BASE, *extra, f"hydra.run.dir={out}"], tmp_path, timeout=300)
    assert_one_line_error(r, f"unknown key {key} ", "fix the spelling")
    assert "77123" not in r.stderr + r.stdout  # the value is never echoed (it may be a secret)
    assert not (out / "config.json").exists()  # refused before the run recorded or loaded anything


def test_without_plus_hydra_refuses_it_and_known_keys_with_plus_plus_still_run(tmp_path):
    """The control: the same typo without `+` is Hydra's own refusal, and the check does not
    refuse keys the schema declares (`++` sets an existing key; dict-valued fields hold any key)."""
    r = run_in_process([*BASE, "task.doc=5", f"hydra.run.dir={tmp_path / 'typo'}"], tmp_path, timeout=300)
    assert_one_line_error(r, "task.doc")
    out = tmp_path / "run"
    r = run_in_process(
        [*BASE, "++task.docs=1", "experiment.shuffles=3", f"hydra.run.dir={out}"], tmp_path, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "results.json").is_file()


def _in_folder(args: list[str], folder: Path):
    """`python -m harness.run ARGS` typed in `folder` (its outputs/ go there), in this process."""
    from helpers.cli import run_env
    from helpers.inprocess import run_in_process as run

    return run(args, folder, timeout=300, repo=folder, base_env=run_env(folder, None))


@pytest.mark.parametrize(
    "typo, meant",
    [
        ("task.doc=5", "task.docs"),
        ("+task.doc=5", "task.docs"),
        ("experiment.shufles=3", "experiment.shuffles"),
    ],
)
def test_a_typo_gets_the_key_it_meant_and_leaves_no_outputs_folder(tmp_path, typo, meant):
    """Typed in a folder: one line with "did you mean <key>?" (not Hydra's advice to add the key with
    '+', which only moves the refusal), exit 2, and no outputs/ left behind by the refused run.
    Control: the same command spelt right runs and keeps its run directory under outputs/."""
    r = _in_folder([*BASE, typo], tmp_path)
    assert_one_line_error(r, f"did you mean {meant}?")
    assert "To append" not in r.stderr and "+task.doc=5" not in r.stderr
    assert not (tmp_path / "outputs").exists(), list(tmp_path.rglob("*"))


def test_a_run_prints_its_directory_and_keeps_it(tmp_path):
    """The control of the test above: a run that works keeps outputs/<experiment>/<time>/, and says
    where it is at the start and at the end."""
    r = _in_folder([*BASE, "experiment.shuffles=2"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    (run_dir,) = (tmp_path / "outputs" / "judge").iterdir()
    lines = [x for x in r.stdout.splitlines() if x.startswith("run directory: ")]
    assert len(lines) == 2 and all(str(run_dir.relative_to(tmp_path)) in x for x in lines)
    assert lines[-1].endswith("(open report.html in a browser)") and (run_dir / "report.html").is_file()
