"""What a judge's weights are, read from file headers and samples, never by loading them.

    from harness.models.fingerprint import weights_fingerprint
    weights_fingerprint("/models/llama3-8b")   # 'a3f0c2...' (16 hex); the same on any copy of the folder

Every backend puts this fingerprint in its judge identity (the request cache's key, ZEPO's resume
check, W&B's config), so a fine-tune loaded under the base model's name (`model.path=/my/finetune`)
is never served the base model's cached answers. It must be computable without the weights: a run
whose requests are all cached loads no model, yet needs the identity to look them up.

What is read, per file of the model folder (top level; hidden files and docs left out):
- weight files (.safetensors, .bin, .pt, .pth, .gguf): name and size; a file of at most WHOLE
  bytes (a tiny model, SmolLM2) is hashed whole; a larger one, for safetensors, by its whole JSON
  header (every tensor's name, dtype, shape, offsets) plus SAMPLE bytes at the start, middle and end
  of every tensor's data; other formats: their first HEAD bytes (a GGUF's header and metadata) plus
  SAMPLE bytes at SPREAD evenly spaced offsets. An 8B folder costs about a thousand small reads. In
  a sampled file a change confined to bytes no sample covers is not seen (a fine-tune changes every
  tensor);
- config, tokenizer and template files (.json, .jinja, .model, .txt, .tiktoken): hashed whole.
Weights handed over in memory (a judge built around a loaded model) are fingerprinted from the same
kind of samples of their tensors (`module_fingerprint`). Each file's digest is kept in `<model cache>/fingerprints.json` under (real path, size, mtime), so
a second run re-reads nothing. The path is not part of the fingerprint: a copied folder is the same
judge, a moved cache stays valid.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, DataError
from harness.files import read_json, write_json_atomic
from harness.models.paths import cache_dir

log = logging.getLogger(__name__)

VERSION = 1
"""Bumped when what is read changes: every stored digest (and so every identity) changes with it."""
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
TEXT_SUFFIXES = (".json", ".jinja", ".model", ".txt", ".tiktoken")
"""Config, tokenizer (tokenizer.json/.model, merges.txt, vocab.txt) and chat-template files."""
SAMPLE = 4096
"""Bytes read at each sampled offset."""
HEAD = 1 << 20
"""Leading bytes hashed of a weight file that is not safetensors (a GGUF's header and metadata)."""
SPREAD = 64
"""Evenly spaced samples of a weight file that is not safetensors."""
MAX_HEADER = 100 << 20
"""A safetensors header longer than this is not one (the format caps it at 100 MB)."""
WHOLE = 1 << 30
"""Weight files up to this size are hashed whole (once per file version: the digest is kept), so no
edit hides between samples; larger ones are sampled (reading them whole would cost a fully cached
run of an 8B judge the 16 GB its weights skip)."""

_lock = threading.Lock()
_memo: dict[str, str] | None = None


def weights_fingerprint(path: str | Path, gguf_file: str | None = None) -> str:
    """16 hex digits for the weights at `path` (a folder, or `gguf_file` inside it; a file), or
    `hub:<id>` for a hub id that is not a local folder (then model.revision pins it)."""
    folder = Path(os.path.expanduser(str(path)))
    if not folder.exists():
        return f"hub:{path}"
    if folder.is_file():
        files = [folder]
    else:
        files = model_files(folder, gguf_file)
        if not any(f.name.endswith(WEIGHT_SUFFIXES) for f in files):
            raise ConfigError(
                f"model folder {folder} holds no weights (*.safetensors, *.bin, *.gguf); "
                "set model.path to a complete model folder"
            )
    h = hashlib.sha256(f"weights-v{VERSION}".encode())
    for f in files:
        h.update(f"\x00{f.name}\x00{file_digest(f)}".encode())
    return h.hexdigest()[:16]


def module_fingerprint(model: Any) -> str:
    """16 hex digits for weights already in memory (a judge built around a given model): every
    parameter's and buffer's name, dtype and shape, and SAMPLE bytes at the start, middle and end of
    its values. Not equal to the files' fingerprint of the same weights (other bytes are read), so
    such a judge shares no cached answers with one loaded from the folder: never wrong, at most
    asked again."""
    import torch

    h = hashlib.sha256(f"module-v{VERSION}".encode())
    for name, t in sorted(model.state_dict().items()):
        flat = t.detach().reshape(-1)
        h.update(f"\x00{name}\x00{t.dtype}\x00{tuple(t.shape)}".encode())
        n = max(1, SAMPLE // max(1, flat.element_size()))
        for at in dict.fromkeys((0, max(0, flat.numel() // 2 - n // 2), max(0, flat.numel() - n))):
            part = flat[at : at + n].cpu().contiguous()
            h.update(part.view(torch.uint8).numpy().tobytes() if part.numel() else b"")
    return h.hexdigest()[:16]


def model_files(folder: Path, gguf_file: str | None = None) -> list[Path]:
    """The files of `folder` that decide a judge's numbers, sorted: with `gguf_file`, that weight
    file alone among the weights (a folder may hold several quantisations)."""
    out = []
    for f in sorted(folder.iterdir()):
        if f.name.startswith(".") or not f.is_file():
            continue
        if f.name.endswith(WEIGHT_SUFFIXES):
            if gguf_file is None or f.name == gguf_file:
                out.append(f)
        elif f.name.endswith(TEXT_SUFFIXES):
            out.append(f)
    if gguf_file is not None and not any(f.name == gguf_file for f in out):
        raise ConfigError(f"{folder / gguf_file}: file not found; set model.gguf_file to a file in {folder}")
    return out


def file_digest(f: Path) -> str:
    """sha256 of what `fingerprint` reads of one file, kept per (real path, size, mtime)."""
    st = f.stat()
    whole = st.st_size <= WHOLE
    # A whole-file digest has a key of its own: one sampled by an earlier version is not served for it.
    key = f"{os.path.realpath(f)}|{st.st_size}|{st.st_mtime_ns}|v{VERSION}{'w' if whole else ''}"
    known = _stored()
    if key in known:
        return known[key]
    h = hashlib.sha256(f"{st.st_size}".encode())
    try:
        with f.open("rb") as fh:
            for chunk in _read_parts(fh, f.name, st.st_size, whole):
                h.update(chunk)
    except OSError as e:
        raise ConfigError(f"{f}: cannot read it to fingerprint the weights ({e.strerror})") from None
    digest = h.hexdigest()
    _store(key, digest)
    return digest


def _read_parts(fh: Any, name: str, size: int, whole: bool) -> Iterator[bytes]:
    """The bytes a digest covers: all of a text file or a weight file of at most WHOLE bytes; a
    larger weight file's header and samples."""
    if whole or not name.endswith(WEIGHT_SUFFIXES):
        while chunk := fh.read(1 << 20):
            yield chunk
        return
    spans = _safetensors_spans(fh, size) if name.endswith(".safetensors") else None
    if spans is None:  # not safetensors (or not a readable one): the head and evenly spaced samples
        spans = [(0, min(size, HEAD))] + [(size * k // SPREAD, SAMPLE) for k in range(1, SPREAD)]
        spans.append((max(0, size - SAMPLE), SAMPLE))
    for start, length in spans:
        fh.seek(start)
        yield fh.read(length)


def _safetensors_spans(fh: Any, size: int) -> list[tuple[int, int]] | None:
    """(offset, length) reads of a safetensors file: its header, then the start, middle and end of
    every tensor's data; None when the file does not parse as safetensors."""
    head = fh.read(8)
    if len(head) < 8:
        return None
    n = struct.unpack("<Q", head)[0]
    if not 0 < n <= min(MAX_HEADER, size - 8):
        return None
    try:
        header = json.loads(fh.read(n))
    except (ValueError, UnicodeDecodeError):
        return None
    spans = [(0, 8 + n)]
    for name in sorted(k for k in header if k != "__metadata__"):
        offsets = header[name].get("data_offsets") if isinstance(header[name], dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2):
            return None
        begin, end = 8 + n + int(offsets[0]), 8 + n + int(offsets[1])
        mid = (begin + end) // 2
        for at in dict.fromkeys((begin, max(begin, mid - SAMPLE // 2), max(begin, end - SAMPLE))):
            spans.append((at, min(SAMPLE, end - at)))
    return spans


def _store_path() -> Path:
    return cache_dir() / "fingerprints.json"


def _stored() -> dict[str, str]:
    """The digests kept on disk (read once per process; an unreadable store is started afresh)."""
    global _memo
    with _lock:
        if _memo is None:
            path = _store_path()
            _memo = {}
            if path.is_file():
                try:
                    raw = read_json(path)
                    _memo = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
                except DataError as e:
                    log.warning("%s; the weight fingerprints are computed again", e)
        return _memo


def _store(key: str, digest: str) -> None:
    """Keep a digest, in memory and on disk (atomic; a read-only cache only costs recomputing)."""
    known = _stored()
    with _lock:
        known[key] = digest
        try:
            merged = dict(known)
            path = _store_path()
            if path.is_file():  # another process's digests are kept too
                try:
                    raw = read_json(path)
                    merged = (
                        {**{str(k): str(v) for k, v in raw.items()}, **known}
                        if isinstance(raw, dict)
                        else merged
                    )
                except DataError:
                    pass
            # Digests of files that are gone (a rebuilt tiny model, a deleted fine-tune) are dropped.
            merged = {k: v for k, v in merged.items() if os.path.exists(k.rsplit("|", 3)[0])}
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, merged)
        except OSError as e:
            log.debug("weight fingerprints not kept (%s): computed again next run", e)
