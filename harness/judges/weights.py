"""A local model's parts, loaded apart: the tokenizer and config (what a judge needs to build its
identity and encode prompts) and the weights (loaded only when a request reaches the model, so a
run whose requests are all cached loads none; WEIGHT_LOADS counts them)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import logging
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, DataError, HarnessError
from harness.files import read_json, write_json_atomic
from harness.heap import release_freed_memory
from harness.judges.chat import model_positions
from harness.models.fingerprint import TEXT_SUFFIXES, file_digest, model_files
from harness.models.paths import broken_weight_file, cache_dir

log = logging.getLogger(__name__)


def load_model_and_tokenizer(
    path: str | Path,
    gguf_file: str | None,
    dtype,
    device: str,
    revision: str | None = None,
    trust_remote_code: bool = False,
):
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


def load_tokenizer(
    path: str | Path,
    gguf_file: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
) -> Any:
    """`_load_tokenizer`, then what loading it built and dropped given back to the system
    (harness.heap: about 170 MB for the Llama-3 tokenizer, else held to the run's end)."""
    tok = _load_tokenizer(path, gguf_file, revision, trust_remote_code)
    release_freed_memory()
    return tok


def _load_tokenizer(
    path: str | Path,
    gguf_file: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
) -> Any:
    """The model's tokenizer alone (what a cached run needs: prompts are encoded, weights are not).

    AutoTokenizer picks the class; importing it imports torch and most of transformers (about 6 CPU
    seconds, more than everything else a fully cached run does). So the class it picked for a local
    model folder is remembered (`tokenizer_classes.json` in the model cache, keyed by the folder's
    path as given, its file names, its config/tokenizer files' digests and the transformers version:
    everything AutoTokenizer's choice reads) and later loads call that class's from_pretrained with
    the same arguments, checked against what was recorded (vocabulary size, special tokens, chat
    template); anything else goes through AutoTokenizer again."""
    kwargs = _load_kwargs(gguf_file, revision, trust_remote_code)
    key = _tokenizer_key(path, gguf_file, trust_remote_code)
    known = _tokenizer_classes().get(key) if key else None
    if known is not None:
        tok = _remembered_tokenizer(path, known, kwargs)
        if tok is not None:
            return tok
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path), **kwargs)
    except (OSError, ValueError) as e:
        raise _cannot_load(path, gguf_file, e) from None
    if key and type(tok).__module__.startswith("transformers."):
        _remember_tokenizer(
            key,
            {
                "class": f"{type(tok).__module__}:{type(tok).__qualname__}",
                "check": tokenizer_summary(tok),
                "folder": os.path.realpath(path),
            },
        )
    return tok


def tokenizer_summary(tok: Any) -> str:
    """What a remembered tokenizer class must reproduce: vocabulary size, special tokens and their
    ids, the chat template (a digest)."""
    facts = [len(tok), tok.all_special_tokens, tok.all_special_ids, getattr(tok, "chat_template", None)]
    return hashlib.sha256(json.dumps(facts, default=str).encode()).hexdigest()[:16]


def _tokenizer_key(path: str | Path, gguf_file: str | None, trust_remote_code: bool) -> str | None:
    """The memo key of a local folder's tokenizer (None: not remembered: a hub id, a GGUF file,
    remote code, an unreadable folder)."""
    folder = Path(os.path.expanduser(str(path)))
    if gguf_file or trust_remote_code or not folder.is_dir():
        return None
    try:
        names = sorted(f.name for f in folder.iterdir())
        digests = {f.name: file_digest(f) for f in model_files(folder) if f.name.endswith(TEXT_SUFFIXES)}
    except (OSError, HarnessError):
        return None
    facts = [str(path), transformers_version(), names, digests]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()


def transformers_version() -> str:
    """The installed transformers' version, read from its metadata (importing it costs seconds):
    another release may pick another tokenizer class or tokenize otherwise."""
    return importlib.metadata.version("transformers")


def tokenizer_facts_key(
    path: str | Path, gguf_file: str | None, trust_remote_code: bool, settings: list[Any]
) -> str | None:
    """The memo key of what a judge reads of its tokenizer to build its identity (answer tokens,
    padding id, chat template, the system text the template adds) under `settings` (labels, tie
    label, vocabulary size, template on/off): the folder's tokenizer key (its files' digests and
    the transformers version) and the settings. None where the tokenizer is not remembered."""
    key = _tokenizer_key(path, gguf_file, trust_remote_code)
    return None if key is None else hashlib.sha256(json.dumps([key, settings]).encode()).hexdigest()


def tokenizer_facts(key: str | None) -> dict[str, Any] | None:
    """The facts remembered under `key` (tokenizer_facts_key), or None."""
    got = _memo(TOKENIZER_FACTS).get(key) if key else None
    return got if isinstance(got, dict) else None


def remember_tokenizer_facts(key: str, folder: str | Path, facts: dict[str, Any]) -> None:
    """Keep a judge's tokenizer facts (atomic; see _remember)."""
    _remember(TOKENIZER_FACTS, key, {**facts, "folder": os.path.realpath(folder)})


def _remembered_tokenizer(path: str | Path, known: Any, kwargs: dict[str, Any]) -> Any:
    """The tokenizer loaded with the remembered class, or None (then AutoTokenizer decides)."""
    try:
        module, _, name = str(known["class"]).partition(":")
        if not module.startswith("transformers."):
            return None
        cls = getattr(importlib.import_module(module), name)
        tok = cls.from_pretrained(str(path), _from_auto=True, **kwargs)  # as AutoTokenizer calls it
    except Exception as e:  # noqa: BLE001 - any failure: AutoTokenizer loads it (and reports a real error)
        log.debug("remembered tokenizer class of %s not used (%s)", path, e)
        return None
    return tok if tokenizer_summary(tok) == known.get("check") else None


_tokenizers: dict[str, Any] | None = None
"""The remembered tokenizer classes, once read (None: read the file again)."""
_memos: dict[str, dict[str, Any]] = {}
"""Other memo files of the model cache, by path, once read."""


def _read_memo(path: Path) -> dict[str, Any]:
    try:
        raw = read_json(path) if path.is_file() else {}
    except DataError:
        raw = {}
    return raw if isinstance(raw, dict) else {}


def _memo(name: str) -> dict[str, Any]:
    """A memo file of the model cache (read once per process; an unreadable file is started afresh)."""
    global _tokenizers
    path = cache_dir() / name
    if name == TOKENIZER_CLASSES:
        if _tokenizers is None:
            _tokenizers = _read_memo(path)
        return _tokenizers
    if str(path) not in _memos:
        _memos[str(path)] = _read_memo(path)
    return _memos[str(path)]


def _tokenizer_classes() -> dict[str, Any]:
    """The remembered classes."""
    return _memo(TOKENIZER_CLASSES)


def _remember_tokenizer(key: str, value: dict[str, str]) -> None:
    """Keep one folder's class."""
    _remember(TOKENIZER_CLASSES, key, value)


def _remember(name: str, key: str, value: dict[str, Any]) -> None:
    """Keep one entry of a memo file (atomic; another process's entries kept; a read-only cache
    only costs the work again next time)."""
    known = _memo(name)
    known[key] = value
    path = cache_dir() / name
    try:
        merged = dict(known)
        if path.is_file():
            try:
                raw = read_json(path)
                merged = {**raw, **known} if isinstance(raw, dict) else merged
            except DataError:
                pass
        # Folders that are gone (a test's copy, a deleted fine-tune) are dropped.
        merged = {
            k: v for k, v in merged.items() if isinstance(v, dict) and os.path.isdir(str(v.get("folder")))
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, merged)
    except OSError as e:
        log.debug("%s not kept (%s)", name, e)


TOKENIZER_CLASSES = "tokenizer_classes.json"
TOKENIZER_FACTS = "tokenizer_facts.json"


def load_config(
    path: str | Path,
    gguf_file: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
) -> Any:
    """The model's config alone (its context length and architecture, without the weights).

    A local folder whose config.json names its `model_type` and declares its positions is read as
    that JSON (a dict: what the judge reads of it before the weights, `model_positions` and the
    architecture, is in it as written); AutoConfig, which imports torch, only for the rest (GGUF
    files, hub ids, a config that leaves the positions to its class's defaults). The loaded
    model's own config replaces it with the weights."""
    plain = _config_file(path, gguf_file, trust_remote_code)
    if plain is not None:
        return plain
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(path), **_load_kwargs(gguf_file, revision, trust_remote_code))
    except (OSError, ValueError) as e:
        raise _cannot_load(path, gguf_file, e) from None


def _config_file(path: str | Path, gguf_file: str | None, trust_remote_code: bool) -> dict[str, Any] | None:
    f = Path(os.path.expanduser(str(path))) / "config.json"
    if gguf_file or trust_remote_code or not f.is_file():
        return None
    try:
        raw = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("model_type"), str):
        return None
    return raw if model_positions(raw) is not None else None


def config_value(config: Any, key: str) -> Any:
    """`key` of a config: a transformers config object or a config.json dict (load_config)."""
    return config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)


WEIGHT_LOADS: Counter[str] = Counter()
"""Weight loads in this process per model path (a run whose requests are all cached makes none)."""


def load_weights(
    path: str | Path,
    gguf_file: str | None,
    dtype,
    device: str,
    revision: str | None = None,
    trust_remote_code: bool = False,
) -> Any:
    """The model's weights, on `device`, in eval mode (counted in WEIGHT_LOADS)."""
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=dtype, **_load_kwargs(gguf_file, revision, trust_remote_code)
        )
    except Exception as e:
        if not _load_error(e):
            raise
        raise _cannot_load(path, gguf_file, e) from None
    WEIGHT_LOADS[str(path)] += 1
    model.to(device).eval()
    return model
