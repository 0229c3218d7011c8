"""Pairwise prompt templates: content first, the instruction LAST, as the ZEPO paper does.

`render(doc, a, b, instruction, family)` returns the user message; each judge wraps it in its
own chat template (so prefix reuse and vLLM see exactly the same tokens).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, DataError, located
from harness.files import read_json
from harness.records import Candidate, Document

log = logging.getLogger(__name__)

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


_ANSWER_FORMAT = (
    "If candidate A is better, answer 'A'. If candidate B is better, answer 'B'. Answer with the letter only."
)


def default_instruction(aspect: str | None, family: str) -> str:
    """A neutral pairwise instruction for an aspect, ending in the A/B answer format.

    No aspect (e.g. preference data with a gold label) means overall preference. An aspect this
    project has no gloss for gets a generic question and a one-line warning, so a user's own data
    runs without code; set experiment.instruction.text=... to word it yourself."""
    noun = _NOUN[_check_family(family)]
    aspect = _ASKS_ABOUT.get(aspect or "overall", aspect or "overall")
    if not str(aspect).strip():
        raise ConfigError("task.aspect is empty; name the aspect or leave it null for overall preference")
    if aspect not in ASPECT_GLOSS:
        log.warning(
            "no default instruction for aspect %r: using the generic 'Which %s is better in terms of "
            "%s?' (set experiment.instruction.text=... to word it yourself)",
            aspect,
            noun,
            aspect,
        )
        return f"Which {noun} is better in terms of {aspect}? {_ANSWER_FORMAT}"
    if aspect == "overall":  # "Compare the overall of ..." is not English
        return (
            f"Compare {noun} candidate A and {noun} candidate B overall. "
            f"Judge each by {ASPECT_GLOSS[aspect]}. "
            f"Which {noun} candidate is better overall? " + _ANSWER_FORMAT
        )
    return (
        f"Compare the {aspect} of {noun} candidate A and {noun} candidate B. "
        f"Judge {aspect} as {ASPECT_GLOSS[aspect]}. "
        f"Which {noun} candidate has better {aspect}? " + _ANSWER_FORMAT
    )


def resolve_instruction(
    spec: Mapping[str, Any] | str | None, aspect: str | None, family: str, data_dir: Path | None = None
) -> str:
    """`null`/"default" (a mapping with `text` and no source: "text") -> this project's default; "zepo" -> ZEPO's init_prompts.json (its exact
    bytes when the spec says `raw: true`, as the official code reads it); else the text."""
    source = (
        (spec.get("source") or ("default" if spec.get("text") is None else "text"))
        if isinstance(spec, Mapping)
        else ("default" if spec is None else "text")
    )
    text = spec.get("text") if isinstance(spec, Mapping) else spec
    if source == "default":
        return default_instruction(aspect, family)
    if source == "zepo":
        path = Path(spec.get("path") or (Path(data_dir or ".") / "zepo" / "init_prompts.json"))  # type: ignore[union-attr]
        table = load_zepo_instructions(path, raw=bool(spec.get("raw")))  # type: ignore[union-attr]
        key = aspect or "overall"
        if key not in table:
            raise ConfigError(
                f"no ZEPO instruction for aspect {key!r} (it has {', '.join(table)}); use "
                "experiment.instruction.source=default or experiment.instruction.text=...",
                where=str(path),
            )
        return table[key]
    if source == "text":
        if not text or not str(text).strip():
            raise ConfigError("experiment.instruction.text is empty; set experiment.instruction.text=...")
        return str(text)
    raise ConfigError(f"unknown instruction source {source!r}; use default, zepo or text")


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


def load_zepo_instructions(path: str | Path, raw: bool = False) -> dict[str, str]:
    """ZEPO's official initial instructions ({aspect: instruction}), keyed by our aspect names.

    The file's strings hold runs of 25 (summaries) or 21 (dialogue) spaces between sentences,
    left over from its source indentation. The official code sends them as they are
    (`zepo.py:46-48`); `raw=True` keeps them, byte for byte. By default the runs are collapsed to
    one space, so the instruction reads as the paper prints it (and tokenizes to 1-2 fewer
    tokens per sentence boundary).
    """
    p = Path(path)
    table = read_json(p)  # bad JSON, a lone surrogate (naming its key): one line naming the file
    if not isinstance(table, dict):
        raise DataError("expected an object {aspect: instruction}", where=str(p))
    out = {}
    for key, text in table.items():
        if not isinstance(text, str) or not text.strip():
            raise DataError("instruction must be a non-empty string", where=located(p, field=key))
        out[_ZEPO_KEYS.get(key, key)] = text if raw else " ".join(text.split())
    return out


def zepo_key(aspect: str) -> str:
    """The official ZEPO key of one of our aspect names ('naturalness' -> 'natural'), which the
    official meta-prompt names as the keyword to keep."""
    return {ours: theirs for theirs, ours in _ZEPO_KEYS.items()}.get(aspect, aspect)


# -- pointwise scoring (the ZEPO paper's Table 1 "Scoring" and "G-Eval" rows) -------------------
# The official code's 1-5 score prompt: pairs/prompts.py:110-123 (prompt_name="score", with_input)
# after dedent; note the 12 spaces after the source. Its adjectives (adj_lookup, :10-22) and
# per-aspect instructions (get_aspect_instruction(aspect, "score"), :140-204) for summaries.
POINTWISE_TEMPLATE = (
    "{instruction}\n\nSource text: {source}            \n\nSummary: {output}\n\n"
    "Please rate on a scale from 1 to 5, where 1 represents very low {adjective}, and 5 indicates "
    "excellent {adjective}. You must only return an int score.\nScore: "
)
POINTWISE_ADJECTIVES = {
    "coherence": "coherent",
    "fluency": "fluent",
    "relevance": "relevant",
    "informativeness": "informative",
    "consistency": "consistent",
}
POINTWISE_INSTRUCTIONS = {
    "coherence": "Please evaluate the coherence of the following summary. ",
    "fluency": "Please evaluate the fluency of the following summary. ",
    "relevance": (
        "Please evaluate the relevance of the following summary. A summary is relevant if it captures the "
        "main points from the article, without leaving out any crucial details or adding any unnecessary "
        "or inaccurate ones. A summary is more relevant if it uses the same or similar terms and expressions "
        "as the article. A summary is less relevant if it omits some of the key facts from the article, or "
        "if it introduces irrelevant information that is not supported by the article."
    ),
    "informativeness": "Please evaluate the informativeness of the following summary. ",
    "consistency": (
        "Please evaluate the consistency of the following summary. A summary is consistent with the article "
        "if it faithfully reflects the main points, facts, and tone of the article. A summary is "
        "inconsistent if it introduces any errors, contradictions, or distortions of the original article."
    ),
}


def render_pointwise(doc: Document, candidate: Candidate, aspect: str, instruction: str | None = None) -> str:
    """The official 1-5 score prompt for one summary (instruction: the official one when None)."""
    if aspect not in POINTWISE_ADJECTIVES:
        raise ConfigError(
            f"the official pointwise prompt covers summaries only, aspects "
            f"{', '.join(POINTWISE_ADJECTIVES)}; got {aspect!r}"
        )
    text = POINTWISE_INSTRUCTIONS[aspect] if instruction is None else instruction
    return POINTWISE_TEMPLATE.format(
        instruction=text, source=doc.source, output=candidate.text, adjective=POINTWISE_ADJECTIVES[aspect]
    )
