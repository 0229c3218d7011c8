"""python scripts/report.py RUN_DIR: the same as `harness-report RUN_DIR` (harness/report/cli.py):
the report card and report.html of any run directory, old ones included; a sweep's index.html."""

import sys

from harness.report.cli import main

if __name__ == "__main__":
    sys.exit(main())
