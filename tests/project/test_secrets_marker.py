"""A secret never reaches anything a run writes: a marker key is set through every path a user
could put one (issue #14) and the whole test folder — run directory, request/completion caches,
the W&B folders (offline run, artifact staging, W&B's cache and config) — plus stdout and stderr
are searched for it byte by byte: 0 hits.

Paths: a secret-named key on the command line (`+backend.auth_token`, `authorization`, a
`*_token`), a key typed into `backend.api_key_env`, a `base_url` with `user:KEY@`, a Hydra
override that would set the variable (`hydra.job.env_set.OPENAI_API_KEY=`), a `base_url` with the
key in its query string (`?api-key=KEY`), a misspelt key name (`backend.api_kee=KEY`), the same
with `-m` (Hydra would write multirun.yaml and log the overrides first; with HYDRA_FULL_ERROR=1
too), and the variable
itself while a real run uses it against a loopback OpenAI-compatible server — once accepted (the
run completes, W&B offline on) and once rejected (the server's 401 echoes the key it got).

Negative control: a canary that is NOT a secret, put in the instruction of the same completed run,
is found by the same search in config.json, in W&B's binary run file and in the run's outputs —
so the search reads every kind of file it claims to, and a 0 is a real 0.
"""

from __future__ import annotations

import io
import logging
import sys
import uuid
from pathlib import Path

import pytest
from helpers.cli import assert_one_line_error, run_in_process
from helpers.servers import OpenAIServer

from harness.redaction import RedactingFilter, install_redaction
from harness.runtime.tracking import redacted_argv

ENV = "HARNESS_MARKER_API_KEY"
TINY = [
    "experiment=judge",
    "model=tiny_llama",
    "task.docs=1",
    "task.max_candidates=2",
    "progress=false",
    "wandb.mode=offline",
]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """Every W&B folder inside tmp, so the search covers all of them."""
    return {
        "WANDB_CACHE_DIR": str(tmp / "wandb-cache"),
        "WANDB_CONFIG_DIR": str(tmp / "wandb-config"),
        "WANDB_ARTIFACT_DIR": str(tmp / "wandb-artifacts"),
        **extra,
    }


def _hits(tmp: Path, needle: str, *streams: str) -> list[str]:
    """Every file under tmp (and every stream) holding `needle`, searched as bytes."""
    data = needle.encode()
    found = [
        str(p.relative_to(tmp))
        for p in sorted(tmp.rglob("*"))
        if p.is_file() and not p.is_symlink() and data in p.read_bytes()
    ]
    return found + [f"<stream {i}>" for i, s in enumerate(streams) if needle in s]


def _marker() -> str:
    """A key that matches no known key prefix: only the policy, not a pattern, can stop it."""
    return "Mk" + uuid.uuid4().hex[:12] + "Q" + uuid.uuid4().hex[:12]


REFUSED = {
    "auth_token": lambda m: [f"+backend.auth_token={m}"],
    "authorization": lambda m: [f"+backend.authorization=Bearer {m}"],
    "a *_token key": lambda m: [f"+model.hf_token={m}"],
    "a key in api_key_env": lambda m: ["backend=api", f"backend.api_key_env={m}"],
    "base_url with user:KEY@": lambda m: ["backend=api", f"backend.base_url=http://user:{m}@127.0.0.1:9/v1"],
    "hydra env_set": lambda m: [f"+hydra.job.env_set.OPENAI_API_KEY={m}"],
    "base_url with ?api-key=KEY": lambda m: [
        "backend=api",
        f'backend.base_url="http://127.0.0.1:9/v1?api-key={m}"',
    ],
    "a misspelt key name": lambda m: [f"backend.api_kee={m}"],
}

MULTIRUN = {
    "+backend.api_key": lambda m: [f"+backend.api_key={m}"],
    "hydra env_set": lambda m: [f"+hydra.job.env_set.OPENAI_API_KEY={m}"],
    "a misspelt key name": lambda m: [f"backend.api_kee={m}"],
    "a misspelt added key": lambda m: [f"+backend.api_kee={m}"],
    "base_url with ?x=1&access_token=KEY": lambda m: [
        "backend=api",
        f'backend.base_url="http://127.0.0.1:9/v1?x=1&access_token={m}"',
    ],
}


@pytest.mark.parametrize("path", list(REFUSED))
def test_secret_on_the_command_line_is_refused_and_written_nowhere(tmp_path, path):
    marker = _marker()
    r = run_in_process(
        [*TINY, *REFUSED[path](marker), f"hydra.run.dir={tmp_path / 'run'}"],
        tmp_path,
        env=_env(tmp_path),
        timeout=180,
    )
    assert_one_line_error(r, "environment variable")
    assert _hits(tmp_path, marker, r.stdout, r.stderr) == []


@pytest.mark.parametrize("full_error", ["0", "1"])
@pytest.mark.parametrize("path", list(MULTIRUN))
def test_secret_in_a_multirun_is_refused_before_hydra_writes_anything(tmp_path, path, full_error):
    """With -m Hydra writes every override to multirun.yaml and logs it before any job runs, and its
    errors (HYDRA_FULL_ERROR=1: a traceback) repeat the value: the overrides are checked first."""
    marker = _marker()
    r = run_in_process(
        [
            "-m",
            *TINY,
            *MULTIRUN[path](marker),
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        tmp_path,
        env=_env(tmp_path, HYDRA_FULL_ERROR=full_error),
        timeout=180,
    )
    assert_one_line_error(r, "environment variable")
    assert not (tmp_path / "sweep").exists()
    assert _hits(tmp_path, marker, r.stdout, r.stderr) == []


def test_negative_control_a_multirun_writes_its_overrides_where_the_search_looks(tmp_path):
    """The same search over a multirun that is not refused finds an innocent canary override in
    multirun.yaml, the job's overrides.json and Hydra's launch line on stdout/stderr."""
    canary = "canary-" + uuid.uuid4().hex
    r = run_in_process(
        [
            "-m",
            *TINY,
            "experiment.instruction.source=text",
            f"experiment.instruction.text='Which is better ({canary})? Answer A or B.'",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        tmp_path,
        env=_env(tmp_path),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    found = _hits(tmp_path, canary, r.stdout + r.stderr)
    assert "sweep/multirun.yaml" in found and "sweep/0/overrides.json" in found and "<stream 0>" in found, (
        found
    )


@pytest.fixture(scope="module")
def api_runs(tmp_path_factory, tiny_judge):
    """Two real API runs reading the key from the environment: one the server accepts (W&B on), one
    it rejects with a 401 that echoes the key."""
    tmp = tmp_path_factory.mktemp("marker")
    good, wrong, canary = _marker(), _marker(), "canary-" + uuid.uuid4().hex
    base = [
        *TINY,
        "backend=api",
        f"backend.api_key_env={ENV}",
        "backend.tokenizer=tiny:llama",
        "backend.max_retries=0",
        "experiment.instruction.source=text",
        f"experiment.instruction.text='Which summary is better ({canary})? Answer A or B.'",
    ]
    with OpenAIServer(judge=tiny_judge, api_key=good, model="tiny-llama") as srv:
        ok = run_in_process(
            [*base, f"backend.base_url={srv.url}", f"hydra.run.dir={tmp / 'ok' / 'run'}"],
            tmp / "ok",
            env=_env(tmp / "ok", **{ENV: good}),
            timeout=600,
        )
        bad = run_in_process(
            [*base, f"backend.base_url={srv.url}", f"hydra.run.dir={tmp / 'bad' / 'run'}"],
            tmp / "bad",
            env=_env(tmp / "bad", **{ENV: wrong}),
            timeout=600,
        )
        sent = list(srv.requests)
    return tmp, good, wrong, canary, ok, bad, sent


def test_key_in_use_reaches_the_server_and_nothing_else(api_runs):
    tmp, good, _, _, ok, _, sent = api_runs
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert any(r.authorized for r in sent)  # the key was really used
    assert list((tmp / "ok" / "run" / "wandb").glob("offline-run-*")), "W&B did not run"
    assert (tmp / "ok" / "cache" / "requests.sqlite").is_file()
    assert _hits(tmp / "ok", good, ok.stdout, ok.stderr) == []


def test_rejected_key_is_not_repeated_by_the_error(api_runs):
    tmp, _, wrong, _, _, bad, sent = api_runs
    assert any(r.outcome == "401" for r in sent)  # the server saw it and echoed it back
    assert_one_line_error(bad, "401")
    assert _hits(tmp / "bad", wrong, bad.stdout, bad.stderr) == []


def test_negative_control_the_search_finds_a_written_canary(api_runs):
    tmp, _, _, canary, ok, _, _ = api_runs
    found = _hits(tmp / "ok", canary)
    assert "run/config.json" in found and "run/results.json" in found, found
    assert any(f.startswith("run/wandb/") and f.endswith(".wandb") for f in found), found  # W&B's binary file


def test_log_records_and_tracebacks_lose_secret_values(monkeypatch, capsys):
    """Whatever logs a secret variable's value by mistake (a message, an exception's traceback,
    an uncaught traceback) is redacted on its way to stderr/run.log; without the filter the same
    record carries it (the negative control)."""
    marker = _marker()
    monkeypatch.setenv("SOME_SERVICE_TOKEN", marker)  # a secret-like NAME: redacted without being named
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    plain = io.StringIO()
    control = logging.StreamHandler(plain)
    logger = logging.getLogger("marker-test")
    logger.addHandler(control)
    logger.error("calling with %s", marker)
    logger.removeHandler(control)
    assert marker in plain.getvalue()  # negative control: unfiltered, the value is there
    root = logging.getLogger()
    root.addHandler(handler)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    try:
        install_redaction()
        assert any(isinstance(f, RedactingFilter) for f in handler.filters)
        logger.error("calling with %s", marker)
        try:
            raise RuntimeError(f"server said: bad key {marker}")
        except RuntimeError:
            logger.exception("request failed")
            sys.excepthook(*sys.exc_info())
    finally:
        root.removeHandler(handler)
        for h in root.handlers:  # leave no filter behind: it would hide a leak from later tests
            for f in [f for f in h.filters if isinstance(f, RedactingFilter)]:
                h.removeFilter(f)
    out = stream.getvalue()
    assert "calling with ***" in out and "RuntimeError: server said: bad key ***" in out and marker not in out
    assert marker not in capsys.readouterr().err


def test_wandb_sees_a_redacted_command_line(monkeypatch):
    marker = _marker()
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "harness",
            "task=summeval",
            f"+backend.auth_token={marker}",
            f"backend.base_url=http://u:{marker}@h/v1",
        ],
    )
    with redacted_argv():
        seen = list(sys.argv)
    assert marker not in " ".join(seen) and seen[1] == "task=summeval" and sys.argv[2].endswith(marker)
