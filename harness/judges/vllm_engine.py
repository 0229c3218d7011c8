"""How the vLLM judge runs its engine: the environment and threads it starts under, and its request
API fed every request of a call at once, each output handed on as it finishes.

- `engine_environment`: on a CPU the engine runs in this process; on a GPU vLLM sizes its workers'
  threads itself (a job's OMP_NUM_THREADS is this process's count, and every tensor-parallel worker
  would take it whole) and starts its processes with spawn: a fork copies this process while its
  progress, heartbeat and W&B threads may hold locks (vLLM forks by default unless CUDA is already
  initialised). Set VLLM_WORKER_MULTIPROC_METHOD yourself to choose otherwise.
- `stream_outputs`: `LLMEngine.add_request` for every prompt (or for the first `window` of them,
  each finished one replaced before the next step, so the scheduler never waits on a drain), then
  `step` until each has finished, the finished outputs yielded step by step (vLLM's own
  `LLM.generate` runs the same loop and returns only at the end). The caller commits each list
  before the next step runs, so a kill loses only the requests in flight; closing the stream aborts
  them, so the engine holds nothing of an abandoned call.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from harness.errors import ConfigError, JudgeOutputError
from harness.judges.cpu import torch_threads
from harness.judges.wrappers import held_in_children

log = logging.getLogger(__name__)

_REQUEST_IDS = itertools.count()
"""The harness's request ids (`harness-<n>`): unique within the process, apart from `LLM`'s own."""


def engine_environment(on_cpu: bool, in_process: bool, environ: Mapping[str, str]) -> dict[str, str | None]:
    """The variables an engine starts under (None: removed), put back once it has started (module
    docstring): in-process, vLLM's multiprocessing off; on a GPU, no OMP_NUM_THREADS and spawn
    unless `environ` already names a start method."""
    changes: dict[str, str | None] = {}
    if in_process:
        changes["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if not on_cpu:
        changes["OMP_NUM_THREADS"] = None
        if not environ.get("VLLM_WORKER_MULTIPROC_METHOD"):
            changes["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    return changes


def engine_threads(on_cpu: bool, in_process: bool, cpu_threads: int | None, cores: int | None) -> int | None:
    """Torch threads for an engine computing in this process on a CPU: `cpu_threads`, else one per
    core but one, as vLLM's own CPU thread binding does (it keeps a core for the engine loop). None
    elsewhere: on a GPU vLLM sizes them, and a CPU engine in its own process binds its own."""
    if not (on_cpu and in_process):
        return None
    return cpu_threads or max(1, (cores or 2) - 1)


DRIVER_FOR_CUDA = {13: 580, 12: 525, 11: 450}
"""The oldest Linux NVIDIA driver for each CUDA major version (NVIDIA's CUDA toolkit release notes,
minor version compatibility): vLLM 0.33's torch is built for CUDA 13, so it needs 580 or later."""


def driver_line(run: Any = subprocess.run) -> str:
    """What `nvidia-smi` says of the node's driver: "driver 550.54.15 (CUDA 12.4)", or why it cannot say."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "nvidia-smi not found (no NVIDIA driver on this node?)"
    try:
        out = run([exe], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi failed ({type(e).__name__})"
    text = f"{out.stdout}\n{out.stderr}"
    driver = re.search(r"Driver Version:\s*([0-9.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([0-9.]+)", text)
    if driver is None:
        first = (text.strip().splitlines() or ["no output"])[0].strip()
        return f"nvidia-smi: {first[:160]}"
    return f"nvidia-smi: driver {driver.group(1)}" + (f" (CUDA {cuda.group(1)})" if cuda else "")


def check_cuda(on_cpu: bool, vllm_version: str) -> None:
    """Before a GPU engine starts: on a CUDA build of torch (vLLM's) where no GPU is usable (a driver
    older than the build's CUDA; a node without a GPU), one ConfigError line naming the driver, the
    build's CUDA and both ways out. vLLM itself says only "Engine core initialization failed"."""
    if on_cpu:
        return
    import torch

    built = getattr(torch.version, "cuda", None)
    if not built or torch.cuda.is_available():
        return
    major = int(str(built).split(".")[0])
    need = DRIVER_FOR_CUDA.get(major)
    driver = driver_line()
    theirs = re.search(r"\(CUDA ([0-9.]+)\)", driver)
    raise ConfigError(
        f"vLLM {vllm_version} (torch {torch.__version__}) is built for CUDA {built} but no GPU is "
        f"usable here ({driver}): upgrade the NVIDIA driver"
        + (f" to {need} or later" if need else f" to one for CUDA {built}")
        + ", or install a vLLM/torch pair built for "
        + (f"CUDA {theirs.group(1)}" if theirs else "the driver's CUDA")
        + " (vLLM's install docs list the wheels per CUDA version)"
    )


def start_line(kwargs: Mapping[str, Any], on_cpu: bool) -> str:
    """The line a run shows before an engine starts: what it does and how long the first start may
    take (an engine start prints nothing for minutes otherwise)."""
    where = "the CPU" if on_cpu else f"{kwargs.get('tensor_parallel_size', 1)} GPU(s)"
    if kwargs.get("enforce_eager"):
        doing, first = (
            "loading the weights (eager: no compile)",
            "seconds to a few minutes, with the weights' size",
        )
    else:
        doing = "loading the weights, compiling the model" + ("" if on_cpu else " and capturing CUDA graphs")
        cache = os.environ.get("VLLM_CACHE_ROOT") or "~/.cache/vllm"
        first = f"minutes the first time on a node; later starts reuse the compile cache in {cache} (VLLM_CACHE_ROOT)"
    return f"starting the vLLM engine for {kwargs['model']} on {where}: {doing}; this takes {first}"


def started(
    vllm: Any, kwargs: dict[str, Any], threads: int | None, environment: Mapping[str, str | None]
) -> Any:
    """A new vllm.LLM(**kwargs) under `environment` and `threads`, this process left as it was:
    its environment and torch's thread count (and set_num_threads, which vLLM's in-process CPU
    worker replaces with a no-op)."""
    from vllm.platforms import current_platform

    on_cpu = bool(current_platform.is_cpu())
    check_cuda(on_cpu, str(getattr(vllm, "__version__", "?")))
    log.info(start_line(kwargs, on_cpu))
    import torch

    env = dict(os.environ)
    set_threads, before = torch.set_num_threads, torch.get_num_threads()
    try:
        for name, value in environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if threads is not None:
            torch.set_num_threads(threads)  # before LLM(): its worker keeps the count it finds
        with held_in_children():  # its engine core and workers never act on SLURM's USR1/USR2
            return vllm.LLM(**kwargs)
    except (RuntimeError, ValueError, OSError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"vLLM could not start an engine for {kwargs['model']}: {first}") from None
    finally:
        torch.set_num_threads = set_threads
        torch.set_num_threads(before)
        for name in set(os.environ) - set(env):  # vLLM sets LD_PRELOAD etc. for its workers, not for ours
            os.environ.pop(name, None)
        for name, value in env.items():  # only what changed: other threads read the environment meanwhile
            if os.environ.get(name) != value:
                os.environ[name] = value


def stream_outputs(
    engine: Any,
    rows: Sequence[tuple[int, list[int]]],
    params: Any,
    threads: int | None,
    window: int | None = None,
) -> Iterator[list[tuple[int, Any]]]:
    """(key, RequestOutput) lists from `engine` (an LLMEngine) for every (key, token ids) in
    `rows`, added in their order (vLLM schedules first come first served): all before the first
    step, or `window` at most in the engine at once, topped up after every step; one list per step
    that finishes any. `params` must ask for final outputs only. A request that ends other than by
    its length or a stop (aborted, an engine error) is an error, never an answer."""
    from vllm.inputs import TokensPrompt

    pending: dict[str, int] = {}
    todo = iter(rows)
    limit = len(rows) if window is None else max(1, int(window))

    def top_up() -> None:
        for key, ids in itertools.islice(todo, max(0, limit - len(pending))):
            request_id = f"harness-{next(_REQUEST_IDS)}"
            engine.add_request(request_id, TokensPrompt(prompt_token_ids=ids), params)
            pending[request_id] = key

    try:
        top_up()
        while pending:
            with torch_threads(threads):
                outputs = engine.step()
            done = [(pending.pop(o.request_id), o) for o in outputs if o.finished and o.request_id in pending]
            for _, o in done:
                reason = o.outputs[0].finish_reason if o.outputs else None
                if reason not in ("length", "stop", "repetition"):
                    raise JudgeOutputError(
                        f"the vLLM engine ended a judge request with {reason!r} (not a "
                        "finished answer); nothing of it is kept: run again"
                    )
            top_up()
            if done:
                yield done
            elif not engine.has_unfinished_requests():
                raise JudgeOutputError(
                    f"the vLLM engine stopped with {len(pending)} of the judge's requests unanswered"
                )
    finally:
        if pending:  # closed early (preempted, interrupted, an error): the engine drops the rest
            try:
                engine.abort_request(list(pending))
            except Exception:  # noqa: BLE001 - a dead engine must not hide the error that closed the stream
                pass
