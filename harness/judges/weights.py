"""A local model's parts, loaded apart: the tokenizer and config (what a judge needs to build its
identity and encode prompts) and the weights (loaded only when a request reaches the model, so a
run whose requests are all cached loads none; WEIGHT_LOADS counts them)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.models.paths import broken_weight_file


def load_model_and_tokenizer(path: str | Path, gguf_file: str | None, dtype, device: str,
                             revision: str | None = None, trust_remote_code: bool = False):
    """Load an HF directory (or a GGUF file inside one) for causal-LM scoring."""
    tok = load_tokenizer(path, gguf_file, revision, trust_remote_code)
    return load_weights(path, gguf_file, dtype, device, revision, trust_remote_code), tok


def _load_kwargs(gguf_file: str | None, revision: str | None, trust_remote_code: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if revision:
        kwargs["revision"] = revision
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    return kwargs


def _cannot_load(path: str | Path, gguf_file: str | None, e: Exception) -> ConfigError:
    """One line naming the broken file where one can be found (a truncated safetensors file, a bad
    header), else the folder, and what to do."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    where = broken_weight_file(path) or f"{path}{'/' + gguf_file if gguf_file else ''}"
    return ConfigError(f"cannot load model from {where}: {first}; replace that file with a complete copy")


def _load_error(e: Exception) -> bool:
    """Whether `e` is a load failure to report as one line (safetensors raises its own error type)."""
    return isinstance(e, OSError | ValueError) or type(e).__name__ == "SafetensorError"


def load_tokenizer(path: str | Path, gguf_file: str | None = None, revision: str | None = None,
                   trust_remote_code: bool = False) -> Any:
    """The model's tokenizer alone (what a cached run needs: prompts are encoded, weights are not)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), **_load_kwargs(gguf_file, revision, trust_remote_code))
    except (OSError, ValueError) as e:
        raise _cannot_load(path, gguf_file, e) from None


def load_config(path: str | Path, gguf_file: str | None = None, revision: str | None = None,
                trust_remote_code: bool = False) -> Any:
    """The model's config alone (its context length and architecture, without the weights)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(path), **_load_kwargs(gguf_file, revision, trust_remote_code))
    except (OSError, ValueError) as e:
        raise _cannot_load(path, gguf_file, e) from None


WEIGHT_LOADS: Counter[str] = Counter()
"""Weight loads in this process per model path (a run whose requests are all cached makes none)."""


def load_weights(path: str | Path, gguf_file: str | None, dtype, device: str, revision: str | None = None,
                 trust_remote_code: bool = False) -> Any:
    """The model's weights, on `device`, in eval mode (counted in WEIGHT_LOADS)."""
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype,
                                                     **_load_kwargs(gguf_file, revision, trust_remote_code))
    except Exception as e:
        if not _load_error(e):
            raise
        raise _cannot_load(path, gguf_file, e) from None
    WEIGHT_LOADS[str(path)] += 1
    model.to(device).eval()
    return model
