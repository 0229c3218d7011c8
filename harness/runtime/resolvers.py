"""OmegaConf resolvers the shipped configs use, registered on import (harness.runtime.schema imports
this module, so every compose of conf/ has them: the CLI, the tests, a SLURM job unpickling its config).

- `${harness.per_gpu:N,GPUS}`: N x GPUS, or N when GPUS is null/0 (a job without GPUs). The slurm
  launcher asks for CPUs and host memory per GPU this way (conf/hydra/launcher/slurm.yaml).
- `${harness.gpus:BACKEND,TP}`: the GPUs a judge on backend BACKEND (backend.name) needs: none for
  `api` (the model runs behind a server elsewhere), TP (backend.tensor_parallel_size, 1 when the
  backend has none) for the others. The slurm launcher's GPUs per job; it is resolved for each job
  of a sweep, so `backend.tensor_parallel_size=1,2` asks 1 and 2 (harness.runtime.launchers).
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from harness.errors import ConfigError


def per_gpu(amount: Any, gpus: Any) -> int:
    """`amount` per GPU: amount x gpus, amount alone when the job asks for no GPUs (gpus null or 0)."""
    try:
        n, g = int(amount), (0 if gpus is None else int(gpus))
    except (TypeError, ValueError):
        raise ConfigError(
            f"harness.per_gpu:{amount},{gpus}: both must be whole numbers (or the GPUs null)"
        ) from None
    if n < 0 or g < 0:
        raise ConfigError(f"harness.per_gpu:{amount},{gpus}: negative")
    return n * g if g else n


def gpus(backend: Any, tensor_parallel: Any) -> int | None:
    """GPUs per job for a judge on `backend`: None (ask for none) for the API backend, else the
    engine's tensor-parallel size."""
    if str(backend) == "api":
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
