"""Document shards and their merge; preemption-safe chunks (in-process, no cluster needed).

The SLURM versions of these checks (array tasks, a real USR2 requeue) are in test_slurm.py.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from helpers.results import results_only

from harness.errors import ConfigError, DataError
from harness.judges.wrappers import PreemptibleJudge, deferred_signals, held_in_children
from harness.records import Candidate, Document
from harness.runtime.attempts import read_attempts, record_attempt
from harness.runtime.shard import (
    ShardSpec,
    merge_shards,
    select_shard,
    shard_bounds,
    shard_spec,
)


def _docs(n: int) -> list[Document]:
    return [Document(f"d{i}", "src", (Candidate("a", "x"), Candidate("b", "y"))) for i in range(n)]


def test_shards_are_contiguous_ordered_and_cover_every_document_once():
    for n in range(1, 12):
        for count in range(1, n + 1):
            blocks = [select_shard(_docs(n), ShardSpec(i, count)) for i in range(count)]
            assert [d.id for b in blocks for d in b] == [f"d{i}" for i in range(n)]
            assert max(map(len, blocks)) - min(map(len, blocks)) <= 1
    assert shard_bounds(10, ShardSpec(3, 4)) == (7, 10)


def test_shard_spec_defaults_and_errors():
    assert shard_spec({}) == ShardSpec(0, 1)
    assert shard_spec({"num_shards": None, "shard_index": None}) == ShardSpec(0, 1)
    assert shard_spec({"num_shards": 4, "shard_index": 3}) == ShardSpec(3, 4)
    for bad in (
        {"num_shards": 4, "shard_index": 4},
        {"num_shards": 0},
        {"num_shards": "2"},
        {"num_shards": 2, "shard_index": -1},
        {"num_shards": True},
    ):
        with pytest.raises(ConfigError, match="task."):
            shard_spec(bad)
    with pytest.raises(ConfigError, match="holds no documents.*num_shards <= 2"):
        select_shard(_docs(2), ShardSpec(0, 3))


def _judge_run(judge, docs, out, task_cfg):
    """A real judge run into `out`, with the config.json the Hydra entry point would write."""
    from harness.experiments.judge import run_judge
    from harness.files import write_json_atomic

    out.mkdir(parents=True)
    write_json_atomic(out / "config.json", {"task": task_cfg, "experiment": {"name": "judge"}})
    return run_judge(
        judge,
        docs,
        task="summeval",
        aspect="coherence",
        instruction="Which is better? A or B.",
        family="summarization",
        out_dir=out,
        max_candidates=3,
        shuffles=5,
        progress=False,
    )


@pytest.fixture(scope="module")
def bs1_judge(tiny_llama):
    from harness.judges.hf import HFJudge

    # batch_size=1: each prompt alone, so a prompt's score cannot depend on which shard or chunk
    # it was batched with and sharded == unsharded holds bit for bit.
    return HFJudge(tiny_llama, batch_size=1, device="cpu")


def test_merged_shards_equal_the_unsharded_run(bs1_judge, shared_data, tmp_path):
    from harness.data import load_task

    docs = load_task("summeval", data_dir=shared_data, limit=3)
    task = {"name": "summeval", "docs": 3, "max_candidates": 3}
    full = _judge_run(bs1_judge, docs, tmp_path / "full", task)
    dirs = []
    for i in (2, 0, 1):  # any order on the command line
        spec = ShardSpec(i, 3)
        _judge_run(
            bs1_judge,
            select_shard(docs, spec),
            tmp_path / f"shard-{i}",
            {**task, "num_shards": 3, "shard_index": i},
        )
        dirs.append(tmp_path / f"shard-{i}")
    merged = merge_shards(dirs, tmp_path / "merged")
    merged_rows = (tmp_path / "merged" / "judgments.jsonl").read_bytes()
    assert merged_rows == (tmp_path / "full" / "judgments.jsonl").read_bytes()
    on_disk = json.loads((tmp_path / "merged" / "results.json").read_text())
    assert on_disk == merged
    assert results_only(merged) == results_only(full)  # run facts (calls, timings) aside
    assert merged["n_docs"] == 3 and merged["n_judgments"] == 18

    # Missing, duplicated and foreign shards are refused with the reason.
    with pytest.raises(ConfigError, match=r"shards \[1\] of 3 are missing"):
        merge_shards(dirs[:2], tmp_path / "m2")
    with pytest.raises(ConfigError, match="shard 2 given twice"):
        merge_shards(dirs + dirs[:1], tmp_path / "m3")
    with pytest.raises(ConfigError, match="num_shards is 1"):
        merge_shards(dirs + [tmp_path / "full"], tmp_path / "m4")
    with pytest.raises(DataError, match="not found: not a finished judge run"):
        merge_shards([tmp_path / "nothing"], tmp_path / "m5")
    # A document in two shards: shard 1 judged with shard 0's first document as well.
    spec = ShardSpec(1, 3)
    _judge_run(
        bs1_judge,
        [docs[0], *select_shard(docs, spec)],
        tmp_path / "overlap-1",
        {**task, "num_shards": 3, "shard_index": 1},
    )
    with pytest.raises(DataError, match=f"document {docs[0].id!r} is in shard 0 and shard 1"):
        merge_shards([tmp_path / "shard-0", tmp_path / "overlap-1", tmp_path / "shard-2"], tmp_path / "m6")
    assert not (tmp_path / "m6" / "results.json").exists()  # nothing written that looks complete


def test_deferred_signal_reaches_its_handler_only_after_the_block():
    seen = []

    def handler(signum, frame):
        seen.append(("handler", signum))

    old = signal.signal(signal.SIGUSR2, handler)
    try:
        with deferred_signals() as pending:
            os.kill(os.getpid(), signal.SIGUSR2)
            seen.append(("inside", None))
            assert pending == [signal.SIGUSR2]
        assert seen == [("inside", None), ("handler", signal.SIGUSR2)]
        assert signal.getsignal(signal.SIGUSR2) is handler  # restored for the next signal
    finally:
        signal.signal(signal.SIGUSR2, old)


def _forked_child(marker: Path) -> int:
    """A forked child that lives 3 s and exits 0, unless a handler it inherited writes `marker`
    and exits 7."""
    pid = os.fork()
    if pid == 0:  # the child: only os-level calls, then os._exit
        import time

        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            time.sleep(0.01)
        os._exit(0)
    return pid


def test_children_started_while_held_never_act_on_the_preemption_signals(tmp_path):
    """held_in_children (vLLM's engine start, harness.judges.vllm): a spawned child (exec; a vLLM
    engine core on GPU) is not killed by USR2, a forked one (on CPU) does not run the handler it
    inherited; this process gets its USR2 after the block. Negative control: the same children
    started outside the block die of USR2 or run the inherited handler."""
    import subprocess
    import time

    seen = []
    marker = tmp_path / "child-ran-the-handler"

    def handler(signum, frame):
        if os.getpid() != parent:
            marker.write_text("x")
            os._exit(7)
        seen.append(signum)

    parent = os.getpid()
    old = signal.signal(signal.SIGUSR2, handler)
    try:

        def start() -> tuple[subprocess.Popen, int]:
            return subprocess.Popen(["sleep", "3"]), _forked_child(marker)

        with held_in_children():
            held = start()
            os.kill(parent, signal.SIGUSR2)
            assert seen == []  # held here too
        assert seen == [signal.SIGUSR2]  # delivered when the block ended
        assert signal.getsignal(signal.SIGUSR2) is handler
        free = start()
        time.sleep(0.2)  # the forked children reach their loop
        for proc, pid in (held, free):
            proc.send_signal(signal.SIGUSR2)
            os.kill(pid, signal.SIGUSR2)
        spawned_free, forked_free = free[0].wait(10), os.waitpid(free[1], 0)[1]
        assert spawned_free == -signal.SIGUSR2 and os.waitstatus_to_exitcode(forked_free) == 7  # control
        assert held[0].wait(10) == 0 and os.waitstatus_to_exitcode(os.waitpid(held[1], 0)[1]) == 0
    finally:
        signal.signal(signal.SIGUSR2, old)


def test_preempted_cached_judge_resumes_without_repeating_a_call(tiny_judge, shared_data, tmp_path):
    """USR2 mid-run -> SystemExit at a chunk boundary; the rerun pays only for what is missing."""
    from harness.data import load_task
    from harness.judges.cache import CachedJudge, ScoreCache
    from harness.judging import build_requests

    docs = load_task("summeval", data_dir=shared_data, limit=1)
    reqs, _ = build_requests(docs, "Which is better? A or B.", "summarization", "coherence", max_candidates=4)

    def exit_on_usr2(signum, frame):
        raise SystemExit(-1)  # what submitit's handler does after `scontrol requeue`

    class SignalAfterFirstModelCall:
        """The real tiny judge; sends this process USR2 while the first chunk is being scored."""

        identity = tiny_judge.identity

        def __init__(self):
            self.sent = False

        def score_pairs(self, requests):
            if not self.sent:
                self.sent = True
                os.kill(os.getpid(), signal.SIGUSR2)
            return tiny_judge.score_pairs(requests)

    old = signal.signal(signal.SIGUSR2, exit_on_usr2)
    cache_path = tmp_path / "c.sqlite"
    try:
        first = PreemptibleJudge(CachedJudge(SignalAfterFirstModelCall(), ScoreCache(cache_path), chunk=3), 3)
        with pytest.raises(SystemExit), record_attempt(tmp_path, first):
            first.score_pairs(reqs)
        second = PreemptibleJudge(CachedJudge(tiny_judge, ScoreCache(cache_path), chunk=3), 3)
        with record_attempt(tmp_path, second):
            scores = second.score_pairs(reqs)
    finally:
        signal.signal(signal.SIGUSR2, old)
    attempts = read_attempts(tmp_path)
    assert [a["status"] for a in attempts] == ["interrupted", "completed"]
    assert attempts[0]["calls"] == 3  # the chunk in flight was committed before the exit
    assert sum(a["calls"] for a in attempts) == len(reqs) == len(ScoreCache(cache_path))
    fresh = tiny_judge.score_pairs(reqs)  # uncached, other batches: equal up to float rounding
    assert [s.p_a for s in scores] == pytest.approx([s.p_a for s in fresh], abs=1e-6)
