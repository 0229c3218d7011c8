"""What a report shows of a run directory, read from its files: the run's settings and each
judged set (a judgments.jsonl with its instruction, documents, card and metrics).

Works for every run that wrote these files, old ones included: a judge run's own results.json, a
ZEPO run's eval_<label>/ (and heldout/) folders, a sensitivity study's instructions/<index>/.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.files import read_json, read_text
from harness.judging import load_judgments
from harness.metrics.card import PICTURES, SET_FILE, find_judgments
from harness.metrics.interval import Interval, recorded
from harness.records import Judgment
from harness.results import RunResults

RESULTS_FIX = (
    "not a finished run's results: rerun that run, or move its folder out of the directory you report"
)


@dataclass
class JudgedSet:
    """One judgments.jsonl and what the report shows beside it."""

    path: Path
    name: str
    """Its folder relative to the run directory ("run" for the top level), as the card names it."""
    judgments: list[Judgment]
    documents: str | None = None
    """Which documents it covers (set.json: "leaky: ..." or "held-out: ...")."""
    instruction: str | None = None
    family: str | None = None
    """The task family its prompts were rendered for (the run's)."""
    card: str | None = None
    """card.md's text, when the card was rendered."""
    pictures: dict[str, Path] = field(default_factory=dict)
    metrics: Mapping[str, Any] | None = None
    """variant -> metric -> value (results.json's "metrics" for this set)."""
    intervals: Mapping[str, Any] | None = None
    """variant -> metric -> [lo, hi], beside `metrics`."""
    interval_basis: Mapping[str, Any] | None = None
    """variant -> metric -> {n_documents, method, note}, beside `intervals`: what each rests on, or
    why there is none."""
    interval_record: Mapping[str, Any] | None = None
    """How the intervals were made (results.json "interval": level, method, documents)."""

    def interval(self, variant: str, key: str) -> Interval | None:
        """The interval of metrics[variant][key] as the run records it (None: no record)."""
        return recorded(
            ((self.intervals or {}).get(variant) or {}).get(key),
            ((self.interval_basis or {}).get(variant) or {}).get(key),
            self.interval_record,
        )

    @property
    def level(self) -> float | None:
        level = (self.interval_record or {}).get("level")
        return float(level) if isinstance(level, int | float) else None


@dataclass
class RunFiles:
    """A run directory's records."""

    path: Path
    config: dict[str, Any]
    results: dict[str, Any]
    overrides: list[str]
    sets: list[JudgedSet]
    merge: dict[str, Any] = field(default_factory=dict)
    """merge.json of a run merged from document shards (harness.runtime.shard), {} otherwise."""

    @property
    def experiment(self) -> str:
        return str(
            self.results.get("experiment") or (self.config.get("experiment") or {}).get("name") or "judge"
        )

    def setting(self, group: str, key: str) -> Any:
        return (self.config.get(group) or {}).get(key)


def _json(path: Path, default: Any) -> Any:
    try:
        return read_json(path) if path.is_file() else default
    except HarnessError:
        return default


def read_run(run_dir: str | Path) -> RunFiles:
    """config.json, results.json, overrides.json and every judged set of a run directory."""
    root = Path(run_dir)
    path = root / "results.json"
    # Read as harness-collect reads it: a results.json that is not a run's object is refused.
    results = RunResults.read(path, RESULTS_FIX) if path.is_file() else {}
    merge = _json(root / "merge.json", {})
    run = RunFiles(
        root,
        _json(root / "config.json", {}),
        results,
        list(_json(root / "overrides.json", [])),
        [],
        merge if isinstance(merge, dict) else {},
    )
    run.sets = [read_set(p, run) for p in find_judgments(root)]
    return run


def read_set(path: Path, run: RunFiles) -> JudgedSet:
    folder = path.parent
    rel = folder.relative_to(run.path)
    judgments, _ = load_judgments(path)
    about = _json(folder / SET_FILE, {})
    card = folder / "card.md"
    found = JudgedSet(
        path,
        "run" if rel == Path(".") else rel.as_posix(),
        judgments,
        about.get("documents") if isinstance(about, dict) else None,
        card=read_text(card) if card.is_file() else None,
        pictures={k: folder / f for k, f in PICTURES.items() if (folder / f).is_file()},
    )
    (found.instruction, found.metrics, found.intervals, found.interval_basis, found.interval_record) = (
        set_results(rel, folder, run)
    )
    return found


def set_results(rel: Path, folder: Path, run: RunFiles) -> tuple[str | None, Any, Any, Any, Any]:
    """(instruction, metrics, intervals, interval_basis, interval record) of the judged set in
    `folder`, wherever its writer put them."""
    own = _json(folder / "results.json", {}) if rel != Path(".") else run.results
    if isinstance(own, dict) and isinstance(own.get("instruction"), str):
        return (
            own["instruction"],
            own.get("metrics"),
            own.get("intervals"),
            own.get("interval_basis"),
            own.get("interval"),
        )
    parts = rel.parts
    if parts and parts[0].startswith("eval_"):  # a ZEPO evaluation: eval_<label>/ and eval_<label>/heldout/
        part = run.results.get(parts[0].removeprefix("eval_")) or {}
        view = "heldout" if parts[1:] == ("heldout",) else "leaky"
        return (
            part.get("instruction"),
            part.get(f"metrics_{view}"),
            part.get(f"intervals_{view}"),
            part.get(f"interval_basis_{view}"),
            (part.get("interval") or {}).get(view),
        )
    if len(parts) == 2 and parts[0] == "instructions" and parts[1].isdigit():  # a sensitivity study
        index = int(parts[1])
        row = next((r for r in run.results.get("instructions") or [] if r.get("index") == index), {})
        return (
            sensitivity_text(run.path, index),
            row.get("metrics"),
            row.get("intervals"),
            row.get("interval_basis"),
            run.results.get("interval"),
        )
    return None, None, None, None, None


def sensitivity_text(run_dir: Path, index: int) -> str | None:
    """Instruction `index` of a sensitivity study (sensitivity.jsonl's rows hold each text)."""
    path = run_dir / "sensitivity.jsonl"
    if not path.is_file():
        return None
    for line in read_text(path).splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("index") == index:
            return row.get("text")
    return None


def served_from_cache(results: Mapping[str, Any], merge: Mapping[str, Any] | None = None) -> str:
    """Whether the run's pairs came from the request cache (judge_calls: this process's model calls;
    a run merged from shards (`merge`: its merge.json) made none: judge_calls is the shards' sum)."""
    calls = results.get("judge_calls")
    work = results.get("judge_work") or {}
    if merge:
        shards = merge.get("num_shards") or len(merge.get("shards") or ())
        return f"merged from {shards} shards (merge.json); the shards' model calls together: " + (
            f"{calls} (each shard's last attempt; the rest came from the request cache)"
            if calls is not None
            else "not recorded"
        )
    if calls is None:
        return "not recorded"
    if calls == 0:
        return "yes: every request came from the request cache (0 model calls, no weights loaded)"
    loads = work.get("weight_loads")
    total = results.get("n_judgments")
    of = f" of {total + 1} requests (pairs + the content-free probe)" if isinstance(total, int) else ""
    return (
        f"no: the model scored {calls}{of} in this run's last attempt"
        + (f", weights loaded {loads} time{'s' if loads != 1 else ''}" if loads is not None else "")
        + "; the rest (if any) came from the request cache"
    )
