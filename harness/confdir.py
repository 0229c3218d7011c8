"""Where conf/ is: the one place that knows.

In a checkout conf/ sits at the top level, beside harness/ (the layout is fixed). A wheel ships the
same files inside the package as harness/conf/ (pyproject.toml maps the package `harness.conf` to the
top-level conf/ at build time), so a non-editable install (a container image, a cluster module) finds
its configs without the checkout. A user's own config groups go beside these with Hydra's
`--config-dir DIR` (docs/slurm.md, "Site configs").
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def conf_dir() -> Path:
    """The absolute conf/ folder: the installed package's harness/conf/, else the checkout's conf/."""
    for candidate in (_HERE / "conf", _HERE.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"no conf/config.yaml in {_HERE / 'conf'} (an installed wheel) nor in "
        f"{_HERE.parent / 'conf'} (a checkout): reinstall the package or run from the checkout"
    )
