"""The `harness-bench` command: one subparser per subcommand module (`add_cli_args` + `main`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from harness.bench import gpu, metrics_cost, numerics, page, profiling, runs, scale, speed, sweep
from harness.errors import HarnessError
from harness.outputs import writable_file

try:  # a run's config (Hydra, omegaconf): absent on the bare GPU machine `harness-bench gpu` runs on
    from harness.bench import vllm_path
except ModuleNotFoundError as e:
    if e.name not in ("hydra", "omegaconf"):
        raise
    vllm_path = None  # type: ignore[assignment]

SUBCOMMANDS = {
    "speed": speed,
    "profile": profiling,
    "numerics": numerics,
    "run": runs,
    "metrics": metrics_cost,
    "page": page,
    "gpu": gpu,
    "scale": scale,
    "sweep": sweep,
    **({"vllm-path": vllm_path} if vllm_path is not None else {}),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="harness-bench",
        description=__doc__.splitlines()[0],
        epilog="docs/benchmarks.md: the current numbers and the command behind each",
    )
    subs = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for name, module in SUBCOMMANDS.items():
        sub = subs.add_parser(
            name,
            help=module.HELP,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_cli_args(sub)
        sub.set_defaults(main=module.main, check=getattr(module, "check_args", None), parser=sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    args.argv = argv  # the command as typed, for the results that record it
    if args.check is not None:
        args.check(args.parser, args)
    try:
        if getattr(args, "json", None) is not None:  # before any work: the JSON line has somewhere to go
            writable_file(args.json, "--json")
        return args.main(args)
    except HarnessError as e:  # bad input (a missing data file, a model that cannot run): one line
        print(f"error: {e}", file=sys.stderr)
        return 2
