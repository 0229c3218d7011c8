"""Tiny random-weight Llama/Mistral judges with a locally trained tokenizer (no hub needed).

They exercise the real `from_pretrained` path, the chat template and answer-token resolution.
Built deterministically (fixed corpus, fixed seed) and cached under the harness cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.models.paths import build_atomically, cache_dir
from harness.models.vocab import llama3_tokenizer, mistral_v01_tokenizer

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]


def _corpus() -> list[str]:
    words = (
        "the a summary candidate source text question answer return better coherence fluency "
        "relevance consistency response dialog history is of and to in it was for on with as "
        "compare evaluate which please if you must choice only user assistant system"
    ).split()
    lines = []
    for i in range(400):
        w = [words[(i * 7 + k * 3) % len(words)] for k in range(12)]
        lines.append(" ".join(w) + f" A B {i % 10} ' A ' B .")
    lines.append("".join(chr(c) for c in range(32, 127)))
    return lines


def build_tokenizer(vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


ARCHS = ("llama", "mistral", "llama3", "mistral7b")
"""tiny:<arch>. llama/mistral: a locally trained 512-token BPE (fast; head_dim 16, transformers only).
llama3/mistral7b: the REAL Llama-3-8B-Instruct / Mistral-7B-Instruct-v0.1 tokenizers and chat
templates (harness.models.vocab) on tiny random weights with head_dim 32, which vLLM's CPU
attention also runs: the papers' prompts and answer-token ids, testable without the weights."""


def _tiny_parts(arch: str, max_positions: int, tokenizer: Any = None) -> tuple[Any, Any, type]:
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
    )

    if arch in ("llama", "mistral"):
        tok = build_tokenizer()
        common = dict(
            vocab_size=len(tok),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=max_positions,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            tie_word_embeddings=False,
        )
    elif arch == "llama3":
        tok = llama3_tokenizer() if tokenizer is None else tokenizer
        common = dict(
            vocab_size=128256,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            max_position_embeddings=8192,
            rope_theta=500000.0,
            bos_token_id=128000,
            eos_token_id=[128001, 128009],
            tie_word_embeddings=False,
        )
    elif arch == "mistral7b":
        tok = mistral_v01_tokenizer()
        common = dict(
            vocab_size=32000,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            max_position_embeddings=8192,
            rope_theta=10000.0,
            bos_token_id=1,
            eos_token_id=2,
            tie_word_embeddings=False,
        )
    else:
        raise ConfigError(f"unknown tiny architecture {arch!r}; use one of {', '.join(ARCHS)}")
    if arch in ("llama", "llama3"):
        return tok, LlamaConfig(**common), LlamaForCausalLM
    return tok, MistralConfig(sliding_window=None, **common), MistralForCausalLM


def build_tiny_model(
    out: Path, arch: str = "llama", seed: int = 0, max_positions: int = 16384, tokenizer: Any = None
) -> Path:
    """`tokenizer`: the real one built elsewhere (tiny:llama3 from a saved Llama-3 tokenizer folder
    where llama-models is not installed: harness.bench.gpu)."""
    import torch

    tok, config, cls = _tiny_parts(arch, max_positions, tokenizer)
    torch.manual_seed(seed)
    model = cls(config)
    # Larger output weights spread P(A) away from 0.5 so tests see real decisions.
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 0.5)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def tiny_model_dir(arch: str) -> Path:
    """Where tiny:<arch> is built (and found once built)."""
    if arch not in ARCHS:
        raise ConfigError(f"unknown tiny architecture {arch!r}; use one of {', '.join(ARCHS)}")
    # mistral7b v2: its tokenizer's merges re-ranked by SentencePiece score (harness.models.vocab).
    version = "v2" if arch in ("llama", "mistral", "mistral7b") else "v1"
    return cache_dir() / "models" / f"tiny-{arch}-{version}"


def ensure_tiny_model(arch: str, tokenizer: Any = None) -> Path:
    """tiny:<arch>, built once (`tokenizer`: build_tiny_model's)."""
    return build_atomically(
        tiny_model_dir(arch), lambda out: build_tiny_model(out, arch, tokenizer=tokenizer)
    )
