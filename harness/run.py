"""The one Hydra entry point: `python -m harness.run experiment=judge task=summeval ...`.

It builds nothing itself: it resolves the experiment's `entry` ("module:function"), hands it the
config and the run directory, and turns user errors into one line and exit code 2.
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.errors import ConfigError, HarnessError
from harness.tracking import redact, write_json_atomic

log = logging.getLogger("harness")

_FORBIDDEN = ("api_key", "apikey", "secret", "password")


def check_no_secrets(cfg: DictConfig) -> None:
    """API keys come from the environment only: refuse a config that carries one."""
    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if str(k).lower() in _FORBIDDEN and v not in (None, ""):
                    raise ConfigError(f"config key {path}{k} holds a secret; put it in an environment "
                                      "variable and name that variable in *_env instead")
                walk(v, f"{path}{k}.")
    walk(OmegaConf.to_container(cfg, resolve=False), "")


def resolve_entry(entry: str):
    module, _, func = entry.partition(":")
    try:
        return getattr(importlib.import_module(module), func or "main")
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"experiment.entry {entry!r} cannot be imported: {e}") from None


def run(cfg: DictConfig, out_dir: Path, overrides: list[str] | None = None) -> Any:
    """Check, record (config.json, overrides.json: secrets refused/redacted) and run the experiment."""
    check_no_secrets(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "config.json", redact(OmegaConf.to_container(cfg, resolve=True)))
    if overrides is not None:
        write_json_atomic(out_dir / "overrides.json", list(overrides))
    return resolve_entry(cfg.experiment.entry)(cfg, out_dir)


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> Any:
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    out_dir = Path(hc.runtime.output_dir)
    try:
        return run(cfg, out_dir, list(hc.overrides.task))
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
