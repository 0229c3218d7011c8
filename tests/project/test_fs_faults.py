"""Filesystem and cache faults are one line naming the path and what to do (never a traceback,
never a silently trusted cache): the run directory, input files, the SQLite request cache.

Faults are real: a file where a folder must be, /proc (no folders can be made there), a file the
kernel refuses to read (/proc/self/mem: EIO), a read-only file or folder (`chattr +i` as root,
`chmod` otherwise), a cache overwritten with random bytes or with one b-tree page destroyed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from helpers.cli import assert_one_line_error, run_harness
from helpers.data import GOOD, write_jsonl
from helpers.fs import read_only

from harness.errors import CacheError
from harness.judges.cache import CachedJudge, ScoreCache, request_key
from harness.metrics.settings import MetricsSettings
from harness.records import PairRequest, PairScore

TINY = [
    "experiment=judge",
    "model=tiny_llama",
    "task.docs=1",
    "task.max_candidates=2",
    "wandb.mode=disabled",
    "progress=false",
]


def _cache(path: Path, rows: int = 3000) -> Path:
    """A real request cache with `rows` rows (several b-tree pages)."""
    cache = ScoreCache(path)
    cache.put_many(
        "id",
        [
            (request_key("id", f"prompt {i}"), PairScore({"A:A": math.log(0.9), "B:B": math.log(0.1)}, 0.9))
            for i in range(rows)
        ],
    )
    cache.close()
    with sqlite3.connect(path) as db:  # fold the WAL into the file, so damage to it is damage to the data
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def _break_page(path: Path, page: int = 5) -> None:
    with path.open("r+b") as f:
        f.seek(4096 * page)
        f.write(os.urandom(4096))


# -- the cache, in process -------------------------------------------------------------------
@pytest.mark.parametrize(
    "damage, needles",
    [
        ("random bytes", ("is corrupt", "file is not a database", "mkdir -p", ".corrupt")),
        ("one broken page", ("is corrupt", "integrity check failed", "mkdir -p", ".corrupt")),
    ],
)
def test_corrupt_cache_is_refused_with_the_command_that_moves_it_aside(tmp_path, damage, needles):
    path = _cache(tmp_path / "requests.sqlite")
    if damage == "random bytes":
        path.write_bytes(os.urandom(20000))
    else:
        _break_page(path)
    with pytest.raises(CacheError) as e:
        ScoreCache(path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and "\n" not in msg and all(n in msg for n in needles), msg
    command = msg.split("(a new cache is created): ", 1)[1]
    subprocess.run(["bash", "-c", command], check=True)  # the printed command does what it says
    assert not path.exists() and (tmp_path / "requests.sqlite.corrupt" / "requests.sqlite").is_file()
    assert len(ScoreCache(path)) == 0  # a fresh cache in its place


def test_undamaged_cache_opens(tmp_path):
    """The negative control: the same cache, undamaged, opens with every row."""
    assert len(ScoreCache(_cache(tmp_path / "requests.sqlite"))) == 3000


def test_read_only_cache_is_refused_when_opened_not_at_the_first_commit(tmp_path):
    path = _cache(tmp_path / "requests.sqlite")
    with read_only(path):
        with pytest.raises(CacheError, match=r"requests.sqlite: the cache is read-only .*cache.path="):
            ScoreCache(path)


@pytest.mark.parametrize(
    "where, needle",
    [("file/requests.sqlite", "is a file, not a folder"), ("folder", "is a folder, not a SQLite file")],
)
def test_cache_path_that_cannot_be_a_file(tmp_path, where, needle):
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    with pytest.raises(CacheError, match=needle):
        ScoreCache(tmp_path / where)


def test_invalid_cached_rows_are_asked_again_not_trusted(tmp_path, caplog):
    """Rows no judge could have produced (a NaN stored as NULL by an older version, no logprobs,
    a positive logprob, a P(A) of 0.9 whose own logprobs give 0.1) are left out, counted, warned
    about, re-asked and replaced; the consistent row (P(A) 0.8 from its logprobs) is served."""
    path = tmp_path / "requests.sqlite"
    cache = ScoreCache(path)
    requests = [PairRequest("d", "a", "b", f"prompt {i}") for i in range(5)]
    keys = [request_key("scripted", r.prompt) for r in requests]
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO scores VALUES (?, 'scripted', ?, ?)",
            [
                (keys[0], None, '{"A:A": -0.1, "B:B": -2.0}'),
                (keys[1], 0.5, "{}"),
                (keys[2], 0.7, '{"A:A": 0.5, "B:B": -2.0}'),
                (keys[3], 0.8, '{"A:A": -0.2, "B:B": -1.5862943611198906}'),
                (keys[4], 0.9, f'{{"A:A": {math.log(0.1)}, "B:B": {math.log(0.9)}}}'),
            ],
        )

    class Scripted:
        """SCRIPTED judge: a fixed valid answer for every request."""

        identity = "scripted"

        def score_pairs(self, reqs):
            return [PairScore({"A:A": math.log(0.75), "B:B": math.log(0.25)}, 0.75) for _ in reqs]

    judge = CachedJudge(Scripted(), cache, chunk=8)
    scores = judge.score_pairs(requests)
    assert judge.calls == 4 and cache.invalid == 4 and "4 cached rows are not valid scores" in caplog.text
    assert [s.p_a for s in scores] == [0.75, 0.75, 0.75, 0.8, 0.75]
    again = CachedJudge(Scripted(), cache)
    again.score_pairs(requests)
    assert again.calls == 0  # replaced by valid rows


# -- through the CLI: one `error:` line, exit 2 -----------------------------------------------
def _run_dir_cases(tmp: Path):
    (tmp / "afile").write_text("not a folder")
    (tmp / "locked").mkdir()
    return {
        "under a file": (tmp / "afile" / "run", "afile is a file, not a folder"),
        "a file": (tmp / "afile", "afile is a file, not a folder"),
        "in /proc": (Path("/proc/harness-test/run"), "/proc/harness-test"),
        "read-only": (tmp / "locked", "locked/run.log"),
    }


@pytest.mark.parametrize("case", ["under a file", "a file", "in /proc", "read-only"])
def test_run_directory_that_cannot_be_used(tmp_path, case):
    run_dir, needle = _run_dir_cases(tmp_path)[case]
    ctx = read_only(tmp_path / "locked") if case == "read-only" else contextlib.nullcontext()
    with ctx:
        r = run_harness([*TINY, f"hydra.run.dir={run_dir}"], tmp_path, timeout=120)
    assert_one_line_error(r, "cannot use the run directory", needle, "hydra.run.dir=")


@pytest.mark.parametrize("case", ["a folder", "unreadable (EIO)"])
def test_unreadable_input_file(tmp_path, case):
    path = tmp_path / "data.jsonl" if case == "a folder" else Path("/proc/self/mem")
    if case == "a folder":
        path.mkdir()
    r = run_harness(
        [
            *TINY,
            "task=jsonl",
            f"task.path={path}",
            "task.aspect=coherence",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        tmp_path,
        timeout=120,
    )
    assert_one_line_error(r, str(path), "is a folder" if case == "a folder" else "cannot read it")


def test_unreadable_input_file_permission(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    path = write_jsonl(tmp_path / "data.jsonl", [GOOD, {**GOOD, "candidate_id": "c2"}])
    path.chmod(0)
    r = run_harness(
        [
            *TINY,
            "task=jsonl",
            f"task.path={path}",
            "task.aspect=coherence",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        tmp_path,
        timeout=120,
    )
    assert_one_line_error(r, str(path), "permission denied")


def test_corrupt_cache_through_the_cli_then_moved_aside(tmp_path):
    cache = tmp_path / "cache" / "requests.sqlite"
    cache.parent.mkdir()
    cache.write_bytes(os.urandom(8192))
    args = [*TINY, f"cache.path={cache}", f"hydra.run.dir={tmp_path / 'run'}"]
    r = run_harness(args, tmp_path, timeout=300)
    assert_one_line_error(r, str(cache), "is corrupt", "mkdir -p")
    assert not (tmp_path / "run" / "results.json").exists()
    command = [x for x in r.stderr.splitlines() if x.startswith("error: ")][0].split("created): ", 1)[1]
    subprocess.run(["bash", "-c", command], check=True)
    r = run_harness(args, tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["judge_calls"] == 3


def test_read_only_cache_through_the_cli(tmp_path):
    cache = _cache(tmp_path / "ro.sqlite", rows=10)
    with read_only(cache):
        r = run_harness(
            [*TINY, f"cache.path={cache}", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path, timeout=300
        )
    assert_one_line_error(r, str(cache), "read-only", "cache.path=")


def _durable(events: list[tuple[str, str, str]], path: Path) -> bool:
    """Whether `path` was written durably: its temporary file fsynced, then renamed onto it, then its
    folder fsynced (events: ("fsync", path, "") and ("replace", src, dst), in call order)."""
    at = next((i for i, (kind, _, dst) in enumerate(events) if kind == "replace" and dst == str(path)), None)
    if at is None:
        return False
    tmp = events[at][1]
    return ("fsync", tmp, "") in events[:at] and ("fsync", str(path.parent), "") in events[at + 1 :]


def _record_fsync_and_replace(monkeypatch) -> list[tuple[str, str, str]]:
    """The real os.fsync and os.replace, their paths recorded in call order (for `_durable`) until
    monkeypatch.undo()."""
    events: list[tuple[str, str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), ""))
        real_fsync(fd)

    def replace(src: object, dst: object, **kw: object) -> None:
        events.append(("replace", os.path.abspath(str(src)), os.path.abspath(str(dst))))
        real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_atomic_writes_fsync_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    """A run's files survive a node crash or power loss, not just a kill: every atomic write fsyncs
    its temporary file before os.replace and the folder after (nothing in harness/ called fsync). The
    real os.fsync and os.replace are called and their paths recorded during a real CLI run.
    Negative control: the report card's pictures, written through a temporary file and os.replace
    without fsync, are not found durable by the same check."""
    from helpers.cli import run_in_process

    events = _record_fsync_and_replace(monkeypatch)
    run = tmp_path / "run"
    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task.docs=1",
            "task.max_candidates=2",
            "wandb.mode=disabled",
            "progress=false",
            "metrics.bootstrap=0",
            f"hydra.run.dir={run}",
        ],
        tmp_path,
    )
    monkeypatch.undo()
    assert r.returncode == 0, r.stderr[-2000:]
    for name in ("config.json", "overrides.json", "judgments.jsonl", "results.json", "card.md"):
        assert _durable(events, run / name), name
    pictures = sorted(run.glob("card_*.png"))
    renamed = {dst for kind, _, dst in events if kind == "replace"}
    assert pictures and all(
        str(p) in renamed for p in pictures
    )  # control: renamed into place, never fsynced,
    assert not any(_durable(events, p) for p in pictures)  # so not durable


def test_paper_tables_and_the_sensitivity_paraphrases_are_written_durably(
    tmp_path, monkeypatch, shared_data, tiny_llama
):
    """harness-paper-tables wrote its CSV through its own temporary file and os.replace (no fsync)
    and its .md with a plain write; the sensitivity study wrote paraphrases.txt with a plain write.
    All three now go through harness.files (fails with them reverted: checked by hand)."""
    from helpers.results import zepo_result

    from harness.data import load_task
    from harness.judges.hf import HFJudge
    from harness.report.paper_tables import main as paper_tables
    from harness.zepo.study import run_sensitivity

    (tmp_path / "zepo").mkdir()
    (tmp_path / "zepo" / "results.json").write_text(json.dumps(zepo_result(0.3, 0.5, [0.05, 0.35])))
    judge = HFJudge(tiny_llama, device="cpu", dtype="float32", threads=1)
    docs = load_task("usr_zepo", data_dir=shared_data, limit=1)
    events = _record_fsync_and_replace(monkeypatch)
    assert (
        paper_tables([str(tmp_path / "zepo"), "--table", "1", "--out", str(tmp_path / "pt" / "table1")]) == 0
    )
    run_sensitivity(
        judge,
        docs,
        ["Which response is better?", "Which reply is more natural?"],
        task="usr_zepo",
        aspect="overall",
        family="dialogue",
        out_dir=tmp_path / "study",
        max_candidates=2,
        shuffles=5,
        metrics=MetricsSettings(0),
    )
    monkeypatch.undo()
    for path in (
        tmp_path / "pt" / "table1.md",
        tmp_path / "pt" / "table1.csv",
        tmp_path / "study" / "paraphrases.txt",
        tmp_path / "study" / "results.json",
    ):
        assert _durable(events, path), path


def test_a_cache_of_another_layout_is_refused_when_opened(tmp_path):
    """A cache whose `scores` table has an extra column (a newer harness's layout) was found only at
    the first write, after the model had loaded and judged a chunk. Now one line naming the file
    and both layouts when the cache opens, before any weights load. Control: the same file without
    the extra column is used (the run judges its pairs)."""
    cache = tmp_path / "newer.sqlite"
    with contextlib.closing(sqlite3.connect(cache)) as db:
        db.execute(
            "CREATE TABLE scores (key TEXT PRIMARY KEY, identity TEXT, p_a REAL, logprobs TEXT, seconds REAL)"
        )
        db.commit()
    args = [*TINY, f"cache.path={cache}", f"hydra.run.dir={tmp_path / 'run'}"]
    r = run_harness(args, tmp_path, timeout=300)
    assert_one_line_error(
        r, str(cache), "table scores has columns (key, identity, p_a, logprobs, seconds)", "cache.path="
    )
    assert "loading the judge's weights" not in r.stdout + r.stderr
    with contextlib.closing(sqlite3.connect(cache)) as db:
        db.execute("ALTER TABLE scores DROP COLUMN seconds")
        db.commit()
    ok = run_harness(args, tmp_path, timeout=300)
    assert (
        ok.returncode == 0 and json.loads((tmp_path / "run" / "results.json").read_text())["judge_calls"] == 3
    )
