"""backend.engine_args' values against the installed vLLM's EngineArgs annotations, before any work.

`+backend.engine_args.max_num_seqs=abc` (or a dict, a list) reached vLLM's EngineArgs and came
back as its TypeError when the engine started, about 30 s in. Each value is checked against its
field's annotation: int, float, bool, str, None, Literal[...], unions of them, lists and dicts;
an annotation this check cannot read (a config class such as CompilationConfig, which vLLM also
builds from a dict) is left to vLLM.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any

from harness.errors import ConfigError


def engine_arg_types() -> dict[str, Any]:
    """{EngineArgs field: its annotation as a type}; a string annotation that does not evaluate in
    vLLM's module is left out (not checked)."""
    from vllm.engine.arg_utils import EngineArgs

    module = vars(sys.modules[EngineArgs.__module__])
    out: dict[str, Any] = {}
    for f in dataclasses.fields(EngineArgs):
        try:
            out[f.name] = eval(f.type, module) if isinstance(f.type, str) else f.type  # noqa: S307
        except Exception:  # noqa: BLE001 - an annotation naming what the module does not import
            continue
    return out


def fits(value: Any, kind: Any) -> bool | None:
    """Whether `value` (a plain config value) is of the annotation `kind`; None: cannot tell."""
    if kind is Any:
        return True
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Union or origin is types.UnionType:
        got = [fits(value, a) for a in args]
        return True if True in got else None if None in got else False
    if origin is typing.Literal:
        return value in args
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    if origin in (list, tuple, set, frozenset) or kind in (list, tuple, set, frozenset):
        return isinstance(value, list | tuple)
    if origin in (dict, Mapping) or kind is dict:
        return isinstance(value, Mapping)
    return None


def check_engine_arg_types(args: Mapping[str, Any]) -> None:
    """One ConfigError line for the first value that is not of its EngineArgs annotation."""
    kinds = engine_arg_types()
    for key, value in args.items():
        if key in kinds and fits(value, kinds[key]) is False:
            want = (
                kinds[key].__name__
                if isinstance(kinds[key], type)
                else str(kinds[key]).replace("typing.", "")
            )
            raise ConfigError(
                f"backend.engine_args.{key}={value!r} is not of the type vLLM's EngineArgs declares "
                f"for it ({want}); give a value of that type"
            )
