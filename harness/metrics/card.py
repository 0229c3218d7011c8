"""A judge's report card: whether a run's P(A) numbers mean anything, from judgments.jsonl alone.

    cards = render_cards(run_dir, tracker)      # every judgments.jsonl under run_dir
    python scripts/report.py RUN_DIR            # the same, for any run (old ones included)

Per judged set (a judgments.jsonl): the answer mass (median, share below MIN_ANSWER_MASS), the
A-rate with the order consistency next to it, calibration when human labels exist, and three
pictures beside the file (card_reliability.png, card_p_a_by_order.png, card_answer_mass.png) that
also go to W&B as images; card.md holds the text. Every number comes from the functions
`metric_set` uses, so the card equals results.json's "none" metrics. A run whose median mass is
below the threshold gets ONE warning line naming the likely causes. The run context renders the
cards of every completed run (harness.runtime.context), so every experiment that writes judgments
gets one without code of its own.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.files import read_json, write_text_atomic
from harness.judges.cpu import numerics_line
from harness.judging import MIN_ANSWER_MASS, load_judgments
from harness.metrics.calibration import calibration, calibration_pairs
from harness.metrics.mass import answer_mass_stats, answer_masses
from harness.metrics.order import view_order_consistency
from harness.metrics.plots import plot_answer_mass, plot_p_a_by_order, plot_reliability
from harness.metrics.rates import view_a_rate
from harness.metrics.views import DocView, document_views
from harness.records import Judgment, Tracker

log = logging.getLogger(__name__)

PICTURES = {"reliability": "card_reliability.png", "p_a_by_order": "card_p_a_by_order.png",
            "answer_mass": "card_answer_mass.png"}
"""Picture kind -> file name, written beside each judgments.jsonl."""

SET_FILE = "set.json"
"""Optional file beside a judgments.jsonl: {"documents": "..."}, which documents the set covers
(a ZEPO evaluation writes "leaky: ..." or "held-out: ..."); the card's first line names it."""

SKIP = ("wandb", "tables")
"""Folders of a run directory that hold no judged set."""

CARD_KEYS = ("n_judgments", "n_docs", "answer_mass_median", "answer_mass_low_share", "a_rate", "a_rate_prob",
             "order_consistency", "order_gap", "n_order_pairs", "ece", "accuracy", "n_calibration")
"""The card's numbers: each is a key of metric_set (results.json's metrics["none"])."""

CAUSES = ("no chat template (model.chat_template=false, or a tokenizer without one), a base model that is not "
          "instruction-tuned, or a prompt whose ending does not lead into the answer")


@dataclass(frozen=True)
class Card:
    """One judged set's report card."""

    source: Path
    """The judgments.jsonl it was built from."""
    name: str
    """Its folder relative to the run directory ('run' for the top level): W&B image prefix."""
    numbers: Mapping[str, float | int]
    """CARD_KEYS -> value (NaN where undefined), plus 'threshold'."""
    pictures: Mapping[str, Path]
    """Picture kind -> PNG written (the reliability diagram is absent without human labels)."""
    documents: str | None = None
    """Which documents the set covers (SET_FILE), when its writer said."""
    numerics: Mapping[str, Any] | None = None
    """The run's numerics (results.json "numerics": dtype, its source, engine, device), when recorded."""

    @property
    def low_mass(self) -> bool:
        return self.numbers["answer_mass_median"] < self.numbers["threshold"]


def card_numbers(judgments: Sequence[Judgment], threshold: float = MIN_ANSWER_MASS,
                 bins: int = 10) -> dict[str, float | int]:
    """The card's numbers, computed as metric_set computes them (no correlations: no shuffles)."""
    views = document_views(judgments)
    cal = calibration(judgments, bins=bins)
    values = {"n_judgments": len(judgments), "n_docs": len(views), **answer_mass_stats(judgments, threshold),
              "a_rate": view_a_rate(views, "argmax"), "a_rate_prob": view_a_rate(views, "prob"),
              **view_order_consistency(views), "ece": cal["ece"], "accuracy": cal["accuracy"],
              "n_calibration": int(cal["n"])}
    return {**{k: values[k] for k in CARD_KEYS}, "threshold": threshold}


def split_by_order(judgments: Sequence[Judgment], views: Mapping[str, DocView]) -> tuple[list[float], list[float]]:
    """P(A) of the pairs shown in listed order (A listed before B) and of the swapped ones."""
    pos = {d: {c: n for n, c in enumerate(v.ids)} for d, v in views.items()}
    listed, swapped = [], []
    for j in judgments:
        (listed if pos[j.doc_id][j.a_id] < pos[j.doc_id][j.b_id] else swapped).append(j.p_a)
    return listed, swapped


def draw(judgments: Sequence[Judgment], numbers: Mapping[str, Any], folder: Path, label: str) -> dict[str, Path]:
    """The three pictures into `folder` (the reliability diagram only with human labels)."""
    n = numbers
    p, y = calibration_pairs(judgments)
    out = {"reliability": plot_reliability(p, y, folder / PICTURES["reliability"],
                                           title=f"{label}: ECE {_f(n['ece'])}, n={n['n_calibration']}"),
           "p_a_by_order": plot_p_a_by_order(*split_by_order(judgments, document_views(judgments)),
                                             folder / PICTURES["p_a_by_order"],
                                             title=f"{label}: A-rate {_f(n['a_rate'])}, "
                                                   f"consistent {_f(n['order_consistency'])}"),
           "answer_mass": plot_answer_mass(answer_masses(judgments), n["threshold"], folder / PICTURES["answer_mass"],
                                           title=f"{label}: answer-token mass")}
    return {k: v for k, v in out.items() if v is not None}


def find_judgments(run_dir: str | Path) -> list[Path]:
    """Every judgments.jsonl under a run directory, sorted; W&B's folder, hidden folders and the
    tracker's `tables/` (its copy of a logged table is not a judged set) are skipped."""
    root = Path(run_dir)
    return sorted(p for p in root.rglob("judgments.jsonl")
                  if not any(part in SKIP or part.startswith(".") for part in p.relative_to(root).parts[:-1]))


def render_card(path: Path, run_dir: Path, out_dir: Path | None = None, tracker: Tracker | None = None,
                threshold: float = MIN_ANSWER_MASS) -> Card:
    """One judgments.jsonl's card: numbers, pictures and card.md in the matching folder of
    `out_dir` (default: beside the file), images to the tracker."""
    rel = path.parent.relative_to(run_dir)
    name = "run" if rel == Path(".") else rel.as_posix()
    folder = (out_dir or run_dir) / rel
    judgments, _ = load_judgments(path)
    numbers = card_numbers(judgments, threshold)
    about = path.parent / SET_FILE
    documents = read_json(about).get("documents") if about.is_file() else None
    card = Card(path, name, numbers, draw(judgments, numbers, folder, name), documents, run_numerics(path, run_dir))
    write_text_atomic(folder / "card.md", card_text(card, out_dir or run_dir) + "\n")
    if tracker is not None:
        for kind, png in card.pictures.items():
            tracker.log_image(f"card/{name}/{kind}", png)
    return card


def run_numerics(path: Path, run_dir: Path) -> Mapping[str, Any] | None:
    """results.json's "numerics" nearest above a judgments.jsonl, up to the run directory (a ZEPO
    or sensitivity run keeps one results.json at its top); None when none records it."""
    folder = path.parent
    while True:
        results = folder / "results.json"
        if results.is_file():
            try:
                found = read_json(results).get("numerics")
            except (HarnessError, OSError, AttributeError):
                found = None
            if found:
                return found
        if folder == run_dir or folder == folder.parent or not folder.is_relative_to(run_dir):
            return None
        folder = folder.parent


def render_cards(run_dir: str | Path, tracker: Tracker | None = None, out_dir: str | Path | None = None,
                 threshold: float = MIN_ANSWER_MASS, echo: Callable[[str], None] = print) -> list[Card]:
    """The card of every judged set in a run: rendered, echoed, and one warning when the answer
    mass is low anywhere."""
    run_dir = Path(run_dir)
    out = None if out_dir is None else Path(out_dir)
    cards = [render_card(p, run_dir, out, tracker, threshold) for p in find_judgments(run_dir)]
    for card in cards:
        echo(card_text(card, out or run_dir))
    warning = low_mass_warning(cards)
    if warning:
        log.warning(warning)
    return cards


def low_mass_warning(cards: Sequence[Card]) -> str | None:
    """One line for the whole run, or None when every judged set's median mass is at threshold."""
    low = [c for c in cards if c.low_mass]
    if not low:
        return None
    where = ", ".join(f"{c.name} (median {c.numbers['answer_mass_median']:.2g})" for c in low)
    return (f"answer mass is low in {where}, below {low[0].numbers['threshold']:g}: the answer tokens hold "
            f"little of the judge's next-token probability, so P(A) renormalises what it barely says; "
            f"likely causes: {CAUSES}")


def card_text(card: Card, root: Path) -> str:
    """The card as a few lines of text (printed at the end of a run, card.md, scripts/report.py)."""
    n = card.numbers
    low = n["answer_mass_low_share"]
    cal = (f"ECE {_f(n['ece'])}, accuracy {_f(n['accuracy'])} on {n['n_calibration']} labelled pairs"
           if n["n_calibration"] else "no human labels")
    pics = ", ".join(str(_rel(p, root)) for p in card.pictures.values())
    documents = f" [{card.documents}]" if card.documents else ""
    return "\n".join([
        f"report card {card.name}{documents}: {n['n_judgments']} ordered pairs, {n['n_docs']} "
        f"document{'' if n['n_docs'] == 1 else 's'} ({_rel(card.source, root)})",
        f"  answer mass   median {_f(n['answer_mass_median'], 3)} of the next-token probability on the answer tokens; "
        f"{_pct(low)} of pairs below {n['threshold']:g}",
        f"  position      A-rate {_f(n['a_rate'])} (mean P(A) {_f(n['a_rate_prob'])}); decision survives swapping "
        f"A and B in {_pct(n['order_consistency'])} of {n['n_order_pairs']} pairs; "
        f"mean |P(A|i,j) - (1 - P(A|j,i))| {_f(n['order_gap'])}",
        f"  calibration   {cal}",
        f"  numerics      {numerics_line(card.numerics)}",
        f"  pictures      {pics}"])


def _rel(p: Path, root: Path) -> Path:
    return p.relative_to(root) if p.is_relative_to(root) else p


def _f(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return f"{x:.{digits}g}" if abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}"


def _pct(x: float) -> str:
    return "nan" if math.isnan(x) else f"{100 * x:.0f}%"
