"""harness-report RUN_OR_SWEEP_DIR: write (or refresh) the report card and report.html of any run,
old ones included, from its files; a sweep directory also gets index.html.

    harness-report outputs/judge/2026-01-01_12-00-00
    harness-report multirun/judge/2026-01-01_12-00-00          # every job, then index.html
    harness-report RUN_DIR --out /tmp/cards                      # a read-only run: cards and page elsewhere
    harness-report RUN_DIR --json                                # the cards' numbers as JSON

For every judgments.jsonl under a run (a judge run's own, a ZEPO run's eval_initial/ and
eval_best/, a sensitivity study's instructions/<index>/): the card (harness/metrics/card.py: answer
mass, A-rate with the order consistency, calibration, three pictures, card.md), with the run's own
bootstrap settings (config.json: metrics.bootstrap, metrics.level, seed) unless given; then
report.html (harness/report/page.py). The candidates' texts come from the task's data as the run's
config.json names it, the exact prompts from the judge's tokenizer (never its weights).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.checks import within_optional
from harness.errors import DataError, HarnessError
from harness.files import jsonable, read_json, read_json_object
from harness.judging import document_fingerprints
from harness.metrics.bootstrap import check_settings
from harness.metrics.card import find_judgments, render_cards
from harness.metrics.settings import MetricsSettings
from harness.outputs import refuse_other_run, writable_folder
from harness.records import Document
from harness.report.page import write_report
from harness.report.prompt import ChatView, config_view
from harness.runtime.collect import find_runs
from harness.runtime.context import load_documents
from harness.runtime.schema import MetricsConf
from harness.runtime.sweep_index import is_sweep, write_index


def run_settings(run_dir: Path, args: argparse.Namespace) -> tuple[int, float, int]:
    """(rounds, level, seed): the flags, else the run's config.json, else the schema's defaults and 0."""
    config = read_json(run_dir / "config.json") if (run_dir / "config.json").is_file() else {}
    metrics = config.get("metrics") or {} if isinstance(config, dict) else {}
    rounds = (
        args.bootstrap if args.bootstrap is not None else int(metrics.get("bootstrap", MetricsConf.bootstrap))
    )
    level = args.level if args.level is not None else float(metrics.get("level", MetricsConf.level))
    seed = (
        args.seed if args.seed is not None else int(config.get("seed", 0) if isinstance(config, dict) else 0)
    )
    check_settings(rounds, level)
    return rounds, level, seed


class Loaded(dict):
    """What one harness-report call loaded, by the config sections it came from: the jobs of a
    sweep share their task's documents and their judge's tokenizer, so each is loaded once."""

    def get_or(self, kind: str, part: Any, make: Any) -> Any:
        try:
            key = (kind, json.dumps(part, sort_keys=True, default=str))
        except (TypeError, ValueError):
            return make()
        if key not in self:
            self[key] = make()
        return self[key]


def documents(run_dir: Path, loaded: Loaded | None = None) -> tuple[list[Document] | None, str | None]:
    """The run's documents, loaded as its config.json says (None and the reason when they cannot be)."""
    path = run_dir / "config.json"
    if not path.is_file():
        return None, "config.json not found: candidate texts and prompts are not shown"
    config = read_json(path)
    loaded = Loaded() if loaded is None else loaded
    try:
        return loaded.get_or(
            "documents",
            [config.get("task"), config.get("data")],
            lambda: load_documents(config["task"], config["data"]),
        ), None
    except (HarnessError, OSError, KeyError, TypeError, AttributeError) as e:
        return None, (
            f"the task's documents could not be loaded ({e}): candidate texts and prompts are not shown; "
            "fetch the data (harness-fetch --mirror DIR or HARNESS_DATA_MIRROR) and run harness-report again"
        )


def changed_documents(run_dir: Path, docs: list[Document] | None) -> str | None:
    """Why the loaded documents are not the ones the run judged (results.json "documents_sha256",
    runs from before it are not checked), or None: an edited data file showed its new texts and
    prompts beside the old P(A)."""
    path = run_dir / "results.json"
    recorded = read_json(path).get("documents_sha256") if docs is not None and path.is_file() else None
    if not isinstance(recorded, dict) or docs is None:
        return None
    now = document_fingerprints(docs)
    differ = [d for d, sha in recorded.items() if now.get(d) != sha]
    if not differ:
        return None
    return (
        f"the task's data changed since the run: {len(differ)} of its {len(recorded)} documents differ "
        f"(first: {differ[0]!r}); candidate texts and prompts are not shown beside numbers judged on "
        "other texts: restore the data the run used (data.dir / HARNESS_DATA_MIRROR) or rerun it"
    )


def chat_view(run_dir: Path, loaded: Loaded | None = None) -> ChatView | None:
    path = run_dir / "config.json"
    if not path.is_file():
        return None
    config = read_json(path)
    if not isinstance(config, dict):
        return config_view(config)
    return (Loaded() if loaded is None else loaded).get_or(
        "view", [config.get("model"), config.get("backend")], lambda: config_view(config)
    )


def report_run(
    run_dir: Path,
    args: argparse.Namespace,
    echo: Any,
    sweep: Path | None = None,
    loaded: Loaded | None = None,
) -> list[Any]:
    """Cards (when the run judged pairs) and report.html of one run (`sweep`: the sweep directory it
    is reported as a job of, whose index.html its page links; `loaded`: what earlier jobs of this
    call loaded); returns the cards."""
    cards = []
    out = None if args.out is None else Path(args.out)
    if (run_dir / "results.json").is_file():  # an array, null, NaN or Infinity: one line, before any card
        read_json_object(run_dir / "results.json", "give the directory of a finished run")
    if find_judgments(run_dir):
        rounds, level, seed = run_settings(run_dir, args)
        cards = render_cards(
            run_dir, out_dir=out, echo=echo, metrics=MetricsSettings(rounds, level), seed=seed
        )
    elif not (run_dir / "results.json").is_file():
        raise DataError(
            "holds no judgments.jsonl and no results.json; give a run directory "
            "(outputs/<experiment>/<stamp>) or a sweep directory (multirun/<experiment>/<stamp>)",
            where=str(run_dir),
        )
    docs, note = documents(run_dir, loaded)
    changed = changed_documents(run_dir, docs)
    if changed is not None:
        docs, note = None, changed
        print(f"warning: {run_dir}: {changed}", file=sys.stderr)
    target = run_dir
    if out is not None:  # the page beside the cards: copy the run's small records there first
        target = out
        for name in (
            "config.json",
            "results.json",
            "overrides.json",
            "abb.json",
            "history.jsonl",
            "summary.md",
            "scores.jsonl",
            "sensitivity.jsonl",
            "run.log",
        ):
            if (run_dir / name).is_file():
                shutil.copy2(run_dir / name, out / name)
        for p in find_judgments(run_dir):
            rel = p.relative_to(run_dir)
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, out / rel)
    page = write_report(target, docs, chat_view(run_dir, loaded) if docs is not None else None, note, sweep)
    echo(f"report: {page}")
    return cards


def check_out(run_dir: Path, out: Path) -> None:
    """--out must be a folder this process can write that holds no other run: a copy of this
    run's own results.json (an earlier --out of it) is written again."""
    writable_folder(out)

    def same(folder: Path) -> bool:
        try:
            return (folder / "results.json").read_bytes() == (run_dir / "results.json").read_bytes()
        except OSError:
            return False

    refuse_other_run(out, same=same)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="harness-report", description=__doc__.splitlines()[0])
    ap.add_argument(
        "run_dir", help="a run directory, or a sweep directory (every job below it, plus index.html)"
    )
    ap.add_argument(
        "--out", default=None, help="write cards and report.html here instead of into the run directory"
    )
    ap.add_argument(
        "--json", action="store_true", help="print {judged set: numbers} as JSON instead of the text"
    )
    ap.add_argument(
        "--bootstrap",
        type=int,
        default=None,
        help="bootstrap rounds over documents for the intervals (default: the run's metrics.bootstrap)",
    )
    ap.add_argument(
        "--level", type=float, default=None, help="the intervals' level (default: the run's metrics.level)"
    )
    ap.add_argument("--seed", type=int, default=None, help="the bootstrap's seed (default: the run's seed)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    echo = (lambda _: None) if args.json else print
    root = Path(args.run_dir)
    try:
        within_optional("--seed", args.seed, 0, 2**32 - 1)  # numpy's range, before any work
        if not root.is_dir():
            raise DataError(
                "not a directory; give a run directory (outputs/<experiment>/<stamp>)", where=str(root)
            )
        if args.out is not None and Path(args.out).resolve() == root.resolve():
            args.out = None  # --out RUN is the run itself: in place, nothing copied onto itself
        if is_sweep(root):
            if args.out is not None:
                raise DataError(
                    "--out works for one run; a sweep's jobs are reported in place", where=str(root)
                )
            loaded = Loaded()
            cards = [c for job in find_runs(root) for c in report_run(job, args, echo, root, loaded)]
            echo(f"index: {write_index(root)}")
        else:
            if args.out is not None:  # before any card: a folder to write, holding no other run
                check_out(root, Path(args.out))
            cards = report_run(root, args, echo)
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(
            f"error: cannot write into {e.filename or args.run_dir} ({e.strerror}); give --out DIR for a run "
            "directory you cannot write to",
            file=sys.stderr,
        )
        return 2
    if args.json:
        print(
            json.dumps({c.name: jsonable({**c.numbers, "intervals": c.intervals}) for c in cards}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
