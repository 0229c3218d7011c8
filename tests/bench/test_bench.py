"""`harness-bench` as a user types it (`python -m harness.bench ...`, tiny sizes): each subcommand
runs end to end and its one JSON line holds every figure its table printed."""

from __future__ import annotations

import importlib.util
import json
import statistics

import pytest
from helpers.cli import bench_json, run_bench

TINY = ["--docs", "1", "--candidates", "3", "--threads", "1", "--peak-size", "512"]


def _rows_in_table(stdout: str, names) -> dict[str, list[str]]:
    """The printed table's cells by row name."""
    return {
        cells[0]: cells for cells in map(str.split, stdout.splitlines()) if cells[:1] and cells[0] in names
    }


def _check_timing(row: dict, rounds: int) -> None:
    """A row's time is the median of its rounds; its roofline share the floor over that."""
    assert len(row["rounds_s"]) == rounds and row["median_s"] == statistics.median(row["rounds_s"])
    assert row["best_s"] == min(row["rounds_s"]) and row["prompts_per_s"] == row["prompts"] / row["median_s"]
    # A floor above what an engine took would be no floor.
    assert 0 < row["floor_s"] < row["median_s"] and row["of_roofline"] == row["floor_s"] / row["median_s"]


@pytest.mark.slow
def test_speed_of_the_transformers_engines(tmp_path, shared_data, tiny_llama):
    out = tmp_path / "speed.json"
    proc = run_bench(
        [
            "speed",
            "--model",
            "tiny:llama",
            "--engines",
            "official,batched-hf,batched,prefix",
            "--reference",
            "batched",
            "--versus",
            "official,batched",
            "--batch-sizes",
            "4",
            "--rounds",
            "2",
            *TINY,
            "--data-dir",
            str(shared_data),
            "--json",
            str(out),
        ],
        tmp_path,
    )
    line = bench_json(proc)
    assert json.loads(out.read_text()) == line
    rows = line["rows"]
    assert set(rows) == {"official_1instr_float32"} | {
        f"{e}_{w}_float32" for e in ("batched-hf", "batched", "prefix") for w in ("1instr", "5instr")
    }
    table = _rows_in_table(proc.stdout, rows)
    for name, r in rows.items():
        _check_timing(r, 2)
        assert f"{r['prompts_per_s']:.3f}" in table[name]  # the JSON holds what the table printed
        assert r["versus"]["batched"] == pytest.approx(
            r["prompts_per_s"] / rows[f"batched_{r['workload']}_float32"]["prompts_per_s"], rel=1e-12
        )
        assert r["tokens_over_min"] == r["work"]["tokens"] / line["trie_work"][r["workload"]]["tokens"]
    assert all("official" in r["versus"] for r in rows.values() if r["workload"] == "1instr")
    assert rows["prefix_5instr_float32"]["prompts"] == 5 * rows["batched_1instr_float32"]["prompts"] == 30
    for w in ("1instr", "5instr"):
        assert 1.0 <= rows[f"prefix_{w}_float32"]["tokens_over_min"] <= 1.2
        assert (
            rows[f"batched_{w}_float32"]["work"]["tokens"]
            == rows[f"batched-hf_{w}_float32"]["work"]["tokens"]
        )
        assert rows[f"batched_{w}_float32"]["batch_size"] == 4
        # The engines agree on every decision; the official read-out is compared, not required
        # equal (a random tiny model rarely generates an A/B token).
        for e in ("batched-hf", "prefix"):
            ref = rows[f"{e}_{w}_float32"]["vs_reference"]
            assert ref["row"] == f"batched_{w}_float32" and ref["agree"][0] == ref["agree"][1]
            assert ref["max_abs_dp"] < 1e-4
    assert rows["official_1instr_float32"]["vs_reference"]["row"] == "batched_1instr_float32"
    assert rows["official_1instr_float32"]["kernels"] == "torch (HF's generate)"
    assert line["all_decisions_equal"] is True and line["over_the_floor"] == []
    rate = line["gemm_rate"]["float32"]
    assert rate["used"] == max(rate["square"], rate["linear"]) > 0 and rate["from"] in ("square", "linear")


def test_speed_in_two_dtypes(tmp_path, shared_data, tiny_llama):
    """`--dtypes float32,bfloat16`: every row in both dtypes, each bf16 row compared with its float32
    twin on the same prompts (decisions, |dP(A)|, prompts/s), in the table's lines and the JSON;
    each dtype's engines still compared among themselves."""
    proc = run_bench(
        [
            "speed",
            "--model",
            "tiny:llama",
            "--engines",
            "batched-hf,batched,prefix",
            "--reference",
            "batched",
            "--batch-sizes",
            "4",
            "--rounds",
            "1",
            "--dtypes",
            "float32,bfloat16",
            *TINY,
            "--data-dir",
            str(shared_data),
        ],
        tmp_path,
    )
    line = bench_json(proc)
    rows = line["rows"]
    assert line["dtypes"] == ["float32", "bfloat16"] and line["threads"] == 1
    ours = ("batched-hf", "batched", "prefix")
    assert set(rows) == {f"{e}_{w}_{d}" for e in ours for w in ("1instr", "5instr") for d in line["dtypes"]}
    assert {d: r["used"] > 0 for d, r in line["gemm_rate"].items()} == {"float32": True, "bfloat16": True}
    for name, r in rows.items():
        assert r["dtype"] == name.rsplit("_", 1)[1]
        if r["dtype"] == "float32":
            assert "vs_dtype" not in r
            continue
        twin = rows[name.replace("bfloat16", "float32")]
        d = r["vs_dtype"]
        assert d["row"] == twin["name"] and d["agree"][1] == r["prompts"] == twin["prompts"]
        assert d["speedup"] == pytest.approx(r["prompts_per_s"] / twin["prompts_per_s"], rel=1e-12)
        # bf16 really ran: its P(A)s differ from float32's, by rounding-sized amounts
        assert 0 < d["mean_abs_dp"] <= d["max_abs_dp"] < 0.05
        assert (
            f"{name} against {twin['name']}: decisions {d['agree'][0]}/{d['agree'][1]} equal, max |dP(A)| "
            f"{d['max_abs_dp']:.2e}, mean {d['mean_abs_dp']:.2e}, prompts/s {d['speedup']:.2f}x"
        ) in proc.stdout
    for d in line["dtypes"]:
        assert rows[f"prefix_1instr_{d}"]["vs_reference"]["agree"] == [6, 6]
        assert rows[f"prefix_5instr_{d}"]["vs_reference"]["agree"] == [30, 30]


def test_a_five_instruction_row_is_compared_on_its_instruction_0_prompts():
    """Against a reference that ran one instruction only (the official read-out), a five-instruction
    row's every fifth P(A) is compared (pair-major workloads); negative control: the P(A)s of
    another instruction differ in decisions."""
    from harness.bench.speed import _reference

    ref = [0.2, 0.7, 0.4, 0.9]
    five = [p for q in ref for p in (q, 0.6, 0.6, 0.6, 0.6)]
    rows = {"official_1instr_float32": {"name": "official_1instr_float32", "p_a": ref}}
    row = {"label": "prefix", "workload": "5instr", "dtype": "float32", "p_a": five}
    name, got_ref, got = _reference(rows, "official", row)
    assert name == "official_1instr_float32(instr0)" and got_ref == ref and got == ref
    assert _reference(rows, "official", {**row, "p_a": five[1:] + [0.6]})[2] != ref
    assert _reference(rows, "official", {**row, "dtype": "bfloat16"}) is None  # no reference in that dtype


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--dtypes", "float32,float32"],
            "--dtypes: 'float32,float32': give distinct names from float32, bfloat16",
        ),
        (
            ["--dtypes", "float32,fp8"],
            "argument --dtypes: 'float32,fp8': give distinct names from float32, bfloat16",
        ),
        (
            ["--engines", "prefix,vllm"],
            "argument --engines: 'prefix,vllm': give distinct names from official",
        ),
        (["--threads", "0"], "argument --threads: '0': give an integer >= 1"),
        (["--batch-sizes", "8,x"], "argument --batch-sizes: '8,x': each item must be an integer >= 1"),
        (
            ["--engines", "prefix", "--versus", "vllm-eager"],
            "--reference/--versus vllm-eager: not in --engines prefix",
        ),
    ],
)
def test_bad_arguments_are_one_line_before_any_model_loads(tmp_path, args, message):
    proc = run_bench(["speed", *args], tmp_path, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_profile_json(tmp_path, shared_data, tiny_llama):
    """`profile` at tiny sizes: the prefix engine's self-CPU time by op category, the categories
    adding up to the profiled total, the matmuls and attention among them."""
    out = tmp_path / "profile.json"
    proc = run_bench(
        [
            "profile",
            "--model",
            "tiny:llama",
            "--docs",
            "1",
            "--candidates",
            "2",
            "--threads",
            "1",
            "--data-dir",
            str(shared_data),
            "--json",
            str(out),
        ],
        tmp_path,
    )
    assert bench_json(proc) == (got := json.loads(out.read_text()))
    assert got["prompts"] == 5 * 2 and got["median_s"] > 0 and got["profiled_s"] > 0 and got["threads"] == 1
    cats = got["categories"]
    assert abs(sum(cats.values()) - got["self_cpu_s"]) < 1e-6 * max(1.0, got["self_cpu_s"])
    assert cats["matmul (aten::mm/addmm/bmm/matmul)"] > 0 and cats["attention (SDPA kernels)"] > 0
    assert "by category:" in proc.stdout and "aten::mm" in proc.stdout


def test_run_path_json_line(tmp_path, shared_data, tiny_llama):
    """`run` at tiny sizes: the run as shipped does the bare engine's work and chunked calls more;
    the epoch in one call runs fewer tokens than one call per instruction, decisions equal."""
    proc = run_bench(
        [
            "run",
            "--model",
            "tiny:llama",
            "--docs",
            "1",
            "--candidates",
            "4",
            "--chunk",
            "4",
            "--epoch-candidates",
            "3",
            "--data-dir",
            str(shared_data),
        ],
        tmp_path,
    )
    line = bench_json(proc)
    rows = line["judge"]["rows"]
    shipped, before = rows["run: as shipped (one streamed call)"], rows["run: 4 requests per call"]
    assert shipped["prompts"] == 13 and shipped["tokens"] < before["tokens"] and shipped["x_trie"] <= 1.05
    assert all(
        r["max_abs_dp"] < 1e-4 and r["prompts_per_s"] > 0 and r["agree"][0] == 13 for r in rows.values()
    )
    epoch = line["epoch"]
    assert epoch["rows"]["one call per epoch"]["tokens"] < epoch["rows"]["one call per instruction"]["tokens"]
    assert epoch["agree"] == [5 * 6, 5 * 6] and epoch["max_abs_dp"] < 1e-4
    assert f"{shipped['x_trie']:.3f}" in proc.stdout and f"{epoch['speedup']:.2f}x" in proc.stdout


def test_numerics_on_the_tiny_model(tmp_path, tiny_llama, shared_data):
    """`numerics` (tiny model, 6 pairs of SummEval and of NewsRoom): one row per task and judge,
    the float32 head's A-B logit differences off the bf16 lattice, bf16 within rounding of float32,
    the JSON = the table."""
    out = tmp_path / "numerics.json"
    proc = run_bench(
        [
            "numerics",
            "--model",
            "tiny:llama",
            "--pairs",
            "6",
            "--data-dir",
            str(shared_data),
            "--json",
            str(out),
        ],
        tmp_path,
    )
    assert bench_json(proc) == (got := json.loads(out.read_text()))
    rows = {(r["task"], r["judge"]): r for r in got["rows"]}
    judges = {"float32", "bfloat16, bf16 head", "bfloat16"}
    assert set(rows) == {(t, j) for t in ("summeval", "newsroom") for j in judges}
    assert got["machine"]["nproc"] and got["machine"]["cpu"] and got["machine"]["date"] in proc.stdout
    for task in ("summeval", "newsroom"):
        ref, new, old = (rows[(task, j)] for j in ("float32", "bfloat16", "bfloat16, bf16 head"))
        assert ref["agree"] == [6, 6] and ref["max_abs_dp"] == 0
        assert (
            new["pairs"] == old["pairs"] == 6
            and new["logit_step"] is None
            and new["share_on_bf16_lattice"] <= 1 / 6
        )
        assert (
            old["share_on_bf16_lattice"] > new["share_on_bf16_lattice"]
        )  # the lattice check fires on bf16 logits
        assert 0 < new["max_abs_dp"] < 0.05 and new["agree"][1] == 6
        assert f"{new['max_abs_dp']:.4f}" in proc.stdout and new["prompts_per_s"] > 0


@pytest.mark.slow
@pytest.mark.vllm
def test_gpu_dry_run(tmp_path, shared_data, tiny_llama):
    """`gpu` is rarely run on a GPU: its CPU dry run keeps it working."""
    out = tmp_path / "gpu.json"
    proc = run_bench(
        [
            "gpu",
            "--dry-run",
            "--data-dir",
            str(shared_data),
            "--tokenizer",
            str(tiny_llama),
            "--json",
            str(out),
        ],
        tmp_path,
    )
    has_vllm = importlib.util.find_spec("vllm") is not None
    assert proc.returncode == (0 if has_vllm else 3), proc.stderr[-2000:]  # 3: partial (vLLM not run)
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line["ok"] is has_vllm and json.loads(out.read_text()) == line
    assert line["status"] == ("ok" if has_vllm else "partial")
    assert {"llama_packed_float32", "llama_hf_float32", "mistral_packed_bfloat16"} <= set(line["devices"])
    assert line["prefix"]["float32"]["tokens_prefix"] < line["prefix"]["float32"]["tokens_plain"]
    bench = line["bench"]
    assert bench["shape"] == "llama3-tiny" and bench["all_decisions_equal"] in (True, False)
    assert bench["rows"]["batched-hf_1instr_float32"]["vs_reference"]["agree"][0] == 6
    # SummEval's full run at the measured rates of the two transformers paths, beside the H200 floor
    projected = line["projection"]["paths"]
    assert set(projected) == {"prefix", "batched"} and line["projection"]["prompts"] == 24_000
    assert projected["prefix"]["prompts_per_s"] == bench["rows"]["prefix_1instr_float32"]["prompts_per_s"]
    assert sum(ln.startswith("projection: 24,000 SummEval prompts") for ln in proc.stdout.splitlines()) == 2
    vllm = line["vllm"]  # vLLM's CPU build here: fp32 to 1e-4, every decision equal
    assert vllm == {"not_run": "not installed"} if not has_vllm else set(vllm) == {"llama3_vllm_float32"}
    assert all(v["ok"] for v in vllm.values()) if has_vllm else "vLLM: NOT RUN (not installed)" in proc.stdout


@pytest.mark.slow
@pytest.mark.vllm
def test_speed_against_vllm(tmp_path, shared_data):
    """Ours against vLLM without and with prefix caching (tiny Llama-3-vocabulary model: head size
    32, which vLLM's CPU attention runs), each timed --rounds times: every median the median of
    its rounds, the ratios their quotients, every decision of vLLM's compared with ours."""
    pytest.importorskip("vllm", reason="vLLM is not installed (README: Installs)")
    proc = run_bench(
        [
            "speed",
            "--model",
            "tiny:llama3",
            "--engines",
            "prefix,batched,vllm-no-apc,vllm-eager",
            "--rounds",
            "2",
            *TINY,
            "--data-dir",
            str(shared_data),
        ],
        tmp_path,
        timeout=900,
    )
    line = bench_json(proc)
    rows = line["rows"]
    assert line["versus"] == ["vllm-no-apc", "vllm-eager"] and line["reference"] == "prefix"
    assert rows["vllm-eager_5instr_float32"]["prompts"] == rows["prefix_5instr_float32"]["prompts"] == 30
    hits = {name: r["prefix_hit_rate"] for name, r in rows.items() if name.startswith("vllm")}
    assert hits["vllm-no-apc_1instr_float32"] == hits["vllm-no-apc_5instr_float32"] == 0
    assert hits["vllm-eager_5instr_float32"] > 0
    assert (
        rows["vllm-eager_5instr_float32"]["work"]["tokens"]
        < rows["vllm-no-apc_5instr_float32"]["work"]["tokens"]
    )
    settings = line["vllm_settings"]
    assert set(settings) == {"vllm-no-apc_float32", "vllm-eager_float32"}
    assert settings["vllm-eager_float32"]["enable_prefix_caching"] is True
    assert not settings["vllm-no-apc_float32"]["enable_prefix_caching"]
    assert {s["enforce_eager"] for s in settings.values()} == {True}  # backend=vllm's CPU default
    assert {s["threads"] for s in settings.values()} == {1}  # equal threads
    for w in ("1instr", "5instr"):
        ours = rows[f"prefix_{w}_float32"]
        _check_timing(ours, 2)
        for e in ("vllm-no-apc", "vllm-eager", "batched"):
            r = rows[f"{e}_{w}_float32"]
            _check_timing(r, 2)
            assert r["vs_reference"]["agree"] == [r["prompts"]] * 2 and r["vs_reference"]["max_abs_dp"] < 1e-4
        for e in ("vllm-no-apc", "vllm-eager"):
            ratio = ours["versus"][e]
            assert ratio == pytest.approx(rows[f"{e}_{w}_float32"]["median_s"] / ours["median_s"])
            assert f"{ratio:.2f}" in _rows_in_table(proc.stdout, rows)[ours["name"]]


@pytest.mark.slow
@pytest.mark.vllm
def test_speed_against_vllm_in_two_dtypes(tmp_path, shared_data):
    """`--dtypes float32,bfloat16` with vLLM: its engine in each dtype at our threads, ours over it
    per dtype, its bf16 rows against its float32 rows."""
    pytest.importorskip("vllm", reason="vLLM is not installed (README: Installs)")
    proc = run_bench(
        [
            "speed",
            "--model",
            "tiny:llama3",
            "--engines",
            "prefix,vllm-eager",
            "--rounds",
            "1",
            "--dtypes",
            "float32,bfloat16",
            *TINY,
            "--data-dir",
            str(shared_data),
        ],
        tmp_path,
        timeout=900,
    )
    line = bench_json(proc)
    rows = line["rows"]
    settings = {
        k: (v["dtype"], v["threads"], v["enable_prefix_caching"]) for k, v in line["vllm_settings"].items()
    }
    assert settings == {
        "vllm-eager_float32": ("float32", 1, True),
        "vllm-eager_bfloat16": ("bfloat16", 1, True),
    }
    assert line["refused"] == {}
    for d in ("float32", "bfloat16"):
        for w in ("1instr", "5instr"):
            ours, theirs = rows[f"prefix_{w}_{d}"], rows[f"vllm-eager_{w}_{d}"]
            ratio = ours["prompts_per_s"] / theirs["prompts_per_s"]
            assert ours["versus"]["vllm-eager"] == pytest.approx(ratio, rel=1e-12)
            assert theirs["vs_reference"]["row"] == ours["name"]
            assert theirs["vs_reference"]["agree"][1] == ours["prompts"]
    s = rows["vllm-eager_5instr_bfloat16"]["vs_dtype"]
    assert s["row"] == "vllm-eager_5instr_float32" and s["agree"][1] == 30 and 0 < s["max_abs_dp"] < 0.05


def test_floor_flops_is_torchs_count_of_the_engines_matmuls(shared_data, tiny_llama, monkeypatch):
    """The roofline floor (harness.bench.measure.floor_flops) against torch's own count of matmul
    FLOPs (FlopCounterMode; mm and bmm):
    - the prefix engine (torch kernels, float32) scoring a workload finishes more rows than there
      are prompts (interior trie rows get a last token too): given those rows as heads, floor_flops
      is EXACTLY the counted mm FLOPs; given the prompts, below it (a floor). Negative controls: the
      naive every-token count overshoots; leaving out the head or the last layer's sparing misses.
    - attention: HF's eager attention over one row of n tokens multiplies model_dims' per-pair
      FLOPs times n^2 (the full square; floor_flops counts the causal half, a floor).
    - trie_work on rows made by hand: distinct prefixes, distinct prompts, causal pairs."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from harness.bench.measure import floor_flops, model_dims
    from harness.bench.workloads import documents, instructions, pair_workload
    from harness.judges.hf import HFJudge
    from harness.judges.packed import PackedLlama
    from harness.judges.prefix import trie_work

    def counted(mode, op):
        return sum(v for k, v in mode.get_flop_counts()["Global"].items() if str(k) == op)

    rows = []
    forward = PackedLlama.forward
    monkeypatch.setattr(
        PackedLlama,
        "forward",
        lambda self, segments, pool=None: (rows.append(len(segments)), forward(self, segments, pool))[1],
    )
    two_instructions = pair_workload(documents(shared_data, 1, 2), instructions(shared_data)[:2])
    judge = HFJudge(str(tiny_llama), device="cpu", prefix_reuse=True, kernels="torch")
    rows.clear()
    with FlopCounterMode(display=False) as mode:
        judge.score_pairs(two_instructions)
    mm = counted(mode, "aten.mm")
    work = {"tokens": judge.tokens_processed, "heads": sum(rows), "pairs": 0}
    assert judge.prompts == 4 < work["heads"] and floor_flops(judge.model, work) == mm
    assert floor_flops(judge.model, {**work, "heads": judge.prompts}) < mm
    assert floor_flops(judge.model, {**work, "heads": work["tokens"]}) > mm  # no sparing: overshoots
    body, head, per_pair = model_dims(judge.model)
    assert floor_flops(judge.model, work) - 2 * head * work["heads"] != mm  # the head is in the count
    layers = judge.model.config.num_hidden_layers  # attention: every layer's pairs but the last's
    assert (
        floor_flops(judge.model, {"tokens": 0, "heads": 0, "pairs": 1000})
        == per_pair * (layers - 1) / layers * 1000
    )

    n = 20
    judge.model.set_attn_implementation("eager")
    with FlopCounterMode(display=False) as mode, torch.inference_mode():
        judge.model(torch.arange(1, n + 1)[None])
    assert counted(mode, "aten.bmm") == per_pair * n * n
    assert counted(mode, "aten.mm") == 2 * (body + head) * n

    fp32 = floor_flops(judge.model, work)  # a bf16 model's head runs in float32: left out of its floor
    assert floor_flops(judge.model.to(torch.bfloat16), work) == fp32 - 2 * head * work["heads"]

    assert trie_work([[1, 2, 3], [1, 2, 4, 5], [1, 2, 3], [7]]) == {
        "tokens": 3 + 2 + 1,
        "heads": 3,
        "pairs": (1 + 2 + 3) + (3 + 4) + 1,
    }
