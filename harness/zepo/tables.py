"""The sensitivity study's printed tables (summary.md) and its W&B summary: Figure 3's rho with its
interval, each instruction's metrics and each paraphrase minus the reference, as sentences."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from harness.metrics.interval import Interval, sentence
from harness.metrics.settings import MetricsSettings
from harness.results import RunResults
from harness.zepo.figure3 import HUMAN, MODES, OBJECTIVES

SAID = {
    "spearman": "win-rate Spearman",
    "spearman_pairs": "PairS Spearman",
    "a_rate": "A-rate",
    "fairness": "fairness",
}
"""The differences printed as sentences (raw; PairS Spearman also permutation-debiased)."""


def figure3_summary(f3: Mapping[str, Any], key: str) -> dict[str, float]:
    """W&B summary: figure3/<variant>/<objective> (rho across instructions with the study's
    Spearman) and its _lo/_hi."""
    out: dict[str, float] = {}
    for mode, per in ((m, f3[key][m]) for m in MODES):
        for name, e in per.items():
            out[f"figure3/{mode}/{name}"] = e["rho"]
            if e["interval"] is not None:
                out[f"figure3/{mode}/{name}_lo"], out[f"figure3/{mode}/{name}_hi"] = e["interval"]
    return out


def versus_summary(versus_rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """W&B summary: versus_reference/<index>/<variant>/<metric> and its _lo/_hi."""
    out: dict[str, float] = {}
    for r in versus_rows:
        for mode in MODES:
            for k, d in r[mode].items():
                name = f"versus_reference/{r['index']:03d}/{mode}/{k}"
                out[name] = d["diff"]
                if d["interval"] is not None:
                    out[f"{name}_lo"], out[f"{name}_hi"] = d["interval"]
    return out


def summary_table(results: RunResults) -> str:
    """summary.md: the objectives' rho table, then Figure 3's and each instruction's lines."""
    which = "PairS Spearman" if results.get("ranking") == "spearman_pairs" else "win-rate Spearman"
    lines = [
        f"sensitivity {results.task}/{results.aspect}: {results['n_instructions']} instructions, "
        f"{results.n_docs} docs",
        f"| objective | Spearman rho (p) with the {which}, raw | debiased | Pearson r raw |",
        "|---|---|---|---|",
    ]
    a = results["analysis"]
    for k in OBJECTIVES:
        raw, deb = a["none"]["spearman_with_spearman"][k], a["permutation"]["spearman_with_spearman"][k]
        lines.append(
            f"| {k} | {raw['rho']:.3f} ({raw['p']:.3g}) | {deb['rho']:.3f} ({deb['p']:.3g}) "
            f"| {a['none']['pearson_with_spearman'][k]:.3f} |"
        )
    lo, hi = a["none"]["spearman_min"], a["none"]["spearman_max"]
    lines.append(
        f"{which} range over instructions: raw {lo:.3f}..{hi:.3f}, "
        f"debiased {a['permutation']['spearman_min']:.3f}..{a['permutation']['spearman_max']:.3f}"
    )
    return "\n".join(lines + figure3_lines(results) + instruction_lines(results))


def figure3_lines(results: Mapping[str, Any]) -> list[str]:
    """Figure 3's rho with its interval, one sentence per objective (raw and debiased, against the
    study's Spearman; fairness also against the other one), and the candidate order's human share."""
    f3 = results.get("figure3")
    if not f3:
        return []
    key = results.get("ranking", "spearman_pairs")
    how = (
        f"{f3['level']:.0%} interval: {f3['method']}; each sentence says over how many documents"
        if f3["rounds"]
        else "no intervals (metrics.bootstrap=0)"
    )
    lines = [
        "",
        f"Figure 3: Spearman rho across instructions of each objective with their Spearman against humans "
        f"(leaky: scored on the documents judged; {how}):",
    ]
    for mode in MODES:
        lines += [f"- {e['sentence']}" for e in f3[key][mode].values()]
    other = next(k for k in HUMAN if k != key)
    lines += [f"- {f3[other][mode]['fairness']['sentence']}" for mode in MODES]
    order = results.get("candidate_order")
    if order:
        h = order["humans_prefer_earlier"]
        share = "n/a" if h["share_earlier"] is None else f"{h['share_earlier']:.1%}"
        lines.append(
            f"Candidate order: {order['how']}; humans score the earlier-listed candidate higher in {share} "
            f"of the {h['earlier_higher'] + h['later_higher']} untied pairs i < j ({h['tied']} tied, "
            f"{h['unscored']} unscored)"
        )
    return lines


def instruction_lines(results: RunResults) -> list[str]:
    """Each instruction's raw metrics with their intervals, then each paraphrase minus the
    reference as sentences (paired over the same documents)."""
    meta = results.interval or {}
    how = (
        f"[lo, hi]: {meta['level']:.0%}, {meta['method']}, over the {meta['n_documents']} documents "
        f"(none below {meta['min_documents']})"
        if meta.get("method")
        else "no intervals (metrics.bootstrap=0)"
    )
    ref = results.get("reference") or {}
    lines = [
        "",
        f"Each instruction, raw, on the same {results.n_docs} documents (leaky: the documents it is "
        f"scored on; {how}); 0 is the reference, {ref.get('what', 'instruction 0')}:",
        "| # | A-rate | fairness | win-rate Spearman | PairS Spearman |",
        "|---|---|---|---|---|",
    ]
    for r in results.get("instructions") or []:
        m, iv = r["metrics"]["none"], (r.get("intervals") or {}).get("none") or {}
        cells = " | ".join(_iv(m, iv, k) for k in ("a_rate", "fairness", "spearman", "spearman_pairs"))
        lines.append(f"| {r['index']} | {cells} |")
    said = []
    for r in results.get("versus_reference") or []:
        for mode in MODES:
            for k in SAID if mode == "none" else ("spearman_pairs",):
                d = r[mode].get(k)
                if d is not None:
                    debiased = "" if mode == "none" else f" ({mode}-debiased)"
                    label = (
                        f"instruction {r['index']} - {ref.get('what', 'instruction 0')}: {SAID[k]}{debiased}"
                    )
                    iv = Interval.from_record(d)
                    said.append(
                        "- " + sentence(label, d["diff"], iv, float(meta.get("level", MetricsSettings.level)))
                    )
    if said:
        lines += [
            "",
            f"Each paraphrase minus {ref.get('what', 'instruction 0')}, paired on the same documents:",
            *said,
        ]
    return lines


def _iv(m: Mapping[str, Any], iv: Mapping[str, Any], key: str) -> str:
    x = m.get(key)
    value = "nan" if x is None or not math.isfinite(float(x)) else f"{float(x):.3f}"
    bounds = iv.get(key)
    return value + (f" [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else "")
