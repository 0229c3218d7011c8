"""Prefix reuse (harness.judges.prefix) must give the plain path's numbers with less work."""

from __future__ import annotations

import random

import pytest
from helpers.engines import P_A_BOUND

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

TOL = P_A_BOUND["float32"]
"""max |dP(A)| between engines of one float32 model (tests/helpers/engines.py P_A_BOUND: by dtype)."""

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
        for doc in _docs()
        for a in doc.candidates
        for b in doc.candidates
        if a.id != b.id
        for ins in instructions
    ]


@pytest.fixture(scope="module", params=["llama", "mistral"])
def plain_judge(request, tiny_llama, tiny_mistral):
    path = tiny_llama if request.param == "llama" else tiny_mistral
    return HFJudge(path, device="cpu", dtype="float32", batch_size=4, engine="hf", prefix_reuse=False)


def _twin(judge: HFJudge, batch_size: int, engine: str = "auto") -> HFJudge:
    """Prefix reuse over the same weights: engine 'auto' is the packed engine for these models."""
    return HFJudge(
        "twin",
        device="cpu",
        dtype="float32",
        batch_size=batch_size,
        model=judge.model,
        tokenizer=judge.tokenizer,
        prefix_reuse=True,
        engine=engine,
    )


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
    scorer = PrefixScorer(
        plain_judge.model, plain_judge._answer_ids, plain_judge.pad_id, "cpu", batch_size=5, min_prefix=1
    )
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
        scorer = PrefixScorer(
            plain_judge.model,
            plain_judge._answer_ids,
            plain_judge.pad_id,
            "cpu",
            batch_size=3,
            min_prefix=4,
            max_cached_tokens=max_cached,
        )
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
    plain = HFJudge(
        "w", model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=4, prefix_reuse=False
    )
    reuse = HFJudge(
        "w", model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=3, prefix_reuse=True
    )
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
    from helpers.compose import compose

    from harness.runtime.context import build, container

    reqs = _requests(INSTRUCTIONS[:2])
    judges = {}
    for reuse in (None, "false"):
        overrides = ["experiment=judge", "model=tiny_llama", f"model.path={tiny_llama}", "backend.device=cpu"]
        overrides += [f"backend.prefix_reuse={reuse}"] if reuse else []
        cfg = compose(overrides)
        judges[reuse] = build(cfg.backend, judge_model=container(cfg.model))
    shipped, plain = judges[None], judges["false"]
    assert shipped.prefix_reuse and not plain.prefix_reuse
    got, want = shipped.score_pairs(reqs), plain.score_pairs(reqs)
    ids = shipped.encode(reqs)
    assert plain.tokens_processed == sum(len(r) for r in ids)
    assert trie_size(ids) <= shipped.tokens_processed < 0.8 * plain.tokens_processed
    assert max(abs(a.p_a - b.p_a) for a, b in zip(got, want)) < TOL


def _bits(score) -> tuple:
    return score.p_a, tuple(sorted(score.token_logprobs.items()))


@pytest.mark.parametrize("reuse,engine", [(True, "hf"), (True, "auto"), (False, "auto")])
def test_streamed_subset_scores_bit_for_bit_like_the_whole_call(plain_judge, reuse, engine):
    """stream_scores plans its forwards over every request and runs only the batches the needed
    ones require: whichever subset is needed (a run resumed after a kill needs what the cache
    lacks), each needed request scores bit for bit as in the call that needs them all, and the
    work shrinks. Negative control: the same subset scored in its own call (its own tree and
    batches, as a run's resumed chunk was before) differs in the last bits."""
    judge = HFJudge(
        "twin",
        device="cpu",
        dtype="float32",
        batch_size=3,
        model=plain_judge.model,
        tokenizer=plain_judge.tokenizer,
        prefix_reuse=reuse,
        engine=engine,
    )
    reqs = _requests(INSTRUCTIONS[:2])
    random.Random(2).shuffle(reqs)
    whole = {i: s for done in judge.stream_scores(reqs) for i, s in done}
    assert sorted(whole) == list(range(len(reqs)))
    full_tokens = judge.tokens_processed
    own_call_differs = False
    for needed in (range(len(reqs) // 2, len(reqs)), range(0, len(reqs), 3), [len(reqs) - 1]):
        before = judge.tokens_processed
        got = [pair for done in judge.stream_scores(reqs, needed) for pair in done]
        assert sorted(i for i, _ in got) == sorted(needed)  # each needed one once, nothing else
        assert all(_bits(s) == _bits(whole[i]) for i, s in got)
        assert judge.tokens_processed - before < full_tokens
        alone = judge.score_pairs([reqs[i] for i in needed])
        assert max(abs(a.p_a - whole[i].p_a) for i, a in zip(needed, alone)) < TOL
        own_call_differs |= any(_bits(a) != _bits(whole[i]) for i, a in zip(needed, alone))
    if reuse:  # the subset's own tree cuts its prompts into other segments; the plain path differs
        # only where this BLAS gives a row other bits in a batch of another size
        assert own_call_differs, "negative control: a subset's own call scored every bit alike"


def test_run_wrappers_stream_one_call_within_5pc_of_the_trie(plain_judge, tmp_path):
    """The run's wrappers (PreemptibleJudge over CachedJudge, cache.chunk=4) hand the transformers
    judge every request in one streamed call: the tokens stay within 5% of the trie minimum, each
    finished forward is committed, duplicates are scored once, and a second pass calls no model;
    a call longer than STREAM_WINDOW streams window by window. Negative control: the same
    requests 4 per call (the wrappers before) exceed 1.05x."""
    from harness.judges.cache import CachedJudge, ScoreCache
    from harness.judges.wrappers import PreemptibleJudge

    reqs = _requests(INSTRUCTIONS[:1])
    reqs = reqs + reqs[:3]  # duplicates
    expected = plain_judge.score_pairs(reqs)
    trie = trie_size(plain_judge.encode(reqs))
    ratio = {}
    for mode in ("stream", "window", "chunks"):
        judge = _twin(plain_judge, 3)
        store = ScoreCache(tmp_path / f"{mode}.sqlite")
        try:
            commits = []
            cached = CachedJudge(
                judge, store, chunk=4, on_progress=lambda c, f, commits=commits: commits.append((c, f))
            )
            wrapped = PreemptibleJudge(cached, chunk=4)
            if mode == "window":  # a call longer than the window streams window by window
                wrapped.STREAM_WINDOW = 10
                got = wrapped.score_pairs(reqs)
                assert cached.calls == len(reqs) - 3 == len(store)
            elif mode == "stream":
                got = wrapped.score_pairs(reqs)
                assert cached.calls == len(reqs) - 3 == len(store) and len(commits) > 2
                assert commits[0] == (0, len(reqs) - 3) and commits[-1] == (len(reqs) - 3, 0)
                assert wrapped.score_pairs(reqs) == got and cached.calls == len(reqs) - 3  # all hits
            else:
                got = [s for i in range(0, len(reqs), 4) for s in wrapped.score_pairs(reqs[i : i + 4])]
            assert max(abs(e.p_a - g.p_a) for e, g in zip(expected, got)) < TOL
            ratio[mode] = judge.tokens_processed / trie
        finally:
            store.close()
    assert ratio["stream"] <= 1.05 < ratio["chunks"] and ratio["stream"] < ratio["window"]


def test_small_documents_share_forwards(plain_judge):
    """Documents with two outputs (LLMBar-like: two ordered pairs each) are grouped until a group
    ends GROUP_PROMPTS batches' worth of prompts, so their nodes share forwards; the scores stay
    the plain path's. Negative control: one group per document (GROUP_PROMPTS 0) runs each
    document's nodes alone, in more than twice the forwards."""
    docs = [
        Document(
            f"d{k}",
            f"source number {k} " * (4 + k),
            (Candidate("a", f"first {k}"), Candidate("b", f"second {k} x")),
        )
        for k in range(8)
    ]
    reqs = [
        PairRequest(d.id, a.id, b.id, render(d, a, b, INSTRUCTIONS[0], "summarization"))
        for d in docs
        for a in d.candidates
        for b in d.candidates
        if a.id != b.id
    ]
    expected = plain_judge.score_pairs(reqs)
    forwards = {}
    for group in (PrefixScorer.GROUP_PROMPTS, 0):
        judge = _twin(plain_judge, 4)
        judge.prefix_scorer = PrefixScorer(
            judge.model, judge._answer_ids, judge.pad_id, "cpu", 4, engine=judge.packed
        )
        judge.prefix_scorer.GROUP_PROMPTS = group
        got = judge.score_pairs(reqs)
        assert max(abs(e.p_a - g.p_a) for e, g in zip(expected, got)) < TOL
        forwards[group] = judge.prefix_scorer.forwards
    assert 2 * forwards[PrefixScorer.GROUP_PROMPTS] < forwards[0]
