"""report.html: one self-contained page per run directory (inline CSS, script and pictures; no
network), beside card.md.

    write_report(run_dir, docs=docs, view=judge_view(judge))     # the run context, at the end of a run
    harness-report RUN_DIR                                          # any run, old ones included

The page holds the run's header, each judged set's card, pictures and metrics with intervals, the
experiment's own section (ZEPO candidates, A-BB claim/noise/verdict, pointwise scores) and a table
of every pair. The pairs travel as one JSON block that report.js draws a page at a time, so a
24,000-pair run stays a few MB and opens in seconds (docs/report.md has the measurement).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from harness.files import jsonable, write_text_atomic
from harness.judging import MIN_ANSWER_MASS
from harness.records import Document
from harness.report import sections
from harness.report.pairs import documents_blob, pair_table
from harness.report.prompt import ChatView, plan
from harness.report.sections import esc
from harness.report.sets import JudgedSet, RunFiles, read_run
from harness.report.views import DOCUMENTS_HTML, sweep_link, sweep_of, warnings_section

REPORT = "report.html"
"""The page's file name, in the run directory."""


def asset(name: str) -> str:
    """report.js / report.css, shipped inside the package."""
    return resources.files("harness.report").joinpath(name).read_text(encoding="utf-8")


def script_json(obj: Any) -> str:
    """JSON safe inside <script>: no '<' survives, so no '</script>' or '<!--' can end the block."""
    return json.dumps(jsonable(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":")).replace(
        "<", "\\u003c"
    )


def set_payload(
    s: JudgedSet, docs: Mapping[str, Document], view: ChatView | None, threshold: float
) -> dict[str, Any]:
    """One judged set for report.js: its rows and how to show each pair's prompt."""
    table = pair_table(s.judgments, threshold)
    prompt: dict[str, Any] = {"skeletons": None, "exact": {}, "note": ""}
    known = all(d in docs for d in table.doc_ids)
    if not s.instruction:
        prompt["note"] = "the instruction of this set is not recorded: prompts are not shown"
    elif not known:
        prompt["note"] = "the documents' texts are not available: prompts are not shown"
    elif view is None:
        prompt["note"] = (
            "the judge's chat wrapping was not given to this page: prompts are not shown; "
            "harness-report RUN_DIR rebuilds it from config.json"
        )
    else:
        family = s.family or "summarization"
        got = plan(view, s.instruction, family, docs, [(j.doc_id, j.a_id, j.b_id) for j in s.judgments])
        prompt = {"skeletons": got.skeletons, "exact": got.exact, "note": got.note}
    title = s.name + (f" [{s.documents}]" if s.documents else "")
    return {
        "title": f"{title}: {table.counts['rows']} pairs",
        "doc_ids": table.doc_ids,
        "cands": table.cands,
        "rows": table.rows,
        "counts": table.counts,
        "prompt": prompt,
        "lp_keys": table.lp_keys,
        "lps": table.logprobs,
    }


def payload(
    run: RunFiles, docs: Mapping[str, Document], view: ChatView | None, threshold: float = MIN_ANSWER_MASS
) -> dict[str, Any]:
    family = run.results.get("family") or (run.config.get("task") or {}).get("family")
    sets = []
    for s in run.sets:
        s.family = family
        sets.append(set_payload(s, docs, view, threshold))
    used: dict[str, set[str]] = {}
    for s in run.sets:
        for j in s.judgments:
            used.setdefault(j.doc_id, set()).update((j.a_id, j.b_id))
    return {
        "threshold": threshold,
        "docs": documents_blob(docs, {d: sorted(c) for d, c in used.items()}),
        "sets": sets,
    }


PAIRS_HTML = """<h2 id='pairs'>pairs</h2>
<p class='note'>One row per pair of candidates i, j of a document (i listed first): P(A) with i shown as A and with
j shown as A, side by side; the human scores or gold label (humans' preference in brackets; "no gold label" where
the pair has none); the decision in each order; each order's answer mass (threshold {threshold}); flags with
their values. A pair <b>flips with the order</b>
when the same position wins both times (sign(P(A|i,j) - 0.5) differs from sign(0.5 - P(A|j,i)), the order
consistency's definition); it <b>disagrees with humans</b> when (P(A|i,j) + 1 - P(A|j,i)) / 2 picks the candidate
humans rank lower, and its <b>confidence</b> is how far that is from 0.5. <b>find</b>: ids match exactly
(every word must be the document's or a candidate's id: "doc-1" is not "doc-10"); text matches the words as typed,
case ignored, anywhere in the pair's prompts: the source, the context, both candidates' texts and the
instruction. Press + to see both texts, the source, the answer tokens' log-probs and the exact prompts.</p>
<div class='controls'>
<label>set <select id='set'></select></label>
<span id='tags'></span>
<label>sort <select id='sort'><option value='doc'>document order</option>
<option value='disagree'>most confident disagreement with humans</option>
<option value='gap'>largest order gap |P(A|i,j) + P(A|j,i) - 1|</option>
<option value='mass'>lowest answer mass</option><option value='p_a'>highest P(A|i,j)</option></select></label>
<label>find <input id='query' type='search' placeholder='an id, or words of a text'></label>
<label>in <select id='find-in'><option value='any'>ids (exact) or texts</option><option value='id'>ids, exact</option>
<option value='text'>texts and prompts</option></select></label>
<label>rows <select id='size'><option>25</option><option selected>50</option><option>200</option>
<option>1000</option></select></label>
<button id='prev' type='button'>previous</button><button id='next' type='button'>next</button>
<span id='pairs-status'></span></div>
<p class='note'>prompts: <span id='pairs-note'></span></p>
<div class='wide'><table id='pairs-table'><colgroup><col class='c-doc'><col class='c-id'><col class='c-id'>
<col class='c-p'><col class='c-p'><col class='c-humans'><col class='c-chosen'><col class='c-mass'><col class='c-flags'>
</colgroup><thead><tr><th>document</th><th>cand&shy;idate i</th><th>cand&shy;idate j</th>
<th class='num'>P(A), i as A</th><th class='num'>P(A), j as A</th><th>humans</th><th>chosen (i,j | j,i)</th>
<th class='num'>answer mass (i,j | j,i)</th><th>flags</th></tr></thead>
<tbody id='pairs-body'></tbody></table></div>
<noscript><p class='warn'>The pair table needs JavaScript; the numbers are in judgments.jsonl.</p></noscript>"""


def experiment_section(run: RunFiles, docs: Mapping[str, Document]) -> str:
    kind = run.experiment
    if kind.startswith("zepo") and (run.path / "history.jsonl").is_file():
        return sections.zepo_section(run)
    if kind.startswith("abb") or (run.path / "abb.json").is_file():
        return sections.abb_section(run)
    if kind == "pointwise" or (run.path / "scores.jsonl").is_file():
        return sections.pointwise_section(run, docs)
    return ""


def render(
    run: RunFiles,
    docs: Mapping[str, Document],
    view: ChatView | None,
    texts_note: str | None = None,
    sweep: Path | None = None,
    index_coming: bool = False,
) -> str:
    """The whole page; `sweep`: the sweep directory the run is a job of (its index is linked;
    `index_coming`: the caller writes that index next)."""
    data = payload(run, docs, view)
    prompt_note = next((s["prompt"]["note"] for s in data["sets"] if s["prompt"]["note"]), None)
    title = sections.title(run)
    sets = "".join(sections.set_section(s, k) for k, s in enumerate(run.sets))
    nav = [("header", "run"), ("warnings", "warnings")]
    extra = experiment_section(run, docs)
    body = [
        f"<h1 id='header'>{esc(title)}</h1>",
        sections.header(run, prompt_note, texts_note),
        warnings_section(run.path),
    ]
    if extra:
        nav.append((extra.split("id='", 1)[1].split("'", 1)[0], "experiment"))
        body.append(extra)
    if run.sets:
        nav += [("cards", "report cards"), ("documents", "documents"), ("pairs", "pairs")]
        body += [
            "<h2 id='cards'>report cards</h2>",
            sets,
            DOCUMENTS_HTML,
            PAIRS_HTML.format(threshold=data["threshold"]),
        ]
    links = " ".join(f"<a href='#{a}'>{esc(t)}</a>" for a, t in nav)
    up = sweep_link(run.path, sweep, index_coming)
    links = f"{up} {links}" if up else links
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{asset('report.css')}</style></head><body>"
        f"<nav>{links}</nav>{''.join(body)}"
        f"<script type='application/json' id='report-data'>{script_json(data)}</script>"
        f"<script>{asset('report.js')}\n{asset('documents.js')}</script></body></html>\n"
    )


def write_report(
    run_dir: str | Path,
    docs: Sequence[Document] | None = None,
    view: ChatView | None = None,
    texts_note: str | None = None,
    sweep: str | Path | None = None,
) -> Path:
    """report.html in `run_dir` from its files; `docs` give the candidates' texts, `view` the judge's
    chat wrapping (without them the page says what it cannot show, in `texts_note`); `sweep`: the
    sweep directory it is a job of, whose index.html the caller writes next (default: the nearest
    folder above with a multirun.yaml, its index said missing when it is)."""
    run = read_run(run_dir)
    by_id = {d.id: d for d in docs or ()}
    if docs is None and texts_note is None:
        texts_note = "the documents were not loaded: candidate texts and prompts are not shown"
    out = Path(run_dir) / REPORT
    found = Path(sweep) if sweep is not None else sweep_of(Path(run_dir))
    write_text_atomic(out, render(run, by_id, view, texts_note, found, index_coming=sweep is not None))
    return out
