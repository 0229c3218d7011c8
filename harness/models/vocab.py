"""The real tokenizers of the papers' judges, built offline from files that ship on PyPI.

- Llama-3-8B-Instruct: `llama_models/llama3/tokenizer.model` from `llama-models` 0.3.0 (Meta's
  tiktoken BPE, 128,000 tokens) converted with transformers' TikTokenConverter, plus Llama-3's 256
  special tokens (the names of Meta-Llama-3-8B-Instruct's tokenizer.json) and its chat template.
  Checked against Meta's own tiktoken tokenizer: the same ids on plain text and chat prompts,
  'A' = 32, ' A' = 362, 'B' = 33, ' B' = 426.
- Mistral-7B-Instruct-v0.1: `mistral_common/data/tokenizer.model.v1` (SentencePiece, 32,000
  tokens) loaded as a Llama fast tokenizer with `legacy=True` (the v0.1 tokenizer's setting:
  `legacy=False` prepends '▁' differently and every chat prompt mismatches mistral_common), plus
  v0.1's chat template. 'A' = 28741, '▁A' = 330, 'B' = 28760, '▁B' = 365. Its BPE merges are
  ranked by the SentencePiece piece scores, as transformers 4.x converted them (the hub's
  tokenizer.json): transformers 5 ranks them by id, which puts '▁▁' (id 259, score -1e9) first and
  tokenizes "Answer:  [/INST]" as '▁▁', '[' where SentencePiece and the official ZEPO prompts
  have '▁', '▁['.

No weights are involved: `harness.models.tiny` puts these tokenizers on tiny random models, so the
papers' prompts, chat formats and answer-token ids are testable end to end on a CPU.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""Meta's pre-tokenizer regex for Llama-3 (llama_models/llama3/tokenizer.py)."""

LLAMA3_SPECIAL = (
    ["<|begin_of_text|>", "<|end_of_text|>"]
    + [f"<|reserved_special_token_{i}|>" for i in range(4)]
    + ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
    + [f"<|reserved_special_token_{i}|>" for i in range(5, 251)]
)
"""Ids 128000..128255, named as in Meta-Llama-3-8B-Instruct's tokenizer.json."""

LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
"""Meta-Llama-3-8B-Instruct's chat template (tokenizer_config.json)."""

MISTRAL_V01_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)
"""Mistral-7B-Instruct-v0.1's chat template (tokenizer_config.json)."""


def _package_file(package: str, *parts: str, install: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"package {package!r} is not installed: {install}")
    path = Path(list(spec.submodule_search_locations)[0], *parts)
    if not path.is_file():
        raise ConfigError(f"{path} not found in package {package!r}: {install}")
    return path


def llama3_tokenizer() -> Any:
    """Llama-3-8B-Instruct's tokenizer (fast, HF API) from llama-models' tiktoken file."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    model = _package_file(
        "llama_models", "llama3", "tokenizer.model", install="pip install --no-deps llama-models==0.3.0"
    )
    backend = TikTokenConverter(
        vocab_file=str(model), pattern=LLAMA3_PATTERN, extra_special_tokens=LLAMA3_SPECIAL
    ).converted()
    # As the real tokenizer.json: a BOS when add_special_tokens=True.
    backend.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                special_tokens=[("<|begin_of_text|>", 128000)],
            ),
        ]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        model_max_length=8192,
        clean_up_tokenization_spaces=True,
    )
    tok.chat_template = LLAMA3_CHAT_TEMPLATE
    return tok


def mistral_v01_tokenizer() -> Any:
    """Mistral-7B-Instruct-v0.1's tokenizer (fast, HF API) from mistral-common's tokenizer.model.v1."""
    from transformers import LlamaTokenizerFast

    model = _package_file(
        "mistral_common", "data", "tokenizer.model.v1", install="pip install mistral-common"
    )
    src = Path(tempfile.mkdtemp(prefix="harness-mistral-"))
    try:
        shutil.copy(model, src / "tokenizer.model")  # transformers converts a folder's SentencePiece model
        tok = LlamaTokenizerFast.from_pretrained(
            str(src),
            legacy=True,
            add_bos_token=True,
            add_eos_token=False,
            bos_token="<s>",
            eos_token="</s>",
            unk_token="<unk>",
            model_max_length=32768,
        )
    finally:
        shutil.rmtree(src, ignore_errors=True)
    tok = _merges_by_score(tok, model)
    tok.chat_template = MISTRAL_V01_CHAT_TEMPLATE
    return tok


def _merges_by_score(tok: Any, model: Path) -> Any:
    """The same tokenizer with its BPE merges ranked by SentencePiece piece score (highest first),
    as transformers 4.x's LlamaConverter did and SentencePiece itself merges."""
    from tokenizers import Tokenizer
    from transformers import LlamaTokenizerFast
    from transformers.convert_slow_tokenizer import (
        SentencePieceExtractor,
        generate_merges,
    )

    pieces = SentencePieceExtractor(str(model)).proto.pieces
    vocab = {p.piece: i for i, p in enumerate(pieces)}
    merges = generate_merges(vocab, {p.piece: p.score for p in pieces})
    state = json.loads(tok.backend_tokenizer.to_str())
    state["model"]["merges"] = [list(m) for m in merges]
    backend = Tokenizer.from_str(json.dumps(state))
    return LlamaTokenizerFast(
        tokenizer_object=backend,
        legacy=True,
        add_bos_token=True,
        add_eos_token=False,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=32768,
    )
