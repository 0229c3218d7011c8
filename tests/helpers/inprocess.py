"""`python -m harness.run ...` inside the test's process: the CLI's own entry, minus the interpreter.

`run_in_process(args, tmp)` calls `harness.runtime.entry.main()` — the function `python -m
harness.run` calls — with `sys.argv` set to the arguments, so Hydra parses the same command line,
composes the shipped conf/, runs the same config checks, creates the same run directory and writes
the same results.json as the CLI. It returns what `helpers.cli.run_harness` returns (returncode,
stdout, stderr: a `subprocess.CompletedProcess`), so a test switches between the two with one word.

What a fresh process would give each run, and so what is set up and put back around every call:
- the environment (HARNESS_CACHE, HARNESS_DATA_DIR, WANDB_* per test, as run_harness sets them;
  `main()` itself sets HYDRA_FULL_ERROR and the tracker WANDB_DIR), the working directory (the
  repo, as run_harness's cwd) and sys.argv;
- stdout/stderr, captured at both levels: Python's streams (Hydra's console log, our `error:`
  lines) and file descriptors 1 and 2 (whatever C code or a child process writes);
- logging (Hydra reconfigures the root logger and opens <run dir>/run.log; its handlers are closed
  and the previous ones restored), warnings filters, sys.excepthook (install_redaction replaces it),
  the handlers of the signals the harness traps, torch's thread count, Hydra's GlobalHydra;
- the one-judge-per-process slot (harness.runtime.context._LOADED): each run builds its own
  judge, as a fresh process would, so no run sees another's loaded model or its counters. The vLLM
  engine table (harness.judges.vllm._ENGINES) holds engines weakly: an engine lives only while a
  judge holds it, so a run shares the session's engine (conftest `vllm_judge`) when that fixture is
  alive — the one-engine-per-session rule — and otherwise its engine goes with its judge.

An uncaught exception is printed as the interpreter would print it (through sys.excepthook, which
the run has made the redacting hook) and gives return code 1; SystemExit gives its code.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

TRAPPED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGHUP,
    signal.SIGCONT,
)
"""Signals whose handlers a run may replace (preemption: wrappers.py, submitit, wandb)."""


def run_in_process(
    args: list[str], tmp: Path, *, env: dict | None = None, timeout: int = 600, repo: Path, base_env: dict
) -> subprocess.CompletedProcess:
    """`python -m harness.run *args` in this process (see the module docstring). `timeout` is
    accepted for run_harness's signature; pytest-timeout bounds the test instead."""
    from harness.runtime.entry import main

    with _isolated(args, {**base_env, **(env or {})}, repo) as streams:
        code = _call(main)
    out, err = streams
    return subprocess.CompletedProcess(["python", "-m", "harness.run", *args], code, out.text(), err.text())


def _call(main) -> int:
    try:
        main()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else _print_exit(e.code))
    except BaseException:  # noqa: BLE001 - the interpreter's behaviour: traceback, exit 1
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


def _print_exit(message: object) -> int:
    print(message, file=sys.stderr)
    return 1


class _Captured:
    """One stream captured twice: Python-level text and what reached the file descriptor."""

    def __init__(self) -> None:
        self.py = io.StringIO()
        self.fd = tempfile.TemporaryFile(mode="w+b")

    def text(self) -> str:
        self.fd.seek(0)
        return self.py.getvalue() + self.fd.read().decode(errors="replace")


@contextlib.contextmanager
def _isolated(args: list[str], env: dict, repo: Path) -> Iterator[tuple[_Captured, _Captured]]:
    out, err = _Captured(), _Captured()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_process_state(args, env, repo))
        stack.enter_context(_logging_state())
        stack.enter_context(_harness_state())
        stack.enter_context(_fds(out, err))
        stack.enter_context(contextlib.redirect_stdout(out.py))
        stack.enter_context(contextlib.redirect_stderr(err.py))
        yield out, err


@contextlib.contextmanager
def environment(env: dict) -> Iterator[None]:
    """os.environ is exactly `env` inside, what it was before after."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({k: str(v) for k, v in env.items()})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _process_state(args: list[str], env: dict, repo: Path) -> Iterator[None]:
    saved_argv, saved_cwd = list(sys.argv), os.getcwd()
    saved_hook = sys.excepthook
    saved_signals = {s: signal.getsignal(s) for s in TRAPPED_SIGNALS}
    threads = _torch_threads()
    sys.argv = [str(repo / "harness" / "run.py"), *args]
    os.chdir(repo)
    try:
        with environment(env), warnings.catch_warnings():
            yield
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        sys.excepthook = saved_hook
        for s, h in saved_signals.items():
            if h is not None:
                signal.signal(s, h)
        if threads is not None:
            import torch

            torch.set_num_threads(threads)


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


@contextlib.contextmanager
def _logging_state() -> Iterator[None]:
    """Hydra configures logging per run (dictConfig: root handlers, run.log, levels)."""
    root = logging.getLogger()
    manager = logging.Logger.manager
    saved_root = (list(root.handlers), list(root.filters), root.level)
    saved = {
        name: (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
        for name, lg in manager.loggerDict.items()
        if isinstance(lg, logging.Logger)
    }
    try:
        yield
    finally:
        everything = [root, *(lg for lg in manager.loggerDict.values() if isinstance(lg, logging.Logger))]
        for lg in everything:
            for h in lg.handlers:
                if h not in saved_root[0] and all(h not in s[1] for s in saved.values()):
                    h.close()  # run.log: no file stays open (or written to) after the run
        root.handlers[:], root.filters[:] = saved_root[0], saved_root[1]
        root.setLevel(saved_root[2])
        for name, lg in manager.loggerDict.items():
            if not isinstance(lg, logging.Logger):
                continue
            level, handlers, propagate, disabled = saved.get(name, (logging.NOTSET, [], True, False))
            lg.setLevel(level)
            lg.handlers[:] = handlers
            lg.propagate, lg.disabled = propagate, disabled


@contextlib.contextmanager
def _harness_state() -> Iterator[None]:
    from hydra.core.global_hydra import GlobalHydra

    from harness.runtime import context

    GlobalHydra.instance().clear()
    loaded = dict(context._LOADED)
    context._LOADED.clear()
    try:
        yield
    finally:
        GlobalHydra.instance().clear()
        # Dropped, not closed: a vLLM judge's close() stops the engine every judge shares.
        context._LOADED.clear()
        context._LOADED.update(loaded)


@contextlib.contextmanager
def _fds(out: _Captured, err: _Captured) -> Iterator[None]:
    """File descriptors 1 and 2 pointed at the capture files (pytest's own capture, if any, is
    whatever they pointed at before, and gets them back)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(out.fd.fileno(), 1)
        os.dup2(err.fd.fileno(), 2)
        yield
    finally:
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
