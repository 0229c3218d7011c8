"""attempts.jsonl counts every call, a SIGKILLed attempt's included (harness/runtime/attempts.py).

A real process is SIGKILLed inside its third cache chunk (by the SCRIPTED judge it calls, so the
kill lands at a known point); its lines, written as it went, must count the two chunks it
committed, the cache must hold exactly those rows, and a resumed attempt must bring the sum to the
number of unique requests. The negative control runs the same kill without the progress hook:
the accounting check then sees fewer calls than cache rows, i.e. it catches the old behaviour.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.judges.cache import ScoreCache
from harness.runtime.attempts import (
    ATTEMPTS,
    read_attempts,
    record_attempt,
    summed_calls,
)

TESTS = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
}  # this checkout's harness
CHUNK = 2
TOTAL = 3 * 4 * 3  # 3 documents x 12 ordered pairs

SCRIPT = textwrap.dedent('''
    import os, signal, sys
    from helpers.scripted import ScriptedBiasJudge, scripted_docs
    from harness.judges.cache import CachedJudge, ScoreCache
    from harness.judging import build_requests
    from harness.runtime.attempts import record_attempt

    out, db, kill_at, hook = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "hook"

    class KilledMidChunk(ScriptedBiasJudge):
        """SCRIPTED judge that SIGKILLs its own process on its `kill_at`-th chunk."""
        chunks = 0
        def score_pairs(self, requests):
            KilledMidChunk.chunks += 1
            if KilledMidChunk.chunks == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return super().score_pairs(requests)

    requests, _ = build_requests(scripted_docs(3), "Which is better? (variant 3)", "summarization", "coherence")
    with record_attempt(out) as attempt:
        judge = CachedJudge(KilledMidChunk(), ScoreCache(db), chunk=2,
                            on_progress=attempt.progress if hook else None)
        judge.score_pairs(requests)
''')


def _attempt(tmp: Path, kill_at: int, hook: bool = True) -> int:
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(tmp / "run"),
            str(tmp / "c.sqlite"),
            str(kill_at),
            "hook" if hook else "none",
        ],
        cwd=TESTS.parent,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return r.returncode


def _rows(tmp: Path) -> int:
    cache = ScoreCache(tmp / "c.sqlite")
    try:
        return len(cache)
    finally:
        cache.close()


def test_killed_attempt_is_counted_and_the_sum_equals_the_cache_rows(tmp_path):
    (tmp_path / "run").mkdir()
    assert _attempt(tmp_path, kill_at=3) == -signal.SIGKILL
    [killed] = read_attempts(tmp_path / "run")
    assert killed["event"] == "progress"  # no end line: it never ran one
    assert killed["status"] == "killed"  # its process is gone (this host, its pid): not "running"
    assert killed["calls"] == 2 * CHUNK == _rows(tmp_path)  # both committed chunks counted
    assert killed["in_flight"] == CHUNK  # the third chunk was sent and lost with the process
    assert _attempt(tmp_path, kill_at=0) == 0  # the resumed attempt
    killed, resumed = read_attempts(tmp_path / "run")
    assert killed["status"] == "killed" and resumed["status"] == "completed"
    assert resumed["calls"] == TOTAL - 2 * CHUNK  # only what the killed attempt had not committed
    assert summed_calls(tmp_path / "run") == {"calls": TOTAL, "in_flight": CHUNK, "attempts": 2}
    assert _rows(tmp_path) == TOTAL
    lines = [json.loads(x) for x in (tmp_path / "run" / ATTEMPTS).read_text().splitlines()]
    assert [x["event"] for x in lines[:3]] == ["start", "progress", "progress"]


def test_negative_control_without_progress_lines_the_check_sees_missing_calls(tmp_path):
    (tmp_path / "run").mkdir()
    assert _attempt(tmp_path, kill_at=3, hook=False) == -signal.SIGKILL
    assert _rows(tmp_path) == 2 * CHUNK  # the work was done and cached ...
    assert summed_calls(tmp_path / "run")["calls"] == 0 != _rows(tmp_path)  # ... but not counted: caught


def test_statuses_and_concurrent_appends(tmp_path):
    with record_attempt(tmp_path) as a:
        a.progress(3, 0)
    with pytest.raises(SystemExit), record_attempt(tmp_path) as a:
        a.progress(1, 2)
        raise SystemExit(0)
    with pytest.raises(ValueError), record_attempt(tmp_path):
        raise ValueError
    assert [(r["status"], r["calls"]) for r in read_attempts(tmp_path)] == [
        ("completed", 3),
        ("interrupted", 1),
        ("failed", 0),
    ]
    # Two processes appending at once: every line whole (one O_APPEND write per line).
    code = (
        "import sys; from harness.runtime.attempts import record_attempt\n"
        "with record_attempt(sys.argv[1]) as a:\n    [a.progress(i, 1) for i in range(300)]"
    )
    (tmp_path / "both").mkdir()
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "both")], cwd=TESTS.parent, env=ENV)
        for _ in range(2)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    lines = (tmp_path / "both" / ATTEMPTS).read_text().splitlines()
    assert len(lines) == 2 * 302 and all(json.loads(x) for x in lines)
    assert [r["calls"] for r in read_attempts(tmp_path / "both")] == [299, 299]


def test_a_running_attempt_whose_process_is_gone_is_killed_and_a_bad_file_is_one_line(tmp_path):
    """A SIGKILLed job stayed "running" in collect and on the sweep index (no liveness check). Each
    line now records its host beside its pid: on this host a pid that is gone is `killed`. Controls:
    a live pid (this process) and another host's line stay `running`. A non-UTF-8 attempts.jsonl or
    a line that is not an object was a traceback in collect, report and a resumed run: one DataError
    naming the file (and line)."""
    import socket

    from harness.errors import DataError

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    here = socket.gethostname()
    for pid, host, status in [
        (gone.pid, here, "killed"),
        (os.getpid(), here, "running"),
        (gone.pid, "elsewhere", "running"),
    ]:
        (tmp_path / ATTEMPTS).write_text(
            json.dumps({"attempt": "a", "pid": pid, "host": host, "event": "progress", "status": "running"})
            + "\n"
        )
        assert read_attempts(tmp_path)[0]["status"] == status, (pid, host)
    (tmp_path / "new").mkdir()
    with record_attempt(tmp_path / "new") as a:
        assert read_attempts(tmp_path / "new")[-1]["host"] == here and a is not None
    (tmp_path / ATTEMPTS).write_bytes(b'{"attempt": "a", "note": "\xff"}\n')
    with pytest.raises(DataError, match=r"attempts.jsonl: not UTF-8"):
        read_attempts(tmp_path)
    (tmp_path / ATTEMPTS).write_text("[1, 2]\n")
    with pytest.raises(DataError, match=r"attempts.jsonl, line 1: not an attempt's line"):
        read_attempts(tmp_path)
