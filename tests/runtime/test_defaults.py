"""Each default is written once: in the schema dataclass (harness/runtime/schema.py,
experiment_schema.py, harness/judges/settings.py, harness/zepo/settings.py), never again in a YAML
under conf/ nor in a builder's signature (a judge, an optimizer, the tracker built in code).

A YAML line is redundant when the value it sets is what the config would hold without it: for a
group file (conf/model/x.yaml extends `base_model`) the schema's default; for conf/config.yaml the
root schema's; for a `@package _global_` file (an experiment, a sweep) the config composed from
what it extends (its `/experiment/<parent>@_here_` or `base_<name>@experiment`, its `override /`
choices) without it. Hydra's own keys (`defaults`, `hydra`) are not ours to check.

The paper reproductions (conf/experiment/paper/) are exempt: they pin every setting the official
code ran with, so a later change of a default cannot move a reproduced table silently.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from helpers.compose import compose
from hydra.utils import get_object
from omegaconf import OmegaConf

from harness.runtime.schema import SCHEMAS, Config, WandbConf

CONF = Path(__file__).resolve().parents[2] / "conf"
HYDRA_KEYS = ("defaults", "hydra")
GROUPS = ("model", "backend", "task", "optimizer")
"""The groups a `_global_` file may set keys of whichever option is picked."""
ABSENT = object()
PINNED = ("experiment", "paper")
"""Folders whose files pin the official settings on purpose (see the docstring)."""
YAMLS = sorted(
    p.relative_to(CONF).as_posix()
    for p in CONF.rglob("*.yaml")
    if p.parts[-3:-1] not in (("hydra", "launcher"), PINNED)
)


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else node


def _schema(group: str, name: str) -> dict:
    """Group `group`'s `base_<name>` schema's defaults as plain values (interpolations kept as text)."""
    return _plain(OmegaConf.structured(SCHEMAS[group][name]))


def _compose(overrides: list[str]) -> tuple[dict, dict]:
    """The composed config (plain, unresolved) and the option Hydra chose for each group."""
    cfg = compose(overrides, hydra=True)
    choices = dict(cfg.hydra.runtime.choices)
    return {k: v for k, v in _plain(cfg).items() if k != "hydra"}, choices


def _at(tree: Any, key: list[str]) -> Any:
    for part in key:
        if not isinstance(tree, dict) or part not in tree:
            return ABSENT
        tree = tree[part]
    return tree


def group_value(group: str, option: str, key: list[str]) -> Any:
    """What conf/<group>/<option>.yaml gives `key`: its own line, else its schema's default."""
    raw = _plain(OmegaConf.load(CONF / group / f"{option}.yaml"))
    base = next(d for d in raw["defaults"] if isinstance(d, str) and d.startswith("base_"))
    mine = _at(raw, key)
    return mine if mine is not ABSENT else _at(_schema(group, base.removeprefix("base_")), key)


def reference(path: Path) -> tuple[dict, dict]:
    """What the config holds without `path`'s own lines, in `path`'s coordinates, and the group
    options it was composed with (none for a group file or conf/config.yaml: their schema)."""
    raw = OmegaConf.load(path)
    defaults = [d if isinstance(d, str) else next(iter(d.items())) for d in raw.get("defaults", [])]
    if path.name == "config.yaml" and path.parent.name == "conf":
        return _plain(OmegaConf.structured(Config)), {}
    bases = [d for d in defaults if isinstance(d, str) and d.startswith("base_")]
    if "@" not in "".join(bases) and bases:  # a group file: its schema
        return _schema(path.parent.name, bases[0].removeprefix("base_")), {}
    overrides, own = [], None
    for d in defaults:
        if isinstance(d, str) and d.startswith("/experiment/"):
            overrides.append(f"experiment={d.removeprefix('/experiment/').split('@')[0]}")
        elif isinstance(d, str) and d.startswith("base_"):
            own = d.removeprefix("base_").split("@")[0]
            overrides.append("~experiment")
        elif isinstance(d, tuple):
            overrides.append(f"{d[0].removeprefix('override /')}={d[1]}")
    got, choices = _compose(overrides)
    if own is not None:
        got["experiment"] = _schema("experiment", own)
    return got, choices


def repeats(path: Path) -> list[str]:
    """The keys `path` sets to the value they would have without it. A `_global_` file's key in a
    group (task.docs) counts only when every option of the group gives that value, unless a file it
    extends sets it (then that file's value holds whichever option a user picks)."""
    ref, choices = reference(path)
    found = []

    def redundant(mine: Any, key: list[str]) -> bool:
        theirs = _at(ref, key)
        if theirs is ABSENT or mine != theirs:
            return False
        group = key[0] if len(key) > 1 and key[0] in GROUPS and key[0] in choices else None
        if group is None or theirs != group_value(group, choices[group], key[1:]):
            return True
        options = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
        return all(group_value(group, o, key[1:]) == mine for o in options)

    def walk(mine: Any, key: list[str]) -> None:
        if isinstance(mine, dict) and isinstance(_at(ref, key), dict):
            for k, v in mine.items():
                walk(v, [*key, str(k)])
        elif redundant(mine, key):
            found.append(".".join(key))

    walk({k: v for k, v in _plain(OmegaConf.load(path)).items() if k not in HYDRA_KEYS}, [])
    return found


@pytest.mark.parametrize("name", YAMLS)
def test_no_yaml_repeats_a_default(name):
    assert not repeats(CONF / name), (
        f"conf/{name} sets what the config holds without it: {repeats(CONF / name)}"
    )


def test_the_repeat_check_catches_a_default_written_again(tmp_path):
    """Negative control: the shipped batch size written again in a backend file, a schema default
    in an experiment file and a value its parent already sets are each found; changed values are
    not, nor a task key that some task sets otherwise (task.docs: 2 in summeval)."""
    (tmp_path / "backend").mkdir()
    hf = tmp_path / "backend" / "hf.yaml"
    hf.write_text("defaults:\n  - base_hf\n  - _self_\n\nbatch_size: 32\ngenerate_batch_size: 4\n")
    assert repeats(hf) == ["batch_size"]
    exp = tmp_path / "zepo_like.yaml"
    exp.write_text(
        "# @package _global_\ndefaults:\n  - base_zepo@experiment\n  - _self_\n\n"
        "task:\n  docs: 4\n  offset: 0\nexperiment:\n  population: 5\n  epochs: 2\n"
    )
    assert repeats(exp) == ["task.offset", "experiment.population"]
    child = tmp_path / "demo_like.yaml"
    child.write_text(
        "# @package _global_\ndefaults:\n  - /experiment/zepo_demo@_here_\n  - override /task: summeval\n"
        "  - _self_\n\ntask:\n  max_candidates: 3\nexperiment:\n  population: 4\n"
    )
    assert repeats(child) == ["task.max_candidates"]


def redeclared(*schemas: type) -> list[str]:
    """Fields a schema declares again with the default a base class already gives them."""
    found = []
    for schema in schemas:
        own = schema.__dict__.get("__annotations__", {})
        for base in schema.__mro__[1:]:
            if not dataclasses.is_dataclass(base):
                continue
            inherited = {f.name: f for f in dataclasses.fields(base)}
            for name in own:
                if (
                    name in inherited
                    and getattr(schema, name, ABSENT) == getattr(base, name, ABSENT) is not ABSENT
                ):
                    found.append(f"{schema.__name__}.{name}")
    return sorted(set(found))


def test_no_schema_writes_an_inherited_default_again():
    assert not redeclared(*(s for group in SCHEMAS.values() for s in group.values()))


def test_the_redeclared_check_catches_one():
    """Negative control: a subclass writing its base's default again is found, a changed one is not."""

    @dataclasses.dataclass
    class Base:
        batch_size: int = 32
        engine: str = "auto"

    @dataclasses.dataclass
    class Again(Base):
        batch_size: int = 32
        engine: str = "hf"

    assert redeclared(Again) == ["Again.batch_size"]


def setting_names() -> dict[str, str]:
    """Every settings field of the schemas (nested nodes included): name -> the first schema holding it."""
    names: dict[str, str] = {}

    def walk(schema: Any) -> None:
        if not dataclasses.is_dataclass(schema):
            return
        hints = get_type_hints(schema)
        for f in dataclasses.fields(schema):
            names.setdefault(f.name, schema.__name__)
            walk(hints.get(f.name))

    walk(Config)
    for group in SCHEMAS.values():
        for schema in group.values():
            walk(schema)
    return names


def builders() -> list[Any]:
    """What a config builds: every schema's `_target_` (conf/ and the root's wandb) and the classes
    those build, which scripts and tests also build in code."""
    from harness.api_client import ApiClient
    from harness.judges.api import ApiJudge
    from harness.judges.hf import HFJudge
    from harness.judges.vllm import VLLMJudge
    from harness.zepo.optimizers import ApiOptimizer, LocalOptimizer, VLLMOptimizer

    schemas = [s for group in SCHEMAS.values() for s in group.values()] + [WandbConf]
    targets = [get_object(s._target_) for s in schemas if hasattr(s, "_target_")]
    return targets + [HFJudge, VLLMJudge, ApiJudge, LocalOptimizer, VLLMOptimizer, ApiOptimizer, ApiClient]


def restated_in_signature(*built: Any) -> list[str]:
    """Parameters named like a settings field that carry a value of their own (anything but None):
    a second copy of the schema's default, which drifts (a builder takes the settings object and
    keyword overrides instead)."""
    names = setting_names()
    found = []
    for fn in built:
        for p in inspect.signature(fn).parameters.values():
            if p.default is not inspect.Parameter.empty and p.default is not None and p.name in names:
                found.append(f"{fn.__qualname__}({p.name}={p.default!r}) restates {names[p.name]}.{p.name}")
    return found


def test_no_builder_restates_a_schema_default():
    built = builders()
    assert len(built) >= 12  # the 6 targets, the Tracker and the 7 classes: none skipped silently
    assert not restated_in_signature(*built)


def test_the_signature_check_catches_a_restated_default():
    """Negative control: a builder taking max_new_tokens=256 (the drift LocalOptimizer once had) is
    found, as is one restating the schema's own value; None and non-setting keywords are not."""

    def build_local(path: str, *, max_new_tokens: int = 256, cache: str | None = None) -> None: ...

    def build_hf(path: str, *, batch_size: int = 32, dtype: str | None = None, extra: int = 3) -> None: ...

    assert restated_in_signature(build_local, build_hf) == [
        "test_the_signature_check_catches_a_restated_default.<locals>.build_local(max_new_tokens=256) "
        "restates ModelConf.max_new_tokens",
        "test_the_signature_check_catches_a_restated_default.<locals>.build_hf(batch_size=32) "
        "restates HFBackendConf.batch_size",
    ]


def test_code_and_config_build_the_same_settings(tmp_path):
    """The drifted defaults, built in code, are the schema's: what a run gets, a library user gets
    (prefix_reuse was False in code, True in config; the cache chunk 16, 16 and 64)."""
    from harness.judges.cache import CachedJudge, ScoreCache
    from harness.judges.settings import ApiSettings, CacheSettings, HFSettings
    from harness.judges.wrappers import PreemptibleJudge
    from harness.metrics.settings import MetricsSettings
    from harness.runtime.schema import (
        ApiBackendConf,
        ApiOptimizerConf,
        CacheConf,
        HFBackendConf,
        LocalOptimizerConf,
        MetricsConf,
    )
    from harness.zepo.settings import ApiOptimizerSettings, LocalSettings

    for code, conf in (
        (ApiSettings, ApiBackendConf),
        (LocalSettings, LocalOptimizerConf),
        (ApiOptimizerSettings, ApiOptimizerConf),
        (HFSettings, HFBackendConf),
        (CacheSettings, CacheConf),
        (MetricsSettings, MetricsConf),
    ):
        built = dataclasses.asdict(code())
        assert built == {k: v for k, v in dataclasses.asdict(conf()).items() if k in built}, code
    assert ApiSettings().logprob_mode == "exact" and LocalSettings().max_new_tokens == 160
    assert (ApiOptimizerSettings().timeout_s, ApiOptimizerSettings().concurrency) == (60.0, 4)
    assert LocalSettings().min_ratio == 0.1 and LocalSettings().max_attempts == 4
    assert HFSettings().prefix_reuse is True
    assert (MetricsSettings().bootstrap, MetricsSettings().level) == (1000, 0.95)

    class Judge:
        identity = "j"

    cached = CachedJudge(Judge(), ScoreCache(tmp_path / "c.sqlite"))
    assert cached.chunk == PreemptibleJudge(cached).chunk == CacheConf().chunk == 16
    cached.cache.close()


METRIC_PACKAGES = ("metrics", "zepo", "experiments", "report", "runtime", "bench", "judges")
"""The packages whose functions compute, write or show metrics with intervals."""


def metric_functions() -> list[Any]:
    """Every function, method and dataclass defined in METRIC_PACKAGES' modules, but for the
    metrics settings' record and the schema extending it (where the defaults are written)."""
    import importlib
    import pkgutil

    from harness.metrics.settings import MetricsSettings

    found: list[Any] = []
    for pkg in METRIC_PACKAGES:
        package = importlib.import_module(f"harness.{pkg}")
        for info in pkgutil.iter_modules(package.__path__):
            if info.name == "__main__":
                continue
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for obj in vars(module).values():
                if getattr(obj, "__module__", None) != module.__name__:
                    continue
                if inspect.isfunction(obj):
                    found.append(obj)
                elif inspect.isclass(obj) and not issubclass(obj, MetricsSettings):
                    found += [obj] if dataclasses.is_dataclass(obj) else []
                    for v in vars(obj).values():
                        v = v.__func__ if isinstance(v, classmethod | staticmethod) else v
                        found += [v] if inspect.isfunction(v) else []
    return found


def restated_metrics_setting(*fns: Any) -> list[str]:
    """Parameters naming a metrics setting (`level`, `bootstrap`, or `rounds`: the bootstrap rounds)
    whose default is that setting's own value: a second copy (a function takes MetricsSettings)."""
    from harness.metrics.settings import MetricsSettings

    field = {"level": "level", "bootstrap": "bootstrap", "rounds": "bootstrap"}
    found = []
    for fn in fns:
        for p in inspect.signature(fn).parameters.values():
            own = getattr(MetricsSettings, field.get(p.name, ""), ABSENT)
            if own is not ABSENT and type(p.default) is type(own) and p.default == own:
                found.append(
                    f"{fn.__qualname__}({p.name}={p.default!r}) restates MetricsSettings.{field[p.name]}"
                )
    return found


def test_no_metrics_function_restates_a_metrics_default():
    fns = metric_functions()
    names = {f.__qualname__ for f in fns}
    assert {"render_cards", "analyse", "write_run", "run_zepo", "run_sensitivity", "Card"} <= names
    assert not restated_metrics_setting(*fns)


def test_the_metrics_check_catches_a_restated_level():
    """Negative control: render_cards' old signature (rounds=1000, level=0.95) and a write_run-like
    bootstrap=1000 are found; 0 rounds (intervals off), None and the record are not."""

    def render_cards(run_dir: str, *, rounds: int = 1000, level: float = 0.95, seed: int = 0) -> None: ...

    def write_run(out: str, bootstrap: int = 1000, chunk: int = 64) -> None: ...

    def analyse(js: list, rounds: int = 0, level: float | None = None, metrics: Any = None) -> None: ...

    where = "test_the_metrics_check_catches_a_restated_level.<locals>"
    assert restated_metrics_setting(render_cards, write_run, analyse) == [
        f"{where}.render_cards(rounds=1000) restates MetricsSettings.bootstrap",
        f"{where}.render_cards(level=0.95) restates MetricsSettings.level",
        f"{where}.write_run(bootstrap=1000) restates MetricsSettings.bootstrap",
    ]


def test_abb_reads_its_typed_config():
    """A-BB's settings from a bare mapping are those of the schema's defaults (they once differed:
    jitter.samples 0 in code, 5 in the schema; tau_fraction absent in code)."""
    from harness.abb.run import settings_from
    from harness.runtime.experiment_schema import AbbExp

    assert settings_from({}, 0) == settings_from(AbbExp(), 0)
    assert settings_from({}, 0).jitter["samples"] == AbbExp().jitter.samples == 5
