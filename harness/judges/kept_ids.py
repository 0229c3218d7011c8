"""The token ids a local judge keeps from tokenizing its prompts, so each prompt is tokenized once
per run: the request checks (before the first request is scored), the engine and the run's work
report (its trie minimum) read the same ids (harness.judges.chat.ChatPrompts.encode)."""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence

KEPT_IDS = 1 << 27
"""Token ids a judge keeps at most (int32: 512 MiB); past it the least recently used prompts are
dropped, and tokenized again if asked for. A run reads its prompts' ids three times in turn (the
request checks, each window of the judge's calls, the work report's trie minimum), so a run whose
prompts do not fit tokenizes them all three times: 1 << 27 holds a 100,000-judgment SummEval run
(about 75 million tokens, 300 MB); 1 << 25 held 45,000 of them."""


class PromptIds:
    """prompt -> its token ids (int32 arrays), the least recently used dropped past `limit` tokens.
    Keyed by a 16-byte digest of the prompt, not the prompt itself: a SummEval prompt is about 4 KB
    of text against 3 KB of ids, and the kept rows outlive the run's requests (metrics, report)."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit, self.tokens = KEPT_IDS if limit is None else limit, 0
        self._rows: OrderedDict[bytes, array] = OrderedDict()

    def get(self, prompt: str) -> list[int] | None:
        row = self.row(prompt)
        return None if row is None else row.tolist()

    def row(self, prompt: str) -> array | None:
        """The kept ids themselves (not a copy: callers do not change them), or None."""
        key = _key(prompt)
        row = self._rows.get(key)
        if row is not None:
            self._rows.move_to_end(key)
        return row

    def length(self, prompt: str) -> int | None:
        """The kept row's token count (None: not kept), without copying it."""
        row = self._rows.get(_key(prompt))
        return None if row is None else len(row)

    def put(self, prompt: str, ids: Sequence[int]) -> None:
        key = _key(prompt)
        if key in self._rows:
            return
        self._rows[key] = ids if isinstance(ids, array) else array("i", ids)
        self.tokens += len(ids)
        while self.tokens > self.limit and self._rows:
            self.tokens -= len(self._rows.popitem(last=False)[1])


def _key(prompt: str) -> bytes:
    return hashlib.blake2b(prompt.encode(), digest_size=16).digest()
