"""Experiment tracking: local files always, Weights & Biases when enabled.

W&B is never the only record: every metric, table and image also lands in the run directory
(`metrics.jsonl`, `tables/<name>.jsonl`, the image files), so an offline cluster loses nothing.
`mode` follows W&B: "online", "offline" (writes wandb/offline-run-*, `wandb sync` later) or
"disabled" (no W&B calls at all). Secrets never reach W&B: configs pass through `redact`, the
command line W&B records through `redact_overrides`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import operator
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.files import jsonable, write_jsonl_atomic, write_text_atomic
from harness.judging import answer_mass
from harness.metrics.bootstrap import interval_summary
from harness.prompts import render
from harness.records import Candidate, Document, Judgment
from harness.redaction import redact, redact_overrides
from harness.runtime.schema import WandbConf

log = logging.getLogger(__name__)


@contextlib.contextmanager
def redacted_argv() -> Iterator[None]:
    """W&B records the command line (sys.argv) in the run's metadata: show it the redacted one."""
    argv = sys.argv
    sys.argv = [argv[0], *redact_overrides(argv[1:])] if argv else argv
    try:
        yield
    finally:
        sys.argv = argv


class Tracker:
    """Logs to the run directory and, unless disabled, to a W&B run."""

    def __init__(
        self,
        out_dir: str | Path,
        *,
        mode: str | None = None,
        project: str | None = None,
        entity: str | None = None,
        group: str | None = None,
        job_type: str | None = None,
        name: str | None = None,
        run_config: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
    ) -> None:
        default = WandbConf()  # the schema's defaults (conf/config.yaml's wandb), when built in code
        mode, project = mode or default.mode, project or default.project
        tags = default.tags if tags is None else tags
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.mode = mode
        self._run = None
        if mode != "disabled":
            import wandb

            os.environ.setdefault("WANDB_DIR", str(self.out_dir))
            with redacted_argv():
                self._run = wandb.init(
                    project=project,
                    entity=entity,
                    group=group,
                    job_type=job_type,
                    name=name,
                    config=redact(dict(run_config or {})),
                    mode=mode,
                    dir=str(self.out_dir),
                    tags=list(tags),
                    reinit="finish_previous",
                    settings=wandb.Settings(silent=True),
                )

    @property
    def wandb_dir(self) -> str | None:
        return getattr(self._run, "dir", None) if self._run is not None else None

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        row = {"step": step, **jsonable(dict(metrics))}
        with (self.out_dir / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self._run is not None:
            clean = {k: v for k, v in metrics.items() if isinstance(v, int | float) and math.isfinite(v)}
            self._run.log(clean, step=step)

    def log_table(
        self,
        name: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        types: Mapping[str, type] | None = None,
    ) -> None:
        """A W&B table, or `tables/<name>.jsonl` where W&B is disabled. With `types` (column -> str,
        float or bool; None allowed in each; a column not named is text) the columns are declared
        once and each cell checked against its type, instead of W&B inferring every row's types:
        the table goes to W&B as a file in an artifact of its own (`_table_artifact`), whole, which
        lies in the run's own `wandb/` folder (offline or online), so no second local copy is
        written. Without `types`, `tables/<name>.jsonl` is written too."""
        if self._run is None or types is None:
            tables = self.out_dir / "tables"
            tables.mkdir(exist_ok=True)
            write_jsonl_atomic(tables / f"{name}.jsonl", [dict(zip(columns, r)) for r in rows])
        if self._run is None:
            return
        import wandb

        if types is None:
            self._run.log({name: wandb.Table(columns=list(columns), data=[jsonable(list(r)) for r in rows])})
            return
        kinds = [types.get(c, str) for c in columns]
        numbers = [k for k, kind in enumerate(kinds) if kind is float]
        cells = [list(r) for r in rows]
        for row in cells:  # NaN and infinities as null (a W&B number column holds no string)
            for k in numbers:
                if isinstance(row[k], float) and not math.isfinite(row[k]):
                    row[k] = None
        check_cells(name, columns, kinds, cells)
        self._table_artifact(name, columns, kinds, cells)

    def _table_artifact(
        self, name: str, columns: Sequence[str], kinds: Sequence[type], cells: list[list[Any]]
    ) -> None:
        """A declared table as `<name>.table.json` (the file W&B itself writes for a table, which it
        renders on the artifact's page) in an artifact of its own, `<name>-table-<run id>`: W&B's
        header for the declared columns (Table.to_json of the table without rows) with the rows as
        they are, written once by json, not cell by cell by W&B (its serializer walks every cell;
        a logged table is also cut at 10,000 rows, SummEval has 24,000). The file lies in the W&B
        run's folder, the artifact refers to it there (no staged copy)."""
        import wandb

        art = wandb.Artifact(name=_artifact_name(f"{name}-table-{self._run.id}"), type="table")
        doc = wandb.Table(columns=list(columns), dtype=list(kinds), optional=True).to_json(art)
        doc.update(data=cells, nrows=len(cells))
        path = Path(self._run.dir) / f"{name}.table.json"
        write_text_atomic(path, json.dumps(doc, allow_nan=False))
        art.add_file(str(path), name=f"{name}.table.json", policy="immutable")
        self._run.log_artifact(art)

    def log_image(self, name: str, path: str | Path) -> None:
        if self._run is not None:
            import wandb

            self._run.log({name: wandb.Image(str(path))})

    def log_artifact(
        self, name: str, kind: str, paths: Sequence[str | Path], metadata: Mapping[str, Any] | None = None
    ) -> None:
        """The run's files (results, judgments, plots) as one W&B artifact named `<name>-<run id>`:
        its own artifact, not the next version of one that every run of a sweep shares. Local files
        stay where they are; missing paths are skipped. Offline runs stage it for `wandb sync`."""
        files = [Path(p) for p in paths if Path(p).is_file()]
        if self._run is None or not files:
            return
        import wandb

        art = wandb.Artifact(
            name=_artifact_name(f"{name}-{self._run.id}"), type=kind, metadata=jsonable(dict(metadata or {}))
        )
        for f in files:
            rel = f.relative_to(self.out_dir) if f.is_relative_to(self.out_dir) else Path(f.name)
            # immutable: W&B reads the finished file where it is, not a staged second copy of it
            art.add_file(str(f), name=str(rel), policy="immutable")
        self._run.log_artifact(art)

    def update_config(self, values: Mapping[str, Any]) -> None:
        """Add keys to the W&B run's config (what a run learns once its parts are built: the judge's
        identity); redacted like the rest of the config."""
        if self._run is not None:
            self._run.config.update(redact(dict(values)), allow_val_change=True)

    def summary(self, values: Mapping[str, Any]) -> None:
        if self._run is not None:
            for k, v in values.items():
                if isinstance(v, int | float | str):
                    self._run.summary[k] = v

    def finish(self) -> None:
        """End the W&B run with its records on disk. `run.finish()` returns before wandb-core has
        written them to the offline run-*.wandb file (which then holds only its 7-byte header: 3 of
        6 runs, measured with wandb 0.31.0), so a caller reading or syncing the run directory next
        (a test, `wandb sync`, the next job of a multirun in this process) could see a partial run;
        `wandb.teardown()` closes the stream, which writes them, before this returns."""
        if self._run is not None:
            import wandb

            self._run.finish()
            self._run = None
            wandb.teardown()


def log_judge_results(
    tracker: Any, results: Mapping[str, Any], judgments: Sequence[Judgment], docs: Sequence[Document]
) -> None:
    """A judge run's numbers in its tracker: every metric, the summary (intervals, length bias) and
    the judgments table (the judge experiment's, and a merge of its shards': harness.runtime.sweep_end)."""
    flat = {f"{mode}/{k}": v for mode, m in results["metrics"].items() for k, v in m.items()}
    tracker.log(flat)
    lb = results.get("length_bias") or {}
    tracker.summary(
        flat
        | interval_summary(results.get("intervals"))
        | {f"length_bias/{k}": lb[k] for k in ("length", "position", "scale") if k in lb}
    )
    rows = judgment_rows(judgments, docs, results.get("instruction"), results.get("family"))
    tracker.log_table("judgments", JUDGMENT_COLUMNS, rows, JUDGMENT_TYPES)


def check_cells(
    name: str, columns: Sequence[str], kinds: Sequence[type], rows: Sequence[Sequence[Any]]
) -> None:
    """TypeError naming the table, row and column of a cell that is not its column's type (or
    None; an int is a float): a declared W&B table is not checked by W&B row by row."""
    for k, (column, kind) in enumerate(zip(columns, kinds)):
        allowed = {kind, int, type(None)} if kind is float else {kind, type(None)}
        if set(map(type, map(operator.itemgetter(k), rows))) <= allowed:
            continue
        i, cell = next((i, row[k]) for i, row in enumerate(rows) if type(row[k]) not in allowed)
        raise TypeError(
            f"table {name!r} row {i} column {column!r}: {type(cell).__name__} {cell!r}, declared {kind.__name__}"
        )


JUDGMENT_COLUMNS = [
    "doc_id",
    "a_id",
    "b_id",
    "p_a",
    "answer_mass",
    "flags",
    "human_a",
    "human_b",
    "gold_a",
    "a_text",
    "b_text",
    "source",
    "instruction",
    "prompt_template",
]
"""The W&B judgments table: each ordered pair with its reading, flags, human labels, both texts, the
document's source (article, question or dialogue), the run's instruction and the prompt judged as
its template (the user message before the chat template, harness.prompts.render, with PROMPT_SLOTS
standing for the row's own cells, a str.format template: `row_prompt` rebuilds it exactly). Not the prompt itself: it
repeats the row's source and texts, half of the table's bytes (24,000 SummEval rows: 78 of 158 MB)."""
PROMPT_SLOTS = ("source", "a_text", "b_text", "instruction")
"""The columns a `prompt_template` cell names in braces ("{source}"), filled by `row_prompt`."""
JUDGMENT_TYPES: dict[str, type] = {
    "p_a": float,
    "answer_mass": float,
    "human_a": float,
    "human_b": float,
    "gold_a": bool,
}
"""The judgments table's non-text columns (Tracker.log_table's `types`): every other column is text,
so a column added to JUDGMENT_COLUMNS (and `judgment_rows`) that holds text needs nothing here."""


def judgment_rows(
    judgments: Sequence[Judgment],
    docs: Sequence[Document],
    instruction: str | None = None,
    family: str | None = None,
) -> list[list[Any]]:
    """One row per judgment (JUDGMENT_COLUMNS); flags as one comma-separated string; the prompt
    template is None unless the run's instruction and family are given."""
    by_id = {d.id: (d, {c.id: c for c in d.candidates}) for d in docs}
    templates: dict[str, str] = {}  # per context (a document's own knowledge fact, if any)
    rows = []
    for j in judgments:
        doc, cands = by_id[j.doc_id]
        a, b = cands[j.a_id], cands[j.b_id]
        template = None
        if instruction is not None and family is not None:
            template = templates.get(doc.context)
            if template is None:
                template = templates[doc.context] = prompt_template(doc, family)
        rows.append(
            [
                j.doc_id,
                j.a_id,
                j.b_id,
                j.p_a,
                answer_mass(j.token_logprobs),
                ", ".join(j.flags),
                j.human_a,
                j.human_b,
                j.gold_a,
                a.text,
                b.text,
                doc.source,
                instruction,
                template,
            ]
        )
    return rows


def prompt_template(doc: Document, family: str) -> str:
    """The prompt of `doc`'s pairs (harness.prompts.render) as a str.format template: "{source}",
    "{a_text}", "{b_text}" and "{instruction}" where a row's cells go, any other brace doubled; the
    document's context, which has no column, is written out. The same for every instruction: the
    row's own instruction cell fills it."""
    mark = {name: f"\x00{name}\x00" for name in PROMPT_SLOTS}  # no text holds a NUL
    a, b = Candidate("a", mark["a_text"]), Candidate("b", mark["b_text"])
    text = render(replace(doc, source=mark["source"]), a, b, mark["instruction"], family)
    text = text.replace("{", "{{").replace("}", "}}")
    for name, m in mark.items():
        text = text.replace(m, "{" + name + "}")
    return text


def row_prompt(row: Mapping[str, Any]) -> str | None:
    """The prompt a judgments-table row was judged with: its `prompt_template` formatted with the
    row's cells (the instruction stripped, as render strips it). None where it has no template."""
    template = row.get("prompt_template")
    if template is None:
        return None
    return template.format_map({**row, "instruction": str(row["instruction"]).strip()})


def run_name(
    experiment: str, task: str | None = None, aspect: str | None = None, model: str | None = None
) -> str:
    """`<experiment>-<task>-<aspect>-<model>` (parts that are None left out): a run's W&B name, so
    the runs of a sweep read as their grid points instead of W&B's random names."""
    return "-".join(str(p) for p in (experiment, task, aspect, model) if p not in (None, ""))


def _artifact_name(name: str) -> str:
    """W&B artifact names allow letters, digits, '-', '_' and '.' (the run id, last, is kept)."""
    clean = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    return (clean[:60] + clean[-60:] if len(clean) > 120 else clean) or "run"
