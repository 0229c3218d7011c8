"""ApiJudge against a real loopback server backed by the tiny model: same P(A) as HFJudge,
transport and content faults survived with exactly-once answers, unusable answers flagged (never a
silent 0.5, never cached, counted in results.json), and an API key that never leaks."""

from __future__ import annotations

import copy
import logging
import math
import uuid
from collections import Counter

import pytest
from helpers.cli import assert_one_line_error, run_in_process
from helpers.data import own_jsonl
from helpers.servers import FAST, OpenAIServer

from harness.api_client import ApiClient, ApiError, HttpSettings
from harness.errors import ConfigError
from harness.judges.answers import renormalise
from harness.judges.api import ApiJudge
from harness.judges.cache import CachedJudge, ScoreCache
from harness.judges.hf import HFJudge
from harness.prompts import default_instruction, render
from harness.records import Candidate, Document, PairRequest

ENV = "HARNESS_TEST_API_KEY"


def _requests() -> list[PairRequest]:
    docs = [
        Document(
            "d1",
            "The council approved a new park after a long debate about costs.",
            (Candidate("s1", "Council approves park."), Candidate("s2", "A debate happened about money.")),
        ),
        Document(
            "d2",
            "User: any tips for learning the guitar?",
            (Candidate("r1", "Practice chords daily."), Candidate("r2", "I like pizza.")),
        ),
        Document(
            "d3",
            "Heavy rain closed two roads in the valley on Monday.",
            (
                Candidate("a", "Rain closed roads."),
                Candidate("b", "Monday was a day."),
                Candidate("c", "Two valley roads shut by rain."),
            ),
        ),
    ]
    out = []
    for d in docs:
        instr = default_instruction("coherence", "summarization")
        for a in d.candidates:
            for b in d.candidates:
                if a.id != b.id:
                    out.append(PairRequest(d.id, a.id, b.id, render(d, a, b, instr, "summarization")))
    return out


REQUESTS = _requests()


@pytest.fixture
def key(monkeypatch) -> str:
    value = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv(ENV, value)
    return value


@pytest.fixture(scope="module")
def local_scores(tiny_judge):
    return tiny_judge.score_pairs(REQUESTS)


def _assert_same(api_scores, local_scores, tol=1e-5):
    assert len(api_scores) == len(local_scores)
    for got, want in zip(api_scores, local_scores):
        assert got.p_a == pytest.approx(want.p_a, abs=tol)
        assert set(got.token_logprobs) == set(want.token_logprobs)
        for k, v in want.token_logprobs.items():
            assert got.token_logprobs[k] == pytest.approx(v, abs=1e-4)


def test_exact_mode_matches_local_judge(tiny_judge, tiny_llama, local_scores, key):
    with OpenAIServer(judge=tiny_judge, api_key=key) as srv:
        judge = ApiJudge(
            "tiny-test", srv.url, tokenizer=str(tiny_llama), api_key_env=ENV, concurrency=3, **FAST
        )
        scores = judge.score_pairs(REQUESTS)
        # the served model as /v1/models lists it (asked once, while the server runs)
        assert judge.identity == (
            f"api|{srv.url}|tiny-test|chat|A:A=38;A: A=263;B:B=39;B: B=264|sys=e3b0c44298fc|served=tiny-test"
        )
    assert judge.mode == "exact"
    _assert_same(scores, local_scores)
    assert len({s.p_a for s in scores}) > 3  # the tiny model really discriminates between prompts
    bodies = [r.body for r in srv.ok_requests()]
    assert len(bodies) == len(REQUESTS) and all(r.authorized for r in srv.requests)
    assert all(
        b["logprob_token_ids"] == [38, 263, 39, 264]
        and b["max_tokens"] == 1
        and b["temperature"] == 0
        and b["logprobs"] is True
        and b["messages"] == [{"role": "user", "content": b["messages"][0]["content"]}]
        for b in bodies
    )
    assert sorted(b["messages"][0]["content"] for b in bodies) == sorted(r.prompt for r in REQUESTS)
    assert judge.stats["missing"] == 0 and judge.stats["unreadable"] == 0


def test_exact_mode_from_configured_token_ids_and_system_prompt(tiny_judge, tiny_llama):
    system = "You are a careful and impartial judge."
    local = HFJudge(
        tiny_llama, system_prompt=system, model=tiny_judge.model, tokenizer=tiny_judge.tokenizer, device="cpu"
    )
    want = local.score_pairs(REQUESTS[:5])
    with OpenAIServer(judge=tiny_judge) as srv:
        judge = ApiJudge(
            "tiny-test",
            srv.url,
            token_ids={"A": 38, " A": 263, "B": 39, " B": 264},
            system_prompt=system,
            api_key_env=None,
            **FAST,
        )
        got = judge.score_pairs(REQUESTS[:5])
    _assert_same(got, want)
    assert srv.requests[0].body["messages"][0] == {"role": "system", "content": system}
    assert want[0].p_a != pytest.approx(
        tiny_judge.score_pairs(REQUESTS[:1])[0].p_a, abs=1e-6
    )  # system prompt matters


def _biased_judge(tiny_judge, tiny_llama, bias: float | dict[str, float]) -> HFJudge:
    """The tiny model with a logit bias on the answer ids (one for all, or per variant key such as
    'A: A'): its A/B tokens rank inside the top 20."""
    import torch

    model = copy.deepcopy(tiny_judge.model)
    old = model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        for key, tid in zip(tiny_judge.answers.keys, tiny_judge.answers.all_ids):
            head.bias[tid] = bias[key] if isinstance(bias, dict) else bias
    model.lm_head = head
    return HFJudge(tiny_llama, model=model, tokenizer=tiny_judge.tokenizer, device="cpu", batch_size=4)


def test_top_mode_matches_local_judge_when_answers_are_in_the_top_k(tiny_judge, tiny_llama):
    biased = _biased_judge(tiny_judge, tiny_llama, bias=14.0)
    requests = REQUESTS[::2]
    want = biased.score_pairs(requests)
    with OpenAIServer(judge=biased) as srv:
        judge = ApiJudge("tiny-test", srv.url, logprob_mode="top", top_logprobs=20, api_key_env=None, **FAST)
        got = judge.score_pairs(requests)
        # Precondition checked on the server's own distribution: every variant ranks in the top 20,
        # and other tokens rank among them (the read-out must pick the right entries).
        worst = 0
        for r in requests:
            lp = srv.next_token_logprobs(
                srv.tokens_for("/v1/chat/completions", {"messages": [{"role": "user", "content": r.prompt}]})
            )
            top = lp.topk(20).indices.tolist()
            assert all(i in top for i in biased.answers.all_ids)
            worst = max(worst, *(top.index(i) for i in biased.answers.all_ids))
        assert worst > 3
        assert judge.mode == "top" and judge.identity.endswith("top20:A,B|sys=e3b0c44298fc|served=tiny-test")
    _assert_same(got, want)
    assert judge.stats["missing"] == 0
    assert all("logprob_token_ids" not in r.body and r.body["top_logprobs"] == 20 for r in srv.requests)


def test_top_mode_reports_missing_variants(tiny_judge, tiny_llama):
    """A's answer tokens lifted into the top 20 of some prompts: some answers list both labels (a
    variant or two missing, reported), some list A alone (unreadable: P(A) would be exactly 1), some
    no label (asked again, then unreadable)."""
    odd = [PairRequest("odd", "a", "b", p) for p in ("x y z " * 50, "the the the the", "0123456789 " * 10)]
    requests = REQUESTS[::3] + odd
    with OpenAIServer(
        judge=_biased_judge(tiny_judge, tiny_llama, {"A:A": 5.0, "A: A": 5.0, "B:B": 0.0, "B: B": 0.0})
    ) as srv:
        judge = ApiJudge("tiny-test", srv.url, logprob_mode="top", top_logprobs=20, api_key_env=None, **FAST)
        got = judge.score_pairs(requests)
        expected_missing, expected_unreadable, expected_unlisted = 0, 0, 0
        for r, s in zip(requests, got):
            lp = srv.next_token_logprobs(
                srv.tokens_for("/v1/chat/completions", {"messages": [{"role": "user", "content": r.prompt}]})
            )
            top = set(lp.topk(20).indices.tolist())
            present = {
                k: float(lp[i])
                for k, i in zip(tiny_judge.answers.keys, tiny_judge.answers.all_ids)
                if i in top
            }
            expected_missing += (4 - len(present)) if present else 0  # a label-less answer is asked again,
            assert set(s.token_logprobs) == set(present)  # then unreadable (nothing read)
            labels_listed = {k.split(":")[0] for k in present}
            if labels_listed != {"A", "B"}:  # a label with no listed spelling: P(A) would be exactly 0 or 1
                expected_unreadable += 1
                expected_unlisted += bool(present)
                assert math.isnan(s.p_a) and s.flags == ("unreadable",)  # never a silent 0.5, 0 or 1
            else:
                a = [v for k, v in present.items() if k.startswith("A:")]
                b = [v for k, v in present.items() if k.startswith("B:")]
                lse = lambda xs: math.log(sum(math.exp(x) for x in xs)) if xs else -math.inf  # noqa: E731
                assert s.p_a == pytest.approx(renormalise(lse(a), [lse(b)]), abs=1e-6)
    # This prompt set exercises every path: both labels read, one label listed, none.
    assert 0 < expected_unlisted < expected_unreadable < len(requests)
    assert judge.stats["missing"] == expected_missing and judge.stats["unreadable"] == expected_unreadable
    assert judge.stats["unlisted"] == expected_unlisted


def test_legacy_completions_endpoint_sends_the_raw_prompt(tiny_judge):
    with OpenAIServer(judge=tiny_judge) as srv:
        judge = ApiJudge(
            "tiny-test",
            srv.url,
            endpoint="completions",
            token_ids={"A": 38, " A": 263, "B": 39, " B": 264},
            api_key_env=None,
            **FAST,
        )
        got = judge.score_pairs(REQUESTS[:4])
    rows = [tiny_judge.tokenizer(r.prompt)["input_ids"] for r in REQUESTS[:4]]
    want = [tiny_judge.answers.score(lp) for lp in tiny_judge.answer_logprobs(rows)]
    _assert_same(got, want)
    assert all(
        r.path == "/v1/completions" and r.body["prompt"] in {q.prompt for q in REQUESTS} for r in srv.requests
    )


def test_faults_are_survived_and_every_request_is_answered_exactly_once(tiny_judge, local_scores, caplog):
    faults = ["429:1", "500", "hang", "malformed", "content_type", "no_choices", "disconnect", "500"]
    # The client timeout is far above a tiny-model forward (ms) even on a loaded machine, so the
    # only timeout is the injected hang.
    with OpenAIServer(judge=tiny_judge, hang_s=5.0) as srv:
        srv.inject(*faults)
        judge = ApiJudge(
            "tiny-test",
            srv.url,
            token_ids={"A": 38, " A": 263, "B": 39, " B": 264},
            api_key_env=None,
            concurrency=4,
            max_retries=4,
            backoff_base_s=0.01,
            timeout_s=1.5,
        )
        with caplog.at_level(logging.WARNING, logger="harness.api_client"):
            got = judge.score_pairs(REQUESTS)
    _assert_same(got, local_scores)
    assert srv.faults_left == 0
    assert len(srv.requests) == len(REQUESTS) + len(faults)
    assert sorted(r.outcome for r in srv.requests if r.outcome != "ok") == sorted(faults)
    # One logical request id per PairRequest, each answered with exactly one 200.
    ok = srv.ok_requests()
    assert len(ok) == len(REQUESTS) and set(srv.successes.values()) == {1}
    assert Counter(r.body["messages"][0]["content"] for r in ok) == Counter(r.prompt for r in REQUESTS)
    assert set(srv.successes) == {r.request_id for r in srv.requests}  # every faulted request was retried
    assert judge.client.stats["retries"] == len(faults) and judge.stats["requests"] == len(REQUESTS)
    assert judge.client.stats["attempts"] == len(srv.requests) and judge.client.stats["content_retries"] == 3
    # Retry-After: 1 was honoured (the openai client's own backoff starts at 0.5 s).
    limited = next(r for r in srv.requests if r.outcome == "429:1")
    retry = next(r for r in srv.requests if r.request_id == limited.request_id and r.outcome == "ok")
    assert retry.t - limited.t >= 0.95
    faulted = {r.request_id for r in srv.requests if r.outcome != "ok"}
    assert len([m for m in caplog.messages if "attempt" in m]) >= len(faulted)


def test_retries_exhausted_and_client_errors_fail_with_one_clear_line(tiny_judge):
    with OpenAIServer(judge=tiny_judge) as srv:
        srv.inject("500", "500", "500")
        judge = ApiJudge(
            "tiny-test",
            srv.url,
            logprob_mode="top",
            api_key_env=None,
            max_retries=2,
            **{k: v for k, v in FAST.items()},
        )
        with pytest.raises(ApiError, match=r"HTTP 500 after 3 attempts: internal error"):
            judge.score_pairs(REQUESTS[:1])
        assert len(srv.requests) == 3
        # A 400 is not retried: the server's message is shown.
        client = ApiClient(HttpSettings(srv.url, api_key_env=None, **FAST))
        with pytest.raises(ApiError, match="HTTP 400: top_logprobs must be in 1..20") as e:
            client.post("chat", {"model": "m", "messages": [], "logprobs": True, "top_logprobs": 50})
        assert e.value.status == 400 and len(srv.requests) == 4
        assert client.get("/models")["data"][0]["id"] == "tiny-test"
    # A server that never comes up: connection refused on every attempt, one line, no hang.
    gone = ApiJudge("tiny-test", srv.url, logprob_mode="top", api_key_env=None, max_retries=1, **FAST)
    with pytest.raises(ApiError, match=r"gave up after 2 attempts: cannot connect to .*is the server up\?"):
        gone.score_pairs(REQUESTS[:1])


def test_api_key_is_sent_but_never_stored_logged_or_written(tiny_judge, key, tmp_path, caplog, monkeypatch):
    with caplog.at_level(logging.DEBUG):
        with OpenAIServer(judge=tiny_judge, api_key=key) as srv:
            srv.inject("500", "429", "malformed")
            judge = ApiJudge("tiny-test", srv.url, logprob_mode="top", api_key_env=ENV, **FAST)
            cache = ScoreCache(tmp_path / "scores.sqlite")
            CachedJudge(judge, cache).score_pairs(REQUESTS[:4])
            cache.close()
            assert srv.requests and all(r.authorized for r in srv.requests)  # the key was sent
            # A wrong key: the server echoes what it got; the error must not repeat it.
            wrong = f"sk-wrong-{uuid.uuid4().hex}"
            monkeypatch.setenv(ENV, wrong)
            with pytest.raises(ApiError) as e:
                judge.score_pairs(REQUESTS[:1])
            assert e.value.status == 401 and srv.requests[-1].outcome == "401"
            assert wrong not in str(e.value) and "***" in str(e.value) and f"${ENV}" in str(e.value)
            logging.getLogger("test").error("failure: %s", e.value)
    for secret in (key, wrong):
        assert secret not in caplog.text
        assert secret not in repr(judge) + repr(judge.client) + repr(judge.client.settings)
        assert all(secret not in repr(v) for obj in (judge, judge.client) for v in vars(obj).values())
        for f in tmp_path.rglob("*"):
            if f.is_file():
                assert secret.encode() not in f.read_bytes(), f
    assert list(tmp_path.glob("scores.sqlite*"))  # the cache was really written


def test_configuration_errors_are_one_line(tiny_llama):
    with pytest.raises(ConfigError, match="logprob_mode=exact needs the answer token ids"):
        ApiJudge("m", "http://127.0.0.1:9/v1", logprob_mode="exact")
    with pytest.raises(ConfigError, match=r"backend.top_logprobs=50 is invalid: must lie in \[1, 20\]"):
        ApiJudge("m", "http://127.0.0.1:9/v1", top_logprobs=50)
    with pytest.raises(ConfigError, match=r"token_ids keys \['C'\]"):
        ApiJudge("m", "http://127.0.0.1:9/v1", token_ids={"A": 1, "B": 2, "C": 3})
    with pytest.raises(ConfigError, match="base_url='127.0.0.1:9/v1' is invalid: must start with http"):
        ApiJudge("m", "127.0.0.1:9/v1")
    # mode=auto resolves ids from the tokenizer when given, else falls back to top-K.
    assert ApiJudge("m", "http://127.0.0.1:9/v1", logprob_mode="auto", tokenizer="tiny:llama").mode == "exact"
    assert ApiJudge("m", "http://127.0.0.1:9/v1", logprob_mode="auto").mode == "top"
    # Built in code the default is the schema's: exact, which needs the ids.
    assert ApiJudge("m", "http://127.0.0.1:9/v1", tokenizer="tiny:llama").mode == "exact"


def test_backend_config_builds_an_api_judge(tiny_judge, local_scores, key):
    """conf/backend/api.yaml + conf/model/tiny_llama.yaml composed and built with instantiate: the
    shipped keys fit."""
    from helpers.compose import compose

    from harness.runtime.context import build_judge

    with OpenAIServer(judge=tiny_judge, api_key=key, model="tiny-llama") as srv:
        cfg = compose(
            [
                "backend=api",
                "model=tiny_llama",
                f"backend.base_url={srv.url}",
                f"backend.api_key_env={ENV}",
                "backend.tokenizer=tiny:llama",
            ]
        )
        judge = build_judge(cfg.model, cfg.backend)
        assert isinstance(judge, ApiJudge) and judge.mode == cfg.backend.logprob_mode == "exact"
        _assert_same(judge.score_pairs(REQUESTS[:4]), local_scores[:4])
    assert {r.body["model"] for r in srv.requests} == {"tiny-llama"}


# -- content faults: validated, asked again, flagged when they persist (never a silent 0.5) -----------
CONTENT = ["no_logprobs", "empty_top", "nan", "null", "positive", "both_zero", "missing_ids", "all_inf"]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_content_faults_are_asked_again_and_answered_once(tiny_judge, local_scores, endpoint):
    """Each spoiled answer (a 200 whose logprobs are missing, NaN, null, positive, impossible or
    left out) is refused and asked again; the pair's final score is the true one."""
    requests = REQUESTS[:8]
    if endpoint == "chat":
        want = local_scores[:8]
    else:
        rows = [tiny_judge.tokenizer(r.prompt)["input_ids"] for r in requests]
        want = [tiny_judge.answers.score(lp) for lp in tiny_judge.answer_logprobs(rows)]
    with OpenAIServer(judge=tiny_judge) as srv:
        srv.inject(*CONTENT)
        judge = ApiJudge(
            "tiny-test",
            srv.url,
            token_ids={"A": 38, " A": 263, "B": 39, " B": 264},
            endpoint=endpoint,
            api_key_env=None,
            concurrency=4,
            max_retries=4,
            **{**FAST, "backoff_base_s": 0.001},
        )
        got = judge.score_pairs(requests)
    _assert_same(got, want)
    assert all(not s.flags for s in got) and judge.stats["unreadable"] == 0
    assert sorted(r.outcome for r in srv.requests if r.outcome != "ok") == sorted(CONTENT)
    assert len(srv.ok_requests()) == len(requests) and set(srv.successes.values()) == {1}
    assert judge.client.stats["content_retries"] == len(CONTENT) and srv.faults_left == 0


def test_a_label_outside_the_top_k_is_unreadable_not_probability_1_through_the_cli(
    tiny_judge, tiny_llama, tmp_path
):
    """A server whose top 2 are always A's two spellings (B third): with backend.top_logprobs=2 every
    P(A) read as exactly 1.0, unflagged. The rule is not about K: a reply listing no spelling of a
    label holds no probability for it. Now every pair is unreadable, so the run is one line, exit 2.
    Control: top_logprobs=5 lists both labels and reads a P(A) below 1 for every pair."""
    import json

    # The random tiny model's own logits here: A -5, ' A' 2, B 6.5, ' B' 1 (+-0.6); lifted to 19, 19, 17, 15.
    biased = _biased_judge(tiny_judge, tiny_llama, {"A:A": 24.0, "A: A": 17.0, "B:B": 10.5, "B: B": 14.0})
    base = [
        "experiment=judge",
        "model=tiny_llama",
        "backend=api",
        "backend.model=tiny-test",
        "backend.api_key_env=null",
        "backend.logprob_mode=top",
        "backend.max_retries=0",
        "task=jsonl",
        f"task.path={own_jsonl(tmp_path)}",
        "task.aspect=quality",
        "wandb.mode=disabled",
        "progress=false",
        "metrics.bootstrap=0",
    ]
    with OpenAIServer(judge=biased) as srv:
        k2 = run_in_process(
            [
                *base,
                f"backend.base_url={srv.url}",
                "backend.top_logprobs=2",
                f"hydra.run.dir={tmp_path / 'k2'}",
            ],
            tmp_path,
        )
        asked = [(r.path, r.body) for r in srv.ok_requests()]
        k5 = run_in_process(
            [
                *base,
                f"backend.base_url={srv.url}",
                "backend.top_logprobs=5",
                f"hydra.run.dir={tmp_path / 'k5'}",
            ],
            tmp_path,
        )
        # Precondition, on the server's own distribution for every prompt the K=2 run sent: its top 2
        # are A's spellings and B's best is 3rd (inside the control's top 5).
        a_ids = {i for _, i in tiny_judge.answers.variants["A"]}
        b_ids = {i for _, i in tiny_judge.answers.variants["B"]}
        for path, body in asked:
            top = srv.next_token_logprobs(srv.tokens_for(path, body)).topk(5).indices.tolist()
            assert set(top[:2]) == a_ids and top[2] in b_ids
    assert len(asked) == 13  # 12 ordered pairs and the content-free probe, each asked once (not retried)
    assert_one_line_error(k2, "gave no usable answer for any of the 12 pairs")
    assert "list no spelling of label 'B'" in k2.stdout + k2.stderr  # the warning says why
    assert not (tmp_path / "k2" / "results.json").exists()
    assert k5.returncode == 0, k5.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "k5" / "judgments.jsonl").read_text().splitlines()]
    pairs = [r for r in rows if r.get("kind") != "content_free"]
    assert len(pairs) == 12 and all(0.5 < r["p_a"] < 0.99 and "unreadable" not in r["flags"] for r in pairs)
    assert json.loads((tmp_path / "k5" / "results.json").read_text())["n_unreadable"] == 0


def test_top_mode_content_faults_are_asked_again(tiny_judge, tiny_llama):
    biased = _biased_judge(tiny_judge, tiny_llama, bias=14.0)
    want = biased.score_pairs(REQUESTS[:4])
    with OpenAIServer(judge=biased) as srv:
        # missing_ids in top mode: one listed token, no answer label (a transient label-less answer)
        srv.inject("both_zero", "nan", "empty_top", "all_inf", "missing_ids")
        judge = ApiJudge("tiny-test", srv.url, logprob_mode="top", api_key_env=None, concurrency=2, **FAST)
        got = judge.score_pairs(REQUESTS[:4])
    _assert_same(got, want)
    assert judge.client.stats["content_retries"] == 5 and judge.stats["unreadable"] == 0


def test_a_persistent_content_fault_is_flagged_counted_in_results_and_never_cached(tiny_judge, tmp_path):
    """An answer still spoiled after every retry: P(A) NaN, flagged, counted in results.json, not
    cached (the rerun asks that pair again and reads it), and the other pairs are unharmed."""
    from harness.data import load_task
    from harness.experiments.judge import run_judge
    from harness.judging import load_judgments

    docs = [d for d in load_task("jsonl", path=own_jsonl(tmp_path))]
    kw = dict(
        token_ids={"A": 38, " A": 263, "B": 39, " B": 264},
        api_key_env=None,
        concurrency=1,
        max_retries=2,
        **FAST,
    )
    with OpenAIServer(judge=tiny_judge) as srv:
        srv.inject("nan", "nan", "nan")  # the first pair's three attempts
        cache = ScoreCache(tmp_path / "scores.sqlite")
        judge = CachedJudge(ApiJudge("tiny-test", srv.url, **kw), cache)
        results = run_judge(
            judge,
            docs,
            task="jsonl",
            aspect="quality",
            instruction="Which is better?",
            family="summarization",
            out_dir=tmp_path / "run1",
            progress=False,
        )
        n_pairs = results["n_judgments"]
        assert results["n_unreadable"] == 1 and judge.judge.stats["unreadable"] == 1
        judgments, _ = load_judgments(tmp_path / "run1" / "judgments.jsonl")
        flagged = [j for j in judgments if "unreadable" in j.flags]  # other flags (low_answer_mass) may apply
        assert len(flagged) == 1 and flagged[0].flags == ("unreadable",) and math.isnan(flagged[0].p_a)
        assert all(0 < j.p_a < 1 for j in judgments if "unreadable" not in j.flags)
        assert results["metrics"]["none"]["n_calibration"] <= n_pairs
        assert len(cache) == n_pairs  # every pair + the content-free prompt, less the flagged pair
        sent = len(srv.requests)
        again = CachedJudge(ApiJudge("tiny-test", srv.url, **kw), cache)
        rerun = run_judge(
            again,
            docs,
            task="jsonl",
            aspect="quality",
            instruction="Which is better?",
            family="summarization",
            out_dir=tmp_path / "run2",
            progress=False,
        )
        assert (
            len(srv.requests) == sent + 1 and rerun["n_unreadable"] == 0
        )  # only the flagged pair asked again
        cache.close()


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_a_token_listed_twice_reads_its_first_entry_on_both_endpoints(tiny_judge, endpoint):
    """A token text listed twice in a top-K answer gave P(A) 0.119 on the chat endpoint (a list: the
    first entry kept) and 0.378 on completions (a JSON object: json kept the last). The rule now, on
    both: the first entry (servers list by rank). Here the first answer id is listed again, 1.5
    nats lower: each endpoint's P(A) equals its clean answer's (completions fails on d2cc091)."""
    kw = dict(endpoint=endpoint, token_ids={"A": 38, " A": 263, "B": 39, " B": 264}, api_key_env=None, **FAST)
    with OpenAIServer(judge=tiny_judge) as srv:
        clean = ApiJudge("tiny-test", srv.url, concurrency=1, **kw).score_pairs(REQUESTS[:2])
        srv.inject("dup_token", "dup_token")
        twice = ApiJudge("tiny-test", srv.url, concurrency=1, **kw).score_pairs(REQUESTS[:2])
        assert srv.faults_left == 0 and [r.outcome for r in srv.requests[-2:]] == ["dup_token"] * 2
    assert [s.p_a for s in twice] == pytest.approx([s.p_a for s in clean], abs=1e-9)
