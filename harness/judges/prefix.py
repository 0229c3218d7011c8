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
- Across calls (and those chunks), the KV of recent inner nodes is kept, up to `keep_tokens`
  tokens, least recently used first out, keyed by the token prefix it belongs to (as vLLM's prefix
  cache does): the request cache hands the judge `cache.chunk` requests per call, and without this
  every call would recompute its document's chat header and source. A new tree's node whose
  prefix is kept (wholly or in part) takes its KV from there and runs only the rest. PreemptibleJudge
  starts every outer call from an empty store (harness.judges.wrappers.fresh_prefixes), so scores
  never depend on what the process judged before (a resumed run equals an unbroken one bit for bit).

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
    """The KV came from an earlier call (KeptPrefixes): nothing to run, only its children."""
    tail: bool = False
    """A leaf whose KV is kept all the same: the last prompt of a call or chunk, which the next
    one most likely continues (the rest of its candidate A's pairs)."""

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
          out: list[PrefixNode], min_prefix: int) -> None:
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


@dataclass(eq=False)
class KeptPrefix:
    """The KV of one computed inner node's whole path, kept for later calls."""

    tokens: tuple[int, ...]
    """The path's tokens, from position 0 to the node's last."""
    pieces: tuple[list[tuple[Any, Any]], ...]
    """Per-node per-layer (keys, values) covering `tokens` in order (the ancestors', then its own)."""

    def kv(self, start: int, end: int) -> list[tuple[Any, Any]]:
        """Per layer (keys, values) of positions [start, end)."""
        import torch

        parts, at = [], 0
        for piece in self.pieces:
            n = piece[0][0].shape[1]
            lo, hi = max(start, at), min(end, at + n)
            if lo < hi:
                parts.append([(k[:, lo - at : hi - at], v[:, lo - at : hi - at]) for k, v in piece])
            at += n
        if len(parts) == 1:
            return parts[0]
        return [(torch.cat([p[layer][0] for p in parts], 1), torch.cat([p[layer][1] for p in parts], 1))
                for layer in range(len(parts[0]))]


class KeptPrefixes:
    """An LRU of KeptPrefix by token path, holding at most `max_tokens` distinct tokens of KV."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max(0, int(max_tokens))
        self.entries: OrderedDict[tuple[int, ...], KeptPrefix] = OrderedDict()
        self.tokens_reused = 0
        """Tokens whose KV a later call took from here instead of computing."""

    def longest(self, path: Sequence[int]) -> tuple[KeptPrefix | None, int]:
        """The kept prefix sharing the most leading tokens with `path`, and how many (marked used)."""
        best, length = None, 0
        for entry in self.entries.values():
            n = common_prefix_len(entry.tokens, path)
            if n > length:
                best, length = entry, n
        if best is not None:
            self.entries.move_to_end(best.tokens)
        return best, length

    def graft(self, nodes: list[PrefixNode], before: Sequence[int] = ()) -> None:
        """Give `nodes` (siblings under the path `before`) the KV kept for their prefixes: a node
        wholly kept is `done` (its children are looked up in turn), one kept in part is split
        into a done head and the rest. A node where a prompt ends keeps its last token to run."""
        if not self.entries:
            return
        for i, n in enumerate(nodes):
            path = [*before, *n.tokens]
            entry, covered = self.longest(path)
            end = len(path)
            if n.ends:
                covered = min(covered, end - 1)
            if entry is None or covered <= n.start:
                continue
            self.tokens_reused += min(covered, end) - n.start
            if covered >= end:
                n.kv, n.done = entry.kv(n.start, end), True
                self.graft(n.children, path)
                continue
            cut = covered - n.start
            head = PrefixNode(tokens=n.tokens[:cut], start=n.start, parent=n.parent, children=[n],
                              kv=entry.kv(n.start, covered), done=True)
            n.tokens, n.start, n.parent = n.tokens[cut:], covered, head
            nodes[i] = head

    def keep(self, nodes: Sequence[PrefixNode]) -> None:
        """Keep the KV of every inner node computed under `nodes`, then drop the least recently
        used until at most `max_tokens` distinct tokens of KV remain."""
        if self.max_tokens == 0:
            return
        stack = list(nodes)
        while stack:
            n = stack.pop()
            stack.extend(n.children)
            if n.kv is not None and not n.done and n.keeps_kv():
                path = n.path()
                tokens = tuple(t for a in (*path, n) for t in a.tokens)
                self.entries[tokens] = KeptPrefix(tokens, tuple(a.kv for a in path) + (n.kv,))  # type: ignore[operator]
                self.entries.move_to_end(tokens)
        while self.entries and self.size() > self.max_tokens:
            self.entries.popitem(last=False)

    def clear(self) -> None:
        self.entries.clear()

    def size(self) -> int:
        """Distinct tokens of KV held (pieces shared by several paths counted once)."""
        seen: dict[int, int] = {}
        for entry in self.entries.values():
            for piece in entry.pieces:
                seen[id(piece)] = piece[0][0].shape[1]
        return sum(seen.values())


class PrefixScorer:
    """Runs answer-token scoring through the radix tree; same outputs as one forward per prompt."""

    def __init__(self, model: Any, answer_ids: Any, pad_id: int, device: str, batch_size: int,
                 min_prefix: int = 16, max_cached_tokens: int = 32768, engine: Any = None,
                 max_batch_tokens: int = 4096, keep_tokens: int = 0) -> None:
        self.model = model
        self.kept = KeptPrefixes(keep_tokens)
        """KV of recent inner nodes kept across calls (0 tokens: none kept)."""
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
        out: list[list[float] | None] = [None] * len(rows)
        for chunk in chunk_rows(rows, self.max_cached_tokens):
            top = build_tree(rows, chunk, self.min_prefix)
            if self.kept.max_tokens:
                _mark_tails(top, {chunk[-1], len(rows) - 1})
            self.kept.graft(top)
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
            self.kept.keep(top)  # the rest of the tree's KV dies with it here
        return out  # type: ignore[return-value]

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


def _mark_tails(nodes: Sequence[PrefixNode], rows: set[int]) -> None:
    """Mark the leaves where `rows` end as tails (their KV is kept for the next call)."""
    stack = list(nodes)
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if not n.children and rows & set(n.ends):
            n.tail = True


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
