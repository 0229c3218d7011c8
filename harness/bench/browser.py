"""Headless Chromium driven over the DevTools protocol on a pipe (standard library only), with the
network off: load a page, read its DOM, its console errors and every request it tried, run a
script in it, take a screenshot. Used by `harness-bench page` and tests/report/test_report_page.py.

    with Chromium() as browser:
        page = browser.load(Path("report.html"))
        page.errors, page.requests, page.load_ms, browser.evaluate("document.title")
        browser.screenshot(Path("shot.png"))

The network is off twice over: host names resolve nowhere (--host-resolver-rules) and every request
goes to a proxy on a closed port; requests for anything but the page itself are recorded, so a
test can say the page asked for nothing.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BINARIES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    return next((shutil.which(b) for b in BINARIES if shutil.which(b)), None)


@dataclass
class Loaded:
    """What one page load left behind."""

    errors: list[str] = field(default_factory=list)
    """Uncaught exceptions, console.error/assert calls and error log entries, one line each."""
    requests: list[str] = field(default_factory=list)
    """URLs the page requested besides itself and its data: URIs (a self-contained page asks for none)."""
    load_ms: float = 0.0
    """Navigation start to the end of the load event, as the page's own clock measured it."""


class Chromium:
    """One headless Chromium with one tab."""

    def __init__(
        self, binary: str | None = None, width: int = 1400, height: int = 1000, timeout: float = 60
    ) -> None:
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise FileNotFoundError("no chromium binary on PATH (Debian: apt-get install -y chromium)")
        self.size, self.timeout = (width, height), timeout
        self._id = 0
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Chromium:
        self._profile = tempfile.mkdtemp(prefix="cdp-")
        to_chrome, self._out = os.pipe()
        self._in, from_chrome = os.pipe()
        args = [
            self.binary,
            "--headless",
            "--disable-gpu",
            "--remote-debugging-pipe",
            "--no-first-run",
            "--no-default-browser-check",
            f"--user-data-dir={self._profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=http://127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root

        def pipe_fds() -> None:  # Chromium reads commands on fd 3 and writes replies on fd 4
            ends = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chrome, from_chrome)]
            os.dup2(ends[0], 3)
            os.dup2(ends[1], 4)

        self._proc = subprocess.Popen(
            args,
            close_fds=False,
            preexec_fn=pipe_fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome)
        os.close(from_chrome)
        self._buf = b""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.send(f"{domain}.enable", session=True)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.size[0], "height": self.size[1], "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.send("Browser.close")
        except (OSError, TimeoutError, RuntimeError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._in, self._out):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    # -- the protocol ------------------------------------------------------------------------------
    def send(
        self, method: str, params: dict[str, Any] | None = None, session: bool = False
    ) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self._session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise TimeoutError(f"Chromium sent nothing for {self.timeout:.0f} s")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe (it exited)")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def _wait_event(self, method: str) -> None:
        for k, e in enumerate(self._events):
            if e.get("method") == method:
                del self._events[k]
                return
        while True:
            e = self._read()
            if e.get("method") == method:
                return
            self._events.append(e)

    # -- what a test uses ------------------------------------------------------------------------
    def load(self, page: Path) -> Loaded:
        """Open a local file and wait for its load event; its errors and requests so far."""
        self._events.clear()
        url = page.resolve().as_uri()
        self.send("Page.navigate", {"url": url}, session=True)
        self._wait_event("Page.loadEventFired")
        self.evaluate("1")  # drain what the load queued
        got = Loaded(
            load_ms=float(self.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd"))
        )
        for e in self._events:
            method, p = e.get("method"), e.get("params") or {}
            if method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails") or {}
                got.errors.append(
                    f"exception: {(d.get('exception') or {}).get('description') or d.get('text')}"
                )
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                got.errors.append(
                    "console."
                    + p["type"]
                    + ": "
                    + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args") or [])
                )
            elif method == "Log.entryAdded" and (p.get("entry") or {}).get("level") == "error":
                got.errors.append(f"log: {p['entry'].get('text')} {p['entry'].get('url') or ''}".strip())
            elif method == "Network.requestWillBeSent":
                req = (p.get("request") or {}).get("url", "")
                if req != url and not req.startswith("data:"):  # inline pictures are part of the page
                    got.requests.append(req)
        return got

    def evaluate(self, expression: str) -> Any:
        """A JavaScript expression's value in the page (awaited when it is a promise)."""
        got = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=True,
        )
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression[:80]}: {got['exceptionDetails'].get('text')}")
        return (got.get("result") or {}).get("value")

    def screenshot(self, path: Path) -> Path:
        shot = self.send("Page.captureScreenshot", {"format": "png"}, session=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
