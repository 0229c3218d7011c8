"""A judge's chat frame and its logits, checked where they used to pass silently or as a traceback:
a system prompt for a template without a system role (Mistral v0.1), a judge whose logits are all
equal (P(A) 0.5 everywhere, which reads as a fair judge), and the identity's system part, which
records the system text the template adds by itself (SmolLM2's) — with old cache rows under the
previous identity asked again, with one line. CLI runs as users type them (run_in_process), each
with its negative control."""

from __future__ import annotations

import json
import logging
import math
import shutil

import pytest
from helpers.cli import assert_one_line_error, run_in_process
from helpers.compose import compose
from helpers.data import texts_jsonl

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["a short summary", "another summary", "a third one"]


def _run(tmp_path, data, *extra, model="tiny_llama"):
    out = tmp_path / "run"
    return out, run_in_process(
        [
            "experiment=judge",
            f"model={model}",
            "task=jsonl",
            f"task.path={data}",
            "task.aspect=quality",
            f"hydra.run.dir={out}",
            "wandb.mode=disabled",
            "progress=false",
            "experiment.shuffles=5",
            *extra,
        ],
        tmp_path,
    )


def _weights(model, change):
    """`change(tensors)` applied to the safetensors of the model folder `model`."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(model / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
    return model


def test_a_system_prompt_for_mistral_v01_goes_into_the_first_user_turn(tmp_path):
    """`model=tiny_mistral7b model.system_prompt=Be_fair` (was: jinja's "Conversation roles must
    alternate" traceback): the system text is folded into the user turn as Mistral's own tokenizer
    does it (mistral_common's InstructTokenizerV1: system + blank line + user); each P(A) is the
    model's on exactly mistral_common's ids. Negative control: the template refuses a system turn."""
    pytest.importorskip("mistral_common", reason="mistral_common (a vLLM dependency) is not installed")
    from jinja2.exceptions import TemplateError
    from mistral_common.protocol.instruct.messages import SystemMessage, UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from harness.data import load_task
    from harness.judges.hf import HFJudge
    from harness.judging import build_requests
    from harness.models.tiny import ensure_tiny_model

    data = texts_jsonl(tmp_path / "d.jsonl", TEXTS)
    out, r = _run(tmp_path, data, "model.system_prompt=Be_fair", model="tiny_mistral7b")
    assert r.returncode == 0, r.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    got = {
        (j["a_id"], j["b_id"]): j["p_a"]
        for j in map(json.loads, (out / "judgments.jsonl").read_text().splitlines())
        if "a_id" in j
    }
    judge = HFJudge(
        ensure_tiny_model("mistral7b"), name="tiny-mistral7b", device="cpu", system_prompt="Be_fair"
    )
    assert results["judge"] == judge.identity
    reference = MistralTokenizer.v1()
    requests, _ = build_requests(
        load_task("jsonl", path=data), results["instruction"], results["family"], "quality"
    )
    for req in requests:
        oracle = reference.encode_chat_completion(
            ChatCompletionRequest(
                messages=[SystemMessage(content="Be_fair"), UserMessage(content=req.prompt)]
            )
        ).tokens
        assert judge.encode([req])[0] == oracle
        assert got[(req.a_id, req.b_id)] == pytest.approx(
            judge.answers.score(judge.answer_logprobs([oracle])[0]).p_a, abs=1e-5
        )
    with pytest.raises(TemplateError, match="Conversation roles must alternate"):
        judge.tokenizer.apply_chat_template(
            [{"role": "system", "content": "Be_fair"}, {"role": "user", "content": "x"}], tokenize=False
        )


def test_a_judge_with_all_logits_equal_fails_loudly(tiny_llama, tmp_path):
    """Embeddings x 1e37: the RMSNorm overflows without a NaN and every logit is equal (was: P(A) 0.5
    for every pair, Spearman 0.0, a low-mass warning blaming the chat template). Now one line naming
    the uniform distribution, no results.json. Negative control: read without the vocabulary size
    (the old read), the same log-probs give P(A) 0.5 as a number."""
    from harness.judges.answers import resolve_answer_tokens

    model = _weights(
        shutil.copytree(tiny_llama, tmp_path / "big-llama"),
        lambda t: t.__setitem__("model.embed_tokens.weight", t["model.embed_tokens.weight"] * 1e37),
    )
    data = texts_jsonl(tmp_path / "d.jsonl", TEXTS)
    out, r = _run(tmp_path, data, f"model.path={model}")
    assert_one_line_error(r, "no usable answer for any of the 6 pairs", "uniform next-token distribution")
    assert not (out / "results.json").exists()

    from harness.judges.hf import HFJudge
    from harness.records import PairRequest

    judge = HFJudge(model, device="cpu")
    logprobs = judge.answer_logprobs(judge.encode([PairRequest("d", "a", "b", "Which is better? Answer:")]))[
        0
    ]
    assert logprobs == pytest.approx([-math.log(judge.config.vocab_size)] * len(logprobs), abs=1e-5)
    assert judge.answers.score(logprobs).flags == ("unreadable", "uniform_logits")
    assert resolve_answer_tokens(judge.tokenizer).score(logprobs).p_a == 0.5


def test_a_judge_whose_answer_tokens_always_tie_fails_loudly(tiny_llama, tmp_path):
    """The answer tokens' rows of the LM head made one row: every pair's answer log-probs are equal
    (the distribution is not uniform), P(A) 0.5 everywhere; refused in one line. Negative control:
    one pair that does not tie is enough to measure, and the check lets the run through."""
    from harness.judges.hf import HFJudge
    from harness.judging import refuse_all_unreadable
    from harness.records import Judgment

    ids = HFJudge(tiny_llama, device="cpu").answers.all_ids

    def tie(tensors):
        head = tensors["lm_head.weight"]
        head[ids] = head[ids[0]].clone()

    model = _weights(shutil.copytree(tiny_llama, tmp_path / "tied-llama"), tie)
    out, r = _run(tmp_path, texts_jsonl(tmp_path / "d.jsonl", TEXTS), f"model.path={model}")
    assert_one_line_error(r, "one and the same log-probability in every one of the 6 read pairs")
    assert not (out / "results.json").exists()
    tied = [
        Judgment("d", a, b, 0.5, {"A:A": -3.0, "B:B": -3.0}, None, None, None, ())
        for a, b in (("x", "y"), ("y", "x"))
    ]
    with pytest.raises(Exception, match="one and the same log-probability"):
        refuse_all_unreadable("judge", tied)
    refuse_all_unreadable(
        "judge", [tied[0], Judgment("d", "y", "x", 0.6, {"A:A": -2.6, "B:B": -3.0}, None, None, None, ())]
    )


SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
"""What SmolLM2-135M-Instruct's chat template writes as the system turn when given none."""


def test_the_identity_records_the_system_prompt_the_template_adds(smollm2_path):
    """SmolLM2's identity holds its template's own system text (was: the empty string's hash): the
    same as with that text set by hand, which renders the same prompt; the previous identity is kept
    as a legacy key. Every other shipped model with a local tokenizer keeps the empty one (its
    template adds none) and so its identity."""
    from harness.judges.base import template_fingerprint
    from harness.judges.hf import HFJudge
    from harness.records import PairRequest
    from harness.runtime.context import build, container

    default = HFJudge(smollm2_path, name="SmolLM2-135M-Instruct", device="cpu")
    spelled = HFJudge(smollm2_path, name="SmolLM2-135M-Instruct", device="cpu", system_prompt=SMOLLM2_SYSTEM)
    request = PairRequest("d", "a", "b", "Which is better? Answer:")
    assert default.encode([request]) == spelled.encode([request])
    assert f"|sys={template_fingerprint(SMOLLM2_SYSTEM)}|" in default.identity
    assert default.identity == spelled.identity

    from harness.judges.chat import OLD_SYSTEM

    old = default.identity.replace(
        f"|sys={template_fingerprint(SMOLLM2_SYSTEM)}|", f"|sys={template_fingerprint('')}|"
    ).replace("|dev=cpu|", "|")  # an older harness: no device part either
    assert default.legacy_identities[old] == OLD_SYSTEM
    for name in ("tiny_llama", "tiny_mistral", "tiny_llama3", "tiny_mistral7b", "smollm2"):
        cfg = compose([f"model={name}"])
        judge = build(cfg.backend, judge_model=container(cfg.model))
        empty = f"|sys={template_fingerprint('')}|" in judge.identity
        assert empty == (name != "smollm2"), name
        assert (
            len(judge.legacy_identities) == 2 + (not empty)  # no weights part; no device part; old system
            and judge.legacy_identity in judge.legacy_identities
        )


def test_rows_under_the_identity_before_the_templates_system_prompt_are_asked_again(
    tiny_llama, coherence_pairs, tmp_path, caplog
):
    """A tiny model whose template adds a system turn by itself: rows its previous identity keyed
    (an older harness) are not served under the new one; every request goes to the model, and one
    line says why. Negative control: under the previous identity the same rows are served."""
    from helpers.models import OldKeyed

    from harness.judges.base import template_fingerprint
    from harness.judges.cache import CachedJudge, ScoreCache
    from harness.judges.hf import HFJudge

    model = shutil.copytree(tiny_llama, tmp_path / "tiny-sys")
    template = (model / "chat_template.jinja").read_text()
    (model / "chat_template.jinja").write_text(
        template.replace(
            "{{ bos_token }}",
            (
                "{{ bos_token }}{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou judge fairly.<|im_end|>\n"
                "{% endif %}"
            ),
            1,
        )
    )
    judge = HFJudge(model, device="cpu", batch_size=4)
    previous = judge.identity.replace(
        f"|sys={template_fingerprint('You judge fairly.')}|", f"|sys={template_fingerprint('')}|"
    ).replace("|dev=cpu|", "|")  # as an older harness keyed it (no device part either)
    reqs = coherence_pairs[:4]
    cache = ScoreCache(tmp_path / "requests.sqlite")
    before = OldKeyed(judge)
    before.identity = previous
    CachedJudge(before, cache).score_pairs(reqs)
    served = CachedJudge(before, cache)
    served.score_pairs(reqs)
    assert served.calls == 0  # control: the previous key finds them
    cached = CachedJudge(judge, cache)
    with caplog.at_level(logging.WARNING, logger="harness.judges.cache"):
        cached.score_pairs(reqs)
    lines = [r.getMessage() for r in caplog.records if "keyed before the identity recorded" in r.getMessage()]
    assert cached.calls == len(reqs) and len(lines) == 1 and "4 cached rows of tiny-sys" in lines[0]


def test_a_template_that_refuses_the_prompt_is_one_line(tiny_llama, tmp_path):
    """A chat template that raises on the conversation itself (not on a system turn, which is
    folded) is one line naming the model and the template's own message, not a jinja traceback."""
    model = shutil.copytree(tiny_llama, tmp_path / "strict-llama")
    (model / "chat_template.jinja").write_text("{{ raise_exception('only tool calls are supported') }}")
    out, r = _run(tmp_path, texts_jsonl(tmp_path / "d.jsonl", TEXTS), f"model.path={model}")
    assert_one_line_error(
        r, "chat template of", "strict-llama", "only tool calls are supported", "model.chat_template=false"
    )
    assert not (out / "judgments.jsonl").exists()


def test_a_system_prompt_with_nowhere_to_go_is_refused_not_dropped(tiny_llama, tmp_path):
    """`model.system_prompt` with `model.chat_template=false` was dropped without a word (plain text has
    no system turn): one line before anything loads. A tokenizer without a template is refused at
    its first prompt the same way. Control: the plain-text run without a system prompt is judged."""
    from transformers import AutoTokenizer

    from harness.errors import ConfigError
    from harness.judges.chat import format_chat

    data = texts_jsonl(tmp_path / "d.jsonl", TEXTS)
    out, r = _run(tmp_path, data, "model.chat_template=false", "model.system_prompt=Be_fair")
    assert_one_line_error(r, "model.system_prompt='Be_fair'", "model.chat_template=false")
    assert not out.exists()
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    tok.chat_template = None
    with pytest.raises(ConfigError, match="no chat template to put it in"):
        format_chat(tok, "judge this", "Be fair")
    assert format_chat(tok, "judge this") == "judge this"
    out, r = _run(tmp_path, data, "model.chat_template=false")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "results.json").read_text())["n_judgments"] == 6
