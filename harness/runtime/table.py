"""A collected table (harness.runtime.collect): its rows and intervals, as markdown, as CSV (full
precision, each interval's bounds, documents and note in columns of their own) and as one bar chart
per metric with the intervals drawn as error bars. A cell whose run records why it has no interval
says so ("0.481 (too few documents to tell)"); the caption says, per column, what its intervals
are (level, method and documents) or why there are none."""

from __future__ import annotations

import csv
import io
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.figures import pyplot, save
from harness.files import csv_cell
from harness.metrics.interval import Interval, shown


@dataclass(frozen=True)
class Table:
    """A rectangular table: a header row and data rows (cells: str, number or None)."""

    columns: list[str]
    """Header cells."""
    rows: list[list[Any]]
    """Data rows, one cell per column."""
    caption: str = ""
    """One line under the table: the settings every row shares and, where runs record intervals,
    what each column's intervals are (`about`)."""
    bases: list[list[Interval | None]] | None = None
    """Parallel to `rows`: each cell's Interval as its run records it (its [lo, hi] or why it has
    none, its documents and method; harness.metrics.interval.recorded); None when no run records any."""
    missing: list[str] = field(default_factory=list)
    """The sweep's jobs (multirun.yaml) without a row, one line each: the table is partial."""
    about: list[str | None] | None = None
    """Per column: what its cells' intervals are (harness.metrics.interval.described); None for a
    column without any (the row labels)."""
    settings: str | None = None
    """The caption without `about` (a figure's title adds its own column's); None: the caption."""

    @property
    def intervals(self) -> list[list[list[float] | None]] | None:
        """Parallel to `rows`: each cell's [lo, hi] (None: no interval); None when no cell has a record."""
        if self.bases is None:
            return None
        return [[None if iv is None else iv.as_list() for iv in row] for row in self.bases]

    def noted(self, note: str) -> Table:
        """The table with `note` leading its caption and every figure's title."""
        lead = lambda text: "; ".join(x for x in (note, text) if x)  # noqa: E731
        settings = None if self.settings is None else lead(self.settings)
        return replace(self, caption=lead(self.caption), settings=settings)


def _fmt(v: Any, digits: int) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{digits}f}"
    return str(v)


def _cell(v: Any, iv: Interval | None, digits: int) -> str:
    """A value, with its interval "0.620 [0.550, 0.700]" or why it has none "0.481 (too few
    documents to tell)" where its run records one (the caption gives documents and method)."""
    if iv is None or v is None:
        return _fmt(v, digits)
    return shown(v, iv, lambda x: _fmt(x, digits), basis=False)


def _row_bases(table: Table, k: int) -> list[Interval | None]:
    return table.bases[k] if table.bases is not None else [None] * len(table.columns)


def to_markdown(table: Table, digits: int = 3) -> str:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731 - a cell containing | would split the column
    lines = [
        "| " + " | ".join(esc(c) for c in table.columns) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(table.columns))) + "|",
    ]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in cell_texts(table, digits)]
    if table.caption:
        lines += ["", table.caption]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """Full precision (repr of each float), empty cell for a missing value; a column whose runs
    record intervals is followed by "<column> lo", "<column> hi", "<column> documents" and
    "<column> note" (why there is no interval: too few documents, no spread across documents)."""
    cell = lambda v: "" if v is None else repr(v) if isinstance(v, float) else v  # noqa: E731
    with_iv = [
        j
        for j in range(len(table.columns))
        if table.bases is not None and any(row[j] is not None for row in table.bases)
    ]
    extra = ("lo", "hi", "documents", "note")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            csv_cell(x)
            for j, c in enumerate(table.columns)
            for x in ([c, *(f"{c} {e}" for e in extra)] if j in with_iv else [c])
        ]
    )
    for k, row in enumerate(table.rows):
        ivs = _row_bases(table, k)
        w.writerow(
            [
                csv_cell(x)
                for j, v in enumerate(row)
                for x in ([cell(v), *_basis_cells(ivs[j])] if j in with_iv else [cell(v)])
            ]
        )
    return buf.getvalue()


def _basis_cells(iv: Interval | None) -> list[Any]:
    if iv is None:
        return ["", "", "", ""]
    lo, hi = ("", "") if iv.bounds is None else (repr(iv.bounds[0]), repr(iv.bounds[1]))
    return [lo, hi, iv.n, iv.note or ""]


TITLE_POINTS = 8
"""Font size of a chart's title; its lines are wrapped to the figure's width (`wrap_title`)."""


def wrap_title(text: str, width_inches: float, points: float = TITLE_POINTS) -> str:
    """`text` in lines that fit `width_inches` at `points` (a character is at most ~0.6 em wide), so
    a long caption is wrapped, never cut off at the figure's edge."""
    per_line = max(20, int(width_inches * 72 / (0.6 * points)))
    return "\n".join(textwrap.wrap(text, per_line, break_long_words=True, break_on_hyphens=False)) or text


def error_bars(table: Table, j: int, values: Sequence[float]) -> list[list[float]] | None:
    """Column j's intervals as matplotlib's asymmetric yerr ([below], [above]); 0 where a cell has
    none; None when the column has no interval at all."""
    ivs = [_row_bases(table, k)[j] for k in range(len(table.rows))]
    ivs = [None if iv is None else iv.bounds for iv in ivs]
    if not any(iv is not None for iv in ivs):
        return None
    below = [v - iv[0] if iv is not None and math.isfinite(v) else 0.0 for v, iv in zip(values, ivs)]
    above = [iv[1] - v if iv is not None and math.isfinite(v) else 0.0 for v, iv in zip(values, ivs)]
    return [below, above]


def plot_table(table: Table, metrics: Sequence[str], out_dir: Path, n_labels: int) -> list[Path]:
    """One bar chart per metric column (x = row labels); PNGs in out_dir. The title is the column's
    header (what the number covers: leaky / held-out for a ZEPO evaluation), the settings every row
    shares and what this column's intervals are (or why it has none: it promises no bar it does not
    draw), wrapped to the figure's width; each bar's interval, where its run has one, is drawn as an
    error bar; the PNG keeps a tight bounding box (figures.save)."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    labels = [" ".join(str(x) for x in row[:n_labels]) for row in table.rows]
    paths = []
    for j, m in enumerate(metrics, start=n_labels):
        values = [
            row[j] if isinstance(row[j], int | float) and row[j] is not None else math.nan
            for row in table.rows
        ]
        width = max(4.0, 0.6 * len(labels) + 2)
        fig, ax = plt.subplots(figsize=(width, 3.5))
        ax.bar(range(len(values)), values, yerr=error_bars(table, j, values), capsize=3, ecolor="black")
        ax.set_xticks(range(len(values)), labels, rotation=30, ha="right", fontsize=8)
        header = table.columns[j]
        ax.set_ylabel(header if len(header) <= 40 else m)
        about = f"intervals: {table.about[j]}" if table.about and table.about[j] else None
        caption = "; ".join(
            x for x in (table.caption if table.settings is None else table.settings, about) if x
        )
        title = header + (f": {caption}" if caption else "")
        ax.set_title(wrap_title(title, width), fontsize=TITLE_POINTS)
        # no tight_layout: save's tight bounding box already keeps every label, and the layout pass
        # measured every tick label once more (a third of the figures' time at 100 rows)
        paths.append(save(fig, out_dir / (m.replace("/", "_") + ".png")))
    return paths


def cell_texts(table: Table, digits: int = 3) -> list[list[str]]:
    """Each row's cells as to_markdown writes them (the sweep's index.html shows the same text)."""
    return [
        [_cell(v, iv, digits) for v, iv in zip(row, _row_bases(table, k))] for k, row in enumerate(table.rows)
    ]
