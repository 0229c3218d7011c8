"""The benchmark scripts run end to end and their one JSON line holds every figure (tiny sizes)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_bench_judge_json_line(tmp_path, shared_data, tiny_llama):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_judge.py"), "--model", "tiny:llama", "--docs", "1",
         "--candidates", "3", "--batch-size", "4", "--threads", "1", "--data-dir", str(shared_data),
         "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = _last_json(proc.stdout)
    assert json.loads(out.read_text()) == line
    methods = line["methods"]
    assert set(methods) == {"official", "batched_hf", "batched", "prefix_1instr", "prefix_5instr"}
    for name, m in methods.items():
        assert m["seconds"] > 0 and m["prompts_per_s"] > 0
        assert 0 < m["frac_best_peak"] <= m["frac_best_peak_attn"]
        assert line["speedup_vs_official"][name] > 0 and name in line["speedup_vs_batched"]
        assert f"{m['prompts_per_s']:.3f}" in proc.stdout  # the JSON holds what the table printed
    assert methods["prefix_5instr"]["prompts"] == 5 * methods["batched"]["prompts"] == 30
    for name in ("prefix_1instr", "prefix_5instr"):
        assert 1.0 <= methods[name]["tokens_over_min"] <= 1.2
    assert methods["batched"]["tokens_processed"] == methods["batched_hf"]["tokens_processed"]
    # The engines agree on every decision; the official read-out is compared, not required equal
    # (a random tiny model rarely generates an A/B token).
    for key in ("batched_hf~batched", "batched~prefix_1instr", "batched~prefix_5instr(instr0)"):
        same, n = line["agree"][key]
        assert same == n == 6 and line["max_abs_dp"][key] < 1e-4
    assert "official~batched" in line["agree"]
    assert max(line["matmul_peaks"]) == line["matmul_peak_flop_per_s"] > 0


def test_bench_judge_dtypes(tmp_path, shared_data, tiny_llama):
    """`--dtypes float32,bfloat16`: our rows in both dtypes (suffixed), %peak against the run's best
    fp32 and bf16 matmul peaks, bf16/fp32 prompts/s lines, and each bf16 row's decisions and
    |dP(A)| against its fp32 row on the same prompts, in the table and the JSON line."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_judge.py"), "--model", "tiny:llama", "--docs", "1",
         "--candidates", "3", "--batch-size", "4", "--threads", "1", "--skip-official", "--peak-size", "512",
         "--dtypes", "float32,bfloat16", "--data-dir", str(shared_data)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = _last_json(proc.stdout)
    ours = ("batched_hf", "batched", "prefix_1instr", "prefix_5instr")
    methods = line["methods"]
    assert line["dtypes"] == ["float32", "bfloat16"] and line["reference_dtype"] == "float32"
    assert set(methods) == {f"{n}_{s}" for n in ours for s in ("fp32", "bf16")}
    table = {cells[0]: cells for cells in map(str.split, proc.stdout.splitlines()) if cells[:1] and cells[0] in methods}
    head = proc.stdout.splitlines()[0].split()
    for d in ("float32", "bfloat16"):
        assert line[f"matmul_peak_{d}"] == max(line["matmul_peaks_by_dtype"][d]) > 0
    for name, m in methods.items():
        assert m["dtype"] == {"fp32": "float32", "bf16": "bfloat16"}[name.rsplit("_", 1)[1]] and m["threads"] == 1
        for d, col in (("float32", "%pk32"), ("bfloat16", "%pk16")):
            assert m[f"frac_peak_{d}"] == pytest.approx(m["flop_per_s"] / line[f"matmul_peak_{d}"], rel=1e-12)
            assert table[name][head.index(col)] == f"{100 * m[f'frac_peak_{d}']:.1f}"
        best = line[f"matmul_peak_{m['dtype']}"]  # %best: against the row's own dtype's best peak
        assert m["frac_best_peak"] == pytest.approx(m["flop_per_s"] / best, rel=1e-12)
    for n in ours:
        fp32, bf16 = methods[f"{n}_fp32"], methods[f"{n}_bf16"]
        ratio = line["dtype_speedup"][f"{n}_bf16/{n}_fp32"]
        assert ratio == pytest.approx(bf16["prompts_per_s"] / fp32["prompts_per_s"], rel=1e-12)
        assert f"prompts/s {n}_bf16/{n}_fp32: {ratio:.2f}x" in proc.stdout
        s = line["dtype_vs_reference"][f"{n}_bf16~{n}_fp32"]
        assert s["agree"][1] == bf16["prompts"] == fp32["prompts"] and 0 <= s["agree"][0] <= s["agree"][1]
        # bf16 really ran: its P(A)s differ from fp32's, by rounding-sized amounts
        assert 0 < s["mean_abs_dp"] <= s["max_abs_dp"] < 0.05
        assert (f"decisions {n}_bf16~{n}_fp32: {s['agree'][0]}/{s['agree'][1]} equal, "
                f"max |dP(A)| {s['max_abs_dp']:.2e}, mean |dP(A)| {s['mean_abs_dp']:.2e}") in proc.stdout
    # without --vllm, issue #22's targets are the two bf16/fp32 ratios, each the rows' quotient
    t = line["bf16_targets"]
    assert set(t["checks"]) == {"prefix_1instr_bf16/prefix_1instr_fp32", "prefix_5instr_bf16/prefix_5instr_fp32"}
    for key, c in t["checks"].items():
        ours, ref = key.split("/")
        assert c["ratio"] == pytest.approx(methods[ours]["prompts_per_s"] / methods[ref]["prompts_per_s"], rel=1e-12)
    # the heading says whether they are this CPU's to meet (the wording since 63605a3, issue #28)
    where = ("this CPU multiplies bf16 in hardware (AMX / AVX512-BF16): the targets apply" if t["applies"] else
             "this CPU has no AMX / AVX512-BF16: the targets are for a CPU with fast bf16")
    assert f"issue #22 bf16 targets ({where}" in proc.stdout
    # each dtype's engines are still compared among themselves, as in a single-dtype run
    for sfx in ("fp32", "bf16"):
        assert line["agree"][f"batched_{sfx}~prefix_1instr_{sfx}"] == [6, 6]
        assert line["agree"][f"batched_{sfx}~prefix_5instr_{sfx}(instr0)"] == [6, 6]


def test_bf16_targets_are_met_only_by_ratios_at_or_over_them():
    """The #22 target check on made-up rows: met at 3x / 2x, not met just under (the negative
    control); the vLLM ratio only against a bf16 row at our thread count (vllm_apc or
    vllm_apc_t{n}); a check without its rows is listed as NOT checked and never counts as met."""
    sys.path.insert(0, str(REPO / "scripts"))
    from bench_dtypes import bf16_targets, print_targets

    def rows(bf16, fp32, vllm=None, vllm_threads=2, tag="vllm_apc"):
        m = {f"prefix_{w}_{d}": {"prompts_per_s": v, "threads": 2}
             for w in ("1instr", "5instr") for d, v in (("bf16", bf16), ("fp32", fp32))}
        if vllm is not None:
            m |= {f"{tag}_{w}_bf16": {"prompts_per_s": vllm, "threads": vllm_threads} for w in ("1instr", "5instr")}
        return {"methods": m}

    cmp = {"dtype_vs_reference": {"prefix_1instr_bf16~prefix_1instr_fp32": {"agree": [5, 6]}}}
    met = bf16_targets(rows(6.0, 2.0, 3.0), cmp, True, vllm=True)
    assert met["applies"] and met["all_met"] and len(met["checks"]) == 4
    assert met["prefix_decisions_bf16_vs_fp32"] == {"prefix_1instr_bf16~prefix_1instr_fp32": [5, 6]}
    short = bf16_targets(rows(5.99, 2.0, 3.0), cmp, True, vllm=True)
    assert not short["all_met"] and not short["checks"]["prefix_1instr_bf16/prefix_1instr_fp32"]["met"]
    assert not short["checks"]["prefix_5instr_bf16/vllm_apc_5instr_bf16"]["met"]  # 5.99 / 3 < 2
    # a second thread count's row at OUR count is the one compared
    t2 = bf16_targets(rows(6.0, 2.0, 3.0, tag="vllm_apc_t2"), cmp, True, vllm=True)
    assert t2["all_met"] and "prefix_1instr_bf16/vllm_apc_t2_1instr_bf16" in t2["checks"]
    # vLLM only at other threads, or refused: listed, not met, so not all met however fast bf16 is
    other = bf16_targets(rows(60.0, 2.0, 3.0, vllm_threads=1), cmp, False, vllm=True)
    gone = other["checks"]["prefix_1instr_bf16/vllm_apc_1instr_bf16"]
    assert gone["ratio"] is None and not gone["met"] and "our 2 threads (vLLM ran at [1])" in gone["missing"]
    assert not other["all_met"] and not other["applies"]
    refused = bf16_targets({**rows(60.0, 2.0), "vllm_refused": {"vllm_apc_bf16": "dtype not supported"}}, cmp,
                           True, vllm=True)
    assert not refused["all_met"]
    assert refused["checks"]["prefix_5instr_bf16/vllm_apc_5instr_bf16"]["missing"] == \
        "vLLM refused bfloat16: dtype not supported"
    # without --vllm: the two bf16/fp32 checks alone; without both dtypes' rows: nothing to check
    alone = bf16_targets(rows(6.0, 2.0), cmp, True, vllm=False)
    assert set(alone["checks"]) == {"prefix_1instr_bf16/prefix_1instr_fp32", "prefix_5instr_bf16/prefix_5instr_fp32"}
    assert bf16_targets({"methods": {"prefix_1instr_bf16": {"prompts_per_s": 1.0, "threads": 1}}}, {},
                        True, vllm=False) is None
    print_targets(other)  # prints the NOT checked line without failing


def test_bench_judge_dtypes_refused():
    """A malformed --dtypes list is one argparse error, before any model loads."""
    for bad in ("float32,float32", "float32,fp8"):
        proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_judge.py"), "--dtypes", bad],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and f"--dtypes {bad!r}: give distinct dtypes from" in proc.stderr


def test_bench_profile_json(tmp_path, shared_data, tiny_llama):
    """scripts/bench_profile.py at tiny sizes: the prefix engine's self-CPU time by op category,
    the categories adding up to the profiled total, the matmuls and attention among them."""
    out = tmp_path / "profile.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_profile.py"), "--model", "tiny:llama", "--docs", "1",
         "--candidates", "2", "--threads", "1", "--data-dir", str(shared_data), "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(out.read_text())
    assert got["prompts"] == 5 * 2 and got["seconds"] > 0 and got["threads"] == 1
    cats = got["categories"]
    assert abs(sum(cats.values()) - got["self_cpu_s"]) < 1e-6 * max(1.0, got["self_cpu_s"])
    assert cats["matmul (aten::mm/addmm/bmm/matmul)"] > 0 and cats["attention (SDPA kernels)"] > 0
    assert "by category:" in proc.stdout and "aten::mm" in proc.stdout


def test_bench_run_json_line(tmp_path, shared_data, tiny_llama):
    """scripts/bench_run.py at tiny sizes: the run vs engine-only rows, the epoch in one call vs
    per instruction (fewer tokens, decisions equal), bf16 vs fp32 decisions."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_run.py"), "--model", "tiny:llama", "--docs", "1",
         "--candidates", "4", "--chunk", "4", "--epoch-candidates", "3", "--dtypes", "--dtype-docs", "1",
         "--data-dir", str(shared_data)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = _last_json(proc.stdout)
    rows = line["judge"]["rows"]
    shipped, before = rows["run: shipped (one streamed call)"], rows["run: before (4 requests per call)"]
    assert shipped["prompts"] == 13 and shipped["tokens"] < before["tokens"] and shipped["x_trie"] <= 1.05
    assert all(r["max_dp"] < 1e-4 and r["prompts_per_s"] > 0 for r in rows.values())
    epoch = line["epoch"]
    assert epoch["one call per epoch"]["tokens"] < epoch["one call per instruction"]["tokens"]
    assert epoch["decisions_equal"][0] == epoch["decisions_equal"][1] == 5 * 6
    for task in ("summeval", "newsroom"):
        assert line["dtypes"][task]["pairs"] == 12 and line["dtypes"][task]["max_dp"] < 0.05
        assert f"| {task} | 12 |" in proc.stdout


@pytest.mark.slow
@pytest.mark.vllm
def test_gpu_check_dry_run(tmp_path, shared_data, tiny_llama):
    """The GPU script is rarely run on a GPU: its CPU dry run keeps it working."""
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--dry-run", "--data-dir", str(shared_data),
         "--tokenizer", str(tiny_llama), "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    has_vllm = importlib.util.find_spec("vllm") is not None
    assert proc.returncode == (0 if has_vllm else 3), proc.stderr[-2000:]  # 3: partial (vLLM not run)
    line = _last_json(proc.stdout)
    assert line["ok"] is has_vllm and json.loads(out.read_text()) == line
    assert line["status"] == ("ok" if has_vllm else "partial")
    assert {"llama_packed_float32", "llama_hf_float32", "mistral_packed_bfloat16"} <= set(line["devices"])
    assert line["prefix"]["float32"]["tokens_prefix"] < line["prefix"]["float32"]["tokens_plain"]
    assert line["bench"]["all_decisions_equal"] in (True, False)
    vllm = line["vllm"]  # vLLM's CPU build here: fp32 to 1e-4, every decision equal
    assert vllm == {"not_run": "not installed"} if not has_vllm else set(vllm) == {"llama3_vllm_float32"}
    assert all(v["ok"] for v in vllm.values()) if has_vllm else "vLLM: NOT RUN (not installed)" in proc.stdout
    assert line["bench"]["agree"]["batched_hf~batched"][0] == line["bench"]["agree"]["batched_hf~batched"][1]


@pytest.mark.slow
@pytest.mark.vllm
def test_bench_judge_vllm_columns(tmp_path, shared_data):
    """`--vllm` adds vLLM without and with prefix caching on both workloads, decisions compared
    (tiny Llama-3-vocabulary model: head size 32, which vLLM's CPU attention runs)."""
    pytest.importorskip("vllm", reason="vLLM is not installed (README: Installs)")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_judge.py"), "--model", "tiny:llama3", "--docs", "1",
         "--candidates", "3", "--batch-size", "4", "--threads", "1", "--skip-official", "--peak-size", "512", "--vllm",
         "--vllm-threads", "1,2", "--data-dir", str(shared_data), "--out", str(out)],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = _last_json(proc.stdout)
    methods = line["methods"]
    assert {"vllm_1instr", "vllm_5instr", "vllm_apc_1instr", "vllm_apc_5instr"} <= set(methods)
    assert methods["vllm_apc_5instr"]["prompts"] == methods["prefix_5instr"]["prompts"] == 30
    assert methods["vllm_1instr"]["prefix_hit_rate"] == 0 < methods["vllm_apc_5instr"]["prefix_hit_rate"]
    assert methods["vllm_apc_5instr"]["tokens_processed"] < methods["vllm_5instr"]["tokens_processed"]
    assert line["vllm_settings"]["vllm_apc"]["enable_prefix_caching"] is True
    for key in ("batched~vllm_1instr", "batched~vllm_apc_1instr", "prefix_5instr~vllm_5instr",
                "prefix_5instr~vllm_apc_5instr"):
        same, n = line["agree"][key]
        assert same == n and line["max_abs_dp"][key] < 1e-4
    # A second thread count adds vLLM with prefix caching only, at that count, compared the same way.
    assert {"vllm_apc_t2_1instr", "vllm_apc_t2_5instr"} <= set(methods) and "vllm_t2_1instr" not in methods
    assert {tag: st["threads"] for tag, st in line["vllm_settings"].items()} == {
        "vllm": 1, "vllm_apc": 1, "vllm_apc_t2": 2}
    assert line["agree"]["prefix_5instr~vllm_apc_t2_5instr"] == [30, 30]
    assert set(line["ours_over_vllm"]) == {"prefix_1instr/vllm_1instr", "prefix_5instr/vllm_5instr",
                                           "prefix_1instr/vllm_apc_1instr", "prefix_5instr/vllm_apc_5instr",
                                           "prefix_1instr/vllm_apc_t2_1instr", "prefix_5instr/vllm_apc_t2_5instr"}
    assert "prompts/s prefix_5instr/vllm_apc_t2_5instr:" in proc.stdout and "vLLM 2, vLLM eager)" in proc.stdout
    assert {st["enforce_eager"] for st in line["vllm_settings"].values()} == {True}  # backend=vllm's CPU default


@pytest.mark.slow
@pytest.mark.vllm
def test_bench_judge_vllm_dtypes(tmp_path, shared_data):
    """`--dtypes float32,bfloat16 --vllm`: vLLM with prefix caching in each dtype at our thread
    count (no --vllm-threads given), ours over vLLM per dtype, each vLLM row against its fp32 row."""
    pytest.importorskip("vllm", reason="vLLM is not installed (README: Installs)")
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_judge.py"), "--model", "tiny:llama3", "--docs", "1",
         "--candidates", "3", "--batch-size", "4", "--threads", "1", "--skip-official", "--peak-size", "512",
         "--dtypes", "float32,bfloat16", "--vllm", "--data-dir", str(shared_data)],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = _last_json(proc.stdout)
    methods = line["methods"]
    settings = {t: (v["dtype"], v["threads"], v["enable_prefix_caching"]) for t, v in line["vllm_settings"].items()}
    assert settings == {"vllm_apc_fp32": ("float32", 1, True), "vllm_apc_bf16": ("bfloat16", 1, True)}
    assert not any(name.startswith("vllm_1instr") or name.startswith("vllm_5instr") for name in methods)
    for sfx, dtype in (("fp32", "float32"), ("bf16", "bfloat16")):
        for w in ("1instr", "5instr"):
            v = methods[f"vllm_apc_{w}_{sfx}"]
            assert v["dtype"] == dtype and v["threads"] == methods[f"prefix_{w}_{sfx}"]["threads"] == 1
            key = f"prefix_{w}_{sfx}/vllm_apc_{w}_{sfx}"
            ratio = line["ours_over_vllm"][key]
            assert ratio == pytest.approx(methods[f"prefix_{w}_{sfx}"]["prompts_per_s"] / v["prompts_per_s"], rel=1e-12)
            assert f"prompts/s {key}: {ratio:.2f}x (threads: ours 1, vLLM 1, vLLM eager)" in proc.stdout
        assert line["agree"][f"prefix_5instr_{sfx}~vllm_apc_5instr_{sfx}"][1] == 30
    s = line["dtype_vs_reference"]["vllm_apc_5instr_bf16~vllm_apc_5instr_fp32"]
    assert s["agree"][1] == 30 and 0 < s["max_abs_dp"] < 0.05
    assert "vllm_apc_5instr_bf16/vllm_apc_5instr_fp32" in line["dtype_speedup"] and "vllm_refused" not in line
    # issue #22's targets, checked on the rows above and printed, whichever way they come out here
    from harness.judges.cpu import this_cpu_fast_bf16

    t = line["bf16_targets"]
    assert t["cpu_fast_bf16"] is this_cpu_fast_bf16() and t["applies"] is this_cpu_fast_bf16()
    assert set(t["checks"]) == {f"prefix_{w}_bf16/{b}_{w}_{s}" for w in ("1instr", "5instr")
                                for b, s in (("prefix", "fp32"), ("vllm_apc", "bf16"))}
    for key, c in t["checks"].items():
        ours, theirs = key.split("/")
        assert c["ratio"] == pytest.approx(methods[ours]["prompts_per_s"] / methods[theirs]["prompts_per_s"], rel=1e-12)
        assert c["met"] == (c["ratio"] >= c["need"]) and c["need"] == (3.0 if theirs.startswith("prefix") else 2.0)
        assert f"  {key}: {c['ratio']:.3f}x, target >= {c['need']:g}x: {'met' if c['met'] else 'NOT met'}" in proc.stdout
    assert t["all_met"] == all(c["met"] for c in t["checks"].values())
    assert f"  all targets met: {'yes' if t['all_met'] else 'no'}" in proc.stdout
    assert t["prefix_decisions_bf16_vs_fp32"]["prefix_5instr_bf16~prefix_5instr_fp32"][1] == 30


def test_bench_vllm_thread_counts_refused():
    """A malformed --vllm-threads list is one argparse error, before any model loads."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_judge.py"), "--vllm", "--vllm-threads", "2,2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--vllm-threads '2,2': give distinct positive counts" in proc.stderr


def test_bench_numerics_on_the_tiny_model(tmp_path, tiny_llama):
    """scripts/bench_numerics.py as typed (tiny model, 6 SummEval pairs): one row per task and bf16
    head, the float32 head's A-B logit differences off the bf16 lattice, the JSON = the table."""
    out = tmp_path / "numerics.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_numerics.py"), "--model", "tiny:llama",
                           "--pairs", "6", "--tasks", "summeval", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(out.read_text())
    rows = {r["judge"]: r for r in got["rows"]}
    assert set(rows) == {"bf16 old head (bf16 logits)", "bf16 fp32 head"} and got["nproc"] and got["cpu"]
    new, old = rows["bf16 fp32 head"], rows["bf16 old head (bf16 logits)"]
    assert new["pairs"] == old["pairs"] == 6 and new["logit_step"] is None and new["share_on_bf16_lattice"] <= 1 / 6
    assert old["share_on_bf16_lattice"] > new["share_on_bf16_lattice"]  # the lattice check fires on bf16 logits
    assert f"{new['max_abs_dp']:8.4f}" in proc.stdout and got["date"] in proc.stdout


@pytest.mark.slow
@pytest.mark.vllm
def test_bench_peer_medians_and_ratios(tmp_path, shared_data):
    """scripts/bench_peer.py as typed, at tiny sizes, the eager engine only (a compiled one spends
    ~1 min compiling): ours and vLLM with prefix caching timed --rounds times each, every median the
    median of its rounds, ours/vLLM their quotient, every decision of vLLM's compared with ours."""
    import statistics

    pytest.importorskip("vllm", reason="vLLM is not installed (README: Installs)")
    out = tmp_path / "peer.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_peer.py"), "--model", "tiny:llama3", "--docs", "1",
         "--candidates", "2", "--rounds", "2", "--threads", "1", "--vllm-modes", "eager",
         "--data-dir", str(shared_data), "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = _last_json(proc.stdout)
    assert json.loads(out.read_text()) == line and line["threads"] == 1 and line["rounds"] == 2
    assert set(line["rows"]) == {"prefix_1instr_float32", "prefix_5instr_float32"}
    for key, row in line["rows"].items():
        assert len(row["ours_rounds_s"]) == 2 and row["ours_s"] == statistics.median(row["ours_rounds_s"])
        [(mode, peer)] = row["vllm"].items()
        assert mode == "eager" and peer["enforce_eager"] is True and len(peer["rounds_s"]) == 2
        assert peer["median_s"] == statistics.median(peer["rounds_s"])
        assert peer["ours_over_vllm"] == pytest.approx(peer["median_s"] / row["ours_s"])
        assert peer["agree"] == [row["prompts"]] * 2 and peer["max_abs_dp"] < 1e-4
        assert f"{peer['ours_over_vllm']:.2f}x" in proc.stdout and key in proc.stdout
        # The roofline: a floor below what ours took (a floor above it would be no floor), and the
        # ceiling vLLM's median over it.
        assert 0 < row["floor_s"] < row["ours_s"] and row["ours_of_roofline"] == row["floor_s"] / row["ours_s"]
        assert peer["ceiling"] == pytest.approx(peer["median_s"] / row["floor_s"])
        assert f"{peer['ceiling']:.2f}x" in proc.stdout
    assert line["rows"]["prefix_5instr_float32"]["prompts"] == 5 * 2


def test_floor_flops_is_torchs_count_of_the_engines_matmuls(shared_data, tiny_llama, monkeypatch):
    """bench_common's roofline floor (bench_peer) against torch's own count of matmul FLOPs
    (FlopCounterMode; mm and bmm):
    - the prefix engine (torch kernels, float32) scoring a workload finishes more rows than there
      are prompts (interior trie rows get a last token too): given those rows as heads, floor_flops
      is EXACTLY the counted mm FLOPs; given the prompts, below it (a floor). Negative controls: the
      naive every-token count overshoots; leaving out the head or the last layer's sparing misses.
    - attention: HF's eager attention over one row of n tokens multiplies model_dims' per-pair
      FLOPs times n^2 (the full square; floor_flops counts the causal half, a floor).
    - trie_work on rows made by hand: distinct prefixes, distinct prompts, causal pairs."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    sys.path.insert(0, str(REPO / "scripts"))
    from bench_common import floor_flops, instructions, load_documents, model_dims, workload

    from harness.judges.hf import HFJudge
    from harness.judges.packed import PackedLlama
    from harness.judges.prefix import trie_work

    def counted(mode, op):
        return sum(v for k, v in mode.get_flop_counts()["Global"].items() if str(k) == op)

    rows = []
    forward = PackedLlama.forward
    monkeypatch.setattr(PackedLlama, "forward", lambda self, segments, pool=None: (
        rows.append(len(segments)), forward(self, segments, pool))[1])
    docs, _ = load_documents(shared_data, 1, 2)
    judge = HFJudge(str(tiny_llama), device="cpu", prefix_reuse=True, kernels="torch")
    rows.clear()
    with FlopCounterMode(display=False) as mode:
        judge.score_pairs(workload(docs, instructions(shared_data)[:2]))
    mm = counted(mode, "aten.mm")
    work = {"tokens": judge.tokens_processed, "heads": sum(rows), "pairs": 0}
    assert judge.prompts == 4 < work["heads"] and floor_flops(judge.model, work) == mm
    assert floor_flops(judge.model, {**work, "heads": judge.prompts}) < mm
    assert floor_flops(judge.model, {**work, "heads": work["tokens"]}) > mm  # no sparing: overshoots
    body, head, per_pair = model_dims(judge.model)
    assert floor_flops(judge.model, work) - 2 * head * work["heads"] != mm  # the head is in the count
    layers = judge.model.config.num_hidden_layers  # attention: every layer's pairs but the last's
    assert floor_flops(judge.model, {"tokens": 0, "heads": 0, "pairs": 1000}) == per_pair * (layers - 1) / layers * 1000

    n = 20
    judge.model.set_attn_implementation("eager")
    with FlopCounterMode(display=False) as mode, torch.inference_mode():
        judge.model(torch.arange(1, n + 1)[None])
    assert counted(mode, "aten.bmm") == per_pair * n * n
    assert counted(mode, "aten.mm") == 2 * (body + head) * n

    fp32 = floor_flops(judge.model, work)  # a bf16 model's head runs in float32: left out of its floor
    assert floor_flops(judge.model.to(torch.bfloat16), work) == fp32 - 2 * head * work["heads"]

    assert trie_work([[1, 2, 3], [1, 2, 4, 5], [1, 2, 3], [7]]) == {
        "tokens": 3 + 2 + 1, "heads": 3, "pairs": (1 + 2 + 3) + (3 + 4) + 1}
