"""python scripts/compare.py RUN_A RUN_B: the same as `harness-compare RUN_A RUN_B` (harness/report/compare.py)."""

import sys

from harness.report.compare import main

if __name__ == "__main__":
    sys.exit(main())
