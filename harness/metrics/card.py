"""A judge's report card: whether a run's P(A) numbers mean anything, from judgments.jsonl alone.

    cards = render_cards(run_dir, tracker)      # every judgments.jsonl under run_dir
    harness-report RUN_DIR                      # the same, for any run (old ones included)

Per judged set (a judgments.jsonl): the answer mass (median, share below MIN_ANSWER_MASS), the
A-rate with the order consistency next to it, calibration when human labels exist, and three
pictures beside the file (card_reliability.png, card_p_a_by_order.png, card_answer_mass.png) that
also go to W&B as images; card.md holds the text. Every number comes from the functions
`metric_set` uses, so the card equals results.json's "none" metrics. A run whose median mass is
below the threshold gets ONE warning line naming the likely causes. Each estimated number carries
its interval over documents (harness/metrics/interval.py: t x the jackknife's RMSE; `rounds`,
`level` and `seed` as the run's metrics.bootstrap, metrics.level and seed, so the card's intervals equal
results.json's "intervals"["none"]): `A-rate 0.62 [0.55, 0.70]`, and the intervals line says how
they were made and over how many documents; below 3 documents (ECE: 8) a number has none and the
card says "too few documents to tell"; rounds=0 says "no intervals". The run context renders the
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

import numpy as np

from harness.errors import HarnessError
from harness.files import read_json, write_text_atomic
from harness.judges.cpu import numerics_line
from harness.judging import MIN_ANSWER_MASS, load_judgments
from harness.metrics.bootstrap import LeaveOneOut, doc_stats, replicate, support
from harness.metrics.calibration import calibration, calibration_pairs
from harness.metrics.correlation import view_correlations
from harness.metrics.interval import EXACT_METHOD, TOO_FEW, Interval, recorded, tidy
from harness.metrics.mass import answer_mass_stats, answer_masses
from harness.metrics.order import view_order_consistency
from harness.metrics.plots import plot_answer_mass, plot_p_a_by_order, plot_reliability
from harness.metrics.ranges import decisions, intervals, unequal_note
from harness.metrics.rates import view_a_rate
from harness.metrics.settings import MetricsSettings, metrics_settings
from harness.metrics.views import DocView, build_frame, document_views
from harness.records import Judgment, Tracker
from harness.results import RunResults

log = logging.getLogger(__name__)

PICTURES = {
    "reliability": "card_reliability.png",
    "p_a_by_order": "card_p_a_by_order.png",
    "answer_mass": "card_answer_mass.png",
}
"""Picture kind -> file name, written beside each judgments.jsonl."""

SET_FILE = "set.json"
"""Optional file beside a judgments.jsonl: {"documents": "..."}, which documents the set covers
(a ZEPO evaluation writes "leaky: ..." or "held-out: ..."); the card's first line names it."""

SKIP = ("wandb", "tables")
"""Folders of a run directory that hold no judged set."""

CARD_KEYS = (
    "n_judgments",
    "n_docs",
    "answer_mass_median",
    "answer_mass_low_share",
    "a_rate",
    "a_rate_prob",
    "order_consistency",
    "order_gap",
    "n_order_pairs",
    "ece",
    "accuracy",
    "n_calibration",
    "spearman",
    "kendall",
)
"""The card's numbers: each is a key of metric_set (results.json's metrics["none"])."""

CAUSES = (
    "no chat template (model.chat_template=false, or a tokenizer without one), a base model that is not "
    "instruction-tuned, or a prompt whose ending does not lead into the answer"
)


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
    level: float
    """The intervals' level (metrics.level)."""
    documents: str | None = None
    """Which documents the set covers (SET_FILE), when its writer said."""
    bounds: Mapping[str, Interval | None] | None = None
    """CARD_KEYS with an interval -> its Interval, with its documents (None: no intervals, rounds=0)."""
    length_bias: Mapping[str, Any] | None = None
    """results.json's "length_bias" when a results.json beside the judgments has one (a judge run)."""
    numerics: Mapping[str, Any] | None = None
    """The run's numerics (results.json "numerics": dtype, its source, engine, device), when recorded."""
    about: str | None = None
    """What the run was: task, aspect, model and backend (`run_about`), when its config.json says."""

    @property
    def intervals(self) -> dict[str, list[float] | None] | None:
        """CARD_KEYS with an interval -> [lo, hi] or None (results.json's "intervals"["none"] form)."""
        return (
            None
            if self.bounds is None
            else {k: None if v is None else v.as_list() for k, v in self.bounds.items()}
        )

    @property
    def low_mass(self) -> bool:
        return self.numbers["answer_mass_median"] < self.numbers["threshold"]


def card_numbers(
    judgments: Sequence[Judgment], threshold: float = MIN_ANSWER_MASS, bins: int = 10
) -> dict[str, float | int]:
    """The card's numbers, computed as metric_set computes them (no correlations: no shuffles)."""
    views = document_views(judgments)
    cal = calibration(judgments, bins=bins)
    win = view_correlations(views, "winrate", 1, 0)  # the win rate draws no shuffles
    values = {
        "n_judgments": len(judgments),
        "n_docs": len(views),
        **answer_mass_stats(judgments, threshold),
        "a_rate": view_a_rate(views, "argmax"),
        "a_rate_prob": view_a_rate(views, "prob"),
        **view_order_consistency(views),
        "ece": cal["ece"],
        "accuracy": cal["accuracy"],
        "n_calibration": int(cal["n"]),
        "spearman": win["spearman"],
        "kendall": win["kendall"],
    }
    sizes = [len(v.ids) for v in views.values()]
    return {
        **{k: values[k] for k in CARD_KEYS},
        "threshold": threshold,
        "candidates_min": min(sizes, default=0),
        "candidates_max": max(sizes, default=0),
    }


def unequal_line(n: Mapping[str, Any]) -> str | None:
    """One line when documents' candidate counts differ more than ranges.UNEQUAL-fold, else None."""
    note = unequal_note(n.get("candidates_min", 0), n.get("candidates_max", 0))
    return None if note is None else f"  documents     {note}; intervals over such mixes: docs/report_card.md"


def card_intervals(
    judgments: Sequence[Judgment],
    numbers: Mapping[str, Any],
    rounds: int,
    level: float,
    seed: int,
    bins: int = 10,
) -> dict[str, Interval | None] | None:
    """The card's numbers' intervals over documents, as `summary.analyse` makes them (None when
    rounds is 0)."""
    if not rounds:
        return None
    frame = build_frame(judgments)
    loo = LeaveOneOut.over(frame.doc_ids, level, rounds, seed)
    win: dict[str, tuple[float, float]] = {}
    view_correlations(frame.views(), "winrate", 1, 0, win)  # the win rate draws no shuffles
    stats = doc_stats(frame, win, {}, bins=bins)
    reps = replicate(stats, np.vstack([loo.columns(frame.doc_ids), loo.boot_columns(frame.doc_ids)]))
    masks = {k: loo.row_mask(frame.doc_ids, v) for k, v in support(stats).items()}
    keep = [k for k in CARD_KEYS if k in reps]
    return intervals(
        numbers,
        {k: reps[k][: loo.rounds] for k in keep},
        masks,
        level,
        {k: reps[k][loo.rounds :] for k in keep},
        counts=decisions(stats.sums, loo.positions(frame.doc_ids), len(loo.ids)),
    )


INTERVAL_KEYS = tuple(
    k for k in CARD_KEYS if k not in ("n_judgments", "n_docs", "n_order_pairs", "n_calibration")
)
"""The card's numbers with an interval (card_intervals' keys): the others are counts."""


def recorded_intervals(
    results: Mapping[str, Any], numbers: Mapping[str, Any], rounds: int, level: float, seed: int
) -> dict[str, Interval | None] | None:
    """The card's intervals as the results.json of the same judgments records them
    (`summary.analyse` makes them as `card_intervals` does), without a second bootstrap: where the
    file's "none" metrics equal the card's `numbers` and it was made with these rounds, level and
    seed, and records each of INTERVAL_KEYS with its basis. None: compute them."""
    meta = results.get("interval")
    none = (results.get("metrics") or {}).get("none")
    ivs = (results.get("intervals") or {}).get("none")
    basis = (results.get("interval_basis") or {}).get("none")
    if not rounds or not all(isinstance(x, Mapping) for x in (meta, none, ivs, basis)):
        return None
    if (meta.get("rounds"), meta.get("level"), meta.get("seed")) != (rounds, level, seed):
        return None
    if any(none.get(k) != numbers[k] for k in CARD_KEYS):  # another set's, or changed since (NaN: computed)
        return None
    got = {k: recorded(ivs.get(k), basis.get(k)) for k in INTERVAL_KEYS}
    if not all(isinstance(basis.get(k), Mapping) and got[k] is not None for k in INTERVAL_KEYS):
        return None
    return got


def split_by_order(
    judgments: Sequence[Judgment], views: Mapping[str, DocView]
) -> tuple[list[float], list[float]]:
    """P(A) of the pairs shown in listed order (A listed before B) and of the swapped ones."""
    pos = {d: {c: n for n, c in enumerate(v.ids)} for d, v in views.items()}
    listed, swapped = [], []
    for j in judgments:
        (listed if pos[j.doc_id][j.a_id] < pos[j.doc_id][j.b_id] else swapped).append(j.p_a)
    return listed, swapped


def set_tag(documents: str | None) -> str:
    """The short name of a judged set's documents for picture titles: "leaky: all 20 documents" of
    SET_FILE's "leaky: all 20 documents, the 5 search documents included" ("" when unnamed)."""
    return documents.split(",")[0].strip() if documents else ""


def draw(
    judgments: Sequence[Judgment],
    numbers: Mapping[str, Any],
    folder: Path,
    label: str,
    documents: str | None = None,
    about: str | None = None,
) -> dict[str, Path]:
    """The three pictures into `folder` (the reliability diagram only with human labels); their
    titles name the set, when its writer said (SET_FILE) whether it is leaky or held-out, and on a
    second line what the run was (`about`: task, aspect, model, backend), so a picture seen alone
    (in W&B) says whose it is."""
    n = numbers
    tag = set_tag(documents)
    label = f"{label} [{tag}]" if tag else label
    second = f"\n{about}" if about else ""
    p, y = calibration_pairs(judgments)
    out = {
        "reliability": plot_reliability(
            p,
            y,
            folder / PICTURES["reliability"],
            title=f"{label}: ECE {_f(n['ece'])}, n={n['n_calibration']}{second}",
        ),
        "p_a_by_order": plot_p_a_by_order(
            *split_by_order(judgments, document_views(judgments)),
            folder / PICTURES["p_a_by_order"],
            title=f"{label}: A-rate {_f(n['a_rate'])}, consistent {_f(n['order_consistency'])}{second}",
        ),
        "answer_mass": plot_answer_mass(
            answer_masses(judgments),
            n["threshold"],
            folder / PICTURES["answer_mass"],
            title=f"{label}: answer-token mass{second}",
        ),
    }
    return {k: v for k, v in out.items() if v is not None}


def find_judgments(run_dir: str | Path) -> list[Path]:
    """Every judgments.jsonl under a run directory, sorted; W&B's folder, hidden folders and the
    tracker's `tables/` (its copy of a logged table is not a judged set) are skipped."""
    root = Path(run_dir)
    return sorted(
        p
        for p in root.rglob("judgments.jsonl")
        if not any(part in SKIP or part.startswith(".") for part in p.relative_to(root).parts[:-1])
    )


def render_card(
    path: Path,
    run_dir: Path,
    out_dir: Path | None = None,
    tracker: Tracker | None = None,
    threshold: float = MIN_ANSWER_MASS,
    metrics: MetricsSettings | None = None,
    seed: int = 0,
) -> Card:
    """One judgments.jsonl's card (`metrics`: None, the defaults): numbers (with intervals unless `metrics.bootstrap` is 0; its
    rounds and `seed` also draw the answer-mass median's bootstrap rounds), pictures and
    card.md in the matching folder of `out_dir` (default: beside the file), images to the tracker."""
    m = metrics_settings(metrics)
    rel = path.parent.relative_to(run_dir)
    name = "run" if rel == Path(".") else rel.as_posix()
    folder = (out_dir or run_dir) / rel
    judgments, _ = load_judgments(path)
    numbers = card_numbers(judgments, threshold)
    about = path.parent / SET_FILE
    documents = read_json(about).get("documents") if about.is_file() else None
    beside = path.parent / "results.json"
    results = RunResults.read(beside) if beside.is_file() else {}
    length = results.get("length_bias")
    about = run_about(run_dir)
    bounds = recorded_intervals(results, numbers, m.bootstrap, m.level, seed)
    card = Card(
        path,
        name,
        numbers,
        draw(judgments, numbers, folder, name, documents, about),
        m.level,
        documents,
        bounds if bounds is not None else card_intervals(judgments, numbers, m.bootstrap, m.level, seed),
        length,
        run_numerics(path, run_dir),
        about,
    )
    write_text_atomic(folder / "card.md", card_text(card, out_dir or run_dir) + "\n")
    if tracker is not None:
        for kind, png in card.pictures.items():
            tracker.log_image(f"card/{name}/{kind}", png)
    return card


def run_about(run_dir: Path) -> str | None:
    """ "summeval coherence, tiny-llama on hf": the task, aspect, model and backend of the run whose
    config.json is in `run_dir` (None without one)."""
    path = run_dir / "config.json"
    try:
        config = read_json(path) if path.is_file() else None
    except HarnessError:
        config = None
    if not isinstance(config, Mapping):
        return None

    def part(group: str, key: str) -> Any:
        return (config.get(group) or {}).get(key) if isinstance(config.get(group), Mapping) else None

    what = " ".join(str(x) for x in (part("task", "name"), part("task", "aspect")) if x)
    who = " on ".join(str(x) for x in (part("model", "name"), part("backend", "name")) if x)
    return ", ".join(x for x in (what, who) if x) or None


def run_numerics(path: Path, run_dir: Path) -> Mapping[str, Any] | None:
    """results.json's "numerics" nearest above a judgments.jsonl, up to the run directory (a ZEPO
    or sensitivity run keeps one results.json at its top); None when none records it."""
    folder = path.parent
    while True:
        results = folder / "results.json"
        if results.is_file():
            try:
                found = RunResults.read(results).numerics
            except (HarnessError, OSError, AttributeError):
                found = None
            if found:
                return found
        if folder == run_dir or folder == folder.parent or not folder.is_relative_to(run_dir):
            return None
        folder = folder.parent


def render_cards(
    run_dir: str | Path,
    tracker: Tracker | None = None,
    out_dir: str | Path | None = None,
    threshold: float = MIN_ANSWER_MASS,
    echo: Callable[[str], None] = print,
    metrics: MetricsSettings | None = None,
    seed: int = 0,
) -> list[Card]:
    """The card of every judged set in a run: rendered, echoed, and one warning when the answer
    mass is low anywhere. `metrics` (None: the defaults), `seed`: the intervals' bootstrap
    (metrics.bootstrap, metrics.level, the run's seed)."""
    run_dir = Path(run_dir)
    out = None if out_dir is None else Path(out_dir)
    cards = [render_card(p, run_dir, out, tracker, threshold, metrics, seed) for p in find_judgments(run_dir)]
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
    return (
        f"answer mass is low in {where}, below {low[0].numbers['threshold']:g}: the answer tokens hold "
        f"little of the judge's next-token probability, so P(A) renormalises what it barely says; "
        f"likely causes: {CAUSES}"
    )


def card_text(card: Card, root: Path) -> str:
    """The card as a few lines of text (printed at the end of a run, card.md, harness-report)."""
    n = card.numbers
    v = _interval_of(card)
    low = n["answer_mass_low_share"]
    cal = (
        f"ECE {v('ece')}, accuracy {v('accuracy')} on {n['n_calibration']} labelled pairs"
        if n["n_calibration"]
        else "no human labels"
    )
    pics = ", ".join(str(_rel(p, root)) for p in card.pictures.values())
    documents = f" [{card.documents}]" if card.documents else ""
    about = f"  intervals     {intervals_line(card)}"
    return "\n".join(
        [
            f"report card {card.name}{documents}: {n['n_judgments']} ordered pairs, {n['n_docs']} "
            f"document{'' if n['n_docs'] == 1 else 's'} ({_rel(card.source, root)})",
            *([f"  run           {card.about}"] if card.about else []),
            f"  answer mass   median {v('answer_mass_median', 3)} of the next-token probability on the answer tokens; "
            f"{_pct(low)} {_pct_interval(card, 'answer_mass_low_share')}of pairs below {n['threshold']:g}",
            f"  position      A-rate {v('a_rate')} (mean P(A) {v('a_rate_prob')}); decision survives swapping "
            f"A and B in {_pct(n['order_consistency'])} {_pct_interval(card, 'order_consistency')}of "
            f"{n['n_order_pairs']} pairs; mean |P(A|i,j) - (1 - P(A|j,i))| {v('order_gap')}",
            f"  calibration   {cal}",
            f"  humans        {_agreement(card, v)}",
            *([unequal_line(n)] if unequal_line(n) else []),
            *([_length_line(card.length_bias)] if card.length_bias else []),
            f"  numerics      {numerics_line(card.numerics)}",
            about,
            f"  pictures      {pics}",
        ]
    )


def _agreement(card: Card, v: Callable[..., str]) -> str:
    """Agreement with humans: the win-rate ranking's Spearman and Kendall per document, averaged;
    on gold-label data without scores, accuracy against the gold label."""
    n = card.numbers
    if math.isnan(n["spearman"]) and n["n_calibration"]:
        # Gold-label data (a preferred candidate per document, no scores): no ranking to correlate,
        # so agreement is how often the judge's choice matches the gold label.
        return (
            f"accuracy {v('accuracy')} against the gold label on {n['n_calibration']} labelled pairs "
            "(Spearman/Kendall need human scores)"
        )
    if math.isnan(n["spearman"]):
        return "no agreement: fewer than two human-scored candidates in every document"
    return (
        f"Spearman {v('spearman')}, Kendall {v('kendall')} of the win-rate ranking vs the human scores, per "
        "document, averaged (PairS in results.json)"
    )


def _length_line(lb: Mapping[str, Any]) -> str:
    """The length-bias fit: log-odds of A per standard deviation of length difference."""

    def with_iv(key: str) -> str:
        iv = lb.get(f"{key}_interval")
        value = lb.get(key)
        text = "nan" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:+.3f}"
        return text + (f" [{iv[0]:+.3f}, {iv[1]:+.3f}]" if iv else "")

    scale = lb.get("scale")
    sd = f"{scale:.0f} words" if isinstance(scale, (int, float)) and math.isfinite(scale) else "nan"
    return (
        f"  length        log-odds of A {with_iv('length')} per SD ({sd}) of len(A) - len(B); "
        f"position (equal lengths) {with_iv('position')}; {lb.get('n_pairs')} pairs"
    )


def intervals_line(card: Card) -> str:
    """How the card's [lo, hi] were made and over how many documents, or why there are none."""
    if card.bounds is None:
        return "no intervals (metrics.bootstrap=0)"
    n = card.numbers["n_docs"]
    methods: dict[str, list[str]] = {}
    for key, iv in card.bounds.items():
        if iv is not None and iv.bounds is not None:
            methods.setdefault(iv.method, []).append(key)
    head = f"[lo, hi]: {card.level:.0%}, {n} document{'' if n == 1 else 's'}; " + "; ".join(
        f"{', '.join(keys)}: {method}" for method, keys in methods.items()
    )
    if methods:
        return head + "; a number on fewer documents says how many"
    return (
        f"none: {n} document{'' if n == 1 else 's'}: too few documents to tell (an interval needs 3, ECE 8)"
    )


def _bounds_note(card: Card, key: str, fmt: Callable[[float], str]) -> str:
    """ " [lo, hi]" (with "(k documents)" when fewer than the card's), "(too few documents to tell)"
    where the card's other numbers have intervals and this one has none, else ""."""
    iv = (card.bounds or {}).get(key)
    if iv is None:
        return ""
    if iv.bounds is None:
        others = any(v is not None and v.bounds is not None for v in (card.bounds or {}).values())
        return f" ({iv.about()})" if others or iv.note != TOO_FEW else ""
    said = [f"{iv.n} documents"] if iv.n != card.numbers["n_docs"] else []
    if iv.method == EXACT_METHOD:
        said.append(f"one-sided: every document at {'0' if iv.bounds[0] == 0 else '1'}")
    if iv.note:
        said.append(iv.note)
    return f" [{fmt(iv.bounds[0])}, {fmt(iv.bounds[1])}]" + (f" ({'; '.join(said)})" if said else "")


def _interval_of(card: Card) -> Callable[..., str]:
    """key -> "value [lo, hi]" (the value alone without an interval)."""

    def show(key: str, digits: int = 3) -> str:
        return _f(card.numbers[key], digits) + _bounds_note(card, key, lambda x: _f(x, digits))

    return show


def _pct_interval(card: Card, key: str) -> str:
    note = _bounds_note(card, key, _pct)
    return f"{note.strip()} " if note else ""


def _rel(p: Path, root: Path) -> Path:
    return p.relative_to(root) if p.is_relative_to(root) else p


def _f(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    x = tidy(x)
    return f"{x:.{digits}g}" if abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}"


def _pct(x: float) -> str:
    return "nan" if math.isnan(x) else f"{100 * x:.0f}%"
