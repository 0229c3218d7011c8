"""helpers.cli.run_in_process is the CLI in the test's process: the same answer as the real
subprocess (run_harness) and the process left as it was, so the next test sees no trace of a run."""

from __future__ import annotations

import logging
import os
import signal
import sys

from helpers.cli import assert_one_line_error, run_harness, run_in_process

REFUSED = ["experiment=judge", "model=tiny_llama", "backend.batch_size=-1", "wandb.mode=disabled"]


def _state() -> dict:
    return {
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "argv": list(sys.argv),
        "hook": sys.excepthook,
        "root": list(logging.getLogger().handlers),
        "level": logging.getLogger().level,
        "sigterm": signal.getsignal(signal.SIGTERM),
    }


def test_the_same_answer_as_the_subprocess_and_nothing_left_behind(tmp_path):
    before = _state()
    inside = run_in_process([*REFUSED, f"hydra.run.dir={tmp_path / 'in'}"], tmp_path)
    assert _state() == before  # main() sets HYDRA_FULL_ERROR, Hydra reconfigures logging: all put back
    outside = run_harness([*REFUSED, f"hydra.run.dir={tmp_path / 'out'}"], tmp_path)
    for r in (inside, outside):
        assert_one_line_error(r, "backend.batch_size=-1", ">= 1")
    assert inside.stderr.strip() == outside.stderr.strip()


def test_a_run_that_works_writes_the_clis_run_dir_and_closes_its_log(tmp_path):
    out = tmp_path / "run"
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task.docs=1",
            "task.max_candidates=2",
            "wandb.mode=disabled",
            "progress=false",
            f"hydra.run.dir={out}",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert {"results.json", "judgments.jsonl", "config.json", "overrides.json", "run.log"} <= {
        p.name for p in out.iterdir()
    }
    assert "report card run:" in r.stdout  # Hydra's console log reached the captured stdout
    # run.log is closed: no handler anywhere still writes to it.
    handlers = [
        h
        for lg in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
        if isinstance(lg, logging.Logger)
        for h in lg.handlers
    ]
    assert not [h for h in handlers if getattr(h, "baseFilename", "").startswith(str(out))]


def test_negative_control_without_the_restore_the_run_leaves_its_logging_behind(tmp_path, monkeypatch):
    """The check above can fail: with the logging restore taken out, Hydra's handlers stay."""
    import contextlib

    from helpers import inprocess

    monkeypatch.setattr(inprocess, "_logging_state", contextlib.nullcontext)
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        run_in_process([*REFUSED, f"hydra.run.dir={tmp_path / 'in'}"], tmp_path)
        assert root.handlers != before
    finally:
        for h in root.handlers:
            if h not in before:
                h.close()
        root.handlers[:] = before
