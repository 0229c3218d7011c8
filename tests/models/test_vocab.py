"""The papers' judges' real tokenizers (harness.models.vocab) agree with the reference implementations
that ship with them: Meta's tiktoken tokenizer (llama-models) and mistral_common's v1 tokenizer, on
plain text and on chat prompts built from real SummEval documents."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.judging import build_requests
from harness.models.vocab import llama3_tokenizer, mistral_v01_tokenizer
from harness.prompts import default_instruction

TEXTS = [
    "Hello world!",
    "  leading spaces\n\n\ttabs and newlines\r\n",
    "Numbers 1234567 and 3.14159",
    "Unicode: café, naïve, 日本語, emoji 🙂",
    "don't won't I'LL we've",
    "a" * 40 + " " + "b" * 30,
]


@pytest.fixture(scope="module")
def prompts(shared_data):
    from harness.data import load_task

    docs = load_task("summeval", data_dir=shared_data, limit=2)
    requests, _ = build_requests(
        docs,
        default_instruction("coherence", "summarization"),
        "summarization",
        "coherence",
        max_candidates=3,
    )
    return [r.prompt for r in requests]


def test_llama3_matches_metas_tokenizer(prompts):
    import llama_models
    from llama_models.llama3.tokenizer import Tokenizer

    tok = llama3_tokenizer()
    meta = Tokenizer(Path(os.path.dirname(llama_models.__file__)) / "llama3" / "tokenizer.model")
    assert [tok.convert_tokens_to_ids(t) for t in ("A", "ĠA", "B", "ĠB")] == [32, 362, 33, 426]
    for text in TEXTS:
        assert tok.encode(text, add_special_tokens=False) == meta.encode(text, bos=False, eos=False), text

    def header(role: str) -> list[int]:
        return [
            128006,
            *meta.encode(role, bos=False, eos=False),
            128007,
            *meta.encode("\n\n", bos=False, eos=False),
        ]

    for prompt in prompts:
        text = tok.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        ids = tok(text, add_special_tokens=False)["input_ids"]
        ref = [
            128000,
            *header("user"),
            *meta.encode(prompt.strip(), bos=False, eos=False),
            128009,
            *header("assistant"),
        ]
        assert ids == ref


def test_mistral_matches_mistral_common(prompts):
    from mistral_common.protocol.instruct.messages import UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    tok = mistral_v01_tokenizer()
    ref_tok = MistralTokenizer.v1()
    assert [tok.convert_tokens_to_ids(t) for t in ("A", "▁A", "B", "▁B")] == [28741, 330, 28760, 365]
    for prompt in prompts:
        # Our prompts end in "Answer: ", so the chat text ends "Answer:  [/INST]": SentencePiece (and
        # so mistral_common, and the official ZEPO prompts) tokenizes the two spaces as '▁', '▁['.
        for content in (prompt.rstrip(), prompt):
            text = tok.apply_chat_template([{"role": "user", "content": content}], tokenize=False)
            ids = tok(text, add_special_tokens=False)["input_ids"]
            ref = ref_tok.encode_chat_completion(
                ChatCompletionRequest(messages=[UserMessage(content=content)])
            ).tokens
            assert ids == ref
        assert tok.convert_ids_to_tokens(ids[-5:-3]) == ["▁", "▁["]


def test_mistral_merges_ranked_by_score_not_by_id():
    """Negative control: transformers 5's own conversion (merges ranked by id) puts '▁▁' first and
    breaks "Answer:  [/INST]" into '▁▁', '['; harness.models.vocab re-ranks by SentencePiece score."""
    import shutil
    import tempfile

    import mistral_common
    from transformers import LlamaTokenizerFast

    src = Path(tempfile.mkdtemp())
    shutil.copy(Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1", src / "tokenizer.model")
    by_id = LlamaTokenizerFast.from_pretrained(str(src), legacy=True)
    shutil.rmtree(src)
    text = "Answer:  [/INST]"
    assert by_id.convert_ids_to_tokens(by_id(text, add_special_tokens=False)["input_ids"])[2:4] == ["▁▁", "["]
    ours = mistral_v01_tokenizer()
    assert ours.convert_ids_to_tokens(ours(text, add_special_tokens=False)["input_ids"])[2:4] == ["▁", "▁["]


def test_a_wrong_setting_is_caught():
    """Negative control: the v0.1 tokenizer loaded with legacy=False no longer matches mistral_common."""
    import shutil
    import tempfile

    import mistral_common
    from mistral_common.protocol.instruct.messages import UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    from transformers import LlamaTokenizerFast

    src = Path(tempfile.mkdtemp())
    shutil.copy(Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1", src / "tokenizer.model")
    wrong = LlamaTokenizerFast.from_pretrained(str(src), legacy=False)
    wrong.chat_template = mistral_v01_tokenizer().chat_template
    text = wrong.apply_chat_template([{"role": "user", "content": "Which is better?"}], tokenize=False)
    ref = (
        MistralTokenizer.v1()
        .encode_chat_completion(ChatCompletionRequest(messages=[UserMessage(content="Which is better?")]))
        .tokens
    )
    assert wrong(text, add_special_tokens=False)["input_ids"] != ref
    shutil.rmtree(src)
