"""Parts of report.html around the pair table: the run's warnings (read back from run.log), the
documents view's frame (documents.js fills it from the pair rows), and the link from a sweep job's
page back to its sweep's index.html.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from harness.report.runlog import RUN_LOG, read_warnings
from harness.report.sections import esc

SWEEP_INDEX = "index.html"
"""A sweep's index page (harness.runtime.sweep_index), in the sweep directory."""
SWEEP_DEPTH = 3
"""How far above a run directory its sweep directory (the folder with Hydra's multirun.yaml) is
looked for: a job is <sweep>/<num>, a merged run of shards <sweep>/merged/<name>."""


def sweep_of(run_dir: Path) -> Path | None:
    """The sweep directory a run directory is a job of, within SWEEP_DEPTH folders above it."""
    for parent in list(Path(run_dir).resolve().parents)[:SWEEP_DEPTH]:
        if (parent / "multirun.yaml").is_file():
            return parent
    return None


def sweep_link(run_dir: Path, sweep: Path | None, index_coming: bool = False) -> str:
    """<a> to the sweep's index.html, relative to the page (../index.html) and URL-encoded segment by
    segment: the page and its sweep move together (a copied folder, a cluster's disk seen from a
    laptop). Empty when the run is no sweep's job. `index_coming`: the caller writes the index next
    (harness-report SWEEP_DIR); otherwise a missing index is said."""
    if sweep is None:
        return ""
    rel = Path(os.path.relpath(Path(sweep).resolve() / SWEEP_INDEX, Path(run_dir).resolve()))
    href = "/".join(quote(part) for part in rel.parts)
    missing = (
        ""
        if index_coming or (Path(sweep) / SWEEP_INDEX).is_file()
        else f" (no {SWEEP_INDEX} there when this page was written: harness-report SWEEP_DIR writes it)"
    )
    return f"<a id='sweep-index' href='{esc(href)}'>sweep index</a>{esc(missing)}"


def warnings_section(run_dir: Path) -> str:
    """The run's warnings as the console printed them, each once with its count."""
    got = read_warnings(run_dir)
    if got.missing:
        body = f"<p class='note'>{esc(got.missing)}</p>"
    elif not got.warnings:
        body = f"<p class='note'>none: {RUN_LOG} holds no warning or error</p>"
    else:
        items = "".join(
            f"<li class='warning' data-level='{esc(w.level)}'><span class='level'>{esc(w.level.lower())}</span> "
            f"<span class='mono'>{esc(w.logger)}</span>"
            + (
                f" <span class='note'>({w.count} times, first at {esc(w.first)})</span>"
                if w.count > 1
                else ""
            )
            + f"<div class='message'>{esc(w.message)}</div></li>"
            for w in got.warnings
        )
        more = (
            f"<p class='note'>{got.more} more distinct warning{'s' if got.more != 1 else ''} in {RUN_LOG}</p>"
            if got.more
            else ""
        )
        body = f"<ul class='warnings'>{items}</ul>{more}"
    n = len(got.warnings) + got.more
    return (
        f"<h2 id='warnings'>warnings{f' ({n})' if n else ''}</h2>"
        f"<p class='note'>What the run's console warned, read from its {RUN_LOG} (WARNING and ERROR "
        f"records).</p>{body}"
    )


DOCUMENTS_HTML = """<h2 id='documents'>documents</h2>
<p class='note'>Per document, its candidates ranked by the judge's <b>win rate</b> (the mean P(A) over the
pairs where the candidate is shown as A: the preference matrix's row mean, what <i>spearman</i> ranks),
each with its human score and human rank beside it, and the document's Spearman and Kendall tau-b
between win rates and human scores (0 where undefined, as ZEPO counts it). <i>spearman</i> is the mean
of these over the documents with two or more human-scored candidates; <i>spearman_whole</i> instead pools
every candidate of every document into one correlation. Computed in this page from the pair rows below.</p>
<div class='controls'>
<label>set <select id='doc-set'></select></label>
<label>sort <select id='doc-sort'><option value='doc'>document order</option>
<option value='low'>lowest Spearman first</option><option value='high'>highest Spearman first</option></select></label>
<button id='doc-prev' type='button'>previous</button><button id='doc-next' type='button'>next</button>
<span id='docs-status'></span></div>
<p id='docs-summary'></p>
<div class='wide'><table id='docs-table'><colgroup><col class='c-doc'><col class='c-r'><col class='c-r'><col>
</colgroup><thead><tr><th>document</th><th class='num'>Spearman</th>
<th class='num'>Kendall</th><th>candidates by the judge's win rate</th></tr></thead>
<tbody id='docs-body'></tbody></table></div>"""
