"""Structured configs of the experiments (conf/experiment/*.yaml): one dataclass per experiment,
registered by harness.runtime.schema with the other groups; each `check()` raises a one-line
ConfigError naming the key and what to set."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from harness.abb import SIGMA_MODES
from harness.abb.config import AbbConfig
from harness.abb.run import settings_from as abb_settings
from harness.checks import at_least, one_of, within, within_optional
from harness.checks import bad as _bad
from harness.zepo.search import DEBIAS, OBJECTIVES, SearchSettings


# -- experiments ---------------------------------------------------------------------------------
@dataclass
class InstructionConf:
    """The judge's instruction: default (this project's) | zepo (init_prompts.json) | text | file."""

    source: str | None = None
    """default (this project's) | zepo (init_prompts.json) | text | file (A-BB: e.g. a ZEPO
    best_instruction.txt); null: text when `text` is set, else default (the run records which)."""
    text: str | None = None
    """The instruction; setting it alone selects it (source=text)."""
    path: str | None = None
    """init_prompts.json (source=zepo; null: data.dir/zepo/) or the instruction file (source=file)."""
    raw: bool = False
    """source=zepo: keep init_prompts.json byte for byte (its runs of spaces), as the official code."""

    def check(
        self, key: str = "experiment.instruction", sources: tuple[str, ...] = ("default", "zepo", "text")
    ) -> None:
        if self.text is not None and self.source not in (None, "text"):
            raise _bad(
                f"{key}.source",
                self.source,
                f"ignores {key}.text; drop {key}.source (the text alone selects it) or the text",
            )
        self.source = self.settled()
        one_of(f"{key}.source", self.source, sources)
        if self.source == "text" and not (self.text or "").strip():
            raise _bad(f"{key}.text", self.text, "must hold the instruction when source=text")
        if self.source == "file" and not (self.path or "").strip():
            raise _bad(f"{key}.path", self.path, "must name the instruction file when source=file")

    def settled(self) -> str:
        """The source a run uses: `source`, else text when `text` is set, else default."""
        return self.source or ("text" if self.text is not None else "default")


def settle_instruction(cfg: Any) -> None:
    """Write the source a run uses into cfg (experiment.instruction.source: null -> text | default),
    so config.json, W&B's config and a sweep's caption record what the run judged with."""
    node = cfg.get("experiment", {}).get("instruction")
    if hasattr(node, "get") and "source" in node and node.get("source") is None:
        node.source = "text" if node.get("text") is not None else "default"


@dataclass
class JudgeExp:
    name: str = "judge"
    """The experiment's name (run folders, W&B job type)."""
    entry: str = "harness.experiments.judge:main"
    """The function that runs it (module:function)."""
    instruction: InstructionConf = field(default_factory=InstructionConf)
    """The judge's instruction."""
    shuffles: int = 100
    """PairS merge-sort shuffles averaged for the Spearman/Kendall."""

    def check(self) -> None:
        self.instruction.check()
        at_least("experiment.shuffles", self.shuffles, 1)


@dataclass
class ZepoExp:
    """A ZEPO search and its evaluation; the search's defaults are harness.zepo.search.SearchSettings'."""

    name: str = "zepo"
    """The experiment's name (run folders, W&B job type)."""
    entry: str = "harness.experiments.zepo:main"
    """The function that runs it (module:function)."""
    paper_table: int | None = None
    """The paper's table a paper/*.yaml run fills (harness-paper-tables reads it)."""
    instruction: InstructionConf = field(default_factory=InstructionConf)
    """The initial instruction."""
    population: int = SearchSettings.population
    """Candidates per epoch; epoch 0 = the initial + population-1 paraphrases."""
    epochs: int = SearchSettings.epochs
    """Later epochs: `population` fresh paraphrases of the best so far."""
    objective: str = SearchSettings.objective
    """fairness (argmax A-rate, the paper) | fairness_prob | confidence | calibration (needs labels)."""
    search_docs: int = 2
    """The first N documents of the slice are the search set."""
    search_docs_by_task: dict[str, int] = field(default_factory=dict)
    """search_docs per task name (the paper's configs interpolate search_docs from it)."""
    eval_docs: int | None = None
    """Evaluation documents after the search set (null: the rest of the slice)."""
    leak_search_docs: bool = False
    """true: evaluate on the whole slice, search documents included (the paper)."""
    heldout_spearman: bool = SearchSettings.heldout_spearman
    """Judge every candidate on the evaluation documents too (history's spearman_heldout)."""
    ranking: str = SearchSettings.ranking
    """spearman_heldout's ranking: pairs (PairS merge sort, the paper) | winrate."""
    shuffles: int = SearchSettings.shuffles
    """PairS shuffles averaged per Spearman."""
    dedup_attempts: int = SearchSettings.dedup_attempts
    """New seeds tried when a paraphrase repeats an earlier candidate."""
    search_debias: str = SearchSettings.debias
    """none | permutation: score candidates on permutation-debiased judgments (official --do_permutate)."""

    def search_settings(self, seed: int, max_candidates: int | None) -> SearchSettings:
        """The search's settings: each SearchSettings field this experiment has, its search_debias, the
        run's seed and the task's max_candidates."""
        mine = {f.name: getattr(self, f.name) for f in fields(SearchSettings) if hasattr(self, f.name)}
        return SearchSettings(**mine, debias=self.search_debias, seed=seed, max_candidates=max_candidates)

    def check(self) -> None:
        self.instruction.check()
        one_of("experiment.search_debias", self.search_debias, DEBIAS)
        for key in ("population", "epochs", "search_docs", "shuffles"):
            at_least(f"experiment.{key}", getattr(self, key), 1)
        at_least("experiment.eval_docs", self.eval_docs, 1, optional=True)
        at_least("experiment.dedup_attempts", self.dedup_attempts, 0)
        one_of("experiment.objective", self.objective, OBJECTIVES)
        if self.search_debias == "permutation" and self.objective == "fairness_prob":
            raise _bad(
                "experiment.objective",
                self.objective,
                "is constant on permutation-debiased judgments "
                "(mean P(A) is always 0.5): set experiment.objective=fairness or experiment.search_debias=none",
            )
        one_of("experiment.ranking", self.ranking, ("pairs", "winrate"))
        for task, n in self.search_docs_by_task.items():
            at_least(f"experiment.search_docs_by_task.{task}", n, 1)


@dataclass
class SensitivityExp:
    name: str = "sensitivity"
    """The experiment's name (run folders, W&B job type)."""
    entry: str = "harness.experiments.sensitivity:main"
    """The function that runs it (module:function)."""
    instruction: InstructionConf = field(default_factory=InstructionConf)
    """The instruction paraphrased."""
    paraphrases: int = 8
    """Paraphrases generated by the optimizer (ignored with from_file)."""
    from_file: str | None = None
    """Instead: a text file (one instruction per line) or a ZEPO history.jsonl."""
    include_initial: bool = True
    """Score the initial instruction too (generated mode)."""
    ranking: str = "pairs"
    """The Spearman the figures use: pairs (PairS, the paper) | winrate."""
    shuffles: int = 100
    """PairS shuffles per Spearman."""
    shuffle_candidates: bool = False
    """true: each document's candidates in a random order seeded by (seed, document id) (docs/zepo.md)."""

    def check(self) -> None:
        self.instruction.check()
        at_least("experiment.paraphrases", self.paraphrases, 0)
        at_least("experiment.shuffles", self.shuffles, 1)
        one_of("experiment.ranking", self.ranking, ("pairs", "winrate"))


@dataclass
class PointwiseExp:
    """The ZEPO paper's pointwise baselines (Table 1 Scoring, G-Eval): harness/zepo/pointwise.py."""

    name: str = "pointwise"
    """The experiment's name (run folders, W&B job type)."""
    entry: str = "harness.experiments.pointwise:main"
    """The function that runs it (module:function)."""
    paper_table: int | None = None
    """The paper's table a paper/*.yaml run fills (harness-paper-tables reads it)."""
    instruction: str | None = None
    """null: the official per-aspect score instruction (pairs/prompts.py:140-204)."""
    labels: list[str] = field(default_factory=lambda: ["1", "2", "3", "4", "5"])
    """The digits read (model.labels is set to them for this run)."""

    def check(self) -> None:
        if list(self.labels) != ["1", "2", "3", "4", "5"]:
            raise _bad("experiment.labels", list(self.labels), "the 1-5 scale reads the digits 1..5")
        if self.instruction is not None and not self.instruction.strip():
            raise _bad(
                "experiment.instruction", self.instruction, "must be null (the official one) or a text"
            )


@dataclass
class FileScoresConf:
    path: str | None = None
    """JSONL/CSV rows {item, model, score[, neighbour, split: estimate|verify|jitter]}."""
    scale: list[float] | None = None
    """[lo, hi] of the file's scores, e.g. [1, 10]."""


@dataclass
class AbbExp(AbbConfig):
    name: str = "abb"
    """The experiment's name (run folders, W&B job type)."""
    entry: str = "harness.experiments.abb:main"
    """The function that runs it (module:function)."""
    scores: str = "pairwise"
    """pairwise (the judge's A/B logprobs) | file (a user's scores, experiment.file)."""
    baseline: str | None = "auto"
    """The model every answer is compared with; auto: gpt-4-0314 on arena tasks, null elsewhere (win rates)."""
    models: list[str] | None = None
    """Candidate ids to score (null: all; task.max_candidates cuts when null)."""
    orders: str = "both"
    """both (P(model better) averaged over the two A/B orders) | single (model as A only)."""
    aspect: str | None = None
    """What the instruction asks about (null: helpfulness on instruction tasks, else task.aspect)."""
    instruction: InstructionConf = field(default_factory=InstructionConf)
    """The judge's instruction (source=file: e.g. a ZEPO best_instruction.txt)."""
    file: FileScoresConf = field(default_factory=FileScoresConf)
    """experiment.scores=file: the scores."""
    instructions: list[str] = field(default_factory=list)
    """Other wordings for instruction neighbours ({aspect} filled in); the run's own is added."""
    instructions_file: str | None = None
    """More wordings: a text file (one per line) or a ZEPO history.jsonl."""

    def check(self) -> None:
        self.instruction.check(sources=("default", "zepo", "text", "file"))
        if self.instruction.source == "file" and not (self.instruction.path or "").strip():
            raise _bad(
                "experiment.instruction.path",
                self.instruction.path,
                "must name the instruction file when source=file (e.g. a ZEPO best_instruction.txt)",
            )
        one_of("experiment.scores", self.scores, ("pairwise", "file"))
        one_of("experiment.orders", self.orders, ("both", "single"))
        one_of("experiment.mode", self.mode, ("one_item", "whole_set"))
        one_of("experiment.bound", self.bound, ("auto", "certain_cap", "quantile", "dkw", "markov", "plugin"))
        one_of("experiment.mean_ucb", self.mean_ucb, ("best", "hoeffding", "bernstein"))
        if self.tau is None and self.tau_fraction is None:
            raise _bad("experiment.tau", self.tau, "set tau (raw units) or tau_fraction (of the score range)")
        for key in ("tau", "tau_fraction"):
            if getattr(self, key) is not None:
                within(f"experiment.{key}", getattr(self, key), 0, math.inf, open_low=True)
        within("experiment.delta", self.delta, 0, 1, open_low=True, open_high=True)
        at_least("experiment.estimate", self.estimate, 1)
        for key in ("verify", "bootstrap"):
            at_least(f"experiment.{key}", getattr(self, key), 0)
        at_least("experiment.jitter.samples", self.jitter.samples, 0)
        check_abb_calibration(self)
        if self.scores == "file" and not (self.file.path or "").strip():
            raise _bad(
                "experiment.file.path", self.file.path, "must name the score file when experiment.scores=file"
            )
        if self.file.scale is not None and not (
            len(self.file.scale) == 2 and self.file.scale[0] < self.file.scale[1]
        ):
            raise _bad("experiment.file.scale", list(self.file.scale), "must be [low, high] with low < high")
        # The run's own parser (bound, mode, fields, kinds, the delta split), so the two never disagree.
        abb_settings(self, 0)


def check_abb_calibration(exp: Any) -> None:
    """What abb.calibrate would refuse only after every neighbour was judged."""
    one_of("experiment.mu", exp.mu, ("fixed", "data"))
    one_of("experiment.sigma_mode", exp.sigma_mode, SIGMA_MODES)
    within("experiment.sigma_fraction", exp.sigma_fraction, 0, 1)
    within_optional("experiment.alpha", exp.alpha, 0, 1)
    within_optional("experiment.alpha_fraction", exp.alpha_fraction, 0, 1, open_low=True)
    within("experiment.alpha_min", exp.alpha_min, 0, 1)
    within_optional("experiment.dp_epsilon", exp.dp_epsilon, 0, 1, open_low=True, open_high=True)
    within_optional("experiment.mu_value", exp.mu_value, -math.inf, math.inf)
    noise = exp.delta_split.noise
    if noise not in (None, "auto"):
        try:
            noise = float(noise)
        except (TypeError, ValueError):
            raise _bad("experiment.delta_split.noise", noise, "must be auto or a number in [0, 1)") from None
        within("experiment.delta_split.noise", noise, 0, 1, open_high=True)
    within("experiment.delta_split.est", exp.delta_split.est, 0, 1, open_high=True)
