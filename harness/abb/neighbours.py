"""Neighbours for the `abb` experiment: plans -> edited inputs (Views) -> re-judged f(D').

`harness.abb.edits` plans which items a neighbour edits and how; `EditMaker` turns each edit into
a `View` of the item (edited answer, question or instruction; A/B swap); `judge_neighbours` scores
all of a split's neighbours in one judge call through `PairwiseScorer.score_many` (only requests
involving an edited item are re-judged; the rest keep f(D)'s P(A)); `neighbour_rows` is neighbours.jsonl.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from harness.abb.bounds import squared_distances
from harness.abb.edits import NeighbourPlan, apply_edit, plan_neighbours
from harness.abb.scores import FIELDS, PairwiseScorer, View

SPLIT_SEEDS = {"estimate": 1, "verify": 2}
"""Seed stream per split: estimation and verification plans never share a draw."""


@dataclass(frozen=True)
class NeighbourSpec:
    """How to draw one split of neighbours."""

    split: str
    """estimate | verify."""
    m: int
    """How many."""
    kinds: tuple[str, ...]
    """harness.abb.edits kinds to draw from."""
    mode: str
    """one_item | whole_set."""
    fields: tuple[str, ...]
    """Inputs the text kinds edit."""
    seed: int
    """Seed of plan_neighbours."""


# --- neighbours --------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Neighbours:
    """f(D') for one split of neighbours, and how each was made."""

    split: str
    """estimate | verify | jitter."""
    vectors: np.ndarray
    """(n, d) score vectors."""
    records: tuple[dict[str, Any], ...]
    """Per neighbour: its edits (or file id) and whether every edit left its text unchanged."""


class EditMaker:
    """Materialises a plan's edits as Views (memoising paraphrases: whole-set plans share seeds)."""

    def __init__(
        self,
        scorer: PairwiseScorer,
        instructions: Sequence[str],
        paraphraser: Any,
        aspect: str,
        rewriter: Any = None,
    ) -> None:
        self.scorer, self.instructions, self.paraphraser, self.aspect = (
            scorer,
            instructions,
            paraphraser,
            aspect,
        )
        self.rewriter = rewriter
        """Paraphrases answers/questions (harness.abb.paraphrase.AnswerParaphraser); `paraphraser` the instruction."""
        self._memo: dict[tuple[str, str, int], str] = {}

    def views(self, plan: NeighbourPlan) -> tuple[dict[int, View], dict[str, Any]]:
        views: dict[int, View] = {}
        noop, wording = True, None
        for e in plan.edits:
            v = views.get(e.item, View())
            if e.kind == "swap":
                v = dataclasses.replace(v, swapped=True)
                noop &= self.scorer.orders == "both"  # both orders are averaged: a swap changes nothing
            else:
                text = self.scorer.original(e.item, e.field)
                key = (e.kind, text, e.seed)
                if key not in self._memo:
                    para = (
                        (self.paraphraser, self.aspect) if e.field == "instruction" else (self.rewriter, None)
                    )
                    self._memo[key] = apply_edit(
                        text, e, instructions=self.instructions, paraphraser=para[0], aspect=para[1]
                    )
                v = dataclasses.replace(v, **{FIELDS[e.field]: self._memo[key]})
                noop &= self._memo[key] == text
                wording = self._memo[key] if e.field == "instruction" else wording  # short: kept for audit
            views[e.item] = v
        edits = [dataclasses.asdict(e) for e in plan.edits]
        return views, {
            "index": plan.index,
            "edits": edits if len(edits) <= 50 else edits[:50],
            "n_edits": len(edits),
            "noop": bool(noop),
            **({"instruction": wording} if wording is not None else {}),
        }


def judge_neighbours(
    scorer: PairwiseScorer, base: np.ndarray, maker: EditMaker, spec: NeighbourSpec
) -> Neighbours:
    """spec.m neighbours, planned from the split's own seed (a fresh set never repeats a plan)."""
    plans = plan_neighbours(scorer.d, spec.m, spec.kinds, mode=spec.mode, fields=spec.fields, seed=spec.seed)
    # Making a view can ask the optimizer model for paraphrases (seconds to minutes each on a CPU).
    made = [
        maker.views(p)
        for p in tqdm(
            plans,
            desc=f"{spec.split} neighbours: edits",
            unit="neighbour",
            disable=not scorer.progress,
            dynamic_ncols=True,
        )
    ]
    vectors = scorer.score_many([v for v, _ in made], base=base, desc=f"{spec.split} neighbours")
    return Neighbours(spec.split, np.array(vectors).reshape(len(made), scorer.d), tuple(r for _, r in made))


def neighbour_rows(base: np.ndarray, sets: Sequence[Neighbours]) -> list[dict[str, Any]]:
    """neighbours.jsonl: enough to recompute every distance without the judge."""
    rows = []
    for ns in sets:
        sq, par = squared_distances(base, ns.vectors) if len(ns.vectors) else ([], [])
        for vec, rec, q, p in zip(ns.vectors, ns.records, sq, par):
            changed = {int(i): float(vec[i]) for i in np.flatnonzero(vec != base)}
            rows.append(
                {
                    "split": ns.split,
                    **rec,
                    "sq_distance": float(q),
                    "parallel_sq": float(p),
                    "changed": changed,
                }
            )
    return rows


def summarise(ns: Neighbours | None, base: np.ndarray) -> dict[str, Any] | None:
    if ns is None or not len(ns.vectors):
        return None
    sq, _ = squared_distances(base, ns.vectors)
    kinds: dict[str, int] = {}
    for r in ns.records:
        for e in r.get("edits", []):
            kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    known = all("noop" in r for r in ns.records)  # a file's neighbour rows do not say what was edited
    return {
        "n": len(ns.vectors),
        "noop": sum(bool(r["noop"]) for r in ns.records) if known else None,
        "unchanged_scores": int(np.sum(sq == 0)),
        "rms": float(np.sqrt(np.mean(sq))),
        "max": float(np.sqrt(np.max(sq))),
        "edit_kinds": kinds,
    }
