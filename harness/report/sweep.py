"""index.html of a sweep directory: one row per job (its settings, links to its report.html and
files) and the collect table (harness.runtime.collect: the same rows, metrics and intervals as
`harness-collect table`), self-contained like report.html.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.files import write_text_atomic
from harness.report.page import REPORT, asset
from harness.report.sections import esc, grid, num
from harness.runtime.collect import Table, build_table, collect_runs, find_runs, pick_metrics, varying_keys

INDEX = "index.html"


def is_sweep(root: Path) -> bool:
    """A folder of jobs (a multirun): no run's files at its top, runs below it."""
    if (root / "results.json").is_file() or (root / "judgments.jsonl").is_file():
        return False
    return (root / "multirun.yaml").is_file() or any(p != root for p in find_runs(root))


def _cell(v: Any, iv: Any) -> str:
    if isinstance(v, float) and iv is not None:
        return f"{num(v)} [{num(iv[0])}, {num(iv[1])}]"
    return num(v) if isinstance(v, int | float) and not isinstance(v, bool) else esc(v if v is not None else "–")


def table_html(table: Table) -> str:
    """collect's Table as HTML, each value with its interval where it has one."""
    ivs = table.intervals or [[None] * len(table.columns) for _ in table.rows]
    rows = [[_cell(v, iv) for v, iv in zip(row, row_iv)] for row, row_iv in zip(table.rows, ivs)]
    numeric = [any(isinstance(r[j], float) for r in table.rows) for j in range(len(table.columns))]
    caption = f"<p class='note'>{esc(table.caption)}</p>" if table.caption else ""
    return grid(table.columns, rows, numeric) + caption


def write_index(root: Path) -> Path:
    """index.html in the sweep directory (jobs without results.json are listed as unfinished)."""
    runs = collect_runs(root)
    varying, shared = varying_keys(runs)
    done = {r.path for r in runs}
    jobs = sorted({*done, *(p.parent for p in root.glob("*/overrides.json"))},
                  key=lambda p: [int(x) if x.isdigit() else math.inf for x in p.relative_to(root).parts])
    by_path = {r.path: r for r in runs}
    rows = []
    for job in jobs:
        rel = job.relative_to(root).as_posix()
        run = by_path.get(job)
        settings = ", ".join(f"{k}={v}" for k, v in (run.overrides if run else {}).items() if k in varying) or "–"
        links = [f"<a href='{esc(rel)}/{REPORT}'>report</a>" if (job / REPORT).is_file() else "no report.html"]
        links += [f"<a href='{esc(rel)}/{name}'>{name}</a>" for name in ("results.json", "card.md", "run.log")
                  if (job / name).is_file()]
        rows.append([esc(rel), esc(settings), "finished" if run else "<span class='warn'>no results.json</span>",
                     " ".join(links)])
    metrics = pick_metrics(runs, None)
    body = (f"<h1>sweep {esc(root.resolve())}</h1>"
            f"<p>{len(jobs)} job{'s' if len(jobs) != 1 else ''}, {len(runs)} finished; shared settings: "
            f"<span class='mono'>{esc(' '.join(f'{k}={v}' for k, v in shared.items()) or '–')}</span></p>"
            + grid(["job", "settings", "state", "links"], rows)
            + "<h2>collect table</h2><p class='note'>the same table as <span class='mono'>harness-collect table "
              f"{esc(root)}</span></p>" + table_html(build_table(runs, metrics, root)))
    page = ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>sweep {esc(root.name)}</title><style>{asset('report.css')}</style></head>"
            f"<body>{body}</body></html>\n")
    out = root / INDEX
    write_text_atomic(out, page)
    return out
