"""python -m harness.bench SUBCOMMAND ... (the `harness-bench` command)."""

import sys

from harness.bench.cli import main

sys.exit(main())
