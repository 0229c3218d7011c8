"""Prefix reuse (harness.judges.prefix) must give the plain path's numbers with less work."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.judges.hf import HFJudge
from harness.judges.prefix import (
    PrefixScorer,
    build_tree,
    chunk_rows,
    common_prefix_len,
    trie_size,
)
from harness.prompts import default_instruction, render
from harness.records import Candidate, Document, PairRequest

TOL = 1e-4

pytestmark = pytest.mark.usefixtures("one_thread")

INSTRUCTIONS = [
    default_instruction("coherence", "summarization"),
    default_instruction("fluency", "summarization"),
    "Which summary is better? Return A or B.",
    "Which summary is better? Return A or B. You must return the choice only.",
    "Evaluate and compare the relevance of the two summary candidates. Return 'A' or 'B'.",
]


def _docs() -> list[Document]:
    words = "the source text is about a summary of coherence and fluency in the answer".split()
    rng = random.Random(0)
    docs = []
    for d, n_words in enumerate((9, 30, 50)):
        source = " ".join(rng.choice(words) for _ in range(n_words))
        cands = tuple(
            Candidate(f"s{c}", " ".join(rng.choice(words) for _ in range(rng.randint(1, 15))))
            for c in range(3 + (d % 2))
        )
        docs.append(Document(f"doc{d}", source, cands))
    return docs


def _requests(instructions: list[str]) -> list[PairRequest]:
    return [
        PairRequest(doc.id, a.id, b.id, render(doc, a, b, ins, "summarization"))
        for doc in _docs() for a in doc.candidates for b in doc.candidates if a.id != b.id
        for ins in instructions
    ]


@pytest.fixture(scope="module", params=["llama", "mistral"])
def plain_judge(request, tiny_llama, tiny_mistral):
    path = tiny_llama if request.param == "llama" else tiny_mistral
    return HFJudge(path, device="cpu", dtype="float32", batch_size=4, engine="hf")


def _twin(judge: HFJudge, batch_size: int, engine: str = "auto") -> HFJudge:
    """Prefix reuse over the same weights: engine 'auto' is the packed engine for these models."""
    return HFJudge("twin", device="cpu", dtype="float32", batch_size=batch_size, model=judge.model,
                   tokenizer=judge.tokenizer, prefix_reuse=True, engine=engine)


@pytest.fixture(scope="module")
def many(plain_judge):
    """Mixed-length prompts of several documents under four instructions, shuffled, plain scores."""
    reqs = _requests(INSTRUCTIONS[:4])
    random.Random(1).shuffle(reqs)  # results must come back in input order, whatever the grouping
    return reqs, plain_judge.score_pairs(reqs)


@pytest.mark.parametrize("engine", ["hf", "auto"])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_prefix_equals_plain_many_instructions(plain_judge, many, batch_size, engine):
    reqs, expected = many
    judge = _twin(plain_judge, batch_size, engine)
    assert (judge.packed is None) is (engine == "hf")
    got = judge.score_pairs(reqs)
    assert len(got) == len(reqs)
    worst = max(abs(e.p_a - g.p_a) for e, g in zip(expected, got))
    assert worst < TOL
    for e, g in zip(expected, got):
        assert e.token_logprobs.keys() == g.token_logprobs.keys()
        assert all(abs(e.token_logprobs[k] - g.token_logprobs[k]) < 1e-3 for k in e.token_logprobs)
    # The tiny model's P(A) varies across prompts, so equality above is not trivially 0.5 == 0.5.
    assert max(e.p_a for e in expected) - min(e.p_a for e in expected) > 1e-3
    ids = plain_judge.encode(reqs)
    assert judge.prompts == len(reqs)
    assert trie_size(ids) <= judge.tokens_processed < 0.6 * sum(len(r) for r in ids)


def test_prefix_one_instruction_and_counters(plain_judge):
    reqs = _requests(INSTRUCTIONS[:1])
    before_tokens, before_prompts = plain_judge.tokens_processed, plain_judge.prompts
    expected = plain_judge.score_pairs(reqs)
    ids = plain_judge.encode(reqs)
    assert plain_judge.prompts - before_prompts == len(reqs)
    assert plain_judge.tokens_processed - before_tokens == sum(len(r) for r in ids)
    judge = _twin(plain_judge, 3)
    got = judge.score_pairs(reqs)
    assert max(abs(e.p_a - g.p_a) for e, g in zip(expected, got)) < TOL
    # Header + source run once per document, not once per pair.
    assert trie_size(ids) <= judge.tokens_processed <= 1.2 * trie_size(ids)
    assert judge.tokens_processed < 0.85 * sum(len(r) for r in ids)


def test_min_prefix_one_runs_exactly_the_trie(plain_judge):
    reqs = _requests(INSTRUCTIONS[:3])
    ids = plain_judge.encode(reqs)
    scorer = PrefixScorer(plain_judge.model, plain_judge._answer_ids, plain_judge.pad_id, "cpu",
                          batch_size=5, min_prefix=1)
    rows = scorer.answer_logprobs(ids)
    # With no push-down every distinct prefix is run exactly once.
    assert scorer.tokens_processed == trie_size(ids)
    assert scorer.tokens_padded >= scorer.tokens_processed
    plain = plain_judge.answer_logprobs(ids[:4])
    for a, b in zip(plain, rows[:4]):
        assert max(abs(x - y) for x, y in zip(a, b)) < 1e-3


def test_duplicates_nested_prompts_and_chunks(plain_judge):
    """A prompt that is a prefix of another, exact duplicates, and many small chunks."""
    base = plain_judge.encode(_requests(INSTRUCTIONS[:1])[:4])
    rows = [base[0], base[0][:-7], base[1], base[0], base[2] + base[3][:9], base[2], base[3]]
    expected = [plain_judge.answer_logprobs([r])[0] for r in rows]
    for max_cached in (10**6, 40):
        scorer = PrefixScorer(plain_judge.model, plain_judge._answer_ids, plain_judge.pad_id, "cpu",
                              batch_size=3, min_prefix=4, max_cached_tokens=max_cached)
        got = scorer.answer_logprobs(rows)
        for e, g in zip(expected, got):
            assert max(abs(x - y) for x, y in zip(e, g)) < 1e-3
    assert len(chunk_rows(rows, 40)) > 1
    assert len(chunk_rows(rows, 10**6)) == 1


@pytest.mark.parametrize("window", [16, 4096])
def test_sliding_window_falls_back_or_matches(tiny_mistral, window):
    """A window shorter than the prompts: plain path; a long one: prefix reuse, same numbers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_mistral, sliding_window=window).eval()
    tok = AutoTokenizer.from_pretrained(tiny_mistral)
    reqs = _requests(INSTRUCTIONS[:2])[:12]
    plain = HFJudge("w", model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=4)
    reuse = HFJudge("w", model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=3,
                    prefix_reuse=True)
    expected, got = plain.score_pairs(reqs), reuse.score_pairs(reqs)
    assert max(abs(e.p_a - g.p_a) for e, g in zip(expected, got)) < TOL
    if window == 16:
        assert reuse.prefix_scorer is None and reuse.tokens_processed == plain.tokens_processed
    else:
        assert reuse.prefix_scorer is not None and reuse.tokens_processed < plain.tokens_processed


def test_build_tree_shapes():
    rows = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 3], [1, 2, 3, 4, 5], [7, 8]]
    top = build_tree(rows, min_prefix=1)
    assert [n.tokens for n in top] == [[1, 2, 3], [7, 8]]
    head = top[0]
    assert head.ends == [2] and head.start == 0
    (mid,) = head.children
    assert mid.tokens == [4] and mid.start == 3
    leaves = {tuple(n.tokens): sorted(n.ends) for n in mid.children}
    assert leaves == {(5,): [0, 3], (6,): [1]}
    # A shared run shorter than min_prefix is pushed into the children instead of cached.
    top = build_tree([[1, 2, 3, 4], [1, 2, 5, 6]], min_prefix=3)
    assert sorted(n.tokens for n in top) == [[1, 2, 3, 4], [1, 2, 5, 6]]
    assert all(not n.children and n.parent is None for n in top)
    assert trie_size(rows) == 5 + 1 + 0 + 0 + 2
    assert common_prefix_len([1, 2, 3], [1, 2]) == 2


def test_shipped_hf_backend_reuses_prefixes_and_equals_the_plain_path(tiny_llama):
    """`backend=hf` as shipped (conf/backend/hf.yaml) builds a judge with prefix reuse on: fewer
    tokens than one forward per prompt, the same scores (negative control: prefix_reuse=false
    runs every prompt's tokens)."""
    from hydra import compose, initialize_config_dir

    from harness.runtime.context import build, container

    conf = Path(__file__).resolve().parents[1] / "conf"
    reqs = _requests(INSTRUCTIONS[:2])
    judges = {}
    for reuse in (None, "false"):
        overrides = ["experiment=judge", "model=tiny_llama", f"model.path={tiny_llama}", "backend.device=cpu"]
        overrides += [f"backend.prefix_reuse={reuse}"] if reuse else []
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose("config", overrides=overrides)
        judges[reuse] = build(cfg.backend, judge_model=container(cfg.model))
    shipped, plain = judges[None], judges["false"]
    assert shipped.prefix_reuse and not plain.prefix_reuse
    got, want = shipped.score_pairs(reqs), plain.score_pairs(reqs)
    ids = shipped.encode(reqs)
    assert plain.tokens_processed == sum(len(r) for r in ids)
    assert trie_size(ids) <= shipped.tokens_processed < 0.8 * plain.tokens_processed
    assert max(abs(a.p_a - b.p_a) for a, b in zip(got, want)) < TOL


@pytest.mark.parametrize("engine", ["hf", "auto"])
def test_prefix_kv_kept_across_calls(plain_judge, engine):
    """The request cache hands the judge a few requests per call (PreemptibleJudge, cache.chunk):
    with the KV of recent prefixes kept across calls the work stays within 5% of the trie minimum
    and the scores stay the plain path's; nested prompts, duplicates and a tight LRU bound too.
    Negative control: prefix_cache_tokens=0 recomputes each call's document prefix (> 1.05x)."""
    from harness.judges.wrappers import PreemptibleJudge

    reqs = _requests(INSTRUCTIONS[:1])
    ids = plain_judge.encode(reqs)
    ratio = {}
    for keep in (0, 8192, 40):
        if keep == 40:  # duplicates of earlier prompts in later calls, and an LRU that evicts
            reqs = reqs + reqs[:3]
        expected = plain_judge.score_pairs(reqs)
        judge = HFJudge("twin", device="cpu", dtype="float32", batch_size=3, model=plain_judge.model,
                        tokenizer=plain_judge.tokenizer, prefix_reuse=True, engine=engine,
                        prefix_cache_tokens=keep)
        got = PreemptibleJudge(judge, chunk=4).score_pairs(reqs)
        assert max(abs(e.p_a - g.p_a) for e, g in zip(expected, got)) < TOL
        ratio[keep] = judge.tokens_processed / trie_size(ids)
        assert judge.prefix_scorer.kept.size() <= keep
    assert ratio[8192] <= 1.05 < ratio[0]
