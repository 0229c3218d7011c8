"""Prefix reuse for the transformers backend: compute each shared prompt prefix once.

Pairwise judging repeats long prefixes: every pair of a document starts with the chat header and
the source text; every pair with the same candidate A shares that candidate too; and when many
instructions judge the same pair (a ZEPO search), everything up to the instruction (which comes
LAST in our prompts) is shared. We build a radix tree (compressed trie) over the token ids,
run the tree level by level, and keep the KV cache of every inner node so that its children only
process their own tokens:

- Level by level, nodes of one level are batched together even when they hang under different
  parents (within one group of documents, see `PrefixScorer._schedule`). With the packed engine
  (`harness.judges.packed`, Llama/Mistral) the nodes' tokens are concatenated without padding
  and each row attends over its ancestors' KV, assembled once per parent. Otherwise (HF's
  forward) each row's ancestor KV is left-padded to the longest in the batch (masked out), the
  node's own tokens are left-padded too, and position ids continue from the row's own prefix
  length. Either way a row computes what the full prompt computes alone.
- The answer log-probabilities are read at the last position (the node's last real token) for
  every node at which a prompt ends.
- Inner nodes shorter than `min_prefix` tokens are not cached: their tokens are pushed down into
  their children, since a tiny shared piece costs more in bookkeeping than it saves.
- Sorted prompts are cut into chunks whose trees keep about `max_cached_tokens` tokens of KV
  (inner nodes) alive at once (`chunk_rows`).
- One call, many commits (`stream`): the whole schedule (every level's batches) is fixed by the
  call's prompts alone, cached ones included, before anything runs. A batch runs when it finishes a
  prompt still `needed` or holds an ancestor of a node in a running batch; every batch that runs
  computes exactly what it computes in a call that needs everything, so a run resumed after a kill
  (the cached prompts not needed) scores the rest bit for bit like the unbroken run. Finished
  prompts are handed out after every forward that finishes any, so the request cache commits them
  as they come: the prefix work of a document is shared by all its pairs, and a kill loses at
  most one step (the forwards since the last commit: the prefixes a batch of prompts needs, then
  that batch).

Counters (`tokens_processed`, `tokens_padded`, `forwards`) let the benchmark compare the work
done with the unique-token minimum (`trie_size`).
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.judges.base import gather
from harness.judges.head import FloatHead
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
    return trie_work(rows)["tokens"]


def trie_work(rows: Sequence[Sequence[int]]) -> dict[str, int]:
    """The least work of exact next-token scoring of these token rows: each distinct prefix
    computed once (tokens), each distinct row's last token read (heads), and each of those tokens
    attending to itself and every token before it (pairs).

    The rows are compared as int32 bytes (a kept row, `array("i")`, is not copied into a list: a
    run's 24,000 prompts as lists of ints take about 36 bytes a token, as bytes 4): the order is
    token by token, so rows sharing a prefix still sit together, which is all the count needs."""
    tokens = heads = pairs = 0
    prev: np.ndarray | None = None
    for key in sorted({_row_bytes(r) for r in rows}):
        row = np.frombuffer(key, dtype=np.int32)
        start = 0
        if prev is not None:
            n = min(len(prev), len(row))
            differ = np.flatnonzero(prev[:n] != row[:n])
            start = int(differ[0]) if len(differ) else n
        tokens += len(row) - start
        pairs += (len(row) * (len(row) + 1) - start * (start + 1)) // 2
        heads += 1
        prev = row
    return {"tokens": tokens, "heads": heads, "pairs": pairs}


def _row_bytes(row: Sequence[int]) -> bytes:
    """A row's token ids as native int32 bytes (an int32 array's own, else converted)."""
    if isinstance(row, array) and row.typecode == "i":
        return row.tobytes()
    return array("i", row).tobytes()


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
    required: bool = False
    """`stream`: this node's batch must run (it finishes a needed prompt or feeds a node that does)."""

    def keeps_kv(self) -> bool:
        return bool(self.children)

    def path(self) -> list[PrefixNode]:
        """Ancestors from the top-level node down to the parent."""
        out: list[PrefixNode] = []
        node = self.parent
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]


def build_tree(
    rows: Sequence[Sequence[int]], indices: Sequence[int] | None = None, min_prefix: int = 16
) -> list[PrefixNode]:
    """Radix tree over `rows[i]` for i in `indices` (all by default); returns the top-level nodes."""
    idx = list(range(len(rows))) if indices is None else list(indices)
    order = sorted(idx, key=lambda i: list(rows[i]))
    if any(len(rows[i]) == 0 for i in order):
        raise ValueError("prefix reuse needs non-empty prompts")
    top: list[PrefixNode] = []
    _grow(rows, order, 0, 0, None, top, max(1, int(min_prefix)))
    return top


def _grow(
    rows,
    order: list[int],
    start: int,
    seg_start: int,
    parent: PrefixNode | None,
    out: list[PrefixNode],
    min_prefix: int,
) -> None:
    """Add nodes for `order` (sorted; all share rows[i][:start] and are longer than start)."""
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
        if rest and not ends and end - seg_start < min_prefix:
            # Too short to be worth a cached node: its tokens go down into each child.
            _grow(rows, rest, end, seg_start, parent, out, min_prefix)
            continue
        node = PrefixNode(tokens=list(first[seg_start:end]), start=seg_start, parent=parent, ends=ends)
        out.append(node)
        if rest:
            _grow(rows, rest, end, end, node, node.children, min_prefix)


def chunk_rows(rows: Sequence[Sequence[int]], max_cached_tokens: int) -> list[list[int]]:
    """Split prompt indices (in sorted order) into chunks whose trees keep about
    `max_cached_tokens` tokens of KV alive at most: the tokens of inner nodes (shared by two or
    more prompts, or a prompt continued by another); a leaf's KV dies with its forward. In sorted
    order the shared part of row i is its common prefix l_i with row i-1, and the inner tokens it
    adds are l_i - l_(i-1) when positive. An estimate, not a bound: min_prefix pushes a short
    shared run down into each child, which keeps up to min_prefix - 1 tokens more per extra
    branch when those children are inner nodes."""
    order = sorted(range(len(rows)), key=lambda i: list(rows[i]))
    chunks: list[list[int]] = []
    kept, shared, prev = 0, 0, None
    for i in order:
        lcp = common_prefix_len(rows[prev], rows[i]) if prev is not None else 0
        new = max(0, lcp - shared)
        if chunks and kept + new <= max_cached_tokens:
            chunks[-1].append(i)
            kept += new
            shared = lcp
        else:
            chunks.append([i])
            kept, shared = 0, 0
        prev = i
    return chunks


class PrefixScorer:
    """Runs answer-token scoring through the radix tree; same outputs as one forward per prompt."""

    GROUP_PROMPTS = 4
    """`_schedule`: subtrees are grouped until a group ends this many batches' worth of prompts."""

    def __init__(
        self,
        model: Any,
        answer_ids: Any,
        pad_id: int,
        device: str,
        batch_size: int,
        min_prefix: int = 16,
        max_cached_tokens: int = 32768,
        engine: Any = None,
        max_batch_tokens: int = 4096,
        head: FloatHead | None = None,
    ) -> None:
        self.model = model
        self.head = head if head is not None else FloatHead(model)
        """The final norm and LM head in float32 whatever the model's dtype (harness.judges.head);
        the packed engine uses its own (the same object when HFJudge builds both)."""
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

    def answer_logprobs(self, rows: Sequence[Sequence[int]]) -> list[list[float]]:
        """Answer-token log-probs for every prompt, in input order."""
        return gather(self.stream(rows), len(rows))

    def stream(
        self, rows: Sequence[Sequence[int]], needed: Collection[int] | None = None
    ) -> Iterator[list[tuple[int, list[float]]]]:
        """The answer log-probs of the `needed` prompts (all by default), as (index, row) lists,
        one list after every forward that finishes any. The batches are those of the call that
        needs every prompt (see the module docstring), so a prompt scores bit for bit alike
        whichever others are needed; batches that neither finish a needed prompt nor feed one are
        skipped."""
        want = set(range(len(rows))) if needed is None else set(needed)
        pool = None  # the kernel path's paged KV pool: one per call, reused by its chunks
        for chunk in chunk_rows(rows, self.max_cached_tokens):
            if want.isdisjoint(chunk):
                continue
            batches = self._schedule(build_tree(rows, chunk, self.min_prefix))
            _require(batches, want)
            pool = self._pool(batches, pool)
            for batch in batches:
                if not any(n.required for n in batch):
                    continue
                logp = self._run_packed(batch, pool) if self.engine is not None else self._run(batch)
                done = [(i, logp[k]) for k, n in enumerate(batch) for i in n.ends if i in want]
                if done:
                    yield done
            # the chunk's KV dies with its tree here

    def _schedule(self, top: list[PrefixNode]) -> list[list[PrefixNode]]:
        """Every batch of the tree, in the order they run: a function of the tree alone. The
        head all prompts share runs first; then the subtrees below it (documents, in practice),
        in tree order, grouped until a group ends at least `GROUP_PROMPTS` x batch_size prompts,
        each group level by level. A batch never mixes two groups, so a call whose cached prompts
        are whole groups (a ZEPO evaluation after its search, on documents with many pairs) or a
        prefix of this order (a resume) runs few batches it does not need; and documents with few
        pairs (two outputs each) still share forwards."""
        batches: list[list[PrefixNode]] = []
        shared = list(top)
        while len(shared) == 1 and not shared[0].ends:
            batches.append(shared)
            shared = shared[0].children
        for group in _groups(shared, self.GROUP_PROMPTS * self.batch_size):
            level = group
            while level:
                padded = self.engine is None
                if padded:
                    # Similar lengths together keep padding (wasted compute) small; a batch counts
                    # rows x its longest row against max_batch_tokens, as on the plain padded path.
                    level.sort(key=lambda n: (len(n.tokens), n.start), reverse=True)
                # Unpadded, tree order: a batch holds neighbours (one candidate A's pairs).
                batches += [
                    [level[k] for k in b]
                    for b in row_batches(
                        [len(n.tokens) for n in level], self.batch_size, self.max_batch_tokens, padded=padded
                    )
                ]
                level = [c for n in level for c in n.children]
        return batches

    def _pool(self, batches: list[list[PrefixNode]], pool: Any) -> Any:
        """The chunk's paged KV pool when the packed engine runs vLLM's CPU kernels (else None):
        the call's pool emptied (the previous chunk's KV dies here), grown to the chunk's peak if
        smaller: every inner node's blocks (kept until the chunk ends) plus the largest batch's
        leaves (given back after their forward)."""
        if self.engine is None or not getattr(self.engine, "paged", False):
            return None
        inner = sum(
            self.engine.pool_blocks([Segment(n.tokens, n.start)]) for b in batches for n in b if n.keeps_kv()
        )
        leaves = max(
            (
                self.engine.pool_blocks([Segment(n.tokens, n.start) for n in b if not n.keeps_kv()])
                for b in batches
            ),
            default=0,
        )
        if pool is None or pool.capacity < inner + leaves:
            return self.engine.new_pool(inner + leaves)
        pool.reset()
        return pool

    def _run(self, nodes: list[PrefixNode]) -> list[list[float]]:
        import torch

        width = max(len(n.tokens) for n in nodes)
        past = max(n.start for n in nodes)
        n_rows = len(nodes)
        input_ids = torch.full((n_rows, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n_rows, past + width), dtype=torch.long)
        pos = torch.zeros((n_rows, width), dtype=torch.long)
        for k, n in enumerate(nodes):
            m = len(n.tokens)
            input_ids[k, width - m :] = torch.tensor(n.tokens, dtype=torch.long)
            mask[k, past - n.start : past] = 1
            mask[k, past + width - m :] = 1
            pos[k, :] = n.start  # padding positions: any valid value, they are masked out
            pos[k, width - m :] = torch.arange(n.start, n.start + m)
        keep_kv = any(n.keeps_kv() for n in nodes)
        cache = self._gather_cache(nodes, past) if past > 0 else None
        if cache is None and keep_kv:
            from transformers import DynamicCache

            cache = DynamicCache()
        with torch.inference_mode(), self.head.capture() as got:
            result = self.model(
                input_ids=input_ids.to(self.device),
                attention_mask=mask.to(self.device),
                position_ids=pos.to(self.device),
                past_key_values=cache,
                use_cache=cache is not None,
                logits_to_keep=1,
            )
            logits = self.head.read(got[-1] if got else None, result.logits[:, -1, :])
            logp = torch.log_softmax(logits.float(), dim=-1)[:, self.answer_ids].cpu().tolist()
            if keep_kv:
                layers = _cache_layers(result.past_key_values)
                for k, n in enumerate(nodes):
                    if n.keeps_kv():
                        m = len(n.tokens)
                        n.kv = [
                            (key[k, :, past + width - m :].clone(), val[k, :, past + width - m :].clone())
                            for key, val in layers
                        ]
        self._record(nodes, n_rows * width)
        return logp

    def _run_packed(self, nodes: list[PrefixNode], pool: Any = None) -> list[list[float]]:
        import torch

        paths: dict[int, tuple] = {}
        segments = []
        for n in nodes:
            parent = id(n.parent)
            if parent not in paths:
                paths[parent] = tuple(a.kv for a in n.path())
            segments.append(Segment(n.tokens, n.start, paths[parent], keep=n.keeps_kv()))
        with torch.inference_mode():
            logits, kept = self.engine.forward(segments, pool)
            logp = torch.log_softmax(logits.float(), dim=-1)[:, self.answer_ids].cpu().tolist()
        for k, n in enumerate(nodes):
            if n.keeps_kv():
                n.kv = kept[k]
        self._record(nodes, sum(len(n.tokens) for n in nodes))
        return logp

    def _record(self, nodes: list[PrefixNode], positions: int) -> None:
        """Count the forward's work."""
        self.tokens_processed += sum(len(n.tokens) for n in nodes)
        self.attention_pairs += sum(
            len(n.tokens) * n.start + len(n.tokens) * (len(n.tokens) + 1) // 2 for n in nodes
        )
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


def _groups(roots: Sequence[PrefixNode], min_prompts: int) -> list[list[PrefixNode]]:
    """Consecutive runs of `roots` ending at least `min_prompts` prompts each (the last may end fewer)."""
    groups: list[list[PrefixNode]] = []
    count = min_prompts
    for root in roots:
        if count >= min_prompts:
            groups.append([])
            count = 0
        groups[-1].append(root)
        count += _prompts(root)
    return groups


def _prompts(node: PrefixNode) -> int:
    total, stack = 0, [node]
    while stack:
        n = stack.pop()
        total += len(n.ends)
        stack.extend(n.children)
    return total


def _require(batches: list[list[PrefixNode]], want: set[int]) -> None:
    """Mark the nodes whose batches must run: those finishing a wanted prompt, then (last batch
    first: a parent always runs before its children) the parents of every node in a batch that
    runs, whose KV that batch reads."""
    for batch in reversed(batches):
        for n in batch:
            n.required = n.required or not want.isdisjoint(n.ends)
        if any(n.required for n in batch):
            for n in batch:
                if n.parent is not None:
                    n.parent.required = True


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
