"""Value checks of config settings, run before any work (the schemas' `check()`: harness/runtime/schema.py,
harness/judges/settings.py): each raises a one-line ConfigError that names the key, the bad value,
what is allowed and what to set."""

from __future__ import annotations

import math
import re
from typing import Any

from harness.errors import ConfigError


def bad(key: str, value: Any, want: str) -> ConfigError:
    return ConfigError(f"{key}={value!r} is invalid: {want}; set {key}=...")


def at_least(key: str, value: Any, low: float, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if (
        value is None
        or isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not value >= low
    ):
        raise bad(key, value, f"must be a finite number >= {low:g}" + (" (or null)" if optional else ""))


def within_optional(key: str, value: Any, low: float, high: float, **kw: bool) -> None:
    if value is not None:
        within(key, value, low, high, **kw)


def non_empty(key: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise bad(key, value, "must be a non-empty string")


def check_device(key: str, value: str) -> None:
    if value not in ("auto", "cpu", "cuda") and not re.fullmatch(r"cuda:\d+", value):
        raise bad(key, value, "must be auto, cpu, cuda or cuda:N")


def check_base_url(key: str, value: str) -> None:
    if not value.startswith(("http://", "https://")):
        raise bad(key, value, "must start with http:// or https://")


def within(
    key: str, value: Any, low: float, high: float, *, open_low: bool = False, open_high: bool = False
) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value > high or value < low or (open_low and value == low) or (open_high and value == high):
        raise bad(
            key, value, f"must lie in {'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
        )


def one_of(key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise bad(key, value, f"must be one of {', '.join(choices)}")
