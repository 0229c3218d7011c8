"""The report page's HTML sections drawn on the server side: the header, a judged set's card,
pictures and metrics, and what only some experiments have (ZEPO's candidates, A-BB's claim, noise
and verdict, pointwise scores). Every data text passes through `esc`.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.files import read_text
from harness.judges.cpu import numerics_line
from harness.metrics.interval import Interval, described, shown, tidy
from harness.report.markdown import markdown_html
from harness.report.sets import JudgedSet, RunFiles, served_from_cache

AGREEMENT = (
    "spearman",
    "kendall",
    "spearman_pairs",
    "kendall_pairs",
    "spearman_whole",
    "kendall_whole",
    "accuracy",
)
"""Metrics of agreement with humans, shown first."""
DEFINITIONS = {
    "spearman": "mean over documents of each document's Spearman between the candidates' win rates and "
    "their human scores (the documents view shows each one)",
    "kendall": "as spearman, with Kendall's tau-b",
    "spearman_whole": "pooled over documents: ONE Spearman of (win rate, human score) over every candidate "
    "of every document together, not a mean of per-document ones; it also counts telling documents apart "
    "(one document's candidates all scored higher than another's), so it can be high while spearman is "
    "near 0",
    "kendall_whole": "as spearman_whole (pooled over documents), with Kendall's tau-b",
}
"""What a metric means, shown under its name where the page lists it (docs/report_card.md)."""
CAPTIONS = {
    "reliability": "reliability: share of pairs humans prefer A vs P(A), per bin",
    "p_a_by_order": "P(A) with the candidates as listed and swapped",
    "answer_mass": "answer-token mass per pair (log scale), the threshold dashed",
}


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def plain(x: Any, digits: int = 3) -> str:
    """A value as text (not yet escaped): "–" for none, 3 decimals, 3 significant digits below 1e-3."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    if isinstance(x, int):
        return str(x)
    x = tidy(x)  # an exact 0's rounding residue (-9.25e-18) is 0
    return f"{x:.{digits}g}" if x != 0 and abs(x) < 1e-3 else f"{x:.{digits}f}"


def num(x: Any, digits: int = 3) -> str:
    return esc(plain(x, digits))


def kv_table(rows: Sequence[tuple[str, str]]) -> str:
    """Rows of (label, already-escaped HTML)."""
    return (
        "<table class='kv'>"
        + "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
        + "</table>"
    )


def grid(columns: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] | None = None) -> str:
    """A table of already-escaped cells."""
    numeric = numeric or [False] * len(columns)
    head = "".join(f"<th{' class=num' if n else ''}>{esc(c)}</th>" for c, n in zip(columns, numeric))
    body = "".join(
        "<tr>" + "".join(f"<td{' class=num' if n else ''}>{c}</td>" for c, n in zip(r, numeric)) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def expandable(text: str | None, preview: int = 90) -> str:
    """A long text as a <details> whose summary is its start."""
    if text is None:
        return "–"
    short = text if len(text) <= preview else text[:preview] + "…"
    return f"<details><summary>{esc(short)}</summary><div class='cand-text'>{esc(text)}</div></details>"


def picture(path: Path) -> str:
    """An <img> with the PNG inline (data: URI), so the page needs no other file."""
    return f"<img alt='{esc(path.name)}' src='data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}'>"


def title(run: RunFiles) -> str:
    """ "judge: summeval coherence, tiny-llama on hf" (what the run was, in one line)."""
    task = run.results.get("task") or run.setting("task", "name")
    aspect = run.results.get("aspect") or run.setting("task", "aspect")
    model = run.setting("model", "name") or run.results.get("model")
    backend = run.setting("backend", "name")
    what = " ".join(str(x) for x in (task, aspect) if x)
    who = f"{model} on {backend}" if model and backend else (model or backend or "")
    return f"{run.experiment}: " + ", ".join(x for x in (what, who) if x)


def header(run: RunFiles, prompt_note: str | None, texts_note: str | None) -> str:
    r = run.results
    n_docs = r.get("n_docs") or len({j.doc_id for s in run.sets for j in s.judgments}) or None
    asked = run.setting("task", "docs")
    docs = [
        f"{n_docs} document{'' if n_docs == 1 else 's'}"
        if n_docs
        else (f"task.docs={asked} (the run records no count)" if asked is not None else "not recorded")
    ]
    docs += [f"{esc(s.name)}: {esc(s.documents)}" for s in run.sets if s.documents]
    rows = [
        ("run directory", f"<span class='mono'>{esc(run.path.resolve())}</span>"),
        ("experiment", esc(run.experiment)),
        (
            "task",
            esc(
                " / ".join(
                    str(x)
                    for x in (
                        r.get("task") or run.setting("task", "name"),
                        r.get("aspect") or run.setting("task", "aspect"),
                        r.get("family"),
                    )
                    if x
                )
            ),
        ),
        ("judge identity", f"<span class='mono'>{esc(r.get('judge'))}</span>"),
        ("numerics", esc(numerics_line(r.get("numerics")))),
        ("documents", "<br>".join(docs)),
        ("served from the cache", esc(served_from_cache(r, run.merge))),
        ("command", f"<span class='mono'>python -m harness.run {esc(' '.join(run.overrides))}</span>"),
    ]
    if isinstance(r.get("instruction"), str):
        rows.append(("instruction", esc(r["instruction"])))
    if prompt_note:
        rows.append(("prompts shown", esc(prompt_note)))
    if texts_note:
        rows.append(("texts", f"<span class='warn'>{esc(texts_note)}</span>"))
    return kv_table(rows)


def metrics_table(
    metrics: Mapping[str, Any] | None,
    interval: Callable[[str, str], Interval | None] | None = None,
    level: float | None = None,
) -> str:
    """variant x metric with each value's interval "0.62 [0.55, 0.70]" or why it has none "0.48 (too
    few documents to tell)", and per metric what its intervals rest on ("6 documents, 95%
    t-jackknife": harness.metrics.interval.described); agreement with humans first. `interval`:
    (variant, metric) -> the Interval the run records (JudgedSet.interval); None: no intervals."""
    if not metrics:
        return "<p class='note'>no metrics recorded for this set</p>"
    variants = [v for v in metrics if isinstance(metrics[v], Mapping)]
    keys = list(dict.fromkeys(k for v in variants for k in metrics[v]))
    keys = [k for k in AGREEMENT if k in keys] + [k for k in keys if k not in AGREEMENT]
    empty = [k for k in keys if all(_missing(metrics[v].get(k)) for v in variants)]
    keys = [k for k in keys if k not in empty]
    ivs = {
        (v, k): interval(v, k) if interval is not None and k in metrics[v] else None
        for v in variants
        for k in keys
    }
    with_ivs = any(iv is not None for iv in ivs.values())
    rows = [
        [metric_name(k)]
        + [value_cell(shown(metrics[v].get(k), ivs[v, k], plain, basis=False)) for v in variants]
        + (
            [esc(described([(ivs[v, k], level) for v in variants if ivs[v, k] is not None]) or "–")]
            if with_ivs
            else []
        )
        for k in keys
    ]
    table = grid(
        ["metric", *variants, *(["intervals rest on"] if with_ivs else [])],
        rows,
        [False] + [True] * len(variants) + ([False] if with_ivs else []),
    ) + (f"<p class='note'>{esc(not_applicable(empty, metrics.get('none') or {}))}</p>" if empty else "")
    return f"<div class='wide metrics'>{table}</div>"


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def gold_only(none: Mapping[str, Any]) -> bool:
    """Gold-label data without human scores: labelled pairs, no Spearman (harness.metrics.card)."""
    return _missing(none.get("spearman")) and bool(none.get("n_calibration"))


def not_applicable(keys: Sequence[str], none: Mapping[str, Any]) -> str:
    """One line naming the metrics a set has no value for, and why."""
    why = (
        "the data has gold labels and no human scores: its agreement is accuracy against the gold label"
        if gold_only(none)
        else "no value in any variant, e.g. fewer than two human-scored candidates per document"
    )
    return f"not applicable ({why}): {', '.join(keys)}"


def metric_name(key: str) -> str:
    """A metric's name, whether it is agreement with humans, and its definition where it has one."""
    about = DEFINITIONS.get(key)
    return (
        f"<span class='metric'>{esc(key)}</span>"
        + (" <span class='note'>(agreement with humans)</span>" if key in AGREEMENT else "")
        + (f"<div class='define'>{esc(about)}</div>" if about else "")
    )


def value_cell(text: str) -> str:
    """ "0.62 [0.55, 0.70] (why)": the value and its interval kept on one line, the reason free to wrap."""
    value, sep, why = text.partition(" (")
    return f"<span class='value'>{esc(value)}</span>" + (
        f" <span class='why'>({esc(why)}</span>" if sep else ""
    )


def agreement_line(s: JudgedSet) -> str:
    """Agreement with humans in one line (raw judgments), each value with its interval or why it has
    none, and what the intervals rest on."""
    none = (s.metrics or {}).get("none") or {}
    keys = [
        k
        for k in ("spearman", "kendall", "spearman_pairs", "kendall_pairs", "accuracy")
        if k in none and not _missing(none[k])
    ]
    ivs = {k: s.interval("none", k) for k in keys}
    parts = [f"{k} {shown(none[k], ivs[k], plain, basis=False)}" for k in keys]
    if gold_only(none) and parts:
        parts[-1] += " against the gold label (no human scores: no Spearman or Kendall)"
    rests = [(iv, s.level) for iv in ivs.values() if iv is not None]
    return (
        "agreement with humans: "
        + ("; ".join(parts) if parts else "not recorded")
        + (f" (intervals: {described(rests)})" if rests else "")
    )


def set_section(s: JudgedSet, k: int) -> str:
    pics = "".join(
        f"<figure>{picture(p)}<figcaption>{esc(CAPTIONS.get(kind, kind))}</figcaption></figure>"
        for kind, p in s.pictures.items()
    )
    doc_line = f" <span class='note'>[{esc(s.documents)}]</span>" if s.documents else ""
    cells = [
        (iv, s.level)
        for v, group in (s.metrics or {}).items()
        if isinstance(group, Mapping)
        for iv in (s.interval(v, key) for key in group)
        if iv is not None
    ]
    rests = f"intervals: {described(cells)}" if cells else "no intervals recorded"
    return (
        f"<section class='set' id='set-{k}'><h3>judged set {esc(s.name)}{doc_line}</h3>"
        + (f"<p><b>instruction:</b> {esc(s.instruction)}</p>" if s.instruction else "")
        + f"<p>{esc(agreement_line(s))}</p>"
        + (f"<pre class='card'>{esc(s.card)}</pre>" if s.card else "<p class='note'>no card.md</p>")
        + f"<div class='pics'>{pics}</div>"
        + f"<details><summary>every metric, each variant ({esc(rests)})</summary>"
        f"{metrics_table(s.metrics, s.interval, s.level)}</details></section>"
    )


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in read_text(path).splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            out.append(row)
    return out


def zepo_section(run: RunFiles) -> str:
    """The search's candidates (fairness, objectives, held-out Spearman) and the before/after table."""
    best = (run.results.get("best") or {}).get("index")
    rows = []
    for c in _jsonl(run.path / "history.jsonl"):
        o = c.get("objectives") or {}
        rows.append(
            [
                num(c.get("index")),
                num(c.get("epoch")),
                num(c.get("parent")),
                num(o.get("fairness")),
                num(o.get("fairness_prob")),
                num(o.get("confidence")),
                num(c.get("a_rate")),
                num(c.get("spearman_heldout")),
                "best" if c.get("index") == best else "",
                expandable(c.get("text")),
            ]
        )
    summary = run.path / "summary.md"
    return (
        "<h2 id='zepo'>ZEPO search</h2>"
        + (f"<div class='summary-md'>{markdown_html(read_text(summary))}</div>" if summary.is_file() else "")
        + "<h3>candidates (search documents; held-out Spearman on the documents the search never saw)</h3>"
        + grid(
            [
                "index",
                "epoch",
                "parent",
                "fairness",
                "fairness (prob)",
                "confidence",
                "A-rate",
                "held-out Spearman",
                "chosen",
                "instruction",
            ],
            rows,
            [True] * 8 + [False, False],
        )
    )


def abb_section(run: RunFiles) -> str:
    """A-BB: the claim, the noise and the verdict (abb.json)."""
    path = run.path / "abb.json"
    a = run.results if not path.is_file() else _json_or(path)
    g, v, mu = a.get("guarantee") or {}, a.get("verification") or {}, a.get("mu") or {}
    delta = a.get("delta")
    delta = (
        f"{num(delta.get('total'))} ("
        + ", ".join(f"{k} {num(x)}" for k, x in delta.items() if k != "total")
        + ")"
        if isinstance(delta, Mapping)
        else num(delta)
    )
    rows = [
        ("claim", esc(g.get("statement") or g.get("status"))),
        ("status", esc(g.get("status"))),
        (
            "noise",
            esc(
                f"sigma {num(a.get('sigma'))} ({a.get('sigma_mode')}), alpha {num(a.get('alpha'))}, "
                f"mu {mu.get('value')} ({mu.get('mode')}); tau {num(a.get('tau'))}, "
                f"delta {delta}; {g.get('noise_note') or ''}"
            ),
        ),
        ("verdict", f"<b>{esc(v.get('verdict_text') or v.get('verdict'))}</b>: {esc(v.get('checked'))}"),
        ("what the check could show", esc(v.get("could_show"))),
        ("in one sentence", esc(a.get("summary"))),
    ]
    return "<h2 id='abb'>A-BB bounded scores</h2>" + kv_table(rows)


def _json_or(path: Path) -> dict[str, Any]:
    try:
        got = json.loads(read_text(path))
    except (json.JSONDecodeError, OSError):
        return {}
    return got if isinstance(got, dict) else {}


def pointwise_section(run: RunFiles, docs: Mapping[str, Any]) -> str:
    """Table 1's Scoring and G-Eval: the metrics and every scored candidate."""
    rows = []
    for r in _jsonl(run.path / "scores.jsonl"):
        doc = docs.get(str(r.get("doc_id")))
        cand = next((c for c in doc.candidates if c.id == str(r.get("cand_id"))), None) if doc else None
        rows.append(
            [
                esc(r.get("doc_id")),
                esc(r.get("cand_id")),
                num(r.get("human")),
                num(r.get("scoring")),
                num(r.get("geval")),
                num(r.get("geval_official")),
                esc(", ".join(r.get("flags") or [])) or "–",
                expandable(cand.text if cand else None),
            ]
        )
    metrics = run.results.get("metrics") or {}
    return (
        "<h2 id='pointwise'>pointwise scores</h2>"
        + metrics_table(metrics, None)
        + grid(
            ["document", "candidate", "human", "scoring", "G-Eval", "G-Eval (official)", "flags", "text"],
            rows,
            [False, False, True, True, True, True, False, False],
        )
    )
