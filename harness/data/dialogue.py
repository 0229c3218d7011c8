"""Dialogue response evaluation: USR TopicalChat (UniEval's copy) and ZEPO's USR dialogue file.

Both use the same six canonical aspects. Dialogue histories keep one turn per line.

`load_usr_zepo(root, fmt="zepo")` reads ZEPO's file as the official loader does (`utils.py:259-307`):
every history line labelled "Person 1: " / "Person 2: " in turn, each response prefixed with the
next speaker's label, the persona facts not shown, and each aspect's mean vote rounded to an
integer (Python's round: the means are k/3, so no .5 ties).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.data.common import (
    as_id,
    as_score,
    as_scores,
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

ASPECTS = ("understandability", "naturalness", "coherence", "engagingness", "groundedness", "overall")

TOPICALCHAT_FILE = "topicalchat/topical_chat.json"
USR_ZEPO_FILE = "usr_zepo/topicalchat_usr.json"

# ZEPO's file names the aspects as USR's annotation form did.
USR_KEYS = {
    "Understandable": "understandability",
    "Natural": "naturalness",
    "Maintains Context": "coherence",
    "Engaging": "engagingness",
    "Uses Knowledge": "groundedness",
    "Overall": "overall",
}


def turns(text: str) -> str:
    """One turn per line: the files pad turns with spaces (' \\n ') and end with blank lines."""
    return "\n".join(line.strip() for line in text.split("\n") if line.strip())


def load_topicalchat(root: Path, fmt: str = "default") -> list[Document]:
    """60 contexts x 6 responses; consecutive records sharing (source, context) form a Document.

    fmt="zepo": the layout the official ZEPO loader gives its own dialogue file (speaker labels, the
    knowledge fact not shown, integer-rounded scores); the official code never read this set.

    Document.id is the context's index ("0".."59"): the file has no id of its own.
    Candidate.id is the system_id (e.g. 'Original Ground Truth', 'Argmax Decoding').
    """
    path = root / TOPICALCHAT_FILE
    records = expect_list(read_json(path), path)
    groups: list[tuple[tuple[str, str], int, list[Candidate]]] = []
    seen: set[tuple[str, str]] = set()
    for i, rec in enumerate(records):
        key = (
            turns(as_text(get(rec, "source", path, i), path, i, "source")),
            as_text(get(rec, "context", path, i), path, i, "context"),
        )
        if not groups or groups[-1][0] != key:
            if key in seen:
                raise DataError(
                    "this dialogue appears again after another one; responses to a dialogue "
                    "must be consecutive",
                    where=loc(path, i, "source"),
                )
            seen.add(key)
            groups.append((key, i, []))
        cid = as_id(get(rec, "system_id", path, i), path, i, "system_id")
        text = as_text(get(rec, "system_output", path, i), path, i, "system_output")
        scores = as_scores(get(rec, "scores", path, i), path, i, required=ASPECTS)
        groups[-1][2].append(Candidate(id=cid, text=text, scores={a: scores[a] for a in ASPECTS}))
    if fmt == "zepo":
        return [
            _zepo_layout(make_document(str(n), source, cands, path, first))
            for n, ((source, _), first, cands) in enumerate(groups)
        ]
    return [
        make_document(str(n), source, cands, path, first, context=context)
        for n, ((source, context), first, cands) in enumerate(groups)
    ]


def _zepo_layout(doc: Document) -> Document:
    source, speaker = zepo_dialogue(doc.source)
    cands = tuple(
        Candidate(c.id, speaker + c.text, {a: float(round(v, 0)) for a, v in c.scores.items()})
        for c in doc.candidates
    )
    return Document(doc.id, source, cands)


def zepo_dialogue(context: str) -> tuple[str, str]:
    """(history, next speaker's label) exactly as the official loader builds them."""
    lines = context.split("\n")
    if lines[-1] == "":
        lines = lines[:-1]
    labelled, nxt = [], "Person 1: "
    for idx, line in enumerate(lines):
        labelled.append(("Person 1: " if idx % 2 == 0 else "Person 2: ") + line)
        nxt = "Person 2: " if idx % 2 == 0 else "Person 1: "
    return "\n".join(labelled), nxt


def load_usr_zepo(root: Path, fmt: str = "default") -> list[Document]:
    """60 records x 5 responses; each aspect's 3 annotator scores are averaged (fmt="zepo": as the
    official loader, see the module docstring).

    Document.source is the dialogue ('context' in the file), Document.context the persona facts
    ('fact'). Document.id is the record index; Candidate.id the model name ('#2' appended when a
    record has two responses from the same model, so ids stay unique).
    """
    path = root / USR_ZEPO_FILE
    docs = []
    for i, rec in enumerate(expect_list(read_json(path), path)):
        source = turns(as_text(get(rec, "context", path, i), path, i, "context"))
        fact = turns(as_text(get(rec, "fact", path, i), path, i, "fact"))
        speaker = ""
        if fmt == "zepo":
            source, speaker = zepo_dialogue(rec["context"])
            fact = ""
        responses = get(rec, "responses", path, i)
        if not isinstance(responses, list):
            raise DataError(
                f"expected an array of responses, got {kind(responses)}", where=loc(path, i, "responses")
            )
        candidates: list[Candidate] = []
        for j, resp in enumerate(responses):
            cand = _usr_candidate(resp, path, f"{i}/responses[{j}]", {c.id for c in candidates})
            if fmt == "zepo":
                cand = Candidate(
                    id=cand.id,
                    text=speaker + resp["response"].strip(),
                    scores={a: float(round(v, 0)) for a, v in cand.scores.items()},
                )
            candidates.append(cand)
        docs.append(make_document(str(i), source, candidates, path, i, context=fact))
    return docs


def _usr_candidate(resp: Any, path: Path, where: str, taken: set[str]) -> Candidate:
    text = as_text(get(resp, "response", path, where), path, where, "response")
    model = as_id(get(resp, "model", path, where), path, where, "model")
    cid, n = model, 1
    while cid in taken:
        n += 1
        cid = f"{model}#{n}"
    scores = {}
    for key, aspect in USR_KEYS.items():
        votes = get(resp, key, path, where)
        if not isinstance(votes, list) or not votes:
            raise DataError(
                f"expected a non-empty array of annotator scores, got {kind(votes)}",
                where=loc(path, where, key),
            )
        values = [as_score(v, path, where, f"{key}[{k}]") for k, v in enumerate(votes)]
        scores[aspect] = sum(values) / len(values)
    return Candidate(id=cid, text=text, scores=scores)
