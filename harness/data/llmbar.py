"""LLMBar's pairwise sets with a gold label: Natural (100) and the MT-Bench human pairs (200).

Each record is one instruction with two outputs; humans prefer output `label`. Candidates are
"1" and "2" (so Document.gold is the label itself) and carry no scores.
"""

from __future__ import annotations

from pathlib import Path

from harness.data.common import (
    as_text,
    expect_list,
    get,
    kind,
    loc,
    make_document,
)
from harness.errors import DataError
from harness.files import read_json
from harness.records import Candidate, Document

NATURAL_FILE = "llmbar/Natural/dataset.json"
MTBENCH_FILE = "llmbar/MT-Bench/dataset.json"


def _label(value: object, path: Path, i: int) -> str:
    # Upstream writes the label as a JSON integer; accept the string form too.
    if isinstance(value, bool) or str(value) not in ("1", "2"):
        raise DataError(f"label must be 1 or 2, got {kind(value)} {value!r}", where=loc(path, i, "label"))
    return str(value)


def load_file(path: Path) -> list[Document]:
    """One Document per record; Document.id is the record index."""
    docs = []
    for i, rec in enumerate(expect_list(read_json(path), path)):
        source = as_text(get(rec, "input", path, i), path, i, "input")
        candidates = [
            Candidate(id=k, text=as_text(get(rec, f"output_{k}", path, i), path, i, f"output_{k}"))
            for k in ("1", "2")
        ]
        gold = _label(get(rec, "label", path, i), path, i)
        docs.append(make_document(str(i), source, candidates, path, i, gold=gold))
    return docs


def load_natural(root: Path) -> list[Document]:
    return load_file(root / NATURAL_FILE)


def load_mtbench(root: Path) -> list[Document]:
    return load_file(root / MTBENCH_FILE)
