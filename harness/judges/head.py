"""Answer logits in float32 whatever the model's dtype.

A bf16 (or fp16) model's LM head writes bf16 logits: 8 significant bits, so near a logit of 10
the representable values are 0.0625 apart and P(A) moves in coarse steps (docs/benchmarks.md,
Numerics). `FloatHead` runs the FINAL NORM and the LM head in float32 on
the last hidden state instead (the model's own norm module, copied to float32, and the head's
rows cast to float32), so the logits are float32 numbers of a bf16 forward; the transformer body
still runs in the model's dtype. The answer mass (harness.metrics.mass) needs the full-vocabulary
log-softmax, so the whole head is computed: from a float32 copy of its weights cached here when
that copy is at most `CACHE_BYTES`, else in chunks of `CHUNK_ROWS` rows cast on the fly.

In a float32 model nothing changes: the model's own norm and head run as they always did, so the
numbers are bit for bit those of the plain forward (tests/judges/test_head.py checks it).

Used by every transformers path: the packed engine (harness.judges.packed, which hands over the
hidden state before the final norm), HF's padded forward and prefix reuse on other models, and
the official generate read-out (harness.judges.generate), the last two through `capture`, a hook
on the final norm's input (or, where no final norm is found, on the head's input: the norm then
stays in the model's dtype, the head still runs in float32).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

CACHE_BYTES = 256 * 2**20
"""The largest float32 copy of the head's weights a judge keeps (SmolLM2: 113 MB; Llama-3-8B's
2.1 GB is computed in chunks instead)."""
CHUNK_ROWS = 8192
"""Vocabulary rows per chunk when the head is not cached in float32."""
NORM_NAMES = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "decoder.final_layer_norm")
"""Where the final norm sits under `model.base_model` in the architectures transformers ships."""

LOGITS_SUFFIX = "logits=float32"
"""The judge identity's part for a bf16/fp16 judge whose answer logits run in float32: cache rows
made by the old bf16 head (no such part) are not served to it."""


def upcasts(dtype: str) -> bool:
    """Whether a judge in `dtype` ("float32", "bfloat16", "float16") gets the float32 head."""
    return dtype != "float32"


def final_norm(model: Any) -> Any:
    """The model's final norm module (applied to the last hidden state before the LM head), or None."""
    base = getattr(model, "base_model", None)
    for name in NORM_NAMES:
        obj = base
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if obj is not None and callable(obj) and hasattr(obj, "weight"):
            return obj
    return None


class FloatHead:
    """The final norm and LM head of `model`, in float32 when the model is not (see module doc)."""

    def __init__(self, model: Any) -> None:
        import torch

        self.model = model
        self.head = model.get_output_embeddings()
        self.norm = final_norm(model)
        self.dtype = self.head.weight.dtype
        self.upcast = self.dtype != torch.float32
        """False for a float32 model: the model's own modules run, bit for bit as before."""
        config = getattr(model, "config", None)
        self.softcap = getattr(config, "final_logit_softcapping", None)
        """Gemma-2's cap on the logits (tanh), applied in float32 as the model applies it."""
        scale = getattr(model, "logit_scale", None)
        self.scale = float(scale) if isinstance(scale, (int, float)) and not isinstance(scale, bool) else None
        """Cohere's multiplier on the logits (a plain number on the model), applied likewise."""
        self._norm32: Any = None
        self._weight32: Any = None
        self._bias32: Any = None

    # -- the read-out ---------------------------------------------------------------------------
    def logits(self, hidden: Any, normed: bool = False) -> Any:
        """Logits (rows, vocab) of last hidden states (rows, hidden): before the final norm, or
        after it with `normed` (where only the head's input could be captured). float32 unless
        the model is float32, where this is the model's own `head(norm(hidden))`."""
        import torch

        if not self.upcast:
            return self.head(hidden if normed or self.norm is None else self.norm(hidden))
        x = hidden.float()
        if not normed and self.norm is not None:
            x = self._norm_fp32()(x)
        weight = self.head.weight
        if self._weight32 is None and weight.numel() * 4 <= CACHE_BYTES:
            self._weight32 = weight.detach().float()
            bias = getattr(self.head, "bias", None)
            self._bias32 = None if bias is None else bias.detach().float()
        if self._weight32 is not None:
            out = x @ self._weight32.T
            bias = self._bias32
        else:
            out = torch.cat(
                [x @ weight[r : r + CHUNK_ROWS].float().T for r in range(0, weight.shape[0], CHUNK_ROWS)],
                dim=-1,
            )
            bias = getattr(self.head, "bias", None)
            bias = None if bias is None else bias.float()
        if bias is not None:
            out = out + bias
        if self.scale:
            out = out * float(self.scale)
        if self.softcap:
            out = torch.tanh(out / float(self.softcap)) * float(self.softcap)
        return out

    def _norm_fp32(self) -> Any:
        if self._norm32 is None:
            self._norm32 = copy.deepcopy(self.norm).float()
        return self._norm32

    # -- reading the hidden state out of HF's own forward or generate ---------------------------
    @contextlib.contextmanager
    def capture(self) -> Iterator[list[Any]]:
        """While open, every forward of the model appends its last position's hidden state (the
        final norm's input, rows x hidden) to the yielded list; nothing is hooked in a float32
        model (`read` then returns the model's own logits)."""
        got: list[Any] = []
        if not self.upcast:
            yield got
            return
        module = self.norm if self.norm is not None else self.head

        def hook(_module: Any, args: tuple) -> None:
            got.append(args[0][:, -1].detach())

        handle = module.register_forward_pre_hook(hook)
        try:
            yield got
        finally:
            handle.remove()

    def read(self, captured: Any, model_logits: Any) -> Any:
        """The logits to use: `model_logits` (rows, vocab) in a float32 model, else the float32
        logits of the `captured` hidden state (rows, hidden) from `capture`."""
        if not self.upcast:
            return model_logits
        return self.logits(captured, normed=self.norm is None)


# -- the bf16 logit lattice (tests/judges/test_head.py, harness-bench numerics) ---------------------------
LATTICE_TOL = 1e-4
"""How far from a lattice point an A-minus-B logit difference may be and still count as on it: the
log-softmax's float32 rounding of logit - logsumexp is ~1e-6 at these magnitudes."""
BF16_LATTICE = 2.0**-7
"""bf16 keeps 8 significant bits, so bf16 numbers of magnitude >= 1 are multiples of 2^-7 (or of a
coarser power of two), and so is the difference of two of them."""


def on_lattice(d: float, step: float = BF16_LATTICE, tol: float = LATTICE_TOL) -> bool:
    """Whether `d` is a multiple of `step` within `tol`."""
    return abs(d - step * round(d / step)) < tol


def lattice_step(diffs: list[float], tol: float = LATTICE_TOL) -> float | None:
    """The coarsest 2^-k (k = 0..10) every difference sits on within `tol`; None when none does.
    A number fits a lattice of step s by chance with probability 2 x tol / s (20% at 2^-10 and
    1e-4, every number at 2^-13), so finer lattices say nothing and are not tried."""
    for k in range(11):
        if all(on_lattice(d, 2.0**-k, tol) for d in diffs):
            return 2.0**-k
    return None


def logit_difference(token_logprobs: dict[str, float], a: str = "A", b: str = "B") -> float:
    """logit a - logit b of one read-out, each label's first variant (keys "A:A", "A: A", ...:
    AnswerTokens.keys); log-probs of one softmax, so the logsumexp cancels."""

    def first(label: str) -> float:
        return next(v for k, v in token_logprobs.items() if k.split(":", 1)[0] == label)

    return first(a) - first(b)
