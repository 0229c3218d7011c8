"""How often the intervals a run prints cover the truth, through the run's own path, at 3 to 50 documents.

    python -m harness.metrics.coverage                          # the tables in docs/report_card.md
    python -m harness.metrics.coverage --regimes p96 p96-beta --sizes 3 12 --sets 200

A regime (REGIMES) is a simulated population of documents; each data set draws n of them without
replacement as Judgment records and goes through `summary.analyse` (the "none" variant, as a run's
results.json and card) and `Summary.versus` (as harness-compare); the truth is the same metric on
the whole population (`summary.metric_set`), exactly. Per document: m candidates (REGIMES' "2",
"4-16" uniform, or "2v30": half the documents 2, half 30), a latent quality q ~ N(0, 1) per
candidate, human scores round(3 + q + N(0, 0.8)) clipped to 1..5, and every ordered pair judged:

    z_ij = mu_d + (q_i - q_j) / sqrt(2) + (e_ij + u_ij) / sqrt(2),   decision A iff z_ij > 0,
    P(A) = sigmoid(1.7 z_ij)

with a pair effect e_ij = -e_ji ~ N(0, 1) shared by both orders and u_ij ~ N(0, 1) per order.
`mu_d` = sqrt(2) Phi^-1(pi_d) makes the document's share of A decisions pi_d in expectation:
pi_d = P(A) of the regime in every document ("p96": 0.96), or pi_d ~ Beta(5 P, 5 (1 - P)) per
document ("p96-beta"); "mid": mu_d ~ N(0.3, 0.7) (a position bias per document, as before);
"heavy": mu_d = 0.3 + 0.5 t_2 (heavy-tailed document effects). Run B (a true difference) is a
better instruction of the same judge: position bias halved (mu_d / 2), quality term x1.5, the same
pair effects as A; run A2
(no difference) draws its own pair effects (correlated 0.7) and per-order noise, and each data set
swaps A and A2 at random per document, so B - A is 0 in expectation exactly.

Methods (`METHODS`), all from the same Summary of the same data set: "harness" (what a run prints:
`Summary.interval_objects`, `Summary.versus`), and two NEGATIVE CONTROLS: "percentile" (the
percentile bootstrap over documents on the Summary's own bootstrap rounds) and "t-jackknife"
(the t x jackknife interval for every metric, rates included: the method before rates took a score
interval, zero-width at the bound). `harness-compare`'s family (Holm over every metric it tests)
is measured on the null pair: the share of data sets whose table holds any "distinguishable" line.
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.metrics.bootstrap import NO_INTERVAL, percentile_interval, resample_counts
from harness.metrics.interval import (
    ACROSS,
    Interval,
    bootstrap_bounds,
    holm,
    jackknife_bounds,
    rule,
    verdict,
)
from harness.metrics.settings import MetricsSettings
from harness.metrics.summary import Summary, analyse, metric_set
from harness.records import Judgment

SIZES = (3, 4, 6, 8, 12, 20, 30, 50)
METHODS = ("harness", "percentile", "t-jackknife")


@dataclass(frozen=True)
class Regime:
    """A simulated population (module docstring)."""

    share: float | None
    """P(A): the share of A decisions in every document (None: a position bias per document)."""
    beta: bool = False
    """The share varies per document, Beta(5 P, 5 (1 - P))."""
    candidates: str = "2"
    """"2", "4-16" or "2v30" candidates per document."""
    heavy: bool = False
    """Heavy-tailed document effects (mu_d = 0.3 + 0.5 t_2)."""
    documents: int = 1000
    """Documents in the population."""


def _regimes() -> dict[str, Regime]:
    out = {"mid": Regime(None, candidates="4-16", documents=400)}
    for p in (0.5, 0.9, 0.96, 0.99):
        tag = f"p{round(p * 100):02d}"
        out[tag] = Regime(p)
        out[f"{tag}-beta"] = Regime(p, beta=True)
        out[f"{tag}-many"] = Regime(p, candidates="4-16", documents=400)
    out["p96-2v30"] = Regime(0.96, candidates="2v30", documents=300)
    out["mid-2v30"] = Regime(None, candidates="2v30", documents=300)
    out["heavy"] = Regime(None, candidates="4-16", heavy=True, documents=400)
    return out


REGIMES = _regimes()
"""name -> Regime: "mid" (mid-range, 4-16 candidates), "p50"..."p99" (2 candidates in both orders,
constant P(A)), "-beta" (per-document Beta), "-many" (4-16 candidates), "2v30" mixes, "heavy"."""


@dataclass
class Population:
    """Every document of a regime as Judgment records, for runs A, A2 (no difference) and B."""

    a: list[list[Judgment]]
    a2: list[list[Judgment]]
    b: list[list[Judgment]]
    truth: dict[str, dict[str, float]] = field(default_factory=dict)
    """{"a": metric_set of run A over every document, "b": of B}."""


def _sizes(regime: Regime, rng: np.random.Generator) -> np.ndarray:
    d = regime.documents
    if regime.candidates == "2":
        return np.full(d, 2)
    if regime.candidates == "2v30":
        return np.where(np.arange(d) % 2 == 0, 2, 30)
    return rng.integers(4, 17, d)


def _document_mu(regime: Regime, rng: np.random.Generator) -> np.ndarray:
    from scipy.stats import norm

    d = regime.documents
    if regime.heavy:
        return 0.3 + 0.5 * rng.standard_t(2, d)
    if regime.share is None:
        return rng.normal(0.3, 0.7, d)
    share = rng.beta(5 * regime.share, 5 * (1 - regime.share), d) if regime.beta else np.full(d, regime.share)
    return math.sqrt(2) * norm.ppf(np.clip(share, 1e-9, 1 - 1e-9))


def population(regime: Regime, seed: int) -> Population:
    """The regime's documents as Judgment records (module docstring), and the truth: metric_set of
    runs A and B over every document."""
    rng = np.random.default_rng(seed)
    sizes, mu = _sizes(regime, rng), _document_mu(regime, rng)
    runs: dict[str, list[list[Judgment]]] = {"a": [], "a2": [], "b": []}
    for d, (m, md) in enumerate(zip(sizes, mu)):
        q = rng.normal(size=m)
        human = np.clip(np.round(3 + q + rng.normal(0, 0.8, m)), 1, 5)
        raw = rng.normal(size=(m, m))
        e = (raw - raw.T) / math.sqrt(2)
        raw2 = rng.normal(size=(m, m))
        e2 = 0.7 * e + math.sqrt(0.51) * (raw2 - raw2.T) / math.sqrt(2)
        quality = (q[:, None] - q[None, :]) / math.sqrt(2)
        for name, bias, effect, sharp in (("a", md, e, 1.0), ("a2", md, e2, 1.0), ("b", md / 2, e, 1.5)):
            z = bias + sharp * quality + (effect + rng.normal(size=(m, m))) / math.sqrt(2)
            p = 1 / (1 + np.exp(-1.7 * z))
            runs[name].append(
                [
                    Judgment(
                        f"d{d:05d}", f"c{i}", f"c{k}", float(p[i, k]), {}, float(human[i]), float(human[k])
                    )
                    for i, k in itertools.permutations(range(m), 2)
                ]
            )
    pop = Population(runs["a"], runs["a2"], runs["b"])
    pop.truth = {k: metric_set([j for doc in runs[k] for j in doc], shuffles=1) for k in ("a", "b")}
    return pop


@dataclass
class Tally:
    """One metric (or B - A of it) under one method at one n: counts over data sets."""

    sets: int = 0
    told: int = 0
    """Data sets with an interval (the rest: too few documents, no spread, undefined)."""
    covered: int = 0
    """... whose interval holds the truth."""
    fired: int = 0
    """... whose interval excludes 0 ("distinguishable from 0")."""

    def add(self, iv: Interval | None, truth: float) -> None:
        self.sets += 1
        if iv is None or iv.bounds is None or not math.isfinite(truth):
            return
        self.told += 1
        self.covered += int(iv.bounds[0] <= truth <= iv.bounds[1])
        self.fired += int(verdict(iv) == "distinguishable from 0")

    @property
    def coverage(self) -> float:
        return self.covered / self.told if self.told else math.nan

    @property
    def told_share(self) -> float:
        return self.told / self.sets if self.sets else math.nan

    @property
    def fired_share(self) -> float:
        return self.fired / self.sets if self.sets else math.nan

    def se(self) -> float:
        """Monte-Carlo standard error of `coverage`."""
        c = self.coverage
        return math.sqrt(c * (1 - c) / self.told) if self.told else math.nan


def other_intervals(summary: Summary, method: str) -> dict[str, Interval | None]:
    """A negative control's intervals of the "none" variant from the same Summary: "percentile" (the
    percentile bootstrap on its bootstrap rounds) or "t-jackknife" (t x jackknife RMSE for every
    metric, rates included, zero-width where the documents show no spread)."""
    assert summary.replicates is not None and summary.masks is not None and summary.boot is not None
    out: dict[str, Interval | None] = {}
    for k, rows in summary.replicates["none"].items():
        value = summary.metrics["none"].get(k)
        mask = summary.masks["none"][k]
        n = int(mask.sum())
        if value is None or not math.isfinite(value) or n < 3:
            out[k] = None
            continue
        if method == "percentile":
            got = percentile_interval(summary.boot["none"][k], summary.level)
            out[k] = None if got is None else Interval((got[0], got[1]), n, None, "percentile")
        else:
            fisher, rng, need = rule(k)
            kept = rows[mask]
            if n < need or not np.isfinite(kept).all():
                out[k] = None
                continue
            lo, hi = jackknife_bounds(np.array(value), kept[None, :], summary.level, fisher, rng)
            out[k] = Interval((float(lo[0]), float(hi[0])), n)
    return out


@dataclass
class Cells:
    """Every tally of one regime at one n."""

    single: dict[str, dict[str, Tally]] = field(default_factory=dict)
    """method -> metric -> Tally of run A's intervals."""
    diff: dict[str, Tally] = field(default_factory=dict)
    """metric -> Tally of B - A (a true difference) from Summary.versus."""
    null: dict[str, Tally] = field(default_factory=dict)
    """metric -> Tally of A2 - A (no difference): `fired` is the per-metric false-claim rate."""
    family: Tally = field(default_factory=Tally)
    """Null tables: `fired` counts those with any Holm-distinguishable line (harness-compare)."""
    uncorrected: Tally = field(default_factory=Tally)
    """Null tables: any line distinguishable at the per-metric level (no family-wise control)."""
    truths: dict[str, float] = field(default_factory=dict)
    """metric -> the true B - A."""
    holm_power: dict[str, int] = field(default_factory=dict)
    """metric -> data sets where harness-compare's Holm family calls B - A distinguishable."""


SKIP = ("answer_mass_median", "answer_mass_low_share", "bc", "prob_gap")
"""Metrics of the answer tokens: the simulated judgments carry none (their intervals are not measured here)."""


def _summary(judgments: list[Judgment], rounds: int, level: float) -> Summary:
    """What a run computes for its raw judgments (the "none" variant)."""
    return analyse(judgments, shuffles=1, with_intervals=MetricsSettings(rounds, level), only=("none",))


def measure_cell(
    pop: Population,
    n: int,
    sets: int,
    seed: int,
    methods: Sequence[str] = ("harness",),
    pairs: bool = True,
    rounds: int | None = None,
) -> Cells:
    """`sets` data sets of n documents drawn from `pop`, each through analyse (and, with `pairs`,
    Summary.versus for B - A and A2 - A), at the runs' level (metrics.level's default)."""
    level = MetricsSettings.level
    rng = np.random.default_rng([seed, n])
    cells = Cells({m: {} for m in methods})
    if (
        rounds is None
    ):  # bootstrap rounds: only the percentile control reads them (the simulation has no answer mass)
        rounds = 200 if "percentile" in methods else 1
    for _ in range(sets):
        docs = rng.choice(len(pop.a), n, replace=False)
        swap = rng.random(n) < 0.5
        sa = _summary([j for d in docs for j in pop.a[d]], rounds, level)
        ivs = {
            m: sa.interval_objects()["none"] if m == "harness" else other_intervals(sa, m) for m in methods
        }  # type: ignore[index]
        for m, got in ivs.items():
            for k, iv in got.items():
                if k in SKIP:
                    continue
                cells.single[m].setdefault(k, Tally()).add(iv, pop.truth["a"][k])
        if not pairs:
            continue
        sb = _summary([j for d in docs for j in pop.b[d]], rounds, level)
        true_rows = {k: r for k, r in sa.versus(sb).items() if k not in SKIP and k not in NO_INTERVAL}
        kept = holm({k: r.get("p_value") or math.nan for k, r in true_rows.items()}, level)
        for k, row in true_rows.items():
            iv = Interval.from_record(row)
            cells.truths[k] = pop.truth["b"][k] - pop.truth["a"][k]
            cells.diff.setdefault(k, Tally()).add(iv, cells.truths[k])
            cells.holm_power[k] = cells.holm_power.get(k, 0) + int(kept[k])
        first = [j for d, s in zip(docs, swap) for j in (pop.a2 if s else pop.a)[d]]
        second = [j for d, s in zip(docs, swap) for j in (pop.a if s else pop.a2)[d]]
        rows = _summary(first, rounds, level).versus(_summary(second, rounds, level))
        tested = {k: r for k, r in rows.items() if k not in NO_INTERVAL and k not in SKIP}
        for k, row in tested.items():
            cells.null.setdefault(k, Tally()).add(Interval.from_record(row), 0.0)
        family = holm({k: r.get("p_value") or math.nan for k, r in tested.items()}, level)
        cells.family.sets += 1
        cells.family.fired += int(any(family.values()))
        cells.uncorrected.sets += 1
        cells.uncorrected.fired += int(
            any(verdict(Interval.from_record(r)) == "distinguishable from 0" for r in tested.values())
        )
    return cells


def measure(
    regimes: Sequence[str],
    sizes: Sequence[int] = SIZES,
    sets: int | Mapping[int, int] = 400,
    seed: int = 0,
    methods: Sequence[str] = ("harness",),
    pairs: bool = True,
) -> dict[str, dict[int, Cells]]:
    """{regime: {n: Cells}}: `sets` data sets per n (or per n from a mapping) in each regime."""
    out: dict[str, dict[int, Cells]] = {}
    for name in regimes:
        pop = population(REGIMES[name], seed)
        out[name] = {
            n: measure_cell(pop, n, sets if isinstance(sets, int) else sets[n], seed, methods, pairs)
            for n in sizes
        }
    return out


def _rank_rho(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho across the last axis (instructions; no ties in this simulation)."""
    rx, ry = (
        np.argsort(np.argsort(x, axis=-1), axis=-1).astype(float),
        np.argsort(np.argsort(y, axis=-1), axis=-1),
    )
    rx -= rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    return (rx * ry).sum(-1) / np.sqrt((rx * rx).sum(-1) * (ry * ry).sum(-1))


def _cell(lo: np.ndarray, hi: np.ndarray, truth: float, n: int) -> Tally:
    tally = Tally()
    for a, b in zip(lo, hi):
        tally.add(Interval((float(a), float(b)), n) if np.isfinite(a) and np.isfinite(b) else None, truth)
    return tally


def figure3_cells(n: int, sets: int, rounds: int, seed: int = 0, instructions: int = 12) -> dict[str, Tally]:
    """Figure 3's statistic: Spearman rho across `instructions` of two per-instruction means over n
    documents (an objective and the Spearman with humans). Each document moves every instruction's
    two values together (N(0, 0.1) and N(0, 0.2) shared) plus N(0, 0.08) per instruction; the truth
    is the rho of the instructions' population means (drawn once, seeded). Intervals: the harness's
    t interval on bootstrap rounds (interval.bootstrap_bounds) and the plain percentile bootstrap."""
    level = MetricsSettings.level
    rng = np.random.default_rng([seed, 3])
    f = -0.3 + 0.05 * rng.normal(size=instructions)
    s = 0.3 + 0.5 * (f + 0.3) + 0.03 * rng.normal(size=instructions)
    truth = float(_rank_rho(f, s))
    rng = np.random.default_rng([seed, 3, n])
    df = f + rng.normal(0, 0.1, (sets, n, 1)) + rng.normal(0, 0.08, (sets, n, instructions))
    ds = s + rng.normal(0, 0.2, (sets, n, 1)) + rng.normal(0, 0.08, (sets, n, instructions))
    point = _rank_rho(df.mean(1), ds.mean(1))
    w = np.stack([resample_counts(n, rounds, seed + k) for k in range(sets)])  # (sets, rounds, n)
    reps = _rank_rho(np.einsum("srn,snk->srk", w, df), np.einsum("srn,snk->srk", w, ds))
    fisher, value_range, need = rule(ACROSS)
    nan = np.full(sets, np.nan)
    told = (
        _cell(nan, nan, truth, n)
        if n < need
        else _cell(*bootstrap_bounds(point, reps, n, level, fisher, value_range), truth, n)
    )
    pct = np.array([percentile_interval(r, level) for r in reps], dtype=float)
    return {"t-bootstrap": told, "percentile": _cell(pct[:, 0], pct[:, 1], truth, n)}


def _pct(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{100 * x:.1f}"


def table(result: Mapping[str, Mapping[int, Cells]], method: str = "harness") -> str:
    """Markdown, one row per (regime, metric): coverage % (Monte-Carlo SE) per n, "–" where no data
    set had an interval, and the share given an interval where below 100%; then B - A's coverage,
    the per-metric no-difference rate and the family's."""
    lines = []
    for name, by_n in result.items():
        sizes = sorted(by_n)
        lines += [
            f"\n**{name}** ({describe(REGIMES[name])}; {method}; data sets per n: "
            + ", ".join(
                f"{n}: {by_n[n].family.sets or next(iter(by_n[n].single[method].values())).sets}"
                for n in sizes
            )
            + ")\n",
            "| metric | " + " | ".join(f"n={n}" for n in sizes) + " |",
            "|---|" + "---:|" * len(sizes),
        ]
        keys = list(next(iter(by_n.values())).single.get(method, {}))
        for k in keys:
            row = []
            for n in sizes:
                t = by_n[n].single[method].get(k)
                row.append("–" if t is None else _cov(t))
            lines.append(f"| {k} | " + " | ".join(row) + " |")
        for k in next(iter(by_n.values())).diff if method == "harness" else ():
            lines.append(
                f"| B - A {k} (truth {_truth(by_n, k):+.3f}): coverage; excludes 0; Holm keeps | "
                + " | ".join(
                    f"{_cov(by_n[n].diff[k])}; {_pct(by_n[n].diff[k].fired_share)}"
                    f"; Holm {_pct(by_n[n].holm_power.get(k, 0) / max(by_n[n].diff[k].sets, 1))}"
                    for n in sizes
                )
                + " |"
            )
        if method == "harness" and next(iter(by_n.values())).family.sets:
            worst = {n: max(by_n[n].null.items(), key=lambda kv: kv[1].fired_share) for n in sizes}
            lines.append(
                "| no difference: worst metric's 'distinguishable' rate | "
                + " | ".join(f"{_pct(worst[n][1].fired_share)} ({worst[n][0]})" for n in sizes)
                + " |"
            )
            for k in next(iter(by_n.values())).null:
                lines.append(
                    f"| no difference: {k} distinguishable | "
                    + " | ".join(_pct(by_n[n].null[k].fired_share) for n in sizes)
                    + " |"
                )
            lines.append(
                "| no difference: tables with any line distinguishable, per-metric 95% | "
                + " | ".join(_pct(by_n[n].uncorrected.fired_share) for n in sizes)
                + " |"
            )
            lines.append(
                "| no difference: tables with any line distinguishable, Holm | "
                + " | ".join(_pct(by_n[n].family.fired_share) for n in sizes)
                + " |"
            )
    return "\n".join(lines)


def _truth(by_n: Mapping[int, Cells], key: str) -> float:
    return next(iter(by_n.values())).truths.get(key, math.nan)


def _cov(t: Tally) -> str:
    if not t.told:
        return "–"
    text = f"{_pct(t.coverage)} ±{100 * t.se():.1f}"
    return text + (f" ({_pct(t.told_share)}% told)" if t.told < t.sets else "")


def describe(regime: Regime) -> str:
    share = (
        "position bias N(0.3, 0.7) per document"
        if regime.share is None and not regime.heavy
        else "position bias 0.3 + 0.5 t_2 per document"
        if regime.heavy
        else f"P(A) {regime.share:g}" + (" ~ Beta per document" if regime.beta else " in every document")
    )
    return f"{share}, {regime.candidates} candidates, {regime.documents} documents"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--sets", type=int, default=400, help="data sets per size")
    ap.add_argument("--methods", nargs="+", default=["harness"], choices=METHODS)
    ap.add_argument("--no-pairs", action="store_true", help="skip B - A and the no-difference tables")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for name in args.regimes:
        result = measure([name], args.sizes, args.sets, args.seed, args.methods, not args.no_pairs)
        for method in args.methods:
            print(table(result, method), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
