"""Where and in what precision a local model computes: the device `auto` means, and the torch dtype
a config's dtype name means there, decided without importing torch where it can be."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

from harness.errors import ConfigError
from harness.judges.cpu import auto_dtype

_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}
DTYPES = ("auto", *_DTYPES)
"""The dtype names a transformers judge or optimizer takes (auto: float32 on CPU, bfloat16 on GPU)."""


def pick_device(device: str) -> str:
    """ "auto": cuda where torch sees a GPU, else cpu. Decided without importing torch (seconds) when
    the installed torch is a CPU-only build (`cpu_only_torch`): a fully cached run needs none."""
    if device == "cpu" or (device == "auto" and cpu_only_torch()):
        return "cpu"
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} asked for but CUDA is not available")
    return device


def cpu_only_torch() -> bool:
    """Whether the installed torch was built without CUDA and ROCm, read from its torch/version.py
    without importing it (`cpu_only_build`): then `torch.cuda.is_available()` is False whatever the
    machine. False when it cannot tell, or when torch is imported already (asking it is free)."""
    if "torch" in sys.modules:
        return False
    spec = importlib.util.find_spec("torch")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    return bool(folders) and cpu_only_build(Path(folders[0]) / "version.py")


def cpu_only_build(version_file: Path) -> bool:
    """Whether a torch/version.py says `cuda = None` and `hip = None` (a CPU-only build)."""
    try:
        tree = ast.parse(version_file.read_text())
    except (OSError, SyntaxError, ValueError):
        return False
    values = {}
    for node in tree.body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else node.targets[0]
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            else None
        )
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
            values[target.id] = node.value.value
    return all(k in values and values[k] is None for k in ("cuda", "hip"))


def dtype_name(dtype: str, device: str) -> str:
    """The torch dtype's name ("float32", ...) that `dtype` (auto, float32, bf16, ...) means on `device`."""
    if dtype == "auto":  # float32 on every CPU, bf16 on GPU (harness.judges.cpu.auto_dtype)
        return auto_dtype(device)
    if dtype not in _DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16")
    return _DTYPES[dtype]


def pick_dtype(dtype: str, device: str):
    """The torch dtype `dtype` means on `device` (imports torch)."""
    import torch

    return getattr(torch, dtype_name(dtype, device))
