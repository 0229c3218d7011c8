"""The vLLM columns of scripts/bench_judge.py (`--vllm`): the same prompts through VLLMJudge,
without and with automatic prefix caching, on the one- and five-instruction workloads.

One engine per setting, each in its own spawned process (an in-process CPU engine started after
another one in the same process computed at 1.38 instead of 2.13 prompt/s with 2 threads: measured,
not explained), started once, warmed on two prompts, its prefix cache emptied before each timed
workload (so the five-instruction run does not reuse the one-instruction run's KV), stopped before
the next engine starts. The matmul peak around each method is measured in that process. `tokens`
counts the prompt tokens vLLM computed (those not served from its prefix cache); the attention term
counts every causal pair (an upper bound with APC).
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
from types import SimpleNamespace

from bench_common import causal_pairs, decisions, dtype_name, measure, model_dims, stats

from harness.judges.prefix import trie_size


def engines(thread_counts: list[int | None], apc_only: bool = False) -> list[tuple[str, bool, int | None]]:
    """(tag, prefix caching, threads) per engine: without (unless `apc_only`) and with prefix
    caching at the first thread count, then with prefix caching only at each further one (tag
    `vllm_apc_t{n}`)."""
    first, *rest = thread_counts
    return ([] if apc_only else [("vllm", False, first)]) + [("vllm_apc", True, first)] + [
        (f"vllm_apc_t{n}", True, n) for n in rest]


def run_vllm(args, judge, path: str, w1: list, w5: list, peaks: list[float], plan: list | None = None,
             refusable: bool = False) -> dict:
    """{"methods", "decisions", "p_a", "settings", "refused"} for vllm_{1,5}instr and
    vllm_apc_{1,5}instr (and vllm_apc_t{n}_{1,5}instr for further thread counts), or the engines of
    `plan` (see `engines`), in the judge's dtype; each engine in a fresh process. An engine that
    fails raises, unless `refusable`: then its error line is kept in "refused" and the run goes on."""
    job = {"path": path, "w1": w1, "w5": w5, "ids1": judge.encode(w1), "ids5": judge.encode(w5),
           "dims": model_dims(judge.model), "max_len": args.vllm_max_len, "torch_threads": args.threads,
           "device": judge.device, "dtype": dtype_name(judge),
           "peak_n": getattr(args, "peak_size", None),
           "enforce_eager": False if getattr(args, "vllm_compile", False) else None,  # None: the backend's default
           "rounds": getattr(args, "vllm_rounds", 1)}
    out: dict = {"methods": {}, "decisions": {}, "p_a": {}, "settings": {}, "refused": {}}
    spawn = multiprocessing.get_context("spawn")
    for tag, apc, threads in plan or engines(args.vllm_threads):
        receive, send = spawn.Pipe(duplex=False)
        child = spawn.Process(target=_engine_child, args=(send, job, tag, apc, threads, peaks[-1]))
        child.start()
        send.close()
        try:
            part = receive.recv()
        except EOFError:
            part = None
        child.join()
        if not isinstance(part, dict) and refusable:
            out["refused"][tag] = str(part or f"no result (exit code {child.exitcode})")
            print(f"  vLLM engine {tag} refused: {out['refused'][tag]}", file=sys.stderr, flush=True)
            continue
        if not isinstance(part, dict):
            raise RuntimeError(f"the vLLM engine {tag} failed in its process (exit code {child.exitcode}): "
                               f"{part or 'no result'}")
        peaks.extend(part.pop("peaks"))
        for key, value in part.items():
            out[key].update(value)
        print(f"  vLLM engine {tag} ({'with' if apc else 'without'} prefix caching, "
              f"{part['settings'][tag].get('threads')} threads) stopped", file=sys.stderr, flush=True)
    return out


def _engine_child(send, *job) -> None:
    try:
        send.send(engine_run(*job))
    except BaseException as e:  # the parent raises it with the engine's name
        send.send(f"{type(e).__name__}: {e}")
        raise
    finally:
        send.close()


def engine_run(job: dict, tag: str, apc: bool, threads: int | None, last_peak: float) -> dict:
    """One engine's two workloads, timed (runs in a spawned process)."""
    import torch

    from harness.judges.vllm import VLLMJudge

    if job["torch_threads"]:
        torch.set_num_threads(job["torch_threads"])  # the matmul peak runs on the parent's count
    w1, w5 = job["w1"], job["w5"]
    vj = VLLMJudge(job["path"], dtype=job["dtype"], enable_prefix_caching=apc, max_model_len=job["max_len"],
                   cpu_threads=threads, enforce_eager=job.get("enforce_eager"))
    assert vj.encode(w1) == job["ids1"], "vLLM must score the very token ids the other methods score"
    vj.score_pairs(w1[:2])  # warm-up
    timer = SimpleNamespace(device=job["device"], torch_dtype=getattr(torch, job["dtype"]))
    peaks = [last_peak]
    out: dict = {"methods": {}, "decisions": {}, "p_a": {}, "settings": {tag: vj.engine_settings}}
    for suffix, reqs, ids in (("1instr", w1, job["ids1"]), ("5instr", w5, job["ids5"])):
        rounds = []
        for _ in range(job["rounds"]):  # several: the median (scripts/bench_peer.py)
            vj.llm.reset_prefix_cache()
            before = (vj.prompt_tokens, vj.cached_tokens)
            scores, sec, peak = measure(f"{tag}_{suffix}", lambda: vj.score_pairs(reqs), timer, peaks, job["peak_n"])
            rounds.append(sec)
        sec = statistics.median(rounds)
        computed = (vj.prompt_tokens - before[0]) - (vj.cached_tokens - before[1])
        work = {"tokens": computed, "heads": len(reqs), "pairs": causal_pairs(ids)}
        name = f"{tag}_{suffix}"
        out["methods"][name] = stats(len(reqs), sec, work, trie_size(ids), job["dims"], peak)
        out["methods"][name]["prefix_hit_rate"] = (vj.cached_tokens - before[1]) / (vj.prompt_tokens - before[0])
        out["methods"][name]["rounds_s"] = rounds
        out["methods"][name].update(dtype=job["dtype"], threads=vj.engine_settings.get("threads"),
                                    enforce_eager=vj.engine_settings.get("enforce_eager"))
        out["decisions"][name] = decisions(scores)
        out["p_a"][name] = [s.p_a for s in scores]
    vj.close()
    out["peaks"] = peaks[1:]
    return out
