"""Optimizers: validation rules, re-asks, dedupe, faults and the resume cache against a real
loopback server with scripted completions; LocalOptimizer's sampling plumbing on the tiny model."""

from __future__ import annotations

import logging
import uuid

import pytest
from helpers.servers import OpenAIServer

from harness.api_client import ApiError, CompletionCache
from harness.prompts import load_zepo_instructions
from harness.zepo.optimizers import (
    ApiOptimizer,
    LocalOptimizer,
    Optimizer,
    ParaphraseError,
)
from harness.zepo.sampling import sample_tokens
from harness.zepo.validation import aspect_word, clean, sample_seed, validate

ENV = "HARNESS_TEST_OPTIMIZER_KEY"
FAST = dict(api_key_env=None, backoff_base_s=0.01, timeout_s=5.0)


@pytest.fixture(scope="module")
def fluency(shared_data) -> str:
    return load_zepo_instructions(shared_data / "zepo" / "init_prompts.json")["fluency"]


def good(i: int) -> str:
    return (
        f"Variant {i}: read both summary candidates and judge which one shows better fluency, "
        f"meaning smoother and more grammatical sentences. If candidate A reads better, reply 'A'; "
        f"if candidate B reads better, reply 'B'. Give only the letter."
    )


GARBAGE_EMPTY = "   "
GARBAGE_LIST = (
    "1. Judge the fluency of A and B and answer 'A' or 'B'.\n"
    "2. Which candidate, A or B, has better fluency? Answer A or B.\n"
    "3. Compare fluency; reply 'A' if A wins, 'B' if B wins."
)
GARBAGE_NO_ASPECT = (
    "Read both summary candidates and decide which one is written better overall. If candidate A "
    "is better, reply 'A'; if candidate B is better, reply 'B'. Return only the letter."
)


def test_validation_rules(fluency):
    seen = [good(1)]
    ok = lambda t: validate(t, fluency, "fluency", seen)  # noqa: E731
    assert ok(good(2)) == (good(2), None)
    assert ok(f'Paraphrase: "{good(2)}"') == (good(2), None)
    assert ok(f"Sure! Here is a rewritten instruction:\n\n{good(2)}") == (good(2), None)
    assert ok(GARBAGE_EMPTY)[1] == "empty"
    assert ok(GARBAGE_LIST)[1] == "a list of alternatives, not one instruction"
    assert ok(GARBAGE_NO_ASPECT)[1] == "missing the aspect word 'fluency'"
    assert (
        ok(
            "Which candidate has better FLUENCY? If A is better, say 'A'. Otherwise reply with the other letter, "
            "the one that is not A, and nothing else at all please."
        )[1]
        == "does not mention answer option(s) ['B']"
    )
    # A sentence-initial article 'A' is not the answer label A.
    assert (
        "'A'"
        in ok(
            "A summary with better fluency wins. Reply 'B' if candidate B has it; "
            "otherwise reply with the first letter of the alphabet, and only that letter."
        )[1]
    )
    assert ok("Fluency: A or B?")[1].startswith("length")
    assert ok(fluency * 4)[1].startswith("length")
    assert ok("  " + fluency.upper() + "  ")[1] == "same as the original"
    assert (
        ok(good(1).replace("Variant", "VARIANT").replace(" ", "  \n"))[1]
        == "duplicate of an earlier candidate"
    )
    assert clean("```\nInstruction: 'x'\n```") == "x"


def test_aspect_word_follows_the_instruction(shared_data):
    zepo = load_zepo_instructions(shared_data / "zepo" / "init_prompts.json")
    assert aspect_word("engagingness", zepo["engagingness"]) == "engaging"
    assert aspect_word("naturalness", zepo["naturalness"]) == "naturalness"
    assert aspect_word("coherence", zepo["coherence"]) == "coherence"


def test_reasks_garbage_dedupes_and_reports_metadata(fluency):
    script = [
        good(1),
        GARBAGE_EMPTY,
        GARBAGE_LIST,  # round 1: slots 0, 1, 2
        good(1),
        GARBAGE_NO_ASPECT,  # round 2: slots 1, 2 (a duplicate, no aspect)
        good(2),
        good(3),
    ]  # round 3
    with OpenAIServer(script=script) as srv:
        opt = ApiOptimizer("gpt-test", srv.url, concurrency=1, max_attempts=3, **FAST)
        assert isinstance(opt, Optimizer)
        prop = opt.propose(fluency, n=3, seed=7, aspect="fluency")
    assert prop.texts == [good(1), good(2), good(3)]
    assert [c.attempts for c in prop.candidates] == [1, 3, 3]
    assert [r.reason for r in prop.candidates[1].rejected] == ["empty", "duplicate of an earlier candidate"]
    assert [r.reason for r in prop.candidates[2].rejected] == [
        "a list of alternatives, not one instruction",
        "missing the aspect word 'fluency'",
    ]
    assert [c.sample for c in prop.candidates] == [0, 5, 6] and prop.samples == 7 and opt.calls == 7
    bodies = [r.body for r in srv.requests]
    assert len(bodies) == 7 and all(b["model"] == "gpt-test" and b["temperature"] == 0.9 for b in bodies)
    assert [b["seed"] for b in bodies] == [sample_seed(7, i) for i in range(7)]
    assert len({b["seed"] for b in bodies}) == 7
    prompt = bodies[0]["messages"][0]["content"]
    assert fluency in prompt and '"fluency"' in prompt and "ONE" in prompt


def test_avoid_list_counts_as_duplicates(fluency):
    with OpenAIServer(script=[good(1), good(2)]) as srv:
        opt = ApiOptimizer("gpt-test", srv.url, concurrency=1, **FAST)
        prop = opt.propose(fluency, n=1, seed=0, aspect="fluency", avoid=[good(1)])
    assert (
        prop.texts == [good(2)]
        and prop.candidates[0].rejected[0].reason == "duplicate of an earlier candidate"
    )


def test_gives_up_with_a_clear_error_after_max_attempts(fluency):
    with OpenAIServer(script=[GARBAGE_NO_ASPECT, GARBAGE_LIST] * 3) as srv:
        opt = ApiOptimizer("gpt-test", srv.url, concurrency=2, max_attempts=2, **FAST)
        with pytest.raises(
            ParaphraseError,
            match=r"no valid paraphrase for 2 of 2 slots after 2 attempts each; "
            r"reasons: a list of alternatives.*missing the aspect word",
        ):
            opt.paraphrase(fluency, n=2, seed=0, aspect="fluency")
    assert len(srv.requests) == 4


def test_survives_server_faults(fluency):
    with OpenAIServer(script=[good(i) for i in range(4)]) as srv:
        srv.inject("429:0", "500", "malformed", "no_choices", "content_type")
        opt = ApiOptimizer("gpt-test", srv.url, concurrency=1, max_retries=5, **FAST)
        texts = opt.paraphrase(fluency, n=4, seed=1, aspect="fluency")
    assert texts == [good(i) for i in range(4)]
    assert len(srv.requests) == 9 and len(srv.ok_requests()) == 4 and set(srv.successes.values()) == {1}
    assert opt.client.stats["retries"] == 5


def test_completion_cache_makes_a_resumed_run_send_nothing(fluency, tmp_path, monkeypatch, caplog):
    key = f"sk-opt-{uuid.uuid4().hex}"
    monkeypatch.setenv(ENV, key)
    by_seed = {sample_seed(3, i): t for i, t in enumerate([good(0), GARBAGE_LIST, good(1), good(2), good(3)])}
    by_seed.update({sample_seed(4, i): good(10 + i) for i in range(5)})
    kw = dict(concurrency=4, api_key_env=ENV, backoff_base_s=0.01, timeout_s=5.0)
    with (
        caplog.at_level(logging.DEBUG),
        OpenAIServer(script=lambda b: by_seed[b["seed"]], api_key=key) as srv,
    ):
        srv.inject("500")
        first = ApiOptimizer("gpt-test", srv.url, cache=tmp_path / "opt.sqlite", **kw).propose(
            fluency, n=4, seed=3, aspect="fluency"
        )
        sent = len(srv.requests)
        resumed = ApiOptimizer("gpt-test", srv.url, cache=tmp_path / "opt.sqlite", **kw)
        again = resumed.propose(fluency, n=4, seed=3, aspect="fluency")
        assert len(srv.requests) == sent and resumed.calls == 0  # zero requests on resume
        assert again.candidates == first.candidates and again.cache_hits == again.samples == 5
        other = resumed.propose(fluency, n=4, seed=4, aspect="fluency")  # another seed is another sample
        assert other.texts == [good(10 + i) for i in range(4)] and len(srv.requests) == sent + 4
        cooler = ApiOptimizer("gpt-test", srv.url, cache=tmp_path / "opt.sqlite", temperature=0.5, **kw)
        cooler.propose(fluency, n=1, seed=3, aspect="fluency")  # temperature is part of the key
        assert cooler.calls == 1
    assert first.texts == [good(0), good(3), good(1), good(2)]  # slot 1 re-asked in round 2 (sample 4)
    assert all(r.authorized for r in srv.requests) and sent == 6
    assert len(CompletionCache(tmp_path / "opt.sqlite")) == 5 + 4 + 1
    for f in tmp_path.rglob("*"):
        assert not f.is_file() or key.encode() not in f.read_bytes()
    assert key not in caplog.text and key not in repr(resumed)


def test_other_served_weights_under_the_same_name_are_another_optimizer(fluency, tmp_path, caplog):
    """The optimizer's identity and cache keys hold what /v1/models serves (`<id>@<root>`), as the
    API judge's do: a server restarted on other weights under the same name gets its own requests
    (its paraphrases were replayed from the old weights' cache, 0 requests, and ZEPO's resume hash,
    built on the identity, matched). A name the server does not list: `unreported`, one warning."""
    with OpenAIServer(script=lambda b: good(b["seed"] % 7), model="gpt-test", root="/w/base") as srv:
        base = ApiOptimizer("gpt-test", srv.url, cache=tmp_path / "opt.sqlite", **FAST)
        first = base.paraphrase(fluency, n=2, seed=3, aspect="fluency")
        srv.root = "/w/finetune"  # restarted on other weights, same URL and name
        tuned = ApiOptimizer("gpt-test", srv.url, cache=tmp_path / "opt.sqlite", **FAST)
        assert tuned.paraphrase(fluency, n=2, seed=3, aspect="fluency") == first
        assert tuned.calls == 2 and base.calls == 2  # asked again, not replayed
        assert "|served=gpt-test@/w/base|" in base.identity and "@/w/finetune|" in tuned.identity
        same = ApiOptimizer("gpt-test", srv.url, cache=tmp_path / "opt.sqlite", **FAST)
        same.paraphrase(fluency, n=2, seed=3, aspect="fluency")
        assert same.calls == 0  # control: the same weights are served from the cache
        with caplog.at_level(logging.WARNING, logger="harness.api_client"):
            other = ApiOptimizer("not-served", srv.url, **FAST).identity
    assert "|served=unreported|" in other
    assert [r.getMessage() for r in caplog.records if "not-served" in r.getMessage()] == [
        f"{srv.url}/models does not list model 'not-served': the optimizer's identity cannot name the "
        "served weights, so cached answers are keyed on the model name alone"
    ]


def test_api_errors_propagate(fluency):
    with OpenAIServer(script=[good(0)], api_key="sk-right-1234567890") as srv:
        opt = ApiOptimizer("gpt-test", srv.url, api_key_env=None, backoff_base_s=0.01, timeout_s=5.0)
        with pytest.raises(ApiError, match="HTTP 401"):
            opt.paraphrase(fluency, n=1, seed=0, aspect="fluency")


# -- LocalOptimizer --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_optimizer(tiny_judge):
    return LocalOptimizer(
        "tiny-llama",
        model=tiny_judge.model,
        tokenizer=tiny_judge.tokenizer,
        device="cpu",
        max_new_tokens=12,
        max_attempts=2,
    )


def test_local_sampling_is_seeded_bounded_and_matches_plain_greedy_decoding(
    tiny_judge, tiny_optimizer, fluency
):
    import torch

    model = tiny_judge.model
    prompt = tiny_optimizer.prompt_ids(tiny_optimizer.messages(fluency, "fluency"))[-48:]  # short: fast
    a = sample_tokens(model, prompt, [1, 2, 1], max_new_tokens=10, temperature=0.9, top_p=1.0, stop_ids=set())
    assert a[0] == a[2] and a[0] != a[1] and all(len(r) == 10 for r in a)
    assert (
        sample_tokens(model, prompt, [2], max_new_tokens=10, temperature=0.9, top_p=1.0, stop_ids=set())[0]
        == a[1]
    )
    # Greedy with the KV cache equals greedy by full recomputation at every step.
    greedy = sample_tokens(model, prompt, [0], max_new_tokens=6, temperature=0.0, top_p=1.0, stop_ids=set())[
        0
    ]
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(6):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert greedy == ids[len(prompt) :]
    # A stop token ends a row and is not returned.
    stopped = sample_tokens(
        model, prompt, [0], max_new_tokens=6, temperature=0.0, top_p=1.0, stop_ids={greedy[2]}
    )[0]
    assert stopped == greedy[: greedy.index(greedy[2])]
    # top_p this small keeps only the most likely token: sampling becomes greedy.
    assert (
        sample_tokens(model, prompt, [5], max_new_tokens=6, temperature=0.9, top_p=1e-6, stop_ids=set())[0]
        == greedy
    )


def test_local_optimizer_with_a_random_model_fails_clearly_and_caches(tiny_judge, fluency, tmp_path):
    opt = LocalOptimizer(
        "tiny-llama",
        model=tiny_judge.model,
        tokenizer=tiny_judge.tokenizer,
        device="cpu",
        max_new_tokens=12,
        max_attempts=2,
        cache=tmp_path / "local.sqlite",
    )
    assert opt.stop_ids == {
        tiny_judge.tokenizer.eos_token_id,
        tiny_judge.tokenizer.convert_tokens_to_ids("<|im_end|>"),
    }
    with pytest.raises(
        ParaphraseError,
        match=r"optimizer tiny-llama gave no valid paraphrase for 3 of 3 slots "
        r"after 2 attempts each",
    ) as e:
        opt.paraphrase(fluency, n=3, seed=0, aspect="fluency")
    assert opt.calls == 6 and sorted(e.value.rejected) == [0, 1, 2]
    assert all(
        len(r) == 2 and r[0].sample in range(3) and r[1].sample in range(3, 6)
        for r in e.value.rejected.values()
    )
    again = LocalOptimizer(
        "tiny-llama",
        model=tiny_judge.model,
        tokenizer=tiny_judge.tokenizer,
        device="cpu",
        max_new_tokens=12,
        max_attempts=2,
        cache=tmp_path / "local.sqlite",
    )
    with pytest.raises(ParaphraseError):
        again.paraphrase(fluency, n=3, seed=0, aspect="fluency")
    assert again.calls == 0  # every sample came from the cache


@pytest.mark.slow
def test_smollm2_writes_one_paraphrase_attempt(smollm2_path, fluency):
    opt = LocalOptimizer(
        smollm2_path,
        name="SmolLM2-135M-Instruct",
        device="cpu",
        dtype="float32",
        max_new_tokens=48,
        max_attempts=1,
    )
    assert opt.stop_ids and opt.tokenizer.chat_template  # ChatML: <|im_end|> ends the turn
    try:
        prop = opt.propose(fluency, n=1, seed=0, aspect="fluency")
        text, reason = prop.candidates[0].text, None
    except ParaphraseError as e:  # a 135M model often breaks a rule; the error must say which
        (rejection,) = e.rejected[0]
        text, reason = rejection.text, rejection.reason
        assert reason in str(e)
    print(f"SmolLM2 attempt ({reason or 'valid'}): {text!r}")
    assert opt.calls == 1 and text.strip() and "<|im" not in text
    assert (
        len(opt.tokenizer(text, add_special_tokens=False)["input_ids"]) <= 48 + 2
    )  # re-tokenizing may split
