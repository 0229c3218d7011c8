"""Score vectors f(D) for A-BB: one continuous score per item = (question, model).

Three sources:
- `vs_baseline` (Arena-Hard, arena-bench): each model's answer is judged against the baseline's in
  both orders; the item score is P(model better) = (P(A | model is A) + 1 - P(A | model is B)) / 2,
  in [0, 1] (`orders="single"` reads only the model-as-A order, so an A/B swap can move it);
- `winrate` (summarization, dialogue): a candidate's mean P(better) over every other candidate of
  its document, each pair judged in both orders;
- `file`: a user's scores (JSONL or CSV rows `item, model, score`), optionally with neighbour rows
  (`neighbour`, `split` = estimate | verify | jitter) that hold f(D') for the rows they list.

`PairwiseScorer` re-judges neighbours: a `View` per edited item says which of its inputs changed
(answer, question, instruction, A/B order); only the requests that involve an edited item are
re-judged (through the judge given, usually a CachedJudge); every other request keeps the P(A) it
had in f(D), so a one-item neighbour moves only the coordinates B counts, cache or no cache.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError, DataError, located
from harness.files import read_text
from harness.judges.base import Judge, innermost
from harness.judging import score
from harness.prompts import render
from harness.records import Candidate, Document, PairRequest

UNIT = (0.0, 1.0)
"""Scale of the pairwise scores (probabilities)."""
FIELDS = {"answer": "answer", "question": "source", "source": "source", "instruction": "instruction"}
"""Neighbour edit field -> the View attribute it replaces ("order" is the swap)."""
SPLITS = ("estimate", "verify", "jitter")


@dataclass(frozen=True)
class Item:
    """One coordinate of f(D)."""

    doc_id: str
    """The question / document."""
    model: str
    """The candidate (model or system) whose answer is scored."""

    @property
    def id(self) -> str:
        return f"{self.doc_id}::{self.model}"


@dataclass(frozen=True, eq=False)
class ScoreVector:
    """f(D) with what it means."""

    items: tuple[Item, ...]
    """Coordinates, in order."""
    values: np.ndarray
    """f(D), one score per item."""
    scale: tuple[float, float]
    """(lo, hi) of the score."""
    kind: str
    """"vs_baseline" | "winrate" | "file"."""
    baseline: str | None
    """The model every item was compared with (vs_baseline), or a baseline named for ranking."""
    reference: tuple[float | None, ...] = ()
    """An external score per item (e.g. GPT-4's grade difference model - baseline), when known."""


@dataclass(frozen=True)
class View:
    """How one neighbour changes one item's inputs (None = unchanged)."""

    answer: str | None = None
    """The item's answer text."""
    source: str | None = None
    """The question (document source) in this item's prompts."""
    instruction: str | None = None
    """The judge instruction in this item's prompts."""
    swapped: bool = False
    """A/B positions reversed (a no-op when both orders are averaged)."""


def select_items(
    docs: Sequence[Document],
    *,
    baseline: str | None,
    models: Sequence[str] | None = None,
    max_candidates: int | None = None,
) -> tuple[list[Item], list[str]]:
    """Items in document order, and the ids of documents skipped (no baseline / < 2 candidates)."""
    items, skipped = [], []
    wanted = None if models is None else [str(m) for m in models]
    for doc in docs:
        ids = [c.id for c in doc.candidates]
        if baseline is not None:
            if baseline not in ids:
                skipped.append(doc.id)
                continue
            ids = [i for i in ids if i != baseline]
        if wanted is not None:
            ids = [i for i in ids if i in wanted]
        elif max_candidates:
            ids = ids[: int(max_candidates)]
        if baseline is None and len(ids) < 2 or not ids:
            skipped.append(doc.id)
            continue
        items += [Item(doc.id, i) for i in ids]
    if not items:
        raise DataError(f"no items to score: baseline {baseline!r}, models {wanted} match no document")
    if wanted is not None:
        seen = {it.model for it in items}
        missing = [m for m in wanted if m not in seen]
        if missing:
            raise ConfigError(
                f"model {missing[0]!r} answers none of the documents",
                where=located("experiment", field="models"),
            )
    return items, skipped


def reference_scores(
    docs: Sequence[Document], items: Sequence[Item], aspect: str | None, baseline: str | None
) -> tuple[float | None, ...]:
    """Each item's external score (minus the baseline's on the same question, when comparing)."""
    if not aspect:
        return ()
    by_id = {d.id: d for d in docs}
    out = []
    for it in items:
        doc = by_id[it.doc_id]
        s = doc.candidate(it.model).scores.get(aspect)
        if baseline is not None and s is not None:
            b = doc.candidate(baseline).scores.get(aspect)
            s = None if b is None else s - b
        out.append(None if s is None else float(s))
    return tuple(out) if any(v is not None for v in out) else ()


class PairwiseScorer:
    """f(D) and f(D') from a pairwise A/B judge (see the module docstring)."""

    def __init__(
        self,
        judge: Judge | None,
        docs: Sequence[Document],
        items: Sequence[Item],
        *,
        instruction: str,
        family: str,
        baseline: str | None,
        orders: str = "both",
        progress: bool = False,
    ) -> None:
        if orders not in ("both", "single"):
            raise ConfigError(
                f"orders must be 'both' or 'single', got {orders!r}",
                where=located("experiment", field="orders"),
            )
        if baseline is None and orders != "both":
            raise ConfigError(
                "win rates always use both orders; orders='single' needs a baseline",
                where=located("experiment", field="orders"),
            )
        self.judge = judge  # may be set later: items and bounds are known before any model loads
        self.instruction, self.family = instruction, family
        self.baseline, self.orders, self.progress = baseline, orders, progress
        self.docs = {d.id: d for d in docs}
        self.items = tuple(items)
        self.by_doc: dict[str, list[int]] = {}
        for i, it in enumerate(self.items):
            self.by_doc.setdefault(it.doc_id, []).append(i)
        self.kind = "winrate" if baseline is None else "vs_baseline"
        self.base_p: dict[str, list[float]] | None = None
        """Baseline P(A) of every request per document (set by `vector()`): untouched requests keep them."""
        self._last_p: dict[str, list[float]] = {}

    @property
    def d(self) -> int:
        return len(self.items)

    def original(self, item: int, field: str) -> str:
        """The unedited text of `field` for one item."""
        it = self.items[item]
        doc = self.docs[it.doc_id]
        if field == "answer":
            return doc.candidate(it.model).text
        if field in ("question", "source"):
            return doc.source
        if field == "instruction":
            return self.instruction
        raise ConfigError(
            f"cannot edit field {field!r}; choose from {sorted(FIELDS)}",
            where=located("experiment", field="fields"),
        )

    def bounds(self, mode: str) -> tuple[float, float]:
        """(B, B_par): the largest ||f(D) - f(D')||^2 and (sum v)^2 / d one neighbour can cause.

        vs_baseline, one item: one coordinate moves by <= 1. Win rates, one edited candidate of a
        document with k candidates: its own score moves by <= 1 and each of the k - 1 others by
        <= 1/(k - 1) (only its pair with the edited one changes), so ||v||^2 <= k/(k - 1), and the
        moves sum to at most 2. Whole set: every coordinate by <= 1.
        """
        d = self.d
        if mode == "whole_set":
            return float(d), float(d)
        if self.kind == "vs_baseline":
            return 1.0, 1.0 / d
        k = min(len(v) for v in self.by_doc.values())
        return k / (k - 1), min(k / (k - 1), 4.0 / d)

    def coords_allowed(self, mode: str) -> int:
        """The most coordinates one neighbour may move (what B counts): whole set d; one item vs the
        baseline 1; one edited candidate's win rates, its document's k (the largest document)."""
        if mode == "whole_set":
            return self.d
        return 1 if self.kind == "vs_baseline" else max(len(v) for v in self.by_doc.values())

    def _requests(
        self, doc_id: str, views: Mapping[int, View]
    ) -> tuple[list[PairRequest], list[tuple[int, ...]], Callable]:
        """(requests, the items owning each request, combine(P(A) per request) -> {item: score})."""
        doc = self.docs[doc_id]
        idx = self.by_doc[doc_id]

        def cand(i: int) -> Candidate:
            c = doc.candidate(self.items[i].model)
            v = views.get(i)
            return c if v is None or v.answer is None else dataclasses.replace(c, text=v.answer)

        def req(a: Candidate, b: Candidate, *owners: int) -> PairRequest:
            vs = [views[o] for o in owners if o in views]
            src = next((v.source for v in vs if v.source is not None), None)
            instr = next((v.instruction for v in vs if v.instruction is not None), self.instruction)
            d = doc if src is None else dataclasses.replace(doc, source=src)
            return PairRequest(doc.id, a.id, b.id, render(d, a, b, instr, self.family))

        reqs: list[PairRequest] = []
        owners: list[tuple[int, ...]] = []
        if self.kind == "vs_baseline":
            base = doc.candidate(self.baseline)
            for i in idx:
                m, swapped = cand(i), views.get(i, View()).swapped
                if self.orders == "both":
                    reqs += [req(m, base, i), req(base, m, i)]
                    owners += [(i,), (i,)]
                else:
                    reqs.append(req(base, m, i) if swapped else req(m, base, i))
                    owners.append((i,))

            def combine(p: Sequence[float]) -> dict[int, float]:
                if self.orders == "both":
                    return {i: 0.5 * (p[2 * k] + 1 - p[2 * k + 1]) for k, i in enumerate(idx)}
                return {i: (1 - p[k]) if views.get(i, View()).swapped else p[k] for k, i in enumerate(idx)}

            return reqs, owners, combine
        pairs = [(i, j) for i in idx for j in idx if i != j]
        reqs = [req(cand(i), cand(j), i, j) for i, j in pairs]

        def combine_wr(p: Sequence[float]) -> dict[int, float]:
            pa = dict(zip(pairs, p))
            return {
                i: float(np.mean([0.5 * (pa[(i, j)] + 1 - pa[(j, i)]) for j in idx if j != i])) for i in idx
            }

        return reqs, pairs, combine_wr

    def score_many(
        self,
        neighbours: Sequence[Mapping[int, View]],
        base: np.ndarray | None = None,
        desc: str = "judging",
        judge: Judge | None = None,
    ) -> list[np.ndarray]:
        """f(D') per neighbour in one judge call (all documents are scored when `base` is None).

        With `base` (f(D) from `vector()`), only the requests that involve an edited item are re-judged;
        every other request keeps its baseline P(A) explicitly, and only coordinates that own a
        re-judged request are written. So a one-item neighbour moves exactly the coordinates the sure
        bound B counts (its own score; on win rates, its document's), whatever the cache, sampling or
        backend: an uncached or sampling judge cannot move untouched items.
        """
        if base is not None and self.base_p is None:
            raise ValueError("score_many(base=...) needs the baseline request scores: call vector() first")
        jobs, requests = [], []
        for n, views in enumerate(neighbours):
            doc_ids = (
                list(self.by_doc)
                if base is None
                else list(dict.fromkeys(self.items[i].doc_id for i in views))
            )
            for doc_id in doc_ids:
                reqs, owners, combine = self._requests(doc_id, views)
                redo = (
                    range(len(reqs))
                    if base is None
                    else [k for k, o in enumerate(owners) if set(o) & set(views)]
                )
                jobs.append(
                    (n, doc_id, len(requests), list(redo), combine, {i for k in redo for i in owners[k]})
                )
                requests += [reqs[k] for k in redo]
        results = score(judge or self.judge, requests, self.progress, desc) if requests else []
        out = [np.full(self.d, np.nan) if base is None else np.array(base, dtype=float) for _ in neighbours]
        for n, doc_id, start, redo, combine, moved in jobs:
            p = [math.nan] * len(redo) if base is None else list(self.base_p[doc_id])
            for k, s in zip(redo, results[start : start + len(redo)]):
                p[k] = s.p_a
            for i, v in combine(p).items():
                if base is None or i in moved:
                    out[n][i] = v
            if base is None:
                self._last_p[doc_id] = p
        for vec in out:
            if not np.all(np.isfinite(vec)):
                raise DataError(
                    "the judge returned a non-finite P(A)", where=located("experiment", field="scores")
                )
        return out

    def vector(self, reference: tuple[float | None, ...] = ()) -> ScoreVector:
        """f(D): every request judged once; their P(A) are kept (`base_p`) for the neighbours' splice."""
        self._last_p = {}
        values = self.score_many([{}], desc="baseline f(D)")[0]
        self.base_p = dict(self._last_p)
        return ScoreVector(self.items, values, UNIT, self.kind, self.baseline, reference)

    def jitter(self, base: np.ndarray, *, samples: int, mode: str, seed: int) -> tuple[np.ndarray, dict]:
        """Re-judge UNCHANGED input exactly where a neighbour re-judges: `samples` identity neighbours.

        one_item: an item drawn uniformly (with replacement, like an estimation neighbour); only the
        requests a neighbour editing it would re-judge (its pairs) go through the UNCACHED judge, in
        shuffled batch order; every other request keeps its baseline score. whole_set: every request.
        So a jitter sample and a neighbour re-judge the same coordinates (same units); differences
        from `base` are the judge's intrinsic jitter only.
        """
        if self.base_p is None:
            raise ValueError("jitter() needs the baseline request scores: call vector() first")
        inner = innermost(self.judge)  # under the cache and chunking wrappers: the judge itself
        rng = np.random.default_rng(seed)
        chosen = [
            set(range(self.d)) if mode == "whole_set" else {int(rng.integers(self.d))} for _ in range(samples)
        ]
        jobs, fresh = [], []
        for s, items in enumerate(chosen):
            for doc_id in dict.fromkeys(self.items[i].doc_id for i in sorted(items)):
                reqs, owners, combine = self._requests(doc_id, {})
                mine = [k for k, o in enumerate(owners) if items & set(o)]
                jobs.append((s, doc_id, combine, len(fresh), mine, {i for k in mine for i in owners[k]}))
                fresh += [reqs[k] for k in mine]
        perm = rng.permutation(len(fresh))
        redone = np.empty(len(fresh))
        redone[perm] = [x.p_a for x in inner.score_pairs([fresh[k] for k in perm])] if fresh else []
        out = np.repeat(np.asarray(base, dtype=float)[None, :], samples, axis=0)
        for s, doc_id, combine, start, mine, moved in jobs:
            q = list(self.base_p[doc_id])
            for n, k in enumerate(mine):
                q[k] = float(redone[start + n])
            for i, v in combine(q).items():
                if i in moved:
                    out[s, i] = v
        how = (
            f"{samples} identity neighbours ({mode}): the requests a neighbour re-judges went through the "
            f"uncached judge ({getattr(inner, 'identity', type(inner).__name__)}) in shuffled batch order, "
            "every other request kept its baseline score"
        )
        return out, {
            "route": how,
            "samples": samples,
            "requests": len(fresh),
            "coords": self.d if mode == "whole_set" else 1,
        }


# --- scores from a file ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FileScores:
    """A user's score vector and the neighbour vectors the file holds."""

    vector: ScoreVector
    neighbours: dict[str, list[tuple[str, dict[int, float]]]]
    """split -> [(neighbour id, {item index: score})]; unlisted items keep f(D)."""
    lines: Mapping[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    """(split, neighbour id) -> where its first row is ("line 12"), for errors naming the record."""

    def rows(self, split: str) -> np.ndarray:
        """f(D') per neighbour of `split` (m x d): each neighbour's rows spliced into f(D)."""
        out = []
        for _, changed in self.neighbours.get(split, []):
            vec = self.vector.values.copy()
            for i, v in changed.items():
                vec[i] = v
            out.append(vec)
        return np.array(out).reshape(len(out), self.vector.values.size)

    def items_changed(self) -> int:
        """The claim's edit budget k (in B = k r^2): the most items any ESTIMATION neighbour lists.

        Only split=estimate rows size the claim (with the config, they set B, alpha and how many
        coordinates a neighbour may move); fresh rows are checked against it (`outside_budget`) and
        never re-size it, and jitter rows are not neighbours."""
        sizes = [len(c) for _, c in self.neighbours.get("estimate", [])]
        return max(sizes) if sizes else 1

    def outside_budget(self, k: int, split: str = "verify") -> list[tuple[str, int, str]]:
        """(neighbour id, items listed, where) of every `split` neighbour listing more than k items."""
        return [
            (nid, len(c), self.lines.get((split, nid), ""))
            for nid, c in self.neighbours.get(split, [])
            if len(c) > k
        ]


def _read_rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    text = read_text(path)
    if path.suffix.lower() == ".csv":
        return [(f"line {k}", row) for k, row in enumerate(csv.DictReader(text.splitlines()), 2)]
    rows = []
    for k, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"not valid JSON ({e.msg})", where=located(path, f"line {k}")) from None
            if not isinstance(rec, dict):
                raise DataError("expected an object", where=located(path, f"line {k}"))
            rows.append((f"line {k}", rec))
    return rows


def _field(rec: Mapping[str, Any], name: str, path: Path, where: str) -> str:
    v = rec.get(name)
    if v is None or str(v).strip() == "":
        raise DataError("missing", where=located(path, where, name))
    return str(v)


def load_file_scores(path: str | Path, scale: Sequence[float], baseline: str | None = None) -> FileScores:
    """Rows {item, model, score[, neighbour, split]}; rows without `neighbour` are f(D)."""
    path = Path(path)
    if scale is None or len(scale) != 2 or not float(scale[1]) > float(scale[0]):
        raise ConfigError(
            f"file scores need a scale [lo, hi] with hi > lo, got {scale}",
            where=located("experiment", field="file.scale"),
        )
    lo, hi = float(scale[0]), float(scale[1])
    base: dict[Item, float] = {}
    neigh: dict[str, dict[str, dict[Item, float]]] = {}
    lines: dict[tuple[str, str], str] = {}
    for where, rec in _read_rows(path):
        item = Item(_field(rec, "item", path, where), _field(rec, "model", path, where))
        try:
            s = float(_field(rec, "score", path, where))
        except ValueError:
            raise DataError(
                f"score {rec.get('score')!r} is not a number", where=located(path, where, "score")
            ) from None
        if not (math.isfinite(s) and lo <= s <= hi):
            raise DataError(
                f"score {s} is outside the scale [{lo}, {hi}]", where=located(path, where, "score")
            )
        nid = rec.get("neighbour")
        if nid is None or str(nid).strip() == "":
            if item in base:
                raise DataError(f"second score for {item.id}", where=located(path, where, "item"))
            base[item] = s
            continue
        split = str(rec.get("split") or "estimate")
        if split not in SPLITS:
            raise DataError(
                f"split must be one of {SPLITS}, got {split!r}", where=located(path, where, "split")
            )
        neigh.setdefault(split, {}).setdefault(str(nid), {})[item] = s
        lines.setdefault((split, str(nid)), where)
    if not base:
        raise DataError("no baseline rows (rows without a neighbour id)", where=str(path))
    items = tuple(base)
    index = {it: k for k, it in enumerate(items)}
    out: dict[str, list[tuple[str, dict[int, float]]]] = {}
    for split, by_id in neigh.items():
        for nid, rows in by_id.items():
            unknown = [it for it in rows if it not in index]
            if unknown:
                raise DataError(
                    f"neighbour {nid!r} scores {unknown[0].id}, which has no baseline row",
                    where=located(path, field="item"),
                )
            out.setdefault(split, []).append((nid, {index[it]: v for it, v in rows.items()}))
    values = np.array([base[it] for it in items])
    return FileScores(ScoreVector(items, values, (lo, hi), "file", baseline), out, lines)
