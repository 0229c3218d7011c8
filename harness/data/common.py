"""Reading and validating dataset files: every problem becomes one DataError line that names
the file, the record (index, id or line) and the field.

Loaders strip surrounding whitespace from texts: upstream files carry trailing newlines and
leading spaces (Llama-2 answers start with two) that would otherwise land inside the prompt.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import DataError, located
from harness.files import check_readable, loads_json
from harness.records import Candidate, Document


@dataclass(frozen=True)
class Line:
    """A record named by its line number in a JSON Lines file."""

    n: int
    """1-based line number."""

    def __str__(self) -> str:
        return f"line {self.n}"


def loc(path: object, record: object | None = None, field: str | None = None) -> str:
    """Like harness.errors.located, but 'file, line N, field F' for JSONL lines."""
    if isinstance(record, Line):
        return located(f"{path}, {record}", None, field)
    return located(path, record, field)


def kind(value: object) -> str:
    """A value's type in JSON words, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def check_file(path: Path) -> Path:
    """`path` if it is a readable file, else a DataError naming it (missing, a folder, unreadable)."""
    return check_readable(path)


def _raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of a file; a read failure part-way (EIO, a vanished mount) is a DataError."""
    try:
        with check_file(path).open("rb") as f:
            yield from enumerate(f, start=1)
    except OSError as e:
        raise DataError(
            f"cannot read it ({e.strerror}); check the file and its disk", where=str(path)
        ) from None


def iter_jsonl(path: Path) -> Iterator[tuple[Line, Any]]:
    """(Line, parsed value) for each non-blank line of a JSON Lines file."""
    for lineno, raw in _raw_lines(path):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"not UTF-8 text ({e.reason})", where=loc(path, Line(lineno))) from None
        if not line.strip():
            continue
        try:
            value = loads_json(line)
        except ValueError as e:
            raise DataError(str(e).replace(" at line 1,", " at"), where=loc(path, Line(lineno))) from None
        yield Line(lineno), value


def expect_list(value: Any, path: Path, what: str = "records") -> list[Any]:
    """The file's top level must be a JSON array."""
    if not isinstance(value, list):
        raise DataError(f"expected a JSON array of {what}, got {kind(value)}", where=str(path))
    return value


def get(rec: Any, name: str, path: Path, record: object) -> Any:
    """rec[name], or a DataError when rec is not an object or has no such field."""
    if not isinstance(rec, dict):
        raise DataError(f"expected an object, got {kind(rec)}", where=loc(path, record))
    if name not in rec:
        raise DataError("missing field", where=loc(path, record, name))
    return rec[name]


def as_text(value: Any, path: Path, record: object, name: str) -> str:
    """A non-empty string, stripped of surrounding whitespace."""
    if not isinstance(value, str):
        raise DataError(f"expected a string, got {kind(value)}", where=loc(path, record, name))
    text = value.strip()
    if not text:
        raise DataError("empty text", where=loc(path, record, name))
    return text


def as_id(value: Any, path: Path, record: object, name: str) -> str:
    """An identifier: a non-empty string, or an integer (converted to its decimal string)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return as_text(value, path, record, name)


def as_score(value: Any, path: Path, record: object, name: str) -> float:
    """A finite number (bool is refused: JSON true is not a score)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"expected a number, got {kind(value)}", where=loc(path, record, name))
    number = float(value)
    if not math.isfinite(number):
        raise DataError(f"score is {number} (must be finite)", where=loc(path, record, name))
    return number


def as_scores(
    value: Any, path: Path, record: object, name: str = "scores", required: Sequence[str] = ()
) -> dict[str, float]:
    """An object {aspect: finite number}, holding at least the `required` aspects."""
    if not isinstance(value, dict):
        raise DataError(
            f"expected an object {{aspect: number}}, got {kind(value)}", where=loc(path, record, name)
        )
    for aspect in required:
        if aspect not in value:
            raise DataError("missing field", where=loc(path, record, f"{name}.{aspect}"))
    if any(not str(k).strip() for k in value):  # no task.aspect can name it: every human score dropped
        raise DataError(
            f"an empty aspect name {next(str(k) for k in value if not str(k).strip())!r}: name the "
            'aspect each score is for (e.g. {"coherence": 4})',
            where=loc(path, record, name),
        )
    return {str(k): as_score(v, path, record, f"{name}.{k}") for k, v in value.items()}


def make_document(
    doc_id: str,
    source: str,
    candidates: Sequence[Candidate],
    path: Path,
    record: object,
    context: str = "",
    gold: str | None = None,
) -> Document:
    """A Document after the checks every dataset shares: >= 2 candidates, unique ids, known gold."""
    if len(candidates) < 2:
        raise DataError(
            f"document {doc_id!r} has {len(candidates)} candidate(s); pairwise judging needs at least 2",
            where=loc(path, record),
        )
    seen: set[str] = set()
    for c in candidates:
        if c.id in seen:
            raise DataError(
                f"document {doc_id!r} has two candidates with id {c.id!r}", where=loc(path, record)
            )
        seen.add(c.id)
    if gold is not None and gold not in seen:
        raise DataError(
            f"gold {gold!r} is not a candidate id of document {doc_id!r} ({', '.join(sorted(seen))})",
            where=loc(path, record, "gold"),
        )
    return Document(id=doc_id, source=source, candidates=tuple(candidates), context=context, gold=gold)


def check_unique_docs(docs: Sequence[Document], path: Path) -> list[Document]:
    """Document ids must be unique within a dataset (results are keyed by them)."""
    seen: set[str] = set()
    for d in docs:
        if d.id in seen:
            raise DataError(f"document id {d.id!r} occurs in two separate places", where=str(path))
        seen.add(d.id)
    return list(docs)
