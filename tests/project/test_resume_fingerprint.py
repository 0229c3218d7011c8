"""Resuming never replays work done on other inputs.

- ZEPO (state.json): a changed document, candidate, instruction, judge, optimizer or setting is
  refused in one line that names what changed; unchanged inputs resume (the negative control).
- Judge runs resume through the request cache, keyed on (judge identity, exact prompt): an edited
  candidate's pairs are asked again, the others are served from the cache.

The judge and optimizer are the SCRIPTED stand-ins of tests/helpers/scripted.py (known behaviour, no model).
"""

from __future__ import annotations

import dataclasses

import pytest
from helpers.scripted import INITIAL, ScriptedBiasJudge, ScriptedOptimizer, scripted_docs, scripted_search

from harness.errors import ConfigError
from harness.judges.cache import CachedJudge, ScoreCache
from harness.judging import judge_documents
from harness.records import Candidate


def _edit_candidate(docs, doc_index=0, cand_index=1, text="q9 edited"):
    """The same ids, one candidate's text changed (the issue's replay case)."""
    doc = docs[doc_index]
    cands = list(doc.candidates)
    cands[cand_index] = dataclasses.replace(cands[cand_index], text=text)
    docs[doc_index] = dataclasses.replace(doc, candidates=tuple(cands))
    return docs


class _OtherJudge(ScriptedBiasJudge):
    identity = "scripted-bias-judge|v2"


class _HotterOptimizer(ScriptedOptimizer):
    top_p = 0.5


CHANGES = {
    "search document candidate text": (lambda: {"docs": _edit_candidate(scripted_docs(), 0)}, "documents"),
    "held-out candidate text": (lambda: {"docs": _edit_candidate(scripted_docs(), 2, 3)}, "documents"),
    "source text": (
        lambda: {
            "docs": [dataclasses.replace(scripted_docs()[0], source="source 0, edited"), *scripted_docs()[1:]]
        },
        "documents",
    ),
    "human score": (
        lambda: {
            "docs": [
                dataclasses.replace(
                    scripted_docs()[0],
                    candidates=(
                        Candidate("c0", "q0", {"coherence": 4.0}),
                        *scripted_docs()[0].candidates[1:],
                    ),
                ),
                *scripted_docs()[1:],
            ]
        },
        "documents",
    ),
    "instruction": (lambda: {"initial": INITIAL + " Be strict."}, "instruction"),
    "judge": (lambda: {"judge_cls": _OtherJudge}, "judge"),
    "optimizer setting": (lambda: {"opt_cls": _HotterOptimizer}, "optimizer"),
    "search setting": (lambda: {"seed": 7}, "settings"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_input_is_refused_in_one_line_naming_it(tmp_path, change):
    first = scripted_search(tmp_path)
    first.run()
    make, part = CHANGES[change]
    with pytest.raises(ConfigError) as e:
        scripted_search(tmp_path, **make()).run()
    msg = str(e.value)
    assert f"different {part}" in msg and "state.json" in msg and "\n" not in msg, msg


def test_unchanged_inputs_resume_and_more_epochs_continue(tmp_path):
    """The negative control: the same inputs replay the saved candidates (no optimizer call)."""
    first = scripted_search(tmp_path)
    res = first.run()
    again = scripted_search(tmp_path)
    assert [c.to_row() for c in again.run().candidates] == [c.to_row() for c in res.candidates]
    assert again.optimizer.calls == 0 and again.judge.calls == 0
    more = scripted_search(tmp_path, epochs=2)
    assert len(more.run().candidates) == 6 and more.optimizer.calls == 3


def test_the_edited_candidate_search_is_not_the_old_one(tmp_path):
    """The issue's case end to end: an edited candidate (same ids) in a new directory gives
    different scores than the saved search, which is why replaying them would be wrong."""
    old = scripted_search(tmp_path / "old").run()
    new = scripted_search(tmp_path / "new", docs=_edit_candidate(scripted_docs(), 0, 1, "q0")).run()
    assert new.candidates[0].a_rate_prob != pytest.approx(old.candidates[0].a_rate_prob)


def test_judge_cache_serves_unchanged_pairs_and_reasks_edited_ones(tmp_path):
    """Judge runs resume through the request cache: the key is (judge identity, exact prompt), so a
    candidate edited under the same id misses for each of its 2 * (n - 1) ordered pairs."""
    judge = CachedJudge(ScriptedBiasJudge(), ScoreCache(tmp_path / "c.sqlite"))
    docs = scripted_docs(1)
    judge_documents(
        judge, docs, aspect="coherence", instruction=INITIAL, family="summarization", progress=False
    )
    first = judge.calls
    assert first == 4 * 3 + 1  # ordered pairs + the content-free prompt
    judge_documents(
        judge, docs, aspect="coherence", instruction=INITIAL, family="summarization", progress=False
    )
    assert judge.calls == first  # unchanged: everything from the cache
    judge_documents(
        judge,
        _edit_candidate(docs, 0, 1),
        aspect="coherence",
        instruction=INITIAL,
        family="summarization",
        progress=False,
    )
    assert judge.calls - first == 2 * 3
    other = CachedJudge(_OtherJudge(), judge.cache)
    judge_documents(
        other, docs, aspect="coherence", instruction=INITIAL, family="summarization", progress=False
    )
    assert other.calls == first  # another judge identity shares no answer
