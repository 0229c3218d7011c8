"""A judged set's pairs as the report's table rows: both orders of a pair side by side.

One row per unordered pair {i, j} of a document (i listed first, candidates in order of first
appearance, as harness.metrics.views orders them): P(A) with i shown as A and with j shown as A,
each order's answer mass and flags, the human scores or the gold label, and tags the page filters
on. The flip and the agreement follow the metrics' definitions (harness.metrics.order).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.judging import answer_mass
from harness.records import Judgment

FLIP, LOW_MASS, DISAGREE, FLAGGED = 1, 2, 4, 8
"""Row tags (bits): the decision flips with the order (not order-consistent: sign(P(A|i,j) - 0.5) !=
sign(0.5 - P(A|j,i))); an order's answer mass is below the threshold; the judge's order-averaged
preference, (P(A|i,j) + 1 - P(A|j,i)) / 2, picks the candidate humans (scores or gold) rank lower;
an order carries any flag."""
TAGS = {"flip": FLIP, "low_mass": LOW_MASS, "disagree": DISAGREE, "flagged": FLAGGED}


@dataclass(frozen=True)
class PairTable:
    """One judged set's rows, compact for the page's JSON."""

    doc_ids: list[str]
    """The set's documents, in order of first appearance."""
    cands: list[list[str]]
    """Per document, its judged candidates' ids in order of first appearance."""
    rows: list[list[Any]]
    """[doc, i, j, P(A|i,j), P(A|j,i), mass(i,j), mass(j,i), flags(i,j), flags(j,i), human_i, human_j,
    gold ("i", "j" or null), tags]: indices into doc_ids and cands; null where an order is missing."""
    counts: dict[str, int]
    """Tag name -> rows with it, plus "rows"."""
    lp_keys: list[str]
    """The answer tokens read in this set ("A:A", "B: B": label, colon, token text), in order of first
    appearance."""
    logprobs: list[list[list[float | None] | None]]
    """Per row, its two orders' answer-token log-probs ((i,j) then (j,i)), aligned with `lp_keys` (null
    for a token not read in that order, or for an order without any), 3 significant digits."""


def _num(x: float | None, digits: int = 6) -> float | None:
    """A float for the page: null for NaN/None, 6 significant digits (P(A) shows 4 decimals)."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def _prefers(x: float | None, y: float | None) -> int:
    """+1 when x > y, -1 when x < y, 0 when equal or unknown."""
    if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)) or x == y:
        return 0
    return 1 if x > y else -1


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _human(ij: Judgment | None, ji: Judgment | None) -> tuple[float | None, float | None, str | None]:
    """(human score of i, of j, gold side) from whichever order was judged."""
    if ij is not None:
        gold = None if ij.gold_a is None else ("i" if ij.gold_a else "j")
        return ij.human_a, ij.human_b, gold
    assert ji is not None
    gold = None if ji.gold_a is None else ("j" if ji.gold_a else "i")
    return ji.human_b, ji.human_a, gold


def _tags(
    p: float | None,
    q: float | None,
    masses: Sequence[float | None],
    flags: Sequence[Sequence[str]],
    human: int,
    threshold: float,
) -> int:
    tags = 0
    if p is not None and q is not None and _sign(p - 0.5) != _sign(0.5 - q):
        tags |= FLIP
    if any(m is not None and m < threshold for m in masses):
        tags |= LOW_MASS
    known = [x for x in (p, None if q is None else 1 - q) if x is not None]
    judge = _prefers(sum(known) / len(known), 0.5) if known else 0
    if human and judge and human != judge:
        tags |= DISAGREE
    if any(flags):
        tags |= FLAGGED
    return tags


def pair_table(judgments: Sequence[Judgment], threshold: float) -> PairTable:
    """The rows of one judged set (the first judgment of an ordered pair when a file repeats one)."""
    by_key: dict[tuple[str, str, str], Judgment] = {}
    order: dict[str, list[str]] = {}
    for j in judgments:
        by_key.setdefault((j.doc_id, j.a_id, j.b_id), j)
        ids = order.setdefault(j.doc_id, [])
        for c in (j.a_id, j.b_id):
            if c not in ids:
                ids.append(c)
    rows: list[list[Any]] = []
    keys: dict[str, int] = {}
    logprobs: list[list[list[float | None] | None]] = []
    for d, (doc, ids) in enumerate(order.items()):
        for i in range(len(ids)):
            for k in range(i + 1, len(ids)):
                ij, ji = by_key.get((doc, ids[i], ids[k])), by_key.get((doc, ids[k], ids[i]))
                if ij is None and ji is None:
                    continue
                rows.append(_row(d, i, k, ij, ji, threshold))
                logprobs.append([_logprobs(x, keys) for x in (ij, ji)])
    width = len(keys)
    for both in logprobs:
        for lp in both:
            if lp is not None:
                lp.extend([None] * (width - len(lp)))
    counts = {name: sum(1 for r in rows if r[-1] & bit) for name, bit in TAGS.items()}
    return PairTable(
        list(order), list(order.values()), rows, {"rows": len(rows), **counts}, list(keys), logprobs
    )


def _logprobs(j: Judgment | None, keys: dict[str, int]) -> list[float | None] | None:
    """One order's log-probs in the set's key order (`keys` grows as new tokens appear)."""
    if j is None or not j.token_logprobs:
        return None
    out: list[float | None] = [None] * len(keys)
    for key, value in j.token_logprobs.items():
        at = keys.setdefault(key, len(keys))
        out.extend([None] * (at + 1 - len(out)))
        out[at] = _num(value, 3)
    return out


def _row(d: int, i: int, k: int, ij: Judgment | None, ji: Judgment | None, threshold: float) -> list[Any]:
    p, q = (None if x is None else _num(x.p_a) for x in (ij, ji))
    masses = [
        None if x is None or "unreadable" in x.flags else _num(answer_mass(x.token_logprobs), 4)
        for x in (ij, ji)
    ]
    flags = [[] if x is None else list(x.flags) for x in (ij, ji)]
    h_i, h_j, gold = _human(ij, ji)
    human = {"i": 1, "j": -1}.get(gold or "", 0) or _prefers(h_i, h_j)
    return [
        d,
        i,
        k,
        p,
        q,
        *masses,
        *flags,
        _num(h_i),
        _num(h_j),
        gold,
        _tags(p, q, masses, flags, human, threshold),
    ]


def documents_blob(docs: Mapping[str, Any], used: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """{doc id: {"source", "context", "cands": {id: text}}} for the documents and candidates a
    report shows (`used`: doc id -> candidate ids), from harness.records.Document objects."""
    out = {}
    for doc_id, cands in used.items():
        doc = docs.get(doc_id)
        if doc is None:
            continue
        out[doc_id] = {
            "source": doc.source,
            "context": doc.context,
            "cands": {c.id: c.text for c in doc.candidates if c.id in set(cands)},
        }
    return out
