"""Structured configs of the experiments (conf/experiment/*.yaml): one dataclass per experiment,
registered by harness.runtime.schema with the other groups; each `check()` raises a one-line
ConfigError naming the key and what to set."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from harness.abb.run import settings_from as abb_settings
from harness.runtime.checks import (
    at_least,
    check_abb_calibration,
    one_of,
    within,
)
from harness.runtime.checks import (
    bad as _bad,
)


# -- experiments ---------------------------------------------------------------------------------
@dataclass
class InstructionConf:
    """The judge's instruction: default (this project's) | zepo (init_prompts.json) | text | file."""

    source: str = "default"
    text: Optional[str] = None
    path: Optional[str] = None
    raw: bool = False

    def check(self, key: str = "experiment.instruction", sources: tuple[str, ...] = ("default", "zepo", "text")) -> None:
        one_of(f"{key}.source", self.source, sources)
        if self.source == "text" and not (self.text or "").strip():
            raise _bad(f"{key}.text", self.text, "must hold the instruction when source=text")
        if self.source == "file" and not (self.path or "").strip():
            raise _bad(f"{key}.path", self.path, "must name the instruction file when source=file")


@dataclass
class JudgeExp:
    name: str = "judge"
    entry: str = "harness.experiments.judge:main"
    instruction: InstructionConf = field(default_factory=InstructionConf)
    shuffles: int = 100

    def check(self) -> None:
        self.instruction.check()
        at_least("experiment.shuffles", self.shuffles, 1)


@dataclass
class ZepoExp:
    name: str = "zepo"
    entry: str = "harness.experiments.zepo:main"
    paper_table: Optional[int] = None
    instruction: InstructionConf = field(default_factory=InstructionConf)
    population: int = 5
    epochs: int = 5
    objective: str = "fairness"
    search_docs: int = 2
    search_docs_by_task: dict[str, int] = field(default_factory=dict)
    eval_docs: Optional[int] = None
    leak_search_docs: bool = False
    heldout_spearman: bool = True
    ranking: str = "pairs"
    shuffles: int = 100
    dedup_attempts: int = 3
    search_debias: str = "none"

    def check(self) -> None:
        self.instruction.check()
        one_of("experiment.search_debias", self.search_debias, ("none", "permutation"))
        for key in ("population", "epochs", "search_docs", "shuffles"):
            at_least(f"experiment.{key}", getattr(self, key), 1)
        at_least("experiment.eval_docs", self.eval_docs, 1, optional=True)
        at_least("experiment.dedup_attempts", self.dedup_attempts, 0)
        one_of("experiment.objective", self.objective, ("fairness", "fairness_prob", "confidence", "calibration"))
        if self.search_debias == "permutation" and self.objective == "fairness_prob":
            raise _bad("experiment.objective", self.objective, "is constant on permutation-debiased judgments "
                       "(mean P(A) is always 0.5): set experiment.objective=fairness or experiment.search_debias=none")
        one_of("experiment.ranking", self.ranking, ("pairs", "winrate"))
        for task, n in self.search_docs_by_task.items():
            at_least(f"experiment.search_docs_by_task.{task}", n, 1)


@dataclass
class SensitivityExp:
    name: str = "sensitivity"
    entry: str = "harness.experiments.sensitivity:main"
    instruction: InstructionConf = field(default_factory=InstructionConf)
    paraphrases: int = 8
    from_file: Optional[str] = None
    include_initial: bool = True
    ranking: str = "pairs"
    shuffles: int = 100
    shuffle_candidates: bool = False

    def check(self) -> None:
        self.instruction.check()
        at_least("experiment.paraphrases", self.paraphrases, 0)
        at_least("experiment.shuffles", self.shuffles, 1)
        one_of("experiment.ranking", self.ranking, ("pairs", "winrate"))


@dataclass
class PointwiseExp:
    """The ZEPO paper's pointwise baselines (Table 1 Scoring, G-Eval): harness/zepo/pointwise.py."""

    name: str = "pointwise"
    entry: str = "harness.experiments.pointwise:main"
    paper_table: Optional[int] = None
    instruction: Optional[str] = None
    labels: list[str] = field(default_factory=lambda: ["1", "2", "3", "4", "5"])

    def check(self) -> None:
        if list(self.labels) != ["1", "2", "3", "4", "5"]:
            raise _bad("experiment.labels", list(self.labels), "the 1-5 scale reads the digits 1..5")
        if self.instruction is not None and not self.instruction.strip():
            raise _bad("experiment.instruction", self.instruction, "must be null (the official one) or a text")


@dataclass
class DeltaSplitConf:
    noise: Any = "auto"
    est: float = 0.1


@dataclass
class FileScoresConf:
    path: Optional[str] = None
    scale: Optional[list[float]] = None


@dataclass
class JitterConf:
    samples: int = 5
    remove: bool = False


@dataclass
class AbbExp:
    name: str = "abb"
    entry: str = "harness.experiments.abb:main"
    scores: str = "pairwise"
    baseline: Optional[str] = "auto"
    models: Optional[list[str]] = None
    orders: str = "both"
    aspect: Optional[str] = None
    instruction: InstructionConf = field(default_factory=InstructionConf)
    file: FileScoresConf = field(default_factory=FileScoresConf)
    tau: Optional[float] = None
    tau_fraction: Optional[float] = 0.125
    delta: float = 0.05
    delta_split: DeltaSplitConf = field(default_factory=DeltaSplitConf)
    bound: str = "auto"
    mean_ucb: str = "best"
    mu: str = "fixed"
    mu_value: Optional[float] = None
    alpha: Optional[float] = None
    alpha_fraction: Optional[float] = None
    alpha_min: float = 0.0
    sigma_mode: str = "zero"
    sigma_fraction: float = 0.5
    dp_epsilon: Optional[float] = None
    clip: bool = True
    mode: str = "one_item"
    kinds: Any = "formatting"
    fields: list[str] = field(default_factory=lambda: ["answer"])
    estimate: int = 40
    verify: int = 100
    instructions: list[str] = field(default_factory=list)
    instructions_file: Optional[str] = None
    jitter: JitterConf = field(default_factory=JitterConf)
    bootstrap: int = 100

    def check(self) -> None:
        self.instruction.check(sources=("default", "zepo", "text", "file"))
        if self.instruction.source == "file" and not (self.instruction.path or "").strip():
            raise _bad("experiment.instruction.path", self.instruction.path,
                       "must name the instruction file when source=file (e.g. a ZEPO best_instruction.txt)")
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
            raise _bad("experiment.file.path", self.file.path, "must name the score file when experiment.scores=file")
        if self.file.scale is not None and not (len(self.file.scale) == 2 and self.file.scale[0] < self.file.scale[1]):
            raise _bad("experiment.file.scale", list(self.file.scale), "must be [low, high] with low < high")
        # The run's own parser (bound, mode, fields, kinds, the delta split), so the two never disagree.
        abb_settings(asdict(self), 0)
