"""What the ZEPO optimizer is asked and which of its replies are accepted: this project's
meta-prompt and the official one (`meta_prompt="zepo"`), and the validator that cleans a reply and
rejects one that is empty, a list of alternatives, drops the aspect word or an answer label, is
too short or too long, or repeats an earlier candidate (harness.zepo.optimizers runs them)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

META_PROMPT = """\
You are helping to tune the instruction given to an AI judge. The judge reads two candidate \
texts, labelled A and B, and must reply with the letter of the better one.

Write ONE new version of the instruction below. It must ask for exactly the same judgement in \
different words. Rules:
- keep the word "{aspect_word}" exactly as it is;
- keep the answer format: the judge answers 'A' if candidate A is better and 'B' if candidate B \
is better, and returns the letter only;
- change the wording and sentence structure freely; be creative and diverse;
- reply with the new instruction only: no title, no quotation marks, no explanation, no list of options.

Instruction:
{instruction}"""


ZEPO_META_PROMPT = (
    "    Paraphrase the following instruction for a pairwise comparison task. Do not change the keyword "
    '"{aspect}". Be diverse and creative in paraphrasing. Return the instruction only. \n    Input: '
    "{instruction}\n    Output: \n    "
)
"""The official meta-prompt, byte for byte: zepo.py:27-33 (an f-string with '\\' continuations, not
dedented), sent as one user message to gpt-3.5-turbo at T = 0.9."""

META_PROMPTS = ("default", "zepo")


# -- validation ---------------------------------------------------------------------------------
# Chatty wrappers models put around the one line we asked for: "Sure! Here is ...:", "Paraphrase:".
_PREFIX = re.compile(
    r"^\s*(?:(?:sure|certainly|of course|okay|ok)[!,.]?\s*)?"
    r"(?:here(?:'s| is)[^:\n]{0,60}:|(?:new |revised |rewritten |paraphrased )?"
    r"(?:paraphrase|instruction|version|prompt|answer|output)\s*:)\s*",
    re.IGNORECASE,
)
_LIST_ITEM = re.compile(
    r"^\s*(?:\d+[.):]|[-*\u2022]|option\s+\d+|alternative\s+\d+)\s*", re.IGNORECASE | re.MULTILINE
)
_QUOTES = "\"'`\u201c\u201d\u2018\u2019"


def aspect_word(aspect: str, instruction: str) -> str:
    """The form of the aspect the instruction uses ('engaging' for engagingness), else the aspect."""
    stem = aspect.removesuffix("ness")
    for form in (aspect, stem):
        if re.search(rf"\b{re.escape(form)}\b", instruction, re.IGNORECASE):
            return form
    return aspect


def clean(text: str) -> str:
    """Strip code fences, 'Paraphrase:'-style prefixes and wrapping quotes."""
    t = text.strip()
    t = re.sub(r"^```[a-zA-Z]*\n?|\n?```$", "", t).strip()
    for _ in range(2):
        t = _PREFIX.sub("", t, count=1).strip()
        if len(t) >= 2 and t[0] in _QUOTES and t[-1] in _QUOTES:
            t = t[1:-1].strip()
    return t


def _mentions_label(text: str, label: str) -> bool:
    """The label as a word, not just a sentence-initial article ('A summary is...')."""
    for m in re.finditer(rf"(?<![\w]){re.escape(label)}(?![\w])", text):
        before = text[: m.start()].rstrip(" \t")
        after = text[m.end() :]
        sentence_start = before == "" or before[-1] in ".!?\n"
        if sentence_start and re.match(r" [a-z]", after):
            continue
        return True
    return False


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".")


def validate(
    text: str,
    original: str,
    word: str,
    seen: Sequence[str],
    *,
    labels: Sequence[str] = ("A", "B"),
    min_ratio: float = 0.1,
    max_ratio: float = 3.0,
) -> tuple[str, str | None]:
    """(cleaned text, None) when acceptable, else (cleaned text, reason)."""
    t = clean(text)
    if not t:
        return t, "empty"
    if len(_LIST_ITEM.findall(t)) >= 2:
        return t, "a list of alternatives, not one instruction"
    if not re.search(rf"\b{re.escape(word)}\b", t, re.IGNORECASE):
        return t, f"missing the aspect word {word!r}"
    # Only labels the original names: a custom instruction may leave the format to the template.
    lost = [label for label in labels if _mentions_label(original, label) and not _mentions_label(t, label)]
    if lost:
        return t, f"does not mention answer option(s) {lost}"
    # Lengths without runs of spaces: ZEPO's init_prompts.json pads sentences with 21-25 spaces.
    size, size0 = len(" ".join(t.split())), len(" ".join(original.split()))
    ratio = size / max(1, size0)
    if not min_ratio <= ratio <= max_ratio:
        return t, f"length {size} chars is {ratio:.2f}x the original (allowed {min_ratio}..{max_ratio}x)"
    if _norm(t) == _norm(original):
        return t, "same as the original"
    if any(_norm(t) == _norm(s) for s in seen):
        return t, "duplicate of an earlier candidate"
    return t, None


def sample_seed(seed: int, sample: int) -> int:
    """A per-sample seed: servers that honour `seed` must not return one text n times."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{sample}".encode()).digest()[:4], "big") & 0x7FFFFFFF
