"""Benchmarks of the harness, one command: `harness-bench SUBCOMMAND` (= `python -m harness.bench`).

    harness-bench speed      # judging speed: our engines against vLLM, medians, the roofline floor
    harness-bench profile    # where the prefix engine's CPU time goes (torch.profiler, by op category)
    harness-bench numerics   # bf16 against float32: decisions, |dP(A)|, the bf16 logit lattice
    harness-bench run        # a run's judging path (request cache, streaming, a ZEPO epoch) against the bare engine
    harness-bench metrics    # what write_run and the bootstrap cost at paper scale, with an instant judge
    harness-bench gpu        # every GPU-side check in one call (imports torch and transformers only)
    harness-bench vllm-path  # a backend=vllm judge run against one LLM.generate call on the same token ids

Each subcommand module has `add_cli_args(parser)` and `main(args)` (as vLLM's `vllm bench`), prints
a table, then ONE line of JSON (`--json PATH` writes the same), and reuses the shared pieces:
`workloads` (what is judged), `engines` (what judges it), `measure` (rounds, GEMM rate, roofline
floor, machine), `compare` (decisions, |dP(A)|, ratios), `report` (table, JSON, shared options).
Nothing here imports vLLM at import time, nor omegaconf or Hydra but `vllm-path` (it runs the shipped
config), which `harness-bench` leaves out where they are absent: `gpu` runs on a bare GPU machine.
docs/benchmarks.md holds the current numbers and the command behind each.
"""
