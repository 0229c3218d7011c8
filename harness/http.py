"""A small JSON client for OpenAI-compatible servers (vLLM, OpenAI, llama.cpp, ...).

Standard library only (urllib + a thread pool): every backend here is latency-bound on the
model, not on the client, so an async stack or a connection pool would buy little, and the core
package stays free of an extra HTTP dependency (httpx is not among the project's dependencies).

What it guarantees:
- the API key is read from the environment variable named in the settings at each request and
  never kept on any object, never logged, and redacted from every error message;
- retries with exponential backoff and jitter on 429, 5xx, timeouts, connection errors and
  malformed bodies (not JSON, wrong content type, or failing the caller's shape check), honouring
  Retry-After; other 4xx fail at once with the server's (redacted) message;
- `post_many` runs a batch on `concurrency` threads and returns results in request order; each
  logical request carries one `X-Client-Request-Id` across its retries.

`CompletionCache` (SQLite) stores optimizer completions so a resumed run repeats no call.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, HarnessError
from harness.io import open_sqlite
from harness.secrets import redact_text

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 425, 429}  # plus every 5xx


class ApiError(HarnessError):
    """A request failed for good: a non-retryable status, or retries exhausted."""

    def __init__(self, message: str, *, status: int | None = None, where: str | None = None) -> None:
        self.status = status
        super().__init__(message, where=where)


class MalformedResponse(Exception):
    """Raised by a response check: the body parsed but is not the expected shape (retried)."""


@dataclass(frozen=True)
class HttpSettings:
    """Where and how to send requests. Holds the NAME of the key's variable, never the key."""

    base_url: str
    """Server root including the version, e.g. 'http://127.0.0.1:8000/v1' or 'https://api.openai.com/v1'."""
    api_key_env: str | None = "OPENAI_API_KEY"
    """Environment variable holding the key; unset/empty variable or None: no Authorization header."""
    timeout_s: float = 60.0
    """Socket timeout per attempt (connect and each read)."""
    max_retries: int = 6
    """Retries after the first attempt before giving up (so max_retries + 1 attempts)."""
    backoff_base_s: float = 1.0
    """First backoff; doubles each retry, times a jitter factor in [0.5, 1]."""
    backoff_max_s: float = 60.0
    """Cap on one backoff and on an honoured Retry-After."""
    concurrency: int = 8
    """Worker threads for `post_many`."""

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        for name in ("timeout_s", "backoff_max_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_retries < 0 or self.backoff_base_s < 0:
            raise ConfigError("max_retries and backoff_base_s must be >= 0")
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency}")


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class JsonClient:
    """POST JSON to an OpenAI-compatible server with retries; thread-safe."""

    def __init__(self, settings: HttpSettings, *, seed: int | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.stats: Counter[str] = Counter()
        """attempts, ok, retries, and retry reasons ('retry:429', 'retry:timeout', ...)."""
        host = urllib.parse.urlsplit(settings.base_url).hostname or ""
        # Loopback servers must not be routed through an HTTP(S)_PROXY from the environment.
        handlers = [urllib.request.ProxyHandler({})] if host in ("127.0.0.1", "localhost", "::1") else []
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        s = self.settings
        return f"JsonClient(base_url={s.base_url!r}, api_key_env={s.api_key_env!r}, concurrency={s.concurrency})"

    # -- public -------------------------------------------------------------------------------
    def post(self, path: str, body: Mapping[str, Any], *,
             check: Callable[[dict], None] | None = None) -> dict:
        """POST one JSON body; `check(response)` may raise MalformedResponse to get a retry."""
        request_id = uuid.uuid4().hex
        data = json.dumps(body).encode()
        last = "no attempt made"
        for attempt in range(self.settings.max_retries + 1):
            self._count("attempts")
            try:
                out = self._attempt("POST", path, data, request_id)
                if check is not None:
                    try:
                        check(out)
                    except MalformedResponse as e:
                        raise _Retryable(f"malformed response: {e}") from None
                self._count("ok")
                return out
            except _Retryable as e:
                last = e.reason
                if attempt == self.settings.max_retries:
                    break
                delay = self._backoff(attempt, e.retry_after)
                self._count("retries", f"retry:{e.reason.split(':')[0]}")
                log.warning("%s %s: %s; retry %d/%d in %.2fs", "POST", self._url(path),
                            _redact(e.reason, self.settings.api_key_env), attempt + 1,
                            self.settings.max_retries, delay)
                self._sleep(delay)
        raise ApiError(f"gave up after {self.settings.max_retries + 1} attempts; last error: "
                       f"{_redact(last, self.settings.api_key_env)}", where=f"POST {self._url(path)}")

    def post_many(self, path: str, bodies: Sequence[Mapping[str, Any]], *,
                  check: Callable[[dict], None] | None = None) -> list[dict]:
        """POST every body on `concurrency` threads; results in the order of `bodies`.

        The first failure cancels requests not yet started and is raised once the running
        ones have finished (nothing is left running in the background).
        """
        if not bodies:
            return []
        if self.settings.concurrency == 1 or len(bodies) == 1:
            return [self.post(path, b, check=check) for b in bodies]
        with ThreadPoolExecutor(max_workers=min(self.settings.concurrency, len(bodies)),
                                thread_name_prefix="harness-http") as pool:
            futures = [pool.submit(self.post, path, b, check=check) for b in bodies]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in futures if f in done and f.exception() is not None]
            if failed:
                for f in futures:
                    f.cancel()
                raise failed[0].exception()  # type: ignore[misc]
            return [f.result() for f in futures]

    def get(self, path: str) -> dict:
        """GET a JSON resource (e.g. '/models'), with the same retry rules."""
        for attempt in range(self.settings.max_retries + 1):
            try:
                return self._attempt("GET", path, None, uuid.uuid4().hex)
            except _Retryable as e:
                if attempt == self.settings.max_retries:
                    raise ApiError(_redact(e.reason, self.settings.api_key_env),
                                   where=f"GET {self._url(path)}") from None
                self._sleep(self._backoff(attempt, e.retry_after))
        raise AssertionError("unreachable")

    # -- one attempt --------------------------------------------------------------------------
    def _url(self, path: str) -> str:
        return self.settings.base_url.rstrip("/") + "/" + path.lstrip("/")

    def _headers(self, request_id: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "X-Client-Request-Id": request_id}
        env = self.settings.api_key_env
        key = os.environ.get(env, "") if env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _attempt(self, method: str, path: str, data: bytes | None, request_id: str) -> dict:
        req = urllib.request.Request(self._url(path), data=data, method=method,
                                     headers=self._headers(request_id))
        try:
            with self._opener.open(req, timeout=self.settings.timeout_s) as resp:
                raw = resp.read()
                ctype = resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            self._raise_for_status(e, method, path)
        except (TimeoutError, urllib.error.URLError, ConnectionError, http.client.HTTPException, OSError) as e:
            reason = getattr(e, "reason", e)
            kind = "timeout" if isinstance(reason, TimeoutError) or isinstance(e, TimeoutError) else "connection"
            raise _Retryable(f"{kind}: {type(reason).__name__}: {reason}") from None
        if "json" not in ctype.lower():
            raise _Retryable(f"malformed response: content type {ctype!r}, expected JSON")
        try:
            out = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise _Retryable(f"malformed response: body is not valid JSON ({e})") from None
        if not isinstance(out, dict):
            raise _Retryable("malformed response: JSON body is not an object")
        return out

    def _raise_for_status(self, e: urllib.error.HTTPError, method: str, path: str):
        try:
            text = e.read().decode("utf-8", "replace")
        except Exception:  # the body is only for the message; the status decides
            text = ""
        message = _error_message(text)
        if e.code in _RETRY_STATUS or e.code >= 500:
            raise _Retryable(f"{e.code}: {message}", _retry_after(e.headers.get("Retry-After"))) from None
        hint = ""
        if e.code in (401, 403) and self.settings.api_key_env:
            hint = f" (is ${self.settings.api_key_env} set to a valid key?)"
        raise ApiError(f"HTTP {e.code}: {_redact(message, self.settings.api_key_env)}{hint}",
                       status=e.code, where=f"{method} {self._url(path)}") from None

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        s = self.settings
        if retry_after is not None:
            return min(max(retry_after, 0.0), s.backoff_max_s)
        base = min(s.backoff_max_s, s.backoff_base_s * (2 ** attempt))
        with self._lock:
            return base * (0.5 + 0.5 * self._rng.random())

    def _count(self, *names: str) -> None:
        with self._lock:
            for n in names:
                self.stats[n] += 1


def _error_message(text: str, limit: int = 300) -> str:
    """The server's error message: OpenAI-style {'error': {'message': ...}} or the raw text."""
    try:
        body = json.loads(text)
        err = body.get("error", body) if isinstance(body, dict) else body
        msg = err.get("message", err) if isinstance(err, dict) else err
        text = msg if isinstance(msg, str) else json.dumps(msg)
    except (json.JSONDecodeError, AttributeError):
        pass
    text = " ".join(text.split())
    return text[:limit] + ("..." if len(text) > limit else "") if text else "(empty body)"


def _retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


# -- a persistent completion cache for optimizers ----------------------------------------------
def completion_key(model: str, base_url: str, messages: Sequence[Mapping[str, str]],
                   params: Mapping[str, Any], seed: int, sample: int) -> str:
    """sha256 of everything that changes a sampled completion: model, server, messages,
    sampling parameters (temperature, top_p, max_tokens), the run seed and the sample index."""
    blob = json.dumps([model, base_url, list(messages), dict(sorted(params.items())), seed, sample],
                      sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


class CompletionCache:
    """SQLite key -> completion text; WAL mode, one commit per put (optimizer calls are few)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = open_sqlite(self.path, "CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, model TEXT, text TEXT)")

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT text FROM completions WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, model: str, text: str) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO completions VALUES (?, ?, ?)", (key, model, text))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM completions").fetchone()[0]

    def close(self) -> None:
        self._db.close()


def _redact(text: str, env: str | None) -> str:
    """`text` without the key held in `env`, URL credentials or anything shaped like a key."""
    return redact_text(text, [env])
