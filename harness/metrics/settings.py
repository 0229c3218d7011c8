"""The metrics' settings, each default written once: `metrics.bootstrap` and `metrics.level`.

The config schema's MetricsConf (harness.runtime.schema) extends this dataclass, so a run's
validated config and a card, a summary or a ZEPO table built in code take the same defaults and the
same `check()`. Functions take the record (`metrics: MetricsSettings | None = None`, None: these
defaults) instead of restating `level` and the rounds in their signatures (tests/test_defaults.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.metrics.bootstrap import check_settings


@dataclass
class MetricsSettings:
    bootstrap: int = 1000
    """0: no intervals; else every metric gets its interval over documents (t x the jackknife's RMSE,
    harness/metrics/interval.py), and these bootstrap rounds serve the answer-mass median and Figure 3's rho."""
    level: float = 0.95
    """The intervals' confidence level."""

    def check(self) -> None:
        check_settings(self.bootstrap, self.level)

    @classmethod
    def of(cls, node: Mapping[str, Any] | None) -> MetricsSettings:
        """A run's `metrics` node (a composed config's, a config.json's), its absent keys the defaults."""
        node = node or {}
        return cls(
            bootstrap=int(node.get("bootstrap", cls.bootstrap)), level=float(node.get("level", cls.level))
        )


def metrics_settings(metrics: MetricsSettings | None) -> MetricsSettings:
    """`metrics`, or the defaults where None."""
    return MetricsSettings() if metrics is None else metrics
