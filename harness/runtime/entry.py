"""The one Hydra entry point: `python -m harness.run experiment=judge task=summeval ...`.

It builds nothing itself. It checks the composed config (secrets refused; types, ranges and names
through the schemas), records it (config.json, overrides.json: secrets redacted), resolves the
experiment's `entry` ("module:function") and hands it the config and the run directory. Anything
the user got wrong — a Hydra composition error, an unknown key, a bad value, a HarnessError from
the run — is one `error: ...` line on stderr and exit code 2, with secret values redacted. In a
multirun a job's error line names the job and the other jobs still run; the sweep then ends with
one line naming every failed job, and exit 2 (harness.runtime.sweep).
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.confdir import conf_dir
from harness.errors import ConfigError, HarnessError
from harness.files import disk_full, why_not_folder, write_json_atomic
from harness.redaction import (
    check_config,
    check_overrides,
    env_fields,
    install_redaction,
    is_suspect_key,
    redact,
    redact_overrides,
    redact_text,
)
from harness.runtime import schema
from harness.runtime.attempts import completed_here
from harness.runtime.experiment_schema import settle_instruction
from harness.runtime.launchers import watching
from harness.runtime.rundirs import check_same_experiment
from harness.runtime.shard import check_shardable
from harness.runtime.sweep import JobFailed, SweepStopped, fail_job, failure_summary, override_key
from harness.runtime.typos import one_line_typo

log = logging.getLogger("harness")


def resolve_entry(entry: str) -> Any:
    module, _, func = entry.partition(":")
    try:
        return getattr(importlib.import_module(module), func or "main")
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"experiment.entry {entry!r} cannot be imported: {e}") from None


def check(cfg: DictConfig) -> None:
    """Everything that can be checked before any work: secrets, every schema's ranges, and whether
    the experiment can be split into document shards."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    check_config(raw)
    try:
        check_config(OmegaConf.to_container(cfg, resolve=True), env_fields(raw))
    except OmegaConfBaseException as e:
        raise ConfigError(one_line(e)) from None
    schema.refuse_unknown_keys(cfg)
    schema.validate(cfg)
    settle_instruction(cfg)
    check_shardable(cfg)


def run(cfg: DictConfig, out_dir: Path, overrides: Sequence[str] | None = None) -> Any:
    """Check, record (config.json, overrides.json) and run the experiment."""
    check(cfg)
    entry = resolve_entry(cfg.experiment.entry)
    check_same_experiment(cfg, out_dir)
    print(f"run directory: {out_dir}", flush=True)  # and again at the end (hydra_main)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out_dir / "config.json", redact(OmegaConf.to_container(cfg, resolve=True)))
        if overrides is not None:
            write_json_atomic(out_dir / "overrides.json", redact_overrides(overrides))
    except OSError as e:
        raise ConfigError(
            f"cannot write the run directory {out_dir} ({e.strerror}); set hydra.run.dir=... "
            "to a writable folder"
        ) from None
    return entry(cfg, out_dir)


_NOISE = re.compile(
    r"^\s*(full_key|object_type|reference_type|parent_node|child_node|msg)\s*[:=]|"
    r"Set the environment variable HYDRA_FULL_ERROR",
    re.IGNORECASE,
)


def one_line(exc: BaseException, argv: Sequence[str] = ()) -> str:
    """A Hydra/OmegaConf error (message and cause) as one line, secret override values blanked."""
    parts: list[str] = []
    e: BaseException | None = exc
    while e is not None and len(parts) < 6:
        for line in str(e).splitlines():
            line = line.strip()
            if line and not _NOISE.search(line) and line not in parts:
                parts.append(line)
        e = e.__cause__ or e.__context__
    text = " ".join(parts).replace(". ", "; ") or type(exc).__name__
    for o in argv:
        _, sep, value = o.partition("=")
        if sep and value and is_suspect_key(override_key(o).rsplit(".", 1)[-1]):
            text = text.replace(value, "<redacted>")
    return redact_text(text)


CONF_DIR = conf_dir()
"""conf/ of this checkout or of the installed wheel (harness.confdir; an absolute path: Hydra resolves a
relative one against the package)."""


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def hydra_main(cfg: DictConfig) -> Any:
    hc = HydraConfig.get()
    quiet_vllm()
    env_names = env_fields(OmegaConf.to_container(cfg, resolve=False))
    install_redaction(env_names)  # Hydra has set up its handlers (stderr, run.log) by now
    out_dir = Path(hc.runtime.output_dir)
    RUN_DIRS.append((out_dir, round(time.time(), 3) - 0.001))
    log_failures = guard_log_files()
    try:
        check_overrides([*hc.overrides.hydra, *hc.overrides.task])
        result = run(cfg, out_dir, list(hc.overrides.task))
    except HarnessError as e:
        if hc.mode == RunMode.MULTIRUN:  # one line naming the job; the sweep's other jobs still run
            fail_job(hc.job.num, list(hc.overrides.task), redact_text(str(e), env_names), Path(hc.sweep.dir))
        drop_refused_run_dir(out_dir)
        print(f"error: {redact_text(str(e), env_names)}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:
        full = disk_full(e)
        if full is None:
            raise
        print(f"error: {disk_full_message(full, out_dir)}", file=sys.stderr)
        sys.exit(2)
    if log_failures:
        print(f"error: {disk_full_message(log_failures[0], out_dir)}", file=sys.stderr)
        sys.exit(2)
    page = out_dir / "report.html"
    print(
        f"run directory: {out_dir}" + (f" (open {page.name} in a browser)" if page.is_file() else ""),
        flush=True,
    )
    return result


def quiet_vllm() -> None:
    """vLLM prints INFO lines (its arguments, memory, compilation) to the console; a run shows its
    warnings and errors only, unless VLLM_LOGGING_LEVEL asks for more (VLLM_LOGGING_LEVEL=INFO).
    Before vLLM is imported: it reads the variable then (its engine process inherits it), and a
    few lines it logs while importing go through Python's `vllm` logger."""
    level = os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING").upper()
    if level in logging.getLevelNamesMapping():
        logging.getLogger("vllm").setLevel(level)


def drop_refused_run_dir(out_dir: Path) -> None:
    """A run refused before any work holds only what Hydra put there (run.log): remove it and the
    empty folders above it up to the current one (outputs/<experiment>/), so a typo leaves nothing."""
    if not out_dir.is_dir() or any(p.name not in ("run.log", ".hydra") for p in out_dir.iterdir()):
        return
    root = logging.getLogger()
    for handler in list(root.handlers):  # run.log is open: close it before it goes
        if (
            isinstance(handler, logging.FileHandler)
            and Path(handler.baseFilename).parent == out_dir.resolve()
        ):
            handler.close()
            root.removeHandler(handler)
    shutil.rmtree(out_dir, ignore_errors=True)
    here, parent = Path.cwd().resolve(), out_dir.resolve().parent
    while parent != here and parent.is_relative_to(here) and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


def disk_full_message(e: OSError, out_dir: Path) -> str:
    """One line for a disk that filled during a run: where, and that the finished work is kept."""
    where = e.filename or out_dir
    return (
        f"no space left for {where} ({e.strerror or e}); free space on that disk (or set hydra.run.dir=... / "
        "cache.path=... elsewhere) and rerun the same command: the judged pairs are kept in the request cache "
        "and every file is written whole or not at all"
    )


def guard_log_files() -> list[OSError]:
    """Run.log on a full disk: logging would print a traceback per record and carry on (exit 0).
    Record the failure instead (the run then ends with one line and exit 2); the console keeps
    logging. Returns the list the failures are appended to."""
    failures: list[OSError] = []
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            original = handler.handleError

            def handle_error(
                record: logging.LogRecord, original: Any = original, handler: logging.FileHandler = handler
            ) -> None:
                full = disk_full(sys.exc_info()[1])
                if full is None:
                    return original(record)
                if full.filename is None:
                    full.filename = handler.baseFilename
                failures.append(full)

            handler.handleError = handle_error  # type: ignore[method-assign]
    return failures


def main() -> None:
    """`python -m harness.run`: Hydra's errors come back to us (HYDRA_FULL_ERROR) to be printed as
    one line; set HYDRA_FULL_ERROR=1 yourself for Hydra's full traceback instead."""
    full = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    install_redaction()  # uncaught tracebacks too lose secret values
    try:
        # Before Hydra sees them: with -m it writes every override to multirun.yaml and logs it,
        # and its own errors (HYDRA_FULL_ERROR=1 included) repeat the value.
        # Their ${oc.env:...} parts as Hydra will read them: a key interpolated into hydra.run.dir
        # would otherwise be refused only after Hydra made a folder named after it.
        check_overrides(with_env_values(a) for a in sys.argv[1:] if not a.startswith("-") and "=" in a)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    install_stop_handlers()
    RUN_DIRS.clear()
    multirun = any(a in ("-m", "--multirun") for a in sys.argv[1:])
    try:
        with watching(
            multirun
        ):  # a submitit sweep: job-state lines while it waits, a refused sbatch in one line
            hydra_main()
    except JobFailed:
        print(f"error: {failure_summary()}", file=sys.stderr)
        sys.exit(2)
    except SweepStopped as e:
        print(f"error: {redact_text(str(e))}", file=sys.stderr)
        sys.exit(2)
    except Stopped as e:
        if not multirun and RUN_DIRS and completed_here(*RUN_DIRS[-1]):
            print(
                f"note: {signal.Signals(e.signum).name} arrived after the run had finished: every file in "
                f"{RUN_DIRS[-1][0]} is written (attempts.jsonl: completed); nothing to resume",
                file=sys.stderr,
            )
            sys.exit(0)
        print(
            f"error: stopped by {signal.Signals(e.signum).name}; every committed pair is in the request cache and "
            "attempts.jsonl has this attempt's end line: rerun the same command to resume",
            file=sys.stderr,
        )
        sys.exit(STOP_EXIT)
    except KeyboardInterrupt:
        print(
            "error: interrupted (Ctrl-C); every committed pair is in the request cache: rerun the same command "
            "to resume",
            file=sys.stderr,
        )
        sys.exit(130)
    except (HydraException, OmegaConfBaseException, HarnessError) as e:
        if full:
            raise
        message = one_line(e, sys.argv[1:])
        print(f"error: {one_line_typo(message) or message}", file=sys.stderr)
        sys.exit(2)
    except (OSError, ValueError) as e:
        # Hydra creates the run directory and opens run.log before our code runs: a path that
        # cannot be a folder or cannot be written surfaces here as an OSError (or logging's
        # ValueError around one). Anything else that is not about a named path stays a traceback.
        message = None if full else filesystem_error(e)
        if message is None:
            raise
        print(f"error: {redact_text(message)}", file=sys.stderr)
        sys.exit(2)


def filesystem_error(raised: BaseException) -> str | None:
    """One line for a filesystem error that escaped a run: the path, the reason, what to set; None
    when `raised` is not one. Raised in Hydra's job setup (no harness frame but `main`), it concerns
    the run directory: Hydra creates it and opens run.log there before handing over."""
    e = raised if isinstance(raised, OSError) else raised.__cause__ or raised.__context__
    if not isinstance(e, OSError) or not e.filename:
        return None
    path = os.path.abspath(str(e.filename))
    harness_dir = str(Path(__file__).resolve().parents[1])
    frames = traceback.extract_tb(raised.__traceback__)
    if not any(f.filename.startswith(harness_dir) and f.name != "main" for f in frames):
        return (
            f"cannot use the run directory: {path} ({why_not_folder(path, e)}); set hydra.run.dir=... "
            "(hydra.sweep.dir=... with -m) to a folder that can be created and written"
        )
    if raised is not e:
        return None
    return f"{path}: {e.strerror or e}; check that it exists and can be written, or point the run elsewhere"


RUN_DIRS: list[tuple[Path, float]] = []
"""The run directory each job of this process was given, and when (a signal after the last one
finished is no stop)."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""What `scancel`, `kill` and a closed terminal send: the run stops as a preempted one does."""
STOP_EXIT = 143
"""The exit status of a run stopped by STOP_SIGNALS (128 + SIGTERM, what a killed process gives)."""


class Stopped(SystemExit):
    """Raised by the STOP_SIGNALS handler: a SystemExit, so attempts.jsonl records the attempt as
    `interrupted` and every `finally` runs (the chunk in flight is abandoned: the request cache
    holds every committed one, so the rerun judges only the rest)."""

    def __init__(self, signum: int) -> None:
        super().__init__(STOP_EXIT)
        self.signum = signum


def install_stop_handlers() -> None:
    """SIGTERM/SIGHUP raise Stopped in the main thread (Python's default for them kills the process
    with no `finally`: no end line in attempts.jsonl). A signal the process inherited as ignored
    stays ignored: `nohup python -m harness.run ...` keeps running when its terminal hangs up."""

    def stop(signum: int, frame: Any) -> None:
        raise Stopped(signum)

    for s in STOP_SIGNALS:
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, stop)


_ENV_INTERPOLATION = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,[^}]*)?\}")


def with_env_values(override: str) -> str:
    """`override` with each ${oc.env:NAME} replaced by the variable's value (what Hydra resolves
    it to), so the secrets check sees what would reach folder names and files."""
    return _ENV_INTERPOLATION.sub(lambda m: os.environ.get(m.group(1), ""), override)
