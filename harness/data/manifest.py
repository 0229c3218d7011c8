"""The pinned upstream files (sources.tsv, package data): where each comes from and its sha256.

sources.tsv is generated from ../shared/data/MANIFEST.tsv (tests check they agree); its `file`
column is also the relative layout inside a data directory, so loaders, fetch and the offline
mirror all agree on where a file lives.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from urllib.parse import quote

from harness.errors import DataError, located

RAW_BASE = "https://raw.githubusercontent.com"
"""Where pinned files are downloaded from: RAW_BASE/<repo>/<commit>/<upstream_path>."""

_COLUMNS = ("file", "upstream_repo", "commit", "upstream_path", "sha256", "bytes")


@dataclass(frozen=True)
class Source:
    """One pinned upstream file."""

    file: str
    """Path relative to the data directory, e.g. 'summeval/data.pkl'."""
    repo: str
    """GitHub 'owner/name' it comes from."""
    commit: str
    """40-hex commit the bytes were taken at (never a branch: branches move)."""
    path: str
    """Path of the file inside that repository at that commit."""
    sha256: str
    """Hex sha256 of the exact bytes; every copy is verified against it."""
    size: int
    """Size in bytes (a cheap early check before hashing)."""


def default_data_dir() -> Path:
    """$HARNESS_DATA_DIR, else ~/.cache/harness/data (where `python -m harness.data.fetch` writes)."""
    env = os.environ.get("HARNESS_DATA_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "harness" / "data"


def parse_sources(text: str, where: str = "sources.tsv") -> tuple[Source, ...]:
    """Parse a sources table (tab-separated, '#' comment lines, header = _COLUMNS)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)), delimiter="\t")
    if tuple(reader.fieldnames or ()) != _COLUMNS:
        raise DataError(f"header must be {'/'.join(_COLUMNS)}, got {reader.fieldnames}", where=where)
    out = []
    for i, row in enumerate(reader, start=1):
        try:
            out.append(
                Source(
                    row["file"],
                    row["upstream_repo"],
                    row["commit"],
                    row["upstream_path"],
                    row["sha256"].lower(),
                    int(row["bytes"]),
                )
            )
        except (TypeError, ValueError):
            raise DataError(
                "bad row (bytes must be an integer, six columns)", where=located(where, i)
            ) from None
    return tuple(out)


@lru_cache(maxsize=1)
def sources() -> tuple[Source, ...]:
    """Every pinned file, in table order."""
    text = resources.files("harness.data").joinpath("sources.tsv").read_text(encoding="utf-8")
    return parse_sources(text)


def files_under(prefix: str) -> tuple[str, ...]:
    """Pinned files whose path starts with `prefix` (a folder such as 'arena_hard_v0.1/')."""
    return tuple(s.file for s in sources() if s.file.startswith(prefix))


def source_url(src: Source, base: str = RAW_BASE) -> str:
    """The immutable raw URL of a pinned file: <base>/<repo>/<commit>/<upstream path>."""
    return f"{base.rstrip('/')}/{src.repo}/{src.commit}/{quote(src.path, safe='/')}"
