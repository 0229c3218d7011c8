"""OmegaConf resolvers the shipped configs use, registered on import (harness.runtime.schema imports
this module, so every compose of conf/ has them: the CLI, the tests, a SLURM job unpickling its config).

- `${harness.per_gpu:N,GPUS}`: N x GPUS, or N when GPUS is null/0 (a job without GPUs). The slurm
  launcher asks for CPUs and host memory per GPU this way, its GPUs being
  `${oc.select:backend.tensor_parallel_size,1}` (conf/hydra/launcher/slurm.yaml).
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
        raise ConfigError(f"harness.per_gpu:{amount},{gpus}: both must be whole numbers (or the GPUs null)") from None
    if n < 0 or g < 0:
        raise ConfigError(f"harness.per_gpu:{amount},{gpus}: negative")
    return n * g if g else n


OmegaConf.register_new_resolver("harness.per_gpu", per_gpu, replace=True)
