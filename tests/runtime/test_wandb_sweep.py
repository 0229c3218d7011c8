"""W&B sweeps (scripts/wandb_sweep.py): the YAML reproduces the Hydra grid, and the exact `command:`
it writes runs as `wandb agent` would run it (W&B's own macro expansion, offline), each run named
after its grid point with an artifact of its own, read back from the offline run files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.wandb_offline import wandb_records

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "wandb_sweep.py"


def _write_sweep(out: Path, *args: str) -> dict:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return yaml.safe_load(out.read_text())


def agent_command(sweep: dict, values: dict[str, str]) -> list[str]:
    """The argv `wandb agent` runs for one run of `sweep` with these parameter values: W&B's own
    macro functions (wandb.sdk.launch.sweeps.utils), then the agent's substitution as in
    wandb_agent.Agent._command_run (wandb 0.31): ${env} -> /usr/bin/env, ${interpreter} -> python,
    ${program} -> the sweep's program; any other `${name}` -> that list of arguments."""
    from wandb.sdk.launch.sweeps import utils as sweep_utils

    command = sweep_utils.create_sweep_command(list(sweep["command"]))
    macros = sweep_utils.create_sweep_command_args({"args": {k: {"value": v} for k, v in values.items()}})
    macros.update(env=["/usr/bin/env"], interpreter=["python"], program=[sweep["program"]])
    argv: list[str] = []
    for chunk in map(str, command):
        argv += (macros.get(chunk[2:-1]) or []) if chunk.startswith("${") and chunk.endswith("}") else [chunk]
    return argv


def test_wandb_sweep_yaml_reproduces_the_hydra_grid(tmp_path):
    sweep = _write_sweep(tmp_path / "sweep.yaml", "--sweep", "zepo_table3_dialogue")
    assert sweep["method"] == "grid"
    assert sweep["command"] == [
        "${env}",
        "${interpreter}",
        "-m",
        "harness.run",
        "+sweep=zepo_table3_dialogue",
        "${args_no_hyphens}",
    ]
    assert sweep["parameters"]["task.aspect"]["values"] == ["naturalness", "engagingness", "overall"]
    assert sweep["parameters"]["task"]["values"] == ["usr_zepo", "topicalchat"]

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from wandb_sweep import build_sweep
    finally:
        sys.path.pop(0)
    s = build_sweep(
        {"x": "range(1,4)", "lr": "tag(log,interval(0.001,0.1))"}, method="random", metric="none/spearman"
    )
    assert s["parameters"]["x"] == {"values": ["1", "2", "3"]}
    assert s["parameters"]["lr"] == {"distribution": "log_uniform_values", "min": 0.001, "max": 0.1}
    with pytest.raises(SystemExit, match="interval cannot be a grid"):
        build_sweep({"lr": "interval(0,1)"})


@pytest.mark.slow
def test_agent_runs_the_written_command_offline_with_named_runs_and_artifacts(
    tmp_path, tiny_llama, shared_data
):
    from wandb.sdk.lib import config_util

    sweep = _write_sweep(
        tmp_path / "sweep.yaml",
        "--grid",
        "task.aspect=coherence,fluency",
        "--fixed",
        "experiment=judge",
        "model=tiny_llama",
        "task.docs=1",
        "task.max_candidates=3",
        "experiment.shuffles=10",
        "progress=false",
    )
    base_env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),  # this checkout, as its editable install would provide
        "WANDB_MODE": "offline",
        "WANDB_SWEEP_ID": "sweeptst",
        "WANDB_DATA_DIR": str(tmp_path / "wandb-data"),
        "HARNESS_DATA_MIRROR": str(shared_data),
        "HARNESS_DATA_DIR": str(tmp_path / "data"),
        "HARNESS_CACHE": str(tmp_path / "cache"),
        "HARNESS_MODEL_CACHE": str(Path(tiny_llama).parents[1]),
    }
    artifacts = []
    for i, aspect in enumerate(sweep["parameters"]["task.aspect"]["values"]):
        argv = agent_command(sweep, {"task.aspect": aspect})
        assert argv == [
            "/usr/bin/env",
            "python",
            "-m",
            "harness.run",
            "experiment=judge",
            "model=tiny_llama",
            "task.docs=1",
            "task.max_candidates=3",
            "experiment.shuffles=10",
            "progress=false",
            f"task.aspect={aspect}",
        ]
        # What the agent sets up before it starts the run: its id, the sweep, the run's parameters file.
        run_id, worker = f"swrun{i:03d}", tmp_path / f"worker{i}"
        params = worker / "wandb" / "sweep-sweeptst" / f"config-{run_id}.yaml"
        params.parent.mkdir(parents=True)
        config_util.save_config_file_from_dict(str(params), {"task.aspect": {"value": aspect}})
        env = {**base_env, "WANDB_RUN_ID": run_id, "WANDB_SWEEP_PARAM_PATH": str(params)}
        r = subprocess.run(argv, cwd=worker, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        (run_dir,) = (worker / "outputs" / "judge").iterdir()
        assert (run_dir / "results.json").is_file()
        records = wandb_records(run_dir)
        (run,) = [rec["run"] for rec in records if rec.get("type") == "run"]
        name = f"judge-summeval-{aspect}-tiny-llama"
        assert (run["display_name"], run["run_id"]) == (name, run_id)
        (art,) = [
            rec["artifact"]
            for rec in records
            if rec.get("type") == "artifact" and rec["artifact"]["type"] == "run-outputs"
        ]
        assert art["name"] == f"{name}-outputs-{run_id}"
        artifacts.append(art["name"])
    assert len(set(artifacts)) == 2  # two artifacts, not two versions of one
