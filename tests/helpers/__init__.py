"""What the tests share, grouped by job; fixtures and pytest hooks stay in tests/conftest.py.

Imported as `helpers` (pytest's rootdir-relative `prepend` import mode puts tests/ on sys.path, as
it does for conftest.py). No test module imports another test module or conftest
(tests/project/test_layout.py checks it): a helper two modules need lives here.

- `cli`: the harness command in a subprocess or in this process (`inprocess`), its isolated
  environment, the one-line error a bad input must give; `harness-bench` likewise.
- `compose`: the shipped Hydra configs composed, the one way tests compose them.
- `engines`: the cross-engine bounds and the overrides of the session's shared engines.
- `servers`: the loopback OpenAI-compatible server, and a served vLLM judge.
- `scripted`: SCRIPTED judges, optimizer, documents and the ZEPO runs built on them;
  `abb`: the A-BB ones (the scripted scenarios live in harness/abb/scenarios.py).
- `data`: small JSONL files and random judgments; `metrics_reference`: the loop metrics.
- `models`: weights and judge identities; `results`: reading a run's outputs;
  `wandb_offline`: an offline W&B run's records; `slurm`: the localhost SLURM cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
SHARED_DATA = Path(os.environ.get("HARNESS_DATA_MIRROR", REPO.parent / "shared" / "data"))
