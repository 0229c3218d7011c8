"""Neighbour generators: reproducible, change formatting only, plans splice into the baseline."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.abb import edits as nb
from harness.errors import ConfigError

ANSWER = """## Steps to implement it

1. Install **Slim** and the   dependencies with `composer`.
2. Create the routes for the users and the groups.

- It is a good idea to add tests.
> Note: this is a quote

Finally, run the server"""


@pytest.mark.parametrize("kind", sorted(nb.FORMATTING))
def test_each_formatting_kind_changes_text_but_not_letters(kind):
    for seed in range(5):
        out = nb.perturb(ANSWER, kind, np.random.default_rng(seed))
        assert out != ANSWER
        assert nb.letter_signature(out) == nb.letter_signature(ANSWER)


def test_formatting_kinds_on_real_answers(shared_data):
    path = shared_data / "arena_hard_v0.1" / "model_answer" / "gpt-3.5-turbo-0125.jsonl"
    texts = [json.loads(line)["messages"][1]["content"]["answer"] for line in path.open().readlines()[:40]]
    rng = np.random.default_rng(0)
    changed = {k: 0 for k in nb.FORMATTING}
    for text in texts:
        for kind in nb.FORMATTING:
            out = nb.perturb(text, kind, rng)
            assert nb.letter_signature(out) == nb.letter_signature(text), kind
            changed[kind] += out != text
    # Markdown / newline kinds leave a plain one-line answer as it is; the others always change it.
    for kind in ("whitespace_insert", "capitalisation", "trailing_punctuation"):
        assert changed[kind] == len(texts), kind
    assert min(changed.values()) > len(texts) // 2, changed


def test_specific_behaviour():
    rng = np.random.default_rng(0)
    assert nb.toggle_trailing_punctuation("Done.", rng) == "Done"
    assert nb.toggle_trailing_punctuation("Done\n", rng) in ("Done.\n", "Done!\n")
    assert nb.collapse_whitespace("a  b \n\n\n\nc ", rng) == "a b\n\nc"
    assert nb.collapse_newlines("a\n  b\n\nc", rng) == "a b c"
    assert nb.strip_markdown("# Title\n- **bold** `x`", rng) == "Title\nbold x"
    assert nb.insert_whitespace("word", rng) == "word "


def test_perturb_is_reproducible_and_composes():
    kinds = ["capitalisation", "whitespace_insert", "trailing_punctuation"]
    a = nb.perturb(ANSWER, kinds, np.random.default_rng(11))
    b = nb.perturb(ANSWER, kinds, np.random.default_rng(11))
    c = nb.perturb(ANSWER, kinds, np.random.default_rng(12))
    assert a == b and a != c
    with pytest.raises(ConfigError, match="unknown neighbour kind"):
        nb.perturb(ANSWER, ["swap"], np.random.default_rng(0))


def test_plans_reproducible_one_item():
    kinds = ["capitalisation", "swap", "instruction"]
    p1 = nb.plan_neighbours(50, 20, kinds, seed=3)
    assert p1 == nb.plan_neighbours(50, 20, kinds, seed=3)
    assert p1 != nb.plan_neighbours(50, 20, kinds, seed=4)
    assert all(len(p.items) == 1 for p in p1)
    # Items are drawn with replacement, so neighbours are i.i.d. draws from T(D) (what the quantile and
    # mean bounds assume): uniform counts, and repeats even when m < d.
    counts = np.bincount([p.items[0] for p in nb.plan_neighbours(5, 5000, kinds, seed=1)], minlength=5)
    assert counts.min() > 900 and counts.max() < 1100
    assert len({p.items[0] for p in nb.plan_neighbours(50, 40, kinds, seed=3)}) < 40
    for p in p1:
        e = p.edits[0]
        assert e.field == {"swap": "order", "instruction": "instruction"}.get(e.kind, "answer")
        assert e.swaps_order == (e.kind == "swap")


def test_plans_whole_set_share_instruction_seed():
    plans = nb.plan_neighbours(6, 8, ["instruction", "markdown_strip"], mode="whole_set", seed=1)
    for p in plans:
        assert p.items == tuple(range(6))
        kinds = {e.kind for e in p.edits}
        assert len(kinds) == 1
        if kinds == {"instruction"}:
            assert len({e.seed for e in p.edits}) == 1
        else:
            assert len({e.seed for e in p.edits}) == 6
    with pytest.raises(ConfigError, match="mode"):
        nb.plan_neighbours(6, 2, ["swap"], mode="half")


class ScriptedParaphraser:
    """SCRIPTED stand-in for an Optimizer: deterministic rewrites keyed by seed."""

    def paraphrase(self, text: str, n: int, seed: int) -> list[str]:
        return [f"In other words ({seed % 7}): {text}" for _ in range(n)]


class ScriptedAspectParaphraser:
    """SCRIPTED stand-in with the Optimizer signature paraphrase(text, n, seed, aspect)."""

    def paraphrase(self, instruction: str, n: int, seed: int, aspect: str) -> list[str]:
        return [f"Rate the {aspect} (seed {seed}): {instruction}"] * n


def test_apply_edit_structural_kinds():
    instructions = ["Which is better?", "Pick the better answer.", "Which response is more helpful?"]
    e = nb.Edit(0, "instruction", "instruction", seed=5)
    out = nb.apply_edit(instructions[0], e, instructions=instructions)
    assert out in instructions[1:] and out == nb.apply_edit(instructions[0], e, instructions=instructions)
    with pytest.raises(ConfigError, match="another instruction"):
        nb.apply_edit("x", e, instructions=["x"])
    para = nb.Edit(3, "answer", "llm_paraphrase", seed=9)
    assert nb.apply_edit("hello", para, paraphraser=ScriptedParaphraser()) == "In other words (2): hello"
    with pytest.raises(ConfigError, match="paraphrase"):
        nb.apply_edit("hello", para)
    # harness.zepo.optimizers' Optimizers take the aspect as a 4th argument.
    assert nb.apply_edit("Rate it.", para, paraphraser=ScriptedAspectParaphraser(), aspect="coherence") == (
        "Rate the coherence (seed 9): Rate it."
    )
    assert nb.apply_edit("hello", nb.Edit(0, "order", "swap", 1)) == "hello"
    fmt = nb.Edit(0, "answer", "capitalisation", 4)
    assert nb.apply_edit(ANSWER, fmt) == nb.apply_edit(ANSWER, fmt) != ANSWER


def test_splice_and_neighbour_matrix():
    base = np.arange(10, dtype=float)
    plans = nb.plan_neighbours(10, 4, ["whitespace_insert"], seed=0)

    def rejudge(plan):  # scripted re-judging: the perturbed item gains 0.5
        return {i: base[i] + 0.5 for i in plan.items}

    mat = nb.neighbour_matrix(base, plans, rejudge)
    assert mat.shape == (4, 10)
    for row, plan in zip(mat, plans):
        diff = row - base
        assert np.count_nonzero(diff) == 1 and diff[plan.items[0]] == 0.5
    with pytest.raises(ConfigError, match="do not match"):
        nb.splice(base, plans[0], {99: 1.0})
    with pytest.raises(ConfigError, match="finite"):
        nb.splice(base, plans[0], {plans[0].items[0]: float("nan")})


def test_answer_paraphraser_validates_and_asks_again():
    """SCRIPTED generator (a stand-in for the optimizer model): identical or wildly longer rewrites are
    rejected and new sample indices asked; a model that never complies is a one-line error."""
    from harness.abb.paraphrase import AnswerParaphraser

    class Scripted:
        def __init__(self, replies):
            self.replies, self.asked = replies, []

        def generate(self, messages, seed, samples):
            self.asked += list(samples)
            return [self.replies[min(s, len(self.replies) - 1)] for s in samples]

    text = "Paris is the capital of France. It has about two million inhabitants."
    good = "France's capital is Paris; roughly two million people live there."
    gen = Scripted(
        [text, "Here is the rewritten text: " + text * 5, "Sure! Here is the rewritten text: " + good]
    )
    assert AnswerParaphraser(gen).paraphrase(text, 1, seed=3) == [good] and gen.asked == [0, 1, 2]
    with pytest.raises(ConfigError, match="0 of 1 acceptable.*4.*stronger optimizer"):
        AnswerParaphraser(Scripted([text * 5])).paraphrase(text, 1, seed=0)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        AnswerParaphraser(Scripted([text[:10]])).paraphrase(text, 1, seed=0)
    with pytest.raises(ConfigError, match="cannot paraphrase answers"):
        AnswerParaphraser(object())
