"""python scripts/paper_tables.py --table 1 multirun/paper_table1/<time> [more dirs] [--out tables/table1]

Gather ZEPO run directories (every results.json with "experiment": "zepo" found under the given
directories) into the ZEPO paper's table layouts, our numbers beside the paper's:
  Table 1: Spearman, Pairwise (initial instruction) and ZEPO (best), NewsRoom COH REL INF FLU,
           SummEval COH FLU CON REL, per judge model, with the average;
  Table 2: NewsRoom, Pairwise/ZEPO, raw and after permutation debiasing;
  Table 3: dialogue NAT ENG OVE (the dialogue file used is named in the caption);
  Table 5: fairness of the initial vs the ZEPO instruction (search set and evaluation set).
Writes <out>.md and <out>.csv (long format) and prints the markdown. Cells read "ours (paper)".
Spearman is the per-document PairS merge-sort ranking averaged over shuffles (the paper's) unless
--ranking winrate. When several runs cover one cell, the newest results.json wins (a warning says so).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

MISTRAL, LLAMA = "Mistral-7B-Instruct-v0.1", "Meta-Llama-3-8B-Instruct"
SHORT = {MISTRAL: "Mistral-7B", LLAMA: "Llama-3-8B"}
ABBR = {"coherence": "COH", "relevance": "REL", "informativeness": "INF", "fluency": "FLU",
        "consistency": "CON", "naturalness": "NAT", "engagingness": "ENG", "overall": "OVE"}

T1_COLS = [("newsroom", a) for a in ("coherence", "relevance", "informativeness", "fluency")] + \
          [("summeval", a) for a in ("coherence", "fluency", "consistency", "relevance")]
T2_COLS = T1_COLS[:4]
T3_COLS = [("dialogue", a) for a in ("naturalness", "engagingness", "overall")]
T5_CELLS = [("summeval", "coherence"), ("summeval", "fluency"), ("summeval", "consistency"),
            ("summeval", "relevance"), ("newsroom", "informativeness")]

# The paper's numbers (shared/reference/zepo.md). None = not reported.
PAPER: dict[tuple[int, str, str], list[float | None]] = {
    (1, MISTRAL, "Pairwise"): [.33, .40, .19, .19, .06, .01, .07, .16],
    (1, MISTRAL, "ZEPO"): [.47, .38, .44, .48, .29, .13, .32, .30],
    (1, LLAMA, "Pairwise"): [.49, .51, .46, .45, .24, .12, .30, .21],
    (1, LLAMA, "ZEPO"): [.57, .54, .55, .56, .40, .25, .30, .39],
    (2, LLAMA, "Pairwise"): [.49, .51, .46, .45],
    (2, LLAMA, "ZEPO"): [.57, .54, .55, .56],
    (2, LLAMA, "Pairwise+Debias"): [.60, .61, .64, .58],
    (2, LLAMA, "ZEPO+Debias"): [.64, .61, .72, .57],
    (3, MISTRAL, "Pairwise"): [.13, .18, .22],
    (3, MISTRAL, "ZEPO"): [.14, .25, .28],
    (3, LLAMA, "Pairwise"): [None, None, .14],
    (3, LLAMA, "ZEPO"): [.16, .26, .46],
}
PAPER_AVG = {(1, MISTRAL, "Pairwise"): .18, (1, MISTRAL, "ZEPO"): .35, (1, LLAMA, "Pairwise"): .35,
             (1, LLAMA, "ZEPO"): .45, (2, LLAMA, "Pairwise"): .48, (2, LLAMA, "ZEPO"): .56,
             (2, LLAMA, "Pairwise+Debias"): .61, (2, LLAMA, "ZEPO+Debias"): .64}
PAPER_T5 = {"coherence": (-0.288, -0.007), "fluency": (-0.417, -0.018), "consistency": (-0.295, -0.012),
            "relevance": (-0.3625, -0.0003), "informativeness": (-0.217, -0.001)}

# method -> (which instruction, which debiasing variant of metrics.summarize)
METHODS = {"Pairwise": ("initial", "none"), "ZEPO": ("best", "none"),
           "Pairwise+Debias": ("initial", "permutation"), "ZEPO+Debias": ("best", "permutation")}
DIALOGUE = ("usr_zepo", "topicalchat")


def find_results(dirs: Iterable[str | Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Every ZEPO results.json under the given directories (or the files themselves)."""
    found = []
    for d in dirs:
        d = Path(d)
        files = [d] if d.is_file() else sorted(d.rglob("results.json"))
        for f in files:
            try:
                res = json.loads(f.read_text())
            except (OSError, json.JSONDecodeError) as e:
                print(f"warning: {f}: skipped ({e})", file=sys.stderr)
                continue
            if isinstance(res, dict) and res.get("experiment") == "zepo":
                found.append((f, res))
    return found


def index_runs(found: Sequence[tuple[Path, dict[str, Any]]]) -> dict[tuple[str, str, str], tuple[Path, dict]]:
    """(model, task, aspect) -> the newest run; dialogue tasks also answer to task 'dialogue'."""
    out: dict[tuple[str, str, str], tuple[Path, dict]] = {}
    for f, res in sorted(found, key=lambda x: x[0].stat().st_mtime):
        model = res.get("model") or str(res.get("judge", "?")).split("|")[1]
        keys = [(model, res["task"], res["aspect"])]
        if res["task"] in DIALOGUE:
            keys.append((model, "dialogue", res["aspect"]))
        for k in keys:
            if k in out:
                print(f"warning: {k} has several runs; using the newest {f.parent}", file=sys.stderr)
            out[k] = (f, res)
    return out


def spearman(res: Mapping[str, Any], method: str, key: str) -> float:
    which, variant = METHODS[method]
    v = res[which]["metrics"][variant].get(key)
    return math.nan if v is None else float(v)


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    s = f"{x:.{digits}f}"
    return s.replace("0.", ".", 1) if abs(x) < 1 and digits == 2 else s


def spearman_table(table: int, runs: Mapping, cols: Sequence[tuple[str, str]], methods: Sequence[str],
                   key: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Markdown lines and long-format rows for a Spearman table (1, 2 or 3)."""
    models = sorted({m for (m, t, a) in runs if (t, a) in cols} | {m for (t_, m, _) in PAPER if t_ == table},
                    key=lambda m: (m not in SHORT, m))
    header = "| model | method | " + " | ".join(f"{t[:4].title() if t != 'dialogue' else ''} {ABBR[a]}".strip()
                                               for t, a in cols) + (" | Avg |" if table != 3 else " |")
    lines = [header, "|" + "---|" * (len(cols) + 2 + (table != 3))]
    rows: list[dict[str, Any]] = []
    for model in models:
        for method in methods:
            paper = PAPER.get((table, model, method), [None] * len(cols))
            ours = []
            for (task, aspect), p in zip(cols, paper):
                hit = runs.get((model, task, aspect))
                v = spearman(hit[1], method, key) if hit else math.nan
                ours.append(v)
                rows.append({"table": table, "model": model, "method": method, "task": task, "aspect": aspect,
                             "ours": v, "paper": p, "run": str(hit[0].parent) if hit else ""})
            if all(math.isnan(v) for v in ours) and (table, model, method) not in PAPER:
                continue
            cells = [f"{_fmt(o)} ({_fmt(p)})" for o, p in zip(ours, paper)]
            if table != 3:
                got = [o for o in ours if not math.isnan(o)]
                avg = sum(got) / len(got) if got else math.nan
                mark = "*" if got and len(got) < len(ours) else ""
                cells.append(f"{_fmt(avg)}{mark} ({_fmt(PAPER_AVG.get((table, model, method)))})")
            lines.append(f"| {SHORT.get(model, model)} | {method} | " + " | ".join(cells) + " |")
    return lines, rows


def fairness_table(runs: Mapping) -> tuple[list[str], list[dict[str, Any]]]:
    lines = ["| model | aspect | task | initial (search) | ZEPO (search) | initial (eval) | ZEPO (eval) "
             "| paper initial | paper ZEPO |", "|" + "---|" * 9]
    rows = []
    models = sorted({m for (m, t, a) in runs if (t, a) in T5_CELLS}, key=lambda m: (m not in SHORT, m))
    for model in models or ["(no runs)"]:
        for task, aspect in T5_CELLS:
            hit = runs.get((model, task, aspect))
            res = hit[1] if hit else None
            vals = [math.nan] * 4
            if res:
                vals = [res[w]["search"]["objectives"]["fairness"] for w in ("initial", "best")]
                vals += [res[w]["metrics"]["none"]["fairness"] for w in ("initial", "best")]
                vals = [math.nan if v is None else float(v) for v in vals]
            p0, p1 = PAPER_T5[aspect]
            lines.append(f"| {SHORT.get(model, model)} | {ABBR[aspect]} | {task} | "
                         + " | ".join(_fmt(v, 3) for v in vals) + f" | {p0} | {p1} |")
            rows.append({"table": 5, "model": model, "task": task, "aspect": aspect,
                         "initial_search": vals[0], "best_search": vals[1], "initial_eval": vals[2],
                         "best_eval": vals[3], "paper_initial": p0, "paper_best": p1,
                         "run": str(hit[0].parent) if hit else ""})
    return lines, rows


def build(table: int, found: Sequence[tuple[Path, dict[str, Any]]], ranking: str = "pairs") -> tuple[str, list[dict]]:
    key = "spearman_pairs" if ranking == "pairs" else "spearman"
    runs = index_runs(found)
    if table == 1:
        lines, rows = spearman_table(1, runs, T1_COLS, ["Pairwise", "ZEPO"], key)
        title = "Table 1: Spearman, NewsRoom and SummEval — ours (paper)"
    elif table == 2:
        lines, rows = spearman_table(2, runs, T2_COLS, list(METHODS), key)
        title = "Table 2: NewsRoom, raw and permutation-debiased — ours (paper)"
    elif table == 3:
        lines, rows = spearman_table(3, runs, T3_COLS, ["Pairwise", "ZEPO"], key)
        files = sorted({res["task"] for _, res in found if res["task"] in DIALOGUE})
        title = (f"Table 3: dialogue — ours (paper); dialogue file: {', '.join(files) or 'none'} "
                 "(usr_zepo = the official ZEPO repo's topicalchat_usr.json, the paper's file)")
    elif table == 5:
        lines, rows = fairness_table(runs)
        title = "Table 5: fairness (-|A-rate - 0.5|) before and after ZEPO — ours and the paper's"
    else:
        raise SystemExit(f"error: unknown table {table}; use 1, 2, 3 or 5")
    how = "PairS merge sort (paper)" if ranking == "pairs" else "win rate"
    note = f"Spearman: {how}; {len(found)} ZEPO runs read."
    return "\n".join([f"### {title}", "", *lines, "", note]), rows


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(buf.getvalue())
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="multirun/run directories (searched recursively) or results.json files")
    ap.add_argument("--table", type=int, required=True, choices=(1, 2, 3, 5))
    ap.add_argument("--out", default=None, help="output prefix (default: paper_table<N> in the current directory)")
    ap.add_argument("--ranking", default="pairs", choices=("pairs", "winrate"))
    args = ap.parse_args(argv)
    found = find_results(args.dirs)
    if not found:
        print(f"error: no ZEPO results.json under {', '.join(args.dirs)}", file=sys.stderr)
        return 2
    md, rows = build(args.table, found, args.ranking)
    out = Path(args.out or f"paper_table{args.table}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(md + "\n")
    write_csv(out.with_suffix(".csv"), rows)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
