"""The vLLM columns of scripts/bench_judge.py (`--vllm`): the same prompts through VLLMJudge,
without and with automatic prefix caching, on the one- and five-instruction workloads.

One engine per setting, started once, warmed on two prompts, its prefix cache emptied before each
timed workload (so the five-instruction run does not reuse the one-instruction run's KV), stopped
before the next engine starts. `tokens` counts the prompt tokens vLLM computed (those not served
from its prefix cache); the attention term counts every causal pair (an upper bound with APC).
"""

from __future__ import annotations

import sys

from bench_judge import causal_pairs, measure, model_dims, stats

from harness.judges.prefix import trie_size


def vllm_judge(args, path: str, prefix_caching: bool, threads: int | None):
    from harness.judges.vllm import VLLMJudge

    return VLLMJudge(path, enable_prefix_caching=prefix_caching, max_model_len=args.vllm_max_len,
                     cpu_threads=threads)


def engines(thread_counts: list[int | None]) -> list[tuple[str, bool, int | None]]:
    """(tag, prefix caching, threads) per engine: without and with prefix caching at the first
    thread count, then with prefix caching only at each further one (tag `vllm_apc_t{n}`)."""
    first, *rest = thread_counts
    return [("vllm", False, first), ("vllm_apc", True, first)] + [(f"vllm_apc_t{n}", True, n) for n in rest]


def run_vllm(args, judge, path: str, w1: list, w5: list, peaks: list[float]) -> dict:
    """{"methods", "decisions", "p_a", "settings"} for vllm_{1,5}instr and vllm_apc_{1,5}instr
    (and vllm_apc_t{n}_{1,5}instr for further thread counts)."""
    dims = model_dims(judge.model)
    ids1, ids5 = judge.encode(w1), judge.encode(w5)
    out: dict = {"methods": {}, "decisions": {}, "p_a": {}, "settings": {}}
    for tag, apc, threads in engines(args.vllm_threads):
        vj = vllm_judge(args, path, apc, threads)
        assert vj.encode(w1) == ids1, "vLLM must score the very token ids the other methods score"
        vj.score_pairs(w1[:2])  # warm-up
        out["settings"][tag] = vj.engine_settings
        for suffix, reqs, ids in (("1instr", w1, ids1), ("5instr", w5, ids5)):
            vj.llm.reset_prefix_cache()
            before = (vj.prompt_tokens, vj.cached_tokens)
            scores, sec, peak = measure(f"{tag}_{suffix}", lambda: vj.score_pairs(reqs), judge, peaks)
            computed = (vj.prompt_tokens - before[0]) - (vj.cached_tokens - before[1])
            work = {"tokens": computed, "heads": len(reqs), "pairs": causal_pairs(ids)}
            name = f"{tag}_{suffix}"
            out["methods"][name] = stats(len(reqs), sec, work, trie_size(ids), dims, peak)
            out["methods"][name]["prefix_hit_rate"] = (vj.cached_tokens - before[1]) / (vj.prompt_tokens - before[0])
            out["decisions"][name] = [(s.p_a > 0.5) - (s.p_a < 0.5) for s in scores]
            out["p_a"][name] = [s.p_a for s in scores]
        vj.close()
        print(f"  vLLM engine {tag} ({'with' if apc else 'without'} prefix caching, "
              f"{vj.engine_settings.get('threads')} threads) stopped", file=sys.stderr, flush=True)
    return out
