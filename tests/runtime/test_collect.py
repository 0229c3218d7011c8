"""harness.runtime.collect: multirun directory -> table (markdown, CSV), pivot, figures; the CLI.

The run directories here are written the way a Hydra multirun writes them (results.json,
config.json, overrides.json); test_slurm.py collects real SLURM and local multiruns.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.errors import ConfigError, DataError
from harness.metrics.interval import METHOD, TOO_FEW, Interval
from harness.runtime.collect import (
    build_table,
    collect,
    collect_runs,
    find_runs,
    main,
    parse_overrides,
    pivot_table,
)
from harness.runtime.table import to_csv, to_markdown

REPO = Path(__file__).resolve().parents[2]


def _job(root: Path, num: int, overrides: list[str], spearman: float, a_rate: float = 0.5) -> Path:
    d = root / str(num)
    d.mkdir(parents=True)
    if num == 2:  # Hydra's own record (hydra.output_subdir set) is read too
        (d / ".hydra").mkdir()
        (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    else:
        (d / "overrides.json").write_text(json.dumps(overrides))
    metrics = {
        "none": {"spearman": spearman, "a_rate": a_rate, "ece": None if num == 1 else 0.1},
        "permutation": {"spearman": spearman + 0.1, "a_rate": 0.5},
    }
    (d / "results.json").write_text(
        json.dumps({"task": "summeval", "p_content_free": 0.25, "metrics": metrics})
    )
    (d / "config.json").write_text(json.dumps({"task": {"name": "summeval"}}))
    return d


@pytest.fixture
def sweep(tmp_path) -> Path:
    root = tmp_path / "multirun"
    k = 0
    for model in ("m1", "m2"):
        for aspect in ("coherence", "fluency"):
            _job(
                root,
                k,
                ["experiment=judge", f"model={model}", f"task.aspect={aspect}", "task.docs=4"],
                0.1 * (k + 1),
            )
            k += 1
    for extra in range(4, 11):  # job 10 must sort after 9, not after 1
        _job(root, extra, ["experiment=judge", "model=m3", f"task.aspect=a{extra}", "task.docs=4"], 0.0)
    (root / ".submitit" / "7_0").mkdir(parents=True)  # never mistaken for a run
    return root


def test_runs_are_found_in_job_number_order(sweep):
    assert [p.name for p in find_runs(sweep)] == [str(i) for i in range(11)]
    assert parse_overrides(["+x=1", "++y.z=a=b", "~gone", "k=v"]) == {"x": "1", "y.z": "a=b", "k": "v"}


def test_table_rows_are_varying_overrides_and_columns_metrics(sweep):
    runs = collect_runs(sweep)[:4]
    t = build_table(runs, ["none/spearman", "permutation/spearman", "p_content_free", "none/missing"])
    assert t.columns == [
        "model",
        "task.aspect",
        "none/spearman",
        "permutation/spearman",
        "p_content_free",
        "none/missing",
    ]
    assert t.rows[1][:3] == ["m1", "fluency", 0.2] and t.rows[1][4:] == [0.25, None]
    assert t.caption == "experiment=judge task.docs=4"
    md = to_markdown(t, digits=2)
    assert "| m2 | fluency | 0.40 | 0.50 | 0.25 | – |" in md and md.rstrip().endswith("task.docs=4")
    csv_lines = to_csv(t).splitlines()
    assert csv_lines[0] == "model,task.aspect,none/spearman,permutation/spearman,p_content_free,none/missing"
    assert csv_lines[3] == f"m2,coherence,{0.30000000000000004!r},{0.30000000000000004 + 0.1!r},0.25,"


def test_pivot_lays_out_one_metric(sweep):
    runs = collect_runs(sweep)[:4]
    t = pivot_table(runs, "task.aspect", "model", "none/spearman")
    assert t.columns == ["task.aspect \\ model", "m1", "m2"]
    assert t.rows == [["coherence", 0.1, 0.30000000000000004], ["fluency", 0.2, 0.4]]
    with pytest.raises(ConfigError, match="also differ in model"):
        pivot_table(runs, "task.aspect", "task.docs", "none/spearman")


def test_collect_writes_table_csv_and_figures(sweep, tmp_path):
    t = collect(sweep, tmp_path / "out", metrics=["none/spearman", "none/ece"])
    assert (tmp_path / "out" / "table.md").read_text() == to_markdown(t)
    assert (tmp_path / "out" / "table.csv").read_text() == to_csv(t)
    assert t.rows[1][-1] is None  # the harness writes a NaN metric as null (a literal NaN is refused)
    pngs = sorted(p.name for p in (tmp_path / "out" / "figures").iterdir())
    assert pngs == ["none_ece.png", "none_spearman.png"]
    assert (tmp_path / "out" / "figures" / "none_spearman.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Without --metrics: the default columns that exist.
    assert collect(sweep).columns[-4:] == ["none/spearman", "permutation/spearman", "none/a_rate", "none/ece"]


def test_errors_name_the_problem(sweep, tmp_path):
    with pytest.raises(ConfigError, match="metric 'none/nope' is in no run"):
        collect(sweep, metrics=["none/nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no results.json"):
        collect(tmp_path / "empty")
    with pytest.raises(ConfigError, match="not a directory"):
        collect(tmp_path / "absent")
    with pytest.raises(ConfigError, match="exactly one"):
        collect(sweep, pivot=["task.aspect", "model"], metrics=["none/spearman", "none/a_rate"])
    bad = tmp_path / "bad" / "0"
    bad.mkdir(parents=True)
    (bad / "results.json").write_text("{oops")
    with pytest.raises(DataError, match=r"results.json: not valid JSON.*line 1"):
        collect(tmp_path / "bad")


def test_cli_prints_markdown_and_exits_2_on_user_error(sweep, tmp_path, capsys):
    assert (
        main(
            ["table", str(sweep), "--metrics", "none/spearman", "--no-figures", "--out", str(tmp_path / "o")]
        )
        == 0
    )
    assert "| model | task.aspect | none/spearman |" in capsys.readouterr().out
    assert not (tmp_path / "o" / "figures").exists()
    assert (
        main(["merge", str(sweep / "0"), "--out", str(tmp_path / "m")]) == 2
    )  # not a shard run with judgments
    assert "error:" in capsys.readouterr().err
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.runtime.collect",
            "table",
            str(sweep),
            "--pivot",
            "task.aspect",
            "model",
            "--metrics",
            "none/a_rate",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and "| task.aspect \\ model |" in r.stdout, r.stderr


def test_zepo_runs_read_initial_and_best(tmp_path):
    """A ZEPO sweep: results.json nests its evaluations under initial/ and best/ (written as
    harness.experiments.zepo writes them); default columns and explicit paths both reach them."""
    for num, (pop, before, after) in enumerate([("3", 0.9, 0.6), ("5", 0.8, 0.5)]):
        d = tmp_path / str(num)
        d.mkdir()
        (d / "overrides.json").write_text(json.dumps(["experiment=zepo", f"experiment.population={pop}"]))
        part = {
            label: {
                "instruction": f"{label} text",
                "metrics": {"none": {"a_rate": v, "spearman": v / 2}, "permutation": {"spearman": v / 3}},
            }
            for label, v in (("initial", before), ("best", after))
        }
        (d / "results.json").write_text(json.dumps({"experiment": "zepo", "improved": True, **part}))
    runs = collect_runs(tmp_path)
    table = build_table(runs, ["best/permutation/spearman", "initial/none/a_rate"])
    assert table.rows == [["3", 0.6 / 3, 0.9], ["5", 0.5 / 3, 0.8]]
    table = collect(tmp_path, tmp_path / "out", figures=False)
    assert table.columns == [
        "experiment.population",
        "initial/none/a_rate",
        "best/none/a_rate",
        "initial/none/spearman",
        "best/none/spearman",
    ]
    assert table.rows[1] == ["5", 0.8, 0.5, 0.4, 0.25]
    assert "| best/none/a_rate |" in (tmp_path / "out" / "table.md").read_text()


def _zepo_job(root: Path, num: int, leak: bool) -> None:
    d = root / str(num)
    d.mkdir(parents=True)
    (d / "overrides.json").write_text(
        json.dumps(
            [
                "experiment=zepo",
                f"experiment.leak_search_docs={leak}",
                "task.aspect=coherence",
                "task.docs=" + "4" * 60,
            ]
        )
    )
    part = {}
    for label, v in (("initial", 0.4), ("best", 0.6)):
        leaky, held = {"none": {"spearman": v, "a_rate": 0.5}}, {"none": {"spearman": v - 0.3, "a_rate": 0.5}}
        part[label] = {"metrics": leaky if leak else held, "metrics_leaky": leaky, "metrics_heldout": held}
    (d / "results.json").write_text(json.dumps({"experiment": "zepo", "leak_search_docs": leak, **part}))


@pytest.mark.parametrize("leak", [True, False])
def test_zepo_columns_say_leaky_or_held_out(tmp_path, leak):
    """Issue 31: `initial/none/spearman` of a paper-table run (leak_search_docs=true) is the leaky
    evaluation; its header now says so, and the held-out numbers get their own column. With
    leak=false the column is the held-out set (labelled so) and no duplicate is added."""
    _zepo_job(tmp_path, 0, leak)
    table = collect(tmp_path, figures=False)
    view = "leaky" if leak else "held-out"
    assert (
        f"initial/none/spearman ({view})" in table.columns and f"best/none/a_rate ({view})" in table.columns
    )
    assert ("initial/heldout/none/spearman" in table.columns) is leak
    row = dict(zip(table.columns, table.rows[0]))
    assert row[f"initial/none/spearman ({view})"] == pytest.approx(0.4 if leak else 0.1)
    if leak:
        assert row["initial/heldout/none/spearman"] == pytest.approx(0.1)


def test_cli_without_out_writes_beside_the_sweep_and_says_so(sweep, capsys):
    """Issue 31: the README's `harness-collect table multirun/judge/<stamp>` wrote no files."""
    assert main(["table", str(sweep), "--metrics", "none/spearman"]) == 0
    out = capsys.readouterr()
    assert (sweep / "collect" / "table.md").read_text().splitlines()[0] in out.out
    assert f"wrote {sweep / 'collect' / 'table.md'}, table.csv and figures/ (no --out given" in out.err
    assert (sweep / "collect" / "figures" / "none_spearman.png").is_file()
    assert find_runs(sweep)[0] == sweep / "0"  # the collect/ folder holds no run


def test_chart_titles_are_wrapped_not_clipped(tmp_path):
    """Issue 31: chart titles were the caption cut at 90 characters on a figure narrower than that.
    The title (read back from the PNG's Title chunk) is now the column header and the WHOLE caption,
    in lines that fit the figure (negative control: the old title lacked the caption's end)."""
    from PIL import Image

    from harness.runtime.table import TITLE_POINTS

    _zepo_job(tmp_path, 0, True)
    _zepo_job(tmp_path, 1, False)
    table = collect(tmp_path, tmp_path / "out", metrics=["initial/none/spearman"])
    assert table.caption.endswith("task.docs=" + "4" * 60) and len(table.caption) > 90
    assert table.columns[-1] == "initial/none/spearman (leaky or held-out by run: leak_search_docs)"
    png = Image.open(tmp_path / "out" / "figures" / "initial_none_spearman.png")
    title = png.text["Title"]
    assert "".join(title.split()) == "".join(f"{table.columns[-1]}: {table.caption}".split())  # all of it
    assert title.count("\n") >= 2  # wrapped
    assert not table.caption[:90].endswith("4" * 60)  # what the old title showed
    per_line = int(max(4.0, 0.6 * 2 + 2) * 72 / (0.6 * TITLE_POINTS))
    assert all(len(line) <= per_line for line in title.split("\n"))


def test_cells_show_the_runs_intervals(tmp_path):
    """Issue 31: a cell whose metric has an interval in results.json prints `value [lo, hi]` (a ZEPO
    part's held-out one too), the CSV gets `lo`/`hi` columns, the caption says what they are; a run
    without intervals (metrics.bootstrap=0) keeps the bare value."""
    root = tmp_path / "multirun"
    meta = {"method": METHOD, "n_documents": 12, "level": 0.95}
    for k, with_iv in enumerate((True, False)):
        d = _job(root, k, ["experiment=zepo", f"model=m{k}"], 0.25)
        res = json.loads((d / "results.json").read_text())
        held = {"none": {"spearman": 0.5}}
        res["initial"] = {
            "metrics": held,
            "metrics_heldout": held,
            "metrics_leaky": {"none": {"spearman": 0.7}},
        }
        if with_iv:
            res |= {
                "interval": meta,
                "intervals": {"none": {"spearman": [0.05, 0.4]}, "permutation": {"spearman": None}},
            }
            res["initial"] |= {
                "intervals_heldout": {"none": {"spearman": [0.1, 0.9]}},
                "intervals": {"none": {"spearman": [0.1, 0.9]}},
            }
        (d / "results.json").write_text(json.dumps(res))
    runs = collect_runs(root)
    t = build_table(
        runs,
        [
            "none/spearman",
            "permutation/spearman",
            "initial/heldout/none/spearman",
            "initial/none/spearman",
            "initial/leaky/none/spearman",
        ],
    )
    md = to_markdown(t, digits=2)
    assert "| m0 | 0.25 [0.05, 0.40] | 0.35 | 0.50 [0.10, 0.90] | 0.50 [0.10, 0.90] | 0.70 |" in md
    assert "| m1 | 0.25 | 0.35 | 0.50 | 0.50 | 0.70 |" in md  # no intervals: the bare values
    assert md.rstrip().endswith(
        "intervals: none/spearman, initial/heldout/none/spearman, initial/none/spearman "
        "(held-out): 12 documents, 95% t-jackknife; no interval recorded (1 of 2); "
        "permutation/spearman, initial/leaky/none/spearman: no interval recorded"
    )
    lines = to_csv(t).splitlines()
    assert lines[0].startswith(
        "model,none/spearman,none/spearman lo,none/spearman hi,none/spearman documents,"
        "none/spearman note,permutation/spearman,"
    )
    assert lines[1].startswith("m0,0.25,0.05,0.4,12,,") and lines[2].startswith("m1,0.25,,,,,")
    p = pivot_table(runs, "model", "experiment", "none/spearman")
    assert "| m0 | 0.250 [0.050, 0.400] |" in to_markdown(p) and "| m1 | 0.250 |" in to_markdown(p)
    # Without any interval the table is as before: no caption note, no extra CSV columns.
    plain = build_table(collect_runs(root)[1:], ["none/spearman"])
    assert plain.intervals is None and "lo" not in to_csv(plain)


def test_a_results_json_that_is_not_an_object_is_one_line(sweep, tmp_path, capsys):
    """`collect.py table` on a run dir whose results.json is `[]`: an AttributeError traceback. Now
    one line naming the file, exit 2 (the shipped command's main). Control: the sweep as written."""
    root = tmp_path / "sweep"
    shutil.copytree(sweep, root)
    (root / "1" / "results.json").write_text("[]")
    assert main(["table", str(root), "--no-figures", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{root / '1' / 'results.json'}: holds an array, not a JSON object" in err
    assert main(["table", str(sweep), "--no-figures", "--out", str(tmp_path / "o")]) == 0
    # harness-report reads it as collect does: refused in one line, the run alone or in its sweep.
    from harness.runtime.report_cli import main as report

    capsys.readouterr()
    for where in (root / "1", root):
        assert report([str(where)]) == 2
        err = capsys.readouterr().err
        assert (
            err.count("\n") == 1
            and f"{root / '1' / 'results.json'}: holds an array, not a JSON object" in err
        )
    assert not (root / "1" / "report.html").exists()
    assert report([str(sweep)]) == 0 and (sweep / "1" / "report.html").is_file()  # control


def test_figures_draw_the_intervals_their_captions_promise(tmp_path):
    """A column whose cells have intervals is drawn with them as error bars (each bar's [lo, hi] the
    cell's); the same values without intervals draw no error bar (the negative control: what the
    figures drew before, under a caption that promised intervals)."""
    from PIL import Image

    from harness.runtime.table import Table, error_bars, plot_table

    rows = [["a", 0.2], ["b", 0.5], ["c", math.nan]]
    with_iv = Table(
        ["run", "none/spearman"],
        rows,
        f"[lo, hi]: 95% {METHOD}",
        [[None, Interval((0.1, 0.4), 12)], [None, Interval((0.45, 0.9), 12)], [None, None]],
    )
    bars = error_bars(with_iv, 1, [0.2, 0.5, math.nan])
    assert bars == [
        [pytest.approx(0.1), pytest.approx(0.05), 0.0],
        [pytest.approx(0.2), pytest.approx(0.4), 0.0],
    ]
    assert error_bars(Table(["run", "none/spearman"], rows, ""), 1, [0.2, 0.5, math.nan]) is None

    def dark(table: Table, name: str) -> int:
        png = plot_table(table, ["none/spearman"], tmp_path / name, 1)[0]
        img = np.asarray(Image.open(png).convert("L"))
        return int((img < 60).sum())

    drawn, bare = dark(with_iv, "with"), dark(Table(["run", "none/spearman"], rows, with_iv.caption), "bare")
    assert drawn > bare + 100, (drawn, bare)


@pytest.fixture(scope="module")
def few_documents(tmp_path_factory, tiny_llama):
    """Real tiny judge runs: one on 6 documents (ECE needs 8) and two shards of 2 documents each."""
    from helpers.cli import run_in_process

    tmp = tmp_path_factory.mktemp("few")
    args = [
        "experiment=judge",
        "model=tiny_llama",
        "task.docs=6",
        "experiment.shuffles=5",
        "metrics.bootstrap=50",
        "wandb.mode=disabled",
    ]
    runs = {"six": [f"hydra.run.dir={tmp / 'six'}"]}
    runs |= {
        f"two/{k}": ["task.num_shards=3", f"task.shard_index={k}", f"hydra.run.dir={tmp / 'two' / str(k)}"]
        for k in (0, 1)
    }
    for extra in runs.values():
        r = run_in_process([*args, *extra], tmp)
        assert r.returncode == 0, r.stderr[-3000:]
    return tmp


def test_a_cell_without_an_interval_says_why_and_its_figure_promises_none(few_documents, tmp_path):
    """On 6 documents the ECE cell printed a bare 0.481 and none_ece.png's title promised "[lo, hi]:
    95% t ... 6 documents per run" over a bar with no error bar; on two 2-document runs every cell
    was bare and the caption gave no count. Now a cell without an interval gives its run's note, the
    caption says per column what the intervals are (or that there are too few documents), so does
    each figure's title, and the CSV carries documents and note (fails with collect.py/table.py
    reverted: the bare cells and the old caption)."""
    from PIL import Image

    from harness.runtime.table import error_bars

    six = few_documents / "six"
    results = json.loads((six / "results.json").read_text())
    table = collect(six, tmp_path / "six", metrics=["none/spearman", "none/ece"])
    md = (tmp_path / "six" / "table.md").read_text()
    ece, spearman = results["metrics"]["none"]["ece"], results["metrics"]["none"]["spearman"]
    lo, hi = results["intervals"]["none"]["spearman"]
    assert f"| . | {spearman:.3f} [{lo:.3f}, {hi:.3f}] | {ece:.3f} ({TOO_FEW}) |" in md
    assert md.rstrip().endswith(
        f"intervals: none/spearman: 6 documents, 95% t-jackknife; none/ece: 6 documents: {TOO_FEW}"
    )
    csv_rows = (tmp_path / "six" / "table.csv").read_text().splitlines()
    assert csv_rows[0].endswith(",none/ece,none/ece lo,none/ece hi,none/ece documents,none/ece note")
    assert csv_rows[1].endswith(f",{ece!r},,,6,{TOO_FEW}")
    titles = {
        c: Image.open(tmp_path / "six" / "figures" / f"none_{c}.png").text["Title"].replace("\n", " ")
        for c in ("spearman", "ece")
    }
    assert titles["spearman"].endswith("intervals: 6 documents, 95% t-jackknife")
    assert titles["ece"].endswith(f"intervals: 6 documents: {TOO_FEW}") and "t-jackknife" not in titles["ece"]
    assert (
        error_bars(table, 1, [spearman]) is not None and error_bars(table, 2, [ece]) is None
    )  # no bar promised
    two = collect(
        few_documents / "two",
        tmp_path / "two",
        metrics=["none/spearman", "none/a_rate", "none/ece"],
        figures=False,
    )
    assert all(
        str(cell).endswith(f"({TOO_FEW}) ")
        for line in (tmp_path / "two" / "table.md").read_text().splitlines()[2:4]
        for cell in line.split("|")[2:-1]
    )
    assert two.caption.endswith(f"; intervals: 2 documents: {TOO_FEW}")
