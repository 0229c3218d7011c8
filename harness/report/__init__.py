"""What a run did, readable: report.html per run directory, index.html per sweep, and the commands
that read finished runs (harness-report, harness-compare, harness-paper-tables).

- `page.py`: report.html (header, cards, metrics with intervals, experiment sections, every pair);
- `sets.py`: the run's records and judged sets; `pairs.py`: a set's pairs, both orders side by side;
- `prompt.py`: the exact prompt of each pair (the judge's chat template, a skeleton per set);
- `sections.py`: the server-drawn HTML pieces; `report.js`, `report.css`: the page's script and style;
- `sweep.py`: a sweep's index.html; `cli.py`: harness-report.
"""
