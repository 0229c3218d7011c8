"""A-BB's typed settings (conf/experiment/abb.yaml less what the run reads to build its scores: the
schema harness.runtime.experiment_schema.AbbExp extends `AbbConfig`), each default written once;
`harness.abb.run.settings_from` reads them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class DeltaSplitConf:
    noise: Any = "auto"
    """Share of delta for ||Z - Z'|| (auto: 0 when sigma_mode=zero, else 0.45)."""
    est: float = 0.1
    """Share for the estimation data (0 when bound=plugin|certain_cap); the bound gets the rest."""


@dataclass
class JitterConf:
    samples: int = 5
    """Identity neighbours: the unchanged input re-judged through the uncached judge (0: not measured)."""
    remove: bool = False
    """false: the claim covers realised re-judgments; true: the claim about the judge's mean score (Markov)."""


@dataclass
class AbbConfig:
    """The bound, its calibration and the neighbours (experiment.* of an A-BB run)."""

    tau: float | None = None
    """Distance bound in raw score units; when set it wins over tau_fraction."""
    tau_fraction: float | None = 0.125
    """tau as a fraction of the score range (the paper: 0.5 on a 1-5 scale = 1/8)."""
    delta: float = 0.05
    """Failure probability, split by the union bound (delta_split)."""
    delta_split: DeltaSplitConf = field(default_factory=DeltaSplitConf)
    """How delta is split between the noise, the estimation and the bound."""
    bound: str = "auto"
    """auto (the largest certified alpha of certain_cap, quantile, dkw, markov) | one of those | plugin (an estimate)."""
    mean_ucb: str = "best"
    """The mean bound under markov: best (by a pre-data rule) | hoeffding | bernstein."""
    mu: str = "fixed"
    """fixed (mu_value, default the scale midpoint) | data (the vector's mean; bounded too)."""
    mu_value: float | None = None
    """The fixed mu (null: the scale's midpoint)."""
    alpha: float | None = None
    """The contraction (null: alpha_fraction * alpha_max)."""
    alpha_fraction: float | None = None
    """alpha = this * alpha_max (null: 1); below 1 leaves room for noise."""
    alpha_min: float = 0.0
    """Refuse (exit 2) when (tau, delta) allow only an alpha below this."""
    sigma_mode: str = "zero"
    """zero (most margin) | max (sigma_max) | fraction (sigma_fraction * sigma_max)."""
    sigma_fraction: float = 0.5
    """Used by sigma_mode=fraction."""
    dp_epsilon: float | None = None
    """DP-style noise: sigma = radius(alpha) sqrt(2 ln(1.25/delta_noise)) / epsilon (0 < eps < 1)."""
    clip: bool = True
    """Clip M(D) to the score scale (a projection: keeps the claim)."""
    mode: str = "one_item"
    """one_item (Hamming-1: one item re-judged, spliced into f(D)) | whole_set (every item edited)."""
    kinds: Any = "formatting"
    """formatting (all six) | a list of harness.abb.edits.KINDS (swap, instruction, llm_paraphrase, ...)."""
    fields: list[str] = field(default_factory=lambda: ["answer"])
    """What formatting/paraphrase kinds edit: answer | question | instruction."""
    estimate: int = 40
    """Estimation neighbours m, i.i.d. (the quantile bound needs m >= 116 at delta=0.05)."""
    verify: int = 100
    """Fresh neighbours for the check (0: no check), one noise draw each; never used for estimation."""
    jitter: JitterConf = field(default_factory=JitterConf)
    """Identity neighbours: how much re-judging the same input moves a score."""
    bootstrap: int = 100
    """Bootstrap rounds of the ranking intervals (questions resampled)."""


def abb_config(exp: AbbConfig | Mapping[str, Any]) -> AbbConfig:
    """`exp` as an AbbConfig: itself, or a mapping's keys that are its fields (a run's
    `experiment` node, a script's dict); an absent key takes the default."""
    if isinstance(exp, AbbConfig):
        return exp
    names = {f.name for f in fields(AbbConfig)}
    given = {k: v for k, v in dict(exp).items() if k in names}
    if "delta_split" in given:
        given["delta_split"] = DeltaSplitConf(**dict(given["delta_split"] or {}))
    if "jitter" in given:
        given["jitter"] = JitterConf(**dict(given["jitter"] or {}))
    return AbbConfig(**given)
