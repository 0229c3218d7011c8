"""Write a W&B sweep YAML from a Hydra grid, for users with a W&B server.

    python scripts/wandb_sweep.py --sweep zepo_table1_summeval --out sweep.yaml
    python scripts/wandb_sweep.py --grid model=smollm2,tiny_llama task.aspect=coherence,fluency \
        --fixed experiment=judge task.docs=4 --metric none/spearman --out sweep.yaml
    wandb sweep sweep.yaml            # prints the sweep id
    wandb agent <entity>/<project>/<sweep id>   # on each worker (e.g. inside an sbatch array)

The grid is Hydra's sweep syntax (`a,b,c`, `range(1,5)`, `choice(...)`, and for random/bayes search
`interval(lo,hi)` / `tag(log,interval(lo,hi))`), read from conf/sweep/<name>.yaml's
hydra.sweeper.params or from --grid. Each W&B run executes
`/usr/bin/env python -m harness.run <fixed overrides> key=value ...` (the agent fills `${env}`,
`${interpreter}` and `${args_no_hyphens}`), so a W&B run is exactly one Hydra job of the same grid,
started as users start one: the package as a module, never a file inside it run as a script.
`program` is unused by that command but the agent reads it, so it is set. Values stay strings in
Hydra syntax, so Hydra types them as it would on the command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def sweep_params(name: str, conf_dir: Path = REPO / "conf") -> dict[str, str]:
    """hydra.sweeper.params of conf/sweep/<name>.yaml (as written: `key: a,b,c`)."""
    from omegaconf import OmegaConf

    path = conf_dir / "sweep" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in (conf_dir / "sweep").glob("*.yaml")))
        raise SystemExit(f"error: {path}: no such sweep (known: {known})")
    params = OmegaConf.select(OmegaConf.load(path), "hydra.sweeper.params")
    if not params:
        raise SystemExit(f"error: {path}: no hydra.sweeper.params grid")
    return {str(k): str(v) for k, v in params.items()}


def parse_grid(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"error: --grid {item!r}: expected key=values")
        out[key] = value
    return out


def wandb_parameter(key: str, value: str, method: str) -> dict[str, Any]:
    """One Hydra sweep value -> a W&B parameter spec ({values: [...]} or {min, max, distribution})."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import IntervalSweep

    ov = OverridesParser.create().parse_override(f"{key}={value}")
    if not ov.is_sweep_override():
        return {"value": ov.get_value_element_as_str()}
    if ov.is_discrete_sweep():
        return {"values": list(ov.sweep_string_iterator())}
    sweep = ov.value()
    if isinstance(sweep, IntervalSweep):
        if method == "grid":
            raise SystemExit(
                f"error: {key}={value}: an interval cannot be a grid; use --method random or bayes"
            )
        if "log" in sweep.tags:
            return {"distribution": "log_uniform_values", "min": float(sweep.start), "max": float(sweep.end)}
        return {"distribution": "uniform", "min": float(sweep.start), "max": float(sweep.end)}
    raise SystemExit(f"error: {key}={value}: unsupported sweep type {type(sweep).__name__}")


def build_sweep(
    grid: Mapping[str, str],
    *,
    fixed: Sequence[str] = (),
    name: str | None = None,
    method: str = "grid",
    metric: str | None = None,
    goal: str = "maximize",
    project: str | None = None,
    entity: str | None = None,
) -> dict[str, Any]:
    """The W&B sweep configuration (a dict ready for yaml.safe_dump or wandb.sweep)."""
    cfg: dict[str, Any] = {"program": "harness/run.py", "method": method}  # read by the agent, not run
    if name:
        cfg["name"] = name
    if project:
        cfg["project"] = project
    if entity:
        cfg["entity"] = entity
    if metric:
        cfg["metric"] = {"name": metric, "goal": goal}
    cfg["parameters"] = {k: wandb_parameter(k, v, method) for k, v in grid.items()}
    # ${env} = /usr/bin/env, ${interpreter} = python (the agent's PATH), ${args_no_hyphens} = key=value ...
    cfg["command"] = ["${env}", "${interpreter}", "-m", "harness.run", *fixed, "${args_no_hyphens}"]
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    import yaml

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--sweep", help="conf/sweep/<name>.yaml: its grid, and +sweep=<name> as a fixed override"
    )
    src.add_argument(
        "--grid", nargs="+", metavar="KEY=VALUES", help="Hydra sweep overrides, e.g. task.aspect=a,b"
    )
    p.add_argument("--fixed", nargs="*", default=[], metavar="KEY=VALUE", help="overrides every run gets")
    p.add_argument("--method", default="grid", choices=("grid", "random", "bayes"))
    p.add_argument("--metric", help="W&B summary key to optimise, e.g. none/spearman (needed for bayes)")
    p.add_argument("--goal", default="maximize", choices=("maximize", "minimize"))
    p.add_argument("--project", help="W&B project (default: the one `wandb sweep` is run with)")
    p.add_argument("--entity", help="W&B entity")
    p.add_argument("--out", help="YAML file to write (default: stdout)")
    args = p.parse_args(argv)
    if args.method == "bayes" and not args.metric:
        p.error("--method bayes needs --metric")
    grid = sweep_params(args.sweep) if args.sweep else parse_grid(args.grid)
    fixed = ([f"+sweep={args.sweep}"] if args.sweep else []) + list(args.fixed)
    cfg = build_sweep(
        grid,
        fixed=fixed,
        name=args.sweep,
        method=args.method,
        metric=args.metric,
        goal=args.goal,
        project=args.project,
        entity=args.entity,
    )
    text = yaml.safe_dump(cfg, sort_keys=False)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
