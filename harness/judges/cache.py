"""A persistent, crash-safe request cache in front of any Judge.

The key is sha256(judge identity, exact user prompt). The identity already holds the model,
revision, dtype, backend, chat-template fingerprint and answer-token ids, so one model's answers
are never served as another's (lm-eval issues #2715, #4063). Rows are committed per chunk in
WAL mode: a run killed half-way keeps every chunk it finished and re-runs call no model.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.io import open_sqlite
from harness.judges.base import Judge, check_requests
from harness.types import PairRequest, PairScore


def request_key(identity: str, prompt: str) -> str:
    h = hashlib.sha256()
    h.update(identity.encode())
    h.update(b"\x00")
    h.update(prompt.encode())
    return h.hexdigest()


class ScoreCache:
    """SQLite table key -> (p_a, token_logprobs json)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = open_sqlite(
            self.path, "CREATE TABLE IF NOT EXISTS scores (key TEXT PRIMARY KEY, identity TEXT, p_a REAL, logprobs TEXT)"
        )

    def get_many(self, keys: Sequence[str]) -> dict[str, PairScore]:
        out: dict[str, PairScore] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                chunk = list(keys[i : i + 500])
                marks = ",".join("?" * len(chunk))
                for key, p_a, lp in self._db.execute(
                    f"SELECT key, p_a, logprobs FROM scores WHERE key IN ({marks})", chunk
                ):
                    out[key] = PairScore(token_logprobs=json.loads(lp), p_a=p_a)
        return out

    def put_many(self, identity: str, items: Sequence[tuple[str, PairScore]]) -> None:
        with self._lock, self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?)",
                [(k, identity, s.p_a, json.dumps(dict(s.token_logprobs))) for k, s in items],
            )

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]

    def close(self) -> None:
        self._db.close()


class CachedJudge:
    """Serves cached scores and sends only misses to the wrapped judge, `chunk` at a time."""

    def __init__(self, judge: Judge, cache: ScoreCache, chunk: int = 64,
                 on_progress: Callable[[int, int], None] | None = None) -> None:
        self.judge = judge
        self.cache = cache
        self.chunk = chunk
        self.identity = judge.identity
        self.calls = 0
        """Requests sent to the wrapped judge (misses) and answered, since construction."""
        self.on_progress = on_progress
        """Called (calls, in_flight) before each chunk goes to the model and after it is committed,
        so a record of the calls (attempts.jsonl) survives a SIGKILL."""

    def score_pairs(self, requests: Sequence[PairRequest], progress=None) -> list[PairScore]:
        keys = [request_key(self.identity, r.prompt) for r in requests]
        found = self.cache.get_many(keys)
        # A hit skips the model, not the input checks: a prompt too long for THIS context is refused.
        check_requests(self.judge, [r for k, r in zip(keys, requests) if k in found])
        if progress is not None:
            progress.update(sum(1 for k in keys if k in found))
        todo: dict[str, PairRequest] = {}
        for k, r in zip(keys, requests):
            if k not in found and k not in todo:
                todo[k] = r
        items = list(todo.items())
        for i in range(0, len(items), self.chunk):
            part = items[i : i + self.chunk]
            if self.on_progress is not None:
                self.on_progress(self.calls, len(part))
            scores = self.judge.score_pairs([r for _, r in part])
            self.calls += len(part)
            # A flagged (e.g. unreadable) answer is returned but never cached: a rerun asks again.
            self.cache.put_many(self.identity, [(k, s) for (k, _), s in zip(part, scores) if not s.flags])
            if self.on_progress is not None:
                self.on_progress(self.calls, 0)
            found.update((k, s) for (k, _), s in zip(part, scores))
            if progress is not None:
                done = {k for k, _ in part}
                progress.update(sum(1 for k in keys if k in done))
        return [found[k] for k in keys]
