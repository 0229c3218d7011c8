"""Issue #30's loud-but-wrong cases, in process, each with its negative control: top_logprobs below
the label count, an empty run directory, a lone surrogate in data, `choices` out of order,
SIGTERM/SIGHUP/SIGINT stopping a run cleanly."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest
from helpers.cli import assert_one_line_error, run_harness, run_in_process

from harness.errors import ConfigError, DataError


def test_top_logprobs_below_the_label_count_is_refused():
    from harness.judges.api import ApiJudge

    with pytest.raises(
        ConfigError, match="backend.top_logprobs=1 lists fewer tokens than the 2 answer labels"
    ):
        ApiJudge("m", "http://127.0.0.1:9/v1", logprob_mode="top", top_logprobs=1, api_key_env=None)
    # control: two listed tokens for two labels, and exact mode (which lists the ids it asks for)
    ApiJudge("m", "http://127.0.0.1:9/v1", logprob_mode="top", top_logprobs=2, api_key_env=None)
    ApiJudge(
        "m",
        "http://127.0.0.1:9/v1",
        logprob_mode="exact",
        token_ids={"A": 1, "B": 2},
        top_logprobs=1,
        api_key_env=None,
    )


def test_choices_are_read_by_index():
    from harness.judges.api import MalformedResponse, first_choice

    zero, one = {"index": 0, "logprobs": "zero"}, {"index": 1, "logprobs": "one"}
    assert first_choice({"choices": [one, zero]}) is zero  # was: choices[0], the index-1 answer
    assert first_choice({"choices": [zero, one]}) is zero  # control: in order
    assert first_choice({"choices": [{"logprobs": "x"}]})["logprobs"] == "x"  # no index: the only one
    with pytest.raises(MalformedResponse):
        first_choice({"choices": [one]})


def test_a_lone_surrogate_is_one_line_naming_file_line_and_field(tmp_path):
    from harness.data.common import iter_jsonl

    bad = tmp_path / "d.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": "half \\ud800 of a pair"}\n')
    with pytest.raises(DataError, match=r"d\.jsonl.*line 2.*lone surrogate \\ud800 in field 'text'"):
        list(iter_jsonl(bad))
    # control: a whole pair (an emoji written as two escapes) is a character
    good = tmp_path / "g.jsonl"
    good.write_text('{"text": "\\ud83d\\ude00"}\n')
    assert [v for _, v in iter_jsonl(good)] == [{"text": "\U0001f600"}]


def test_a_lone_surrogate_in_zepos_instruction_file_is_one_line_naming_file_and_key(tmp_path):
    """experiment.instruction.path to an init_prompts.json whose value holds "\\ud800": a TypeError
    traceback from the tokenizer (the JSONL fix did not cover this file). Now one line naming the
    file and the key, before any weights load. Control: the same file with a whole pair (an emoji)
    is read as its character."""
    from harness.prompts import load_zepo_instructions

    bad = tmp_path / "init_prompts.json"
    bad.write_text(
        '{"coherence": "Judge the coherence \\ud800 of the summaries.", "fluency": "Judge fluency."}'
    )
    r = run_in_process(
        [
            "experiment=zepo",
            "model=tiny_llama",
            "task.docs=3",
            "task.max_candidates=2",
            "experiment.search_docs=1",
            "experiment.instruction.source=zepo",
            f"experiment.instruction.path={bad}",
            "wandb.mode=disabled",
            "progress=false",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        tmp_path,
    )
    assert_one_line_error(r, str(bad), "lone surrogate \\ud800 in field 'coherence'")
    assert "loading the judge's weights" not in r.stdout + r.stderr
    bad.write_text(bad.read_text().replace("\\ud800", "\\ud83d\\ude00"))
    assert "\U0001f600" in load_zepo_instructions(bad)["coherence"]


@pytest.mark.parametrize(
    "args",
    [
        ["hydra.run.dir="],
        ["hydra.run.dir=''"],
        ["hydra.run.dir= "],
        ["hydra.run.dir=${oc.env:NOPE_RUN_DIR,}"],
        ['hydra.run.dir=${oc.select:nonexistent.key,""}'],
        ["-m", "hydra.sweep.dir=${oc.env:NOPE_SWEEP_DIR,}", "seed=0,1"],
    ],
    ids=["empty", "quotes", "blank", "unset variable", "missing key", "sweep dir, unset variable"],
)
def test_an_empty_run_dir_is_refused_before_hydra(args, tmp_path):
    """The run or sweep folder as RESOLVED, whatever spelling gives ''. It used to be the argv's text
    only: an interpolation resolving to '' wrote run.log, config.json and results.json (with -m,
    multirun.yaml and 0/) into the current folder, replacing its results.json. Now one line before
    Hydra creates anything (harness.runtime.rundirs, a Hydra callback; control below)."""
    (tmp_path / "cwd").mkdir()
    key = "hydra.sweep.dir" if "-m" in args else "hydra.run.dir"
    r = run_harness(
        [*args, "experiment=judge", "model=tiny_llama", "wandb.mode=disabled"],
        tmp_path,
        cwd=tmp_path / "cwd",
        timeout=120,
    )
    assert_one_line_error(r, f"{key} resolves to an empty value", "current folder")
    assert list((tmp_path / "cwd").iterdir()) == []


def test_negative_control_the_default_run_dir_is_made_where_the_command_is_typed(tmp_path):
    """What the check above keeps out of the current folder does land there when no check stops it:
    the default outputs/... (the run then stops at a missing data file, after Hydra made the folder)."""
    (tmp_path / "cwd").mkdir()
    r = run_harness(
        [
            "experiment=judge",
            "model=tiny_llama",
            "wandb.mode=disabled",
            "task=jsonl",
            f"task.path={tmp_path / 'none.jsonl'}",
        ],
        tmp_path,
        cwd=tmp_path / "cwd",
        timeout=120,
    )
    assert_one_line_error(r, "none.jsonl", "not found")
    assert [p.name for p in (tmp_path / "cwd").iterdir()] == ["outputs"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_end_the_attempt_and_exit_143(signum, tmp_path):
    from harness.runtime import entry
    from harness.runtime.attempts import read_attempts, record_attempt

    before = {s: signal.getsignal(s) for s in entry.STOP_SIGNALS}
    signal.signal(signum, signal.SIG_DFL)  # as a terminal's process has it (not nohup's SIG_IGN)
    entry.install_stop_handlers()
    try:
        with pytest.raises(entry.Stopped) as e:
            with record_attempt(tmp_path):
                os.kill(os.getpid(), signum)
                for _ in range(10**7):  # the handler runs between bytecodes
                    pass
        assert e.value.code == 143 and e.value.signum == signum
        assert [r["status"] for r in read_attempts(tmp_path)] == ["interrupted"]
    finally:
        for s, h in before.items():
            signal.signal(s, h)
    # Negative control: Python's default SIGTERM handling kills with no end line (run as a child;
    # its default set explicitly: under `nohup` the suite's children inherit SIGHUP ignored).
    import subprocess

    (tmp_path / "child").mkdir()
    code = (
        "import os, signal, sys; from harness.runtime.attempts import record_attempt\n"
        f"signal.signal({int(signum)}, signal.SIG_DFL)\n"
        f"with record_attempt(sys.argv[1]):\n    os.kill(os.getpid(), {int(signum)})\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "child")],
        capture_output=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert r.returncode == -signum
    lines = [json.loads(x) for x in (tmp_path / "child" / "attempts.jsonl").read_text().splitlines()]
    assert [x["event"] for x in lines] == ["start"]


def test_an_ignored_sighup_stays_ignored_under_nohup():
    """`nohup python -m harness.run ...`: the run inherits SIGHUP ignored and keeps it so (it would
    otherwise stop when the terminal hangs up); SIGTERM, not ignored, still ends the attempt."""
    from harness.runtime import entry

    before = {s: signal.getsignal(s) for s in entry.STOP_SIGNALS}
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        entry.install_stop_handlers()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # control: a default SIGHUP is trapped
        entry.install_stop_handlers()
        assert signal.getsignal(signal.SIGHUP) not in (signal.SIG_IGN, signal.SIG_DFL)
    finally:
        for s, h in before.items():
            signal.signal(s, h)


@pytest.mark.parametrize(
    "raised,code,needle",
    [(KeyboardInterrupt, 130, "interrupted (Ctrl-C)"), (None, 143, "stopped by SIGTERM")],
)
def test_sigint_and_sigterm_are_one_line_without_a_traceback(raised, code, needle, monkeypatch, capsys):
    from harness.runtime import entry

    def fake_hydra_main():
        raise raised() if raised else entry.Stopped(signal.SIGTERM)

    monkeypatch.setattr(sys, "argv", ["harness.run", "experiment=judge"])
    monkeypatch.setattr(entry, "hydra_main", fake_hydra_main)
    before = {s: signal.getsignal(s) for s in entry.STOP_SIGNALS}
    try:
        with pytest.raises(SystemExit) as e:
            entry.main()
    finally:
        for s, h in before.items():
            signal.signal(s, h)
    err = capsys.readouterr().err
    assert e.value.code == code and needle in err and "Traceback" not in err and len(err.splitlines()) == 1


def judge_then_sigterm(cfg, out_dir):
    """experiment=judge, then SIGTERM once it has returned: every file written, the process not yet
    ended (what a `scancel` racing a job's end delivers)."""
    from harness.experiments.judge import main

    result = main(cfg, out_dir)
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10**6):  # the handler runs between bytecodes
        pass
    return result


def sigterm_then_judge(cfg, out_dir):
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10**6):
        pass
    raise AssertionError("the SIGTERM did not stop the run")


@pytest.mark.parametrize(
    "entry, code, said",
    [
        ("judge_then_sigterm", 0, "note: SIGTERM arrived after the run had finished"),
        ("sigterm_then_judge", 143, "error: stopped by SIGTERM"),
    ],
    ids=["after the run finished", "control: before"],
)
def test_a_sigterm_after_the_run_finished_is_no_stop(entry, code, said, tmp_path):
    """A SIGTERM after ZEPO (any experiment) had written everything still said "stopped ... rerun to
    resume", exit 143. Now: attempts.jsonl records this process's attempt as completed, so one note
    and exit 0. The signal is sent from inside the run (experiment.entry wraps the shipped one) so
    it lands at that point every time. Control: a SIGTERM before the run: stopped, exit 143."""
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
            f"experiment.entry=test_loud_inputs:{entry}",
            f"hydra.run.dir={run}",
        ],
        tmp_path,
    )
    assert r.returncode == code and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith(("note:", "error:"))]
    assert len(lines) == 1 and lines[0].startswith(said)
    assert (run / "results.json").is_file() == (code == 0)


@pytest.mark.parametrize("damage", ["truncated", "bad header"])
def test_a_broken_weight_file_is_named(damage, tiny_llama, tmp_path):
    import shutil

    from harness.judges.weights import load_model_and_tokenizer

    model = tmp_path / "m"
    shutil.copytree(tiny_llama, model)
    f = model / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\xff" * 8 + data[8:])
    with pytest.raises(ConfigError, match=f"cannot load model from {f}: .*header"):
        load_model_and_tokenizer(model, None, "float32", "cpu")
    # control: the intact folder loads
    load_model_and_tokenizer(tiny_llama, None, "float32", "cpu")


@pytest.mark.parametrize("fixed", [True, False])
def test_timeout_bounds_a_whole_attempt_and_redirects_are_refused(fixed, tiny_judge, monkeypatch):
    import time

    import openai
    from helpers.servers import OpenAIServer

    from harness import api_client
    from harness.api_client import ApiError
    from harness.judges.api import ApiJudge
    from harness.records import PairRequest

    if not fixed:  # negative control: the defect put back (httpx's per-read timeout only)
        monkeypatch.setattr(api_client, "deadline_transport", lambda s: openai._httpx.HTTPTransport())
    req = [PairRequest("d", "a", "b", "Which is better? Answer:")]
    ids = {"A": 38, " A": 263, "B": 39, " B": 264}
    with OpenAIServer(judge=tiny_judge) as srv:
        # A body dripped over ~2.4 s (a byte every 0.03 s): each read is well inside timeout_s=1,
        # the attempt is not.
        srv.inject("drip:0.03", "drip:0.03")
        judge = ApiJudge(
            "tiny-test",
            srv.url,
            token_ids=ids,
            api_key_env=None,
            max_retries=1,
            backoff_base_s=0.01,
            timeout_s=1.0,
        )
        start = time.monotonic()
        if not fixed:  # waited for both whole drips, then read their (empty) answers
            assert judge.score_pairs(req)[0].flags == ("unreadable",) and time.monotonic() - start > 4
            return
        with pytest.raises(
            ApiError, match=r"2 attempts: every attempt timed out \(no whole answer within 1 s\)"
        ):
            judge.score_pairs(req)
        assert time.monotonic() - start < 4
        # control: the same judge reads an undelayed answer
        assert 0 < judge.score_pairs(req)[0].p_a < 1
        srv.inject("redirect:http://127.0.0.2:9/v1/chat/completions")
        with pytest.raises(
            ApiError, match=r"HTTP 307: the server redirects to http://127\.0\.0\.2:9/.*not followed"
        ):
            judge.score_pairs(req)
        assert [r.outcome for r in srv.requests][-1] == "redirect:http://127.0.0.2:9/v1/chat/completions"


def test_a_key_interpolated_into_the_run_dir_is_refused_before_any_folder(monkeypatch, capsys, tmp_path):
    from harness.redaction import check_overrides
    from harness.runtime import entry

    monkeypatch.setenv("HF_TOKEN", "hf_AbCdEf123456SECRETvalue")
    override = "hydra.run.dir=" + str(tmp_path / "${oc.env:HF_TOKEN}")
    monkeypatch.setattr(sys, "argv", ["harness.run", "experiment=judge", override])
    monkeypatch.setattr(entry, "hydra_main", lambda: pytest.fail("Hydra ran (and made the folder)"))
    with pytest.raises(SystemExit) as e:
        entry.main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and "hydra.run.dir=... carries a secret" in err and "SECRET" not in err
    assert list(tmp_path.iterdir()) == []
    # Negative control: the override as typed passes the check (what was checked before Hydra ran).
    check_overrides([override])
    monkeypatch.setenv("HF_TOKEN", "")  # control: an interpolation of no key is no secret
    check_overrides([entry.with_env_values(override)])
