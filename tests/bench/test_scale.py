"""The harness at SummEval's size: what a cached request costs, and the bench that measures it.

A cached request is found by its key (the judge's identity and the prompt's text) and checked
against the context by the length stored with its answer, so a fully cached run tokenizes no
prompt; `harness-bench scale` times each phase of a real run (the 24,000-judgment numbers are in
docs/benchmarks.md; here the smallest size only).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3

import pytest

from harness.errors import JudgeInputError


def _wrapped(judge, cache_path):
    from harness.judges.cache import CachedJudge, ScoreCache
    from harness.judges.wrappers import PreemptibleJudge

    return PreemptibleJudge(CachedJudge(judge, ScoreCache(cache_path)))


def _counted_encoding(monkeypatch) -> list[int]:
    """Prompts tokenized (the chat judges' one tokenizing call, harness.judges.prompt_ids.encode_chat)."""
    import harness.judges.chat as chat

    seen: list[int] = []
    real = chat.encode_chat

    def counted(tokenizer, texts, *args, **kwargs):
        seen.append(len(texts))
        return real(tokenizer, texts, *args, **kwargs)

    monkeypatch.setattr(chat, "encode_chat", counted)
    return seen


def test_a_cached_request_is_checked_by_its_stored_length_without_tokenizing(
    tiny_llama, coherence_pairs, tmp_path, monkeypatch
):
    from harness.judges.hf import HFJudge

    cache = tmp_path / "requests.sqlite"
    first = _wrapped(HFJudge(tiny_llama, device="cpu"), cache).score_pairs(coherence_pairs)
    encoded = _counted_encoding(monkeypatch)

    judge = HFJudge(tiny_llama, device="cpu")  # a fresh judge: no token ids kept from the first run
    again = _wrapped(judge, cache).score_pairs(coherence_pairs)
    assert [s.p_a for s in again] == [s.p_a for s in first]
    assert sum(encoded) == 0 and judge.prompts == 0

    # the stored length still refuses a prompt this context cannot hold, naming it
    judge.max_length = 32
    with pytest.raises(JudgeInputError, match="longer than the model's context of 32"):
        _wrapped(judge, cache).score_pairs(coherence_pairs)
    assert sum(encoded) == 0

    # control: rows cached without lengths (an older harness) are tokenized for their check, once
    with contextlib.closing(sqlite3.connect(cache)) as db, db:
        db.execute("DROP TABLE lengths")
    judge = HFJudge(tiny_llama, device="cpu")
    _wrapped(judge, cache).score_pairs(coherence_pairs)
    assert sum(encoded) == len(coherence_pairs) and judge.prompts == 0
    _wrapped(HFJudge(tiny_llama, device="cpu"), cache).score_pairs(coherence_pairs)
    assert sum(encoded) == len(coherence_pairs)  # their lengths were kept then


def test_a_miss_still_tokenizes_every_request_of_the_plan(tiny_llama, coherence_pairs, tmp_path, monkeypatch):
    """With one request missing, the model judge is handed all of them (its forwards are planned
    over all, so a resumed run scores bit for bit alike): they are tokenized, the hits' lengths
    notwithstanding, and the one computed equals the uncached run's."""
    from harness.judges.hf import HFJudge

    cache = tmp_path / "requests.sqlite"
    full = _wrapped(HFJudge(tiny_llama, device="cpu"), tmp_path / "other.sqlite").score_pairs(coherence_pairs)
    _wrapped(HFJudge(tiny_llama, device="cpu"), cache).score_pairs(coherence_pairs[1:])
    encoded = _counted_encoding(monkeypatch)
    judge = HFJudge(tiny_llama, device="cpu")
    got = _wrapped(judge, cache).score_pairs(coherence_pairs)
    assert judge.prompts == 1 and sum(encoded) == len(coherence_pairs)
    assert got[0].p_a == full[0].p_a  # the one computed, as in the plan over all of them


@pytest.mark.slow
def test_harness_bench_scale_prints_each_phase(tmp_path, shared_data):
    """The bench at its smallest size (one document: 240 judgments, uncached then cached): every
    phase timed, the cached run with no time tokenizing and none judging, the line fitted only
    with two sizes."""
    from harness.bench.cli import main

    out = tmp_path / "scale.json"
    assert main(["scale", "--sizes", "240", "--out", str(tmp_path / "runs"), "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    uncached, cached = got["runs"]
    assert (uncached["mode"], cached["mode"]) == ("uncached", "cached")
    for run in got["runs"]:
        assert run["judgments"] == 240 and run["cpu_s"] > 0 and run["peak_rss_mb"] > 0
        assert set(run["phases_cpu_s"]) >= {"imports", "tokenizer", "tokenize+check", "cache", "W&B", "other"}
    tokenizing = uncached["phases_cpu_s"]["tokenize+check"], cached["phases_cpu_s"]["tokenize+check"]
    assert tokenizing[0] > tokenizing[1] and tokenizing[1] < 0.05, tokenizing
    judging = uncached["phases_cpu_s"]["judge"], cached["phases_cpu_s"]["judge"]
    assert judging[0] > judging[1] and judging[1] < 0.05, judging  # the cached run asks no judge
    assert got["fit"] == {"uncached": None, "cached": None}
    assert got["machine"]["cpu"]


def test_scale_sizes_are_whole_documents(capsys):
    from harness.bench.cli import main

    with pytest.raises(SystemExit) as e:
        main(["scale", "--sizes", "1000"])
    assert e.value.code == 2
    assert "multiples of 240" in capsys.readouterr().err
