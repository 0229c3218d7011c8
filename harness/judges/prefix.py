"""Prefix reuse for the transformers backend: compute each shared prompt prefix once.

Pairwise judging repeats long prefixes: every pair of a document starts with the chat header and
the source text; every pair with the same candidate A shares that candidate too; and when many
instructions judge the same pair (a ZEPO search), everything up to the instruction (which comes
LAST in our prompts) is shared. We build a radix tree (compressed trie) over the token ids,
run the tree level by level, and keep the KV cache of every inner node so that its children only
process their own tokens:

- Level by level, nodes of one level are batched together even when they hang under different
  parents. With the packed engine (`harness.judges.packed`, Llama/Mistral) the nodes' tokens are
  concatenated without padding and each row attends over its ancestors' KV, assembled once per
  parent. Otherwise (HF's forward) each row's ancestor KV is left-padded to the longest in the
  batch (masked out), the node's own tokens are left-padded too, and position ids continue from
  the row's own prefix length. Either way a row computes what the full prompt computes alone.
- The answer log-probabilities are read at the last position (the node's last real token) for
  every node at which a prompt ends.
- Inner nodes shorter than `min_prefix` tokens are not cached: their tokens are pushed down into
  their children, since a tiny shared piece costs more in bookkeeping than it saves.
- Sorted prompts are cut into chunks whose trie holds at most `max_cached_tokens` tokens, which
  bounds the KV kept alive at once.
- Across calls (and those chunks), shared prefixes are kept as canonical blocks (PrefixBlocks:
  `block`-token pieces of KV keyed by their token path, up to `keep_tokens` tokens, least recently
  used first out, as vLLM's prefix cache keeps whole blocks): the request cache hands the judge
  `cache.chunk` requests per call, and without this every call would recompute its document's chat
  header and source. Every block is computed alone, so its bits depend on its tokens only, and
  which blocks a call uses depends on that call's prompts only; a score therefore never depends on
  what the process judged before, and a run resumed after a kill (even inside a call) equals an
  unbroken one bit for bit.

Counters (`tokens_processed`, `tokens_padded`, `forwards`) let the benchmark compare the work
done with the unique-token minimum (`trie_size`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.judges.packed import Segment, row_batches


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def trie_size(rows: Sequence[Sequence[int]]) -> int:
    """Number of distinct token prefixes: the fewest tokens any prefix-sharing scheme must run."""
    total, prev = 0, None
    for row in sorted(list(r) for r in rows):
        total += len(row) - (common_prefix_len(prev, row) if prev is not None else 0)
        prev = row
    return total


@dataclass(eq=False)
class PrefixNode:
    """One edge of the radix tree: a run of tokens shared by every prompt below it."""

    tokens: list[int]
    """This node's own tokens (the part after its parent)."""
    start: int
    """Number of tokens before this node (the parent's full path length)."""
    parent: PrefixNode | None = None
    """None for a top-level node."""
    ends: list[int] = field(default_factory=list)
    """Indices of the prompts that end exactly at this node's last token."""
    children: list[PrefixNode] = field(default_factory=list)
    """Nodes that continue this one."""
    kv: list[tuple[Any, Any]] | None = None
    """Per layer (keys, values) of this node's own tokens, shape (heads, len, dim); inner nodes only."""
    done: bool = False
    """The KV is there already (a canonical block, PrefixBlocks): nothing to run, only its children."""
    tail: bool = False
    """Keep this node's KV although nothing below it runs in this forward (a canonical block)."""

    def keeps_kv(self) -> bool:
        return bool(self.children) or self.tail

    def path(self) -> list[PrefixNode]:
        """Ancestors from the top-level node down to the parent."""
        out: list[PrefixNode] = []
        node = self.parent
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]


def build_tree(rows: Sequence[Sequence[int]], indices: Sequence[int] | None = None,
               min_prefix: int = 16) -> list[PrefixNode]:
    """Radix tree over `rows[i]` for i in `indices` (all by default); returns the top-level nodes."""
    idx = list(range(len(rows))) if indices is None else list(indices)
    order = sorted(idx, key=lambda i: list(rows[i]))
    if any(len(rows[i]) == 0 for i in order):
        raise ValueError("prefix reuse needs non-empty prompts")
    top: list[PrefixNode] = []
    _grow(rows, order, 0, 0, None, top, max(1, int(min_prefix)))
    return top


def _grow(rows, order: list[int], start: int, seg_start: int, parent: PrefixNode | None,
          out: list[PrefixNode], min_prefix: int, keep_top: bool = False) -> None:
    """Add nodes for `order` (sorted; all share rows[i][:start] and are longer than start).
    `keep_top`: this level's shared pieces get nodes however short (under a canonical block,
    such a piece is the rest of a shared prefix, which pushed down would run once per child)."""
    k = 0
    while k < len(order):
        j = k
        token = rows[order[k]][start]
        while j + 1 < len(order) and rows[order[j + 1]][start] == token:
            j += 1
        group = order[k : j + 1]
        k = j + 1
        first, last = rows[group[0]], rows[group[-1]]
        # In sorted order the common prefix of a group is that of its first and last members.
        end = start + common_prefix_len(first[start:], last[start:])
        ends = [i for i in group if len(rows[i]) == end]
        rest = [i for i in group if len(rows[i]) > end]
        if rest and not ends and end - seg_start < min_prefix and not keep_top:
            # Too short to be worth a cached node: its tokens go down into each child.
            _grow(rows, rest, end, seg_start, parent, out, min_prefix)
            continue
        node = PrefixNode(tokens=list(first[seg_start:end]), start=seg_start, parent=parent, ends=ends)
        out.append(node)
        if rest:
            _grow(rows, rest, end, end, node, node.children, min_prefix)


def chunk_rows(rows: Sequence[Sequence[int]], max_cached_tokens: int) -> list[list[int]]:
    """Split prompt indices (in sorted order) into chunks whose tries hold <= max_cached_tokens."""
    order = sorted(range(len(rows)), key=lambda i: list(rows[i]))
    chunks: list[list[int]] = []
    size, prev = 0, None
    for i in order:
        new = len(rows[i]) - (common_prefix_len(rows[prev], rows[i]) if prev is not None else 0)
        if chunks and size + new <= max_cached_tokens:
            chunks[-1].append(i)
            size += new
        else:
            chunks.append([i])
            size = len(rows[i])
        prev = i
    return chunks


class PrefixBlocks:
    """Canonical prefix blocks kept across calls: the KV of `block`-token pieces of shared prompt
    prefixes, keyed by their whole token path (positions 0 to the block's end), least recently used
    first out, at most `max_tokens` tokens of KV.

    Every block is computed ALONE (one forward of exactly its `block` tokens at positions
    [j*block, (j+1)*block), over its ancestor blocks' KV), so its bits are a function of its token
    path only: a block taken from here equals, bit for bit, the block a fresh process computes.
    Which blocks a call uses is decided by that call's prompts alone (PrefixScorer._tree), never by
    what is kept, so a prompt's score does not depend on what the process judged before: a run
    resumed after a kill equals an unbroken one byte for byte, with the kept KV on."""

    def __init__(self, max_tokens: int, block: int = 16) -> None:
        self.max_tokens = max(0, int(max_tokens))
        self.block = int(block)
        if self.block < 1:
            raise ValueError(f"prefix block must be >= 1 token, got {block}")
        self.entries: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self.tokens_reused = 0
        """Tokens whose KV a later use took from here instead of computing."""

    def get(self, path: tuple[int, ...]) -> list[tuple[Any, Any]] | None:
        kv = self.entries.get(path)
        if kv is not None:
            self.entries.move_to_end(path)
            self.tokens_reused += self.block
        return kv

    def put(self, path: tuple[int, ...], kv: list[tuple[Any, Any]]) -> None:
        if self.max_tokens < self.block:
            return
        self.entries[path] = kv
        self.entries.move_to_end(path)
        while self.size() > self.max_tokens:
            self.entries.popitem(last=False)

    def clear(self) -> None:
        self.entries.clear()

    def size(self) -> int:
        """Tokens of KV held."""
        return len(self.entries) * self.block


class PrefixScorer:
    """Runs answer-token scoring through the radix tree; same outputs as one forward per prompt."""

    def __init__(self, model: Any, answer_ids: Any, pad_id: int, device: str, batch_size: int,
                 min_prefix: int = 16, max_cached_tokens: int = 32768, engine: Any = None,
                 max_batch_tokens: int = 4096, keep_tokens: int = 0, block: int = 16,
                 line_end: Any = None) -> None:
        self.model = model
        self.line_end = line_end
        """token id -> whether its text ends a line (piece ends; None: every `block` tokens only)."""
        self.kept = PrefixBlocks(keep_tokens, block)
        """Canonical prefix blocks kept across calls (0 tokens: none, each call's tree stands alone)."""
        self.engine = engine
        """A PackedLlama (unpadded segments) or None (HF's forward on left-padded batches)."""
        self.max_batch_tokens = int(max_batch_tokens)
        self.answer_ids = answer_ids
        self.pad_id = int(pad_id)
        self.device = device
        self.batch_size = int(batch_size)
        self.min_prefix = int(min_prefix)
        self.max_cached_tokens = int(max_cached_tokens)
        self.tokens_processed = 0
        """Real tokens run through the model (each shared prefix counted once)."""
        self.tokens_padded = 0
        """Positions computed including padding (batch rows x padded width)."""
        self.attention_pairs = 0
        """Causal (query, key) pairs over real tokens: the attention work that was needed."""
        self.forwards = 0
        self._canonical: bool | None = None
        """Whether blocks are batch-invariant here (rows_invariant), once checked."""

    def answer_logprobs(self, rows: Sequence[Sequence[int]]) -> list[list[float]]:
        """Answer-token log-probs for every prompt, in input order."""
        out: list[list[float] | None] = [None] * len(rows)
        for chunk in chunk_rows(rows, self.max_cached_tokens):
            top = self._tree(rows, chunk)
            level = _to_run(top)
            while level:
                # Similar lengths together keep padding (wasted compute) small.
                level.sort(key=lambda n: (len(n.tokens), n.start), reverse=True)
                if self.engine is not None:
                    for batch in row_batches([len(n.tokens) for n in level], self.batch_size,
                                             self.max_batch_tokens):
                        self._run_packed([level[k] for k in batch], out)
                else:
                    for b in range(0, len(level), self.batch_size):
                        self._run(level[b : b + self.batch_size], out)
                level = _to_run([c for n in level for c in n.children])
        return out  # type: ignore[return-value]

    def _tree(self, rows: Sequence[Sequence[int]], chunk: list[int]) -> list[PrefixNode]:
        """The radix tree of `rows[i]` for i in `chunk`, its shared prefixes cut into canonical
        blocks (PrefixBlocks) where blocks are kept across calls.

        A prompt's canonical part is every whole piece before its last token (`piece_ends`: pieces
        end at line ends and every `block` tokens within a line, so whatever the prompt shares,
        with this chunk or any earlier one, is a run of whole pieces the store may hold). Those
        pieces come from the store or are computed (`_fill`); the rest of each prompt (one
        unfinished piece) forms radix trees under its last piece, run level by level as usual.
        The cut depends on each prompt alone and the trees on the chunk's prompts, so a chunk
        computes the same bits whatever the store holds. What is lost: where prompts part inside
        a piece, each branch reruns the piece's shared part (prompts part a few tokens after a line
        end: "Summary candidate B: ...", "Question: ..." -- a label's tokens per branch)."""
        if self.kept.max_tokens < self.kept.block or not self._blocks_canonical():
            return build_tree(rows, chunk, self.min_prefix)
        order = sorted(chunk, key=lambda i: list(rows[i]))
        if any(len(rows[i]) == 0 for i in order):
            raise ValueError("prefix reuse needs non-empty prompts")
        top: list[PrefixNode] = []
        blocks: dict[tuple[int, ...], PrefixNode] = {}
        groups: dict[int, tuple[PrefixNode | None, list[int]]] = {}
        for i in order:
            parent, begin = None, 0
            for end in piece_ends(rows[i], self.kept.block, self.line_end):
                path = tuple(rows[i][:end])
                node = blocks.get(path)
                if node is None:
                    node = blocks[path] = PrefixNode(tokens=list(path[begin:]), start=begin, parent=parent,
                                                     kv=self.kept.get(path), tail=True)
                    (parent.children if parent is not None else top).append(node)
                parent, begin = node, end
            groups.setdefault(id(parent), (parent, []))[1].append(i)
        self._fill(blocks)
        for parent, members in groups.values():
            start = 0 if parent is None else parent.start + len(parent.tokens)
            _grow(rows, members, start, start, parent, parent.children if parent is not None else top,
                  max(1, self.min_prefix), keep_top=parent is not None)
        return top

    def _fill(self, blocks: dict[tuple[int, ...], PrefixNode]) -> None:
        """Compute the blocks the store lacks, depth by depth (batched, as `_blocks_canonical`
        allows), keep them, and mark every block done."""
        missing = [path for path, n in blocks.items() if n.kv is None]
        # Pieces run together once their parents have run: by depth. HF's forward left-pads a
        # batch to one width and one past, which would put a piece's keys at other cache indices
        # in other batches, so there only pieces of the same start and length share a forward.
        key = {path: (len(blocks[path].path()),) + (() if self.engine is not None else
                                                    (blocks[path].start, len(blocks[path].tokens)))
               for path in missing}
        for level in sorted(set(key.values())):
            depth = [blocks[path] for path in missing if key[path] == level]
            for batch in row_batches([len(n.tokens) for n in depth], self.batch_size, self.max_batch_tokens):
                if self.engine is not None:
                    self._run_packed([depth[k] for k in batch], [])
                else:
                    self._run([depth[k] for k in batch], [])
        for path in missing:
            self.kept.put(path, blocks[path].kv)  # type: ignore[arg-type]
        for n in blocks.values():
            n.done = True

    def _blocks_canonical(self) -> bool:
        """Whether a block's KV is the same bits however many blocks share its forward: true when
        every linear layer's matmul gives each row the same bits whatever rows come with it (checked
        once per scorer on the model's own layer-0 weights; norms, RoPE and per-row attention are
        row-wise anyway). Where it fails (e.g. a BLAS that picks kernels by row count), blocks
        are not kept across calls and each call's tree stands alone, as with keep_tokens=0."""
        if self._canonical is None:
            self._canonical = all(rows_invariant(self.model, rows, self.max_batch_tokens)
                                  for rows in sorted({MIN_PIECE, self.kept.block}))
            if not self._canonical:
                import logging

                logging.getLogger(__name__).warning(
                    "prefix blocks are not kept across calls: this device's matmuls give a row different "
                    "bits in different batches, so kept blocks could differ from recomputed ones")
        return self._canonical

    def _run(self, nodes: list[PrefixNode], out: list[list[float] | None]) -> None:
        import torch

        width = max(len(n.tokens) for n in nodes)
        past = max(n.start for n in nodes)
        n_rows = len(nodes)
        input_ids = torch.full((n_rows, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n_rows, past + width), dtype=torch.long)
        pos = torch.zeros((n_rows, width), dtype=torch.long)
        for k, n in enumerate(nodes):
            m = len(n.tokens)
            input_ids[k, width - m:] = torch.tensor(n.tokens, dtype=torch.long)
            mask[k, past - n.start : past] = 1
            mask[k, past + width - m:] = 1
            pos[k, :] = n.start  # padding positions: any valid value, they are masked out
            pos[k, width - m:] = torch.arange(n.start, n.start + m)
        keep_kv = any(n.keeps_kv() for n in nodes)
        cache = self._gather_cache(nodes, past) if past > 0 else None
        if cache is None and keep_kv:
            from transformers import DynamicCache

            cache = DynamicCache()
        with torch.inference_mode():
            result = self.model(
                input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                position_ids=pos.to(self.device), past_key_values=cache,
                use_cache=cache is not None, logits_to_keep=1,
            )
            logp = torch.log_softmax(result.logits[:, -1, :].float(), dim=-1)[:, self.answer_ids].cpu().tolist()
            if keep_kv:
                layers = _cache_layers(result.past_key_values)
                for k, n in enumerate(nodes):
                    if n.keeps_kv():
                        m = len(n.tokens)
                        n.kv = [(key[k, :, past + width - m:].clone(), val[k, :, past + width - m:].clone())
                                for key, val in layers]
        self._record(nodes, logp, out, n_rows * width)

    def _run_packed(self, nodes: list[PrefixNode], out: list[list[float] | None]) -> None:
        import torch

        paths: dict[int, tuple] = {}
        segments = []
        for n in nodes:
            parent = id(n.parent)
            if parent not in paths:
                paths[parent] = tuple(a.kv for a in n.path())
            segments.append(Segment(n.tokens, n.start, paths[parent], keep=n.keeps_kv()))
        with torch.inference_mode():
            logits, kept = self.engine.forward(segments)
            logp = torch.log_softmax(logits.float(), dim=-1)[:, self.answer_ids].cpu().tolist()
        for k, n in enumerate(nodes):
            if n.keeps_kv():
                n.kv = kept[k]
        self._record(nodes, logp, out, sum(len(n.tokens) for n in nodes))

    def _record(self, nodes: list[PrefixNode], logp: list[list[float]], out: list[list[float] | None],
                positions: int) -> None:
        """Hand each ending prompt its row of log-probs; count the forward's work."""
        for k, n in enumerate(nodes):
            for i in n.ends:
                out[i] = logp[k]
        self.tokens_processed += sum(len(n.tokens) for n in nodes)
        self.attention_pairs += sum(len(n.tokens) * n.start + len(n.tokens) * (len(n.tokens) + 1) // 2
                                    for n in nodes)
        self.tokens_padded += positions
        self.forwards += 1

    def _gather_cache(self, nodes: list[PrefixNode], past: int):
        """A DynamicCache holding each row's ancestor KV, left-padded to `past` positions."""
        from transformers import DynamicCache

        paths = [n.path() for n in nodes]
        ref = next(p[0].kv for p in paths if p)
        data = []
        for layer, (k0, v0) in enumerate(ref):
            keys = k0.new_empty((len(nodes), k0.shape[0], past, k0.shape[-1]))
            vals = v0.new_empty((len(nodes), v0.shape[0], past, v0.shape[-1]))
            for row, (n, path) in enumerate(zip(nodes, paths)):
                at = past - n.start
                # Padding slots are masked out but must hold finite numbers (0 * NaN is NaN).
                keys[row, :, :at] = 0
                vals[row, :, :at] = 0
                for a in path:
                    ka, va = a.kv[layer]  # type: ignore[index]
                    keys[row, :, at : at + ka.shape[1]] = ka
                    vals[row, :, at : at + va.shape[1]] = va
                    at += ka.shape[1]
            data.append((keys, vals))
        return DynamicCache(ddp_cache_data=data)


MIN_PIECE = 4
"""Tokens a canonical piece holds at least: a matmul of 1-3 rows takes other kernels than a
longer one on this CPU's BLAS (measured: rows_invariant fails at 1, 2 and 3 rows, holds from 4),
so shorter pieces would not be batch-invariant."""


def piece_ends(row: Sequence[int], size: int, line_end: Any = None) -> list[int]:
    """Where `row`'s canonical pieces end (positions 1..len-1; the last token is never in one):
    after a token that ends a line (`line_end(token)`) and `size` tokens after the previous end,
    each piece at least MIN_PIECE tokens. An end depends on the tokens before it only, so prompts
    sharing a prefix share its pieces."""
    ends, last = [], 0
    for p in range(1, len(row)):
        if p - last >= size or (p - last >= MIN_PIECE and line_end is not None and line_end(row[p - 1])):
            ends.append(p)
            last = p
    return ends


def rows_invariant(model: Any, block: int, max_tokens: int) -> bool:
    """Whether `model`'s layer-0 linear layers give a block of `block` rows the same bits alone and
    inside batches of 2, 3, 5 and up to `max_tokens // block` blocks (in the model's dtype, on its
    device), at the front and at the back of the batch."""
    import torch

    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    linears = [m for m in (layers[0].modules() if layers is not None else model.modules())
               if isinstance(m, torch.nn.Linear)]
    if not linears:
        return False
    most = max(1, int(max_tokens) // max(1, int(block)))
    counts = sorted({c for c in (2, 3, 5, most) if c <= most})
    gen = torch.Generator(device="cpu").manual_seed(0)
    with torch.inference_mode():
        for lin in linears:
            w = lin.weight
            x = torch.randn((max([1, *counts]) * block, w.shape[1]), generator=gen).to(w.device, w.dtype)
            for c in counts:
                together = lin(x[: c * block])
                last = slice((c - 1) * block, c * block)
                if not (torch.equal(together[:block], lin(x[:block]))
                        and torch.equal(together[last], lin(x[last]))):
                    return False
    return True


def _to_run(nodes: Sequence[PrefixNode]) -> list[PrefixNode]:
    """The nodes to compute: `nodes`, each done one replaced by its children (recursively)."""
    out, stack = [], list(nodes)
    while stack:
        n = stack.pop()
        if n.done:
            stack.extend(n.children)
        else:
            out.append(n)
    return out


def _cache_layers(cache) -> list[tuple[Any, Any]]:
    """(keys, values) per layer, each (batch, heads, seq, dim), across cache API versions."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))  # transformers 4.x


def supports_prefix_reuse(model: Any, rows: Sequence[Sequence[int]]) -> bool:
    """Whether the pieced-together, left-padded cache computes exactly what a full pass does.

    Sliding-window masks are built on cache indices, which padding shifts; a batch's padded
    layout is at most twice the longest prompt, so within half the window nothing is cut.
    Attention kinds other than full and sliding (chunked, linear, ...) are not supported.
    """
    config = getattr(model, "config", None)
    types = set(getattr(config, "layer_types", None) or [])
    if types - {"full_attention", "sliding_attention"}:
        return False
    window = getattr(config, "sliding_window", None)
    sliding = isinstance(window, int) and window > 0 and (not types or "sliding_attention" in types)
    longest = max((len(r) for r in rows), default=0)
    return not sliding or 2 * longest <= window
