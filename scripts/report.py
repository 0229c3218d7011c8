"""A judge's report card for any run directory, from its judgments.jsonl files alone.

    python scripts/report.py outputs/judge/2026-01-01_12-00-00
    python scripts/report.py outputs/zepo_demo/<stamp> --out /tmp/cards     # a read-only or old run
    python scripts/report.py RUN_DIR --json                                 # the numbers, as JSON

For every judgments.jsonl under RUN_DIR (a judge run's own, a ZEPO run's eval_initial/ and
eval_best/, a sensitivity study's instructions/<index>/): the answer mass, the A-rate with the
order consistency, calibration when human labels exist, and the three pictures
(card_*.png beside each file, or under --out). The same card every run prints when it completes
(harness/metrics/card.py), with the same numbers as results.json. Runs made before the card
existed work too: judgments.jsonl has always carried every answer token's logprob.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from harness.errors import DataError, HarnessError
from harness.files import jsonable
from harness.metrics.bootstrap import check_settings
from harness.metrics.card import render_cards


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", help="a run directory (or any folder holding judgments.jsonl files)")
    ap.add_argument("--out", default=None, help="write pictures and card.md here instead of beside the judgments")
    ap.add_argument("--json", action="store_true", help="print {judged set: numbers} as JSON instead of the text")
    ap.add_argument("--bootstrap", type=int, default=1000,
                    help="bootstrap rounds over documents for the intervals (the run's metrics.bootstrap; 0: none)")
    ap.add_argument("--level", type=float, default=0.95, help="the intervals' level (the run's metrics.level)")
    ap.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (the run's seed)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        if not Path(args.run_dir).is_dir():
            raise DataError("not a directory; give a run directory (outputs/<experiment>/<stamp>)", where=args.run_dir)
        check_settings(args.bootstrap, args.level)
        cards = render_cards(args.run_dir, out_dir=args.out, echo=(lambda _: None) if args.json else print,
                             rounds=args.bootstrap, level=args.level, seed=args.seed)
        if not cards:
            raise DataError("holds no judgments.jsonl; give a run directory of experiment=judge, zepo or "
                            "sensitivity", where=args.run_dir)
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot write the card into {e.filename or args.run_dir} ({e.strerror}); "
              "give --out DIR for a run directory you cannot write to", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({c.name: jsonable({**c.numbers, "intervals": c.intervals}) for c in cards}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
