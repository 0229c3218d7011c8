"""Requests to OpenAI-compatible servers (vLLM, OpenAI, llama.cpp, ...) through the official
`openai` client, and the completion cache that makes optimizer calls resumable.

The `openai` client does the transport: connection reuse, timeouts, and retries with backoff on
429, 408/409, 5xx, timeouts and dropped connections, honouring Retry-After (up to 120 s; otherwise
0.5 s doubling to 8 s, jittered). On top of it this module adds what a judge needs:
- the body of every 200 is parsed here and handed to the caller's `check`; a body that is not a
  JSON object, or that `check` rejects (MalformedResponse: no choices, missing, NaN or impossible
  logprobs...), is asked again like a transport fault, from the same retry budget
  (`max_retries` after the first attempt, all faults together), with our backoff;
- an answer still unusable when the budget is spent is returned as `Unusable` (the judge flags the
  pair) or raised, as the caller chooses; transport faults that outlast the budget raise ApiError;
- every logical request carries one `X-Client-Request-Id` across all its attempts;
- the API key is read from the environment variable named in the settings when a batch starts, is
  held only by that batch's short-lived `openai.OpenAI` object, and is redacted from every error.

`CompletionCache` (SQLite) stores optimizer completions so a resumed run repeats no call.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import math
import os
import random
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.checks import at_least, check_base_url, within
from harness.errors import ConfigError, HarnessError
from harness.files import open_sqlite
from harness.redaction import redact_text

log = logging.getLogger(__name__)

ENDPOINTS = ("chat", "completions")
"""/chat/completions and the legacy /completions."""
_TYPED = {
    "chat": {
        "model",
        "messages",
        "max_tokens",
        "temperature",
        "top_p",
        "seed",
        "n",
        "logprobs",
        "top_logprobs",
        "stop",
    },
    "completions": {"model", "prompt", "max_tokens", "temperature", "top_p", "seed", "n", "logprobs", "stop"},
}
"""Body fields the openai client takes as arguments; the rest (vLLM's logprob_token_ids, ...) go
in `extra_body`."""


class ApiError(HarnessError):
    """A request failed for good: a non-retryable status, or retries exhausted."""

    def __init__(self, message: str, *, status: int | None = None, where: str | None = None) -> None:
        self.status = status
        super().__init__(message, where=where)


class MalformedResponse(Exception):
    """Raised by a response check: the body is not the expected shape or content (retried)."""


@dataclass(frozen=True)
class Unusable:
    """An answer that stayed unusable through every retry (what `post_many(..., unusable="return")` gives)."""

    reason: str


@dataclass
class HttpSettings:
    """Reaching an OpenAI-compatible server: shared by the API judge (conf/backend/api.yaml) and the
    API optimizer (conf/optimizer/api.yaml), whose schemas extend it. Holds the NAME of the key's
    variable, never the key."""

    base_url: str = "http://127.0.0.1:8000/v1"
    """The server's OpenAI-compatible root including the version (a local vLLM server by default)."""
    api_key_env: str | None = "OPENAI_API_KEY"
    """The environment variable holding the key (null, or the variable unset or empty: no key sent)."""
    concurrency: int = 8
    """Requests in flight at once (`post_many`'s worker threads)."""
    timeout_s: float = 60.0
    """Seconds per attempt: each read, and the whole answer body (then retried)."""
    max_retries: int = 6
    """Attempts after the first one before giving up, for transport and content faults together."""
    backoff_base_s: float = 1.0
    """Retry backoff: base * 2^attempt, jittered, capped at backoff_max_s."""
    backoff_max_s: float = 60.0
    """The longest wait between retries."""

    def check_server(self, group: str) -> None:
        check_base_url(f"{group}.base_url", self.base_url)
        at_least(f"{group}.concurrency", self.concurrency, 1)
        at_least(f"{group}.max_retries", self.max_retries, 0)
        within(f"{group}.timeout_s", self.timeout_s, 0, math.inf, open_low=True)
        at_least(f"{group}.backoff_base_s", self.backoff_base_s, 0)
        within(f"{group}.backoff_max_s", self.backoff_max_s, 0, math.inf, open_low=True)


class ApiClient:
    """OpenAI-compatible requests with retries for transport AND content faults; thread-safe."""

    def __init__(
        self, settings: HttpSettings, *, seed: int | None = None, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        settings.check_server("server")  # built in code too: the schema's checks, before any request
        self.settings = settings
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.stats: Counter[str] = Counter()
        """attempts (HTTP requests sent), ok, retries (all), content_retries, unusable."""

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"ApiClient(base_url={s.base_url!r}, api_key_env={s.api_key_env!r}, concurrency={s.concurrency})"
        )

    # -- public ---------------------------------------------------------------------------------
    def post_many(
        self,
        endpoint: str,
        bodies: Sequence[Mapping[str, Any]],
        *,
        check: Callable[[dict], None] | None = None,
        unusable: str = "raise",
    ) -> list[Any]:
        """Send every body on `concurrency` threads; the parsed JSON bodies in the order of `bodies`.

        `unusable="return"`: an answer still failing `check` after every retry comes back as an
        `Unusable` in its place; "raise": ApiError. The first transport failure cancels requests
        not yet started and is raised once the running ones have finished."""
        if endpoint not in ENDPOINTS:
            raise ConfigError(f"unknown endpoint {endpoint!r}; use chat or completions")
        if not bodies:
            return []
        client = self._openai()
        try:
            if self.settings.concurrency == 1 or len(bodies) == 1:
                return [self._post(client, endpoint, b, check, unusable) for b in bodies]
            with ThreadPoolExecutor(
                max_workers=min(self.settings.concurrency, len(bodies)), thread_name_prefix="harness-http"
            ) as pool:
                futures = [pool.submit(self._post, client, endpoint, b, check, unusable) for b in bodies]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = [f for f in futures if f in done and f.exception() is not None]
                if failed:
                    for f in futures:
                        f.cancel()
                    raise failed[0].exception()  # type: ignore[misc]
                return [f.result() for f in futures]
        finally:
            client.close()

    def post(
        self, endpoint: str, body: Mapping[str, Any], *, check: Callable[[dict], None] | None = None
    ) -> dict:
        return self.post_many(endpoint, [body], check=check)[0]

    def get(self, path: str) -> dict:
        """GET a JSON resource (e.g. '/models') with the client's retries."""
        import openai

        client = self._openai()
        try:
            out = client.get(path, cast_to=object)
        except openai.OpenAIError as e:
            raise self._api_error(e, "GET", path) from None
        finally:
            client.close()
        if not isinstance(out, dict):
            raise ApiError("the answer is not a JSON object", where=f"GET {self._url(path)}")
        return out

    # -- one logical request ------------------------------------------------------------------
    def _openai(self) -> Any:
        """A client for one batch, with the key read from the environment now (never kept)."""
        import openai

        env = self.settings.api_key_env
        key = os.environ.get(env, "") if env else ""
        host = urllib.parse.urlsplit(self.settings.base_url).hostname or ""
        # Loopback servers must not be routed through an HTTP(S)_PROXY from the environment.
        # Redirects are not followed: the answer would come from another server while the request
        # cache credits base_url (a 3xx is one line naming where it points, see _api_error).
        http = openai.DefaultHttpxClient(
            trust_env=host not in ("127.0.0.1", "localhost", "::1"),
            follow_redirects=False,
            transport=deadline_transport(self.settings.timeout_s),
        )
        return openai.OpenAI(
            api_key=key or "EMPTY",
            base_url=self.settings.base_url,
            timeout=self.settings.timeout_s,
            max_retries=self.settings.max_retries,
            http_client=http,
        )

    def _post(
        self,
        client: Any,
        endpoint: str,
        body: Mapping[str, Any],
        check: Callable[[dict], None] | None,
        unusable: str,
    ) -> Any:
        request_id = uuid.uuid4().hex
        used, budget, reason = 0, self.settings.max_retries + 1, "no attempt made"
        while used < budget:
            raw, tries = self._send(client, endpoint, body, request_id, budget - used - 1)
            used += tries
            try:
                out = _json_object(raw)
                if check is not None:
                    check(out)
                self._count(ok=1)
                return out
            except MalformedResponse as e:
                reason = str(e)
            if used >= budget:
                break
            delay = self._backoff(used - 1)
            self._count(retries=1, content_retries=1)
            log.warning(
                "POST %s: unusable answer (%s); asking again in %.2fs (attempt %d of %d)",
                self._url(endpoint),
                self._redact(reason),
                delay,
                used + 1,
                budget,
            )
            self._sleep(delay)
        self._count(unusable=1)
        if unusable == "return":
            return Unusable(self._redact(reason))
        raise ApiError(
            f"gave up after {used} attempts; last answer unusable: {self._redact(reason)}",
            where=f"POST {self._url(endpoint)}",
        )

    def _send(
        self, client: Any, endpoint: str, body: Mapping[str, Any], request_id: str, retries: int
    ) -> tuple[Any, int]:
        """One call through the openai client (which retries transport faults `retries` times):
        (the raw response, HTTP attempts it took)."""
        import openai

        typed = {k: v for k, v in body.items() if k in _TYPED[endpoint]}
        extra = {k: v for k, v in body.items() if k not in _TYPED[endpoint]}
        api = client.with_options(max_retries=retries)
        create = (api.chat.completions if endpoint == "chat" else api.completions).with_raw_response.create
        try:
            raw = create(**typed, extra_body=extra or None, extra_headers={"X-Client-Request-Id": request_id})
        except openai.OpenAIError as e:
            status = getattr(e, "status_code", None)
            tries = (
                1 if status is not None and status not in (408, 409, 429) and status < 500 else retries + 1
            )
            self._count(attempts=tries, retries=tries - 1)
            raise self._api_error(e, "POST", endpoint, tries) from None
        tries = int(getattr(raw, "retries_taken", 0) or 0) + 1
        self._count(attempts=tries, retries=tries - 1)
        if tries > 1:
            log.warning(
                "POST %s: answered after %d attempts (transport faults retried)", self._url(endpoint), tries
            )
        return raw, tries

    def _api_error(self, e: Exception, method: str, path: str, attempts: int | None = None) -> ApiError:
        import openai

        where = f"{method} {self._url(path)}"
        if isinstance(e, openai.APIStatusError) and 300 <= int(e.status_code) < 400:
            to = self._redact(e.response.headers.get("location") or "(no Location header)")
            return ApiError(
                f"HTTP {e.status_code}: the server redirects to {to}; redirects are not followed (the "
                "request cache would credit this base_url with another server's answers): set "
                "backend.base_url to the server that answers",
                status=int(e.status_code),
                where=where,
            )
        if isinstance(e, openai.APIStatusError):
            status = int(e.status_code)
            hint = ""
            if status in (401, 403) and self.settings.api_key_env:
                hint = f" (is ${self.settings.api_key_env} set to a valid key?)"
            retried = f" after {attempts} attempts" if attempts and attempts > 1 else ""
            return ApiError(
                f"HTTP {status}{retried}: {self._redact(_error_message(e))}{hint}", status=status, where=where
            )
        if isinstance(e, openai.APITimeoutError):
            return ApiError(
                f"gave up after {attempts or 1} attempts: every attempt timed out (no whole answer "
                f"within {self.settings.timeout_s:g} s)",
                where=where,
            )
        if isinstance(e, openai.APIConnectionError):
            return ApiError(
                f"gave up after {attempts or 1} attempts: cannot connect to {self.settings.base_url} "
                f"({self._redact(str(e.__cause__ or e))}); is the server up?",
                where=where,
            )
        return ApiError(self._redact(f"{type(e).__name__}: {e}"), where=where)

    def _url(self, path: str) -> str:
        path = {"chat": "/chat/completions", "completions": "/completions"}.get(path, path)
        return self.settings.base_url.rstrip("/") + "/" + path.lstrip("/")

    def _backoff(self, attempt: int) -> float:
        s = self.settings
        base = min(s.backoff_max_s, s.backoff_base_s * (2 ** max(attempt, 0)))
        with self._lock:
            return base * (0.5 + 0.5 * self._rng.random())

    def _count(self, **counts: int) -> None:
        with self._lock:
            self.stats.update(counts)

    def _redact(self, text: str) -> str:
        return redact_text(text, [self.settings.api_key_env])


def deadline_transport(seconds: float) -> Any:
    """An httpx transport that bounds a whole attempt by `seconds`: httpx's own timeout bounds each
    socket read, so a server dripping its answer a byte at a time kept one attempt alive without
    end. The body is read against the deadline (httpx.ReadTimeout past it: retried like any
    timeout); the status line and headers still arrive under the per-read timeout alone."""
    import openai
    from openai._constants import DEFAULT_CONNECTION_LIMITS

    # The HTTP library openai runs on: httpx2 in openai 3 (openai._httpx), httpx before.
    httpx = getattr(openai, "_httpx", None) or importlib.import_module("httpx")

    class Deadline(httpx.SyncByteStream):
        def __init__(self, stream: Any, deadline: float, request: Any) -> None:
            self.stream, self.deadline, self.request = stream, deadline, request

        def __iter__(self) -> Any:
            for chunk in self.stream:
                if time.monotonic() > self.deadline:
                    raise httpx.ReadTimeout(f"no whole answer within {seconds:g} s", request=self.request)
                yield chunk

        def close(self) -> None:
            self.stream.close()

    class DeadlineTransport(httpx.HTTPTransport):
        def handle_request(self, request: Any) -> Any:
            deadline = time.monotonic() + seconds
            response = super().handle_request(request)
            response.stream = Deadline(response.stream, deadline, request)
            return response

    return DeadlineTransport(limits=DEFAULT_CONNECTION_LIMITS)


def _json_object(raw: Any) -> dict:
    """The body of a 200 as a JSON object, else MalformedResponse (asked again)."""
    ctype = raw.headers.get("content-type", "")
    if "json" not in ctype.lower():
        raise MalformedResponse(f"content type {ctype!r}, expected JSON")
    try:
        out = json.loads(raw.content, object_pairs_hook=_first_wins)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise MalformedResponse(f"body is not valid JSON ({e})") from None
    if not isinstance(out, dict):
        raise MalformedResponse("JSON body is not an object")
    return out


def _first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose key repeats keeps its FIRST value, as the judge reads a list of entries
    (harness.judges.api.first_position): a token text listed twice in a top-K answer gives the same
    P(A) on the chat endpoint (a list) and the completions endpoint (an object). Servers list by
    rank, so the first is the higher; json's default kept the last."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out


def _error_message(e: Any, limit: int = 300) -> str:
    """The server's error message: OpenAI-style {'error': {'message': ...}} or the raw text."""
    body = getattr(e, "body", None)
    msg: Any = body
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message", err) if isinstance(err, dict) else err
    if not isinstance(msg, str) or not msg:
        try:
            msg = e.response.text
        except Exception:  # the body is only for the message; the status decides
            msg = ""
    text = " ".join(str(msg).split())
    return text[:limit] + ("..." if len(text) > limit else "") if text else "(empty body)"


def served_model(client: ApiClient, model: str, who: str, logger: logging.Logger = log) -> str:
    """`<id>` or `<id>@<root>` of `model` in the server's /models list (vLLM names the weights it
    serves in `root`): a server restarted on other weights under the same name is told apart.
    `unreported` (with one warning naming `who`, e.g. "the judge") when the server lists no such
    model or has no /models; no server at all is the request's own one-line error."""
    try:
        listed = client.get("/models").get("data")
    except ApiError as e:
        if e.status is None:
            raise
        listed = None
    entry = (
        next((m for m in listed if isinstance(m, dict) and m.get("id") == model), None)
        if isinstance(listed, list)
        else None
    )
    base_url = client.settings.base_url.rstrip("/")
    if entry is None:
        logger.warning(
            "%s/models does not list model %r: %s identity cannot name the served weights, "
            "so cached answers are keyed on the model name alone",
            base_url,
            model,
            who,
        )
        return "unreported"
    root = entry.get("root")
    return f"{model}@{root}" if isinstance(root, str) and root and root != model else str(model)


# -- a persistent completion cache for optimizers ----------------------------------------------
def completion_key(
    model: str,
    base_url: str,
    messages: Sequence[Mapping[str, str]],
    params: Mapping[str, Any],
    seed: int,
    sample: int,
) -> str:
    """sha256 of everything that changes a sampled completion: model, server, messages,
    sampling parameters (temperature, top_p, max_tokens), the run seed and the sample index."""
    blob = json.dumps(
        [model, base_url, list(messages), dict(sorted(params.items())), seed, sample],
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class CompletionCache:
    """SQLite key -> completion text; WAL mode, one commit per put (optimizer calls are few)."""

    def __init__(self, path: str | Path, *, own_file: bool = False) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = open_sqlite(
            self.path,
            "CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, model TEXT, text TEXT)",
            own_file=own_file,
        )

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
