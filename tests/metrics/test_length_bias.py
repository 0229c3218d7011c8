"""Length bias (harness/metrics/length.py, issue #31): on synthetic judges whose P(A) has a known
mean sigmoid(position + length * dlen / scale) (Beta noise around it, with a per-document
perturbation so pairs of a document are correlated), the fit recovers the length coefficient
within its interval over documents (harness/metrics/interval.py), and for a judge without a length
preference the interval covers 0; the few Newton steps per left-out document reach the full fit."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from harness.metrics import length
from harness.metrics.bootstrap import LeaveOneOut
from harness.records import Judgment


def _synthetic(slope: float, position: float = 0.4, docs: int = 40, n: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths, raw = {}, []
    for d in range(docs):
        words = rng.integers(20, 200, n)
        lengths.update({(f"d{d}", f"c{i}"): int(words[i]) for i in range(n)})
        raw.extend((d, i, k, words[i] - words[k]) for i, k in itertools.permutations(range(n), 2))
    scale = float(np.std([r[3] for r in raw]))
    judgments, doc_shift = [], rng.uniform(-1, 1, docs)
    for d, i, k, diff in raw:
        s = 1 / (1 + math.exp(-(position + slope * diff / scale)))
        mean = s + doc_shift[d] * s * (1 - s)  # mean-zero over documents: E[P(A) | dlen] = s
        p = float(rng.beta(20 * mean, 20 * (1 - mean)))
        judgments.append(Judgment(f"d{d}", f"c{i}", f"c{k}", p, {}, None, None))
    return judgments, lengths


@pytest.mark.parametrize("slope", [0.8, 0.0])
def test_a_known_length_preference_is_recovered_and_none_covers_zero(slope):
    judgments, lengths = _synthetic(slope)
    rs = LeaveOneOut.over({j.doc_id for j in judgments}, 0.95)
    fit = length.length_bias(judgments, lengths, rs)
    lo, hi = fit["length_interval"]
    assert lo <= slope <= hi and hi - lo < 0.5
    plo, phi = fit["position_interval"]
    assert plo <= 0.4 <= phi
    if slope:
        assert lo > 0  # a real preference is distinguishable from 0 at this size
    assert fit["n_pairs"] == 40 * 30 and fit["unit"].startswith("words")


def test_leave_one_out_refits_converge_and_degenerate_input_is_nan():
    judgments, lengths = _synthetic(0.8, docs=10)
    rs = LeaveOneOut.over({j.doc_id for j in judgments}, 0.95)
    few = length.length_bias(judgments, lengths, rs)
    many = length.length_bias(judgments, lengths, rs, chunk=7)
    assert few == many  # chunking does not change a row
    assert few["length_basis"]["n_documents"] == 10 and "jackknife" in few["length_basis"]["method"]
    p = np.clip([j.p_a for j in judgments], 1e-6, 1 - 1e-6)
    x = np.array([lengths[(j.doc_id, j.a_id)] - lengths[(j.doc_id, j.b_id)] for j in judgments], float)
    x /= x.std()
    w = rs.columns(sorted({j.doc_id for j in judgments}))[:, [int(j.doc_id[1:]) for j in judgments]]
    start = np.array([few["position"], few["length"]])
    assert np.allclose(length._fit(p, x, w, start, 4), length._fit(p, x, w, start, 40), atol=1e-8)
    same = {key: 50 for key in lengths}
    flat = length.length_bias(judgments, same, rs)
    assert math.isnan(flat["length"]) and flat["length_interval"] is None and flat["scale"] == 0


def test_length_control_removes_a_designed_length_preference():
    """A judge with a strong length preference and otherwise no information: after length
    control the refit on P_lc finds no length preference left (its interval covers 0), while
    the raw one is far from 0; NEGATIVE CONTROL: subtracting the fitted coefficient once (the
    attenuated one) leaves a preference the interval excludes 0 for."""
    judgments, lengths = _synthetic(1.2, docs=30)
    fit = length.length_bias(judgments, lengths)
    rs0 = LeaveOneOut.over({j.doc_id for j in judgments}, 0.95)
    once = length.controlled_p(judgments, lengths, fit, shift=fit["length"])
    left = length.length_bias([replace(j, p_a=float(p)) for j, p in zip(judgments, once)], lengths, rs0)
    assert left["length_interval"][0] > 0
    lc = length.controlled_p(judgments, lengths, fit)
    rs = LeaveOneOut.over({j.doc_id for j in judgments}, 0.95)
    after = length.length_bias([replace(j, p_a=float(p)) for j, p in zip(judgments, lc)], lengths, rs)
    lo, hi = after["length_interval"]
    assert lo <= 0 <= hi and abs(after["length"]) < 1e-6
    assert fit["length"] > 1.0
