"""SummEval (BARTScore's copy): 100 CNN/DailyMail articles x 16 systems, expert means 1-5.

The file is a pickle. Unpickling can run arbitrary code through globals (`find_class` is the
only way a pickle reaches a callable: GLOBAL, STACK_GLOBAL and the EXT opcodes all go through
it), and this file holds only dicts, lists, strings and floats, so the unpickler refuses every
global: a tampered download fails with a DataError instead of executing anything.

The official ZEPO code reads the SummEval release (model_annotations.aligned.paired.jsonl): raw
articles (`text`) and lower-cased, PTB-tokenised summaries (`decoded`). This copy holds the same
summaries true-cased (`sys_summ.lower() == decoded`, checked on document 0) but the articles
PTB-tokenised (`'s`, ` .`), which cannot be turned back into the raw text. `fmt="zepo"` therefore
lower-cases the summaries and rounds the expert means to 1 decimal as the official loader does
(`pairs/utils.py:167-201`); the source text stays tokenised (docs/zepo.md lists the difference).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from harness.data.common import (
    as_id,
    as_scores,
    as_text,
    check_file,
    get,
    loc,
    make_document,
)
from harness.errors import DataError
from harness.records import Candidate, Document

FILE = "summeval/data.pkl"
ASPECTS = ("coherence", "consistency", "fluency", "relevance")


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Builds only built-in containers and scalars; any global (class, function) is refused."""

    def __init__(self, file: io.BufferedIOBase, where: str) -> None:
        super().__init__(file)
        self._where = where

    def find_class(self, module: str, name: str) -> Any:
        raise DataError(
            f"pickle refers to the global {module}.{name}; only built-in data is allowed "
            "(the file is corrupt or was tampered with)",
            where=self._where,
        )


def load_pickle(path: Path) -> Any:
    """Unpickle `path` refusing every global; any unpickling failure becomes a DataError."""
    check_file(path)
    with path.open("rb") as f:
        try:
            return _NoGlobalsUnpickler(f, str(path)).load()
        except DataError:
            raise
        # Truncated or garbage bytes surface as any of these, depending on the opcode hit.
        except (
            pickle.UnpicklingError,
            EOFError,
            ValueError,
            TypeError,
            KeyError,
            IndexError,
            AttributeError,
            MemoryError,
            UnicodeDecodeError,
            OverflowError,
        ) as e:
            raise DataError(f"not a valid pickle ({type(e).__name__}: {e})", where=str(path)) from None


def load(root: Path, fmt: str = "default") -> list[Document]:
    """One Document per article (file order); Candidate.id = system name (M0..M23)."""
    path = root / FILE
    data = load_pickle(path)
    if not isinstance(data, dict):
        raise DataError(f"expected a dict {{doc_id: record}}, got {type(data).__name__}", where=str(path))
    return [_document(key, rec, path, fmt == "zepo") for key, rec in data.items()]


def _document(key: Any, rec: Any, path: Path, zepo: bool = False) -> Document:
    doc_id = as_id(key, path, key, "doc_id")
    source = as_text(get(rec, "src", path, doc_id), path, doc_id, "src")
    systems = get(rec, "sys_summs", path, doc_id)
    if not isinstance(systems, dict):
        raise DataError(
            f"expected a dict {{system: summary}}, got {type(systems).__name__}",
            where=loc(path, doc_id, "sys_summs"),
        )
    candidates = []
    for system, summ in systems.items():
        where = f"{doc_id}/{system}"
        text = as_text(get(summ, "sys_summ", path, where), path, where, "sys_summ")
        scores = as_scores(get(summ, "scores", path, where), path, where, required=ASPECTS)
        # Keep exactly the four expert aspects (the copy may carry automatic metrics too).
        if zepo:
            text, scores = text.lower(), {a: round(scores[a], 1) for a in ASPECTS}
        candidates.append(Candidate(id=str(system), text=text, scores={a: scores[a] for a in ASPECTS}))
    return make_document(doc_id, source, candidates, path, doc_id)
