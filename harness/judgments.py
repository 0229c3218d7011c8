"""judgments.jsonl rows: one Judgment per line, written JSON-ready and parsed back with errors
that name the file, the record and the field."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from harness.errors import DataError, located
from harness.types import Judgment

ROW_KEYS = ("doc_id", "a_id", "b_id", "p_a", "token_logprobs", "human_a", "human_b", "gold_a")
"""Keys of one judgments.jsonl row, in the order they are written."""


def judgment_to_row(j: Judgment) -> dict[str, Any]:
    """One judgments.jsonl row (JSON-ready; -inf logprobs and NaN P(A) stay floats)."""
    logprobs = {str(k): float(v) for k, v in j.token_logprobs.items()}
    values = (j.doc_id, j.a_id, j.b_id, float(j.p_a), logprobs, _opt(j.human_a, float),
              _opt(j.human_b, float), _opt(j.gold_a, bool))
    return dict(zip(ROW_KEYS, values))


def _opt(x: Any, kind: type) -> Any:
    return None if x is None else kind(x)


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def judgment_from_row(
    row: Mapping[str, Any], path: object = "<row>", record: object | None = None
) -> Judgment:
    """Parse a judgments.jsonl row; DataError names path, record and field on a bad value."""

    def bad(field: str | None, why: str) -> DataError:
        return DataError(why, where=located(path, record, field))

    if not isinstance(row, Mapping):
        raise bad(None, f"expected a JSON object, got {type(row).__name__}")
    for key in ("doc_id", "a_id", "b_id"):
        if not isinstance(row.get(key), str):
            raise bad(key, f"must be a string, got {row.get(key)!r}")
    p_a = row.get("p_a")
    if not _number(p_a) or not (math.isnan(p_a) or 0 <= p_a <= 1):
        raise bad("p_a", f"must be a probability in [0, 1] (or NaN), got {p_a!r}")
    logprobs = row.get("token_logprobs") or {}
    if not isinstance(logprobs, Mapping) or not all(
        isinstance(k, str) and _number(v) for k, v in logprobs.items()
    ):
        raise bad("token_logprobs", "must map token keys (strings) to numbers")
    for key in ("human_a", "human_b"):
        if row.get(key) is not None and not _number(row[key]):
            raise bad(key, f"must be a number or null, got {row[key]!r}")
    if row.get("gold_a") is not None and not isinstance(row["gold_a"], bool):
        raise bad("gold_a", f"must be true, false or null, got {row['gold_a']!r}")
    logprobs = {k: float(v) for k, v in logprobs.items()}
    return Judgment(row["doc_id"], row["a_id"], row["b_id"], float(p_a), logprobs,
                    _opt(row.get("human_a"), float), _opt(row.get("human_b"), float),
                    row.get("gold_a"))
