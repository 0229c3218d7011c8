"""Servers on loopback for tests: a real OpenAI-compatible HTTP server (`OpenAIServer`, below), and
a served vLLM judge started by the README's command (`serve_judge`, at the end).

`OpenAIServer`: ThreadingHTTPServer on 127.0.0.1, port 0.

Backends:
- logprobs from a REAL model (an HFJudge's model and tokenizer): /v1/chat/completions applies the
  tokenizer's chat template to `messages`, /v1/completions tokenizes `prompt` raw, then one
  forward pass gives the full-vocabulary next-token log-softmax. `logprob_token_ids` (vLLM
  extension) returns exactly those ids (plus the greedy token, as vLLM does), 'token_id:<id>'
  keyed when `return_tokens_as_token_ids` is set; otherwise `top_logprobs=K` returns the true top K.
- scripted completions (a list consumed in arrival order, or a function of the request body)
  for requests without `logprobs`, i.e. the optimizer's paraphrase calls.

Faults, injected per test with `inject(...)`, are consumed one per incoming POST in arrival order:
'429' / '429:<retry-after>', '500', 'hang' (sleep past the client's timeout, then drop the
connection), 'disconnect' (close without a response), 'malformed' (truncated JSON body),
'content_type' (200 with an HTML body), 'no_choices' (valid JSON of the wrong shape); and content
faults, the real answer to the request with its logprobs spoiled: 'no_logprobs' (the field left
out), 'empty_top' (an empty top-logprobs list), 'nan' (one logprob NaN), 'null' (one logprob
null), 'positive' (one logprob +0.7), 'both_zero' (every listed token at logprob 0, e.g. A and B
both "certain"), 'missing_ids' (the requested answer ids left out; in top mode an answer listing
no label), 'all_inf' (every listed logprob
-Infinity), 'dup_token' (the first listed token listed again last, 1.5 nats lower: a JSON object
with a repeated key on /completions). A faulted request is recorded with the fault as its outcome, never as a success.

Every request is recorded (path, X-Client-Request-Id, body, whether Authorization carried the
expected key — the key itself is never stored); `successes` counts 200 answers per request id.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from helpers import REPO

TRANSPORT_FAULTS = ("429", "500", "hang", "disconnect", "malformed", "content_type", "no_choices")
SLOW_FAULTS = ("drip", "redirect")
"""Not in FAULTS' transport set (the transport test injects each of those): 'drip:<s>' sends a
whole answer's headers at once, then its body one byte every <s> seconds; 'redirect:<url>' a 307 to
<url>."""
CONTENT_FAULTS = (
    "no_logprobs",
    "empty_top",
    "nan",
    "null",
    "positive",
    "both_zero",
    "missing_ids",
    "all_inf",
    "dup_token",
)
FAULTS = TRANSPORT_FAULTS + CONTENT_FAULTS + SLOW_FAULTS


@dataclass
class Received:
    """One request as the server saw it."""

    path: str
    request_id: str
    body: Any
    authorized: bool
    """Authorization was 'Bearer <expected key>' (True when the server expects no key)."""
    outcome: str = ""
    """'ok', a fault name, or an HTTP error status such as '401'."""
    t: float = 0.0
    """Arrival time (time.monotonic)."""


class OpenAIServer:
    """Context manager: `with OpenAIServer(judge=...) as srv: srv.url` -> 'http://127.0.0.1:PORT/v1'."""

    def __init__(
        self,
        *,
        judge: Any = None,
        script: Sequence[str] | Callable[[dict], str] | None = None,
        api_key: str | None = None,
        model: str = "tiny-test",
        hang_s: float = 3.0,
        max_top_logprobs: int = 20,
        root: str | None = None,
    ) -> None:
        self.judge, self.model_name, self.hang_s = judge, model, hang_s
        self.root = root
        """The weights /v1/models names as the model's `root` (as vLLM does), None: left out."""
        self.max_top_logprobs = max_top_logprobs
        self._script = script if callable(script) else deque(script or ())
        self._expected_auth = f"Bearer {api_key}" if api_key else None
        self._faults: deque[str] = deque()
        self._lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._stop = threading.Event()
        self.requests: list[Received] = []
        self.successes: Counter[str] = Counter()
        self._httpd: ThreadingHTTPServer | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> OpenAIServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def inject(self, *faults: str) -> None:
        for f in faults:
            if f.split(":")[0] not in FAULTS:
                raise ValueError(f"unknown fault {f!r}; known: {FAULTS}")
        with self._lock:
            self._faults.extend(faults)

    @property
    def faults_left(self) -> int:
        return len(self._faults)

    def ok_requests(self, path: str | None = None) -> list[Received]:
        return [r for r in self.requests if r.outcome == "ok" and (path is None or r.path == path)]

    # -- backends -------------------------------------------------------------------------------
    def next_token_logprobs(self, ids: list[int]):
        import torch

        model = self.judge.model
        with self._model_lock, torch.inference_mode():
            x = torch.tensor([ids], dtype=torch.long, device=next(model.parameters()).device)
            logits = model(
                input_ids=x, attention_mask=torch.ones_like(x), logits_to_keep=1, use_cache=False
            ).logits
        return torch.log_softmax(logits[0, -1].float(), dim=-1).cpu()

    def tokens_for(self, path: str, body: dict) -> list[int]:
        tok = self.judge.tokenizer
        if path.endswith("/chat/completions"):
            text = tok.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True)
            return tok(text, add_special_tokens=False)["input_ids"]
        return tok(body["prompt"])["input_ids"]  # vLLM adds special tokens for raw prompts

    def logprob_entries(self, lp, body: dict, top_key: str) -> tuple[int, list[tuple[int, float]]]:
        """(greedy token id, [(id, logprob)]) as the request asks: exact ids or the top K."""
        greedy = int(lp.argmax())
        ids = body.get("logprob_token_ids")
        if ids:
            chosen = [int(i) for i in ids] + ([greedy] if greedy not in ids else [])
            return greedy, [(i, float(lp[i])) for i in chosen]
        k = int(body.get(top_key) or 0)
        values, order = lp.topk(k)
        return greedy, [(int(i), float(v)) for i, v in zip(order, values)]

    def token_text(self, tid: int, as_ids: bool) -> str:
        return f"token_id:{tid}" if as_ids else self.judge.tokenizer.decode([tid])

    def chat_logprobs(self, path: str, body: dict) -> dict:
        lp = self.next_token_logprobs(self.tokens_for(path, body))
        greedy, entries = self.logprob_entries(lp, body, "top_logprobs")
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        top = [
            {
                "token": self.token_text(i, as_ids),
                "logprob": v,
                "bytes": list(self.token_text(i, as_ids).encode()),
            }
            for i, v in entries
        ]
        first = {"token": self.token_text(greedy, as_ids), "logprob": float(lp[greedy]), "top_logprobs": top}
        message = {"role": "assistant", "content": self.judge.tokenizer.decode([greedy])}
        return _envelope(
            self.model_name,
            {"index": 0, "message": message, "finish_reason": "length", "logprobs": {"content": [first]}},
            "chat.completion",
        )

    def legacy_logprobs(self, path: str, body: dict) -> dict:
        lp = self.next_token_logprobs(self.tokens_for(path, body))
        greedy, entries = self.logprob_entries(lp, body, "logprobs")
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        top = {self.token_text(i, as_ids): v for i, v in entries}
        choice = {
            "index": 0,
            "text": self.judge.tokenizer.decode([greedy]),
            "finish_reason": "length",
            "logprobs": {
                "tokens": [self.token_text(greedy, as_ids)],
                "token_logprobs": [float(lp[greedy])],
                "top_logprobs": [top],
                "text_offset": [0],
            },
        }
        return _envelope(self.model_name, choice, "text_completion")

    def scripted(self, body: dict) -> dict:
        if callable(self._script):
            text = self._script(body)
        else:
            with self._lock:
                text = self._script.popleft() if self._script else ""
        message = {"role": "assistant", "content": text}
        return _envelope(
            self.model_name, {"index": 0, "message": message, "finish_reason": "stop"}, "chat.completion"
        )

    def answer(self, path: str, body: dict) -> tuple[int, dict]:
        if path.endswith("/chat/completions") and isinstance(body.get("messages"), list):
            if body.get("logprobs"):
                k = body.get("top_logprobs") or 0
                if not body.get("logprob_token_ids") and not 0 < k <= self.max_top_logprobs:
                    return 400, {"error": {"message": f"top_logprobs must be in 1..{self.max_top_logprobs}"}}
                return 200, self.chat_logprobs(path, body)
            return 200, self.scripted(body)
        if path.endswith("/completions") and isinstance(body.get("prompt"), str) and body.get("logprobs"):
            return 200, self.legacy_logprobs(path, body)
        return 400, {"error": {"message": f"unsupported request to {path}"}}


def _envelope(model: str, choice: dict, obj: str) -> dict:
    return {
        "id": "cmpl-test",
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1},
    }


class _Handler(BaseHTTPRequestHandler):
    owner: OpenAIServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def _send(
        self,
        status: int,
        payload: bytes,
        ctype: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)

    def _auth(self) -> bool:
        expected = self.owner._expected_auth
        return expected is None or self.headers.get("Authorization") == expected

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            entry = {"id": self.owner.model_name, "object": "model", "owned_by": "test"}
            if self.owner.root is not None:
                entry["root"] = self.owner.root
            self._send(200, json.dumps({"object": "list", "data": [entry]}).encode())
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        srv = self.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = None
        rec = Received(
            self.path, self.headers.get("X-Client-Request-Id", ""), body, self._auth(), t=time.monotonic()
        )
        with srv._lock:
            srv.requests.append(rec)
            fault = srv._faults.popleft() if srv._faults and rec.authorized else None
        if not rec.authorized:
            # Like OpenAI, echo (part of) the presented key: the client must redact it.
            sent = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            rec.outcome = "401"
            return self._send(
                401, json.dumps({"error": {"message": f"Incorrect API key provided: {sent}"}}).encode()
            )
        if fault is not None and fault not in CONTENT_FAULTS:
            rec.outcome = fault
            return self._fault(fault)
        if not isinstance(body, dict):
            rec.outcome = "400"
            return self._send(400, b'{"error": {"message": "body is not a JSON object"}}')
        status, payload = srv.answer(self.path, body)
        if fault is not None and status == 200:
            rec.outcome = fault
            spoiled = spoil(payload, fault)
            return self._send(200, (spoiled if isinstance(spoiled, str) else json.dumps(spoiled)).encode())
        rec.outcome = "ok" if status == 200 else str(status)
        if status == 200:
            with srv._lock:
                srv.successes[rec.request_id] += 1
        self._send(status, json.dumps(payload).encode())

    def _fault(self, fault: str) -> None:
        kind, _, arg = fault.partition(":")
        if kind == "429":
            self._send(429, b'{"error": {"message": "rate limited"}}', headers={"Retry-After": arg or "0"})
        elif kind == "500":
            self._send(500, b'{"error": {"message": "internal error"}}')
        elif kind == "hang":
            self.owner._stop.wait(self.owner.hang_s)
            self.close_connection = True
        elif kind == "disconnect":
            self.close_connection = True
        elif kind == "malformed":
            self._send(200, b'{"choices": [{"index": 0, "message": {"content": "A"')
        elif kind == "content_type":
            self._send(200, b"<html><body>502 Bad Gateway</body></html>", ctype="text/html")
        elif kind == "no_choices":
            self._send(200, b'{"object": "error", "detail": "overloaded"}')
        elif kind == "redirect":
            self._send(307, b"", headers={"Location": arg})
        elif kind == "drip":
            body = b'{"choices": []}' + b" " * 64
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.flush()
            for k in range(len(body)):
                if self.owner._stop.wait(float(arg or 0.1)):
                    break
                try:
                    self.wfile.write(body[k : k + 1])
                    self.wfile.flush()
                except OSError:  # the client gave up: what the deadline is for
                    break
            self.close_connection = True


def spoil(payload: dict, fault: str) -> dict | str:
    """A real answer with its first position's logprobs spoiled as `fault` names (CONTENT_FAULTS);
    'dup_token' on /completions returns the JSON text itself (a dict cannot repeat a key)."""
    choice = payload["choices"][0]
    lp = choice.get("logprobs")
    if fault == "no_logprobs" or lp is None:
        choice.pop("logprobs", None)
        return payload
    chat = "content" in lp
    top = lp["content"][0]["top_logprobs"] if chat else lp["top_logprobs"][0]
    if fault == "dup_token":
        if chat:
            top.append({**top[0], "logprob": top[0]["logprob"] - 1.5})
            return payload
        first = next(iter(top))
        top["\x00dup"] = top[first] - 1.5
        return json.dumps(payload).replace('"\\u0000dup"', json.dumps(first))
    if fault in ("empty_top", "missing_ids"):
        top.clear()
        if fault == "missing_ids":  # one token nobody asked for, none of the requested answer ids
            if chat:
                top.append({"token": "token_id:0", "logprob": -0.1, "bytes": []})
            else:
                top["token_id:0"] = -0.1
        return payload
    value = {"nan": float("nan"), "null": None, "positive": 0.7, "both_zero": 0.0, "all_inf": -float("inf")}[
        fault
    ]
    keys = list(range(len(top))) if chat else list(top)
    for k in keys if fault in ("both_zero", "all_inf") else keys[-1:]:
        if chat:
            top[k]["logprob"] = value
        else:
            top[k] = value
    return payload


FAST = dict(backoff_base_s=0.01, backoff_max_s=2.0, timeout_s=5.0)
"""An API client's retry settings against the loopback server: its faults are retried in milliseconds."""


# -- a served vLLM judge ------------------------------------------------------------------------
START_TIMEOUT_S = 420
"""The server binds its port once the engine is up: ~50 s on a quiet 2-core machine, ~95 s under load."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:  # refused until the engine is up
        return False


def _die_with_parent() -> None:
    """The server gets SIGTERM when pytest dies (killed by a timeout, its finalizers never run):
    no orphaned vLLM engine holding a third of a shared machine's memory (Linux prctl)."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG; kept across the serve module's exec


def serve_judge(args: list[str], port: int, log) -> Iterator[str]:
    """`python -m harness.judges.serve ARGS` (the README's command) until it answers /health;
    yields its /v1 URL and stops it (its whole process group) afterwards."""
    cmd = [sys.executable, "-m", "harness.judges.serve", *args]
    with log.open("w") as f:
        proc = subprocess.Popen(
            cmd,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO,
            preexec_fn=_die_with_parent,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(f"http://127.0.0.1:{port}/health"):
            if proc.poll() is not None:
                pytest.fail(f"the vLLM server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the vLLM server did not come up within {START_TIMEOUT_S} s: {log.read_text()[-2000:]}"
                )
            time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
