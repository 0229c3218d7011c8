"""NewsRoom human evaluation as ZEPO uses it: 60 articles x 7 systems (420 records).

Records come in consecutive blocks sharing a doc_id. The file names no system, so a
candidate's id is its index within its block ("0".."6"), stable because the file is pinned.
Texts are HTML-escaped (&#x27;, &quot;) and the source keeps its paragraph tags: both are turned
back into plain text, paragraphs into newlines, so the judge reads what a human reader saw.

`fmt="zepo"` reads it as the official ZEPO loader does (`utils.py:204-215`): only "</p><p>" becomes
one space, entities stay escaped, nothing is stripped, and human scores are rounded to 1 decimal.
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
from harness.files import read_json
from harness.records import Candidate, Document

FILE = "newsroom/newsroom.json"
ASPECTS = ("coherence", "fluency", "informativeness", "relevance")

_PARAGRAPH = re.compile(r"\s*</p>\s*<p>\s*")
_EDGE_TAGS = re.compile(r"^\s*<p>|</p>\s*$")


def clean_html(text: str) -> str:
    """'a</p><p>b' -> 'a\\nb', entities unescaped."""
    return html.unescape(_EDGE_TAGS.sub("", _PARAGRAPH.sub("\n", text))).strip()


def zepo_text(text: str) -> str:
    """The official ZEPO cleaning: paragraph joints become one space, nothing else changes."""
    return text.replace("</p><p>", " ")


def load(root: Path, fmt: str = "default") -> list[Document]:
    """One Document per consecutive doc_id block, in file order (fmt: default | zepo)."""
    path = root / FILE
    records = expect_list(read_json(path), path)
    blocks: list[tuple[str, int, list[tuple[int, dict]]]] = []
    seen: set[str] = set()
    for i, rec in enumerate(records):
        doc_id = as_id(get(rec, "doc_id", path, i), path, i, "doc_id")
        if not blocks or blocks[-1][0] != doc_id:
            if doc_id in seen:
                raise DataError(
                    f"doc_id {doc_id!r} appears again after another document; "
                    "records of a document must be consecutive",
                    where=loc(path, i, "doc_id"),
                )
            seen.add(doc_id)
            blocks.append((doc_id, i, []))
        blocks[-1][2].append((i, rec))
    return [_document(doc_id, first, recs, path, fmt == "zepo") for doc_id, first, recs in blocks]


def _document(
    doc_id: str, first: int, recs: list[tuple[int, dict]], path: Path, zepo: bool = False
) -> Document:
    # as_text validates (a non-empty string) and strips; the zepo format keeps the raw bytes.
    def text_of(rec: dict, i: int, name: str) -> str:
        checked = as_text(get(rec, name, path, i), path, i, name)
        return zepo_text(rec[name]) if zepo else as_text(clean_html(checked), path, i, name)

    source = text_of(recs[0][1], first, "source")
    candidates = []
    for j, (i, rec) in enumerate(recs):
        if text_of(rec, i, "source") != source:
            raise DataError(
                f"source differs from record {first}, the first of document {doc_id!r}",
                where=loc(path, i, "source"),
            )
        scores = as_scores(get(rec, "scores", path, i), path, i, required=ASPECTS)
        cid = as_id(rec["system"], path, i, "system") if "system" in rec else str(j)
        candidates.append(
            Candidate(
                id=cid,
                text=text_of(rec, i, "system_output"),
                scores={a: round(scores[a], 1) if zepo else scores[a] for a in ASPECTS},
            )
        )
    return make_document(doc_id, source, candidates, path, first)
