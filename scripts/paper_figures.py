"""python scripts/paper_figures.py multirun/sensitivity/<time> [more dirs] [--out figures/fig2_boxes.png]

The ZEPO paper's Figure 2 box plot across judge models: every sensitivity run found under the given
directories (results.json with "experiment": "sensitivity", beside its sensitivity.jsonl) gives one
box, the Spearman with humans of each of its paraphrased instructions (the run's ranking: PairS by
default). Runs of different tasks or aspects get separate boxes, labelled "model task/aspect".
Writes the PNG and <out>.json (the values per box) and prints one line per box.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.zepo.plots import plot_spearman_boxes


def find_runs(dirs: Iterable[str | Path]) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for d in dirs:
        for f in sorted(Path(d).rglob("results.json")):
            try:
                res = json.loads(f.read_text())
            except (OSError, json.JSONDecodeError) as e:
                print(f"warning: {f}: skipped ({e})", file=sys.stderr)
                continue
            if (
                isinstance(res, dict)
                and res.get("experiment") == "sensitivity"
                and (f.parent / "sensitivity.jsonl").is_file()
            ):
                found.append((f.parent, res))
    return found


def boxes(found: Sequence[tuple[Path, dict[str, Any]]]) -> dict[str, list[float]]:
    """Box label -> the Spearman of every instruction of that run (newest run per label wins)."""
    out: dict[str, list[float]] = {}
    for run, res in sorted(found, key=lambda x: (x[0] / "results.json").stat().st_mtime):
        model = res.get("model") or str(res.get("judge", "?")).split("|")[1]
        tasks = {f"{r['task']}/{r['aspect']}" for _, r in found}
        label = model if len(tasks) == 1 else f"{model} {res['task']}/{res['aspect']}"
        rows = [
            json.loads(line) for line in (run / "sensitivity.jsonl").read_text().splitlines() if line.strip()
        ]
        out[label] = [r["none"][res["ranking"]] for r in rows]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="sensitivity run or multirun directories (searched recursively)")
    ap.add_argument("--out", default="fig2_boxes.png", help="output PNG (a .json with the values beside it)")
    args = ap.parse_args(argv)
    found = find_runs(args.dirs)
    if not found:
        print(f"error: no sensitivity results.json under {', '.join(args.dirs)}", file=sys.stderr)
        return 2
    groups = boxes(found)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tasks = sorted({f"{r['task']}/{r['aspect']}" for _, r in found})
    plot_spearman_boxes(groups, out, title=f"Spearman across paraphrased instructions ({', '.join(tasks)})")
    out.with_suffix(".json").write_text(json.dumps(groups, indent=1) + "\n")
    for label, values in groups.items():
        print(f"{label}: {len(values)} instructions, Spearman {min(values):.3f}..{max(values):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
