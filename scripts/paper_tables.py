"""python scripts/paper_tables.py --table 1 DIRS...: the same as `harness-paper-tables --table 1 DIRS...`
(harness/report/paper_tables.py)."""

import sys

from harness.report.paper_tables import main

if __name__ == "__main__":
    sys.exit(main())
