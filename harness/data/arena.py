"""Arena-Hard-Auto v0.1 and its predecessor arena-bench-v1: user questions x model answers.

One Document per question (question-file order); Candidate.id is the model name; candidates in
the pinned file order (sources.tsv). Which answer/judgment files exist comes from sources.tsv, so
a missing file is reported instead of silently shrinking the candidate set.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.data.common import (
    Line,
    as_id,
    as_text,
    check_unique_docs,
    get,
    iter_jsonl,
    kind,
    loc,
    make_document,
)
from harness.data.manifest import files_under
from harness.errors import DataError
from harness.records import Candidate, Document

HARD_DIR = "arena_hard_v0.1"
BENCH_DIR = "arena-bench-v1"
SCORE = "gpt4_score"
"""arena-bench-v1's only score: GPT-4's 1-10 single-answer grade (with a GPT-4 reference answer)."""

TextOf = Callable[[Any, Path, Line], "str | None"]


def hard_files() -> tuple[str, ...]:
    return (f"{HARD_DIR}/question.jsonl", *files_under(f"{HARD_DIR}/model_answer/"))


def bench_files() -> tuple[str, ...]:
    return (
        f"{BENCH_DIR}/question.jsonl",
        *files_under(f"{BENCH_DIR}/model_answer/"),
        *files_under(f"{BENCH_DIR}/model_judgment/"),
    )


def _first_turn(rec: Any, path: Path, where: object, name: str = "turns") -> str:
    value = get(rec, name, path, where)
    if not isinstance(value, list) or not value:
        raise DataError(
            f"expected a non-empty array of turns, got {kind(value)}", where=loc(path, where, name)
        )
    if not isinstance(value[0], str):
        raise DataError(f"expected a string, got {kind(value[0])}", where=loc(path, where, f"{name}[0]"))
    return value[0]


def _questions(path: Path, id_field: str, text_of: TextOf) -> dict[str, str]:
    """{question id: text} in file order."""
    out: dict[str, str] = {}
    for where, rec in iter_jsonl(path):
        qid = as_id(get(rec, id_field, path, where), path, where, id_field)
        if qid in out:
            raise DataError(f"duplicate question id {qid!r}", where=loc(path, where, id_field))
        out[qid] = text_of(rec, path, where) or ""
    return out


def _answers(
    path: Path, questions: dict[str, str], id_field: str, model_field: str, text_of: TextOf
) -> tuple[str, dict[str, str]]:
    """(model name in the records, {question id: answer}); answers whose text is None are left out."""
    model, out, seen = None, {}, set()
    for where, rec in iter_jsonl(path):
        qid = as_id(get(rec, id_field, path, where), path, where, id_field)
        if qid not in questions:
            raise DataError(f"answer to unknown question {qid!r}", where=loc(path, where, id_field))
        if qid in seen:
            raise DataError(f"second answer to question {qid!r}", where=loc(path, where, id_field))
        seen.add(qid)
        name = as_id(get(rec, model_field, path, where), path, where, model_field)
        if model is not None and name != model:
            raise DataError(
                f"model {name!r} differs from {model!r} on earlier lines", where=loc(path, where, model_field)
            )
        model = name
        text = text_of(rec, path, where)
        if text is not None:
            out[qid] = text
    if model is None:
        raise DataError("no answers in file", where=str(path))
    return model, out


def _hard_prompt(rec: Any, path: Path, where: Line) -> str:
    return as_text(get(rec, "prompt", path, where), path, where, "prompt")


def _hard_answer(rec: Any, path: Path, where: Line) -> str:
    messages = get(rec, "messages", path, where)
    if not isinstance(messages, list):
        raise DataError(
            f"expected an array of messages, got {kind(messages)}", where=loc(path, where, "messages")
        )
    for k, msg in enumerate(messages):
        if isinstance(msg, dict) and msg.get("role") == "assistant":
            content = get(msg, "content", path, where)
            if isinstance(content, dict):
                field = f"messages[{k}].content.answer"
                return as_text(get(content, "answer", path, where), path, where, field)
            return as_text(content, path, where, f"messages[{k}].content")
    raise DataError("no assistant message", where=loc(path, where, "messages"))


def load_arena_hard(root: Path) -> list[Document]:
    """500 questions x 3 answers (gpt-4-0314 is Arena-Hard's baseline); no scores."""
    qpath, *answer_files = (root / f for f in hard_files())
    questions = _questions(qpath, "uid", _hard_prompt)
    answers = [_answers(p, questions, "uid", "model", _hard_answer) for p in answer_files]
    docs = [
        make_document(qid, text, [Candidate(id=m, text=a[qid]) for m, a in answers if qid in a], qpath, qid)
        for qid, text in questions.items()
    ]
    return check_unique_docs(docs, qpath)


def _bench_answer(rec: Any, path: Path, where: Line) -> str | None:
    choices = get(rec, "choices", path, where)
    if not isinstance(choices, list) or not choices:
        raise DataError(f"expected a non-empty array, got {kind(choices)}", where=loc(path, where, "choices"))
    # The question has one turn; a few answers carry later turns of a longer upstream
    # conversation, and GPT-4's grade was of the first turn only.
    text = _first_turn(choices[0], path, where).strip()
    # Upstream holds empty answers (26 from llama-13b, 1 from Mixtral; GPT-4 graded each 1).
    # An empty text is no candidate to compare, so that model sits out that question.
    return text or None


def _bench_score(value: Any, path: Path, where: Line) -> float | None:
    # The grader writes null (FastChat's MT-bench grader: -1) when it could not parse an integer
    # "[[rating]]" from GPT-4's reply; here e.g. "9/10.", "[[9.5]]" or a reply cut off: no score.
    if value is None or value == -1:
        return None
    if isinstance(value, str):  # 200 gpt-3.5-turbo records were written with scores as "10.0"
        try:
            value = float(value)
        except ValueError:
            raise DataError(f"score {value!r} is not a number", where=loc(path, where, "score")) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= 10:
        raise DataError(
            f"score must be a number from 1 to 10 (or null/-1 for none), got {value!r}",
            where=loc(path, where, "score"),
        )
    return float(value)


def _judgments(
    paths: list[Path], questions: dict[str, str], models: set[str]
) -> dict[tuple[str, str], float | None]:
    """{(model, question id): score}. Files are named loosely (gpt-4-turbo.jsonl grades
    gpt-4-1106-preview, arena-bench-judgment_judge_any.jsonl grades llama-13b): the records'
    `model` field, which equals the answers' model_id, is what counts."""
    out: dict[tuple[str, str], float | None] = {}
    for path in paths:
        for where, rec in iter_jsonl(path):
            qid = as_id(get(rec, "question_id", path, where), path, where, "question_id")
            model = as_id(get(rec, "model", path, where), path, where, "model")
            if qid not in questions:
                raise DataError(
                    f"judgment of unknown question {qid!r}", where=loc(path, where, "question_id")
                )
            if model not in models:
                raise DataError(
                    f"judgment of model {model!r}, which has no answer file", where=loc(path, where, "model")
                )
            if (model, qid) in out:
                raise DataError(f"second judgment of {model!r} on {qid!r}", where=loc(path, where))
            out[(model, qid)] = _bench_score(rec.get("score"), path, where)
    return out


def load_arena_bench(root: Path) -> list[Document]:
    """300 questions x 17 models; Candidate.scores = {"gpt4_score": s} where GPT-4 gave a grade.

    Two models (vicuna-7b-v1.5, vicuna-13b-v1.5) have answers but no judgment file: their
    candidates have empty scores. Candidate.id is the answer file's name (its model_id may carry
    an org prefix, e.g. 'mistralai/Mistral-7B-Instruct-v0.1').
    """
    qpath = root / f"{BENCH_DIR}/question.jsonl"
    questions = _questions(qpath, "question_id", _first_turn)
    answers = []
    for rel in files_under(f"{BENCH_DIR}/model_answer/"):
        path = root / rel
        model_id, texts = _answers(path, questions, "question_id", "model_id", _bench_answer)
        answers.append((path.name.removesuffix(".jsonl"), model_id, texts))
    grades = _judgments(
        [root / f for f in files_under(f"{BENCH_DIR}/model_judgment/")],
        questions,
        {model_id for _, model_id, _ in answers},
    )
    docs = []
    for qid, text in questions.items():
        cands = []
        for name, model_id, texts in answers:
            if qid in texts:
                score = grades.get((model_id, qid))
                cands.append(
                    Candidate(id=name, text=texts[qid], scores={} if score is None else {SCORE: score})
                )
        docs.append(make_document(qid, as_text(text, qpath, qid, "turns[0]"), cands, qpath, qid))
    return check_unique_docs(docs, qpath)
