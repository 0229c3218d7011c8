"""The harness's intervals hold their level at 2 to 50 documents (harness/metrics/coverage.py).

On simulated clustered documents (4-16 candidates, tied human scores, a position bias per
document, pair effects shared by both orders), data sets of n = 2, 3, 4, 6, 8, 12, 20, 30, 50
documents drawn from a pool whose truth is known exactly: the 95% interval of a mean over documents
(A-rate), a per-document Spearman, a pooled win-rate Spearman, a paired difference of Spearmans and
ECE covers the truth in at least 93% of data sets (at most 98.5%: not by being uselessly wide), or,
below a metric's minimum, there is no interval and no claim; "distinguishable from 0" fires in at
most 6% of data sets with no true difference. The NEGATIVE CONTROL is the percentile bootstrap the
harness used before, on the same data: it covers far less than 93% at 2 to 4 documents and fires
far more than 6%. The simulation's per-document statistics and leave-one-out values are checked
against the harness's own (doc_stats on real Judgment records, whole_correlations).

Data sets: 8,000 per n up to 12 documents and 4,000 above (a coverage estimate's standard error
0.25-0.35 points), the pooled Spearman on 3,000 / 600 of them; one pool of 4,000 documents, seeded.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from harness.metrics import coverage as C
from harness.metrics.bootstrap import whole_correlations
from harness.metrics.interval import min_documents
from harness.metrics.summary import frame_metrics
from harness.metrics.views import build_frame
from harness.records import Judgment

DOCUMENTS = 4000
SETS = {n: 8000 if n <= 12 else 4000 for n in C.SIZES}
POOLED = {n: 3000 if n <= 12 else 600 for n in C.SIZES}
CONTROL = (2, 3, 4)


@pytest.fixture(scope="module")
def measured() -> dict:
    return C.measure(
        C.SIZES,
        SETS,
        DOCUMENTS,
        seed=0,
        rounds=200,
        pooled_sets=POOLED,
        control_sets=500,
        control_sizes=CONTROL,
    )


def test_every_interval_covers_at_least_93_percent_at_every_size(measured):
    for n, name in itertools.product(C.SIZES, C.STATISTICS):
        cell = measured[n]["jackknife"][name]
        need = min_documents("spearman" if name == "spearman_diff" else name)
        if n < need:  # too few documents to tell: no interval, so no claim either
            assert cell.told == 0 and cell.excluded_zero == 0, (n, name)
            continue
        assert cell.told == 1, (n, name, cell)
        assert 0.93 <= cell.covered <= 0.985, (n, name, cell)
    assert all(measured[2]["jackknife"][k].told == 0 for k in C.STATISTICS)  # 2 documents: nothing to tell


def test_distinguishable_fires_at_most_6_percent_with_no_true_difference(measured):
    fired = {n: measured[n]["jackknife"][C.NULL].excluded_zero for n in C.SIZES}
    assert all(f <= 0.06 for f in fired.values()), fired
    assert fired[2] == 0 and fired[50] > 0.01  # too few at 2; at 50 it can and does fire


def test_negative_control_the_percentile_bootstrap_fails_at_small_n(measured):
    """The method the harness used before, on the same data sets: below 90% coverage for the mean,
    the per-document Spearman and the paired difference at 2 to 4 documents (about 50% at 2),
    ECE far below, and "distinguishable" with no true difference well above 6%."""
    for n in CONTROL:
        cells = measured[n]["percentile"]
        for name in ("a_rate", "spearman", "spearman_diff", "ece"):
            assert cells[name].covered < 0.90, (n, name, cells[name])
        assert cells[C.NULL].excluded_zero > 0.10, (n, cells[C.NULL])
    assert measured[2]["percentile"]["a_rate"].covered < 0.6


def _judgments(pool_docs: int, seed: int) -> tuple[C.Pool, list[Judgment]]:
    """The pool's first documents as the harness's Judgment records (arm A), and the pool."""
    pool, p_a = C.simulate(pool_docs, seed, keep_matrices=True)
    out = []
    for d in range(pool_docs):
        m = int(np.isfinite(pool.h[d]).sum())
        for i, k in itertools.permutations(range(m), 2):
            out.append(
                Judgment(
                    f"d{d:03d}",
                    f"c{i}",
                    f"c{k}",
                    float(p_a[d, i, k]),
                    {},
                    float(pool.h[d, i]),
                    float(pool.h[d, k]),
                )
            )
    return pool, out


def test_the_simulation_computes_what_the_harness_computes():
    """Per document: the A-rate, the win-rate Spearman and ECE's bin sums equal doc_stats on the same
    documents as Judgment records; the pooled Spearman with each document left out equals
    whole_correlations on leave-one-out rows; the pool's ECE equals metric_set's."""
    pool, js = _judgments(12, 5)
    frame = build_frame(js)
    got = []
    metrics = frame_metrics(frame, shuffles=2, stats_out=got)
    s = got[0].sums
    order = [int(d[1:]) for d in frame.doc_ids]
    assert s["rate"] == pytest.approx(pool.rate[order], abs=1e-12)
    assert s["win_rho"] == pytest.approx(pool.rho[0][order], abs=1e-12)
    counts, ys, ps = got[0].bins
    assert counts == pytest.approx(pool.ece[order, :, 0]) and ys == pytest.approx(pool.ece[order, :, 1])
    assert ps == pytest.approx(pool.ece[order, :, 2], abs=1e-9)
    assert C.ece_of(pool.ece) == pytest.approx(metrics["ece"], abs=1e-12)
    idx = np.arange(12).reshape(3, 4)
    full, loo = C.pooled_spearman_loo(pool.x[idx], pool.h[idx])
    for k, docs in enumerate(idx):
        x, h = pool.x[docs], pool.h[docs]
        ok = np.isfinite(x)
        rows = np.vstack([np.ones(4), 1 - np.eye(4)])
        rho, _ = whole_correlations(x[ok], h[ok], np.repeat(np.arange(4), ok.sum(1)), rows)
        assert rho == pytest.approx(np.concatenate([[full[k]], loo[k]]), abs=1e-12)


def test_figure3_rho_across_instructions_is_told_from_12_documents():
    """Figure 3's statistic (Spearman rho across 12 instructions of two per-instruction means): its
    t-bootstrap interval covers the truth in at least 93% of data sets at 20 documents and is
    withheld ("too few") below 12, where it covered about 90%; NEGATIVE CONTROL: the percentile
    bootstrap at 12 documents, the size of docs/zepo.md's Figure 3, covers well under 93%."""
    assert C.figure3_cells(8, 50, 50)["t-bootstrap"].told == 0
    twenty = C.figure3_cells(20, 1000, 200)
    assert 0.93 <= twenty["t-bootstrap"].covered <= 0.99, twenty
    assert C.figure3_cells(12, 1000, 200)["percentile"].covered < 0.90
