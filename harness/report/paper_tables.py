"""harness-paper-tables --table 1 multirun/paper_table1/<time> [more dirs] [--out tables/table1]

Gather ZEPO run directories (every results.json with "experiment": "zepo", and for Table 1's Scoring
and G-Eval rows "experiment": "pointwise", found under the given directories) into the ZEPO paper's
table layouts, our numbers beside the paper's:
  Table 1: Spearman, Pairwise (initial instruction), ZEPO (best), Scoring and G-Eval (pointwise runs),
           NewsRoom COH REL INF FLU, SummEval COH FLU CON REL, per judge model, with the average;
  Table 2: NewsRoom, Pairwise/ZEPO, raw and after permutation debiasing; ZEPO+Debias is read from
           runs whose search scored debiased judgments (experiment.search_debias=permutation);
  Table 3: dialogue NAT ENG OVE (the dialogue file used is named in the caption);
  Table 5: fairness of the initial vs the ZEPO instruction (search set; evaluation leaky and held out).
Every ZEPO cell reads "leaky / held-out (paper)": leaky = evaluated on all documents, the search
documents included, as the paper (and the official code) did; held-out = the search documents left
out. A pointwise run searches nothing, so its cells hold one value. Writes <out>.md and <out>.csv
(long format) and prints the markdown. Spearman is the per-document PairS merge-sort ranking averaged
over shuffles (the paper's) unless --ranking winrate. When several runs cover one cell, the newest
results.json wins (a warning says so). Where results.json has the interval of a cell's value
(a ZEPO run's intervals_leaky / intervals_heldout: harness/metrics/interval.py) the
value reads `.47 [.30, .60]`; a ZEPO row's held-out value is marked † when its paired held-out
gain over the initial instruction (results.json "gains", the same run and documents) is
distinguishable from 0 at the interval's level. The CSV has the bounds and the gain with its
interval and sentence.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.files import csv_cell, write_text_atomic
from harness.metrics.interval import Interval
from harness.metrics.interval import distinguishable as excludes_zero
from harness.outputs import writable_file
from harness.results import RunResults

MISTRAL, LLAMA = "Mistral-7B-Instruct-v0.1", "Meta-Llama-3-8B-Instruct"
SHORT = {MISTRAL: "Mistral-7B", LLAMA: "Llama-3-8B"}
ABBR = {
    "coherence": "COH",
    "relevance": "REL",
    "informativeness": "INF",
    "fluency": "FLU",
    "consistency": "CON",
    "naturalness": "NAT",
    "engagingness": "ENG",
    "overall": "OVE",
}

T1_COLS = [("newsroom", a) for a in ("coherence", "relevance", "informativeness", "fluency")] + [
    ("summeval", a) for a in ("coherence", "fluency", "consistency", "relevance")
]
T2_COLS = T1_COLS[:4]
T3_COLS = [("dialogue", a) for a in ("naturalness", "engagingness", "overall")]
T5_CELLS = [
    ("summeval", "coherence"),
    ("summeval", "fluency"),
    ("summeval", "consistency"),
    ("summeval", "relevance"),
    ("newsroom", "informativeness"),
]

# The paper's numbers (shared/reference/zepo.md). None = not reported.
PAPER: dict[tuple[int, str, str], list[float | None]] = {
    (1, MISTRAL, "Pairwise"): [0.33, 0.40, 0.19, 0.19, 0.06, 0.01, 0.07, 0.16],
    (1, MISTRAL, "ZEPO"): [0.47, 0.38, 0.44, 0.48, 0.29, 0.13, 0.32, 0.30],
    (1, LLAMA, "Pairwise"): [0.49, 0.51, 0.46, 0.45, 0.24, 0.12, 0.30, 0.21],
    (1, LLAMA, "ZEPO"): [0.57, 0.54, 0.55, 0.56, 0.40, 0.25, 0.30, 0.39],
    (2, LLAMA, "Pairwise"): [0.49, 0.51, 0.46, 0.45],
    (2, LLAMA, "ZEPO"): [0.57, 0.54, 0.55, 0.56],
    (2, LLAMA, "Pairwise+Debias"): [0.60, 0.61, 0.64, 0.58],
    (2, LLAMA, "ZEPO+Debias"): [0.64, 0.61, 0.72, 0.57],
    (3, MISTRAL, "Pairwise"): [0.13, 0.18, 0.22],
    (3, MISTRAL, "ZEPO"): [0.14, 0.25, 0.28],
    (3, LLAMA, "Pairwise"): [None, None, 0.14],
    (3, LLAMA, "ZEPO"): [0.16, 0.26, 0.46],
    (1, LLAMA, "Scoring"): [0.42, 0.41, 0.30, 0.29, 0.35, 0.23, 0.32, 0.46],
    (1, LLAMA, "G-Eval"): [None] * 8,  # the paper gives only the average
}
PAPER_AVG = {
    (1, MISTRAL, "Pairwise"): 0.18,
    (1, MISTRAL, "ZEPO"): 0.35,
    (1, LLAMA, "Pairwise"): 0.35,
    (1, LLAMA, "ZEPO"): 0.45,
    (2, LLAMA, "Pairwise"): 0.48,
    (2, LLAMA, "ZEPO"): 0.56,
    (2, LLAMA, "Pairwise+Debias"): 0.61,
    (2, LLAMA, "ZEPO+Debias"): 0.64,
    (1, LLAMA, "Scoring"): 0.35,
    (1, LLAMA, "G-Eval"): 0.33,
}
PAPER_T5 = {
    "coherence": (-0.288, -0.007),
    "fluency": (-0.417, -0.018),
    "consistency": (-0.295, -0.012),
    "relevance": (-0.3625, -0.0003),
    "informativeness": (-0.217, -0.001),
}

# method -> (which instruction, which debiasing variant of metrics.summarize, which search)
METHODS = {
    "Pairwise": ("initial", "none", "none"),
    "ZEPO": ("best", "none", "none"),
    "Pairwise+Debias": ("initial", "permutation", "none"),
    "ZEPO+Debias": ("best", "permutation", "permutation"),
}
POINTWISE = {"Scoring": "scoring", "G-Eval": "geval"}
"""Table 1's pointwise rows -> the pointwise experiment's metric group."""
DIALOGUE = ("usr_zepo", "topicalchat")
SPLITS = ("leaky", "heldout")


def find_results(dirs: Iterable[str | Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Every ZEPO and pointwise results.json under the given directories (or the files themselves)."""
    found = []
    for d in dirs:
        d = Path(d)
        files = [d] if d.is_file() else sorted(d.rglob("results.json"))
        for f in files:
            try:
                res = RunResults.read(f)
            except HarnessError as e:
                print(f"warning: {f}: skipped ({e})", file=sys.stderr)
                continue
            if res.experiment in ("zepo", "pointwise"):
                found.append((f, res))
    return found


def run_kind(res: Mapping[str, Any]) -> str:
    """ "pointwise", or the search a ZEPO run used: "none" (raw) | "permutation" (debiased)."""
    if res.get("experiment") == "pointwise":
        return "pointwise"
    return str((res.get("settings") or {}).get("debias") or "none")


def index_runs(
    found: Sequence[tuple[Path, dict[str, Any]]],
) -> dict[tuple[str, str, str, str], tuple[Path, dict]]:
    """(model, task, aspect, kind) -> the newest run; dialogue tasks also answer to task 'dialogue'."""
    out: dict[tuple[str, str, str, str], tuple[Path, dict]] = {}
    for f, res in sorted(found, key=lambda x: x[0].stat().st_mtime):
        model = res.get("model") or str(res.get("judge", "?")).split("|")[1]
        tasks = [res["task"]] + (["dialogue"] if res["task"] in DIALOGUE else [])
        for task in tasks:
            k = (model, task, res["aspect"], run_kind(res))
            if k in out:
                print(f"warning: {k} has several runs; using the newest {f.parent}", file=sys.stderr)
            out[k] = (f, res)
    return out


def split_metrics(entry: Mapping[str, Any], split: str) -> Mapping[str, Any] | None:
    """An instruction's metrics on the leaky or the held-out evaluation set (older results.json
    without both: `metrics` is the leaky set when the run leaked, the held-out set otherwise)."""
    key = f"metrics_{split}"
    if key in entry:
        return entry[key]
    return entry["metrics"] if (split == "leaky") == bool(entry.get("_leak")) else None


def spearman(res: Mapping[str, Any], method: str, key: str, split: str) -> float:
    if method in POINTWISE:
        v = res["metrics"][POINTWISE[method]].get("spearman" if key == "spearman_pairs" else "spearman_whole")
        return math.nan if v is None else float(v)
    which, variant, _ = METHODS[method]
    entry = dict(res[which], _leak=res.get("leak_search_docs"))
    m = split_metrics(entry, split)
    v = None if m is None else m[variant].get(key)
    return math.nan if v is None else float(v)


def _bounds(v: Any) -> list[float] | None:
    ok = isinstance(v, Sequence) and len(v) == 2 and all(isinstance(x, int | float) for x in v)
    return [float(v[0]), float(v[1])] if ok else None


def spearman_interval(res: Mapping[str, Any], method: str, key: str, split: str) -> list[float] | None:
    """The [lo, hi] beside `spearman(...)` (a ZEPO evaluation's intervals_<split>), None without one."""
    if method in POINTWISE:
        group = (res.get("intervals") or {}).get(POINTWISE[method]) or {}
        return _bounds(group.get("spearman" if key == "spearman_pairs" else "spearman_whole"))
    which, variant, _ = METHODS[method]
    return _bounds((((res.get(which) or {}).get(f"intervals_{split}") or {}).get(variant) or {}).get(key))


def heldout_gain(res: Mapping[str, Any], method: str, key: str) -> Mapping[str, Any] | None:
    """A ZEPO row's paired held-out gain best - initial of `key` (results.json "gains"), else None."""
    if method in POINTWISE or METHODS[method][0] != "best":
        return None
    got = (((res.get("gains") or {}).get("heldout") or {}).get(METHODS[method][1]) or {}).get(key)
    return got if isinstance(got, Mapping) else None


def distinguishable(gain: Mapping[str, Any] | None) -> bool:
    """The gain's interval excludes 0, by the harness's one rule (harness.metrics.interval.verdict)."""
    iv = _bounds((gain or {}).get("interval"))
    return iv is not None and excludes_zero(
        Interval((iv[0], iv[1]), int((gain or {}).get("n_documents") or 0))
    )


def cell(runs: Mapping, model: str, task: str, aspect: str, method: str) -> tuple[Path, dict] | None:
    kind = "pointwise" if method in POINTWISE else METHODS[method][2]
    return runs.get((model, task, aspect, kind))


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    s = f"{x:.{digits}f}"
    return s.replace("0.", ".", 1) if abs(x) < 1 and digits == 2 else s


def _avg(xs: Sequence[float]) -> tuple[float, str]:
    got = [x for x in xs if not math.isnan(x)]
    return (sum(got) / len(got) if got else math.nan), ("*" if got and len(got) < len(xs) else "")


def spearman_table(
    table: int, runs: Mapping, cols: Sequence[tuple[str, str]], methods: Sequence[str], key: str
) -> tuple[list[str], list[dict[str, Any]]]:
    """Markdown lines and long-format rows for a Spearman table (1, 2 or 3): "leaky / held-out (paper)"."""
    models = sorted(
        {k[0] for k in runs if (k[1], k[2]) in cols} | {m for (t_, m, _) in PAPER if t_ == table},
        key=lambda m: (m not in SHORT, m),
    )
    # The cells' documents in the header too, not only in the caption.
    header = (
        "| model | method: leaky / held-out (paper) | "
        + " | ".join(f"{t[:4].title() if t != 'dialogue' else ''} {ABBR[a]}".strip() for t, a in cols)
        + (" | Avg |" if table != 3 else " |")
    )
    lines = [header, "|" + "---|" * (len(cols) + 2 + (table != 3))]
    rows: list[dict[str, Any]] = []
    for model in models:
        for method in methods:
            paper = PAPER.get((table, model, method), [None] * len(cols))
            ours: dict[str, list[float]] = {s: [] for s in SPLITS}
            shown: list[tuple[dict[str, list[float] | None], bool]] = []
            for (task, aspect), p in zip(cols, paper):
                hit = cell(runs, model, task, aspect, method)
                vals = {s: spearman(hit[1], method, key, s) if hit else math.nan for s in SPLITS}
                ivs = {s: spearman_interval(hit[1], method, key, s) if hit else None for s in SPLITS}
                gain = heldout_gain(hit[1], method, key) if hit else None
                giv = _bounds((gain or {}).get("interval"))
                for s in SPLITS:
                    ours[s].append(vals[s])
                shown.append((ivs, distinguishable(gain)))
                rows.append(
                    {
                        "table": table,
                        "model": model,
                        "method": method,
                        "task": task,
                        "aspect": aspect,
                        "ours_leaky": vals["leaky"],
                        "ours_heldout": vals["heldout"],
                        "paper": p,
                        **{
                            f"ours_{s}_{end}": (ivs[s] or (None, None))[i]
                            for s in SPLITS
                            for i, end in enumerate(("lo", "hi"))
                        },
                        "gain_heldout": None if gain is None else gain.get("diff"),
                        "gain_heldout_lo": giv[0] if giv else None,
                        "gain_heldout_hi": giv[1] if giv else None,
                        "gain_heldout_sentence": None if gain is None else gain.get("sentence"),
                        "run": str(hit[0].parent) if hit else "",
                    }
                )
            if all(math.isnan(v) for v in ours["leaky"]) and (table, model, method) not in PAPER:
                continue
            cells = [
                _pair(lk, ho, method, iv_l=ivs["leaky"], iv_h=ivs["heldout"], mark_h="†" if dist else "")
                + f" ({_fmt(p)})"
                for lk, ho, p, (ivs, dist) in zip(ours["leaky"], ours["heldout"], paper, shown)
            ]
            if table != 3:
                (lk, mark_l), (ho, mark_h) = _avg(ours["leaky"]), _avg(ours["heldout"])
                cells.append(
                    _pair(lk, ho, method, mark_l, mark_h)
                    + f" ({_fmt(PAPER_AVG.get((table, model, method)))})"
                )
            lines.append(f"| {SHORT.get(model, model)} | {method} | " + " | ".join(cells) + " |")
    return lines, rows


def _iv(iv: Sequence[float] | None, digits: int = 2) -> str:
    return f" [{_fmt(iv[0], digits)}, {_fmt(iv[1], digits)}]" if iv else ""


def _pair(
    leaky: float,
    heldout: float,
    method: str,
    mark_l: str = "",
    mark_h: str = "",
    iv_l: Sequence[float] | None = None,
    iv_h: Sequence[float] | None = None,
) -> str:
    if method in POINTWISE:  # no search: nothing to hold out
        return f"{_fmt(leaky)}{_iv(iv_l)}{mark_l}"
    return f"{_fmt(leaky)}{_iv(iv_l)}{mark_l} / {_fmt(heldout)}{_iv(iv_h)}{mark_h}"


def fairness_table(runs: Mapping) -> tuple[list[str], list[dict[str, Any]]]:
    lines = [
        "| model | aspect | task | initial (search) | ZEPO (search) | initial (eval leaky / held-out) "
        "| ZEPO (eval leaky / held-out) | paper initial | paper ZEPO |",
        "|" + "---|" * 9,
    ]
    rows = []
    models = sorted(
        {k[0] for k in runs if (k[1], k[2]) in T5_CELLS and k[3] == "none"}, key=lambda m: (m not in SHORT, m)
    )
    for model in models or ["(no runs)"]:
        for task, aspect in T5_CELLS:
            hit = runs.get((model, task, aspect, "none"))
            res = hit[1] if hit else None
            vals = {
                k: math.nan
                for k in (
                    "initial_search",
                    "best_search",
                    "initial_leaky",
                    "best_leaky",
                    "initial_heldout",
                    "best_heldout",
                )
            }
            ivs: dict[str, list[float] | None] = {
                f"{w}_{s}": None for w in ("initial", "best") for s in SPLITS
            }
            if res:
                for w in ("initial", "best"):
                    vals[f"{w}_search"] = _num(res[w]["search"]["objectives"]["fairness"])
                    for split in SPLITS:
                        m = split_metrics(dict(res[w], _leak=res.get("leak_search_docs")), split)
                        vals[f"{w}_{split}"] = _num(m["none"]["fairness"]) if m else math.nan
                        ivs[f"{w}_{split}"] = _bounds(
                            ((res[w].get(f"intervals_{split}") or {}).get("none") or {}).get("fairness")
                        )
            bounds = {
                f"{k}_{end}": (iv or (None, None))[i]
                for k, iv in ivs.items()
                for i, end in enumerate(("lo", "hi"))
            }
            p0, p1 = PAPER_T5[aspect]
            ev = [
                f"{_fmt(vals[f'{w}_leaky'], 3)}{_iv(ivs[f'{w}_leaky'], 3)} / "
                f"{_fmt(vals[f'{w}_heldout'], 3)}{_iv(ivs[f'{w}_heldout'], 3)}"
                for w in ("initial", "best")
            ]
            lines.append(
                f"| {SHORT.get(model, model)} | {ABBR[aspect]} | {task} | {_fmt(vals['initial_search'], 3)} "
                f"| {_fmt(vals['best_search'], 3)} | {ev[0]} | {ev[1]} | {p0} | {p1} |"
            )
            rows.append(
                {
                    "table": 5,
                    "model": model,
                    "task": task,
                    "aspect": aspect,
                    **vals,
                    **bounds,
                    "paper_initial": p0,
                    "paper_best": p1,
                    "run": str(hit[0].parent) if hit else "",
                }
            )
    return lines, rows


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def build(
    table: int, found: Sequence[tuple[Path, dict[str, Any]]], ranking: str = "pairs"
) -> tuple[str, list[dict]]:
    key = "spearman_pairs" if ranking == "pairs" else "spearman"
    runs = index_runs(found)
    split = "cells: leaky / held-out (paper)"
    if table == 1:
        lines, rows = spearman_table(1, runs, T1_COLS, ["Pairwise", "ZEPO", *POINTWISE], key)
        title = f"Table 1: Spearman, NewsRoom and SummEval — {split}"
    elif table == 2:
        lines, rows = spearman_table(2, runs, T2_COLS, list(METHODS), key)
        title = f"Table 2: NewsRoom, raw and permutation-debiased (ZEPO+Debias searched debiased) — {split}"
    elif table == 3:
        lines, rows = spearman_table(3, runs, T3_COLS, ["Pairwise", "ZEPO"], key)
        files = sorted({res["task"] for _, res in found if res["task"] in DIALOGUE})
        title = (
            f"Table 3: dialogue — {split}; dialogue file: {', '.join(files) or 'none'} "
            "(usr_zepo = the official ZEPO repo's topicalchat_usr.json, the paper's file)"
        )
    elif table == 5:
        lines, rows = fairness_table(runs)
        title = "Table 5: fairness (-|A-rate - 0.5|) before and after ZEPO — ours and the paper's"
    else:
        raise SystemExit(f"error: unknown table {table}; use 1, 2, 3 or 5")
    how = "PairS merge sort (paper)" if ranking == "pairs" else "win rate"
    n_zepo = sum(1 for _, r in found if r.get("experiment") == "zepo")
    note = (
        f"Spearman: {how}; {n_zepo} ZEPO and {len(found) - n_zepo} pointwise runs read. Leaky = evaluated on "
        "all documents, the search documents included (the paper's protocol); held-out = without them. "
        "Scoring/G-Eval search nothing: one value, per-document Spearman. [lo, hi]: the run's interval over "
        "documents (results.json intervals_leaky / intervals_heldout, their method and documents in "
        "interval_basis_leaky / _heldout), where it has one; "
        "† after a ZEPO held-out value: its paired held-out gain over the initial instruction (same run, same "
        "documents) is distinguishable from 0; no †: it is not, or the run has no interval. Avg: a plain mean "
        "over the cells, without an interval."
    )
    return "\n".join([f"### {title}", "", *lines, "", note]), rows


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    buf = io.StringIO()
    if rows:  # every cell through csv_cell: no text starts a spreadsheet formula
        w = csv.writer(buf)
        w.writerow([csv_cell(k) for k in rows[0]])
        w.writerows([csv_cell("" if r.get(k) is None else r.get(k)) for k in rows[0]] for r in rows)
    write_text_atomic(path, buf.getvalue())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="harness-paper-tables",
        description="ZEPO runs in the ZEPO paper's table layouts, ours beside the paper's numbers.",
    )
    ap.add_argument(
        "dirs", nargs="+", help="multirun/run directories (searched recursively) or results.json files"
    )
    ap.add_argument("--table", type=int, required=True, choices=(1, 2, 3, 5))
    ap.add_argument(
        "--out", default=None, help="output prefix (default: paper_table<N> in the current directory)"
    )
    ap.add_argument("--ranking", default="pairs", choices=("pairs", "winrate"))
    args = ap.parse_args(argv)
    out = Path(args.out or f"paper_table{args.table}")
    try:
        for suffix in (".md", ".csv"):
            writable_file(out.with_suffix(suffix), "--out")
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    found = find_results(args.dirs)
    if not found:
        print(f"error: no ZEPO or pointwise results.json under {', '.join(args.dirs)}", file=sys.stderr)
        return 2
    md, rows = build(args.table, found, args.ranking)
    write_text_atomic(out.with_suffix(".md"), md + "\n")
    write_csv(out.with_suffix(".csv"), rows)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
