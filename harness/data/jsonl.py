"""A user's own dataset, no code needed: JSON Lines, one line per candidate.

    {"doc_id": "d1", "source": "...", "candidate_id": "sysA", "text": "...",
     "scores": {"coherence": 4.0}, "context": "...", "gold": "sysA"}

`scores`, `context` and `gold` are optional. Lines sharing a doc_id form one Document (in order
of first appearance; they need not be adjacent) and must agree on source, context and gold.
Unknown fields are refused: a typo such as "score" would otherwise silently drop every score.

What the file holds decides what the run needs (`file_aspect`, `file_family`): with no
`task.aspect`, the file's only score key is the aspect (several keys: name one); an aspect the
scores do not hold is refused (its human metrics would all be null); a file with `gold`
preferences is prompted as instruction/response pairs unless `task.family` says otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.data.common import (
    Line,
    as_id,
    as_scores,
    as_text,
    get,
    iter_jsonl,
    loc,
    make_document,
)
from harness.errors import ConfigError, DataError
from harness.records import Candidate, Document

log = logging.getLogger(__name__)

REQUIRED = ("doc_id", "source", "candidate_id", "text")
OPTIONAL = ("scores", "context", "gold")


@dataclass
class _Group:
    """The lines of one document seen so far."""

    first_line: Line
    source: str
    context: str
    gold: str | None
    candidates: list[Candidate] = field(default_factory=list)


def load_jsonl(path: str | Path) -> list[Document]:
    """Documents from a JSONL file of candidates; every problem names the line and field."""
    path = Path(path).expanduser()
    groups: dict[str, _Group] = {}
    for where, rec in iter_jsonl(path):
        doc_id, group, cand = _parse_line(rec, path, where)
        prev = groups.get(doc_id)
        if prev is None:
            groups[doc_id] = group
            prev = group
        else:
            _check_same(prev, group, doc_id, path, where)
        if any(c.id == cand.id for c in prev.candidates):
            raise DataError(
                f"document {doc_id!r} already has a candidate {cand.id!r}",
                where=loc(path, where, "candidate_id"),
            )
        prev.candidates.append(cand)
    if not groups:
        raise DataError("no records (the file is empty)", where=str(path))
    return [
        make_document(doc_id, g.source, g.candidates, path, g.first_line, context=g.context, gold=g.gold)
        for doc_id, g in groups.items()
    ]


def _parse_line(rec: Any, path: Path, where: Line) -> tuple[str, _Group, Candidate]:
    for name in REQUIRED:
        get(rec, name, path, where)  # names the first missing field (and refuses non-objects)
    unknown = sorted(set(rec) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise DataError(
            f"unknown field(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(REQUIRED + OPTIONAL)}",
            where=loc(path, where),
        )
    doc_id = as_id(rec["doc_id"], path, where, "doc_id")
    context = rec.get("context")
    gold = rec.get("gold")
    group = _Group(
        first_line=where,
        source=as_text(rec["source"], path, where, "source"),
        context="" if context is None or context == "" else as_text(context, path, where, "context"),
        gold=None if gold is None else as_id(gold, path, where, "gold"),
    )
    scores = rec.get("scores")
    cand = Candidate(
        id=as_id(rec["candidate_id"], path, where, "candidate_id"),
        text=as_text(rec["text"], path, where, "text"),
        scores={} if scores is None else as_scores(scores, path, where),
    )
    return doc_id, group, cand


def _check_same(prev: _Group, new: _Group, doc_id: str, path: Path, where: Line) -> None:
    """Every line of a document must repeat the same source/context/gold (or omit gold)."""
    first = str(prev.first_line)
    if new.source != prev.source:
        raise DataError(
            f"source differs from {first}, the first line of document {doc_id!r}",
            where=loc(path, where, "source"),
        )
    if new.context != prev.context:
        raise DataError(
            f"context differs from {first}, the first line of document {doc_id!r}",
            where=loc(path, where, "context"),
        )
    if new.gold is not None:
        if prev.gold is not None and new.gold != prev.gold:
            raise DataError(
                f"gold {new.gold!r} differs from {prev.gold!r} given earlier for document {doc_id!r}",
                where=loc(path, where, "gold"),
            )
        prev.gold = new.gold


def score_keys(docs: Sequence[Document]) -> list[str]:
    """Every score key any candidate of the file carries, sorted."""
    return sorted({k for d in docs for c in d.candidates for k in c.scores})


def file_aspect(docs: Sequence[Document], aspect: str | None, path: str | Path) -> str | None:
    """The aspect a run on this file judges: `aspect` when the scores hold it (or the file has no
    scores); with no aspect, the file's only score key. Otherwise one ConfigError naming the file
    and its keys: human metrics that would all be null are refused, not reported."""
    keys = score_keys(docs)
    if not keys or (aspect is not None and aspect in keys):
        return aspect
    listed = ", ".join(keys)
    if aspect is not None:
        raise ConfigError(
            f"no candidate has a score for task.aspect={aspect!r}; its scores are for {listed}: "
            "set task.aspect to one of them (or drop the scores to judge without human metrics)",
            where=str(path),
        )
    if len(keys) > 1:
        raise ConfigError(
            f"task.aspect is not set and the scores are for several aspects ({listed}); "
            "set task.aspect to one of them",
            where=str(path),
        )
    log.info("task.aspect not set: judging %r, the only score key in %s", keys[0], path)
    return keys[0]


def file_family(docs: Sequence[Document], family: str | None) -> str:
    """`family` when set, else `instruction` for preference data (a `gold` field), else
    `summarization` (source + summary layout)."""
    if family:
        return family
    return "instruction" if any(d.gold is not None for d in docs) else "summarization"
