"""Answer logits in float32 whatever the dtype (harness.judges.head, issue #28), on the tiny models.

fp32: the read-out is bit for bit the plain forward's. bf16: the logits are float32 numbers (not
on the bf16 lattice), every transformers path (packed, HF's forward, prefix reuse, generate) reads
them, and the judge's identity says so."""

from __future__ import annotations

import pytest
from helpers.compose import compose
from helpers.engines import LOGPROB_BOUND, P_A_BOUND

from harness.judges import head as head_module
from harness.judges.generate import generate_answer_logprobs
from harness.judges.head import LOGITS_SUFFIX, FloatHead, logit_difference, on_lattice
from harness.judges.hf import HFJudge

pytestmark = pytest.mark.usefixtures("one_thread")

ROWS = [[1, 5, 7, 9, 11, 13, 200, 3, 17, 4], [1, 4, 4, 4, 8, 9], [1, 30, 31, 32, 33, 34, 35, 36]]


def _hidden(model, rows):
    """The final norm's input at each row's last token (HF's own forward, one row at a time)."""
    import torch

    got = []
    hook = model.model.norm.register_forward_pre_hook(lambda _m, args: got.append(args[0][0, -1]))
    try:
        with torch.inference_mode():
            for r in rows:
                model(input_ids=torch.tensor([r]))
    finally:
        hook.remove()
    return torch.stack(got)


@pytest.fixture(scope="module")
def bf16_judge(tiny_llama):
    return HFJudge(tiny_llama, device="cpu", dtype="bfloat16", batch_size=4)


def test_fp32_read_out_is_bit_identical_to_the_plain_forward(tiny_judge):
    """A float32 model: the head is the model's own modules, nothing is hooked, and the packed
    engine's logits are exactly the model's norm and head on the same hidden state."""
    import torch

    model = tiny_judge.model
    head = FloatHead(model)
    assert not head.upcast
    h = _hidden(model, ROWS)
    with torch.inference_mode():
        assert torch.equal(head.logits(h), model.lm_head(model.model.norm(h)))
        with head.capture() as got:
            model(input_ids=torch.tensor([ROWS[0]]))
        assert got == []
        plain = model(input_ids=torch.tensor([ROWS[0]])).logits[:, -1]
        assert head.read(None, plain) is plain
    assert LOGITS_SUFFIX not in tiny_judge.identity


def test_bf16_logits_are_float32_and_off_the_bf16_lattice(bf16_judge, monkeypatch):
    """A bf16 model: float32 logits equal to the float32 norm and head on the bf16 hidden state;
    almost none of them is a bf16 number (the old head's were all); chunked = cached copy."""
    import torch

    model = bf16_judge.model
    head = FloatHead(model)
    assert head.upcast and model.lm_head.weight.dtype == torch.bfloat16
    h = _hidden(model, ROWS)
    with torch.inference_mode():
        got = head.logits(h)
        norm = model.model.norm
        x = h.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon) * norm.weight.float()
        want = x @ model.lm_head.weight.float().T
        old = model.lm_head(norm(h))  # the old read-out: bf16 logits
    assert got.dtype == torch.float32 and old.dtype == torch.bfloat16
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
    on_lattice = (got.bfloat16().float() == got).float().mean().item()
    assert on_lattice < 0.05, f"{on_lattice:.1%} of the float32 head's logits are bf16 numbers"
    old32 = old.float()
    assert torch.equal(old32.bfloat16().float(), old32)  # negative control: the old head's all are
    monkeypatch.setattr(head_module, "CACHE_BYTES", 0)  # no cached copy: chunks of CHUNK_ROWS rows
    monkeypatch.setattr(head_module, "CHUNK_ROWS", 7)
    with torch.inference_mode():
        chunked = FloatHead(model).logits(h)
    assert (chunked - got).abs().max().item() < 1e-5  # fp32 matmul blocking only


def test_every_bf16_path_reads_float32_logits(bf16_judge, tiny_llama):
    """Packed engine, HF's forward, prefix reuse and the generate read-out of one bf16 model give
    the float32 head's log-probs on each path's own hidden state; the identity says logits=float32."""
    import torch

    model = bf16_judge.model
    head = FloatHead(model)
    with torch.inference_mode():
        want = torch.log_softmax(head.logits(_hidden(model, ROWS)), -1)[:, bf16_judge._answer_ids].tolist()
    assert bf16_judge.packed is not None
    hf = HFJudge(
        "twin",
        model=model,
        tokenizer=bf16_judge.tokenizer,
        device="cpu",
        engine="hf",
        batch_size=1,
        prefix_reuse=False,
    )
    assert hf.packed is None
    one = [hf.answer_logprobs([r])[0] for r in ROWS]  # HF's forward, one row: the same hidden state
    assert [x for r in one for x in r] == pytest.approx([x for r in want for x in r], abs=1e-5)
    paths = {
        "packed": bf16_judge.answer_logprobs(ROWS),
        "hf_padded": hf.answer_logprobs(ROWS),
    }  # bf16 summation orders differ: close, not equal
    prefix = HFJudge(
        "twin",
        model=model,
        tokenizer=bf16_judge.tokenizer,
        device="cpu",
        engine="hf",
        prefix_reuse=True,
        batch_size=4,
    )
    paths["prefix_hf"] = [
        row
        for _, row in sorted(
            (i, row) for done in prefix._logprob_steps(ROWS, set(range(len(ROWS)))) for i, row in done
        )
    ]
    assert prefix.prefix_scorer is not None and prefix.prefix_scorer.head.upcast
    for name, got in paths.items():
        worst = max(abs(a - b) for ra, rb in zip(got, want) for a, b in zip(ra, rb))
        print(f"bf16 {name} vs HF forward: max |d logprob| {worst:.2e}")
        assert worst < LOGPROB_BOUND["bfloat16"]
    gen = generate_answer_logprobs(
        model,
        ROWS,
        bf16_judge.answers.all_ids,
        set(range(model.config.vocab_size)),
        max_new_tokens=2,
        pad_id=bf16_judge.pad_id,
        batch_size=1,
    )
    assert [g.step for g in gen] == [0, 0, 0]
    assert [x for g in gen for x in g.logprobs] == pytest.approx(
        [x for r in want for x in r], abs=1e-5
    )  # step 0
    assert LOGITS_SUFFIX in bf16_judge.identity and "|bfloat16|" in bf16_judge.identity


@pytest.mark.slow
def test_smollm2_bf16_p_a_has_no_bf16_logit_steps(smollm2_judge, coherence_pairs):
    """SmolLM2 with `backend.dtype=bfloat16` as shipped (conf/backend/hf.yaml): on 2 SummEval pairs
    (2, not more: bf16 matmuls without AMX run ~4x slower than fp32, and 4 pairs cost 217 s on the
    AVX2 development machine)
    the A-minus-B logit differences are not on the bf16 lattice (multiples of 2^-7 for logits of
    magnitude >= 1) and P(A) is within P_A_BOUND["bfloat16"] of float32. Negative control: the same
    bf16 model with the old read-out (bf16 logits, `upcast` off) puts every pair on the lattice."""
    from harness.runtime.context import build_judge

    cfg = compose(["model=smollm2", "backend=hf", "backend.dtype=bfloat16"])
    bf16 = build_judge(cfg.model, cfg.backend)
    assert LOGITS_SUFFIX in bf16.identity and bf16.numerics["dtype_source"] == "config"
    reqs = coherence_pairs[:2]
    ref = smollm2_judge.score_pairs(reqs)  # float32, the CPU default
    new = bf16.score_pairs(reqs)
    old_judge = HFJudge("old-head", model=bf16.model, tokenizer=bf16.tokenizer, device="cpu", batch_size=4)
    old_judge.float_head.upcast = False  # the read-out before harness.judges.head
    old = old_judge.score_pairs(reqs)
    # tol 1e-5: a log-prob difference of one fp32 softmax carries ~2e-6 of rounding, so bf16 logits
    # sit within it of the 2^-7 lattice, and a float32 logit lands there by chance with p = 0.26%
    lattice = {
        name: [on_lattice(logit_difference(s.token_logprobs), tol=1e-5) for s in got]
        for name, got in (("fp32 head", new), ("old bf16 head", old))
    }
    dp = {
        name: max(abs(s.p_a - r.p_a) for s, r in zip(got, ref))
        for name, got in (("fp32 head", new), ("old bf16 head", old))
    }
    print(
        f"\nSmolLM2 bf16, {len(reqs)} SummEval pairs: on the 2^-7 lattice {lattice}; max |dP(A)| vs fp32 {dp}"
    )
    assert not any(lattice["fp32 head"])
    assert all(lattice["old bf16 head"])  # negative control: the check fires on bf16 logits
    assert dp["fp32 head"] < P_A_BOUND["bfloat16"]
    assert len({round(s.p_a, 9) for s in new}) == len(new)
