"""Model weights and judge identities: a copy of a model with other weights under the same name, and
a judge keyed the old way (without its weights)."""

from __future__ import annotations

import shutil
from pathlib import Path


def perturbed_copy(src: Path, dst: Path) -> Path:
    """`src` copied to `dst` with one tensor's values changed (same names, dtypes, shapes, sizes:
    the safetensors header is byte for byte the same)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    tensors = load_file(str(src / "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    w = tensors["lm_head.weight"]
    tensors["lm_head.weight"] = w + 0.5 * w.std() * torch.randn(w.shape, generator=g, dtype=w.dtype)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    assert (dst / "model.safetensors").stat().st_size == (src / "model.safetensors").stat().st_size
    return dst


class OldKeyed:
    """A judge keyed as before issue #28: its identity without the weights part (negative control)."""

    def __init__(self, judge):
        self.judge, self.identity = judge, judge.legacy_identity

    def score_pairs(self, requests):
        return self.judge.score_pairs(requests)
