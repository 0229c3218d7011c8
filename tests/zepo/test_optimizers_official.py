"""The official ZEPO meta-prompt (optimizer.meta_prompt=zepo) byte for byte, its verbatim replies,
the validator's treatment of terse paraphrases, and the log of every rejected output; against a
real loopback OpenAI-compatible server with scripted completions."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from helpers.servers import OpenAIServer

from harness.prompts import load_zepo_instructions
from harness.zepo.optimizers import ApiOptimizer
from harness.zepo.validation import validate

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "zepo_official.json").read_text())[
    "meta_prompt"
]
OURS = {"natural": "naturalness", "engaging": "engagingness"}
FAST = dict(api_key_env=None, backoff_base_s=0.01, timeout_s=5.0, concurrency=1)

# The shape of the instructions ZEPO's search ends with: init_prompts.json's last three sentences.
TERSE = (
    "Which summary candidate has better coherence? If the candidate A is better, please return 'A'. "
    "If the candidate B is better, please return 'B'. You must return the choice only."
)


def digest(text: str) -> dict:
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "len": len(text)}


@pytest.fixture(scope="module")
def raw(shared_data):
    return load_zepo_instructions(shared_data / "zepo" / "init_prompts.json", raw=True)


@pytest.mark.parametrize("key", sorted(GOLDEN["cases"]))
def test_official_meta_prompt_byte_for_byte(raw, key):
    aspect = OURS.get(key, key)
    opt = ApiOptimizer("gpt-3.5-turbo", "http://127.0.0.1:9/v1", meta_prompt="zepo", **FAST)
    content = opt.messages(raw[aspect], aspect)
    assert len(content) == 1 and content[0]["role"] == "user"
    assert digest(content[0]["content"]) == GOLDEN["cases"][key]
    # Negative control: this project's meta-prompt is a different text.
    default = ApiOptimizer("gpt-3.5-turbo", "http://127.0.0.1:9/v1", **FAST).messages(raw[aspect], aspect)
    assert digest(default[0]["content"]) != GOLDEN["cases"][key]


def test_official_mode_takes_replies_verbatim(raw, tmp_path):
    chatty = f'Sure! Here is the paraphrase:\n"{TERSE}"  '
    with OpenAIServer(script=["   ", chatty]) as srv:
        opt = ApiOptimizer("gpt-test", srv.url, meta_prompt="zepo", max_attempts=2, **FAST)
        opt.reject_log = tmp_path / "rejections.jsonl"
        assert opt.paraphrase(raw["coherence"], 1, seed=0, aspect="coherence") == [chatty]
        body = srv.requests[0].body
    assert body["temperature"] == 0.9 and "meta=zepo" in opt.identity
    assert (
        '"coherence"' in body["messages"][0]["content"] and raw["coherence"] in body["messages"][0]["content"]
    )
    rows = [json.loads(line) for line in (tmp_path / "rejections.jsonl").read_text().splitlines()]
    assert [(r["reason"], r["text"]) for r in rows] == [("empty", "   ")]
    # The default mode cleans the same reply.
    with OpenAIServer(script=[chatty]) as srv:
        assert ApiOptimizer("gpt-test", srv.url, **FAST).paraphrase(raw["coherence"], 1, 0, "coherence") == [
            TERSE
        ]


def test_terse_paraphrases_pass_and_degenerate_ones_do_not(raw):
    original = raw["coherence"]
    # Under the old rule (raw lengths, at least 0.3x) the terse instruction was rejected ...
    assert len(TERSE) / len(original) < 0.3
    # ... now lengths are compared without the file's runs of spaces, and 0.1x is the floor.
    assert validate(TERSE, original, "coherence", []) == (TERSE, None)
    assert validate("coherence: A or B?", original, "coherence", [])[1].startswith("length")
    assert validate(original + " " + original + " " + original + " x", original, "coherence", [])[
        1
    ].startswith("length")


def test_every_rejected_output_is_recorded_with_its_reason(raw, tmp_path):
    no_b = "Which summary has better coherence? Reply 'A' when candidate A is better."
    script = [
        "1. Judge coherence, answer A or B.\n2. Which is more coherent, A or B?",
        no_b,
        "Which is better written? Answer 'A' or 'B'.",
        TERSE,
    ]
    with OpenAIServer(script=script) as srv:
        opt = ApiOptimizer("gpt-test", srv.url, max_attempts=4, **FAST)
        opt.reject_log = tmp_path / "rejections.jsonl"
        assert opt.paraphrase(raw["coherence"], 1, seed=3, aspect="coherence") == [TERSE]
    rows = [json.loads(line) for line in (tmp_path / "rejections.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in rows] == [
        "a list of alternatives, not one instruction",
        "does not mention answer option(s) ['B']",
        "missing the aspect word 'coherence'",
    ]
    assert [r["text"] for r in rows] == script[:3] and [r["sample"] for r in rows] == [0, 1, 2]
    assert opt.rejections == 3 and all(r["seed"] == 3 and not r["cached"] for r in rows)
