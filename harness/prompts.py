"""Pairwise prompt templates: content first, the instruction LAST, as the ZEPO paper does.

`render(doc, a, b, instruction, family)` returns the user message; each judge wraps it in its
own chat template (so prefix reuse and vLLM see exactly the same tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import ConfigError, DataError, located
from harness.types import Candidate, Document

FAMILIES = ("summarization", "dialogue", "instruction")

# Noun used in instructions and in the candidate headers, per task family.
_NOUN = {"summarization": "summary", "dialogue": "response", "instruction": "response"}

# Layout per family. {context_block} is empty unless the document carries extra context.
_TEMPLATES = {
    "summarization": (
        "Source text: {source}\n\n"
        "Summary candidate A: {a}\n\n"
        "Summary candidate B: {b}\n\n"
        "Question: {instruction}\n"
        "Answer: "
    ),
    "dialogue": (
        "Dialog history: {source}\n\n{context_block}"
        "Response candidate A: {a}\n"
        "Response candidate B: {b}\n\n"
        "Question: {instruction}\n"
        "Answer: "
    ),
    "instruction": (
        "User question: {source}\n\n"
        "Response candidate A: {a}\n\n"
        "Response candidate B: {b}\n\n"
        "Question: {instruction}\n"
        "Answer: "
    ),
}

# What each aspect means, in this project's own words (used to build default instructions).
ASPECT_GLOSS = {
    "coherence": "how well the text is organised: clear structure, logical flow, one idea leading to the next",
    "consistency": "factual agreement with the source: no invented, contradicted or distorted facts",
    "fluency": "the quality of the individual sentences: grammatical, well formed and easy to read",
    "relevance": "whether it keeps the important content of the source and leaves out the unimportant",
    "informativeness": "how much of the key information of the source it conveys",
    "naturalness": "whether it sounds like something a person would naturally say in this conversation",
    "engagingness": "whether it is interesting and invites the conversation to continue",
    "overall": "its overall quality for this context, all aspects considered",
    "understandability": "whether it is easy to understand",
    "groundedness": "whether it makes good use of the given knowledge",
    "helpfulness": "how well it answers the user's question: correct, complete, clear and useful",
}


# Score keys that are not aspect words: the instruction asks about the aspect they measure.
_ASKS_ABOUT = {"gpt4_score": "helpfulness"}


def default_instruction(aspect: str, family: str) -> str:
    """A neutral pairwise instruction for an aspect, ending in the A/B answer format."""
    aspect = _ASKS_ABOUT.get(aspect, aspect)
    if aspect not in ASPECT_GLOSS:
        raise ConfigError(f"unknown aspect {aspect!r}; known: {', '.join(sorted(ASPECT_GLOSS))}")
    noun = _NOUN[_check_family(family)]
    return (
        f"Compare the {aspect} of {noun} candidate A and {noun} candidate B. "
        f"Judge {aspect} as {ASPECT_GLOSS[aspect]}. "
        f"Which {noun} candidate has better {aspect}? "
        "If candidate A is better, answer 'A'. If candidate B is better, answer 'B'. "
        "Answer with the letter only."
    )


def _check_family(family: str) -> str:
    if family not in _TEMPLATES:
        raise ConfigError(f"unknown task family {family!r}; known: {', '.join(FAMILIES)}")
    return family


def render(doc: Document, a: Candidate, b: Candidate, instruction: str, family: str) -> str:
    """The user message for one ordered pair (A = a, B = b)."""
    template = _TEMPLATES[_check_family(family)]
    context_block = f"Knowledge: {doc.context}\n\n" if doc.context else ""
    return template.format(
        source=doc.source, a=a.text, b=b.text, instruction=instruction.strip(), context_block=context_block
    )


# ZEPO's init_prompts.json keys -> this project's aspect names.
_ZEPO_KEYS = {"engaging": "engagingness", "natural": "naturalness"}


def load_zepo_instructions(path: str | Path) -> dict[str, str]:
    """ZEPO's official initial instructions ({aspect: instruction}), keyed by our aspect names.

    The file's runs of spaces (from its source indentation) are collapsed so the instruction
    reads as the paper shows it; pass `raw=True` semantics by reading the JSON yourself if you
    need the exact bytes.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError("file not found", where=str(p))
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON ({e.msg} at line {e.lineno})", where=str(p)) from None
    if not isinstance(raw, dict):
        raise DataError("expected an object {aspect: instruction}", where=str(p))
    out = {}
    for key, text in raw.items():
        if not isinstance(text, str) or not text.strip():
            raise DataError("instruction must be a non-empty string", where=located(p, field=key))
        out[_ZEPO_KEYS.get(key, key)] = " ".join(text.split())
    return out
