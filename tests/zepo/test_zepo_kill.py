"""ZEPO survives a real SIGKILL: `python -m harness.run experiment=zepo` is killed in epoch 1, after
at least one of that epoch's cache chunks is committed, and rerun with the same command.

The resumed run must end with the unbroken run's history (same seed, fresh caches), send the
judge only the requests the killed run had not cached and leave a cache of the unbroken run's size.
attempts.jsonl (harness.runtime.attempts) must account for every call: the killed attempt's lines,
written as its chunks were committed, plus the resumed attempt's, sum to the cache's rows.
The unbroken run executes alongside the killed one to keep the test short.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.scripted import e2e_overrides, scripted_completion

from harness.judges.cache import ScoreCache
from harness.runtime.attempts import read_attempts, summed_calls

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 80  # per wait; a run takes ~15 s alone on 2 cores
CHUNK = 2  # vLLM/API judges: a commit every 2 requests; the transformers judge commits every forward


def _start(tmp: Path, url: str, data: Path, model_cache: Path) -> subprocess.Popen:
    """One run in its own session (process group), logs in tmp/, caches in tmp/cache/."""
    args = e2e_overrides(tmp, url, data, f"cache.chunk={CHUNK}", f"hydra.run.dir={tmp / 'run'}")
    # One thread each: two runs share the machine's cores; same setting in every run, same floats.
    env = {
        **os.environ,
        "WANDB_MODE": "disabled",
        "HARNESS_DATA_DIR": str(tmp / "data"),
        "HARNESS_CACHE": str(tmp / "cache"),
        "HARNESS_MODEL_CACHE": str(model_cache),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    log = (tmp / "log.txt").open("a")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "harness.run", *args],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()  # the child holds its own copy


def _finish(proc: subprocess.Popen, tmp: Path) -> None:
    rc = proc.wait(timeout=TIMEOUT_S)
    assert rc == 0, f"run in {tmp} exited {rc}:\n{(tmp / 'log.txt').read_text()[-3000:]}"


def _epoch(state: Path) -> int:
    try:
        return json.loads(state.read_text())["epoch"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):  # not written yet (writes are atomic)
        return -1


def _wait(what: str, done, proc: subprocess.Popen, tmp: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        assert proc.poll() is None, f"run ended before {what}:\n{(tmp / 'log.txt').read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.slow
def test_sigkilled_zepo_resumes_with_the_unbroken_history_and_no_repeated_call(
    tmp_path, shared_data, tiny_llama
):
    from helpers.servers import OpenAIServer

    ref_tmp, tmp = tmp_path / "unbroken", tmp_path / "killed"
    ref_tmp.mkdir()
    tmp.mkdir()
    model_cache = tiny_llama.parents[1]  # built once by the fixture; runs must not race to build it
    procs: list[subprocess.Popen] = []
    try:
        with OpenAIServer(script=scripted_completion) as srv:
            procs.append(ref := _start(ref_tmp, srv.url, shared_data, model_cache))
            procs.append(first := _start(tmp, srv.url, shared_data, model_cache))
            state = tmp / "run" / "state.json"
            _wait("epoch 0 to finish", lambda: _epoch(state) >= 1, first, tmp)
            cache = ScoreCache(tmp / "cache" / "requests.sqlite")
            after_epoch0 = len(cache)
            _wait("a cache chunk of epoch 1", lambda: len(cache) > after_epoch0, first, tmp)
            os.killpg(first.pid, signal.SIGKILL)  # its own session: only this run
            assert first.wait(timeout=TIMEOUT_S) == -signal.SIGKILL
            before_kill = len(cache)
            cache.close()
            assert not (tmp / "run" / "results.json").exists()  # killed mid-search, not after it
            procs.append(again := _start(tmp, srv.url, shared_data, model_cache))
            _finish(ref, ref_tmp)
            _finish(again, tmp)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)

    ref_run, run = ref_tmp / "run", tmp / "run"
    assert (run / "history.jsonl").read_text() == (ref_run / "history.jsonl").read_text()
    assert (run / "best_instruction.txt").read_text() == (ref_run / "best_instruction.txt").read_text()
    rows = [json.loads(x) for x in (run / "history.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 0, 0, 1, 1, 1]

    n_ref = len(ScoreCache(ref_tmp / "cache" / "requests.sqlite"))
    [ref_attempt] = read_attempts(ref_run)
    assert ref_attempt["status"] == "completed" and ref_attempt["calls"] == n_ref  # every request once
    # SIGKILL runs no `finally`, but the killed attempt's lines were written as it went.
    killed, resumed = read_attempts(run)
    assert killed["status"] == "killed" and killed["pid"] == first.pid and killed["event"] == "progress"
    assert resumed["status"] == "completed" and resumed["pid"] == again.pid
    assert after_epoch0 < before_kill < n_ref  # killed inside epoch 1, with work left
    # Every step the killed attempt committed is counted, except in attempts.py's one window: this
    # test kills right after it sees a commit, so the kill can land between that commit and its
    # progress line (CI hit it: 40 recorded, 42 cached); that step then reads as in flight.
    # A step commits at most one forward's prompts: backend.batch_size (32 here).
    trailing = before_kill - killed["calls"]
    batch = json.loads((run / "config.json").read_text())["backend"]["batch_size"]
    assert 0 <= trailing <= min(killed["in_flight"], batch)
    # In flight: what the killed call had sent and not recorded as committed. The transformers
    # judge takes the epoch's requests in one streamed call, so that is the rest of the epoch
    # (only the step running at the kill had been computed); never more than the run's requests.
    assert killed["calls"] + killed["in_flight"] <= n_ref
    assert resumed["calls"] == n_ref - before_kill  # nothing the killed run had cached was judged again
    assert (
        summed_calls(run)["calls"] + trailing == n_ref == len(ScoreCache(tmp / "cache" / "requests.sqlite"))
    )
    assert json.loads((run / "results.json").read_text())["judge_calls"] == resumed["calls"]
