"""Metrics over pairwise judgments: decision rate, fairness, confidence, calibration, correlation
with humans, and the debiasing baselines (permutation, batch, contextual).

Every function takes a list of `Judgment`; debiasers return a new list with adjusted `p_a`, so
every metric applies unchanged to debiased judgments. `summarize` reads a list into columns once
(`views.Frame`) and computes each debiased variant as another P(A) column, so paper-scale sets
(24,000 ordered pairs) take about a second (docs/benchmarks.md). Modules: `views` (per-document
matrices, the Frame),
`rates`, `calibration`, `correlation`, `debias`, `summary` (everything for results.json); `mass`
(answer-token mass), `order` (order consistency), `card` + `plots` (a run's report card);
`bootstrap` (each metric with each document left out), `interval` (every interval and the one
"distinguishable" rule), `coverage` (how often those intervals cover, simulated).
"""

from harness.metrics.calibration import calibration, calibration_pairs
from harness.metrics.card import Card, card_numbers, render_cards
from harness.metrics.correlation import (
    correlations,
    pairs_sort,
    preference_table,
    rank_correlations,
    win_rates,
)
from harness.metrics.debias import (
    batch_calibrate,
    contextual_calibrate,
    permutation_debias,
)
from harness.metrics.mass import answer_mass_stats, answer_masses
from harness.metrics.official import bc_prior, prob_gap, upper_a_rate
from harness.metrics.order import order_consistency, order_pairs
from harness.metrics.rates import a_rate, confidence, fairness
from harness.metrics.summary import metric_set, recompute, summarize, write_run
from harness.metrics.views import (
    EPS,
    DocView,
    document_views,
    human_scores,
    preference_matrices,
)

__all__ = [
    "Card",
    "answer_mass_stats",
    "answer_masses",
    "card_numbers",
    "order_consistency",
    "order_pairs",
    "render_cards",
    "EPS",
    "DocView",
    "a_rate",
    "batch_calibrate",
    "calibration",
    "calibration_pairs",
    "confidence",
    "contextual_calibrate",
    "correlations",
    "document_views",
    "fairness",
    "human_scores",
    "metric_set",
    "pairs_sort",
    "permutation_debias",
    "preference_matrices",
    "preference_table",
    "rank_correlations",
    "recompute",
    "summarize",
    "win_rates",
    "write_run",
    "bc_prior",
    "prob_gap",
    "upper_a_rate",
]
