"""The folders a run writes, as Hydra resolves them (harness/runtime/rundirs.py): a sweep's jobs each
get a folder of their own, and a secret's value names no folder and reaches no file, whatever it
looks like. Through the CLI, typed in a folder of the test's own, so that whatever would land in
the current folder is seen. The empty run and sweep folders: test_loud_inputs.py."""

from __future__ import annotations

import pytest
from helpers.cli import assert_one_line_error, run_harness

from harness.errors import ConfigError
from harness.redaction import check_env_secrets, check_overrides

BASE = ["experiment=judge", "model=tiny_llama", "wandb.mode=disabled", "progress=false"]
SECRET = "0123456789abcdef0123456789abcdef"
"""An Azure OpenAI key's shape: 32 hex digits, nothing like `sk-...`."""


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    "subdir, said",
    [
        ("", "resolves to '' for job 0 (seed=0)"),
        (".", "resolves to '.' for job 0 (seed=0)"),
        ("same", "the same folder 'same' for job 0 (seed=0) and job 1 (seed=1)"),
    ],
    ids=["empty", "dot", "constant"],
)
def test_a_sweep_subdir_that_is_not_one_per_job_is_refused(subdir, said, tmp_path):
    """`-m seed=0,1 hydra.sweep.subdir=` put both jobs in the sweep folder (rc 0, job 0's results
    replaced by job 1's). Now one line before Hydra creates the sweep folder."""
    (tmp_path / "cwd").mkdir()
    sweep = tmp_path / "sweep"
    r = run_harness(
        ["-m", *BASE, f"hydra.sweep.dir={sweep}", "seed=0,1", f"hydra.sweep.subdir={subdir}"],
        tmp_path,
        cwd=tmp_path / "cwd",
        timeout=120,
    )
    assert_one_line_error(r, "hydra.sweep.subdir", said, "${hydra.job.num}")
    assert not sweep.exists() and list((tmp_path / "cwd").iterdir()) == []


def test_negative_control_a_subdir_that_differs_per_job_is_accepted(tmp_path):
    """A subdir of the jobs' own values (composed per job, as the launcher does) passes the check:
    Hydra makes the sweep and each job's folder, and each job stops at its missing data file (one
    line per job, then the sweep's summary line: harness.runtime.sweep)."""
    sweep = tmp_path / "sweep"
    r = run_harness(
        [
            "-m",
            *BASE,
            f"hydra.sweep.dir={sweep}",
            "seed=0,1",
            "hydra.sweep.subdir=s${seed}",
            "task=jsonl",
            f"task.path={tmp_path / 'none.jsonl'}",
        ],
        tmp_path,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert [e.split(":")[1].strip() for e in errors[:2]] == ["job 0 (seed=0)", "job 1 (seed=1)"], errors
    assert len(errors) == 3 and all("none.jsonl: file not found" in e for e in errors), errors
    assert "hydra.sweep.subdir" not in r.stderr
    assert (sweep / "multirun.yaml").is_file() and (sweep / "s0").is_dir() and (sweep / "s1").is_dir()


@pytest.mark.parametrize("where", ["run dir", "sweep subdir", "W&B run name", "log file name"])
def test_a_secret_that_does_not_look_like_a_key_is_refused_by_its_variables_name(where, tmp_path):
    """AZURE_OPENAI_API_KEY=<32 hex> interpolated into hydra.run.dir ran (rc 0) under a folder named
    by the key: only key-shaped values (sk-, hf_) were refused. Now any value of a variable the
    harness knows to be secret (secret_env_names), wherever it lands: one line naming the variable
    and the key, never the value; nothing created."""
    (tmp_path / "cwd").mkdir()
    env = {"AZURE_OPENAI_API_KEY": SECRET}
    read = "${oc.env:AZURE_OPENAI_API_KEY}"
    args, key = {
        "run dir": ([f"hydra.run.dir={tmp_path / 'runs' / read}"], "hydra.run.dir"),
        "sweep subdir": (
            [
                "-m",
                f"hydra.sweep.dir={tmp_path / 'runs'}",
                "seed=0,1",
                f"hydra.sweep.subdir={read}_${{seed}}",
            ],
            "hydra.sweep.subdir",
        ),
        "W&B run name": ([f"hydra.run.dir={tmp_path / 'runs' / 'x'}", f"wandb.name={read}"], "wandb.name"),
        "log file name": (
            [f"hydra.run.dir={tmp_path / 'runs' / 'x'}", f"hydra.job.name={read}"],
            "hydra.job.name",
        ),
    }[where]
    args = ["-m", *BASE, *args[1:]] if args[0] == "-m" else [*BASE, *args]
    r = run_harness(args, tmp_path, env=env, cwd=tmp_path / "cwd", timeout=120)
    assert_one_line_error(r, f"config key {key} holds the value of $AZURE_OPENAI_API_KEY, a secret")
    assert SECRET not in r.stdout + r.stderr
    assert not (tmp_path / "runs").exists() and list((tmp_path / "cwd").iterdir()) == []


def test_negative_control_the_old_check_passed_it_and_a_plain_variable_is_no_secret(monkeypatch):
    """The command line as the old check saw it (values interpolated) passes: 32 hex digits are not
    key-shaped. The same value in a variable whose name is not secret is a folder name like any."""
    from harness.runtime.entry import with_env_values

    monkeypatch.setenv("AZURE_OPENAI_API_KEY", SECRET)
    override = "hydra.run.dir=/runs/${oc.env:AZURE_OPENAI_API_KEY}"
    check_overrides([with_env_values(override)])
    with pytest.raises(ConfigError, match=r"\$AZURE_OPENAI_API_KEY"):
        check_env_secrets([("hydra.run.dir", f"/runs/{SECRET}")])
    monkeypatch.delenv("AZURE_OPENAI_API_KEY")
    monkeypatch.setenv("MY_RUN_NAME", SECRET)
    check_env_secrets([("hydra.run.dir", f"/runs/{SECRET}")])


def test_another_experiment_is_refused_in_an_existing_run_dir(tmp_path):
    """experiment=judge into a ZEPO (or A-BB) run directory replaced its results.json while state.json
    (abb.json) stayed and contradicted it. Now one line naming the folder and the run it holds.
    Control: the same experiment is accepted there (it resumes): here it stops at the same missing
    data file, past the check."""
    run = tmp_path / "run"
    missing = ["task=jsonl", f"task.path={tmp_path / 'none.jsonl'}", "task.aspect=quality"]
    first = run_harness(
        ["experiment=zepo", *BASE[1:], *missing, f"hydra.run.dir={run}"], tmp_path, timeout=120
    )
    assert_one_line_error(first, "none.jsonl", "not found")
    assert (run / "config.json").is_file()  # what a ZEPO run leaves first
    other = run_harness(
        [*BASE, "task.docs=1", "task.max_candidates=2", f"hydra.run.dir={run}"], tmp_path, timeout=300
    )
    assert_one_line_error(other, f"the run directory {run} holds a zepo run", "hydra.run.dir=")
    assert not (run / "results.json").exists()
    again = run_harness(
        ["experiment=zepo", *BASE[1:], *missing, f"hydra.run.dir={run}"], tmp_path, timeout=120
    )
    assert_one_line_error(again, "none.jsonl", "not found")
