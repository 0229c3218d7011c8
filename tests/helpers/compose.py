"""The shipped Hydra configs (conf/) composed as a run composes them: the one way tests do it."""

from __future__ import annotations

from collections.abc import Sequence

from helpers import CONF


def compose(overrides: Sequence[str] = (), *, hydra: bool = False):
    """`config` composed with `overrides` from conf/; `hydra`: with the `hydra` section (launcher,
    runtime choices, searchpath)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import harness.runtime.schema  # noqa: F401  (registers the structured configs the groups extend)

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides), return_hydra_config=hydra)
