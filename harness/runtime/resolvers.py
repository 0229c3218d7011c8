"""OmegaConf resolvers the shipped configs use, registered on import (harness.runtime.schema imports
this module, so every compose of conf/ has them: the CLI, the tests, a SLURM job unpickling its config).

- `${harness.per_gpu:N,GPUS[,GRES]}`: N x GPUS, or N when GPUS is null/0 (a job without GPUs); with
  GRES set (hydra.launcher.gres, e.g. gpu:a100:2) its count instead. The slurm launcher asks for CPUs
  and host memory per GPU this way (conf/hydra/launcher/slurm.yaml).
- `${harness.gpus:BACKEND,TP[,GRES]}`: the GPUs a judge on backend BACKEND (backend.name) needs: none
  for `api` (the model runs behind a server elsewhere), TP (backend.tensor_parallel_size, 1 when the
  backend has none) for the others; none when GRES is set (the site asks with --gres, and sbatch
  given both asks twice). The slurm launcher's GPUs per job; it is resolved for each job of a
  sweep, so `backend.tensor_parallel_size=1,2` asks 1 and 2 (harness.runtime.launchers).
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from harness.errors import ConfigError


def gres_gpus(gres: Any) -> int:
    """The GPU count of a --gres value: gpu:a100:2 -> 2, gpu:2 -> 2, gpu -> 1, several resources
    (gpu:2,shard:1) -> the gpu one's; 0 when it names no GPUs."""
    for part in str(gres).split(","):
        fields = part.strip().split(":")
        if fields[0].split("/")[-1] != "gpu":
            continue
        count = fields[-1] if len(fields) > 1 else "1"
        return int(count) if count.isdigit() else 1
    return 0


def per_gpu(amount: Any, gpus: Any, gres: Any = None) -> int:
    """`amount` per GPU: amount x gpus (the gres count where gres is set), amount alone when the job
    asks for no GPUs (gpus null or 0)."""
    if gres not in (None, ""):
        gpus = gres_gpus(gres)
    try:
        n, g = int(amount), (0 if gpus is None else int(gpus))
    except (TypeError, ValueError):
        raise ConfigError(
            f"harness.per_gpu:{amount},{gpus}: both must be whole numbers (or the GPUs null)"
        ) from None
    if n < 0 or g < 0:
        raise ConfigError(f"harness.per_gpu:{amount},{gpus}: negative")
    return n * g if g else n


def gpus(backend: Any, tensor_parallel: Any, gres: Any = None) -> int | None:
    """GPUs per job for a judge on `backend`: None (ask for none) for the API backend or when `gres`
    asks for them, else the engine's tensor-parallel size."""
    if str(backend) == "api" or gres not in (None, ""):
        return None
    try:
        n = int(tensor_parallel)
    except (TypeError, ValueError):
        raise ConfigError(
            f"harness.gpus:{backend},{tensor_parallel}: the GPU count must be a whole number"
        ) from None
    if n < 1:
        raise ConfigError(
            f"harness.gpus:{backend},{tensor_parallel}: backend.tensor_parallel_size must be >= 1"
        )
    return n


OmegaConf.register_new_resolver("harness.per_gpu", per_gpu, replace=True)
OmegaConf.register_new_resolver("harness.gpus", gpus, replace=True)
