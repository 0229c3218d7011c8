"""Neighbour generators for A-BB: perturbations of a judged set that should not change a verdict.

A neighbour D' of the evaluation set D differs from it by edits that a fair judge ignores:
formatting of an answer or of the instruction, the A/B order, another wording of the instruction,
or a light paraphrase. Two modes:

- ``one_item`` (Hamming-1, as the official code does): each neighbour edits ONE item; only that
  item is re-judged and its score is spliced into the cached baseline vector.
- ``whole_set``: each neighbour edits every item (one kind per neighbour), all re-judged.

Everything here is data plus pure functions; the experiment owns the judge. It asks
`plan_neighbours` for `NeighbourPlan`s, materialises each edit's text with `apply_edit`, re-judges
the plan's items, and builds f(D') with `splice` (or `neighbour_matrix`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from harness.errors import ConfigError, located

Perturbation = Callable[[str, np.random.Generator], str]

MODES = ("one_item", "whole_set")
STRUCTURAL = ("swap", "instruction", "llm_paraphrase")
"""Kinds that are not a text transform here: the caller re-judges with the order reversed
("swap"), with another instruction from a list ("instruction"), or with a paraphrase from an
object that has `paraphrase(text, n, seed)` ("llm_paraphrase")."""

FUNCTION_WORDS = frozenset(
    "a an the and or but nor so of to in on at for with by from as into than then "
    "is are was were be been it its this that these those".split()
)
_WORD = re.compile(r"[A-Za-z]+")


@runtime_checkable
class Paraphraser(Protocol):
    """Anything that paraphrases. For field "instruction": harness.zepo.optimizers' Optimizers (a 4th
    argument, the aspect: pass `aspect=` to `apply_edit`; their prompt and validator are written for
    judge instructions). For "answer"/"question": harness.abb.paraphrase.AnswerParaphraser around
    the same optimizer model."""

    def paraphrase(self, text: str, n: int, seed: int, *args: str) -> list[str]: ...


def letter_signature(text: str) -> str:
    """The lowercase letters of `text` in order: formatting kinds must leave this unchanged."""
    return "".join(c for c in text.lower() if c.isalpha())


# --- formatting perturbations: pure (text, rng) -> text ------------------------------------


def insert_whitespace(text: str, rng: np.random.Generator) -> str:
    """Double some existing spaces/newlines (at least one); append a space if there are none."""
    spots = [m.start() for m in re.finditer(r"[ \n]", text)]
    if not spots:
        return text + " "
    k = max(1, int(rng.binomial(len(spots), 0.15)))
    chosen = set(rng.choice(spots, size=min(k, len(spots)), replace=False).tolist())
    return "".join(ch + ch if i in chosen else ch for i, ch in enumerate(text))


def collapse_whitespace(text: str, rng: np.random.Generator) -> str:
    """Collapse runs of spaces/tabs, trailing spaces and blank-line runs; strip the ends."""
    del rng  # deterministic: there is one collapsed form
    out = re.sub(r"[ \t]+", " ", text)
    out = re.sub(r" *\n *", "\n", out)
    out = re.sub(r"\n{3,}", "\n\n", out)
    return out.strip()


def toggle_function_word_case(text: str, rng: np.random.Generator) -> str:
    """Flip the capitalisation of a random non-empty subset of function words ("the" -> "The")."""
    words = list(_WORD.finditer(text))
    if not words:
        return text
    targets = [m for m in words if m.group().lower() in FUNCTION_WORDS] or words[:1]
    keep = rng.random(len(targets)) < 0.5
    keep[int(rng.integers(len(targets)))] = True  # at least one change
    chars = list(text)
    for m, flip in zip(targets, keep):
        if not flip:
            continue
        w = m.group()
        if w.islower():
            new = w.upper() if rng.random() < 0.3 else w.capitalize()
        else:
            new = w.lower()
        if new == w:  # e.g. "I": toggling case is the only change available
            new = w.swapcase()
        chars[m.start() : m.end()] = list(new)
    return "".join(chars)


def toggle_trailing_punctuation(text: str, rng: np.random.Generator) -> str:
    """Remove the final sentence punctuation if present, else add a full stop (or '!')."""
    body = text.rstrip()
    tail = text[len(body) :]
    if body and body[-1] in ".!?;:":
        return body[:-1] + tail
    return body + ("!" if rng.random() < 0.2 else ".") + tail


def strip_markdown(text: str, rng: np.random.Generator) -> str:
    """Remove markdown markup (headings, emphasis, bullets, quotes, backticks), keep every word."""
    del rng
    out = re.sub(r"(?m)^[ \t]{0,3}#{1,6}[ \t]+", "", text)
    out = re.sub(r"(?m)^([ \t]*)[-*+][ \t]+", r"\1", out)
    out = re.sub(r"(?m)^[ \t]*>[ \t]?", "", out)
    out = out.replace("**", "").replace("__", "").replace("`", "")
    return out


def collapse_newlines(text: str, rng: np.random.Generator) -> str:
    """Join all lines into one paragraph: every newline run (with its indentation) -> one space."""
    del rng
    return re.sub(r"[ \t]*\n\s*", " ", text).strip()


FORMATTING: dict[str, Perturbation] = {
    "whitespace_insert": insert_whitespace,
    "whitespace_collapse": collapse_whitespace,
    "capitalisation": toggle_function_word_case,
    "trailing_punctuation": toggle_trailing_punctuation,
    "markdown_strip": strip_markdown,
    "newline_collapse": collapse_newlines,
}
"""Registry of formatting perturbations by name."""

KINDS = tuple(FORMATTING) + STRUCTURAL


def _check_kinds(kinds: Sequence[str], allowed: Sequence[str]) -> None:
    for k in kinds:
        if k not in allowed:
            raise ConfigError(
                f"unknown neighbour kind {k!r}; choose from {list(allowed)}",
                where=located("neighbours", field="kinds"),
            )


def perturb(text: str, kinds: str | Sequence[str], rng: np.random.Generator) -> str:
    """Apply the named formatting perturbations to `text`, in order."""
    names = [kinds] if isinstance(kinds, str) else list(kinds)
    _check_kinds(names, tuple(FORMATTING))
    for name in names:
        text = FORMATTING[name](text, rng)
    return text


# --- plans: which items/fields a neighbour edits, and how ------------------------------------


@dataclass(frozen=True)
class Edit:
    """One edit of one item of the evaluation set."""

    item: int
    """Index into the score vector f(D) (0 <= item < d)."""
    field: str
    """What the caller changes: "answer", "instruction", "source", ...; "order" for a swap."""
    kind: str
    """A FORMATTING name or one of STRUCTURAL."""
    seed: int
    """Seeds the edit's randomness, so the same plan always gives the same text."""

    @property
    def swaps_order(self) -> bool:
        """True when the caller must re-judge this item with A and B reversed."""
        return self.kind == "swap"


@dataclass(frozen=True)
class NeighbourPlan:
    """One neighbour D': the edits that turn D into D'."""

    index: int
    """Position of this neighbour in its batch (0..m-1)."""
    mode: str
    """"one_item" (Hamming-1) or "whole_set"."""
    edits: tuple[Edit, ...]
    """One edit per perturbed item, sorted by item."""

    @property
    def items(self) -> tuple[int, ...]:
        """The items to re-judge; every other item keeps its cached baseline score."""
        return tuple(e.item for e in self.edits)


def _field_for(kind: str, fields: Sequence[str], rng: np.random.Generator) -> str:
    if kind == "swap":
        return "order"
    if kind == "instruction":
        return "instruction"
    return str(fields[int(rng.integers(len(fields)))])


def plan_neighbours(
    d: int,
    m: int,
    kinds: Sequence[str],
    *,
    mode: str = "one_item",
    fields: Sequence[str] = ("answer",),
    seed: int = 0,
) -> list[NeighbourPlan]:
    """Draw m reproducible neighbour plans over a set of d items.

    one_item: each neighbour edits one item drawn uniformly WITH replacement, with a random kind, so
    the m neighbours are i.i.d. draws from T(D) (what the quantile and mean bounds assume).
    whole_set: each neighbour draws one kind and one field and edits every item; when the field
    is the instruction, all items share one seed, because the set has ONE instruction text.
    """
    if mode not in MODES:
        raise ConfigError(
            f"mode must be one of {MODES}, got {mode!r}", where=located("neighbours", field="mode")
        )
    if d < 1 or m < 1:
        raise ConfigError(
            f"need d >= 1 items and m >= 1 neighbours (d={d}, m={m})", where=located("neighbours", field="m")
        )
    if not kinds or not fields:
        raise ConfigError("kinds and fields must be non-empty", where=located("neighbours", field="kinds"))
    _check_kinds(kinds, KINDS)
    rng = np.random.default_rng(seed)
    plans = []
    if mode == "one_item":
        items = rng.integers(0, d, size=m)
        for j in range(m):
            kind = str(kinds[int(rng.integers(len(kinds)))])
            field = _field_for(kind, fields, rng)
            edit = Edit(int(items[j]), field, kind, int(rng.integers(2**63 - 1)))
            plans.append(NeighbourPlan(j, mode, (edit,)))
        return plans
    for j in range(m):
        kind = str(kinds[int(rng.integers(len(kinds)))])
        field = _field_for(kind, fields, rng)
        shared = int(rng.integers(2**63 - 1))
        seeds = rng.integers(2**63 - 1, size=d)
        edits = tuple(
            Edit(i, field, kind, shared if field == "instruction" else int(seeds[i])) for i in range(d)
        )
        plans.append(NeighbourPlan(j, mode, edits))
    return plans


def apply_edit(
    text: str,
    edit: Edit,
    *,
    instructions: Sequence[str] = (),
    paraphraser: Paraphraser | None = None,
    aspect: str | None = None,
) -> str:
    """The edited text of `edit.field` for one item ("swap" returns `text`: reverse the order).

    `aspect` is passed as a 4th argument to `paraphraser.paraphrase` when given (Optimizers need it).
    """
    where = located("neighbours", record=edit.item, field=edit.kind)
    if edit.kind in FORMATTING:
        return FORMATTING[edit.kind](text, np.random.default_rng(edit.seed))
    if edit.kind == "swap":
        return text
    if edit.kind == "instruction":
        others = [s for s in dict.fromkeys(instructions) if s != text]
        if not others:
            raise ConfigError("'instruction' neighbours need another instruction in the list", where=where)
        return others[int(np.random.default_rng(edit.seed).integers(len(others)))]
    if edit.kind == "llm_paraphrase":
        if paraphraser is None or not hasattr(paraphraser, "paraphrase"):
            raise ConfigError(
                "'llm_paraphrase' neighbours need an object with paraphrase(text, n, seed)", where=where
            )
        extra = () if aspect is None else (aspect,)
        out = paraphraser.paraphrase(text, 1, int(edit.seed % 2**31), *extra)
        if not out or not out[0].strip():
            raise ConfigError("the paraphraser returned no text", where=where)
        return out[0]
    raise ConfigError(f"unknown neighbour kind {edit.kind!r}", where=where)


def splice(baseline: np.ndarray, plan: NeighbourPlan, rejudged: Mapping[int, float]) -> np.ndarray:
    """f(D'): the cached baseline with the plan's items replaced by their re-judged scores."""
    base = np.asarray(baseline, dtype=float)
    want, got = set(plan.items), set(int(k) for k in rejudged)
    if want != got:
        raise ConfigError(
            f"re-judged items {sorted(got)[:5]} do not match the plan's {sorted(want)[:5]}",
            where=located("neighbours", record=plan.index, field="rejudged"),
        )
    out = base.copy()
    for i, s in rejudged.items():
        if not np.isfinite(s):
            raise ConfigError(
                f"re-judged score {s!r} is not finite",
                where=located("neighbours", record=plan.index, field=str(i)),
            )
        out[int(i)] = float(s)
    return out


def neighbour_matrix(
    baseline: np.ndarray,
    plans: Sequence[NeighbourPlan],
    rejudge: Callable[[NeighbourPlan], Mapping[int, float]],
) -> np.ndarray:
    """Stack f(D'_j) for every plan (m x d); `rejudge(plan)` scores only the plan's items."""
    return np.stack([splice(baseline, p, rejudge(p)) for p in plans])
