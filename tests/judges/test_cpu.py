"""CPU facts behind the local judges' defaults (harness.judges.cpu): `dtype: auto` is float32 on every
CPU whatever its flags (issue #28), the flags still say whether bf16 is fast (the bench's targets);
`backend.threads` (issue #21) sets torch's threads while judging."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers.compose import compose

from harness.errors import ConfigError
from harness.judges.cpu import (
    auto_dtype,
    cpu_flags,
    fast_bf16,
)
from harness.prompts import default_instruction, render
from harness.records import Candidate, Document, PairRequest

# `flags` lines as Linux prints them in /proc/cpuinfo (one processor's line, whole).
ZEN3_EPYC = (  # this project's 2-core CI machine (AMD EPYC, Zen 3): AVX2 only
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
    "syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid "
    "extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt "
    "tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a "
    "misalignsse 3dnowprefetch osvw topoext ssbd ibrs ibpb stibp vmmcall fsgsbase tsc_adjust bmi1 avx2 smep "
    "bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves clzero "
    "xsaveerptr wbnoinvd arat umip pku ospke vaes vpclmulqdq rdpid fsrm"
)
SAPPHIRE_RAPIDS = (  # Intel Xeon 4th gen: AMX-BF16 (and AVX512-BF16)
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht "
    "syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid aperfmperf "
    "tsc_known_freq pni pclmulqdq monitor ssse3 fma cx16 pdcm pcid sse4_1 sse4_2 x2apic movbe popcnt "
    "tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch cpuid_fault "
    "invpcid_single ssbd ibrs ibpb stibp ibrs_enhanced fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid "
    "avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt "
    "xsavec xgetbv1 xsaves avx_vnni avx512_bf16 wbnoinvd ida arat avx512vbmi umip pku ospke waitpkg "
    "avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq rdpid cldemote movdiri "
    "movdir64b md_clear serialize amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d arch_capabilities"
)
ICE_LAKE = (  # Intel Xeon 3rd gen: AVX-512 but no bf16 instructions
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht "
    "syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid tsc_known_freq pni "
    "pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c "
    "rdrand hypervisor lahf_lm abm 3dnowprefetch invpcid_single ssbd ibrs ibpb stibp ibrs_enhanced fsgsbase "
    "tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb "
    "avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves wbnoinvd ida arat avx512vbmi pku ospke "
    "avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq rdpid md_clear "
    "flush_l1d arch_capabilities"
)


def _cpuinfo(flags: str) -> str:
    return f"processor\t: 0\nvendor_id\t: X\nflags\t\t: {flags}\nbugs\t\t: spectre_v1\n\nprocessor\t: 1\n"


@pytest.mark.parametrize(
    ("flags", "fast"), [(SAPPHIRE_RAPIDS, True), (ZEN3_EPYC, False), (ICE_LAKE, False), ("", False)]
)
def test_fast_bf16_read_from_cpuinfo_flags(flags, fast):
    """AMX present -> bf16; AVX2 only, or AVX-512 without its bf16 instructions -> float32."""
    parsed = cpu_flags(_cpuinfo(flags))
    assert parsed == frozenset(flags.split())
    assert fast_bf16(parsed) is fast
    # Either bf16 instruction set alone is enough (Zen 4 has AVX512-BF16 without AMX).
    assert fast_bf16(parsed - {"amx_bf16"}) is ("avx512_bf16" in parsed)


@pytest.mark.parametrize("flags", [SAPPHIRE_RAPIDS, ZEN3_EPYC, ICE_LAKE], ids=["amx", "avx2", "avx512"])
def test_auto_dtype_is_float32_on_every_cpu(tiny_llama, flags, monkeypatch, tmp_path):
    """`dtype: auto` of the shipped hf and vllm backends is float32 whichever CPU the run lands on:
    each CPU's flags are forced here (an AMX CPU's on an AVX2 machine and the other way round), and
    the flag reading itself does see them (the negative control: `this_cpu_fast_bf16` flips with
    them, the dtype does not). GPU: bfloat16. An explicit dtype is recorded as from the config."""
    import harness.judges.cpu as cpu
    from harness.judges.vllm import engine_settings
    from harness.runtime.context import build, container

    fake = tmp_path / "cpuinfo"
    fake.write_text(_cpuinfo(flags))
    monkeypatch.setattr(cpu, "CPUINFO", fake)
    cpu.this_cpu_fast_bf16.cache_clear()
    try:
        assert cpu.this_cpu_fast_bf16() is fast_bf16(flags.split())  # the forced flags are read
        assert auto_dtype("cpu") == "float32" and auto_dtype("cuda:0") == "bfloat16"
        cfg = compose(
            ["experiment=judge", "model=tiny_llama", f"model.path={tiny_llama}", "backend.device=cpu"]
        )
        assert cfg.backend.dtype == "auto"
        judge = build(cfg.backend, judge_model=container(cfg.model))
        assert judge.torch_dtype == torch.float32 and "|float32|" in judge.identity
        vcfg = compose(["experiment=judge", "backend=vllm"])
        assert vcfg.backend.dtype == "auto"
        dims = {"num_attention_heads": 4, "hidden_size": 256, "num_hidden_layers": 2}
        got = engine_settings(
            "m",
            on_cpu=True,
            dtype=vcfg.backend.dtype,
            max_model_len=None,
            block_size=None,
            kv_cache_memory_bytes=None,
            enforce_eager=None,
            model_config=dims,
        )
        assert got["dtype"] == "float32"
        assert (
            engine_settings(
                "m",
                on_cpu=True,
                dtype="bfloat16",
                max_model_len=None,
                block_size=None,
                kv_cache_memory_bytes=None,
                enforce_eager=None,
                model_config=dims,
            )["dtype"]
            == "bfloat16"
        )
        assert cpu.dtype_source("auto") == "auto" and cpu.dtype_source(None) == "auto"
        assert cpu.dtype_source("bfloat16") == "config"
    finally:
        cpu.this_cpu_fast_bf16.cache_clear()


def _requests() -> list[PairRequest]:
    doc = Document("d", "a short source text about threads", (Candidate("x", "one"), Candidate("y", "two")))
    a, b = doc.candidates
    ins = default_instruction("coherence", "summarization")
    return [
        PairRequest("d", a.id, b.id, render(doc, a, b, ins, "summarization")),
        PairRequest("d", b.id, a.id, render(doc, b, a, ins, "summarization")),
    ]


def _threads_seen(judge) -> list[int]:
    seen: list[int] = []
    handle = judge.model.model.embed_tokens.register_forward_pre_hook(
        lambda *_: seen.append(torch.get_num_threads())
    )
    try:
        judge.score_pairs(_requests())
    finally:
        handle.remove()
    return seen


def test_backend_threads_sets_torch_threads_while_judging(tiny_llama, monkeypatch):
    """backend.threads=1 computes on one thread and gives the caller's count back; the shipped
    null is OMP_NUM_THREADS when set, else the cores this process may use (os.sched_getaffinity),
    not os.cpu_count()."""
    from harness.runtime.context import build, container
    from harness.runtime.schema import validate

    base = ["experiment=judge", "model=tiny_llama", f"model.path={tiny_llama}", "backend.device=cpu"]
    shipped = compose(base)
    assert shipped.backend.threads is None
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert build(shipped.backend, judge_model=container(shipped.model)).threads == len(
        os.sched_getaffinity(0)
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert build(shipped.backend, judge_model=container(shipped.model)).threads == 3
    before = torch.get_num_threads()
    for n in (1, 3):
        judge = build(compose([*base, f"backend.threads={n}"]).backend, judge_model=container(shipped.model))
        seen = _threads_seen(judge)
        assert seen and set(seen) == {n}
        assert torch.get_num_threads() == before
    cfg = compose([*base, "backend.threads=0"])
    with pytest.raises(ConfigError, match="backend.threads"):
        validate(cfg)


def test_threads_default_follows_the_affinity_mask(tiny_llama, tmp_path: Path):
    """A process pinned to one core (as SLURM or taskset pins it) gets threads=1 by default."""
    import subprocess
    import sys

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no affinity API on this platform")
    code = (
        "import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
        "from helpers.compose import compose\n"
        "from harness.runtime.context import build, container\n"
        f"cfg = compose(['experiment=judge', 'model=tiny_llama', 'model.path={tiny_llama}', 'backend.device=cpu'])\n"
        "print('threads', build(cfg.backend, judge_model=container(cfg.model)).threads)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        env={
            **{k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"},
            "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")]),
        },
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "threads 1" in out.stdout
