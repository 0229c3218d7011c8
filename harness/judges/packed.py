"""Packed forward for Llama-family decoders: rows of any length, no padding anywhere.

HF's batched forward pads every row to the longest one, so each matmul also multiplies padding,
and SDPA on CPU computes the whole masked rectangle. This engine concatenates the rows' tokens
into ONE (tokens, hidden) matrix for every linear layer (the model's own modules: norms,
projections, MLP), runs attention row by row with SDPA (each row's queries against its own
cached past plus its own causal keys; rows under one parent share one copy of the past), and
applies the final norm and LM head only at each row's last token (in float32 whatever the
model's dtype: harness.judges.head); in the last layer only the last
tokens get a query, attention, o_proj and MLP (the others still give their keys and values).
Weights are not touched.
(Fused Q/K/V and gate/up matmuls gained nothing on CPU, and SiLU on the strided half of a fused
output lost, so the modules run as they are.)

Used by `HFJudge` (plain rows) and `PrefixScorer` (tree segments with a cached past) where
`unsupported(model)` is None: Llama and Mistral architectures (SmolLM2, Llama-3, Mistral-7B)
with full attention, or a sliding window no shorter than the longest row. Results equal HF's
forward within fp tolerance (tests/judges/test_packed.py); everything else uses HF's forward.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.judges import cpu_kernels
from harness.judges.head import FloatHead

ARCHITECTURES = ("llama", "mistral")


@dataclass(frozen=True)
class Segment:
    """One row: tokens that continue a cached past (or start a prompt)."""

    tokens: Sequence[int]
    """The row's own tokens."""
    start: int = 0
    """Tokens before this row (its first position id)."""
    past: tuple = ()
    """The cached KV before it: the ancestors' KV in order, rows under the same parent sharing one
    tuple object. Torch path: per-layer [(keys, values)] lists, each (kv heads, len, head dim),
    concatenated once per layer for all rows of a parent. Kernel path (`PackedLlama.paged`): the
    last entry, the parent's `cpu_kernels.PagedKV`, covers the whole past."""
    keep: bool = False
    """Return this row's own KV (for rows whose continuations come later)."""


def unsupported(model: Any) -> str | None:
    """Why the packed engine cannot run this model, or None if it can."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in ARCHITECTURES:
        return f"architecture {kind!r} is not one of {', '.join(ARCHITECTURES)}"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        return "the model does not have the Llama module layout"
    types = set(getattr(config, "layer_types", None) or [])
    if types - {"full_attention", "sliding_attention"}:
        return f"attention kinds {sorted(types)} are not supported"
    return None


class PackedLlama:
    """The packed forward over a loaded HF Llama/Mistral model (weights shared with it)."""

    def __init__(self, model: Any, kernels: str = "auto") -> None:
        reason = unsupported(model)
        if reason:
            raise ValueError(f"packed engine: {reason}")
        if kernels not in cpu_kernels.KERNELS:
            raise ValueError(f"kernels: {kernels!r} is not one of {', '.join(cpu_kernels.KERNELS)}")
        self.model = model
        self.inner = model.model
        config = model.config
        types = set(getattr(config, "layer_types", None) or [])
        window = getattr(config, "sliding_window", None)
        self.window = (
            window
            if isinstance(window, int) and window > 0 and (not types or "sliding_attention" in types)
            else None
        )
        """Tokens a query may look back (None: unlimited); rows longer than this are not run here."""
        self.rope = sys.modules[type(self.inner.layers[0].self_attn).__module__].apply_rotary_pos_emb
        attn = self.inner.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.scaling = attn.scaling
        self.head = FloatHead(model)
        """The final norm and LM head: float32 logits whatever the model's dtype (harness.judges.head)."""
        device = model.lm_head.weight.device
        dtype = str(model.lm_head.weight.dtype).removeprefix("torch.")
        why = (
            "kernels: torch"
            if kernels == "torch"
            else cpu_kernels.unavailable(device.type, dtype, self.head_dim)
        )
        if why is not None and kernels == "vllm":
            raise ValueError(f"kernels: vllm cannot run here: {why}")
        self.paged = why is None
        """Attention and norms through vLLM's CPU kernels (harness.judges.cpu_kernels): one attention
        call per layer for all rows over a paged KV pool; else torch's SDPA row by row."""
        self.rotary = None
        """RoPE through vLLM's kernel (kernel path, rotate-half RoPE), else the model's own function."""
        if self.paged:
            try:
                self.rotary = cpu_kernels.Rotary(
                    self.inner.rotary_emb, self.head_dim, model.lm_head.weight.dtype
                )
            except ValueError:
                pass
        self._pool: cpu_kernels.KVPool | None = None
        """The kernel path's pool for calls that bring none (plain rows), kept for the next such call."""
        self.kernels_note = (
            (cpu_kernels.NOTE if self.rotary is not None else cpu_kernels.NOTE.replace(", RoPE", ""))
            if self.paged
            else f"torch ({why})"
        )
        """The `kernels` entry of the judge's numerics."""

    def fits(self, longest: int) -> bool:
        """Whether rows up to `longest` tokens (past included) attend exactly as the model does."""
        return self.window is None or longest <= self.window

    def new_pool(self, blocks: int) -> cpu_kernels.KVPool:
        """A paged KV pool of `blocks` blocks for the kernel path (it grows if a forward needs more)."""
        return cpu_kernels.KVPool(
            len(self.inner.layers), blocks, self.kv_heads, self.head_dim, self.model.lm_head.weight.dtype
        )

    def pool_blocks(self, segments: Sequence[Segment]) -> int:
        """Blocks a pool needs to run these rows (none kept) on the kernel path."""
        return sum(cpu_kernels.blocks_of(s.start, len(s.tokens)) for s in segments)

    def forward(
        self, segments: Sequence[Segment], pool: cpu_kernels.KVPool | None = None
    ) -> tuple[Any, list[Any]]:
        """Last-token logits (rows, vocab; float32 whatever the model's dtype, harness.judges.head)
        and, for rows with `keep`, their KV for their children: their own per-layer KV (torch
        path), or a `cpu_kernels.PagedKV` in `pool` (kernel path; a pool of its own when None)."""
        if self.paged:
            if pool is None:
                pasts = {id(s.past[-1].pool): s.past[-1].pool for s in segments if s.past}
                if len(pasts) > 1:
                    raise ValueError("rows continuing pasts in different KV pools run in separate forwards")
                if pasts:  # rows continuing a past: their parents' pool
                    pool = next(iter(pasts.values()))
                elif any(s.keep for s in segments):  # rows whose KV children will read: a pool of their own
                    pool = self.new_pool(self.pool_blocks(segments))
                else:  # plain rows: one pool reused by every such call, emptied first
                    blocks = self.pool_blocks(segments)
                    if self._pool is None or self._pool.capacity < blocks:
                        self._pool = self.new_pool(blocks)
                    self._pool.reset()
                    pool = self._pool
            return self._forward_paged(segments, pool)
        device = self.model.lm_head.weight.device
        lengths, ids, pos, last_at = self._inputs(segments)
        h, d, nh, nkv = self.inner.embed_tokens(ids), self.head_dim, self.heads, self.kv_heads
        masks = [_mask(s.start, n, h.dtype, device) for s, n in zip(segments, lengths)]
        # Rows under one parent share its past: one buffer per parent holds the past once, and
        # each row copies only its own keys behind it (no per-row concatenation of the past).
        parents: dict[int, tuple[tuple, int]] = {}
        for s, n in zip(segments, lengths):
            if s.past:
                parents[id(s.past)] = (s.past, max(parents.get(id(s.past), ((), 0))[1], n))
        kept: list[list[tuple[Any, Any]] | None] = [[] if s.keep else None for s in segments]
        cos, sin = self.inner.rotary_emb(h, pos[None])
        out = h.new_empty((h.shape[0], nh * d))
        final = self.inner.layers[-1]
        for li, layer in enumerate(self.inner.layers[:-1]):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(1, -1, nh, d)
            k = attn.k_proj(x).view(1, -1, nkv, d)
            v = attn.v_proj(x).view(-1, nkv, d)
            q, k = self.rope(q, k, cos, sin, unsqueeze_dim=2)
            buffers = {key: _past_buffer(past, li, extra) for key, (past, extra) in parents.items()}
            self._attend(q[0], k[0], v, segments, lengths, masks, buffers, kept, out)
            h = h + attn.o_proj(out)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        # The last layer: only the rows' last tokens feed the logits, so only they get a query,
        # an attention output, o_proj and the MLP; every token still needs its keys and values
        # (kept rows pass them on). The same maths, with ~1/layers of the linear FLOPs skipped.
        attn = final.self_attn
        x = final.input_layernorm(h)
        k = attn.k_proj(x).view(1, -1, nkv, d)
        v = attn.v_proj(x).view(-1, nkv, d)
        q = attn.q_proj(x[last_at]).view(1, -1, nh, d)
        _, k = self.rope(k, k, cos, sin, unsqueeze_dim=2)
        q, _ = self.rope(q, q, cos[:, last_at], sin[:, last_at], unsqueeze_dim=2)
        li = len(self.inner.layers) - 1
        buffers = {key: _past_buffer(past, li, extra) for key, (past, extra) in parents.items()}
        out = out[: len(segments)]
        self._attend(q[0], k[0], v, segments, lengths, masks, buffers, kept, out, last_only=True)
        h = h[last_at] + attn.o_proj(out)
        h = h + final.mlp(final.post_attention_layernorm(h))
        return self.head.logits(h), kept

    def _inputs(self, segments: Sequence[Segment]) -> tuple[list[int], Any, Any, Any]:
        """(row lengths, the rows' token ids back to back, their positions, each row's last index)."""
        import torch

        device = self.model.lm_head.weight.device
        lengths = [len(s.tokens) for s in segments]
        ids = torch.tensor([t for s in segments for t in s.tokens], dtype=torch.long, device=device)
        pos = torch.cat([torch.arange(s.start, s.start + n) for s, n in zip(segments, lengths)]).to(device)
        last_at = (torch.tensor(lengths).cumsum(0) - 1).to(device)
        return lengths, ids, pos, last_at

    def _forward_paged(self, segments: Sequence[Segment], pool: cpu_kernels.KVPool) -> tuple[Any, list[Any]]:
        """`forward` through vLLM's CPU kernels: the same maths in another float order. Each norm
        after a residual add is one fused kernel (the add in place), and each layer's attention one
        call for all rows: every row's keys and values go into its blocks of the pool, then each
        query attends to its row's keys up to its own position (its past through the row's block
        table). The last layer as in `forward`: only the rows' last tokens get a query and an MLP."""
        lengths, ids, pos, last_at = self._inputs(segments)
        d, nh, nkv = self.head_dim, self.heads, self.kv_heads
        attend = cpu_kernels.Attention(
            pool,
            [(s.past[-1] if s.past else None, s.start, n) for s, n in zip(segments, lengths)],
            nh,
            nkv,
            d,
            self.scaling,
        )
        h = self.inner.embed_tokens(ids)
        rope = self._rope(h, pos, last_at)
        layers = self.inner.layers
        x = cpu_kernels.rms_norm(layers[0].input_layernorm, h)
        for li, layer in enumerate(layers[:-1]):
            attn = layer.self_attn
            q = rope(attn.q_proj(x).view(-1, nh, d))
            k = rope(attn.k_proj(x).view(-1, nkv, d))
            v = attn.v_proj(x).view(-1, nkv, d)
            o = attn.o_proj(attend(li, q, k, v))
            x = cpu_kernels.add_rms_norm(layer.post_attention_layernorm, o, h)  # h += o; x = norm(h)
            x = cpu_kernels.add_rms_norm(layers[li + 1].input_layernorm, layer.mlp(x), h)
        final = layers[-1]
        attn = final.self_attn
        k = rope(attn.k_proj(x).view(-1, nkv, d))
        v = attn.v_proj(x).view(-1, nkv, d)
        q = rope(attn.q_proj(x[last_at]).view(-1, nh, d), last=True)
        o = attn.o_proj(attend(len(layers) - 1, q, k, v, last_only=True))
        h = h[last_at]
        x = cpu_kernels.add_rms_norm(final.post_attention_layernorm, o, h)
        h = h + final.mlp(x)
        kept = [attend.kept(r) if s.keep else None for r, s in enumerate(segments)]
        attend.release([s.keep for s in segments])
        return self.head.logits(h), kept

    def _rope(self, h: Any, pos: Any, last_at: Any) -> Any:
        """rope(x (tokens, heads, dim), last=False) -> x rotated at the tokens' positions (with
        `last`, x holds the rows' last tokens): vLLM's kernel in place, or the model's function."""
        if self.rotary is not None:
            last_pos = pos[last_at]
            return lambda x, last=False: self.rotary(last_pos if last else pos, x)
        cos, sin = self.inner.rotary_emb(h, pos[None])
        cos_last, sin_last = cos[:, last_at], sin[:, last_at]

        def rope(x: Any, last: bool = False) -> Any:
            c, s_ = (cos_last, sin_last) if last else (cos, sin)
            return self.rope(x[None], x[None], c, s_, unsqueeze_dim=2)[0][0]

        return rope

    def _attend(self, q, k, v, segments, lengths, masks, buffers, kept, out, last_only=False) -> None:
        """Attention of every row into `out` (tokens, heads x dim): the row's queries over its
        past (from `buffers`, one per parent) and its own keys; appends kept rows' own KV.
        With `last_only`, `q` and `out` hold one position per row (its last token), which
        attends to every key of the row, so no mask applies."""
        import torch.nn.functional as F

        nh, nkv, d = self.heads, self.kv_heads, self.head_dim
        # CPU SDPA handles grouped KV heads itself; CUDA's fused kernels with a mask want them expanded.
        native_gqa = q.device.type == "cpu" or nkv == nh
        at = 0
        for r, (s, n) in enumerate(zip(segments, lengths)):
            kr, vr = k[at : at + n].transpose(0, 1), v[at : at + n].transpose(0, 1)
            if kept[r] is not None:
                kept[r].append((kr.contiguous(), vr.contiguous()))
            if s.past:
                bk, bv, p = buffers[id(s.past)]
                bk[:, p : p + n] = kr
                bv[:, p : p + n] = vr
                kr, vr = bk[:, : p + n], bv[:, : p + n]
            if not native_gqa:
                kr, vr = kr.repeat_interleave(nh // nkv, dim=0), vr.repeat_interleave(nh // nkv, dim=0)
            if last_only:
                o = F.scaled_dot_product_attention(
                    q[r : r + 1].transpose(0, 1)[None],
                    kr[None],
                    vr[None],
                    scale=self.scaling,
                    enable_gqa=native_gqa and nkv != nh,
                )
                out[r] = o[0, :, 0].reshape(nh * d)
            else:
                o = F.scaled_dot_product_attention(
                    q[at : at + n].transpose(0, 1)[None],
                    kr[None],
                    vr[None],
                    attn_mask=masks[r],
                    is_causal=masks[r] is None,
                    scale=self.scaling,
                    enable_gqa=native_gqa and nkv != nh,
                )
                out[at : at + n] = o[0].transpose(0, 1).reshape(n, nh * d)
            at += n


def row_batches(
    lengths: Sequence[int], max_rows: int, max_tokens: int | None, padded: bool = False
) -> list[list[int]]:
    """Consecutive index groups of at most `max_rows` rows and, when given, `max_tokens` tokens: the
    rows' own tokens back to back (the packed engine), or with `padded` the positions of a padded
    batch, rows x its longest row (HF's forward); a longer row runs alone."""
    batches: list[list[int]] = []
    size = longest = 0
    for i, n in enumerate(lengths):
        grown = (len(batches[-1]) + 1) * max(longest, n) if padded and batches else size + n
        if batches and len(batches[-1]) < max_rows and (max_tokens is None or grown <= max_tokens):
            batches[-1].append(i)
            size, longest = size + n, max(longest, n)
        else:
            batches.append([i])
            size = longest = n
    return batches


def _mask(start: int, n: int, dtype, device) -> Any:
    """Additive bottom-right-aligned causal mask of n queries over start + n keys (0 where a
    query may attend, -inf elsewhere); None when start is 0 (SDPA's causal kernel applies)."""
    import torch

    if start == 0:
        return None
    allowed = torch.ones((n, start + n), dtype=torch.bool, device=device).tril_(diagonal=start)
    return torch.zeros((n, start + n), dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))


def _past_buffer(past: tuple, layer: int, extra: int) -> tuple[Any, Any, int]:
    """(keys, values, past length) of one layer: the past KV pieces copied once into buffers
    with `extra` free positions behind them for a row's own keys."""
    pieces = [kv[layer] for kv in past]
    length = sum(p[0].shape[1] for p in pieces)
    k0 = pieces[0][0]
    keys = k0.new_empty((k0.shape[0], length + extra, k0.shape[2]))
    values = k0.new_empty((k0.shape[0], length + extra, k0.shape[2]))
    at = 0
    for pk, pv in pieces:
        keys[:, at : at + pk.shape[1]] = pk
        values[:, at : at + pk.shape[1]] = pv
        at += pk.shape[1]
    return keys, values, length
