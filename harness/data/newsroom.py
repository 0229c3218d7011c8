"""NewsRoom human evaluation as ZEPO uses it: 60 articles x 7 systems (420 records).

Records come in consecutive blocks sharing a doc_id. The file names no system, so a
candidate's id is its index within its block ("0".."6"), stable because the file is pinned.
Texts are HTML-escaped (&#x27;, &quot;) and the source keeps its paragraph tags: both are turned
back into plain text, paragraphs into newlines, so the judge reads what a human reader saw.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from harness.data.common import (
    as_id,
    as_scores,
    as_text,
    expect_list,
    get,
    loc,
    make_document,
)
from harness.errors import DataError
from harness.io import read_json
from harness.types import Candidate, Document

FILE = "newsroom/newsroom.json"
ASPECTS = ("coherence", "fluency", "informativeness", "relevance")

_PARAGRAPH = re.compile(r"\s*</p>\s*<p>\s*")
_EDGE_TAGS = re.compile(r"^\s*<p>|</p>\s*$")


def clean_html(text: str) -> str:
    """'a</p><p>b' -> 'a\\nb', entities unescaped."""
    return html.unescape(_EDGE_TAGS.sub("", _PARAGRAPH.sub("\n", text))).strip()


def load(root: Path) -> list[Document]:
    """One Document per consecutive doc_id block, in file order."""
    path = root / FILE
    records = expect_list(read_json(path), path)
    blocks: list[tuple[str, int, list[tuple[int, dict]]]] = []
    seen: set[str] = set()
    for i, rec in enumerate(records):
        doc_id = as_id(get(rec, "doc_id", path, i), path, i, "doc_id")
        if not blocks or blocks[-1][0] != doc_id:
            if doc_id in seen:
                raise DataError(f"doc_id {doc_id!r} appears again after another document; "
                                "records of a document must be consecutive", where=loc(path, i, "doc_id"))
            seen.add(doc_id)
            blocks.append((doc_id, i, []))
        blocks[-1][2].append((i, rec))
    return [_document(doc_id, first, recs, path) for doc_id, first, recs in blocks]


def _document(doc_id: str, first: int, recs: list[tuple[int, dict]], path: Path) -> Document:
    source = as_text(get(recs[0][1], "source", path, first), path, first, "source")
    candidates = []
    for j, (i, rec) in enumerate(recs):
        if as_text(get(rec, "source", path, i), path, i, "source") != source:
            raise DataError(f"source differs from record {first}, the first of document {doc_id!r}",
                            where=loc(path, i, "source"))
        raw = as_text(get(rec, "system_output", path, i), path, i, "system_output")
        text = as_text(clean_html(raw), path, i, "system_output")
        scores = as_scores(get(rec, "scores", path, i), path, i, required=ASPECTS)
        cid = as_id(rec["system"], path, i, "system") if "system" in rec else str(j)
        candidates.append(Candidate(id=cid, text=text, scores={a: scores[a] for a in ASPECTS}))
    return make_document(doc_id, as_text(clean_html(source), path, first, "source"), candidates, path, first)
