"""A ZEPO run: search on the search documents, then evaluate the initial and the best instruction.

Writes into the run directory:
- `state.json`: the resumable search state (rerun with `hydra.run.dir=<this dir>` to resume);
- `rejections.jsonl`: every optimizer output rejected, with its reason (appended as they happen);
- `history.jsonl`: every scored candidate (text, epoch, parent, all objectives, held-out Spearman);
- `best_instruction.txt`; `eval_initial/` and `eval_best/` (both instructions judged in ONE judge
  call, `evaluate`; the same text once when the best is the initial): judgments.jsonl of the evaluation on
  the search and the evaluation documents (the leaky set) and `heldout/judgments.jsonl` of the
  evaluation documents alone; the run context draws a report card beside each (card.md,
  card_*.png), whose first line names its documents (set.json): `eval_initial/card.md` equals
  `initial.metrics_leaky.none`, `eval_initial/heldout/card.md` `initial.metrics_heldout.none`;
- `results.json`: initial vs best, raw and debiased (metrics.summarize): `metrics` on the
  configured evaluation set, and always both `metrics_leaky` (search documents included, as the
  paper evaluated) and `metrics_heldout` (search documents excluded; null when none is left), each
  with its `intervals_*` and, beside them, `interval_basis_*` (each interval's documents and method:
  harness/metrics/interval.py; "too few documents to tell" below 3), and `gains`: best - initial on
  the same documents, paired, with one sentence each;
- `summary.md` (the before/after table, also printed) and `search.png`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.files import write_json_atomic, write_jsonl_atomic, write_text_atomic
from harness.judges.base import Judge
from harness.judging import document_fingerprints, judge_instructions, write_judgments
from harness.metrics.card import SET_FILE
from harness.metrics.interval import MIN_DOCUMENTS, TOO_FEW, Interval, sentence
from harness.metrics.settings import MetricsSettings, metrics_settings
from harness.metrics.summary import analyse
from harness.progress import counted
from harness.records import Document, Judgment, Tracker
from harness.results import write_results
from harness.zepo import plots, search
from harness.zepo.optimizers import log_rejections, show_progress

log = logging.getLogger(__name__)

CANDIDATE_COLUMNS = [
    "index",
    "epoch",
    "slot",
    "parent",
    "objective",
    "fairness",
    "fairness_prob",
    "confidence",
    "calibration",
    "a_rate",
    "spearman_heldout",
    "selected",
    "text",
]


def evaluate(
    judge: Judge,
    docs: Sequence[Document],
    instructions: Mapping[str, str],
    *,
    aspect: str | None,
    family: str,
    max_candidates: int | None,
    out_dir: Path,
    shuffles: int,
    seed: int,
    progress: bool,
    search_docs: Sequence[Document] = (),
    leak: bool = False,
    intervals: MetricsSettings | None = None,
) -> dict[str, dict[str, Any]]:
    """Every instruction of `instructions` (label -> text: "initial", "best") on the evaluation
    documents and the search documents, in ONE judge call for all of them and both sets
    (harness.judging.judge_instructions: each instruction's prompts, cache keys and judgments as
    its own `judge_documents` call, the pairs interleaved so the judge's prefix reuse computes each
    pair's shared content once). The search documents' pairs were judged by the search, so the
    cache serves them; a text under two labels (the best is the initial) is judged once.

    Per label, in `out_dir/eval_<label>/`: judgments.jsonl and every metric on the leaky set (all
    documents, as the paper evaluated) and on the held-out set (search documents excluded).
    `metrics` is the configured view: leaky when `leak`, else held-out. `intervals`: metrics.bootstrap
    and metrics.level (None: the defaults)."""
    iv = metrics_settings(intervals)
    searched = {d.id for d in search_docs}
    judged = [*(d for d in search_docs if d.id not in {e.id for e in docs}), *docs]
    texts = list(dict.fromkeys(instructions.values()))
    got = judge_instructions(
        judge,
        [(judged, text) for text in texts],
        aspect=aspect,
        family=family,
        max_candidates=max_candidates,
        progress=progress,
    )
    by_text: dict[str, dict[str, Any]] = {}
    for text, (judgments, p_cf) in zip(texts, got):
        held = [j for j in judgments if j.doc_id not in searched]
        leaky_s = analyse(judgments, p_cf=p_cf, shuffles=shuffles, seed=seed, with_intervals=iv)
        held_s = analyse(held, p_cf=p_cf, shuffles=shuffles, seed=seed, with_intervals=iv) if held else None
        leaky, heldout = leaky_s.metrics, None if held_s is None else held_s.metrics
        iv_leaky, iv_held = leaky_s.intervals(), None if held_s is None else held_s.intervals()
        on_leaky, on_held = leaky_s.basis(), None if held_s is None else held_s.basis()
        by_text[text] = {
            "judgments": judgments,
            "held": held,
            "p_cf": p_cf,
            "summaries": {"leaky": leaky_s, "heldout": held_s},
            "result": {
                "instruction": text,
                "p_content_free": p_cf,
                "n_judgments": len(judgments),
                "metrics": leaky if leak else heldout,
                "metrics_leaky": leaky,
                "metrics_heldout": heldout,
                "intervals": iv_leaky if leak else iv_held,
                "intervals_leaky": iv_leaky,
                "intervals_heldout": iv_held,
                "interval_basis": on_leaky if leak else on_held,
                "interval_basis_leaky": on_leaky,
                "interval_basis_heldout": on_held,
                "interval": {"leaky": leaky_s.meta(), "heldout": None if held_s is None else held_s.meta()},
                "n_heldout_docs": len({j.doc_id for j in held}),
            },
        }
    out = {}
    for label, text in instructions.items():
        ev = by_text[text]
        write_sets(out_dir / f"eval_{label}", ev["judgments"], ev["held"], ev["p_cf"])
        out[label] = dict(ev["result"], summaries=ev["summaries"])
    return out


GAINS = ("spearman_pairs", "spearman", "kendall_pairs", "kendall", "a_rate", "fairness", "accuracy")
"""The metrics whose best - initial gain the table states in a sentence (every one is in results.json)."""


def gains(evaluated: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """best - initial on the same documents, paired (the same resampled documents in both arms:
    metrics.bootstrap), for the leaky and the held-out set, raw and permutation-debiased:
    {set: {variant: {metric: {"a", "b", "diff", "interval", "sentence"}}}}."""
    out: dict[str, Any] = {}
    for kind, name in (("heldout", "held-out"), ("leaky", "leaky")):
        a, b = evaluated["initial"]["summaries"][kind], evaluated["best"]["summaries"][kind]
        if a is None or b is None:
            out[kind] = None
            continue
        out[kind] = {
            v: a.versus(b, f"{name} {'' if v == 'none' else v + '-debiased '}", v)
            for v in ("none", "permutation")
        }
    return out


def write_sets(out_dir: Path, judgments: Sequence[Judgment], held: Sequence[Judgment], p_cf: float) -> None:
    """The evaluation's judged sets, each with a SET_FILE naming its documents, so that each report
    card says which documents it covers: `out_dir/` all judged documents (leaky when search
    documents are among them, as the paper evaluated) and `out_dir/heldout/` the held-out ones
    alone (only when both kinds are present)."""
    n_all, n_held = len({j.doc_id for j in judgments}), len({j.doc_id for j in held})
    out_dir.mkdir(parents=True, exist_ok=True)
    write_judgments(out_dir / "judgments.jsonl", judgments, p_cf)
    if n_held == n_all:
        write_json_atomic(
            out_dir / SET_FILE,
            {"documents": f"held-out: all {counted(n_all, 'document')}, no search document"},
        )
        return
    write_json_atomic(
        out_dir / SET_FILE,
        {
            "documents": f"leaky: all {counted(n_all, 'document')}, the "
            f"{counted(n_all - n_held, 'search document')} included"
        },
    )
    if held:
        (out_dir / "heldout").mkdir(exist_ok=True)
        write_judgments(out_dir / "heldout" / "judgments.jsonl", held, p_cf)
        write_json_atomic(
            out_dir / "heldout" / SET_FILE,
            {"documents": f"held-out: {counted(n_held, 'document')}, search documents excluded"},
        )


def _candidate_row(c: search.ScoredCandidate, objective: str, best: int) -> list[Any]:
    o = c.objectives
    return [
        c.index,
        c.epoch,
        c.slot,
        c.parent,
        o[objective],
        o["fairness"],
        o["fairness_prob"],
        o["confidence"],
        o["calibration"],
        c.a_rate,
        c.spearman_heldout,
        c.index == best,
        c.text,
    ]


class _Recorder:
    """Writes history.jsonl after every candidate and logs per-candidate/per-epoch metrics."""

    def __init__(self, out_dir: Path, tracker: Tracker | None, objective: str) -> None:
        self.out_dir, self.tracker, self.objective = out_dir, tracker, objective
        self.history: list[search.ScoredCandidate] = []

    def candidate(self, c: search.ScoredCandidate, best: search.ScoredCandidate, fresh: bool) -> None:
        self.history.append(c)
        self.write(best.index)
        if fresh and self.tracker is not None:
            self.tracker.log(
                {
                    "candidate/objective": c.objectives[self.objective],
                    "candidate/fairness": c.fairness,
                    "candidate/a_rate": c.a_rate,
                    "candidate/confidence": c.confidence,
                    "candidate/spearman_heldout": _num(c.spearman_heldout),
                    "best/objective": best.objectives[self.objective],
                },
                step=c.index,
            )

    def epoch(self, epoch: int, scored: list[search.ScoredCandidate], best: search.ScoredCandidate) -> None:
        if self.tracker is None or not scored:
            return
        fair = [c.fairness for c in scored if not math.isnan(c.fairness)]
        self.tracker.log(
            {
                "epoch": epoch,
                "epoch/best_fairness": best.fairness,
                "epoch/best_objective": best.objectives[self.objective],
                "epoch/best_spearman_heldout": _num(best.spearman_heldout),
                "epoch/mean_fairness": sum(fair) / len(fair) if fair else math.nan,
            },
            step=scored[-1].index,
        )

    def write(self, best: int) -> None:
        write_jsonl_atomic(
            self.out_dir / "history.jsonl", [dict(c.to_row(), selected=c.index == best) for c in self.history]
        )


def _num(x: float | None) -> float:
    return math.nan if x is None else float(x)


def run_zepo(
    judge: Judge,
    optimizer: Any,
    search_docs: Sequence[Document],
    eval_docs: Sequence[Document],
    *,
    initial: str,
    task: str,
    aspect: str | None,
    family: str,
    settings: search.SearchSettings,
    out_dir: str | Path,
    tracker: Tracker | None = None,
    progress: bool = False,
    leak_search_docs: bool = False,
    extra: Mapping[str, Any] | None = None,
    after_epoch: Callable[[int], None] | None = None,
    intervals: MetricsSettings | None = None,
) -> dict[str, Any]:
    """Search on `search_docs` (each epoch one judge call), then evaluate the initial and the best
    instruction on `eval_docs` (one judge call for both, `evaluate`, with `intervals`: metrics.bootstrap
    and metrics.level, None: the defaults).

    `after_epoch(epoch)` runs once each epoch is recorded (tests raise there to simulate a kill).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_rejections(optimizer, out / "rejections.jsonl")
    show_progress(optimizer, progress)
    rec = _Recorder(out, tracker, settings.objective)

    def on_epoch(epoch: int, scored: list[search.ScoredCandidate], best: search.ScoredCandidate) -> None:
        rec.epoch(epoch, scored, best)
        if after_epoch is not None:
            after_epoch(epoch)

    searcher = search.Search(
        judge,
        optimizer,
        initial,
        aspect,
        family,
        search_docs,
        eval_docs,
        settings,
        state_path=out / "state.json",
        progress=progress,
        on_candidate=rec.candidate,
        on_epoch=on_epoch,
    )
    result = searcher.run()
    rec.write(result.best.index)
    write_text_atomic(out / "best_instruction.txt", result.best.text.strip() + "\n")
    chosen = {"initial": result.initial, "best": result.best}
    evaluated = evaluate(
        judge,
        eval_docs,
        {label: c.text for label, c in chosen.items()},
        aspect=aspect,
        family=family,
        max_candidates=settings.max_candidates,
        out_dir=out,
        shuffles=settings.shuffles,
        seed=settings.seed,
        progress=progress,
        search_docs=search_docs,
        leak=leak_search_docs,
        intervals=intervals,
    )
    final = {}
    for label, cand in chosen.items():
        search_view = {
            "objectives": dict(cand.objectives),
            "a_rate": cand.a_rate,
            "a_rate_prob": cand.a_rate_prob,
        }
        shown = {k: v for k, v in evaluated[label].items() if k != "summaries"}
        final[label] = {**shown, "index": cand.index, "epoch": cand.epoch, "search": search_view}
    results = {
        "experiment": "zepo",
        "task": task,
        "aspect": aspect,
        "family": family,
        "judge": judge.identity,
        "numerics": getattr(judge, "numerics", None),
        "optimizer": getattr(optimizer, "identity", type(optimizer).__name__),
        **dict(extra or {}),
        "judge_calls": getattr(judge, "calls", None),  # this process's cache misses (attempts.jsonl: all)
        "objective": settings.objective,
        "settings": asdict(settings),
        "leak_search_docs": leak_search_docs,
        "search_doc_ids": [d.id for d in search_docs],
        "eval_doc_ids": [d.id for d in eval_docs],
        "documents_sha256": document_fingerprints([*search_docs, *eval_docs]),  # what the report checks
        "n_candidates": len(result.candidates),
        "optimizer_rejections": getattr(
            optimizer, "rejections", None
        ),  # this process's; all in rejections.jsonl
        "improved": result.best.index != result.initial.index,
        **final,
        "gains": gains(evaluated),  # best - initial, paired over the same documents
    }
    results = write_results(out / "results.json", results)
    _report(results, result, out, tracker)
    return results


def _report(
    results: Mapping[str, Any], result: search.SearchResult, out: Path, tracker: Tracker | None
) -> None:
    table = before_after_table(results)  # gains' sentences under it
    print(table, flush=True)
    write_text_atomic(out / "summary.md", table + "\n")
    if tracker is None:
        return
    rows = [_candidate_row(c, result.objective, result.best.index) for c in result.candidates]
    tracker.log_table("candidates", CANDIDATE_COLUMNS, rows)
    # Every evaluation number says which documents it covers: initial/leaky/spearman (the search
    # documents included, as the paper evaluated) and initial/heldout/spearman.
    tracker.summary(
        {
            f"{label}/{view}/{k}": v
            for label in ("initial", "best")
            for view in ("leaky", "heldout")
            for k, v in ((results[label].get(f"metrics_{view}") or {}).get("none") or {}).items()
        }
        | {"best/instruction": result.best.text, "improved": int(results["improved"])}
    )
    plots.log_figure(
        tracker,
        "search",
        plots.plot_search(result.candidates, out / "search.png", objective=result.objective),
    )


def before_after_table(results: Mapping[str, Any]) -> str:
    """Markdown: initial vs best. Every column names its documents: "search" (the objective and the
    decision rate the search saw), "held-out" (evaluation documents only) or "leaky" (the search
    documents included, as the paper evaluated); the A-rate, mean P(A) and win-rate Spearman are of
    the configured evaluation set (`experiment.leak_search_docs`). PairS Spearman: the mean over
    every initial order where n! <= shuffles (exact), else over the seeded shuffles, with ± one
    standard error of that average when it is not exact."""
    obj = results["objective"]
    kind = "mean P(A)" if obj == "fairness_prob" else "A-rate"
    view = "leaky" if results.get("leak_search_docs") else "held-out"
    gold = by_accuracy(results)
    agreement = (
        "| leaky accuracy | held-out accuracy | leaky accuracy (perm. debiased) "
        "| held-out accuracy (perm. debiased) |"
        if gold
        else f"| leaky Spearman (PairS) | held-out Spearman (PairS) | {view} Spearman (win rate) "
        "| leaky Spearman (PairS, perm. debiased) | held-out Spearman (PairS, perm. debiased) |"
    )
    head = f"| instruction | search {obj} | search {kind} | {view} A-rate | {view} mean P(A) " + agreement
    n_held = results["initial"].get("n_heldout_docs", len(results["eval_doc_ids"]))
    n_search = len(results["search_doc_ids"])
    lines = [
        f"ZEPO {results['task']}/{results['aspect']}: {counted(n_search, 'search document')}, "
        f"{counted(len(results['eval_doc_ids']), 'evaluation document')} ({n_held} held out), "
        f"{counted(results['n_candidates'], 'candidate')} scored; search = the "
        f"{counted(n_search, 'search document')}, held-out = the {n_held} other{'' if n_held == 1 else 's'}, "
        "leaky = all of them (the paper's evaluation)" + (f"; {GOLD_NOTE}" if gold else ""),
        "",
        head,
        "|" + "---|" * (9 if gold else 10),
    ]
    for label in ("initial", "best"):
        r = results[label]
        m = r["metrics"]["none"]
        leaky, held = r.get("metrics_leaky") or r["metrics"], r.get("metrics_heldout") or {}

        def cell(
            where: str, variant: str, key: str, values: Mapping[str, Any] | None = None, r=r, m=m
        ) -> str:
            iv = ((r.get(f"intervals{where}") or {}).get(variant) or {}).get(key)
            on = ((r.get(f"interval_basis{where}") or {}).get(variant) or {}).get(key)
            if key == "spearman_pairs":
                return _pairs(values, iv, on)
            return _iv(m if values is None else values, iv, on, key)

        rate = r["search"]["a_rate_prob"] if obj == "fairness_prob" else r["search"]["a_rate"]
        first = (
            f"| {label} (#{r['index']}) | {_f(r['search']['objectives'][obj])} | {_f(rate)} "
            f"| {cell('', 'none', 'a_rate')} | {cell('', 'none', 'a_rate_prob')} "
        )
        if gold:
            lines.append(
                first
                + " ".join(
                    f"| {cell(where, variant, 'accuracy', part.get(variant) or {})}"
                    for variant in ("none", "permutation")
                    for where, part in (("_leaky", leaky), ("_heldout", held))
                )
                + " |"
            )
            continue
        lines.append(
            first + f"| {cell('_leaky', 'none', 'spearman_pairs', leaky.get('none'))} "
            f"| {cell('_heldout', 'none', 'spearman_pairs', held.get('none'))} "
            f"| {cell('', 'none', 'spearman')} "
            f"| {cell('_leaky', 'permutation', 'spearman_pairs', leaky.get('permutation'))} "
            f"| {cell('_heldout', 'permutation', 'spearman_pairs', held.get('permutation'))} |"
        )
    return "\n".join(lines + gain_lines(results))


GOLD_NOTE = (
    "agreement = accuracy against the gold label (the data has gold labels and no human scores, "
    "so no Spearman)"
)
"""The table's note on gold-label data, once, instead of columns of nan Spearman."""


def by_accuracy(results: Mapping[str, Any]) -> bool:
    """Whether the run's agreement measure is accuracy against a gold label: its evaluation has an
    accuracy and no Spearman (gold-label data without human scores)."""
    m = ((results.get("initial") or {}).get("metrics") or {}).get("none") or {}
    return math.isnan(_num_or_nan(m.get("spearman"))) and not math.isnan(_num_or_nan(m.get("accuracy")))


def _num_or_nan(x: Any) -> float:
    return float(x) if isinstance(x, int | float) else math.nan


def gain_lines(results: Mapping[str, Any]) -> list[str]:
    """The paired best - initial gains as sentences (held-out first), under the table, and one plain
    line when the held-out part is too small to tell anything."""
    g = results.get("gains") or {}
    ivs = (results.get("initial") or {}).get("interval") or {}
    meta = ivs.get("heldout") or ivs.get("leaky") or {}
    if not g:
        return []
    if not meta.get("method"):
        return ["", "best - initial: no intervals (metrics.bootstrap=0)"]
    level = float(meta["level"])
    out = [
        "",
        f"best - initial, paired on the same documents ({level:.0%} interval: {meta['method']}; each "
        f"sentence says over how many documents; "
        + (
            "accuracy = the share of gold-labelled pairs whose decision picks the gold candidate"
            if by_accuracy(results)
            else "PairS = Spearman of the PairS ranking, win rate = of the win rates, each against the human "
            "scores"
        )
        + "; in the table, [lo, hi] is each value's interval by the same method and ± the PairS shuffle "
        "standard error):",
    ]
    agreement = (
        {"accuracy": "accuracy (gold label)"}
        if by_accuracy(results)
        else {"spearman_pairs": "Spearman (PairS)", "spearman": "Spearman (win rate)"}
    )
    names = {**agreement, "a_rate": "A-rate", "fairness": "fairness"}
    for kind in ("heldout", "leaky"):
        for variant in ("none", "permutation"):
            per = ((g.get(kind) or {}).get(variant)) or {}
            for key, name in names.items():
                if key in per and (variant == "none" or key in ("spearman_pairs", "accuracy")):
                    d = per[key]
                    where = "held-out" if kind == "heldout" else "leaky"
                    label = f"{where} {name}" + (" (perm. debiased)" if variant == "permutation" else "")
                    out.append("- " + sentence(label, d["diff"], Interval.from_record(d), level))
    return out + too_small(results)


def too_small(results: Mapping[str, Any]) -> list[str]:
    """The plain line a held-out part below MIN_DOCUMENTS gets (none otherwise)."""
    n = (results.get("initial") or {}).get("n_heldout_docs")
    if n is None or n >= MIN_DOCUMENTS:
        return []
    part = f"{n} document{'' if n == 1 else 's'}" if n else "no document"
    return [
        "",
        f"The held-out part ({part}) is too small to tell whether the best instruction is better than the "
        f"initial one: an interval needs at least {MIN_DOCUMENTS} documents, so no held-out number above "
        f"has one. The leaky numbers include the search documents the best instruction was chosen on.",
    ]


def _bounds(iv: Sequence[float] | None, on: Mapping[str, Any] | None) -> str:
    """ " [lo, hi]", or " (2 docs: too few to tell)" where the interval's record says why it has none."""
    if iv:
        return f" [{_f(iv[0])}, {_f(iv[1])}]"
    if on and on.get("note"):
        why = "too few to tell" if on["note"] == TOO_FEW else on["note"]
        return f" ({on['n_documents']} docs: {why})"
    return ""


def _iv(m: Mapping[str, Any], iv: Sequence[float] | None, on: Mapping[str, Any] | None, key: str) -> str:
    """A value with its interval: "0.620 [0.550, 0.700]" (the value alone without one)."""
    return _f(m.get(key)) + _bounds(iv, on)


def _pairs(
    m: Mapping[str, Any] | None, iv: Sequence[float] | None = None, on: Mapping[str, Any] | None = None
) -> str:
    """A PairS Spearman with ± its shuffle standard error when it has one (not exact), then its
    interval over documents."""
    if not m:
        return "nan"
    se = m.get("spearman_pairs_se")
    spread = f" ± {se:.3f}" if isinstance(se, float) and se > 0 else ""
    return _f(m.get("spearman_pairs")) + spread + _bounds(iv, on)


def _f(x: Any) -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"
