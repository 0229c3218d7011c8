"""The packed engine (harness.judges.packed) must compute what HF's own forward computes."""

from __future__ import annotations

import random

import pytest
from helpers.engines import LOGPROB_BOUND, P_A_BOUND

from harness.errors import ConfigError
from harness.judges.hf import HFJudge
from harness.judges.packed import PackedLlama, Segment, row_batches, unsupported
from harness.judges.prefix import PrefixScorer
from harness.prompts import default_instruction, render
from harness.records import Candidate, Document, PairRequest

TOL = P_A_BOUND["float32"]
"""max |dP(A)| between engines of one float32 model (tests/helpers/engines.py P_A_BOUND: by dtype)."""

pytestmark = pytest.mark.usefixtures("one_thread")


def _requests(n_docs: int = 3) -> list[PairRequest]:
    rng = random.Random(0)
    words = "the source text is about a summary of coherence and fluency in the answer".split()
    out = []
    for d in range(n_docs):
        doc = Document(
            f"d{d}",
            " ".join(rng.choice(words) for _ in range(8 + 17 * d)),
            tuple(
                Candidate(f"s{c}", " ".join(rng.choice(words) for _ in range(rng.randint(1, 12))))
                for c in range(3)
            ),
        )
        ins = default_instruction("coherence", "summarization")
        out += [
            PairRequest(doc.id, a.id, b.id, render(doc, a, b, ins, "summarization"))
            for a in doc.candidates
            for b in doc.candidates
            if a.id != b.id
        ]
    return out


@pytest.fixture(scope="module", params=["llama", "mistral"])
def hf_judge(request, tiny_llama, tiny_mistral):
    path = tiny_llama if request.param == "llama" else tiny_mistral
    return HFJudge(path, device="cpu", dtype="float32", batch_size=4, engine="hf", prefix_reuse=False)


def _twin(judge: HFJudge, **kw) -> HFJudge:
    """The packed engine over the same weights (no prefix reuse unless `kw` asks)."""
    kw = {"prefix_reuse": False, **kw}
    return HFJudge("twin", device="cpu", dtype="float32", model=judge.model, tokenizer=judge.tokenizer, **kw)


def _max_diff(a, b) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


@pytest.mark.parametrize("batch_size,max_batch_tokens", [(1, 4096), (5, 4096), (64, 150)])
def test_packed_plain_equals_hf(hf_judge, batch_size, max_batch_tokens):
    reqs = _requests()
    expected = hf_judge.score_pairs(reqs)
    packed = _twin(hf_judge, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
    assert packed.packed is not None and hf_judge.packed is None
    got = packed.score_pairs(reqs)
    assert max(abs(e.p_a - g.p_a) for e, g in zip(expected, got)) < TOL
    for e, g in zip(expected, got):
        assert all(abs(e.token_logprobs[k] - g.token_logprobs[k]) < 1e-3 for k in e.token_logprobs)
    # Not trivially equal: the tiny model's P(A) moves between prompts.
    assert max(e.p_a for e in expected) - min(e.p_a for e in expected) > 1e-3
    assert packed.tokens_processed == sum(len(r) for r in packed.encode(reqs))


def test_segments_with_shared_and_pieced_past_equal_full_rows(hf_judge):
    """Rows continuing a cached past (one piece, two pieces, shared by siblings) == full rows."""
    import torch

    ids = hf_judge.encode(_requests(2))
    engine = PackedLlama(hf_judge.model)
    head, mid = ids[0][:20], ids[0][20:31]
    rows = [head + mid + ids[k][31:] for k in range(4)] + [head + ids[5][20:]]
    with torch.inference_mode():
        _, (kv_head,) = engine.forward([Segment(head, 0, (), keep=True)])
        _, (kv_mid,) = engine.forward([Segment(mid, 20, (kv_head,), keep=True)])
        two = (kv_head, kv_mid)  # one tuple object: assembled once for all its rows
        segs = [Segment(r[31:], 31, two) for r in rows[:4]] + [Segment(rows[4][20:], 20, (kv_head,))]
        logits, kept = engine.forward(segs)
        full = hf_judge._hf_last_logits(rows)
    assert kept == [None] * 5
    assert len(kv_head) == hf_judge.model.config.num_hidden_layers
    assert kv_head[0][0].shape[1] == 20 and kv_mid[0][0].shape[1] == 11
    assert (logits - full).abs().max().item() < 1e-4 * max(1.0, full.abs().max().item())


@pytest.mark.parametrize("batch_size", [1, 4])
def test_prefix_scorer_packed_equals_hf_prefix_and_plain(hf_judge, batch_size):
    ids = hf_judge.encode(_requests())
    plain = hf_judge.answer_logprobs(ids)
    engine = PackedLlama(hf_judge.model)
    common = dict(
        answer_ids=hf_judge._answer_ids,
        pad_id=hf_judge.pad_id,
        device="cpu",
        batch_size=batch_size,
        min_prefix=4,
    )
    via_hf = PrefixScorer(hf_judge.model, **common)
    via_packed = PrefixScorer(hf_judge.model, engine=engine, max_batch_tokens=60, **common)
    got_hf, got_packed = via_hf.answer_logprobs(ids), via_packed.answer_logprobs(ids)
    assert _max_diff(plain, got_packed) < 1e-3 and _max_diff(got_hf, got_packed) < 1e-3
    assert via_packed.tokens_processed == via_hf.tokens_processed
    # No padding at all in the packed engine; the padded HF path computes more positions.
    assert via_packed.tokens_padded == via_packed.tokens_processed <= via_hf.tokens_padded
    assert via_packed.forwards >= 3  # the 60-token budget splits levels into several forwards


def test_sliding_window_between_one_and_two_prompts(tiny_mistral):
    """Window >= the longest prompt but < twice it: packed prefix reuse runs (exactly), while the
    padded HF prefix layout could not; a window shorter than the prompts: HF plain path."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_mistral)
    reqs = _requests(2)
    longest = max(
        len(r)
        for r in HFJudge(
            "x", model=AutoModelForCausalLM.from_pretrained(tiny_mistral), tokenizer=tok, device="cpu"
        ).encode(reqs)
    )
    for window, packed_runs in ((longest + 1, True), (16, False)):
        model = AutoModelForCausalLM.from_pretrained(tiny_mistral, sliding_window=window).eval()
        ref = HFJudge(
            "w", model=model, tokenizer=tok, device="cpu", dtype="float32", engine="hf", prefix_reuse=False
        )
        reuse = HFJudge("w", model=model, tokenizer=tok, device="cpu", dtype="float32", prefix_reuse=True)
        expected, got = ref.score_pairs(reqs), reuse.score_pairs(reqs)
        assert max(abs(e.p_a - g.p_a) for e, g in zip(expected, got)) < TOL
        assert reuse.packed is not None and reuse.packed.fits(longest) is packed_runs
        assert (reuse.prefix_scorer is not None) is packed_runs
        if packed_runs:
            assert reuse.tokens_processed < ref.tokens_processed


def test_unsupported_architecture_and_bad_engine(tmp_path, tiny_llama):
    """A GPT-2 model: auto falls back to HF's forward, engine=packed refuses with the reason."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(tiny_llama)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=512)
    ).eval()
    assert "gpt2" in unsupported(model)
    auto = HFJudge("g", model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=3)
    assert auto.packed is None
    scores = auto.score_pairs(_requests(1))
    assert len(scores) == 6 and all(0.0 < s.p_a < 1.0 for s in scores)
    with pytest.raises(ConfigError, match="engine=packed cannot run this model: architecture 'gpt2'"):
        HFJudge("g", model=model, tokenizer=tok, device="cpu", engine="packed")
    with pytest.raises(
        ConfigError, match="backend.engine='fast' is invalid: must be one of auto, packed, hf"
    ):
        HFJudge("g", model=model, tokenizer=tok, device="cpu", engine="fast")
    with pytest.raises(
        ConfigError, match="backend.max_batch_tokens=0 is invalid: must be a finite number >= 1"
    ):
        HFJudge("g", model=model, tokenizer=tok, device="cpu", max_batch_tokens=0)


def test_row_batches():
    assert row_batches([5, 5, 5, 5], 3, None) == [[0, 1, 2], [3]]
    assert row_batches([5, 5, 5, 5], 10, 10) == [[0, 1], [2, 3]]
    assert row_batches([30, 4, 4], 10, 10) == [[0], [1, 2]]  # a longer row runs alone
    assert row_batches([], 4, 8) == []
    # HF's padded forward counts rows x the longest row: 3 x 100 > 200 although 100 + 40 + 40 fits
    assert row_batches([100, 40, 40], 32, 200) == [[0, 1, 2]]
    assert row_batches([100, 40, 40], 32, 200, padded=True) == [[0, 1], [2]]
    assert row_batches([40, 100, 40], 32, 200, padded=True) == [[0, 1], [2]]  # the longest so far counts


def test_padded_forwards_keep_rows_times_longest_within_max_batch_tokens(hf_judge):
    """HF's padded forward (plain rows and the prefix tree's levels) at the shipped batch size 32
    holds at most max_batch_tokens padded positions: counted on the model's forward calls (batch
    rows x sequence length), with the same P(A) as the uncapped forward."""
    reqs = _requests()
    widths = []

    def seen(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        widths.append(tuple(ids.shape))

    cap = 3 * max(len(r) for r in hf_judge.encode(reqs))
    for prefix in (False, True):
        widths.clear()
        capped = _twin(hf_judge, engine="hf", batch_size=32, max_batch_tokens=cap, prefix_reuse=prefix)
        handle = capped.model.register_forward_pre_hook(seen, with_kwargs=True)
        try:
            got = capped.score_pairs(reqs)
        finally:
            handle.remove()
        assert widths and all(rows * width <= cap for rows, width in widths)
        assert max(rows for rows, _ in widths) > 1  # batches of several rows, not one per forward
        free = _twin(hf_judge, engine="hf", batch_size=32, max_batch_tokens=10**6, prefix_reuse=prefix)
        assert max(abs(a.p_a - b.p_a) for a, b in zip(got, free.score_pairs(reqs))) < TOL


@pytest.mark.slow
def test_smollm2_packed_equals_hf_on_summeval(smollm2_judge, shared_data):
    """The real judge on real prompts: same decisions, P(A) within fp32 noise."""
    from harness.data import load_task

    doc = load_task("summeval", data_dir=shared_data, limit=86)[85]  # a short article (162 words; doc 0: 364)
    cands = doc.candidates[:3]
    reqs = [
        PairRequest(
            doc.id,
            a.id,
            b.id,
            render(doc, a, b, default_instruction("coherence", "summarization"), "summarization"),
        )
        for a in cands
        for b in cands
        if a.id != b.id
    ]
    assert smollm2_judge.packed is not None  # engine auto picks it for SmolLM2 (a Llama)
    hf = _twin(smollm2_judge, engine="hf", batch_size=3)
    expected, got = hf.score_pairs(reqs), smollm2_judge.score_pairs(reqs)
    assert max(abs(e.p_a - g.p_a) for e, g in zip(expected, got)) < TOL
    assert [e.p_a > 0.5 for e in expected] == [g.p_a > 0.5 for g in got]


def test_bf16_engines_agree_within_the_bf16_bound(tiny_llama):
    """bfloat16 (an explicit backend.dtype): HF's padded forward, the packed engine and prefix reuse
    of one bf16 model add in different orders, so they agree within the bf16 bounds (helpers.engines
    P_A_BOUND / LOGPROB_BOUND), not the float32 ones; all read float32 logits (harness.judges.head)."""
    reqs = _requests(1)
    hf = HFJudge(tiny_llama, device="cpu", dtype="bfloat16", batch_size=4, engine="hf", prefix_reuse=False)
    want = hf.score_pairs(reqs)
    for kw in ({"prefix_reuse": False}, {"prefix_reuse": True}):
        twin = HFJudge("twin", device="cpu", dtype="bfloat16", model=hf.model, tokenizer=hf.tokenizer, **kw)
        got = twin.score_pairs(reqs)
        dp = max(abs(e.p_a - g.p_a) for e, g in zip(want, got))
        dlp = max(
            abs(e.token_logprobs[k] - g.token_logprobs[k])
            for e, g in zip(want, got)
            for k in e.token_logprobs
        )
        print(
            f"\nbf16 packed{' + prefix' if kw else ''} vs HF forward: max |dP(A)| {dp:.2e}, max |d logprob| {dlp:.2e}"
        )
        assert twin.packed is not None and dp < P_A_BOUND["bfloat16"] and dlp < LOGPROB_BOUND["bfloat16"]
