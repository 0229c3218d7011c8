"""What a run did, readable: the modules that draw report.html, and harness-paper-tables. The
commands that read finished runs (harness-report, harness-compare, a sweep's index.html) live in
harness/runtime/ (`report_cli.py`, `compare.py`, `sweep_index.py`): this package imports nothing
from harness.runtime.

- `page.py`: report.html (header, cards, metrics with intervals, experiment sections, every pair);
- `sets.py`: the run's records and judged sets; `pairs.py`: a set's pairs, both orders side by side;
- `prompt.py`: the exact prompt of each pair (the judge's chat template, a skeleton per set);
- `sections.py`: the server-drawn HTML pieces; `report.js`, `report.css`: the page's script and style;
- `views.py`, `runlog.py`: links, the run log's warnings; `rundiff.py`: what differs between two runs.
"""
