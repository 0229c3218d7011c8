"""A persistent, crash-safe request cache in front of any Judge.

The key is sha256(judge identity, exact user prompt). The identity holds what determines the
judge's numbers: the weights' content fingerprint (harness.models.fingerprint), revision, dtype,
backend, chat-template and system-prompt fingerprints, answer-token ids and read-out (an API
judge: base URL and the model the server reports), so one model's answers are never served as
another's, a fine-tune under its base model's name included (lm-eval issues #2715, #4063).
Rows keyed by an older harness without the weights are not served (one line says so). Rows are committed per chunk (per
streamed step for the transformers judge) in WAL mode: a run killed half-way keeps every commit
it finished and re-runs call no model for them.

Flagged answers are not cached, with one exception: `no_answer` (greedy generation, the official
ZEPO read-out, wrote no A/B token: P(A) = 0.5 by the official rule). Greedy generation is
deterministic for a judge identity (which holds the read-out and its token budget), so a rerun
would write the same tokens again; those rows go to a table of their own, `flagged` (key,
identity, p_a, flags), and are served back WITH their flag, so every metric still treats them as
no_answer (never as an answer of 0.5 or 0.0). An older harness reads only `scores` and never sees
them. An `unreadable` API answer (a transient failure) is still asked again.

A local judge's prompt lengths (token counts) go to a table of their own, `lengths` (key, tokens),
written with the answers: a cached request's context check reads its stored length, so a fully
cached run tokenizes no prompt (the key holds the tokenizer files, chat template and system text,
everything the length depends on). A hit without a stored length (an older harness's row) is
tokenized for its check, as before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import operator
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from harness.files import open_sqlite, sqlite_errors
from harness.judges.answers import logsumexp, renormalise
from harness.judges.base import Judge, gather, innermost, streams, supports_progress
from harness.judges.chat import NO_WEIGHTS
from harness.judges.settings import CacheSettings
from harness.records import PairRequest, PairScore

log = logging.getLogger(__name__)


def _valid_score(p_a: object, logprobs: object) -> PairScore | None:
    """A cached row as a PairScore, or None when it is not one a judge could have produced."""
    if not isinstance(p_a, float | int) or not 0.0 <= p_a <= 1.0:  # NULL (a NaN stored) fails here
        return None
    try:
        lp = json.loads(logprobs) if isinstance(logprobs, str) else None
    except ValueError:
        return None
    if (
        not isinstance(lp, dict)
        or not lp
        or not all(isinstance(v, float | int) and v <= 1e-6 for v in lp.values())
    ):
        return (
            None  # no answer-token logprob is no score; NaN compares False with everything, so it fails too
        )
    if not _agrees(float(p_a), lp):
        return None
    return PairScore(token_logprobs=lp, p_a=float(p_a))


P_A_TOLERANCE = 1e-4
"""How far a cached P(A) may lie from the one its own stored logprobs give (float rounding)."""


def _agrees(p_a: float, lp: dict[str, float]) -> bool:
    """Does P(A) follow from the row's own logprobs ({"label:variant": logprob}, first label A)? A
    tie label winning (three or more labels) is scored 0.5 by design."""
    per_label: dict[str, list[float]] = {}
    for key, value in lp.items():
        per_label.setdefault(str(key).split(":", 1)[0], []).append(float(value))
    groups = [logsumexp(v) for v in per_label.values()]
    if len(groups) >= 3 and p_a == 0.5:
        return True
    return abs(renormalise(groups[0], groups[1:]) - p_a) <= P_A_TOLERANCE


CACHEABLE_FLAGS = ("no_answer",)
"""Flags whose answer is deterministic for the judge identity and so kept (module docstring)."""
FLAGGED_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS flagged (key TEXT PRIMARY KEY, identity TEXT, p_a REAL, flags TEXT)"
)
LENGTHS_SCHEMA = "CREATE TABLE IF NOT EXISTS lengths (key TEXT PRIMARY KEY, tokens INTEGER)"


def cacheable(score: PairScore) -> bool:
    """Unflagged, or flagged only `no_answer` (with the official 0.5 and no answer-token logprobs)."""
    if not score.flags:
        return True
    return set(score.flags) <= set(CACHEABLE_FLAGS) and score.p_a == 0.5 and not score.token_logprobs


def _valid_flagged(p_a: object, flags: object) -> PairScore | None:
    """A `flagged` row as its PairScore (flags kept), or None when it is not a cacheable flagged answer."""
    try:
        names = tuple(json.loads(flags)) if isinstance(flags, str) else None
    except (ValueError, TypeError):
        return None
    if not names or not all(isinstance(f, str) for f in names):
        return None
    score = PairScore(
        token_logprobs={}, p_a=float(p_a) if isinstance(p_a, float | int) else -1.0, flags=names
    )
    return score if cacheable(score) else None


def request_key(identity: str, prompt: str) -> str:
    h = hashlib.sha256()
    h.update(identity.encode())
    h.update(b"\x00")
    h.update(prompt.encode())
    return h.hexdigest()


class ScoreCache:
    """SQLite table key -> (p_a, token_logprobs json)."""

    def __init__(self, path: str | Path, *, own_file: bool = False) -> None:
        """`own_file`: no other process writes this file (a sweep job's own cache), so it may open
        without locks where the filesystem has none (harness.files.open_sqlite)."""
        self.path = Path(path)
        self._lock = threading.Lock()
        self.invalid = 0
        """Rows read back that failed validation (not trusted, asked again)."""
        self._db = open_sqlite(
            self.path,
            "CREATE TABLE IF NOT EXISTS scores (key TEXT PRIMARY KEY, identity TEXT, p_a REAL, logprobs TEXT)",
            own_file=own_file,
        )
        self._flagged = False
        """Whether the `flagged` table exists (created with the first no_answer row, so a cache
        without any keeps its layout); looked up again while it does not (another process may add it)."""
        self._lengths = False
        """The same for the `lengths` table (created with the first stored prompt length)."""

    def get_many(self, keys: Sequence[str]) -> dict[str, PairScore]:
        """The cached scores of `keys`. A row that is not a valid score (P(A) missing or outside
        [0, 1], logprobs not numbers <= 0, a P(A) its own logprobs contradict) is not trusted: it is left out, so it is asked again
        and replaced, and counted in `self.invalid` with a warning."""
        out: dict[str, PairScore] = {}
        bad = 0
        with self._lock, sqlite_errors(self.path):
            for i in range(0, len(keys), 500):
                chunk = list(keys[i : i + 500])
                # scores first; a key they lack may be a flagged row (no_answer), in its own table
                for table, column, valid in (
                    ("scores", "logprobs", _valid_score),
                    ("flagged", "flags", _valid_flagged),
                ):
                    rest = [k for k in chunk if k not in out]
                    if not rest or (table == "flagged" and not self._has_flagged()):
                        continue
                    marks = ",".join("?" * len(rest))
                    for key, p_a, value in self._db.execute(
                        f"SELECT key, p_a, {column} FROM {table} WHERE key IN ({marks})", rest
                    ):
                        score = valid(p_a, value)
                        if score is None:
                            bad += 1
                        else:
                            out[key] = score
        if bad:
            self.invalid += bad
            log.warning(
                "%s: %d cached rows are not valid scores (e.g. a NaN stored as NULL); asking again",
                self.path,
                bad,
            )
        return out

    def token_counts(self, keys: Sequence[str]) -> dict[str, int]:
        """The stored prompt lengths (tokens) of `keys` that have one."""
        out: dict[str, int] = {}
        with self._lock, sqlite_errors(self.path):
            if not self._has_table("lengths"):
                return out
            for i in range(0, len(keys), 500):
                chunk = list(keys[i : i + 500])
                marks = ",".join("?" * len(chunk))
                for key, n in self._db.execute(
                    f"SELECT key, tokens FROM lengths WHERE key IN ({marks})", chunk
                ):
                    if isinstance(n, int) and n > 0:
                        out[key] = n
        return out

    def present(self, keys: Sequence[str]) -> set[str]:
        """The keys among `keys` that have a row (valid or not), without reading the rows."""
        out: set[str] = set()
        with self._lock, sqlite_errors(self.path):
            tables = ("scores", "flagged") if self._has_flagged() else ("scores",)
            for i in range(0, len(keys), 500):
                chunk = list(keys[i : i + 500])
                marks = ",".join("?" * len(chunk))
                for table in tables:
                    out.update(
                        k
                        for (k,) in self._db.execute(f"SELECT key FROM {table} WHERE key IN ({marks})", chunk)
                    )
        return out

    def put_many(
        self,
        identity: str,
        items: Sequence[tuple[str, PairScore]],
        tokens: Mapping[str, int] | None = None,
    ) -> None:
        """Store answers: unflagged ones in `scores`, cacheable flagged ones (`no_answer`) in `flagged`
        with their flags; any other flagged answer is refused (callers filter with `cacheable`).
        `tokens`: the prompts' lengths by key, for later context checks (`lengths`)."""
        plain = [(k, s) for k, s in items if not s.flags]
        flagged = [(k, s) for k, s in items if s.flags]
        if any(not cacheable(s) for _, s in flagged):
            raise ValueError("only unflagged or no_answer scores can be cached")
        with self._lock, sqlite_errors(self.path), self._db:
            if tokens:
                self._put_lengths(tokens)
            self._db.executemany(
                "INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?)",
                [(k, identity, s.p_a, json.dumps(dict(s.token_logprobs))) for k, s in plain],
            )
            if flagged:
                self._db.execute(FLAGGED_SCHEMA)
                self._flagged = True
                self._db.executemany(
                    "INSERT OR REPLACE INTO flagged VALUES (?, ?, ?, ?)",
                    [(k, identity, s.p_a, json.dumps(list(s.flags))) for k, s in flagged],
                )

    def put_lengths(self, tokens: Mapping[str, int]) -> None:
        """Store prompt lengths by key (rows cached before lengths were kept, once tokenized)."""
        if tokens:
            with self._lock, sqlite_errors(self.path), self._db:
                self._put_lengths(tokens)

    def _put_lengths(self, tokens: Mapping[str, int]) -> None:
        self._db.execute(LENGTHS_SCHEMA)
        self._lengths = True
        self._db.executemany("INSERT OR REPLACE INTO lengths VALUES (?, ?)", list(tokens.items()))

    def _has_flagged(self) -> bool:
        """Does the `flagged` table exist (callers hold the lock)?"""
        return self._has_table("flagged")

    def _has_table(self, name: str) -> bool:
        """Does table `name` (flagged, lengths) exist (callers hold the lock)?"""
        attr = f"_{name}"
        if not getattr(self, attr):
            found = (
                self._db.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
                ).fetchone()
                is not None
            )
            setattr(self, attr, found)
        return getattr(self, attr)

    def __len__(self) -> int:
        """Answers stored: scores plus cached no_answer rows."""
        with self._lock, sqlite_errors(self.path):
            tables = ("scores", "flagged") if self._has_flagged() else ("scores",)
            return sum(self._db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables)

    def count_identity(self, identity: str) -> int:
        """Rows stored under `identity` (one scan: asked once per judge, only when a request misses)."""
        with self._lock, sqlite_errors(self.path):
            return self._db.execute("SELECT COUNT(*) FROM scores WHERE identity = ?", (identity,)).fetchone()[
                0
            ]

    def close(self) -> None:
        self._db.close()


class CachedJudge:
    """Serves cached scores and sends only misses to the wrapped judge: `chunk` at a time (None:
    cache.chunk's default, CacheSettings), or, when
    the judge streams (`stream_scores`, the transformers judge), all in one call whose every
    finished forward is committed as it comes."""

    def __init__(
        self,
        judge: Judge,
        cache: ScoreCache,
        chunk: int | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.judge = judge
        self.cache = cache
        self.chunk = CacheSettings.chunk if chunk is None else chunk
        self.identity = judge.identity
        self.numerics = getattr(judge, "numerics", None)
        self.calls = 0
        """Requests sent to the wrapped judge (misses) and answered, since construction."""
        self.on_progress = on_progress
        """Called (calls, in_flight) before each chunk goes to the model and after it is committed,
        so a record of the calls (attempts.jsonl) survives a SIGKILL."""
        self._legacy_checked = False
        self._checked: set[str] = set()
        """Keys `check_requests` found fit by their stored length, not checked again by the call
        that follows it (that call empties it)."""
        self._keyed: tuple[Sequence[PairRequest], list[str]] | None = None
        """The requests `check_requests` keyed and their keys, taken by the calls that follow it
        for the same request objects, in order, a window or chunk at a time (hashing 24,000
        prompts once, not twice); released once the last is taken."""
        self._keyed_at = 0

    def _missed(self, n: int) -> None:
        """Before the first `n` misses go to the model: one line per kind of row of this judge that
        the cache holds under a key an older harness gave it (`legacy_identities`: without its
        weights, or before the identity recorded the system prompt its chat template adds). They
        are not served: keyed without the weights they may be another model's answers under the
        same name; every such row is asked again under the current identity."""
        if self._legacy_checked or not n:
            return
        self._legacy_checked = True
        legacy = getattr(self.judge, "legacy_identities", None)
        if legacy is None:
            old_key = getattr(self.judge, "legacy_identity", None)
            legacy = {old_key: NO_WEIGHTS} if old_key else {}
        for key, why in legacy.items():
            old = self.cache.count_identity(key) if key != self.identity else 0
            if old:
                log.warning(
                    "%s: %d cached rows of %s were %s; they are not served: asking the model again",
                    self.cache.path,
                    old,
                    key.split("|")[1],
                    why,
                )

    def check_requests(self, requests: Sequence[PairRequest]) -> None:
        """JudgeInputError for a prompt the model cannot read, cached ones included (a context too
        short for a prompt is refused even when a run with a longer one cached its answer): a request
        with a stored length is checked by it, without tokenizing; the others by the judge's own
        check (harness.judges.base.check_requests), which tokenizes them."""
        keys = [request_key(self.identity, r.prompt) for r in requests]
        self._keyed, self._keyed_at = (requests, keys), 0
        self._checked = self._check(keys, requests)

    def _keys(self, requests: Sequence[PairRequest]) -> list[str]:
        """The requests' cache keys: those `check_requests` made, where these are the next of the
        request objects it was given (the wrapper's windows and chunks); else hashed now."""
        if self._keyed is not None:
            given, keys = self._keyed
            at, end = self._keyed_at, self._keyed_at + len(requests)
            if end <= len(given) and all(map(operator.is_, given[at:end], requests)):
                self._keyed_at = end
                if end == len(given):
                    self._keyed = None
                return keys[at:end]
            self._keyed = None
        return [request_key(self.identity, r.prompt) for r in requests]

    def _check(self, keys: Sequence[str], requests: Sequence[PairRequest]) -> set[str]:
        """Check `requests` (keyed `keys`); the keys checked by their stored lengths."""
        if not requests:
            return set()
        inner = innermost(self.judge)
        by_length = getattr(inner, "check_token_counts", None)
        counts = self.cache.token_counts(list(dict.fromkeys(keys))) if by_length is not None else {}
        if counts:
            at = [i for i, k in enumerate(keys) if k in counts]
            by_length([requests[i] for i in at], [counts[keys[i]] for i in at])
        rest = [(k, r) for k, r in zip(keys, requests) if k not in counts]
        check = getattr(inner, "check_requests", None)
        if rest and check is not None:
            stored = self.cache.present([k for k, _ in rest])
            hits = [r for k, r in rest if k in stored]  # cached before lengths were kept
            misses = [r for k, r in rest if k not in stored]
            if hits:
                check(hits)
            if misses:  # the model will compute these: a vLLM judge starts its engine meanwhile
                getattr(inner, "check_before_computing", check)(misses)
            if by_length is not None:  # their lengths, kept from now on
                self.cache.put_lengths(self._lengths(rest))
        return set(counts)

    def _check_hits(self, keys: Sequence[str], requests: Sequence[PairRequest], found: Mapping) -> None:
        """The context check of the cached requests that `check_requests` did not just check."""
        checked, self._checked = self._checked, set()
        todo = [i for i, k in enumerate(keys) if k in found and k not in checked]
        self._check([keys[i] for i in todo], [requests[i] for i in todo])

    def _lengths(self, items: Sequence[tuple[str, PairRequest]]) -> dict[str, int]:
        """The token counts the model judge kept for these (key, request)s (none: an API judge)."""
        count = getattr(innermost(self.judge), "kept_length", None)
        if count is None:
            return {}
        return {k: n for k, r in items if (n := count(r.prompt))}

    @property
    def streaming(self) -> bool:
        """Whether the wrapped judge streams: then `stream_scores` serves a whole call."""
        return streams(self.judge)

    def stream_scores(
        self, requests: Sequence[PairRequest], progress=None
    ) -> Iterator[list[tuple[int, PairScore]]]:
        """(index, score) lists for `requests`: the cached ones first, then each list the model
        finishes, committed before it is handed on (so a kill loses at most the step in
        flight). The model is handed every distinct request, cached ones included, and told which
        it needs, so what it computes does not depend on what the cache already held. A cached
        request is checked against the context by its stored length (`check_requests`); when
        every request is cached the model is not called at all, so no prompt is tokenized."""
        keys = self._keys(requests)
        found = self.cache.get_many(keys)
        self._check_hits(keys, requests, found)
        at: dict[str, list[int]] = {}
        unique: list[PairRequest] = []
        for i, (k, r) in enumerate(zip(keys, requests)):
            if k not in at:
                at[k] = []
                unique.append(r)
            at[k].append(i)
        ukeys = list(at)
        hits = [(i, found[k]) for i, k in enumerate(keys) if k in found]
        if hits:
            if progress is not None:
                progress.update(len(hits))
            yield hits
        needed = [j for j, k in enumerate(ukeys) if k not in found]
        left = len(needed)
        self._missed(left)
        if left and self.on_progress is not None:
            self.on_progress(self.calls, left)
        if not needed:
            return
        for done in self.judge.stream_scores(unique, needed):
            self.calls += len(done)
            left -= len(done)
            # A flagged answer is returned but not cached (a rerun asks again), except a deterministic
            # no_answer, which is kept with its flag (module docstring).
            self.cache.put_many(
                self.identity,
                [(ukeys[j], s) for j, s in done if cacheable(s)],
                self._lengths([(ukeys[j], unique[j]) for j, _ in done]),
            )
            if self.on_progress is not None:
                self.on_progress(self.calls, left)
            out = [(i, s) for j, s in done for i in at[ukeys[j]]]
            if progress is not None:
                progress.update(len(out))
            yield out

    def score_pairs(self, requests: Sequence[PairRequest], progress=None) -> list[PairScore]:
        if self.streaming:
            return gather(self.stream_scores(requests, progress), len(requests))
        keys = self._keys(requests)
        found = self.cache.get_many(keys)
        # A hit skips the model, not the input checks: a prompt too long for THIS context is refused.
        self._check_hits(keys, requests, found)
        if progress is not None:
            progress.update(sum(1 for k in keys if k in found))
        todo: dict[str, PairRequest] = {}
        for k, r in zip(keys, requests):
            if k not in found and k not in todo:
                todo[k] = r
        items = list(todo.items())
        self._missed(len(items))
        for i in range(0, len(items), self.chunk):
            part = items[i : i + self.chunk]
            if self.on_progress is not None:
                self.on_progress(self.calls, len(part))
            # A judge that takes the bar ticks each of `part` as it is scored (within the call);
            # what is left to tick here is the duplicates, the requests served by the same key.
            ticks = supports_progress(self.judge) and progress is not None
            scores = (
                self.judge.score_pairs([r for _, r in part], progress=progress)
                if ticks
                else self.judge.score_pairs([r for _, r in part])
            )
            self.calls += len(part)
            # A flagged answer is returned but not cached (a rerun asks again), except a deterministic
            # no_answer, which is kept with its flag (module docstring).
            self.cache.put_many(
                self.identity,
                [(k, s) for (k, _), s in zip(part, scores) if cacheable(s)],
                self._lengths(part),
            )
            if self.on_progress is not None:
                self.on_progress(self.calls, 0)
            found.update((k, s) for (k, _), s in zip(part, scores))
            if progress is not None:
                done = {k for k, _ in part}
                progress.update(sum(1 for k in keys if k in done) - (len(part) if ticks else 0))
        return [found[k] for k in keys]
