"""index.html of a sweep directory: one row per job (its settings, its state as its own run
directory says it, links to its report.html and files), each merged run of its shards, and the
collect table, made by the same call as `harness-collect table` (harness.runtime.collect.collect:
the same rows, cells, caption and PARTIAL line), self-contained like report.html.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

from harness.files import write_text_atomic
from harness.report.page import REPORT, asset
from harness.report.sections import esc, grid
from harness.runtime.collect import (
    Run,
    collect,
    find_runs,
    job_order,
    parse_overrides,
    partial_line,
    rel,
    varying_keys,
)
from harness.runtime.sweep import job_status, listed_jobs
from harness.runtime.table import Table, cell_texts

INDEX = "index.html"
MERGE = "merge.json"
"""A merged run's record of its shards (harness.runtime.shard): the row of a merge, not of a job."""


def is_sweep(root: Path) -> bool:
    """A folder of jobs (a multirun): no run's files at its top, runs below it."""
    if (root / "results.json").is_file() or (root / "judgments.jsonl").is_file():
        return False
    return (root / "multirun.yaml").is_file() or any(p != root for p in find_runs(root))


def table_html(table: Table) -> str:
    """collect's Table as HTML, each cell the text `harness-collect table` prints for it."""
    numeric = [any(isinstance(r[j], float) for r in table.rows) for j in range(len(table.columns))]
    rows = [[esc(c) for c in row] for row in cell_texts(table)]
    caption = f"<p class='note'>{esc(table.caption)}</p>" if table.caption else ""
    return grid(table.columns, rows, numeric) + caption


def _overrides(path: Path) -> dict[str, str]:
    try:
        got = json.loads((path / "overrides.json").read_text())
    except (OSError, ValueError):
        return {}
    return parse_overrides(got) if isinstance(got, list) else {}


def members(root: Path) -> list[tuple[str, Path | None, dict[str, str]]]:
    """(label, run directory or None, overrides) of each job multirun.yaml lists (without one: each
    folder below root with overrides.json or results.json), then every other run below root (the
    merged runs of a shard sweep)."""
    rows = [
        (rel(d, root).as_posix(), d, parse_overrides(job))
        if d is not None and d.is_dir()
        else (name, None, parse_overrides(job))
        for name, job, d in listed_jobs(root)
    ]
    seen = {d for _, d, _ in rows}
    found = {*find_runs(root), *(p.parent for p in root.glob("*/overrides.json"))} - seen - {root}
    rows += [
        (rel(p, root).as_posix(), p, _overrides(p)) for p in sorted(found, key=lambda p: job_order(p, root))
    ]
    return rows


def _state(run_dir: Path | None) -> str:
    if run_dir is not None and (run_dir / MERGE).is_file():
        return "merged run"
    status = job_status(run_dir)
    return "finished" if status == "completed" else f"<span class='warn'>{esc(status)}</span>"


def href(root: Path, run_dir: Path, name: str) -> str:
    """A link from index.html to `name` in `run_dir`: a relative path, every segment URL-encoded,
    starting with `./`, so no folder name (`javascript:...`, `https://...`, `a b#c`) is read as a
    scheme, a host or a fragment."""
    parts = [*rel(run_dir, root).parts, name]
    return esc("./" + "/".join(urllib.parse.quote(p, safe="") for p in parts))


def _links(root: Path, run_dir: Path | None) -> str:
    if run_dir is None:
        return "–"
    links = [
        f"<a href='{href(root, run_dir, REPORT)}'>report</a>"
        if (run_dir / REPORT).is_file()
        else "no report.html"
    ]
    links += [
        f"<a href='{href(root, run_dir, name)}'>{name}</a>"
        for name in ("results.json", "card.md", "run.log")
        if (run_dir / name).is_file()
    ]
    return " ".join(links)


def write_index(root: Path) -> Path:
    """index.html in the sweep directory; the collect table as `harness-collect table` makes it."""
    table = collect(root, figures=False)
    listed = members(root)
    varying, shared = varying_keys([Run(d or root, o, {}) for _, d, o in listed])
    rows = [
        [
            esc(label),
            esc(", ".join(f"{k}={v}" for k, v in o.items() if k in varying) or "–"),
            _state(d),
            _links(root, d),
        ]
        for label, d, o in listed
    ]
    jobs = [d for _, d, _ in listed if d is None or not (d / MERGE).is_file()]
    done = sum(job_status(d) == "completed" for d in jobs)
    merged = len(listed) - len(jobs)
    partial = f"<p class='warn'>{esc(partial_line(table, root))}</p>" if table.missing else ""
    body = (
        f"<h1>sweep {esc(root.resolve())}</h1>"
        f"<p>{len(jobs)} job{'s' if len(jobs) != 1 else ''}, {done} finished"
        + (f", {merged} merged run{'s' if merged != 1 else ''} of their shards" if merged else "")
        + f"; shared settings: <span class='mono'>{esc(' '.join(f'{k}={v}' for k, v in shared.items()) or '–')}"
        "</span></p>"
        + f"<div id='jobs'>{grid(['job', 'settings', 'state', 'links'], rows)}</div>"
        + "<h2>collect table</h2><p class='note'>the same table as <span class='mono'>harness-collect table "
        f"{esc(root)}</span></p>" + partial + f"<div id='collect'>{table_html(table)}</div>"
    )
    page = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>sweep {esc(root.name)}</title><style>{asset('report.css')}</style></head>"
        f"<body>{body}</body></html>\n"
    )
    out = root / INDEX
    write_text_atomic(out, page)
    return out
