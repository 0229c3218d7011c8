"""The folders a run writes, checked as Hydra resolves them and before Hydra creates any.

conf/config.yaml registers `RunDirChecks` as a Hydra callback. Hydra calls it after composing the
config and before it makes the run folder (`on_run_start`) or the sweep folder, its multirun.yaml
and the jobs' folders (`on_multirun_start`). Checked on the RESOLVED values, whatever spelling
produced them (`hydra.run.dir=`, `${oc.env:UNSET,}`, `${oc.select:no.such.key,""}`):
- `hydra.run.dir` / `hydra.sweep.dir` must not be empty: the run's files would go to the current
  folder and replace the results.json there;
- `hydra.sweep.subdir` must name a folder of its own for every job: empty (or `.`) puts a job in
  the sweep folder itself, a value equal for two jobs makes the second overwrite the first;
- no value of the config (folder names included) may hold a secret environment variable's value
  (`redaction.secret_env_names`: the config's *_env variables and every set variable with a secret
  name), whatever it looks like: refused by the variable's name, never its value.
And, once the folder exists (`check_same_experiment`, from harness.runtime.entry.run), a folder
holding another experiment's run is not reused.
Each is one `error:` line and exit 2, nothing created. A Hydra callback's exceptions are turned
into warnings by Hydra, so the refusal is a SystemExit, as the run's own errors are.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from harness.errors import ConfigError
from harness.files import read_json_object
from harness.redaction import check_env_secrets, env_fields

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
PER_JOB = ("${hydra.job.num}", "${hydra.job.id}")
"""Subdirs that differ for every job by construction (the default is the first): no job config is composed."""
_SKIPPED = ("hydra.overrides", "hydra.job.override_dirname")
"""The command line as typed (checked before Hydra runs, harness.runtime.entry.main) and its copy;
a folder named after the copy is checked as that folder's key."""


class RunDirChecks(Callback):
    """Hydra callback (conf/config.yaml, hydra.callbacks): the checks above."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        refuse_on_error(check_run, config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        refuse_on_error(check_sweep, config)


def refuse_on_error(check: Any, config: DictConfig) -> None:
    try:
        check(config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def check_run(config: DictConfig) -> None:
    with as_hydra_config(config):
        check_not_empty("hydra.run.dir", OmegaConf.select(config, "hydra.run.dir"))
        check_env_folders()
        check_secrets(config)


def check_sweep(config: DictConfig) -> None:
    with as_hydra_config(config):
        check_not_empty("hydra.sweep.dir", OmegaConf.select(config, "hydra.sweep.dir"))
        check_env_folders()
        check_secrets(config)
    check_job_dirs(config)


def check_same_experiment(cfg: DictConfig, out_dir: Path) -> None:
    """A run directory holding another experiment's run (its config.json) is not reused: the new
    results.json would replace that run's while its own files (ZEPO's state.json, A-BB's abb.json)
    stay and contradict it. The same experiment resumes there as before."""
    if not (out_dir / "config.json").is_file():
        return
    before = read_json_object(out_dir / "config.json", "not a run's config: use another hydra.run.dir=...")
    old = before.get("experiment") if isinstance(before.get("experiment"), dict) else {}
    if old.get("entry") != cfg.experiment.entry:
        raise ConfigError(
            f"the run directory {out_dir} holds a {old.get('name') or 'different'} run (its "
            f"config.json); experiment={cfg.experiment.name} would replace its results.json and leave "
            "its other files contradicting it: set hydra.run.dir=... to a new folder"
        )


def check_not_empty(key: str, value: Any) -> None:
    """Neither empty nor the current folder (`.`, `./`, its absolute path): the run's files (a
    sweep's multirun.yaml) would go there and replace the ones it holds."""
    here = value is not None and str(value).strip() and Path(str(value)).resolve() == Path.cwd().resolve()
    if value is not None and (not str(value).strip() or here):
        raise ConfigError(
            f"{key} resolves to {'the current folder' if here else 'an empty value'}: the run's files "
            "would go to the current folder and replace its results.json (a sweep's multirun.yaml); "
            f"name a folder ({key}=...), or leave it out for the default"
        )


def check_env_folders() -> None:
    """HARNESS_CACHE set but blank made cache.path `/requests.sqlite` (conf/config.yaml reads it
    with a default only for an unset variable)."""
    for name in ("HARNESS_CACHE", "HARNESS_MODEL_CACHE"):
        if name in os.environ and not os.environ[name].strip():
            raise ConfigError(
                f"the environment variable {name} is set but empty: the cache would go to the "
                f"filesystem's root; unset it ({name} unset: ~/.cache/harness) or name a folder"
            )


def check_secrets(config: DictConfig) -> None:
    """No resolved value may hold a secret variable's value (a folder name, a W&B name, a path).
    The key named is where the value is written, not a Hydra key or one that copies it: those come
    last."""
    names = env_fields(OmegaConf.to_container(config, resolve=False))
    found = sorted(resolved_strings(config), key=lambda item: (item[0].startswith("hydra."), item[2]))
    check_env_secrets([(key, text) for key, text, _ in found], names)


def resolved_strings(node: Any, prefix: str = "") -> Iterator[tuple[str, str, bool]]:
    """(key, resolved text, whether it copies another key) of every string value that resolves now;
    one that does not (a value Hydra fills in later, a missing variable) is left to Hydra, which
    reports it itself."""
    keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        path = f"{prefix}{key}"
        if path in _SKIPPED:
            continue
        try:
            child = node[key]
        except Exception:  # noqa: BLE001 - unresolvable now: Hydra resolves (and reports) it itself
            continue
        if isinstance(child, DictConfig | ListConfig):
            yield from resolved_strings(child, path + ".")
        elif isinstance(child, str):
            raw = str(node._get_node(key)._value())
            yield path, child, "${" in raw and "oc.env:" not in raw


def check_job_dirs(config: DictConfig) -> None:
    """Every job of the sweep its own folder under the sweep folder (Hydra's basic sweeper; the
    jobs' configs composed as its launchers compose them, unless the subdir is the job number)."""
    raw = OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir")
    if str(raw) in PER_JOB or OmegaConf.select(config, "hydra.sweeper._target_") != BASIC_SWEEPER:
        return
    loader = GlobalHydra.instance().config_loader()
    jobs = job_overrides(config)
    shared = set.intersection(*(set(o) for o in jobs)) if len(jobs) > 1 else set()
    seen: dict[str, tuple[int, str]] = {}
    for num, overrides in enumerate(jobs):
        job = loader.load_sweep_config(config, list(overrides))
        with open_dict(job):
            job.hydra.job.id = num
            job.hydra.job.num = num
        with as_hydra_config(job):
            subdir = OmegaConf.select(job, "hydra.sweep.subdir")
            check_env_secrets([("hydra.sweep.subdir", str(subdir))], env_fields(OmegaConf.to_container(job)))
        label = " ".join(o for o in overrides if o not in shared) or "no overrides"
        what = f"job {num} ({label})"
        folder = os.path.normpath(str(subdir).strip() or ".")
        if folder == ".":
            raise ConfigError(
                f"hydra.sweep.subdir resolves to {str(subdir)!r} for {what}: every job would write into "
                "the sweep folder itself and replace the one before; use a value that differs per job, "
                "such as ${hydra.job.num} (the default)"
            )
        if folder in seen:
            first, first_overrides = seen[folder]
            raise ConfigError(
                f"hydra.sweep.subdir resolves to the same folder {folder!r} for job {first} "
                f"({first_overrides}) and {what}: the second would replace the first's results; use a "
                "value that differs per job, such as ${hydra.job.num} (the default)"
            )
        seen[folder] = (num, label)


def job_overrides(config: DictConfig) -> list[list[str]]:
    """The jobs' override lists, as Hydra's basic sweeper expands them (its params, then the command line)."""
    params = OmegaConf.to_container(config.hydra.sweeper, resolve=False).get("params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()]
    arguments += OmegaConf.to_container(config.hydra.overrides.task, resolve=False)
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    return BasicSweeper.split_arguments(parser.parse_overrides(arguments), None)[0]


@contextlib.contextmanager
def as_hydra_config(config: DictConfig) -> Iterator[None]:
    """`${hydra:...}` interpolations resolved against `config`, as Hydra's run_job sets them up;
    the previous Hydra config (and `config.hydra`'s read-only flag) put back after."""
    instance = HydraConfig.instance()
    before, readonly = instance.cfg, config.hydra._get_flag("readonly")
    instance.set_config(config)
    try:
        yield
    finally:
        instance.cfg = before
        OmegaConf.set_readonly(config.hydra, readonly)
