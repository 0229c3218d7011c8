"""Experiment tracking: local files always, Weights & Biases when enabled.

W&B is never the only record: every metric, table and image also lands in the run directory
(`metrics.jsonl`, `tables/<name>.jsonl`, the image files), so an offline cluster loses nothing.
`mode` follows W&B: "online", "offline" (writes wandb/offline-run-*, `wandb sync` later) or
"disabled" (no W&B calls at all). Secrets never reach W&B: configs pass through `redact`.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_SECRET_NAMES = {"key", "token", "secret", "password", "api_key", "apikey", "auth", "authorization"}
_SECRET_SUFFIXES = ("_key", "_token", "_secret", "_password")


def _is_secret_key(name: str) -> bool:
    """api_key, hf_token, ... are secrets; max_new_tokens, api_key_env (a variable's name) are not."""
    return name in _SECRET_NAMES or name.endswith(_SECRET_SUFFIXES)


def redact(obj: Any) -> Any:
    """Drop values of keys that look like secrets (api_key, token, ...) from a nested config.

    Keys naming the environment variable that holds a secret (`*_env`) are kept: they are names,
    not values.
    """
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            ks = str(k).lower()
            if _is_secret_key(ks) and not isinstance(v, Mapping):
                out[k] = "<redacted>" if v not in (None, "") else v
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    return obj


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else str(v)
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item"):
        return v.item()
    return v


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; a missing or broken file is one DataError line naming it."""
    from harness.errors import DataError, located

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path.name} not found", where=str(path.parent))
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON ({e.msg})", where=located(path, e.lineno)) from None


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write JSON through a temporary file and os.replace: a crash leaves old or new, never half."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(_jsonable(obj), indent=2, sort_keys=False, allow_nan=False) + "\n")
    os.replace(tmp, path)


def write_jsonl_atomic(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w") as f:
        for r in rows:
            f.write(json.dumps(_jsonable(r), allow_nan=False) + "\n")
    os.replace(tmp, path)


class Tracker:
    """Logs to the run directory and, unless disabled, to a W&B run."""

    def __init__(self, out_dir: str | Path, *, mode: str = "offline", project: str = "harness",
                 entity: str | None = None, group: str | None = None, job_type: str | None = None,
                 name: str | None = None, config: Mapping[str, Any] | None = None,
                 tags: Sequence[str] = ()) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.mode = mode
        self._run = None
        if mode != "disabled":
            import wandb

            os.environ.setdefault("WANDB_DIR", str(self.out_dir))
            self._run = wandb.init(
                project=project, entity=entity, group=group, job_type=job_type, name=name,
                config=redact(dict(config or {})), mode=mode, dir=str(self.out_dir), tags=list(tags),
                reinit="finish_previous", settings=wandb.Settings(silent=True),
            )

    @property
    def wandb_dir(self) -> str | None:
        return getattr(self._run, "dir", None) if self._run is not None else None

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        row = {"step": step, **_jsonable(dict(metrics))}
        with (self.out_dir / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self._run is not None:
            clean = {k: v for k, v in metrics.items() if isinstance(v, int | float) and math.isfinite(v)}
            self._run.log(clean, step=step)

    def log_table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        tables = self.out_dir / "tables"
        tables.mkdir(exist_ok=True)
        write_jsonl_atomic(tables / f"{name}.jsonl", [dict(zip(columns, r)) for r in rows])
        if self._run is not None:
            import wandb

            self._run.log({name: wandb.Table(columns=list(columns), data=[list(_jsonable(list(r))) for r in rows])})

    def log_image(self, name: str, path: str | Path) -> None:
        if self._run is not None:
            import wandb

            self._run.log({name: wandb.Image(str(path))})

    def summary(self, values: Mapping[str, Any]) -> None:
        if self._run is not None:
            for k, v in values.items():
                if isinstance(v, int | float | str):
                    self._run.summary[k] = v

    def finish(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None
