"""ZEPO: greedy search for a fairer judge instruction (Zhou et al., EMNLP 2024).

Epoch 0 scores the initial instruction and `population - 1` paraphrases of it; every later epoch
scores `population` fresh paraphrases of the best instruction so far. The best is replaced only
on a strictly higher objective, so ties keep the earlier (usually the human-written) instruction.
Each candidate is scored by judging every ordered pair of the SEARCH documents; the objective
needs no human labels except "calibration", an ablation.

An epoch's texts are generated first (each saved as pending), then all of them are judged in ONE
judge call (harness.judging.judge_instructions: the same prompts and cache keys as one call per
candidate, so prefix reuse shares each pair's content across the candidates), then scored in slot
order. Resumable: after every generated and every scored candidate the search state is written
atomically to `state.json`. Optimizer seeds are derived from (seed, epoch, slot, attempt), so no
RNG state is saved; a resumed run replays the saved candidates and continues where it stopped,
calling neither the optimizer (texts are in the state) nor the judge (request cache) again.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness import metrics
from harness.errors import ConfigError
from harness.judges.base import Judge
from harness.judging import judge_documents, judge_instructions
from harness.records import Document, Judgment
from harness.zepo.optimizers import ParaphraseError
from harness.zepo.state import (
    ScoredCandidate,
    SearchState,
    content_hash,
    documents_digest,
    optimizer_identity,
    state_fingerprint,
)

log = logging.getLogger(__name__)

OBJECTIVES = ("fairness", "fairness_prob", "confidence", "calibration")
"""fairness: -|argmax A-rate - 0.5| (the paper); fairness_prob: the same on mean P(A);
confidence: mean max(p, 1-p); calibration: -ECE against human preferences (needs labels)."""

DEBIAS = ("none", "permutation")
"""What the search scores: raw judgments, or permutation-debiased ones (the official --do_permutate)."""


class ParaphraseFailed(Exception):
    """The optimizer gave no usable paraphrase for a slot (the slot is skipped)."""


class Paraphraser(Protocol):
    """What the search needs from an optimizer (harness.zepo.optimizers.Optimizer fits)."""

    def paraphrase(
        self, instruction: str, n: int, seed: int, aspect: str | None, avoid: Sequence[str] = ()
    ) -> list[str]:
        """n validated paraphrases; `avoid` lists texts that count as duplicates (earlier candidates)."""
        ...


@dataclass(frozen=True)
class SearchSettings:
    """How the search runs (the paper: population 5, epochs 5, objective fairness)."""

    population: int = 5
    """Candidates scored per epoch (epoch 0 counts the initial instruction)."""
    epochs: int = 5
    """Epochs; raising it on a finished run's state continues the search."""
    objective: str = "fairness"
    """One of OBJECTIVES: what 'best' means."""
    seed: int = 0
    """Root of every optimizer seed and of the PairS shuffles."""
    max_candidates: int | None = None
    """Systems per document judged (None = all)."""
    heldout_spearman: bool = True
    """Also judge each candidate on the held-out documents (costs judge calls)."""
    ranking: str = "pairs"
    """Held-out Spearman ranking: "pairs" (PairS merge sort, the paper) or "winrate"."""
    shuffles: int = 100
    """PairS shuffles averaged for the held-out Spearman."""
    dedup_attempts: int = 3
    """Re-asks (new seed) when a paraphrase repeats a text already scored."""
    debias: str = "none"
    """"permutation": score each candidate on permutation-debiased judgments, with the decision
    rate over the upper triangle, as the official `--do_permutate` does during the search
    (Table 2's ZEPO + Debias); "none": raw judgments (the paper's other tables)."""

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(
                f"unknown ZEPO objective {self.objective!r}; use one of {', '.join(OBJECTIVES)}"
            )
        if self.population < 1 or self.epochs < 1:
            raise ConfigError(f"population and epochs must be >= 1, got {self.population} and {self.epochs}")
        if self.ranking not in ("pairs", "winrate"):
            raise ConfigError(f"ranking must be 'pairs' or 'winrate', got {self.ranking!r}")
        if self.debias not in DEBIAS:
            raise ConfigError(f"search debias must be one of {', '.join(DEBIAS)}, got {self.debias!r}")
        if self.debias == "permutation" and self.objective == "fairness_prob":
            raise ConfigError(
                "objective fairness_prob is constant on permutation-debiased judgments (their mean "
                "P(A) is always 0.5, so no candidate could win): use objective=fairness (the "
                "upper-triangle decision rate, as the official code) or search_debias=none"
            )


@dataclass(frozen=True)
class SearchResult:
    """The whole search: every candidate in scoring order and the one selected."""

    candidates: tuple[ScoredCandidate, ...]
    """Every scored candidate in scoring order (skipped slots are absent)."""
    best: ScoredCandidate
    """The selected instruction: the first with the highest objective."""
    objective: str
    """The objective that drove the selection."""

    @property
    def initial(self) -> ScoredCandidate:
        return self.candidates[0]


def derive_seed(seed: int, *parts: int) -> int:
    """A 31-bit seed from (seed, epoch, slot, attempt): stable across runs and machines."""
    h = hashlib.sha256(":".join(str(x) for x in (seed, *parts)).encode()).hexdigest()
    return int(h[:8], 16) & 0x7FFFFFFF


def objective_key(value: float) -> float:
    """Undefined objectives (no decisive pair, no labels) rank below every defined one."""
    return -math.inf if value is None or math.isnan(value) else value


def candidate_metrics(judgments: Sequence[Judgment], debias: str = "none") -> dict[str, Any]:
    """Every objective plus the A-rates and ECE of one candidate's search judgments.

    debias="permutation" scores the permutation-debiased judgments, the decision rate being the
    official upper-triangle rate (a debiased matrix's rate over all pairs is always 0.5)."""
    if debias == "permutation":
        judgments = metrics.permutation_debias(judgments, "official")  # (M + 1 - M^T)/2, as --do_permutate
        rate = metrics.upper_a_rate(judgments)
    else:
        rate = metrics.a_rate(judgments, "argmax")
    rate_prob = metrics.a_rate(judgments, "prob")
    ece = metrics.calibration(judgments)["ece"]
    objectives = {
        "fairness": -abs(rate - 0.5),
        "fairness_prob": -abs(rate_prob - 0.5),
        "confidence": metrics.confidence(judgments)["max_prob"],
        "calibration": -ece,
    }
    return {"objectives": objectives, "a_rate": rate, "a_rate_prob": rate_prob, "ece": ece}


def heldout_metrics(judgments: Sequence[Judgment], shuffles: int, seed: int) -> dict[str, float]:
    win = metrics.correlations(judgments, "winrate", shuffles=1, seed=seed)
    pairs = metrics.correlations(judgments, "pairs", shuffles=shuffles, seed=seed)
    rate = metrics.a_rate(judgments, "argmax")
    return {
        "spearman": win["spearman"],
        "spearman_pairs": pairs["spearman"],
        "a_rate": rate,
        "fairness": -abs(rate - 0.5),
    }


@dataclass
class Search:
    """One ZEPO search: a judge, an optimizer, search/held-out documents and settings."""

    judge: Judge
    """Scores the pairs; wrap it in a CachedJudge so re-scoring and resuming are free."""
    optimizer: Paraphraser
    """Proposes paraphrases (harness.zepo.optimizers.ApiOptimizer or LocalOptimizer)."""
    initial: str
    """The starting instruction (epoch 0, slot 0)."""
    aspect: str | None
    """The aspect judged (the optimizer keeps its word; the calibration objective reads its scores)."""
    family: str
    """Prompt layout: summarization | dialogue | instruction."""
    search_docs: Sequence[Document]
    """Documents whose ordered pairs score each candidate (labels unused except by 'calibration')."""
    heldout_docs: Sequence[Document] = ()
    """Documents for each candidate's held-out Spearman (settings.heldout_spearman)."""
    settings: SearchSettings = field(default_factory=SearchSettings)
    """Population, epochs, objective, seed and the rest."""
    state_path: Path | None = None
    """Where state.json lives; None keeps no state (no resume)."""
    progress: bool = False
    """tqdm bars while judging."""
    on_candidate: Callable[[ScoredCandidate, ScoredCandidate, bool], None] | None = None
    """Called after each candidate with (candidate, best so far, fresh); fresh is False for a
    candidate replayed from state.json."""
    on_epoch: Callable[[int, list[ScoredCandidate], ScoredCandidate], None] | None = None
    """Called after each epoch with (epoch, its candidates, best so far); also for replayed ones."""

    def inputs(self) -> dict[str, str]:
        """A content hash per input a resumed search must share with the saved one: the documents
        (full text, not ids), the initial instruction, the judge, the optimizer and the settings."""
        s = self.settings
        return {
            "documents": content_hash(
                [documents_digest(self.search_docs), documents_digest(self.heldout_docs)]
            ),
            "instruction": content_hash([self.initial, self.aspect, self.family]),
            "judge": content_hash(self.judge.identity),
            "optimizer": content_hash(optimizer_identity(self.optimizer)),
            "settings": content_hash(
                dict(
                    population=s.population,
                    objective=s.objective,
                    seed=s.seed,
                    max_candidates=s.max_candidates,
                    heldout_spearman=s.heldout_spearman,
                    ranking=s.ranking,
                    shuffles=s.shuffles,
                    dedup_attempts=s.dedup_attempts,
                    **({"debias": s.debias} if s.debias != "none" else {}),
                )
            ),
        }

    def fingerprint(self) -> str:
        return state_fingerprint(**self.inputs())

    def run(self) -> SearchResult:
        if not self.search_docs:
            raise ConfigError("ZEPO needs at least one search document")
        s = self.settings
        inputs = self.inputs()
        state = SearchState(self.state_path, state_fingerprint(**inputs), inputs)
        history: list[ScoredCandidate] = []
        best: ScoredCandidate | None = None
        for epoch in range(s.epochs):
            parent = best
            state.epoch = epoch
            state.save()  # so a watcher sees which epoch is running
            slots = self._epoch_texts(state, epoch, parent, history)
            judged = self.judge_texts([x["text"] for x in slots if x["done"] is None])
            scored: list[ScoredCandidate] = []
            for x in slots:
                cand = x["done"]
                fresh = cand is None
                if fresh:
                    cand = self.candidate(
                        x["text"],
                        *judged[x["text"]],
                        index=len(history),
                        epoch=epoch,
                        slot=x["slot"],
                        parent=x["parent"],
                        seed=x["seed"],
                    )
                history.append(cand)
                scored.append(cand)
                if best is None or self._better(cand, best):
                    best = cand
                state.best_index = best.index
                if fresh:
                    state.done[x["key"]] = cand
                    state.pending.pop(x["key"], None)
                    state.save()
                if self.on_candidate:
                    self.on_candidate(cand, best, fresh)
            assert best is not None
            if self.on_epoch:
                self.on_epoch(epoch, scored, best)
        assert best is not None
        state.save()  # the final best_index, also when the last epoch was replayed from state.json
        return SearchResult(tuple(history), best, s.objective)

    def _better(self, cand: ScoredCandidate, best: ScoredCandidate) -> bool:
        """Strictly higher objective: a tie keeps the earlier instruction."""
        key = self.settings.objective
        return objective_key(cand.objectives[key]) > objective_key(best.objectives[key])

    def _epoch_texts(
        self,
        state: SearchState,
        epoch: int,
        parent: ScoredCandidate | None,
        history: Sequence[ScoredCandidate],
    ) -> list[dict[str, Any]]:
        """Every slot of the epoch in slot order, before any is judged: a candidate scored before
        (`done`, replayed from state.json), or the text to judge (pending in state.json, or a new
        paraphrase, saved as pending). Each paraphrase avoids the texts of the earlier slots, as
        when each slot was judged before the next was generated; skipped slots are left out."""
        seen = {c.text for c in history}
        slots: list[dict[str, Any]] = []
        for slot in range(self.settings.population):
            key = f"{epoch}:{slot}"
            if key in state.skipped:
                continue
            done = state.done.get(key)
            if done is not None:
                slots.append({"key": key, "slot": slot, "done": done})
                seen.add(done.text)
                continue
            if parent is None and slot == 0:
                text, seed, parent_index = self.initial, None, None
            else:
                # Epoch 0 paraphrases the initial instruction (index 0), later ones the best so far.
                source_text, parent_index = (parent.text, parent.index) if parent else (self.initial, 0)
                if key not in state.pending:
                    try:
                        text, seed = self._paraphrase(source_text, epoch, slot, seen)
                    except ParaphraseFailed as e:
                        # One unusable slot should not end an hours-long search: record and move on.
                        log.warning("epoch %d slot %d skipped: %s", epoch, slot, e)
                        state.skipped[key] = str(e)
                        state.save()
                        continue
                    state.pending[key] = {"text": text, "seed": seed}
                    state.save()
                text, seed = state.pending[key]["text"], state.pending[key]["seed"]
            slots.append(
                {"key": key, "slot": slot, "done": None, "text": text, "seed": seed, "parent": parent_index}
            )
            seen.add(text)
        return slots

    def _paraphrase(self, text: str, epoch: int, slot: int, seen: set[str]) -> tuple[str, int]:
        """One paraphrase from a seed derived from (seed, epoch, slot, attempt); a new attempt
        (new seed) only when the text repeats an earlier candidate."""
        norm = {" ".join(t.lower().split()) for t in seen}
        out, seed = "", 0
        for attempt in range(self.settings.dedup_attempts + 1):
            seed = derive_seed(self.settings.seed, epoch, slot, attempt)
            try:
                got = self.optimizer.paraphrase(text, 1, seed, self.aspect, avoid=sorted(seen))
            except ParaphraseError as e:
                raise ParaphraseFailed(str(e)) from None
            if not got or not got[0].strip():
                raise ParaphraseFailed("the optimizer returned no paraphrase")
            out = got[0]
            if " ".join(out.lower().split()) not in norm:
                return out, seed
        log.warning(
            "epoch %d slot %d: paraphrase repeats an earlier candidate; scoring it anyway", epoch, slot
        )
        return out, seed

    def judge_texts(self, texts: Sequence[str]) -> dict[str, tuple[list[Judgment], list[Judgment] | None]]:
        """Search (and, with heldout_spearman, held-out) judgments of every text, in ONE judge call
        (harness.judging.judge_instructions: the same prompts and cache keys as one call per text,
        the pairs of all texts side by side so their shared prefixes are computed once)."""
        texts = list(dict.fromkeys(texts))
        if not texts:
            return {}
        held = self.settings.heldout_spearman and bool(self.heldout_docs)
        jobs = [(self.search_docs, t) for t in texts] + (
            [(self.heldout_docs, t) for t in texts] if held else []
        )
        got = [
            j
            for j, _ in judge_instructions(
                self.judge,
                jobs,
                aspect=self.aspect,
                family=self.family,
                max_candidates=self.settings.max_candidates,
                progress=self.progress,
            )
        ]
        return {t: (got[i], got[len(texts) + i] if held else None) for i, t in enumerate(texts)}

    def judge_on(self, docs: Sequence[Document], text: str) -> list[Judgment]:
        """One text's judgments on `docs` (its own judge call)."""
        judgments, _ = judge_documents(
            self.judge,
            docs,
            aspect=self.aspect,
            instruction=text,
            family=self.family,
            max_candidates=self.settings.max_candidates,
            progress=self.progress,
        )
        return judgments

    def score(
        self, text: str, *, index: int, epoch: int, slot: int, parent: int | None, seed: int | None
    ) -> ScoredCandidate:
        """One candidate judged and scored on its own (the search judges a whole epoch at once)."""
        search, heldout = self.judge_texts([text])[text]
        return self.candidate(
            text, search, heldout, index=index, epoch=epoch, slot=slot, parent=parent, seed=seed
        )

    def candidate(
        self,
        text: str,
        search: Sequence[Judgment],
        heldout: Sequence[Judgment] | None,
        *,
        index: int,
        epoch: int,
        slot: int,
        parent: int | None,
        seed: int | None,
    ) -> ScoredCandidate:
        """A scored candidate from its search (and held-out) judgments."""
        m = candidate_metrics(search, self.settings.debias)
        held: dict[str, float] = {}
        sp = None
        if heldout is not None:
            held = heldout_metrics(heldout, self.settings.shuffles, self.settings.seed)
            sp = held["spearman_pairs" if self.settings.ranking == "pairs" else "spearman"]
        cand = ScoredCandidate(
            index=index,
            epoch=epoch,
            slot=slot,
            text=text,
            parent=parent,
            seed=seed,
            objectives=m["objectives"],
            a_rate=m["a_rate"],
            a_rate_prob=m["a_rate_prob"],
            ece=m["ece"],
            spearman_heldout=sp,
            heldout=held,
        )
        n, none = len(search), sum("no_answer" in j.flags for j in search)
        which = "PairS" if self.settings.ranking == "pairs" else "win-rate"
        held_text = "-" if sp is None else f"{sp:.3f}" if math.isfinite(sp) else "- (no human-scored ranking)"
        if n and none == n:
            log.info(
                "epoch %d slot %d: all %d pairs no_answer (no fairness); held-out %s Spearman %s",
                epoch,
                slot,
                n,
                which,
                held_text,
            )
        else:
            # The objective that ranks candidates first (fairness_prob separates candidates whose
            # argmax fairness is equal), then the argmax fairness the paper reports.
            objective = self.settings.objective
            log.info(
                "epoch %d slot %d: %s%s %.4f a_rate %.3f%s; held-out %s Spearman %s",
                epoch,
                slot,
                "" if objective == "fairness" else f"{objective} {cand.objectives[objective]:.4f}, ",
                "fairness",
                cand.fairness,
                cand.a_rate,
                f" ({none} of {n} pairs no_answer)" if none else "",
                which,
                held_text,
            )
        return cand


def candidate_line(judgments: Sequence[Any], m: Mapping[str, Any]) -> str:
    """One labelled log line for an instruction's raw metrics: which Spearman is which (win rate or
    PairS, both leaky here: the same documents the instruction is scored on), and "all N pairs
    no_answer (no fairness)" instead of NaNs when the judge never answered."""
    n = len(judgments)
    none = sum("no_answer" in j.flags for j in judgments)
    if n and none == n:
        return f"all {n} pairs no_answer (no fairness, no A-rate, no Spearman)"
    f = lambda x: "nan" if x is None or not math.isfinite(float(x)) else f"{float(x):.3f}"  # noqa: E731
    tail = f" ({none} of {n} pairs no_answer)" if none else ""
    return (
        f"a_rate {f(m.get('a_rate'))}, win-rate Spearman {f(m.get('spearman'))}, "
        f"PairS Spearman {f(m.get('spearman_pairs'))}{tail}"
    )


def split_documents(
    docs: Sequence[Document], search_docs: int, eval_docs: int | None = None, leak: bool = False
) -> tuple[list[Document], list[Document]]:
    """(search, eval): search = the first `search_docs`; eval = the rest (at most `eval_docs`),
    or, with `leak` (the paper), the whole slice including the search documents."""
    if search_docs < 1:
        raise ConfigError(f"search_docs must be >= 1, got {search_docs}")
    if search_docs > len(docs):
        raise ConfigError(f"search_docs={search_docs} but the task slice holds only {len(docs)} documents")
    search = list(docs[:search_docs])
    rest = list(docs) if leak else list(docs[search_docs:])
    if eval_docs is not None:
        rest = rest[:eval_docs]
    if not rest:
        raise ConfigError(
            f"no evaluation documents left: the slice has {len(docs)} documents and "
            f"search_docs={search_docs}; raise task.docs or set leak_search_docs=true"
        )
    return search, rest


def history_rows(result: SearchResult) -> list[dict[str, Any]]:
    return [dict(c.to_row(), selected=c.index == result.best.index) for c in result.candidates]
