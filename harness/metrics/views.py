"""Judgments grouped by document: the preference matrix M[i, j] = P(A) and human scores, and the
`Frame`: one judgment list as columns, built once, so every metric and every debiased variant is
array arithmetic instead of a Python loop over the judgments (SummEval at full size is 100
documents x 16 candidates x 15 = 24,000 ordered pairs; docs/benchmarks.md times it).

Conventions follow the ZEPO/PairS code (shared/reference/zepo.md): a `p_a` that is NaN counts as
unjudged everywhere; the diagonal is NaN (a self-pair is not a comparison). In a Frame every
document's matrix is a block of one flat array: cell `start[d] + i * n_d + k` is M[i, k] of
document d. A variant (permutation-debiased, calibrated) is the same Frame with another P(A)
column (`with_p`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.records import Judgment

EPS = 1e-6
"""Probabilities are clipped to [EPS, 1 - EPS] wherever a log would otherwise be infinite."""


@dataclass(frozen=True)
class DocView:
    """One document's judgments as a matrix, with the human score of each candidate."""

    ids: list[str]
    """Candidate ids in order of first appearance among the judgments."""
    matrix: np.ndarray
    """M[i, j] = P(A) with A = ids[i], B = ids[j]; mean over repeats; NaN on the diagonal and
    where unjudged."""
    human: np.ndarray
    """Human score per candidate (first finite value seen); NaN where the data has none."""


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def document_views(judgments: Sequence[Judgment]) -> dict[str, DocView]:
    """Group judgments by document into preference matrices and human score vectors."""
    return build_frame(judgments).views()


def preference_matrices(judgments: Sequence[Judgment]) -> dict[str, tuple[list[str], np.ndarray]]:
    """{doc_id: (ids, M)} with M[i, j] = P(A) for A = ids[i], B = ids[j]; NaN where unjudged."""
    return {d: (v.ids, v.matrix) for d, v in document_views(judgments).items()}


def human_scores(judgments: Sequence[Judgment]) -> dict[str, tuple[list[str], np.ndarray]]:
    """{doc_id: (ids, h)} with the same ids as `preference_matrices`; NaN where unknown."""
    return {d: (v.ids, v.human) for d, v in document_views(judgments).items()}


def mean_or_nan(xs: Sequence[float]) -> float:
    return float(np.mean(xs)) if len(xs) else math.nan


@dataclass(frozen=True)
class TokenStats:
    """What the answer-token log-probabilities give per judgment (they do not change with debiasing)."""

    bc_diff: np.ndarray
    """sum(A logprobs) - sum(B logprobs); 0 for a pair without any (the official code's logits 0)."""
    bc_mismatch: np.ndarray
    """A and B have different numbers of variants (log Z would not cancel: BC undefined)."""
    gap: np.ndarray
    """|P(A) - P(B)| normalised over every label read (0 when none was read)."""
    mass: np.ndarray
    """Answer mass (sum of exp over every variant)."""
    readable: np.ndarray
    """Not flagged `unreadable` (an unreadable pair has no mass)."""


@dataclass(frozen=True)
class Frame:
    """A judgment list as columns (see the module docstring)."""

    doc_ids: list[str]
    ids: list[list[str]]
    """Candidate ids per document, in order of first appearance (as DocView.ids)."""
    start: np.ndarray
    """First cell of each document's matrix block."""
    cells: int
    """Total cells over all blocks."""
    doc: np.ndarray
    """Document index of each judgment."""
    a: np.ndarray
    b: np.ndarray
    """Candidate indices of A and B within their document."""
    cell: np.ndarray
    """Flat cell of (doc, a, b); `rcell` of (doc, b, a)."""
    rcell: np.ndarray
    p: np.ndarray
    """P(A) of each judgment (NaN: unjudged)."""
    human: list[np.ndarray]
    """Human score per candidate, per document (first finite value seen; NaN where none)."""
    label: np.ndarray
    """Calibration label per judgment: gold_a, else human_a > human_b; NaN for ties and missing."""
    judgments: Sequence[Judgment]
    _tokens: list[TokenStats] = field(default_factory=list, repr=False, compare=False)

    @property
    def tokens(self) -> TokenStats:
        if not self._tokens:
            self._tokens.append(token_stats(self.judgments))
        return self._tokens[0]

    def with_p(self, p: np.ndarray) -> Frame:
        """The same judgments with another P(A) column (a debiased variant); token stats shared."""
        return Frame(
            self.doc_ids,
            self.ids,
            self.start,
            self.cells,
            self.doc,
            self.a,
            self.b,
            self.cell,
            self.rcell,
            p,
            self.human,
            self.label,
            self.judgments,
            self._tokens,
        )

    def matrix(self) -> np.ndarray:
        """Every document's M, flat: the mean P(A) of the judgments in each cell (repeats
        averaged); NaN on the diagonal and where unjudged."""
        ok = np.isfinite(self.p) & (self.a != self.b)
        sums = np.bincount(self.cell[ok], weights=self.p[ok], minlength=self.cells)
        counts = np.bincount(self.cell[ok], minlength=self.cells)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)

    def views(self) -> dict[str, DocView]:
        flat = self.matrix()
        out = {}
        for d, doc_id in enumerate(self.doc_ids):
            n = len(self.ids[d])
            block = flat[self.start[d] : self.start[d] + n * n].reshape(n, n)
            out[doc_id] = DocView(ids=self.ids[d], matrix=block, human=self.human[d])
        return out


def build_frame(judgments: Sequence[Judgment]) -> Frame:
    """Columns of a judgment list, in one pass over it."""
    doc_pos: dict[str, int] = {}
    ids: list[list[str]] = []
    cand_pos: list[dict[str, int]] = []
    n = len(judgments)
    doc, a, b = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    p, ha, hb, gold = np.empty(n), np.empty(n), np.empty(n), np.full(n, np.nan)
    for r, j in enumerate(judgments):
        d = doc_pos.get(j.doc_id)
        if d is None:
            d = doc_pos[j.doc_id] = len(ids)
            ids.append([])
            cand_pos.append({})
        pos, names = cand_pos[d], ids[d]
        for cid in (j.a_id, j.b_id):
            if cid not in pos:
                pos[cid] = len(names)
                names.append(cid)
        doc[r], a[r], b[r] = d, pos[j.a_id], pos[j.b_id]
        p[r] = math.nan if j.p_a is None else j.p_a
        ha[r] = math.nan if j.human_a is None else j.human_a
        hb[r] = math.nan if j.human_b is None else j.human_b
        if j.gold_a is not None:
            gold[r] = 1.0 if j.gold_a else 0.0
    sizes = np.array([len(x) for x in ids], dtype=np.int64)
    start = (
        np.concatenate([[0], np.cumsum(sizes**2)[:-1]]).astype(np.int64)
        if len(ids)
        else np.zeros(0, np.int64)
    )
    nd = sizes[doc] if n else np.zeros(0, np.int64)
    cell = start[doc] + a * nd + b if n else np.zeros(0, np.int64)
    rcell = start[doc] + b * nd + a if n else np.zeros(0, np.int64)
    human = _first_human(doc, a, b, ha, hb, sizes)
    with np.errstate(invalid="ignore"):
        by_human = np.where(np.isfinite(ha) & np.isfinite(hb) & (ha != hb), (ha > hb).astype(float), np.nan)
    label = np.where(np.isnan(gold), by_human, gold)
    return Frame(
        list(doc_pos), ids, start, int((sizes**2).sum()), doc, a, b, cell, rcell, p, human, label, judgments
    )


def _first_human(doc, a, b, ha, hb, sizes) -> list[np.ndarray]:
    """Each candidate's first finite human score in judgment order (A's before B's in a row)."""
    cstart = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes.size else sizes
    total = int(sizes.sum())
    # Interleave (A, B) per judgment so "first seen" keeps the old loop's order.
    cand = np.stack([cstart[doc] + a, cstart[doc] + b], axis=1).ravel() if doc.size else np.zeros(0, np.int64)
    vals = np.stack([ha, hb], axis=1).ravel() if doc.size else np.zeros(0)
    ok = np.isfinite(vals)
    flat = np.full(total, np.nan)
    cand, vals = cand[ok], vals[ok]
    uniq, idx = np.unique(cand, return_index=True)  # the index of each candidate's first occurrence
    flat[uniq] = vals[idx]
    return [flat[s : s + n] for s, n in zip(cstart.tolist(), sizes.tolist())]


def token_stats(judgments: Sequence[Judgment]) -> TokenStats:
    """BC difference, Norm Gap term and answer mass of every judgment, in one pass over the
    logprobs (labels A and B; a variant key is 'label' or 'label:token')."""
    n = len(judgments)
    diff, mismatch, gap = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n)
    mass, readable = np.zeros(n), np.ones(n, dtype=bool)
    exp = math.exp
    for r, j in enumerate(judgments):
        if j.flags and "unreadable" in j.flags:
            readable[r] = False
        if not j.token_logprobs:
            continue
        sa = sb = ma = mb = total = 0.0
        na = nb = 0
        for key, value in j.token_logprobs.items():
            e = exp(value)
            total += e
            label = key.partition(":")[0]
            if label == "A":
                sa, na, ma = sa + value, na + 1, ma + e
            elif label == "B":
                sb, nb, mb = sb + value, nb + 1, mb + e
        mass[r] = total
        mismatch[r] = na != nb
        diff[r] = sa - sb if na else 0.0
        gap[r] = abs(ma - mb) / total if total > 0 else 0.0
    return TokenStats(diff, mismatch, gap, mass, readable)
