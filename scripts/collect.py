"""Collect a multirun directory into a table and figures, or merge shard runs.

    python scripts/collect.py table multirun/judge/2026-01-01_12-00-00 --out tables/judge
    python scripts/collect.py merge runs/coh/shard-* --out runs/coh/merged

Same as `python -m harness.runtime.collect ...` (see harness/runtime/collect.py for every option).
"""

import sys

from harness.runtime.collect import main

if __name__ == "__main__":
    sys.exit(main())
