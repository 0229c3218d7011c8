"""Pointwise scoring, the ZEPO paper's Table 1 baselines "Scoring" and "G-Eval".

Each summary is shown alone with the official 1-5 score prompt (harness.prompts.render_pointwise)
and the judge reads the log-probabilities of the digit tokens '1'..'5' (its answer labels), with
either read-out: the next token, or the official generate-then-read (`models/llama3.py:102-117`:
greedy generation, the digits' log-probs at the first generated digit; no digit -> score 3 and
a uniform 0.2, as the official fallback). Three scores per summary:

- `scoring`: the most likely digit (the official `pred_scores`, the digit the model writes);
- `geval`: the expected score sum_d d * p(d) with p renormalised over the five digits (G-Eval);
- `geval_official`: the official `correlation_analysis` (pairs/utils.py:454-470): sum_d d *
  exp(logprob_d) WITHOUT renormalising, rounded to 1 decimal.

Correlations with the human scores: Spearman/Kendall per document averaged over documents (as the
pairwise tables; an undefined one counts 0) and pooled over all summaries (`*_whole`). The
official code has no driver for these rows (its correlation_analysis cannot run as written:
it unpacks three values from a function returning two), so which the paper used is not known.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError, DataError
from harness.files import write_jsonl_atomic
from harness.judges.base import Judge, innermost
from harness.judging import document_fingerprints, score
from harness.metrics import rank_correlations
from harness.prompts import render_pointwise
from harness.records import Document, PairRequest, Tracker
from harness.results import write_results

DIGITS = ("1", "2", "3", "4", "5")
"""The answer labels a pointwise judge reads (the official `score_ids`)."""

KINDS = ("scoring", "geval", "geval_official")


def requests_for(
    docs: Sequence[Document], aspect: str, instruction: str | None, max_candidates: int | None
) -> list[PairRequest]:
    """One request per summary (a_id = b_id = the candidate)."""
    out = []
    for doc in docs:
        for c in doc.candidates[:max_candidates] if max_candidates else doc.candidates:
            out.append(PairRequest(doc.id, c.id, c.id, render_pointwise(doc, c, aspect, instruction)))
    return out


def digit_probs(token_logprobs: dict[str, float]) -> np.ndarray | None:
    """P(digit) for '1'..'5' summed over each digit's token variants; None when unread."""
    if not token_logprobs:
        return None
    mass = np.zeros(len(DIGITS))
    for key, lp in token_logprobs.items():
        label = key.split(":", 1)[0]
        if label in DIGITS:
            mass[DIGITS.index(label)] += math.exp(lp)
    return mass


def scores_of(probs: np.ndarray | None) -> dict[str, float]:
    """The three scores of one summary (the official fallback when its answer was not read)."""
    values = np.arange(1, len(DIGITS) + 1, dtype=float)
    if probs is None:  # the official fallback: score 3 with log-probs log(0.2) (models/llama3.py:115-117)
        return {"scoring": 3.0, "geval": 3.0, "geval_official": 3.0}
    total = probs.sum()
    return {
        "scoring": float(values[int(np.argmax(probs))]),
        "geval": float(probs @ values / total) if total > 0 else math.nan,
        "geval_official": float(np.round(probs @ values, 1)),
    }


def correlations(rows: Sequence[dict[str, Any]], kind: str) -> dict[str, float | int]:
    """Per-document Spearman/Kendall of `kind` vs human (mean over documents) and pooled."""
    from scipy.stats import kendalltau, spearmanr

    by_doc: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["human"] is not None and math.isfinite(r[kind]):
            by_doc.setdefault(r["doc_id"], []).append(r)
    rhos, taus = [], []
    for doc_rows in by_doc.values():
        if len(doc_rows) >= 2:
            rho, tau = rank_correlations(
                np.array([[r[kind] for r in doc_rows]]), np.array([r["human"] for r in doc_rows])
            )
            rhos.append(float(rho[0]))
            taus.append(float(tau[0]))
    x = np.array([r[kind] for rs in by_doc.values() for r in rs])
    h = np.array([r["human"] for rs in by_doc.values() for r in rs])
    pooled = x.size >= 2 and np.ptp(x) > 0 and np.ptp(h) > 0
    return {
        "spearman": float(np.mean(rhos)) if rhos else math.nan,
        "kendall": float(np.mean(taus)) if taus else math.nan,
        "spearman_whole": float(spearmanr(x, h)[0]) if pooled else math.nan,
        "kendall_whole": float(kendalltau(x, h)[0]) if pooled else math.nan,
        "n_docs": len(rhos),
    }


def run_pointwise(
    judge: Judge,
    docs: Sequence[Document],
    *,
    task: str,
    aspect: str,
    out_dir: str | Path,
    instruction: str | None = None,
    max_candidates: int | None = None,
    tracker: Tracker | None = None,
    progress: bool = False,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Score every summary, write scores.jsonl and results.json (Spearman per kind), log them."""
    inner = innermost(judge)
    labels = getattr(getattr(inner, "answers", None), "labels", None) or getattr(inner, "labels", None)
    if labels is not None and tuple(labels) != DIGITS:
        raise ConfigError(
            f"a pointwise judge reads the digits {list(DIGITS)}; this judge reads {list(labels)}"
        )
    requests = requests_for(docs, aspect, instruction, max_candidates)
    if not requests:
        raise DataError("no summaries to score")
    human = {(d.id, c.id): c.scores.get(aspect) for d in docs for c in d.candidates}
    rows = []
    for req, s in zip(requests, score(judge, requests, progress, desc="scoring")):
        probs = digit_probs(dict(s.token_logprobs))
        rows.append(
            {
                "doc_id": req.doc_id,
                "cand_id": req.a_id,
                "human": human[(req.doc_id, req.a_id)],
                "digit_probs": None if probs is None else probs.tolist(),
                **scores_of(probs),
                "flags": list(s.flags),
            }
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(out / "scores.jsonl", rows)
    results = {
        "experiment": "pointwise",
        "task": task,
        "aspect": aspect,
        "judge": judge.identity,
        "numerics": getattr(judge, "numerics", None),
        **dict(extra or {}),
        "instruction": instruction,
        "n_docs": len(docs),
        "documents_sha256": document_fingerprints(docs),
        "n_scored": len(rows),
        "n_unread": sum(1 for r in rows if r["digit_probs"] is None),
        "metrics": {k: correlations(rows, k) for k in KINDS},
    }
    results = write_results(out / "results.json", results)
    if tracker is not None:
        tracker.summary({f"{k}/{m}": v for k, ms in results["metrics"].items() for m, v in ms.items()})
    print(
        f"pointwise {task}/{aspect}: "
        + ", ".join(f"{k} Spearman {results['metrics'][k]['spearman']:.3f}" for k in KINDS),
        flush=True,
    )
    return results
