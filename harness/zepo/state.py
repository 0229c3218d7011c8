"""What a ZEPO search saves and compares on resume: the scored candidates (history.jsonl rows),
state.json, and the content hashes of its inputs (documents, instruction, judge, optimizer,
settings) that decide whether a saved search may be resumed."""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, DataError
from harness.files import read_json, write_json_atomic
from harness.records import Document

log = logging.getLogger("harness.zepo.search")  # the search's log lines, as before the split

STATE_VERSION = 1


@dataclass(frozen=True)
class ScoredCandidate:
    """One instruction the search scored, with every objective (one history.jsonl row)."""

    index: int
    """Position in scoring order; 0 is the initial instruction."""
    epoch: int
    """Epoch that produced it (0 holds the initial instruction)."""
    slot: int
    """Position within its epoch."""
    text: str
    """The instruction exactly as the judge reads it (after the optimizer's cleaning)."""
    parent: int | None
    """Index of the instruction it paraphrases (None for the initial one)."""
    seed: int | None
    """Optimizer seed that produced it (None for the initial one)."""
    objectives: Mapping[str, float]
    """Value of every objective in OBJECTIVES on the search documents (higher is better)."""
    a_rate: float
    """Argmax A-rate on the search documents."""
    a_rate_prob: float
    """Mean P(A) on the search documents."""
    ece: float
    """Calibration error on the search documents (NaN without human labels)."""
    spearman_heldout: float | None = None
    """Spearman with humans on the held-out documents (the configured ranking), if computed."""
    heldout: Mapping[str, float] = field(default_factory=dict)
    """Held-out metrics: spearman (win rate), spearman_pairs, a_rate, fairness."""

    @property
    def fairness(self) -> float:
        return self.objectives["fairness"]

    @property
    def confidence(self) -> float:
        return self.objectives["confidence"]

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["objectives"] = dict(self.objectives)
        row["heldout"] = dict(self.heldout)
        row["fairness"] = self.fairness
        row["confidence"] = self.confidence
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ScoredCandidate:
        vals = {k: v for k, v in row.items() if k in cls.__dataclass_fields__}
        for k in ("a_rate", "a_rate_prob", "ece"):
            vals[k] = _nan(vals[k])
        vals["objectives"] = {k: _nan(v) for k, v in row["objectives"].items()}
        vals["heldout"] = {k: _nan(v) for k, v in (row.get("heldout") or {}).items()}
        return cls(**vals)


def _nan(v: Any) -> float:
    """JSON writes NaN as null: read it back as NaN."""
    return math.nan if v is None else float(v)


def content_hash(obj: Any) -> str:
    """sha256 (16 hex) of a JSON-able value: what a resumed search compares, part by part."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def state_fingerprint(**parts: Any) -> str:
    """Hash of everything that changes which candidates a search produces (not `epochs`)."""
    return content_hash(parts)


def documents_digest(docs: Sequence[Document]) -> str:
    """Every document's full content, in order: ids, source, context, gold and each candidate's
    text and human scores. Ids alone would let an edited candidate replay the old scores."""
    return content_hash([asdict(d) for d in docs])


class SearchState:
    """state.json: scored candidates and generated-but-unscored texts, saved atomically."""

    def __init__(self, path: Path | None, fingerprint: str, inputs: Mapping[str, str] | None = None) -> None:
        self.path = path
        self.fingerprint = fingerprint
        self.inputs = dict(inputs or {})
        """Hash of each input (documents, instruction, judge, optimizer, settings): names what changed."""
        self.done: dict[str, ScoredCandidate] = {}
        self.pending: dict[str, dict[str, Any]] = {}
        self.skipped: dict[str, str] = {}
        self.epoch = 0
        self.best_index = 0
        if path is not None and path.exists():
            self._load(path)

    def _load(self, path: Path) -> None:
        start_over = "; delete it (or start a new run directory, hydra.run.dir=...) to start over"
        try:
            raw = read_json(path)
        except DataError as e:
            raise DataError(f"{e}{start_over}") from None
        if not isinstance(raw, dict):
            raise DataError(f"expected a JSON object, got {type(raw).__name__}{start_over}", where=str(path))
        if raw.get("fingerprint") != self.fingerprint:
            saved = raw.get("inputs") or {}
            changed = [k for k in self.inputs if saved.get(k) != self.inputs[k]] or ["its inputs"]
            raise ConfigError(
                f"this run directory holds a ZEPO search of different {', '.join(changed)}; "
                "resuming would replay scores of the old inputs, so start a new run directory "
                "(hydra.run.dir=...) or delete state.json to start over",
                where=str(path),
            )
        rows = raw.get("candidates")
        if not isinstance(rows, list):
            raise DataError(
                f"field 'candidates' must be a list of scored candidates, got "
                f"{type(rows).__name__}{start_over}",
                where=str(path),
            )
        self.done = {}
        for i, r in enumerate(rows):
            try:
                c = ScoredCandidate.from_row(r)
                if not (
                    isinstance(c.text, str)
                    and all(
                        isinstance(v, int) and not isinstance(v, bool) for v in (c.index, c.epoch, c.slot)
                    )
                ):
                    raise TypeError("text must be a string, index/epoch/slot integers")
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise DataError(
                    f"candidate {i} is not a scored candidate ({type(e).__name__}: {e}){start_over}",
                    where=str(path),
                ) from None
            self.done[f"{c.epoch}:{c.slot}"] = c
        for name in ("pending", "skipped"):
            if not isinstance(raw.get(name, {}), dict):
                raise DataError(f"field {name!r} must be an object{start_over}", where=str(path))
        self.pending = dict(raw.get("pending", {}))
        self.skipped = dict(raw.get("skipped", {}))
        log.info("resuming ZEPO search from %s: %d candidates scored", path, len(self.done))

    def save(self) -> None:
        if self.path is None:
            return
        write_json_atomic(
            self.path,
            {
                "version": STATE_VERSION,
                "fingerprint": self.fingerprint,
                "inputs": self.inputs,
                "epoch": self.epoch,
                "best_index": self.best_index,
                "candidates": [c.to_row() for c in sorted(self.done.values(), key=lambda c: c.index)],
                "pending": self.pending,
                "skipped": self.skipped,
            },
        )


def optimizer_identity(optimizer: Any) -> dict[str, Any]:
    """What decides an optimizer's paraphrases: its identity (model, temperature) and, where it has
    them, its sampling and validation settings."""
    keys = ("top_p", "max_tokens", "max_attempts", "min_ratio", "max_ratio", "labels")
    return {
        "identity": getattr(optimizer, "identity", type(optimizer).__name__),
        **{k: getattr(optimizer, k) for k in keys if hasattr(optimizer, k)},
    }
