"""What every benchmark prints and takes: a table, then ONE line of JSON (`--json PATH` writes the
same object), and the options the subcommands share (`--json`, `--rounds` = timing rounds,
`--model`, `--data-dir`, `--threads`, comma lists)."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.bench.workloads import DEFAULT_MODEL
from harness.files import write_text_atomic

Column = tuple[str, Callable[[Any], str]]
"""(header, cell of a row)."""


def table(columns: Sequence[Column], rows: Sequence[Any]) -> str:
    """Right-aligned columns (the first left-aligned), each as wide as its widest cell."""
    cells = [[head for head, _ in columns]] + [[cell(r) for _, cell in columns] for r in rows]
    widths = [max(len(line[k]) for line in cells) for k in range(len(columns))]
    return "\n".join(
        "  ".join(c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(line, widths)))
        for line in cells
    )


def num(value: Any, fmt: str) -> str:
    """`value` formatted, or "-" where there is none (None, NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def emit(result: dict, path: Path | None) -> None:
    """Print the one JSON line and, given --json, write it to `path` (atomically)."""
    line = json.dumps(result, sort_keys=True, default=str)
    if path is not None:
        write_text_atomic(path, line + "\n")
    print(line, flush=True)


# -- shared options ------------------------------------------------------------------------------
def positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give an integer >= 1")
    return value


def choices_list(allowed: Sequence[str], kind: Callable[[str], Any] = str):
    """An argparse type: "a,b" -> [a, b], each in `allowed` (empty: any `kind`), none twice."""

    def parse(text: str) -> list:
        items = [x for x in text.split(",") if x]
        bad = [x for x in items if allowed and x not in allowed]
        if not items or bad or len(set(items)) != len(items):
            what = f"names from {', '.join(allowed)}" if allowed else "values"
            raise argparse.ArgumentTypeError(f"{text!r}: give distinct {what} (comma-separated)")
        try:
            return [kind(x) for x in items]
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(f"{text!r}: each item must be an integer >= 1") from None

    return parse


def add_common(p: argparse.ArgumentParser, rounds: int | None = 3, model: bool = True) -> None:
    """--json, and where the subcommand has them: --rounds (timing rounds), --model, --data-dir."""
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the JSON line here (atomically)")
    if rounds is not None:
        p.add_argument(
            "--rounds",
            type=positive,
            default=rounds,
            help=f"timed rounds after a warm-up; the median is reported (default {rounds})",
        )
    if model:
        p.add_argument(
            "--model",
            default=DEFAULT_MODEL,
            help="a conf/model name or a model spec: tiny:llama, pkg:..., a folder (default %(default)s)",
        )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="folder with summeval/ and zepo/ (default: $HARNESS_DATA_DIR or ~/.cache/harness/data)",
    )
